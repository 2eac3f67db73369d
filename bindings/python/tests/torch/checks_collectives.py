"""The comparisons of the collectives beside all_reduce's sum, all_gather
and broadcast (checks.py): all_reduce and reduce with SUM, MAX, MIN and
PRODUCT over every dtype libds4tp reduces, reduce_scatter (list and tensor
forms, in place), gather, scatter, all_gather of uneven parts, and
all_to_all (single tensor, even and uneven splits with zeros, and list
forms). Each result is checked bit for bit against a reference computed
here from every rank's inputs (the ranks combined in rank order, as
docs/GROUPS.md "Collectives" says: 16-bit floats in float32 rounded once,
integers wrapping), and against Gloo where Gloo has the op and the dtype
(bit for bit where every order gives the same bits: integers, MAX, MIN)."""

import torch
import torch.distributed as dist

from checks import everyone, same_bits, sample

OPS = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN,
       "PRODUCT": dist.ReduceOp.PRODUCT}
REDUCED = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
           torch.uint8]
MOVED = [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool]
GLOO_REDUCES = {torch.float32, torch.float16, torch.float64, torch.int32, torch.int64, torch.uint8}


def values(rank, count, dtype, op, salt):
    """Inputs for `op`: products of small integers stay exact in every
    dtype (no signed overflow in the reference); uint8 wraps, as defined."""
    if op == "PRODUCT" and dtype != torch.uint8:
        g = torch.Generator().manual_seed(rank * 7919 + count * 31 + salt)
        if dtype.is_floating_point:
            return (torch.randn(count, generator=g) * 1.5).to(dtype)
        return torch.randint(-3, 4, (count,), generator=g, dtype=dtype)
    if dtype.is_floating_point or dtype == torch.uint8:
        return sample(rank, count, dtype, salt)  # uint8 sums wrap, as defined
    g = torch.Generator().manual_seed(rank * 7919 + count * 31 + salt)
    return torch.randint(-(1 << 27), 1 << 27, (count,), generator=g, dtype=dtype)


def combine(parts, op):
    """The library's rank-order reduction of parts (same dtype each)."""
    dtype = parts[0].dtype
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = parts[0].to(wide)
    for p in parts[1:]:
        p = p.to(wide)
        if op == "SUM":
            acc = acc + p
        elif op == "PRODUCT":
            acc = acc * p
        elif op == "MAX":
            acc = torch.maximum(acc, p)
        else:
            acc = torch.minimum(acc, p)
    return acc.to(dtype)


def against_gloo(got, x, op, gloo, what):
    if x.dtype not in GLOO_REDUCES:
        return
    theirs = x.clone()
    dist.all_reduce(theirs, op=OPS[op], group=gloo)
    if not x.dtype.is_floating_point or op in ("MAX", "MIN"):
        same_bits(got, theirs, what + " vs Gloo")
    else:
        tol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(x.dtype, 1e-2)
        torch.testing.assert_close(got, theirs, rtol=tol, atol=tol,
                                   msg=lambda m: f"{what} vs Gloo: {m}")


def check_all_reduce_ops(group, gloo, transport):
    r = group.rank()
    for dtype in REDUCED:
        for op in OPS:
            for count in (1, 1000, 20_000):
                what = f"all_reduce {op} {dtype} x {count} over {transport}"
                x = values(r, count, dtype, op, 11)
                got = x.clone()
                dist.all_reduce(got, op=OPS[op], group=group)
                same_bits(got, combine(everyone(x, gloo), op), what + " vs rank order")
                against_gloo(got, x, op, gloo, what)


