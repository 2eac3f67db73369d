"""One rank of bench/torch/run.py (started by it with RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT): times torch.distributed collectives over three
groups of the same processes: Gloo, ds4tp over tcp, and ds4tp's default
plan (shm on one host). Rounds interleave the groups, each running a block
of calls per case, so a machine that gets busier or quieter shifts all of
them alike. Each call is timed alone on every rank; rank 0 writes its
samples (and the others' medians) as JSON to argv[1]. Every result is
checked once per block against the exact sum, so no figure comes from a
call that did not do its work."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ds4tp.torch

SIZES = {"16 KiB": 16 << 10, "256 KiB": 256 << 10, "4 MiB": 4 << 20}


def block_calls(nbytes, cfg):
    return cfg["calls"] if nbytes <= 256 << 10 else max(2, cfg["calls"] // 5)


def run_block(op, group, x, out, calls, warm=2):
    """`calls` timed calls after `warm` untimed ones; returns seconds per call."""
    times = []
    y = x.clone()
    for i in range(warm + calls):
        if op == "all_reduce":
            y.fill_(1.0)  # the sums stay small integers
            t0 = time.perf_counter_ns()
            dist.all_reduce(y, group=group)
            t1 = time.perf_counter_ns()
        else:
            t0 = time.perf_counter_ns()
            dist.all_gather(out, x, group=group)
            t1 = time.perf_counter_ns()
        if i >= warm:
            times.append((t1 - t0) / 1e9)
    return times


def check(op, group, x, out, n):
    """One call whose result is compared with the exact answer."""
    if op == "all_reduce":
        y = torch.full_like(x, float(dist.get_rank() + 1))
        dist.all_reduce(y, group=group)
        assert bool((y == n * (n + 1) / 2).all()), f"all_reduce over {group} gave a wrong sum"
    else:
        dist.all_gather(out, torch.full_like(x, float(dist.get_rank())), group=group)
        assert all(bool((o == i).all()) for i, o in enumerate(out)), "all_gather gave wrong parts"


def main(path, cfg):
    torch.set_num_threads(1)
    timeout = timedelta(seconds=120)
    dist.init_process_group("ds4tp", timeout=timeout)
    n, r = dist.get_world_size(), dist.get_rank()
    groups = {
        "gloo": dist.new_group(backend="gloo", timeout=timeout),
        "ds4tp tcp": dist.new_group(list(range(n)), backend="ds4tp", timeout=timeout,
                                    pg_options=ds4tp.torch.Options(transport="tcp")),
        "ds4tp default": dist.group.WORLD,
    }
    plans = {k: g.plan() for k, g in groups.items() if k != "gloo"}
    cases = [(op, size) for op in ("all_reduce", "all_gather") for size in SIZES]
    samples = {f"{op}|{size}|{g}": [] for op, size in cases for g in groups}
    bufs = {}
    for op, size in cases:
        elems = SIZES[size] // 4
        block = torch.empty(n * elems)
        bufs[(op, size)] = (torch.ones(elems), list(block.chunk(n)))
    for rnd in range(cfg["rounds"]):
        order = list(groups.items())
        order = order[rnd % len(order):] + order[:rnd % len(order)]  # rotate who goes first
        for op, size in cases:
            x, out = bufs[(op, size)]
            for name, g in order:
                if rnd == 0:
                    check(op, g, x, out, n)
                samples[f"{op}|{size}|{name}"] += run_block(op, g, x, out,
                                                            block_calls(SIZES[size], cfg))
    medians = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    everyone = [None] * n
    dist.all_gather_object(everyone, medians, group=groups["gloo"])
    if r == 0:
        with open(path, "w") as f:
            json.dump({"ranks": n, "plans": plans, "samples": samples, "rank_medians": everyone,
                       "load": os.getloadavg(), "torch": torch.__version__}, f)
    dist.barrier(group=groups["gloo"])
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
