#!/usr/bin/env python3
"""The target figures of one or more ds4tp_bench runs as a Markdown table,
one row per run, so the tables in bench/README.md and bench/results/ are
generated from runs instead of typed in.

    bench/summary.py RUN_DIR [RUN_DIR ...] > summary.md
    bench/summary.py RUN_DIR --out-dir bench/results [--host NAME]

Each RUN_DIR holds a run's table.txt and results.csv. Every figure is the
library's default policy (spin_us -1) over the faster raw variant of the
same run, as the bench's own "Targets" block computes it.

The table always goes to stdout. With --out-dir the rows also go into
DIR/<YYYY-MM-DD>-<host>.md (the date of the run's results.csv; the host
from --host, else `uname -n`), under a header naming the date, the host,
its CPU and its kernel. A row whose run is already in that file replaces
it; other rows are kept, so several runs of a day collect in one file.
"""
import argparse
import csv
import datetime
import os
import platform
import re
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


def header_lines():
    titles = [f"{t} ({'>=' if hi else '<='} {lim:.2f}x)" for t, _, _, _, _, _, lim, hi in FIGURES]
    return ["| run | ranks | " + " | ".join(titles) + " |",
            "|---|---|" + "---|" * len(FIGURES)]


def row_line(label, rows, placement):
    cells = [cell(figure(rows, s, t, b, op, fld), lim, hi)
             for _, s, t, b, op, fld, lim, hi in FIGURES]
    return f"| {label} | {placement} | " + " | ".join(cells) + " |"


def run_time(run):
    """When the run ended: its results.csv's modification time, in UTC."""
    st = os.stat(os.path.join(run, "results.csv"))
    return datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model", "Processor"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def host_slug(name):
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "host"


def write_results(out_dir, host, labelled):
    """Merges the rows into out_dir/<date>-<host>.md, one file per date."""
    os.makedirs(out_dir, exist_ok=True)
    by_date = {}
    for label, when, line in labelled:
        by_date.setdefault(when.strftime("%Y-%m-%d"), []).append((label, line))
    cpus = os.cpu_count() or 0
    header = header_lines()
    written = []
    for date, new in sorted(by_date.items()):
        path = os.path.join(out_dir, f"{date}-{host_slug(host)}.md")
        kept = []
        if os.path.exists(path):
            with open(path) as f:
                old = f.read().splitlines()
            if header[0] in old:  # same columns: keep the other runs' rows
                start = old.index(header[0]) + 2
                kept = [l for l in old[start:] if l.startswith("| ")]
        labels = {label for label, _ in new}
        kept = [l for l in kept if l.split(" | ")[0][2:] not in labels]
        with open(path, "w") as f:
            f.write(f"# Bench results: {date}, {host}\n\n")
            f.write(f"Host {host}: {cpu_model()}, {cpus} CPUs online; "
                    f"{platform.system()} {platform.release()}. "
                    "Written by bench/summary.py (method and targets: bench/README.md).\n\n")
            f.write("\n".join(header + kept + [line for _, line in new]) + "\n")
        written.append(path)
    return written


def main(argv):
    ap = argparse.ArgumentParser(
        description="The target figures of ds4tp_bench runs as a Markdown table (stdout).")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="a run's output directory (table.txt, results.csv)")
    ap.add_argument("--out-dir", metavar="DIR",
                    help="also write the rows into DIR/<YYYY-MM-DD>-<host>.md")
    ap.add_argument("--host", default=None,
                    help="the host's name in the file name and header (default: uname -n)")
    args = ap.parse_args(argv)

    lines = header_lines()
    labelled = []
    for run in args.runs:
        rows, placement = load(run)
        name = os.path.basename(os.path.normpath(run))
        lines.append(row_line(name, rows, placement))
        when = run_time(run)
        # In a results file several runs share a directory name (bench-out):
        # the run's time tells them apart.
        labelled.append((f"{name} {when.strftime('%H:%M')}", when,
                         row_line(f"{name} {when.strftime('%H:%M')}", rows, placement)))
    print("\n".join(lines))
    if args.out_dir:
        host = args.host or platform.node() or "host"
        for path in write_results(args.out_dir, host, labelled):
            print(f"summary.py: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