def check_reduce(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.uint8):
        for op in OPS:
            for root in range(n):
                what = f"reduce {op} {dtype} to {root} over {transport}"
                x = values(r, 3000, dtype, op, 12)
                got = x.clone()
                dist.reduce(got, dist.get_global_rank(group, root), op=OPS[op], group=group)
                if r == root:
                    same_bits(got, combine(everyone(x, gloo), op), what + " vs rank order")
                else:
                    everyone(x, gloo)  # the same Gloo calls on every rank
                    same_bits(got, x, what + ": a non-root's tensor is left as it was")
    t = sample(r, 60, torch.float32, 13).view(10, 6).t()  # strided: through a copy
    keep = t.contiguous().clone()
    dist.reduce(t, dist.get_global_rank(group, 0), group=group)
    want = combine(everyone(keep, gloo), "SUM")
    same_bits(t.contiguous(), want if r == 0 else keep, "reduce of a strided tensor")


def check_reduce_scatter(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in (torch.float32, torch.float16, torch.int64, torch.uint8):
        for op in ("SUM", "MIN", "PRODUCT"):
            for count in (1, 777, 70_000):
                what = f"reduce_scatter {op} {dtype} x {count} over {transport}"
                x = values(r, n * count, dtype, op, 14)
                want = combine(everyone(x, gloo), op).narrow(0, r * count, count)
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, x, op=OPS[op], group=group)
                same_bits(out, want, what + " (reduce_scatter_tensor)")
                base = x.clone()  # in place: the output is this rank's segment
                mine = base.narrow(0, r * count, count)
                dist._reduce_scatter_base(mine, base, op=OPS[op], group=group)
                same_bits(mine, want, what + " in place (_reduce_scatter_base)")
                views = x.clone()  # a list of views of one block: no copy in
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, list(views.chunk(n)), op=OPS[op], group=group)
                same_bits(out, want, what + " (list of views of one block)")
                apart = [c.clone() for c in x.chunk(n)]  # separate tensors: packed
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, apart, op=OPS[op], group=group)
                same_bits(out, want, what + " (list of separate tensors)")
    x = values(r, n * 12, torch.float32, "SUM", 15)
    out = torch.empty(4, 3).t()  # a strided output
    dist.reduce_scatter(out, [c.view(3, 4) for c in x.chunk(n)], group=group)
    want = combine(everyone(x, gloo), "SUM").narrow(0, r * 12, 12).view(3, 4)
    same_bits(out.contiguous(), want, "reduce_scatter into a strided output")


