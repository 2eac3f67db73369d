#!/usr/bin/python3
"""async_op=True over the ds4tp backend: what a start-then-wait costs
against a synchronous call, and what overlapping compute with the
previous all_reduce buys. N=2 ranks on this host, the default plan (shm).

    bench/torch/overlap.py                      # writes bench/results and bench/README.md
    bench/torch/overlap.py --baseline SITE      # also the same ranks with SITE first on
                                                # PYTHONPATH (a build to compare with)
    bench/torch/overlap.py --quick --out DIR    # seconds, nothing in the tree

Per-call: all_reduce of float32 at 16 KiB and 1 MiB, `dist.all_reduce(t)`
against `dist.all_reduce(t, async_op=True).wait()`, blocks interleaved.
Layers: LAYERS steps of a (512 x 2) @ (2 x 512) matmul whose 1 MiB
output is all-reduced; serial waits for each
all_reduce before the next layer's compute, overlapped starts it async and
waits for it after the next layer's compute. Rank 0's p50 and p99.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import ROOT, cpu_model, host_name, pct, us  # noqa: E402

LAYERS = 8
BEGIN, END = "<!-- torch-overlap:begin -->", "<!-- torch-overlap:end -->"


def rank_main(path, cfg):
    import torch
    import torch.distributed as dist
    import ds4tp.torch  # noqa: F401 - registers the backend

    torch.set_num_threads(1)
    dist.init_process_group("ds4tp")
    n = dist.get_world_size()
    samples = {}

    def timed(key, fn, calls):
        for i in range(2 + calls):
            t0 = time.perf_counter()
            fn()
            if i >= 2:
                samples.setdefault(key, []).append(time.perf_counter() - t0)

    ys = {k: torch.ones(b // 4) for k, b in (("16 KiB", 16 << 10), ("1 MiB", 1 << 20))}
    a = torch.randn(512, 2)
    w = torch.randn(2, 512)  # a @ w: 1 MiB of float32 out
    outs = [torch.empty(512, 512) for _ in range(LAYERS)]

    def compute(i):
        torch.mm(a, w, out=outs[i])

    def serial():
        for i in range(LAYERS):
            compute(i)
            dist.all_reduce(outs[i])

    def overlapped():
        pending = None
        for i in range(LAYERS):
            compute(i)  # runs while the previous layer's all_reduce does
            if pending is not None:
                pending.wait()
            pending = dist.all_reduce(outs[i], async_op=True)
        pending.wait()

    def compute_only():
        for i in range(LAYERS):
            compute(i)

    for _ in range(cfg["rounds"]):
        for size, y in ys.items():
            calls = cfg["calls"] if size == "16 KiB" else max(2, cfg["calls"] // 5)
            timed(f"sync|{size}", lambda: dist.all_reduce(y), calls)
            timed(f"async|{size}", lambda: dist.all_reduce(y, async_op=True).wait(), calls)
        steps = max(2, cfg["calls"] // 20)
        timed("layers|serial", serial, steps)
        timed("layers|overlapped", overlapped, steps)
        timed("layers|compute", compute_only, steps)
    x = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(x, async_op=True).wait()
    assert bool((x == n * (n + 1) / 2).all()), "async all_reduce gave a wrong sum"
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump({"samples": samples, "plan": dist.group.WORLD.plan(),
                       "load": os.getloadavg(), "torch": torch.__version__}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(cfg, out, site=None):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", out, json.dumps(cfg)],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                       OMP_NUM_THREADS="1", PYTHONPATH=path))
             for r in range(2)]
    for p in procs:
        p.wait(timeout=cfg["timeout"])
    if any(p.returncode for p in procs):
        raise SystemExit(f"bench/torch/overlap.py: ranks exited with {[p.returncode for p in procs]}")
    with open(out) as f:
        return json.load(f)


def report(res, base, cmd):
    smp = res["samples"]
    cell = lambda d, k: f"{us(pct(d[k], 0.5))} / {us(pct(d[k], 0.99))}"  # noqa: E731
    lines = [f"`{cmd}` on {host_name()} ({cpu_model()}, {os.cpu_count()} CPUs, torch "
             f"{res['torch']}, nice {os.nice(0)}); load average at the end {res['load'][0]:.2f}; "
             f"N=2, {res['plan']}. Rank 0, p50 / p99 in us.", "",
             "| all_reduce, float32 | sync `all_reduce(t)` | async `all_reduce(t, async_op=True).wait()` "
             "| async / sync p50 |" + (" baseline build, sync |" if base else ""),
             "|---|---|---|---|" + ("---|" if base else "")]
    for size in ("16 KiB", "1 MiB"):
        s, a = pct(smp[f"sync|{size}"], 0.5), pct(smp[f"async|{size}"], 0.5)
        row = f"| {size} | {cell(smp, f'sync|{size}')} | {cell(smp, f'async|{size}')} | {a / s:.2f}x |"
        if base:
            row += f" {cell(base['samples'], f'sync|{size}')} |"
        lines.append(row)
    ser, ovl = pct(smp["layers|serial"], 0.5), pct(smp["layers|overlapped"], 0.5)
    comp = pct(smp["layers|compute"], 0.5)
    lines += ["", f"| {LAYERS} layers: (512x2) @ (2x512), then all_reduce of its 1 MiB output "
              "| per step |",
              "|---|---|",
              f"| compute alone | {cell(smp, 'layers|compute')} |",
              f"| serial (sync all_reduce after each layer) | {cell(smp, 'layers|serial')} |",
              f"| overlapped (async, waited after the next layer's compute) | "
              f"{cell(smp, 'layers|overlapped')} |", "",
              f"Overlapped / serial p50: {ovl / ser:.2f}x; the all_reduces add "
              f"{us(ser - comp)} us to a step serially, {us(ovl - comp)} us overlapped."]
    if base:
        lines.append(f"\nThe baseline build (`--baseline`): {base['plan']}; load at its end "
                     f"{base['load'][0]:.2f}.")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        return rank_main(sys.argv[2], json.loads(sys.argv[3]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--calls", type=int, default=100, help="timed calls per 16 KiB block")
    p.add_argument("--baseline", help="a site dir with another build of ds4tp.torch to time beside")
    p.add_argument("--quick", action="store_true", help="2 rounds of 20 calls, no files in the tree")
    p.add_argument("--out", help="write the table here instead of bench/results and bench/README.md")
    a = p.parse_args()
    cfg = {"rounds": 2 if a.quick else a.rounds, "calls": 20 if a.quick else a.calls, "timeout": 600}
    with tempfile.TemporaryDirectory() as tmp:
        res = run_ranks(cfg, os.path.join(tmp, "new.json"))
        base = run_ranks(cfg, os.path.join(tmp, "base.json"), a.baseline) if a.baseline else None
    cmd = ("bench/torch/overlap.py " + " ".join(sys.argv[1:])).strip()
    if a.baseline:
        cmd = cmd.replace(a.baseline, "SITE")
    text = report(res, base, cmd)
    print(text)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "torch-overlap.md").write_text(text)
    elif not a.quick:
        day, host = time.strftime("%Y-%m-%d"), host_name()
        path = ROOT / "bench" / "results" / f"torch-overlap-{day}-{host}.md"
        head = "" if path.exists() else f"# bench/torch/overlap.py: {day} on {host}\n"
        with open(path, "a") as f:
            f.write(f"{head}\n## {time.strftime('%H:%M')}\n\n{text}")
        readme = ROOT / "bench" / "README.md"
        doc = readme.read_text()
        pre, rest = doc.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        rel = os.path.relpath(path, readme.parent)
        readme.write_text(f"{pre}{BEGIN}\n\nThe latest run (file [{rel}]({rel})), generated by "
                          f"bench/torch/overlap.py:\n\n{text}\n{END}{post}")
        print(f"wrote {path} and bench/README.md")


if __name__ == "__main__":
    main()
