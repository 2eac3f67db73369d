#!/usr/bin/env python3
"""The engine loop's table (bench/engine_loop/run.sh): per load, rank count
and collective, each implementation's median over the rounds of its
per-token sync time (p50, p10, p90, us), its CPU per rank (% of a core)
and the libds4tp wait phases per rank and token, with the ratios of the
sync p50 to the raw busy-polling TCP baseline and to Open MPI over the same
medium, then the issue's target lines.

    summary.py RAW_FILE HEADER [--wake FILE] [--out-dir DIR]

--wake FILE: ds4tp_bench_wake's table from the same run, appended.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from results_file import write  # noqa: E402

FIELDS = ["sync_p50", "sync_p10", "sync_p90", "token_p50", "cpu", "spin_us", "yield_us",
          "sleep_us", "waits"]
ORDER = ["raw-busy", "lib-shm", "lib-tcp", "lib-shm/private", "lib-tcp/private", "before-shm",
         "before-tcp", "mpi-vader", "mpi-tcp"]
MPI_OF = {"lib-shm": "mpi-vader", "lib-shm/private": "mpi-vader", "before-shm": "mpi-vader",
          "lib-tcp": "mpi-tcp", "lib-tcp/private": "mpi-tcp", "before-tcp": "mpi-tcp"}
# The targets: sync p50 / raw busy at most this, at no more CPU.
TARGET = {("quiet", "lib-shm"): 0.5, ("quiet", "lib-tcp"): 0.9,
          ("loaded", "lib-shm"): 0.3, ("loaded", "lib-tcp"): 0.3}


def parse(path):
    runs = {}
    for line in open(path):
        kv = dict(f.split("=", 1) for f in line.split())
        key = (kv["load"], int(kv["ranks"]), kv["coll"], int(kv["bytes"]), kv["impl"])
        runs.setdefault(key, []).append({f: float(kv[f]) for f in FIELDS})
    return runs


def median(rows, f):
    return statistics.median(r[f] for r in rows)


def table(runs):
    out = ["| load | ranks | collective | impl | sync p50 | p10 | p90 | token p50 | CPU/rank | "
           "/ raw | / MPI | spin/yield/sleep per rank-token (us) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    targets = []
    cases = sorted({k[:4] for k in runs}, key=lambda c: (c[0] != "quiet", c[1], c[2]))
    for load, n, coll, nbytes in cases:
        got = {k[4]: v for k, v in runs.items() if k[:4] == (load, n, coll, nbytes)}
        base = got.get("raw-busy")
        for impl in sorted(got, key=lambda i: ORDER.index(i) if i in ORDER else 99):
            rows = got[impl]
            p50 = median(rows, "sync_p50")
            ratio = f"{p50 / median(base, 'sync_p50'):.2f}" if base else "-"
            mpi = got.get(MPI_OF.get(impl, ""))
            vs_mpi = f"{p50 / median(mpi, 'sync_p50'):.2f}" if mpi else "-"
            phases = "-"
            if median(rows, "waits") > 0:
                phases = "/".join(f"{median(rows, f):.0f}" for f in ("spin_us", "yield_us",
                                                                   "sleep_us"))
            out.append(f"| {load} | {n} | {coll} {nbytes // 1024} KiB | {impl} | {p50:.0f} | "
                       f"{median(rows, 'sync_p10'):.0f} | {median(rows, 'sync_p90'):.0f} | "
                       f"{median(rows, 'token_p50'):.0f} | {median(rows, 'cpu'):.0f}% | {ratio} | "
                       f"{vs_mpi} | {phases} |")
            limit = TARGET.get((load, impl))
            if limit is not None and base:
                r = p50 / median(base, "sync_p50")
                cpu_ok = median(rows, "cpu") <= median(base, "cpu") + 1
                ok = r <= limit and cpu_ok
                targets.append(f"- {load}, {n} ranks, {coll}: {impl} / raw busy {r:.2f} "
                               f"(target <= {limit}), CPU {median(rows, 'cpu'):.0f}% vs "
                               f"{median(base, 'cpu'):.0f}%: {'met' if ok else 'NOT met'}")
    return "\n".join(out), "\n".join(targets)


def main():
    args = sys.argv[1:]
    opts = {}
    for flag in ("--out-dir", "--wake"):
        if flag in args:
            i = args.index(flag)
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    out_dir = opts.get("--out-dir")
    raw, header = args[0], args[1]
    runs = parse(raw)
    if not runs:
        sys.exit("summary.py: no runs")
    tab, targets = table(runs)
    text = (f"{header}\n\nPer-token sync time in us (the mean rank's time inside collectives "
            f"per token; token p50: the slowest rank's whole token), CPU per rank in % of a "
            f"core over the measured tokens\n\n{tab}\n\nTargets:\n\n{targets}\n")
    if "--wake" in opts:
        text += "\nWake-up of a blocked rank (ds4tp_bench_wake, quiet host):\n\n```\n"
        text += open(opts["--wake"]).read() + "```\n"
    print(text)
    if out_dir:
        write(out_dir, "engine-loop", "bench/engine_loop/run.sh", text)


if __name__ == "__main__":
    main()
