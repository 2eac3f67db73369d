"""Shared fixtures: the binding package and the C programs the tests pair with.

The suite tests the installed package: ctest installs bindings/python with
pip into the build tree and puts it first on PYTHONPATH (DS4TP_PYTHON_TARGET
names that directory, and the import must come from it). ctest also sets
DS4TP_LIBRARY (libds4tp.so), DS4TP_PEER (tests/bindings/ds4tp_peer) and
DS4TP_DEMO (examples/demo/ds4tp_demo)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ds4tp

# The example scripts (examples/python: demo_rank.py, leader.py, worker.py)
# use the package; the tests run them too.
EXAMPLES = Path(os.environ.get("DS4TP_PY_EXAMPLES")
                or Path(__file__).resolve().parents[3] / "examples" / "python")
sys.path.append(str(EXAMPLES))

_target = os.environ.get("DS4TP_PYTHON_TARGET")
if _target and Path(ds4tp.__file__).resolve().parent.parent != Path(_target).resolve():
    raise RuntimeError(f"ds4tp was imported from {ds4tp.__file__}, not from the installed "
                       f"package in {_target}")

# Every child process and every pair call here ends within these bounds.
PROCESS_TIMEOUT_S = 90


def _program(var):
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{var} must name the C program (ctest sets it); got {path!r}")
    return path


@pytest.fixture
def peer_exe():
    return _program("DS4TP_PEER")


@pytest.fixture
def demo_exe():
    return _program("DS4TP_DEMO")


class Child:
    """A C rank in a subprocess that is always reaped (killed on timeout)."""

    def __init__(self, args):
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def read_port(self):
        """First stdout line of a leader: "port P"."""
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.finish()
            pytest.fail(f"{self.args[0]} printed {line!r} instead of its port:\n{self.err}")
        return int(line.split()[1])

    def wait_stderr(self, needle):
        """Reads stderr lines until one contains ``needle`` (True) or the
        stream ends, i.e. the process exited (False). Lines read are kept."""
        self.early_err = getattr(self, "early_err", "")
        for line in self.proc.stderr:
            self.early_err += line
            if needle in line:
                return True
        return False

    def finish(self):
        try:
            out, err = self.proc.communicate(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            err += "\n(killed after timeout)"
        self.out, self.err = out, getattr(self, "early_err", "") + err
        return self.proc.returncode


@pytest.fixture
def child():
    children = []

    def start(args):
        c = Child([str(a) for a in args])
        children.append(c)
        return c

    yield start
    for c in children:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.communicate()


def free_port():
    """A loopback port nobody listens on right now (for C leaders that need
    --port); see start_demo_leader for the retry when another process takes
    it first."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def quiet():
    """Options overrides for test pairs: bounded waits, warnings only."""
    return dict(connect_timeout_ms=30000, gate_timeout_ms=5000, log_level=ds4tp.LogLevel.WARN)


def start_demo_leader(start, args, attempts=5):
    """Starts ``ds4tp_demo --role leader --port P args`` on a free port and
    returns (child, P) once it listens (its INFO log says so); a port taken
    in between makes the demo exit, and another port is tried."""
    for _ in range(attempts):
        port = free_port()
        c = start(list(args[:1]) + ["--role", "leader", "--port", port] + list(args[1:]))
        if c.wait_stderr("listening on"):
            return c, port
        c.finish()
    pytest.fail(f"ds4tp_demo did not listen after {attempts} ports:\n{c.err}")
