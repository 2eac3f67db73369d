"""One rank of a torch backend test: `ranks.py CASE [ARGS]`, with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (by harness.py or torchrun).
Exits 0 when every check of the case passed on this rank; a failing check
raises with what it compared. Every wait has a deadline: the store's and
the groups' timeouts are short, so no rank outlives its test."""

import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ds4tp.torch
import checks
import checks_async
import checks_collectives as more

TIMEOUT = timedelta(seconds=60)


def say(*words):
    print(f"rank {dist.get_rank()}:", *words, flush=True)


def case_ops():
    """Every op and dtype over the default plan (shm on one host) and over
    a tcp group of the same ranks, against a Gloo group beside them."""
    dist.init_process_group("ds4tp", timeout=TIMEOUT)
    n = dist.get_world_size()
    gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
    tcp = dist.new_group(list(range(n)), backend="ds4tp", timeout=TIMEOUT,
                         pg_options=ds4tp.torch.Options(transport="tcp"))
    world = dist.group.WORLD
    assert world._get_backend_name() == "ds4tp", world._get_backend_name()
    for group, transport in ((world, world.transport), (tcp, "tcp")):
        assert group.transport == transport, (group.transport, transport)
        checks.check_all_reduce(group, gloo, transport)
        checks.check_all_gather(group, gloo, transport)
        checks.check_broadcast(group, gloo, transport)
        checks.check_barrier(group, transport)
        checks.check_async(group, gloo, transport)
        checks.check_objects(group, transport)
        more.check_all_reduce_ops(group, gloo, transport)
        more.check_reduce(group, gloo, transport)
        more.check_reduce_scatter(group, gloo, transport)
        more.check_gather_scatter(group, gloo, transport)
        more.check_all_gather_uneven(group, transport)
        more.check_all_to_all(group, gloo, transport)
        more.check_async_more(group, gloo)
        checks_async.check_in_flight(group, gloo, transport)
        more.check_unsupported(group)
        say(f"ops over {transport} ({group.plan()}) OK")
    doomed = dist.new_group(list(range(n)), backend="ds4tp", timeout=TIMEOUT)
    more.check_library_error(doomed)
    dist.destroy_process_group()


