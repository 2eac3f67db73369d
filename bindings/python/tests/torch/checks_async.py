"""async_op=True: each op starts a libds4tp request that runs on the
group's progress thread while the caller goes on (docs/GROUPS.md,
"Split-phase calls"). Several in flight at once, waited in reverse order,
give the synchronous calls' bits (staged outputs copied back and unpacked
in wait()); a Work dropped unwaited still finishes its op; the future
completes without wait(); wait(timeout) gives up on a late peer without
spoiling the op."""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from checks import everyone, rank_order_sum, same_bits, sample


def check_in_flight(group, gloo, transport):
    n, r = group.size(), group.rank()
    big = sample(r, 300_000, torch.float32, 31)  # past the shm home threshold and a 1 MiB chunk
    small = sample(r, 4096, torch.float32, 32)  # 16 KiB
    base = sample(r, 64 * 3, torch.float32, 33).view(64, 3)
    col = base[:, 1]  # strided: reduced in a copy, copied back by wait()
    gx = sample(r, 1000, torch.float32, 34)
    rs_in = [sample(r * n + q, 500, torch.float32, 35) for q in range(n)]  # separate: packed
    # The synchronous calls' results over the same group (so the same plan and bits).
    want_big, want_small, want_col = big.clone(), small.clone(), col.contiguous()
    for t in (want_big, want_small, want_col):
        dist.all_reduce(t, group=group)
    want_rs = torch.empty(500)
    dist.reduce_scatter(want_rs, [t.clone() for t in rs_in], group=group)
    want_g = torch.cat(everyone(gx, gloo))
    same_bits(want_small, rank_order_sum(everyone(small, gloo)), "sync all_reduce reference")

    what = f"async over {transport}"
    a, b = big.clone(), small.clone()
    outs = [torch.empty(1000) for _ in range(n)]  # separate tensors: unpacked by wait()
    rs_out = torch.empty(500)
    works = [dist.all_reduce(a, group=group, async_op=True),
             dist.all_reduce(b, group=group, async_op=True),
             dist.all_gather(outs, gx, group=group, async_op=True),
             dist.reduce_scatter(rs_out, rs_in, group=group, async_op=True),
             dist.all_reduce(col, group=group, async_op=True)]
    for i, w in reversed(list(enumerate(works))):
        assert w.wait() is True, f"{what}: work {i}'s wait()"
        assert w.is_completed() and w.is_success(), f"{what}: work {i} not complete after wait()"
    same_bits(a, want_big, f"{what}: all_reduce of 300000 vs sync")
    same_bits(b, want_small, f"{what}: all_reduce of 4096 vs sync")
    same_bits(torch.cat(outs), want_g, f"{what}: all_gather into separate tensors")
    same_bits(rs_out, want_rs, f"{what}: reduce_scatter of a list vs sync")
    same_bits(base[:, 1].contiguous(), want_col, f"{what}: all_reduce of a strided column")
    same_bits(works[0].result()[0], want_big, f"{what}: result()")
    fut = works[2].get_future()
    assert fut.done(), f"{what}: the future of a waited Work is not done"
    same_bits(torch.cat(fut.value()), want_g, f"{what}: the all_gather future's tensors")

    # The future alone, never wait(): it completes, then() runs.
    t = small.clone()
    fut = dist.all_reduce(t, group=group, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    same_bits(fut.value()[0], want_small, f"{what}: the future's tensor without wait()")
    same_bits(doubled, want_small * 2, f"{what}: the future's then()")

    # A Work dropped unwaited: its op still ends, the unpack included.
    outs = [torch.empty(1000) for _ in range(n)]
    dist.all_gather(outs, gx, group=group, async_op=True)
    same_bits(torch.cat(outs), want_g, f"{what}: all_gather whose Work was dropped")

    # wait(timeout) while rank 0 has not started yet: raises, the op goes on.
    if r == 0:
        time.sleep(0.3)
    t = small.clone()
    w = dist.all_reduce(t, group=group, async_op=True)
    if r != 0:
        try:
            w.wait(timedelta(milliseconds=20))
        except RuntimeError as e:
            assert "not done after 20 ms" in str(e) and f"rank {r} of {n}" in str(e), str(e)
        else:
            raise AssertionError(f"{what}: wait(20 ms) returned while rank 0 was 0.3 s late")
    assert w.wait(timedelta(seconds=30)) is True
    same_bits(t, want_small, f"{what}: all_reduce after a wait that timed out")
