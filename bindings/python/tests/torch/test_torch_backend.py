"""torch.distributed with backend "ds4tp" in spawned processes: every op,
reduce op and dtype against Gloo and a rank-order reference on 2, 3 and 4
ranks (over the default plan and over tcp; checks.py and
checks_collectives.py), the refusals and the library's own error,
sub-groups and groups of one rank, DDP, init methods, torchrun, a failing
rank 0, a rank killed mid-call, and async work pending when a rank leaves."""

import sys

import pytest

from harness import RANKS, free_port, launch, run_case


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ops_against_gloo(n):
    ranks = run_case(n, "ops", timeout=240).check()
    for r in range(n):
        assert "ops over shm" in ranks.out[r] and "ops over tcp" in ranks.out[r], ranks.report()


def test_subgroups():
    run_case(4, "subgroups").check()


def test_ddp_trains_as_over_gloo():
    run_case(2, "ddp").check()


def test_rank0_failing_fails_every_rank_at_once():
    run_case(3, "rank0_fails", timeout=90).check()


def test_init_methods(tmp_path):
    run_case(2, "init_methods", env={"DS4TP_TEST_TMP": str(tmp_path)}).check()


def test_torchrun():
    # Debian 12's torchrun (torch 1.13 on Python 3.11) cannot parse its own
    # default --redirects/--tee of 0; 1 (stdout) works, and prefixes each
    # rank's lines with [defaultR].
    args = ["-m", "torch.distributed.run", "--nproc_per_node", "3", "--redirects", "1",
            "--tee", "1", "--master_port", str(free_port()), RANKS, "env"]
    ranks = launch(1, args, timeout=120).check()
    for r in range(3):
        assert f"[default{r}]:rank {r}: env:// OK, 3 ranks, LOCAL_RANK {r}" in ranks.out[0], \
            ranks.report()


@pytest.mark.parametrize("transport,victim", [("auto", 1), ("tcp", 0)])
def test_rank_killed_mid_call(transport, victim):
    want = [0, 0, 0]
    want[victim] = -9  # SIGKILL
    ranks = run_case(3, "kill", transport, str(victim), timeout=90).check(want)
    for r in range(3):
        if r != victim:
            assert f"rank {r}: raised after" in ranks.out[r], ranks.report()


@pytest.mark.parametrize("n,transport,how", [(2, "auto", "kill"), (3, "auto", "kill"),
                                             (2, "tcp", "kill"), (3, "tcp", "kill"),
                                             (3, "auto", "destroy"), (2, "tcp", "mark")])
def test_async_work_pending_when_a_rank_leaves(n, transport, how):
    victim = n - 1
    want = [0] * n
    want[victim] = -9 if how == "kill" else 0
    ranks = run_case(n, "async_fail", transport, str(victim), how, timeout=90).check(want)
    for r in range(n - 1):
        assert f"rank {r}: every pending work raised" in ranks.out[r], ranks.report()
