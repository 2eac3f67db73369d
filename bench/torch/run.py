#!/usr/bin/python3
"""torch.distributed collectives, Gloo against the ds4tp backend (tcp and
the default plan, shm on one host), in the same processes:

    bench/torch/run.py                    # N = 2 and 4; writes the results and bench/README.md
    bench/torch/run.py --quick --out DIR  # a few seconds, nothing in the tree (ctest's smoke run)

For each N it starts N ranks of rank.py here, which interleave the three
groups round by round (all_reduce and all_gather of float32 at 16 KiB,
256 KiB and 4 MiB per rank). The table (p50 and p99 per call on rank 0,
each ds4tp p50 as a ratio of Gloo's) goes to bench/results/torch-<date>-
<host>.md (runs of one host and day collect there) and replaces the
section between the torch-bench markers in bench/README.md.

Needs the package with the backend (DS4TP_TORCH=1 pip install, see
bindings/python/README.md) on PYTHONPATH, or DS4TP_LIBRARY and a
PYTHONPATH naming the installed package.
"""

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BACKENDS = ["gloo", "ds4tp tcp", "ds4tp default"]
SIZES = ["16 KiB", "256 KiB", "4 MiB"]
TARGET = 0.1  # the 16 KiB all_reduce's p50 at most this fraction of Gloo's
BEGIN, END = "<!-- torch-bench:begin -->", "<!-- torch-bench:end -->"


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def us(seconds):
    return f"{seconds * 1e6:.0f}" if seconds >= 1e-4 else f"{seconds * 1e6:.1f}"


def run_ranks(n, cfg, out):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(HERE / "rank.py"), out, json.dumps(cfg)],
                                      env=env))
    deadline = time.monotonic() + cfg["timeout"]
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"bench/torch: the {n} ranks did not finish within {cfg['timeout']} s")
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise SystemExit(f"bench/torch: ranks of the N={n} run exited with {bad}")
    with open(out) as f:
        return json.load(f)


def table(runs):
    lines = ["| op | per rank | N | Gloo p50 / p99 (us) | ds4tp tcp p50 / p99 (us) | ds4tp default "
             "p50 / p99 (us) | tcp / Gloo p50 | default / Gloo p50 |",
             "|---|---|---|---|---|---|---|---|"]
    targets = []
    for op in ("all_reduce", "all_gather"):
        for size in SIZES:
            for res in runs:
                n, smp = res["ranks"], res["samples"]
                cell = {b: smp[f"{op}|{size}|{b}"] for b in BACKENDS}
                p50 = {b: pct(v, 0.5) for b, v in cell.items()}
                row = [op, size, str(n)] + [f"{us(p50[b])} / {us(pct(cell[b], 0.99))}" for b in BACKENDS]
                row += [f"{p50['ds4tp tcp'] / p50['gloo']:.3f}x",
                        f"{p50['ds4tp default'] / p50['gloo']:.3f}x"]
                lines.append("| " + " | ".join(row) + " |")
                if op == "all_reduce" and size == "16 KiB":
                    for b in ("ds4tp default", "ds4tp tcp"):
                        ratio = p50[b] / p50["gloo"]
                        targets.append(f"* 16 KiB all_reduce, N={n}, {b}: p50 {us(p50[b])} us = "
                                       f"{ratio:.3f}x Gloo's {us(p50['gloo'])} us (target <= "
                                       f"{TARGET}x: {'met' if ratio <= TARGET else '**missed**'})")
    lines.append("| reduce_scatter | | | not timed: Gloo in PyTorch 1.13 has no reduce_scatter "
                 "to compare with (the ds4tp backend maps it) | | | | |")
    return "\n".join(lines), targets


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_name():
    return os.environ.get("DS4TP_BENCH_HOST") or socket.gethostname()


def report(runs, cmd):
    body, targets = table(runs)
    load = ", ".join(f"N={r['ranks']}: {r['load'][0]:.2f}" for r in runs)
    plans = "\n".join(f"* N={r['ranks']}: {p}" for r in runs for k, p in r["plans"].items()
                      if k == "ds4tp default")
    samples = ", ".join(f"N={r['ranks']}: {len(r['samples'][f'all_reduce|16 KiB|gloo'])}" for r in runs)
    return (f"`{cmd}` on {host_name()} ({cpu_model()}, {os.cpu_count()} CPUs, Linux "
            f"{platform.release()}, torch {runs[0]['torch']}, nice {os.nice(0)}); load average "
            f"(other work on the host included) at the end: {load}; samples per 16 KiB "
            f"cell: {samples}. Per call on rank 0, float32; all_gather's size is each rank's "
            f"part.\n\n{body}\n\n" + "\n".join(targets) + f"\n\nThe default plan:\n{plans}\n")


def write_results(text, results_dir):
    host = host_name()
    day = time.strftime("%Y-%m-%d")
    path = Path(results_dir) / f"torch-{day}-{host}.md"
    head = "" if path.exists() else f"# bench/torch/run.py: {day} on {host}\n"
    with open(path, "a") as f:
        f.write(f"{head}\n## {time.strftime('%H:%M')}\n\n{text}")
    return path


def rewrite_readme(readme, text, results):
    doc = readme.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} section")
    pre, rest = doc.split(BEGIN, 1)
    _, post = rest.split(END, 1)
    rel = os.path.relpath(results, readme.parent)
    readme.write_text(f"{pre}{BEGIN}\n\nThe latest run (file [{rel}]({rel})), generated by "
                      f"bench/torch/run.py:\n\n{text}\n{END}{post}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="comma-separated N (default 2,4)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=40, help="timed calls per block (4 MiB: a fifth)")
    p.add_argument("--quick", action="store_true", help="2 rounds of 5 calls, no files in the tree")
    p.add_argument("--out", help="write the table here instead of bench/results and bench/README.md")
    a = p.parse_args()
    cfg = {"rounds": 2 if a.quick else a.rounds, "calls": 5 if a.quick else a.calls,
           "timeout": 300 if a.quick else 1800}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, a.ranks.split(",")):
            runs.append(run_ranks(n, cfg, os.path.join(tmp, f"n{n}.json")))
    cmd = "bench/torch/run.py " + " ".join(sys.argv[1:])
    text = report(runs, cmd.strip())
    print(text)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "torch-bench.md").write_text(text)
    elif not a.quick:
        path = write_results(text, ROOT / "bench" / "results")
        rewrite_readme(ROOT / "bench" / "README.md", text, path)
        print(f"wrote {path} and bench/README.md")


if __name__ == "__main__":
    main()
