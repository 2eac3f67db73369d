"""Launching the ranks of a torch test: N spawned processes (env://
rendezvous on a free port), each running one case of ranks.py (or the
example). Every process ends by itself (the groups' deadlines are short);
one still running at the harness's deadline is killed and the test fails,
naming it as hung."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANKS = HERE / "ranks.py"
EXAMPLE = Path(os.environ.get("DS4TP_PY_EXAMPLES")
               or HERE.parents[3] / "examples" / "python") / "torch_tp.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """The processes of one launch and what each printed. Each runs in a
    session of its own with its output in files, so a rank that prints a
    lot cannot block on a pipe, and a hung one is killed with every process
    it started (the example's launcher starts the ranks)."""

    def __init__(self, procs, timeout):
        self.rc, self.out, self.err = [], [], []
        deadline = time.monotonic() + timeout
        hung = []
        for r, (p, out, err) in enumerate(procs):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(r)
            _kill_session(p)  # its children too, hung or left behind
            p.wait()
            self.rc.append(p.returncode)
            for f, into in ((out, self.out), (err, self.err)):
                f.seek(0)
                into.append(f.read())
                f.close()
        self.hung = hung

    def report(self):
        return "\n".join(f"--- rank {r} (exit {self.rc[r]}){' HUNG, killed' if r in self.hung else ''}"
                         f"\nstdout:\n{self.out[r]}\nstderr:\n{self.err[r][-4000:]}"
                         for r in range(len(self.rc)))

    def check(self, expect_rc=None):
        """Asserts no rank hung and each exited with expect_rc[r] (0 for all by default)."""
        want = expect_rc or [0] * len(self.rc)
        assert not self.hung, f"ranks {self.hung} did not end by themselves:\n{self.report()}"
        bad = [r for r, (rc, w) in enumerate(zip(self.rc, want)) if w is not None and rc != w]
        assert not bad, f"ranks {bad} exited with {[self.rc[r] for r in bad]} (want " \
                        f"{[want[r] for r in bad]}):\n{self.report()}"
        return self


# The groups' waits skip the yield phase here (GROUPS.md, "Waiting"): the
# tests share two cores with the rest of ctest, and with more runnable
# threads than cores each sched_yield hands whole time slices to the other
# work (the example with 4 ranks beside six busy loops on 2 cores: 8
# tokens/s with the default yield, 81 without). Results do not depend on
# the wait policy; the bench measures the default one.
QUIET_WAITS = {"DS4TP_GROUP_YIELD_US": "0"}


def launch(n, argv, timeout=120, env=None):
    """Runs `python3 argv...` as ranks 0..n-1 of an env:// group and waits
    for all of them (up to `timeout` seconds, then kills the rest)."""
    port = free_port()
    procs = []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **QUIET_WAITS)
        e.update(env or {})
        procs.append(start([sys.executable, *map(str, argv)], env=e))
    return Ranks(procs, timeout)


def start(args, env=None):
    """A process in a session of its own, its output in temporary files."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    return subprocess.Popen(args, env=env, text=True, stdout=out, stderr=err,
                            start_new_session=True), out, err


def _kill_session(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_case(n, case, *args, timeout=120, env=None):
    """One case of ranks.py on n ranks; every rank must pass it."""
    return launch(n, [RANKS, case, *args], timeout=timeout, env=env)
