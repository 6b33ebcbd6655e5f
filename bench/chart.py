"""The study's chart: slowdown per tool, one dot per workload (the median
over rounds) and a bar at the median over workloads, on a log scale.

    bench/.venv/bin/python bench/chart.py IN.json OUT.png

IN.json: {"tools": [names in order], "medians": {tool: {workload: x}},
"capped": [tools whose figures are lower bounds], "title": str}. Run with
bench/.venv's python (bench/study.py installs matplotlib there).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    data = json.load(open(src))
    tools = [t for t in data["tools"] if data["medians"].get(t)]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(tools) + 1.6), dpi=110)
    for y, tool in enumerate(tools):
        values = sorted(data["medians"][tool].values())
        med = values[len(values) // 2] if len(values) % 2 else \
            (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
        colour = "#d9480f" if tool.startswith("pyrometer") else "#4c6ef5"
        ax.barh(y, med, color=colour, alpha=0.35, height=0.6)
        ax.scatter(values, [y] * len(values), color=colour, s=14, zorder=3)
        label = (">= " if tool in data.get("capped", []) else "") + f"{med:.2f}x"
        ax.text(max(values) * 1.08, y, label, va="center", fontsize=8)
    ax.set_yticks(range(len(tools)))
    ax.set_yticklabels(tools)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("slowdown vs bare (log scale): dots = workloads, bar = median")
    ax.set_title(data.get("title", ""), fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
