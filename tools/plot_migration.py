#!/usr/bin/python3
"""Draws the migration table's measurements (bench/migration_table.sh with JSON_OUT=FILE) as a PNG:
one panel per model and emulated preset, step time over fast-only for each policy at each fast
budget, with the floor no plan can beat.

Usage: tools/plot_migration.py MEASUREMENTS.json OUT.png
Needs python3-matplotlib (Debian).
"""
import json
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from tt_outputs import save_figure, write_output  # noqa: E402 (beside this script; outputs by the project's rule)


try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_migration.py: matplotlib is missing: apt-get install python3-matplotlib")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("JSON")]
    except (OSError, ValueError) as e:
        sys.exit(f"plot_migration.py: cannot read {sys.argv[1]}: {e}")
    cells = {}  # (model, preset) -> budget -> policy -> ms
    floors = {}
    policies = []
    for r in rows:
        if " " not in r["tiers"]:
            continue
        policy = r["tiers"].split(" ", 1)[1]
        if policy not in policies:
            policies.append(policy)
        cells.setdefault((r["model"], r["preset"]), {}).setdefault(r["budget"], {})[policy] = r["median_ms"]
        if policy not in ("fast-only", "slow-only"):
            key = (r["model"], r["preset"], r["budget"])
            floors[key] = max(floors.get(key, 0.0), r.get("floor_slow_ms", 0.0))
    if not cells:
        sys.exit(f"plot_migration.py: no measurements in {sys.argv[1]}")
    shown = [p for p in policies if p != "fast-only"]
    models = sorted({m for m, _ in cells})
    presets = sorted({p for _, p in cells})
    fig, axes = plt.subplots(len(presets), len(models), figsize=(6 * len(models), 3.4 * len(presets)),
                             squeeze=False)
    for row, preset in enumerate(presets):
        for col, model in enumerate(models):
            if (model, preset) not in cells:
                axes[row][col].axis("off")
                continue
            draw(axes[row][col], cells, floors, shown, model, preset)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle("step time over fast-only (median); black line: the floor no plan can beat; emulated slow tier",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, sys.argv[2], "the plot", dpi=100)
    print(f"wrote {sys.argv[2]}")


def draw(ax, cells, floors, shown, model, preset):
    """One panel: each policy's ratio to fast-only at each budget, and the floor."""
    budgets = sorted(cells[(model, preset)], key=lambda b: -float(b.rstrip("%")))
    width = 0.8 / len(shown)
    for k, policy in enumerate(shown):
        ys = []
        for b in budgets:
            c = cells[(model, preset)][b]
            ys.append(c.get(policy, float("nan")) / c["fast-only"])
        ax.bar([i + k * width for i in range(len(budgets))], ys, width, label=policy)
    for i, b in enumerate(budgets):
        fast = cells[(model, preset)][b]["fast-only"]
        f = max(fast, floors.get((model, preset, b), 0.0)) / fast
        ax.plot([i - width / 2, i + 0.8 - width / 2], [f, f], color="black", linewidth=1.2)
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(budgets))])
    ax.set_xticklabels([f"fast {b}" for b in budgets])
    ax.set_title(f"{model}, emulated {preset}", fontsize=10)
    ax.set_ylabel("step time / fast-only")


if __name__ == "__main__":
    main()
