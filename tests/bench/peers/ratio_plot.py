"""Plots the every-d ratios of docs/benchmarks.md ("Every d and off the benchmark point"): FlashSinkhorn's best time
over flashot's, each measured in one device call, one point per (n, d) from the CSV (n,d,ratio,run; the run letters
are the table's). Usage: python3 ratio_plot.py docs/every-d-ratio.csv docs/every-d-ratio.png   (needs matplotlib)."""
import csv, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(src, out):
    series = {}
    for row in csv.DictReader(open(src)):
        series.setdefault(int(row["n"]), []).append((int(row["d"]), float(row["ratio"])))
    fig, ax = plt.subplots(figsize=(8, 4))
    for n, pts in sorted(series.items(), reverse=True):
        pts.sort()
        ax.plot([d for d, _ in pts], [r for _, r in pts], "o-" if n >= 100_000 else "s--", label=f"n = m = {n:,}")
    ax.axhline(2.0, color="gray", ls="--", lw=1, label="target 2×")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("d")
    ax.set_ylabel("FlashSinkhorn ms / flashot ms (one call)")
    ax.set_title("flashot vs FlashSinkhorn 0.4.1, one H200, 10 iterations, ε = 0.1, N(0,1)\n"
                 "(each point its latest one-call ratio: docs/benchmarks.md)", fontsize=9)
    ax.legend()
    ax.grid(alpha=.3)
    fig.tight_layout()
    fig.savefig(out + ".tmp.png", dpi=110)
    import os
    os.replace(out + ".tmp.png", out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