def check_gather_scatter(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in MOVED:
        for count in (1, 5000, 300_000):
            x = sample(r, count, dtype, 16) if dtype != torch.bool else \
                sample(r, count, torch.uint8, 16) > 127
            parts = everyone(x, gloo)
            for root in range(n):
                what = f"gather {dtype} x {count} to {root} over {transport}"
                groot = dist.get_global_rank(group, root)
                outs = [torch.empty_like(x) for _ in range(n)] if r == root else None
                dist.gather(x, outs, groot, group=group)
                if r == root:
                    for i in range(n):
                        same_bits(outs[i], parts[i], f"{what}: rank {i}'s part")
                what = f"scatter {dtype} x {count} from {root} over {transport}"
                got = torch.empty_like(x)
                dist.scatter(got, [p.clone() for p in parts] if r == root else None, groot,
                             group=group)
                same_bits(got, parts[r], what)  # the root's list is everyone's parts
    # The root's output is a view of its own block of inputs, and its gather
    # list one block: scatter in place, gather with no copy out.
    x = sample(r, 100, torch.float32, 17)
    parts = everyone(x, gloo)
    block = torch.cat(parts) if r == 0 else None
    got = block.narrow(0, 0, 100) if r == 0 else torch.empty(100)
    dist.scatter(got, list(block.chunk(n)) if r == 0 else None, dist.get_global_rank(group, 0),
                 group=group)
    same_bits(got, parts[r], "scatter into the root's own input")
    flat = torch.empty(n * 100)
    dist.gather(x, list(flat.chunk(n)) if r == 0 else None, dist.get_global_rank(group, 0),
                group=group)
    if r == 0:
        same_bits(flat, torch.cat(parts), "gather into views of one block")


def uneven(q, n):
    """Rank q's part of an uneven all_gather: one rank gives nothing."""
    return 0 if q == n - 1 else 1000 * (q + 1) + q


def check_all_gather_uneven(group, transport):
    n, r = group.size(), group.rank()
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        for scale in (1, 300):
            what = f"all_gather of uneven parts {dtype} x{scale} over {transport}"
            size = [uneven(q, n) * scale for q in range(n)]
            want = [sample(q, size[q], dtype, 18) for q in range(n)]
            outs = [torch.empty(size[q], dtype=dtype) for q in range(n)]
            dist.all_gather(outs, want[r].clone(), group=group)
            for q in range(n):
                same_bits(outs[q], want[q], f"{what}: rank {q}'s part")
            block = torch.empty(sum(size), dtype=dtype)  # views of one block: no copy
            dist.all_gather(list(block.split(size)), want[r].clone(), group=group)
            same_bits(block, torch.cat(want), what + " into views of one block")


def split_rows(src, dst, n, scale):
    """Rows rank src sends rank dst: each rank sends nothing to the next."""
    return 0 if dst == (src + 1) % n else (1 + (src + 2 * dst) % 3) * scale


def check_all_to_all(group, gloo, transport):
    n, r = group.size(), group.rank()
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        what = f"all_to_all_single {dtype} over {transport}"
        x = sample(r, n * 2000 * 3, dtype, 19).view(n * 2000, 3)
        want = [sample(q, n * 2000 * 3, dtype, 19).view(n * 2000, 3).chunk(n)[r]
                for q in range(n)]
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)  # equal splits
        same_bits(out, torch.cat(want), what + " (equal splits)")
        if dtype != torch.bfloat16:
            theirs = torch.empty_like(x)
            dist.all_to_all_single(theirs, x, group=gloo)
            same_bits(out, theirs, what + " (equal splits) vs Gloo")
        for scale in (1, 40_000):  # a few rows; past a 1 MiB chunk
            what = f"all_to_all_single {dtype} uneven x{scale} over {transport}"
            send = [split_rows(r, q, n, scale) for q in range(n)]
            recv = [split_rows(q, r, n, scale) for q in range(n)]
            ins = [sample(q, sum(split_rows(q, p, n, scale) for p in range(n)) * 2, dtype, 20)
                   .view(-1, 2) for q in range(n)]
            want = torch.cat([ins[q].split([split_rows(q, p, n, scale) for p in range(n)])[r]
                              for q in range(n)])
            out = torch.empty(sum(recv), 2, dtype=dtype)
            dist.all_to_all_single(out, ins[r], recv, send, group=group)
            same_bits(out, want, what)
            if dtype != torch.bfloat16:
                theirs = torch.empty_like(out)
                dist.all_to_all_single(theirs, ins[r], recv, send, group=gloo)
                same_bits(out, theirs, what + " vs Gloo")
            outs = [torch.empty(k, 2, dtype=dtype) for k in recv]  # the list form
            dist.all_to_all(outs, list(ins[r].split(send)), group=group)
            same_bits(torch.cat(outs), want, what + " (all_to_all, separate tensors)")
            outs = list(torch.empty(sum(recv), 2, dtype=dtype).split(recv))
            dist.all_to_all(outs, [t.clone() for t in ins[r].split(send)], group=group)
            same_bits(torch.cat(outs), want, what + " (all_to_all into views of one block)")


def check_async_more(group, gloo):
    """async_op=True for the ops beside checks.check_async's."""
    n, r = group.size(), group.rank()
    x = values(r, n * 10, torch.float32, "MAX", 21)
    out = torch.empty(10)
    work = dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.MAX, group=group, async_op=True)
    assert work.wait() is True and work.is_completed(), "async reduce_scatter_tensor"
    same_bits(out, combine(everyone(x, gloo), "MAX").narrow(0, r * 10, 10), "async reduce_scatter")
    got = torch.empty_like(x)
    dist.all_to_all_single(got, x, group=group, async_op=True).wait()


