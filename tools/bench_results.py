#!/usr/bin/python3
"""Writes a tensortier-bench run into docs/RESULTS.md: the text between the lines
    <!-- tensortier-bench NAME: begin -->  and  <!-- tensortier-bench NAME: end -->
is replaced by the run's command, machine, dates, tables and plots (the PNGs are copied into
docs/img/bench-NAME/). Nothing in that section is edited by hand: run it again instead.

Usage: tools/bench_results.py RESULTS.json OUT_DIR_OF_THE_RUN NAME [--doc docs/RESULTS.md]
"""
import argparse
import json
import os
import shutil
import sys
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from tt_outputs import save_figure, write_output  # noqa: E402 (beside this script; outputs by the project's rule)



def machine_text(m):
    nodes = ", ".join(
        f"node {n['node']}: {n['capacity_bytes'] / (1 << 30):.1f} GiB"
        + (", CPU-less" if n.get("cpu_less") else f", CPUs {n.get('cpus')}")
        + (f", HMAT {n['hmat_bandwidth_mibps']:.0f} MiB/s" if n.get("hmat_bandwidth_mibps") else "")
        + (f" {n['hmat_latency_ns']:.0f} ns" if n.get("hmat_latency_ns") else "")
        for n in m.get("numa_nodes", []))
    t = m.get("tiering", {})
    return (f"{m.get('cpu')}, {m.get('cpus_online')} cores ({m.get('threads_used')} used by oneDNN); "
            f"NUMA: {nodes}; {m.get('kernel')}; numa_balancing {t.get('numa_balancing')}, demotion "
            f"{t.get('demotion_enabled')}, THP {t.get('transparent_hugepage')}; oneDNN {m.get('onednn')}; "
            f"tensortier {m.get('tensortier')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("run_dir")
    ap.add_argument("name")
    ap.add_argument("--doc", default="docs/RESULTS.md")
    a = ap.parse_args()
    try:
        r = json.load(open(a.results))
        tables = r["tables"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"bench_results.py: {a.results}: not a finished tensortier-bench run ({e})")
    begin, end = f"<!-- tensortier-bench {a.name}: begin -->", f"<!-- tensortier-bench {a.name}: end -->"
    doc = open(a.doc).read()
    if begin not in doc or end not in doc:
        sys.exit(f"bench_results.py: {a.doc} has no '{begin}' ... '{end}' section: add the two lines where it goes")
    img_rel = f"img/bench-{a.name}"
    img_dir = os.path.join(os.path.dirname(a.doc), img_rel)
    os.makedirs(img_dir, exist_ok=True)
    plots = []
    for png, what in [("slowdown.png", "step time over fast-only per policy and fast budget"),
                      ("moved.png", "MiB moved per step"),
                      ("occupancy.png", "the fast tier over one step, planned against held"),
                      ("timeline.png", "one step in time: layers, waits, charges, moves")]:
        src = os.path.join(a.run_dir, png)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(img_dir, png))
            plots.append(f"![{what}]({img_rel}/{png})")
    c = r["config"]
    section = "\n".join([
        begin,
        "",
        "Written by `tools/bench_results.py` from a tensortier-bench run; not edited by hand.",
        "",
        "```sh",
        f"build/release/{r['command'].replace('tensortier-bench', 'bench/tensortier-bench', 1)}",
        f"tools/bench_results.py {a.results} {a.run_dir} {a.name}",
        "```",
        "",
        f"- Run: {r.get('started')} to {r.get('finished')}; batch {c['batch']}, 3x{c['image_size']}x{c['image_size']}, "
        f"width {c['width']}; each task the median of {c['steps']} steps after {c['warmup']}, "
        f"{c['reps']} repetition(s).",
        f"- Machine: {machine_text(r['machine'])}.",
        "",
        tables.rstrip(),
        "",
        *[p + "\n" for p in plots],
        end,
    ])
    doc = doc[:doc.index(begin)] + section + doc[doc.index(end) + len(end):]
    write_output(a.doc, doc, "the results page")
    print(f"bench_results.py: {a.doc}: section '{a.name}' written ({len(plots)} plots in {img_dir})")


if __name__ == "__main__":
    main()
