#!/usr/bin/python3
"""Plots a ds4tp_bench run: latency vs size per transport, and the latency
CDF of the 16 KiB row gate.

    /usr/bin/python3 bench/plot.py OUT_DIR

Reads OUT_DIR/results.csv and OUT_DIR/samples-16k.csv, writes
OUT_DIR/latency-vs-size.png and OUT_DIR/cdf-16k.png. Needs Debian's
python3-matplotlib (bench/run.sh installs it); no other packages.
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def style(variant):
    """Library variants solid, raw baselines dashed."""
    return "-" if variant.startswith("lib") else "--"


def palette(names):
    """One color per variant name, the same in every panel."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {n: cycle[i % len(cycle)] for i, n in enumerate(sorted(set(names)))}


def latency_vs_size(rows, path):
    transports = sorted({r["transport"] for r in rows if r["section"] == "row"})
    if not transports:
        return False
    fig, axes = plt.subplots(1, len(transports), figsize=(6.5 * len(transports), 5),
                             squeeze=False)
    color = palette(r["variant"] for r in rows)
    for ax, t in zip(axes[0], transports):
        mine = [r for r in rows if r["section"] == "row" and r["transport"] == t]
        for v in sorted({r["variant"] for r in mine}):
            pts = sorted((int(r["bytes"]), float(r["p50_us"]), float(r["p99_us"]))
                         for r in mine if r["variant"] == v and r["p50_us"])
            if not pts:
                continue
            xs = [p[0] / 1024 for p in pts]
            ax.plot(xs, [p[1] for p in pts], style(v), color=color[v], marker="o",
                    label=v + " p50")
            ax.plot(xs, [p[2] for p in pts], style(v), color=color[v], alpha=0.35, marker=".",
                    label=v + " p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("vector size each way (KiB)")
        ax.set_ylabel("gate exchange latency (us)")
        ax.set_title(f"row gate latency, {t} (p50 bold, p99 faint)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def cdf(samples, path):
    series = {}
    for r in samples:
        series.setdefault((r["transport"], r["variant"]), []).append(float(r["us"]))
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    color = palette(f"{t} {v}" for t, v in series)
    for (t, v), us in sorted(series.items()):
        us.sort()
        n = len(us)
        ax.plot(us, [(i + 1) / n for i in range(n)], style(v), color=color[f"{t} {v}"],
                label=f"{t} {v} (n={n})")
    ax.set_xscale("log")
    ax.set_xlabel("16 KiB gate exchange latency (us)")
    ax.set_ylabel("fraction of exchanges at or below")
    ax.set_title("latency CDF, 16 KiB row gate (n_embd 4096 f32)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: /usr/bin/python3 bench/plot.py OUT_DIR")
    out = sys.argv[1]
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "samples-16k.csv"), newline="") as f:
        samples = list(csv.DictReader(f))
    made = []
    if latency_vs_size(rows, os.path.join(out, "latency-vs-size.png")):
        made.append("latency-vs-size.png")
    if cdf(samples, os.path.join(out, "cdf-16k.png")):
        made.append("cdf-16k.png")
    if not made:
        sys.exit(f"plot.py: {out} holds no row gate results to plot")
    print(f"plot.py: wrote {', '.join(os.path.join(out, m) for m in made)}")


if __name__ == "__main__":
    main()