def check_unsupported(group):
    """What libds4tp lacks raises at once, naming the op or dtype (and the
    way round it); the group works afterwards."""
    n, r = group.size(), group.rank()
    t = torch.ones(4)
    peer = dist.get_global_rank(group, (r + 1) % n)
    cases = {
        "send": (lambda: dist.send(t, dst=peer, group=group), "point-to-point"),
        "recv": (lambda: dist.recv(t, src=peer, group=group), "point-to-point"),
        "all_reduce_coalesced": (lambda: dist.all_reduce_coalesced([t], group=group), "gloo"),
        "ReduceOp.AVG": (lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group),
                         "divide by the group's size"),
        "ReduceOp.BAND": (lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32),
                                                  op=dist.ReduceOp.BAND, group=group), "gloo"),
        "torch.bool": (lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), group=group),
                       "gloo"),
        "torch.int8": (lambda: dist.reduce(torch.ones(4, dtype=torch.int8), 0, group=group),
                       "gloo"),
        "torch.int16": (lambda: dist.reduce_scatter_tensor(
            torch.ones(4, dtype=torch.int16), torch.ones(4 * n, dtype=torch.int16), group=group),
            "gloo"),
    }
    for name, (call, hint) in cases.items():
        try:
            call()
        except RuntimeError as e:
            msg = str(e)
            assert name in msg and "new_group(backend='gloo')" in msg and hint in msg, \
                f"{name}: the error does not name it and the way round it ({hint}): {msg}"
        else:
            raise AssertionError(f"{name} over ds4tp did not raise")
    x = torch.ones(8)
    dist.all_reduce(x, group=group)
    assert x[0].item() == n, f"all_reduce after the refusals gave {x[0].item()}, want {n}"


def check_library_error(group):
    """Counts that disagree between ranks: the library's EDESYNC, with its
    message, raised on every rank (each expects a count its peer does not
    send). The group is failed afterwards; the caller leaves it."""
    n, r = group.size(), group.rank()
    x = torch.zeros(2 * n, 3)
    recv = [3 if q == 0 else 2 for q in range(n)]
    recv[1] = 1
    out = torch.empty(sum(recv), 3)
    try:
        dist.all_to_all_single(out, x, recv, [2] * n, group=group)
    except RuntimeError as e:
        msg = str(e)
        assert f"all_to_all_single failed on rank {r} of {n} (DS4TP_EDESYNC)" in msg and \
            "all_to_all_v: rank " in msg, f"not the library's error: {msg}"
    else:
        raise AssertionError("all_to_all_single with counts that disagree did not raise")


def check_solo(group):
    """A group of one rank: every op is a local copy."""
    x = torch.arange(6.0)
    for op in OPS.values():
        y = x.clone()
        dist.all_reduce(y, op=op, group=group)
        dist.reduce(y, dist.get_global_rank(group, 0), op=op, group=group)
        same_bits(y, x, f"one rank: all_reduce and reduce {op}")
    out = torch.empty(6)
    dist.reduce_scatter_tensor(out, x, group=group)
    same_bits(out, x, "one rank: reduce_scatter_tensor")
    outs = [torch.empty(6)]
    me = dist.get_global_rank(group, 0)
    dist.gather(x, outs, me, group=group)
    dist.scatter(out, [x * 2], me, group=group)
    same_bits(outs[0], x, "one rank: gather")
    same_bits(out, x * 2, "one rank: scatter")
    dist.all_to_all_single(out, x, group=group)
    same_bits(out, x, "one rank: all_to_all_single")
    outs = [torch.empty(6)]
    dist.all_to_all(outs, [x], group=group)
    same_bits(outs[0], x, "one rank: all_to_all")
