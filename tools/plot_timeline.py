#!/usr/bin/python3
"""Draws a tensortier Chrome trace (tensortier-train --trace, bench_training --trace) as a PNG:
one lane for the training thread's layers (their waits for moves and emulated charges marked),
one for moves in and one for moves out, over the recorded steps.

Usage: tools/plot_timeline.py TRACE.json OUT.png [--title TEXT]
Needs python3-matplotlib (Debian).
"""
import argparse
import json
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from tt_outputs import save_figure, write_output  # noqa: E402 (beside this script; outputs by the project's rule)


try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:
    sys.exit("plot_timeline.py: matplotlib is missing: apt-get install python3-matplotlib")

COLOURS = {
    "layer": "#4c72b0",
    "emulated": "#dd8452",
    "wait": "#c44e52",
    "move-in": "#55a868",
    "move-out": "#8172b3",
}
LANES = [("layers", ("layer",)), ("charge / waits", ("emulated", "wait")), ("moves in", ("move-in",)),
         ("moves out", ("move-out",))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_timeline.py: cannot read a Chrome trace from {args.trace}: {e}")
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"plot_timeline.py: {args.trace} has no spans (did the traced steps run?)")
    steps = [e for e in spans if e.get("cat") == "step"]
    fig, ax = plt.subplots(figsize=(14, 3.2))
    for row, (_, cats) in enumerate(LANES):
        for cat in cats:
            bars = [(e["ts"] / 1e3, max(e["dur"] / 1e3, 0.05)) for e in spans if e.get("cat") == cat]
            if bars:
                ax.broken_barh(bars, (len(LANES) - 1 - row - 0.4, 0.8), facecolors=COLOURS[cat],
                               edgecolor="white", linewidth=0.2)
    for s in steps:
        ax.axvline(s["ts"] / 1e3, color="black", linewidth=0.6)
        ax.text(s["ts"] / 1e3, len(LANES) - 0.45, " " + s["name"], fontsize=8, va="bottom")
    ax.set_yticks(range(len(LANES)))
    ax.set_yticklabels([name for name, _ in reversed(LANES)])
    ax.set_xlabel("ms")
    ax.set_ylim(-0.6, len(LANES) + 0.1)
    total_in = sum(e["args"]["bytes"] for e in spans if e.get("cat") == "move-in")
    total_out = sum(e["args"]["bytes"] for e in spans if e.get("cat") == "move-out")
    # The trace's own label (the program and model that wrote it), never a path of this machine.
    label = next((e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"), "")
    title = args.title or label or os.path.basename(args.trace)
    ax.set_title(f"{title} — moved in {total_in / 2**20:.0f} MiB, out {total_out / 2**20:.0f} MiB", fontsize=10)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper right", fontsize=7,
              ncol=5, bbox_to_anchor=(1, -0.25))
    fig.tight_layout()
    save_figure(fig, args.out, "the timeline", dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
