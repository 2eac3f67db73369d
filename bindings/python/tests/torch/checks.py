"""The comparisons ranks.py runs on every rank: all_reduce's sum,
all_gather and broadcast over a ds4tp group against the same op over a
Gloo group of the same processes (checks_collectives.py: the other ops),
and all_reduce bit for bit against the documented order (every rank's
values summed in rank order in float32, rounded once). Gloo sums in its
own order (a ring) and float16 in float16, and has no bfloat16 at all, so
its results are compared within a tolerance, and bit for bit where the
values make every order exact (small integers)."""

import time

import torch
import torch.distributed as dist

# Element counts: one element, odd, a few KiB, past the shm home threshold
# (256 KiB), past a 1 MiB chunk (and the tcp ring's crossover).
SIZES = [1, 7, 1000, 70_000, 300_000]
REDUCED = [torch.float32, torch.float16, torch.bfloat16]
MOVED = REDUCED + [torch.int64, torch.uint8]
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """The tensor's raw bits as integers (NaNs and -0 compare exactly)."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def as_bytes(t):
    """t's bytes as a flat uint8 tensor (for Gloo, which moves no 16-bit types)."""
    return t.contiguous().view(-1).view(torch.uint8)


def same_bits(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, \
        f"{what}: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}"
    if not torch.equal(bits(a), bits(b)):
        diff = (bits(a) != bits(b)).nonzero()
        i = diff[0].tolist()
        raise AssertionError(f"{what}: {diff.shape[0]} of {a.numel()} elements differ, first at "
                             f"{i}: {a[tuple(i)].item()!r} vs {b[tuple(i)].item()!r}")


def sample(rank, count, dtype, salt):
    g = torch.Generator().manual_seed(rank * 7919 + count * 31 + salt)
    if dtype.is_floating_point:
        return torch.randn(count, generator=g).to(dtype)
    hi = 256 if dtype == torch.uint8 else 1 << 40
    return torch.randint(0, hi, (count,), generator=g, dtype=dtype)


def everyone(x, gloo):
    """Every rank's x, gathered over Gloo as bytes (Gloo has no bfloat16)."""
    raw = as_bytes(x)
    parts = [torch.empty_like(raw) for _ in range(gloo.size())]
    dist.all_gather(parts, raw, group=gloo)
    return [p.view(x.dtype).view(x.shape) for p in parts]


def rank_order_sum(parts):
    acc = parts[0].float()
    for p in parts[1:]:
        acc = acc + p.float()
    return acc.to(parts[0].dtype)


def ring_applies(group, transport, nbytes):
    """docs/GROUPS.md: tcp meshes of 3+ ranks sum calls from 1 MiB around a
    ring, not in rank order."""
    return transport == "tcp" and group.size() >= 3 and nbytes >= 1 << 20


def check_all_reduce(group, gloo, transport):
    for dtype in REDUCED:
        for count in SIZES:
            what = f"all_reduce {dtype} x {count} over {transport}"
            x = sample(group.rank(), count, dtype, 1)
            got = x.clone()
            dist.all_reduce(got, group=group)
            ref = rank_order_sum(everyone(x, gloo))
            if ring_applies(group, transport, x.numel() * x.element_size()):
                torch.testing.assert_close(got.float(), ref.float(), rtol=1e-2, atol=1e-2)
                same_bits(everyone(got, gloo)[0], got, what + ": rank 0's bits vs this rank's")
            else:
                same_bits(got, ref, what + " vs the rank-order float32 sum")
            if dtype != torch.bfloat16:  # Gloo has no bfloat16
                theirs = x.clone()
                dist.all_reduce(theirs, group=gloo)
                tol = 1e-5 if dtype == torch.float32 else 4e-3
                torch.testing.assert_close(got, theirs, rtol=tol, atol=tol, msg=lambda m: f"{what} vs Gloo: {m}")
                # Small integers: every order is exact, so Gloo's bits are ours.
                k = (x.float() * 4).round().clamp(-64, 64).to(dtype)
                a, b = k.clone(), k.clone()
                dist.all_reduce(a, group=group)
                dist.all_reduce(b, group=gloo)
                same_bits(a, b, what + " (integers) vs Gloo")
    # A strided tensor: reduced through a copy, its neighbours untouched.
    base = sample(group.rank(), 64 * 3, torch.float32, 2).view(64, 3)
    col = base[:, 1]
    keep = base.clone()
    dist.all_reduce(col, group=group)
    want = rank_order_sum(everyone(keep[:, 1].contiguous(), gloo))
    same_bits(base[:, 1].contiguous(), want, "all_reduce of a strided column")
    same_bits(base[:, 0::2], keep[:, 0::2], "the columns beside a strided all_reduce")
    empty = torch.empty(0)
    dist.all_reduce(empty, group=group)


def check_all_gather(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in MOVED:
        for count in (1, 1000, 300_000):
            what = f"all_gather {dtype} x {count} over {transport}"
            x = sample(r, count, dtype, 3)
            want = everyone(x, gloo)  # Gloo's all_gather (16-bit floats as bits)
            apart = [torch.empty_like(x) for _ in range(n)]  # separate tensors: staged
            dist.all_gather(apart, x, group=group)
            for i in range(n):
                same_bits(apart[i], want[i], f"{what}: rank {i}'s part (separate outputs)")
            block = torch.empty(n * count, dtype=dtype)  # one block: no copy
            dist.all_gather(list(block.chunk(n)), x, group=group)
            same_bits(block, torch.cat(want), what + " into views of one block")
            flat = torch.empty(n * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, x, group=group)
            same_bits(flat, torch.cat(want), what + " (all_gather_into_tensor)")
            inplace = torch.zeros(n * count, dtype=dtype)
            mine = inplace.narrow(0, r * count, count)
            mine.copy_(x)
            dist._all_gather_base(inplace, mine, group=group)
            same_bits(inplace, torch.cat(want), what + " in place (_all_gather_base)")
    x = sample(r, 12, torch.float32, 4).view(3, 4)
    outs = [torch.empty(4, 3).t() for _ in range(n)]  # strided outputs
    dist.all_gather(outs, x, group=group)
    want = everyone(x.contiguous().view(-1), gloo)
    for i in range(n):
        same_bits(outs[i].contiguous().view(-1), want[i], f"all_gather into strided output {i}")


def check_broadcast(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in MOVED:
        for root in range(n):
            what = f"broadcast {dtype} from {root} over {transport}"
            x = sample(r, 50_000, dtype, 5)
            ours, theirs = x.clone(), as_bytes(x).clone()
            dist.broadcast(ours, root, group=group)
            dist.broadcast(theirs, root, group=gloo)
            same_bits(ours, theirs.view(dtype), what + " vs Gloo")
    t = sample(r, 40, torch.float32, 6).view(8, 5).t()  # strided
    want = t.contiguous().clone()
    dist.broadcast(want, 0, group=gloo)
    dist.broadcast(t, 0, group=group)
    same_bits(t.contiguous(), want, "broadcast of a strided tensor vs Gloo")


def check_barrier(group, transport):
    """Rank 0 arrives 0.3 s late; everyone else must wait for it."""
    if group.rank() == 0:
        time.sleep(0.3)
    t0 = time.monotonic()
    dist.barrier(group=group)
    waited = time.monotonic() - t0
    if group.rank() != 0:
        assert waited >= 0.2, f"barrier over {transport} returned after {waited:.3f} s while " \
                              f"rank 0 arrived 0.3 s late"


def check_async(group, gloo, transport):
    r = group.rank()
    x = sample(r, 1000, torch.float32, 7)
    t = x.clone()
    work = dist.all_reduce(t, group=group, async_op=True)
    assert work.wait() is True
    assert work.is_completed() and work.is_success(), f"async all_reduce over {transport}: " \
                                                      "the Work is not complete after wait()"
    fut = work.get_future()
    assert fut.done(), "the Work's future is not done"
    same_bits(fut.value()[0], t, "the future's tensor")
    same_bits(t, rank_order_sum(everyone(x, gloo)), f"async all_reduce over {transport}")
    outs = [torch.empty(1000) for _ in range(group.size())]
    dist.all_gather(outs, x, group=group, async_op=True).wait()
    same_bits(torch.cat(outs), torch.cat(everyone(x, gloo)), "async all_gather")
    b = x.clone()
    dist.broadcast(b, 0, group=group, async_op=True).wait()
    same_bits(b, everyone(x, gloo)[0], "async broadcast")
    dist.barrier(group=group, async_op=True).wait()


def check_objects(group, transport):
    """torch's object collectives ride on all_gather and broadcast of
    int64 and uint8 tensors: they work over ds4tp unchanged."""
    n, r = group.size(), group.rank()
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "pad": "x" * (r * 1000)}, group=group)
    assert [o["rank"] for o in objs] == list(range(n)), f"all_gather_object over {transport}: {objs}"
    box = [("from rank 0", list(range(100)))] if r == 0 else [None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
    assert box[0] == ("from rank 0", list(range(100))), f"broadcast_object_list over {transport}"
