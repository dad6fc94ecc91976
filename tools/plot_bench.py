#!/usr/bin/python3
"""Draws tensortier-bench's results as PNGs:
  slowdown.png   step time over fast-only against the fast budget, one line per policy, one panel
                 per model and tier spec (the floor no plan can beat dashed);
  moved.png      MiB moved per step (in + out) per policy and budget, same panels;
  occupancy.png  the fast tier over one step's layers under the traced policy: what the plan
                 wanted at each layer boundary against what the tier held, and the budget.
Every panel on an emulated tier says "emulated" and names its preset.

Usage: tools/plot_bench.py RESULTS.json OUT_DIR
Reads only the summary and the traced task that tensortier-bench wrote (no figures are computed
here). Needs python3-matplotlib (Debian).
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
    sys.exit("plot_bench.py: matplotlib is missing: apt-get install python3-matplotlib")


def panels(cells):
    """(model, tiers) panels in the order the cells come, each with its budgets and policies."""
    order, budgets, policies = [], {}, []
    for c in cells:
        key = (c["model"], c["tiers"])
        if key not in budgets:
            order.append(key)
            budgets[key] = []
        if c["budget"] not in budgets[key]:
            budgets[key].append(c["budget"])
        if c["policy"] not in policies:
            policies.append(c["policy"])
    return order, budgets, policies


def grid(n):
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def plot_slowdown(cells, path):
    order, budgets, policies = panels(cells)
    fig, axes = grid(len(order))
    for ax, key in zip(axes, order):
        xs = budgets[key]
        for p in policies:
            if p == "fast-only":
                continue
            ys = [next((c["ratio"] for c in cells if (c["model"], c["tiers"]) == key and c["budget"] == b
                        and c["policy"] == p), None) for b in xs]
            pts = [(i, y) for i, y in enumerate(ys) if y is not None]
            if pts:
                ax.plot([i for i, _ in pts], [y for _, y in pts], marker="o", label=p,
                        linestyle="--" if p == "slow-only" else "-")
        floors = [next((c["floor"] for c in cells if (c["model"], c["tiers"]) == key and c["budget"] == b), 1.0)
                  for b in xs]
        ax.plot(range(len(xs)), floors, color="black", linestyle=":", label="floor")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(xs)), xs)
        ax.set_xlabel("fast budget")
        ax.set_ylabel("step time / fast-only")
        ax.set_title(f"{key[0]}, {key[1]}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, "the plot", dpi=110)
    plt.close(fig)


def plot_moved(cells, path):
    order, budgets, policies = panels(cells)
    movers = [p for p in policies if p not in ("fast-only", "slow-only")]
    fig, axes = grid(len(order))
    width = 0.8 / max(1, len(movers))
    for ax, key in zip(axes, order):
        xs = budgets[key]
        for j, p in enumerate(movers):
            ys = [next((c.get("in_mib", 0) + c.get("out_mib", 0) for c in cells
                        if (c["model"], c["tiers"]) == key and c["budget"] == b and c["policy"] == p), 0) for b in xs]
            ax.bar([i + (j - (len(movers) - 1) / 2) * width for i in range(len(xs))], ys, width, label=p)
        ax.set_xticks(range(len(xs)), xs)
        ax.set_xlabel("fast budget")
        ax.set_ylabel("MiB moved per step (in + out)")
        ax.set_title(f"{key[0]}, {key[1]}", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, "the plot", dpi=110)
    plt.close(fig)


def plot_occupancy(task, path):
    occ = task["occupancy"]
    mib = 1 << 20
    planned = [(b + occ.get("small_reserve_bytes", 0)) / mib for b in occ["planned_bytes"]]
    actual = [b / mib for b in occ["actual_bytes"]]
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.step(range(len(planned)), planned, where="post", label="planned (objects + small-object reserve)")
    ax.step(range(len(actual)), actual, where="post", label="held by the fast tier at layer begin (live objects, chunks, cached ranges, moves in flight)")
    ax.axhline(occ["budget_bytes"] / mib, color="red", linestyle="--", label="fast budget")
    ax.set_xlabel("layer boundary (layer index)")
    ax.set_ylabel("MiB on the fast tier")
    ax.set_title(f"{task['model']} under {occ['policy']}, fast budget {task['budget']}, {occ['tiers']}: one step",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, "the plot", dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results_path, out = sys.argv[1:]
    try:
        with open(results_path) as f:
            results = json.load(f)
        cells = results["summary"]["cells"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_bench.py: {results_path}: not a finished tensortier-bench run ({e})")
    written = []
    if cells:
        plot_slowdown(cells, os.path.join(out, "slowdown.png"))
        plot_moved(cells, os.path.join(out, "moved.png"))
        written += ["slowdown.png", "moved.png"]
    traced = [t for t in results.get("tasks", {}).values() if "occupancy" in t]
    if traced:
        plot_occupancy(traced[0], os.path.join(out, "occupancy.png"))
        written.append("occupancy.png")
    print(f"plots in {out}: {', '.join(written) if written else 'none (no cells)'}")


if __name__ == "__main__":
    main()
