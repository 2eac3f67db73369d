"""Launching the ranks of a torch test: N spawned processes (env://
rendezvous on a free port), each running one case of ranks.py (or the
example). Every process ends by itself (the groups' deadlines are short);
one still running at the harness's deadline is killed and the test fails,
naming it as hung."""

import os
import socket
import subprocess
import sys
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
    """The processes of one launch and what each printed."""

    def __init__(self, procs, timeout):
        self.rc, self.out, self.err = [], [], []
        deadline = time.monotonic() + timeout
        hung = []
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(r)
                p.kill()
                out, err = p.communicate()
            self.rc.append(p.returncode)
            self.out.append(out)
            self.err.append(err)
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


def launch(n, argv, timeout=120, env=None):
    """Runs `python3 argv...` as ranks 0..n-1 of an env:// group and waits
    for all of them (up to `timeout` seconds, then kills the rest)."""
    port = free_port()
    procs = []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        e.update(env or {})
        procs.append(subprocess.Popen([sys.executable, *map(str, argv)], env=e, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return Ranks(procs, timeout)


def run_case(n, case, *args, timeout=120, env=None):
    """One case of ranks.py on n ranks; every rank must pass it."""
    return launch(n, [RANKS, case, *args], timeout=timeout, env=env)
