#!/usr/bin/env python3
"""The issue #20 / #18 target figures of one or more ds4tp_bench runs, as a
Markdown table (one row per run), so bench/README.md's tables are
generated from runs instead of typed in.

    bench/summary.py RUN_DIR [RUN_DIR ...] > summary.md

Each RUN_DIR holds a run's table.txt and results.csv. Every figure is the
library's default policy (spin_us -1) over the faster raw variant of the
same run, as the bench's own "Targets" block computes it.
"""
import csv
import os
import sys

DEFAULT = "-1"  # spin_us of the library default (adaptive)
HEADLINE = "16384"

# (column title, section, transport, bytes or None for the largest, op, field, limit, higher is better)
FIGURES = [
    ("tcp gate p50", "row", "tcp", HEADLINE, "", "vs_raw_p50", 1.05, False),
    ("tcp gate p99", "row", "tcp", HEADLINE, "", "vs_raw_p99", 1.25, False),
    ("EVAL + logits", "control", "tcp", None, "eval+logits", "vs_raw_p50", 1.10, False),
    ("MTP + ACK", "control", "tcp", None, "mtp+ack", "vs_raw_p50", 1.10, False),
    ("all-reduce N=2", "group", "tcp", HEADLINE, "", "vs_raw_p50", 1.10, False),
    ("shm gate vs copy2", "row", "shm", HEADLINE, "", "vs_raw_p50", 1.00, False),
    ("tcp big GB/s vs raw", "big", "tcp", None, "", "tput_vs_raw", 1.00, True),
    ("shm big GB/s vs raw", "big", "shm", None, "", "tput_vs_raw", 1.00, True),
]


def load(run):
    with open(os.path.join(run, "results.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["spin_us"] == DEFAULT]
    with open(os.path.join(run, "table.txt")) as f:
        head = f.readline().strip().split(" | ")
    # "ds4tp_bench: libds4tp V", "OS", "N CPUs online", "pinned ...", "nice N", "load ..."
    placement = next((h for h in head if "pinned" in h), "?")
    return rows, "pinned" if placement.startswith("pinned") else "not pinned"


def figure(rows, section, transport, size, op, field):
    cands = [r for r in rows if r["section"] == section and r["transport"] == transport
             and (op == "" or r["op"] == op) and r[field] != ""]
    if size is None and cands:  # the largest size measured (big gates: 64 MiB by default)
        top = max(int(r["bytes"]) for r in cands)
        cands = [r for r in cands if int(r["bytes"]) == top]
    else:
        cands = [r for r in cands if r["bytes"] == size]
    return float(cands[0][field]) if cands else None


def cell(value, limit, higher):
    if value is None:
        return "-"
    met = value >= limit if higher else value <= limit
    return f"{value:.3f}x {'met' if met else '**missed**'}"


def main(runs):
    if not runs:
        sys.exit(__doc__)
    titles = [f"{t} ({'>=' if hi else '<='} {lim:.2f}x)" for t, _, _, _, _, _, lim, hi in FIGURES]
    print("| run | ranks | " + " | ".join(titles) + " |")
    print("|---|---|" + "---|" * len(FIGURES))
    for run in runs:
        rows, placement = load(run)
        cells = [cell(figure(rows, s, t, b, op, fld), lim, hi)
                 for _, s, t, b, op, fld, lim, hi in FIGURES]
        print(f"| {os.path.basename(os.path.normpath(run))} | {placement} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
