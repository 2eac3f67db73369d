#!/usr/bin/python3
"""Tensor-parallel decoding through torch.distributed, over Gloo and over
the ds4tp backend, in the same processes.

    examples/python/torch_tp.py --nproc 4             # starts 4 ranks here
    python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 \\
        examples/python/torch_tp.py                   # or under torchrun

A small decoder (torch_tp_model.py: random weights from a seed, split
column- and row-parallel as Megatron-LM and vLLM split linear layers)
decodes greedily, once with every collective on a Gloo group and once on
the ds4tp group. Rank 0 also runs the whole model in one process with the
partials summed in rank order in float32, the order ds4tp documents
(docs/GROUPS.md), and checks:

* ds4tp's logits equal that reference bit for bit, at every step;
* Gloo's logits equal ds4tp's bit for bit with 2 ranks, where any order
  of a two-term sum is the same; with more ranks Gloo sums in its own
  ring order, so its logits may differ in the last bits, and the example
  says how many did rather than claiming identity;

then prints tokens/s for both. Exit status 0 when the checks hold.
Needs the package with the backend: DS4TP_TORCH=1 python3 -m pip install
--no-build-isolation bindings/python (bindings/python/README.md).
"""

import argparse
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_tp_model import Config, Shard, forward, make_weights, rank_order_sum  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="ranks to start here (without torchrun)")
    p.add_argument("--tokens", type=int, default=64, help="tokens to decode per backend")
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens (from the seed)")
    p.add_argument("--layers", type=int, default=Config.layers)
    p.add_argument("--d-model", type=int, default=Config.d_model)
    p.add_argument("--heads", type=int, default=Config.heads)
    p.add_argument("--ffn", type=int, default=Config.ffn)
    p.add_argument("--vocab", type=int, default=Config.vocab)
    p.add_argument("--transport", default=None, help="ds4tp transport (default: auto)")
    return p.parse_args()


def decode(shards, prompt, tokens, reduce, gather):
    """Greedy decode: the logits of every step (prompt included) and the tokens."""
    for s in shards:
        s.reset()
    out, seq = [], list(prompt)
    for pos in range(len(prompt) + tokens - 1):
        logits = forward(shards, seq[pos], pos, reduce, gather)
        out.append(logits)
        if pos + 1 >= len(seq):
            seq.append(int(logits.argmax()))
    return torch.stack(out), seq


def collectives(group):
    def reduce(parts):
        dist.all_reduce(parts[0], group=group)
        return parts[0]

    def gather(parts):
        outs = [torch.empty_like(parts[0]) for _ in range(group.size())]
        dist.all_gather(outs, parts[0], group=group)
        return torch.cat(outs)
    return reduce, gather


def timed(shard, prompt, tokens, group):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    logits, seq = decode([shard], prompt, tokens, *collectives(group))
    dist.barrier(group=group)
    return logits, seq, time.perf_counter() - t0


def differing(a, b):
    return int((a.view(torch.int32) != b.view(torch.int32)).sum())


def rank_main(args):
    import ds4tp.torch
    torch.set_num_threads(1)  # same kernels, same bits in every process
    opts = ds4tp.torch.Options(transport=args.transport)
    dist.init_process_group("ds4tp", timeout=timedelta(seconds=120), pg_options=opts)
    rank, n = dist.get_rank(), dist.get_world_size()
    ds4tp_group = dist.group.WORLD
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=120))
    cfg = Config(layers=args.layers, d_model=args.d_model, heads=args.heads, ffn=args.ffn,
                 vocab=args.vocab, max_len=args.prompt + args.tokens)
    weights = make_weights(cfg)
    prompt = torch.randint(0, cfg.vocab, (args.prompt,),
                           generator=torch.Generator().manual_seed(cfg.seed + 1)).tolist()
    shard = Shard(cfg, weights, rank, n)
    timed(shard, prompt, 4, gloo)  # warm-up of both
    timed(shard, prompt, 4, ds4tp_group)
    gl, gl_seq, gl_s = timed(shard, prompt, args.tokens, gloo)
    ds, ds_seq, ds_s = timed(shard, prompt, args.tokens, ds4tp_group)
    ok = True
    if rank == 0:
        ref, ref_seq = decode([Shard(cfg, weights, r, n) for r in range(n)], prompt, args.tokens,
                              rank_order_sum, torch.cat)
        bad = differing(ds, ref)
        print(f"{n} ranks, {cfg.layers} layers, d_model {cfg.d_model}, vocab {cfg.vocab}: "
              f"{args.tokens} tokens, {ds.numel()} logits per backend; ds4tp plan: "
              f"{ds4tp_group.plan()}")
        if bad == 0 and ds_seq == ref_seq:
            print("ds4tp logits == the rank-order float32 reference, bit for bit")
        else:
            print(f"FAIL: ds4tp differs from the rank-order reference in {bad} logits")
            ok = False
        gl_bad = differing(gl, ds)
        if gl_bad == 0 and gl_seq == ds_seq:
            print("gloo logits == ds4tp logits, bit for bit")
        elif n == 2:
            print(f"FAIL: with 2 ranks gloo and ds4tp differ in {gl_bad} logits")
            ok = False
        else:
            print(f"gloo logits differ from ds4tp's (and the reference's) in {gl_bad} of "
                  f"{gl.numel()} (max |diff| {float((gl - ds).abs().max()):.3g}; tokens "
                  f"{'the same' if gl_seq == ds_seq else 'differ'}): Gloo sums {n} ranks in its "
                  f"own ring order, not rank order")
        print(f"tokens/s: gloo {args.tokens / gl_s:.1f}, ds4tp {args.tokens / ds_s:.1f} "
              f"({gl_s / ds_s:.1f}x)")
    flag = torch.tensor([0.0 if ok else 1.0])
    dist.all_reduce(flag, group=gloo)
    dist.destroy_process_group()
    return 0 if flag.item() == 0 else 1


def launch(args):
    """Starts --nproc ranks of this script here (env:// on a free port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env))
    rcs = [p.wait() for p in procs]
    return max(abs(rc) for rc in rcs)


if __name__ == "__main__":
    a = parse()
    sys.exit(rank_main(a) if "RANK" in os.environ else launch(a))