def case_subgroups():
    """Sub-groups of 4 ranks, each its own ds4tp group: two disjoint pairs
    used at the same time, a group of three, one of one rank, and the
    world between them."""
    dist.init_process_group("ds4tp", timeout=TIMEOUT)
    r, n = dist.get_rank(), dist.get_world_size()
    assert n == 4, "the sub-group case runs on 4 ranks"
    pairs = [dist.new_group([0, 1], backend="ds4tp"), dist.new_group([2, 3], backend="ds4tp")]
    three = dist.new_group([1, 2, 3], backend="ds4tp", pg_options=ds4tp.torch.Options(transport="tcp"))
    singles = [dist.new_group([i], backend="ds4tp") for i in range(n)]
    for step in range(50):
        mine = pairs[r // 2]
        x = torch.full((1000,), float(r + step))
        dist.all_reduce(x, group=mine)
        partner = r ^ 1
        want = float(r + step) + float(partner + step)
        assert x[0].item() == want, f"pair {r // 2} step {step}: {x[0].item()} != {want}"
        if r >= 1:
            y = torch.full((100,), float(r))
            dist.all_reduce(y, group=three)
            assert y[0].item() == 6.0, f"group [1, 2, 3] step {step}: {y[0].item()}"
            outs = [torch.empty(2) for _ in range(3)]
            dist.all_gather(outs, torch.full((2,), float(r)), group=three)
            assert [o[0].item() for o in outs] == [1.0, 2.0, 3.0], outs
        w = torch.ones(10)
        dist.all_reduce(w)
        assert w[0].item() == n
    solo = singles[r]
    s = torch.full((5,), 3.0)
    dist.all_reduce(s, group=solo)
    outs = [torch.empty(5)]
    dist.all_gather(outs, s, group=solo)
    dist.broadcast(s, r, group=solo)
    dist.barrier(group=solo)
    assert s[0].item() == 3.0 and outs[0][0].item() == 3.0, (s, outs)
    more.check_solo(solo)
    say(f"sub-groups OK; pair plan: {pairs[r // 2].plan()}")
    dist.destroy_process_group()


def case_kill(transport, victim):
    """All ranks loop over all_reduce of 4 MiB; the victim SIGKILLs itself
    0.5 s in. Every survivor must raise the library's error naming the
    victim within a few seconds: small deadlines, so nothing hangs."""
    opts = ds4tp.torch.Options(transport=transport, op_timeout_ms=2000, peer_silence_ms=500)
    dist.init_process_group("ds4tp", timeout=TIMEOUT, pg_options=opts)
    r, victim = dist.get_rank(), int(victim)
    x = torch.ones(1 << 20)
    dist.barrier()
    if r == victim:
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    t0 = time.monotonic()
    calls = 0
    try:
        while time.monotonic() - t0 < 30:
            dist.all_reduce(x)
            calls += 1
    except RuntimeError as e:
        took = time.monotonic() - t0
        print(f"rank {r}: raised after {calls} calls, {took:.2f} s: {e}", flush=True)
        msg = str(e)
        assert f"failed on rank {r} of " in msg and "(DS4TP_E" in msg, f"not the library's error: {msg}"
        assert f"rank {victim}" in msg.split("): ", 1)[1], f"the error does not name rank {victim}: {msg}"
        assert took < 10, f"the survivor took {took:.1f} s to give up"
        # The group stays failed: the next call raises at once, naming it again.
        try:
            dist.all_reduce(x)
        except RuntimeError as again:
            assert "DS4TP_EFAILED" in str(again), f"a later call: {again}"
        else:
            raise AssertionError("a call after the failure succeeded")
        os._exit(0)  # the group is failed: skip destroy's barrier-free teardown
    raise AssertionError(f"rank {r}: 30 s of all_reduce and no error though rank {victim} died")


def case_async_fail(transport, victim, how):
    """The survivors start four ops async (two all_reduces, an all_gather,
    a reduce_scatter) that the victim never joins: it SIGKILLs itself
    ("kill"), leaves with destroy_process_group ("destroy") or marks the
    group failed ("mark"). Each pending Work's wait(), in reverse order,
    raises the library's error naming the victim, within seconds."""
    opts = ds4tp.torch.Options(transport=transport, op_timeout_ms=2000, peer_silence_ms=500)
    dist.init_process_group("ds4tp", timeout=TIMEOUT, pg_options=opts)
    r, n, victim = dist.get_rank(), dist.get_world_size(), int(victim)
    dist.barrier()
    if r == victim:
        time.sleep(0.2)  # the others' requests are in flight by now
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "destroy":
            dist.destroy_process_group()
        else:
            dist.group.WORLD._mark_failed()
            time.sleep(0.5)  # the word reaches the others before the links close
        os._exit(0)
    t0 = time.monotonic()
    a, b = torch.ones(1 << 20), torch.ones(4096)
    outs = [torch.empty(1000) for _ in range(n)]
    out = torch.empty(100)
    works = [dist.all_reduce(a, async_op=True), dist.all_reduce(b, async_op=True),
             dist.all_gather(outs, torch.ones(1000), async_op=True),
             dist.reduce_scatter(out, [torch.ones(100) for _ in range(n)], async_op=True)]
    for i, w in reversed(list(enumerate(works))):
        try:
            w.wait()
        except RuntimeError as e:
            msg = str(e)
            print(f"rank {r}: work {i} raised after {time.monotonic() - t0:.2f} s: {msg}", flush=True)
            assert f"failed on rank {r} of {n} (DS4TP_E" in msg, f"not the library's error: {msg}"
            assert f"rank {victim}" in msg.split("): ", 1)[1], \
                f"work {i}'s error does not name rank {victim}: {msg}"
        else:
            raise AssertionError(f"rank {r}: work {i} succeeded though rank {victim} left ({how})")
        assert w.is_completed() and not w.is_success(), f"work {i} after its failed wait()"
    took = time.monotonic() - t0
    assert took < 10, f"the survivor took {took:.1f} s to give up"
    print(f"rank {r}: every pending work raised ({how} over {transport})", flush=True)
    os._exit(0)  # the group is failed: skip destroy's teardown


def case_ddp():
    """DistributedDataParallel over ds4tp (its broadcast at start, its
    gradient all_reduce through the Work's future) trains the same model
    as over Gloo: with 2 ranks the sums agree, so the weights do bit for bit."""
    dist.init_process_group("ds4tp", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
    r = dist.get_rank()
    trained = {}
    for name, group in (("gloo", gloo), ("ds4tp", dist.group.WORLD)):
        torch.manual_seed(r)  # different on every rank: DDP's broadcast must even them
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(100 + r)
        for _ in range(5):
            loss = ddp(torch.randn(8, 16, generator=data)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        trained[name] = [p.detach().clone() for p in model.parameters()]
    for i, (a, b) in enumerate(zip(trained["gloo"], trained["ds4tp"])):
        checks.same_bits(b, a, f"DDP parameter {i} after 5 steps, ds4tp vs Gloo")
    say("DDP OK")
    dist.destroy_process_group()


def case_rank0_fails():
    """Rank 0 cannot bind the address it was given (TEST-NET-1, on no
    host): it raises the library's reason, and the others, waiting in the
    store for its port, raise at once naming it instead of waiting out the
    timeout."""
    r = int(os.environ["RANK"])
    t0 = time.monotonic()
    try:
        dist.init_process_group("ds4tp", timeout=TIMEOUT,
                                pg_options=ds4tp.torch.Options(host="192.0.2.1"))
    except RuntimeError as e:
        took, msg = time.monotonic() - t0, str(e)
        print(f"rank {r}: raised after {took:.2f} s: {msg}", flush=True)
        assert "192.0.2.1" in msg and "could not create its ds4tp group" in msg, msg
        if r != 0:
            assert "the group's rank 0 could not start it" in msg, msg
        assert took < 20, f"rank {r} took {took:.1f} s to hear of rank 0's failure"
        return
    raise AssertionError(f"rank {r}: init_process_group succeeded on an address of no host")


def case_init_methods():
    """init_method tcp:// and file://, one after the other, in one process."""
    r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ["MASTER_PORT"]) + 1
    path = os.path.join(os.environ["DS4TP_TEST_TMP"], "store")
    for method in (f"tcp://127.0.0.1:{port}", f"file://{path}"):
        dist.init_process_group("ds4tp", init_method=method, rank=r, world_size=n, timeout=TIMEOUT)
        x = torch.full((100,), float(r + 1))
        dist.all_reduce(x)
        assert x[0].item() == n * (n + 1) / 2, f"{method}: {x[0].item()}"
        dist.barrier()
        say(f"{method.split(':')[0]}:// OK over {dist.group.WORLD.transport}")
        dist.destroy_process_group()


def case_env():
    """The smallest program: what torchrun starts (env:// from its variables)."""
    dist.init_process_group("ds4tp", timeout=TIMEOUT)
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.full((4096,), float(r + 1))
    dist.all_reduce(x)
    assert x[0].item() == n * (n + 1) / 2, x[0].item()
    say(f"env:// OK, {n} ranks, LOCAL_RANK {os.environ.get('LOCAL_RANK')}, {dist.group.WORLD.plan()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    case, args = sys.argv[1], sys.argv[2:]
    globals()[f"case_{case}"](*args)
