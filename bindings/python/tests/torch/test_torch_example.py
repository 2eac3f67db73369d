"""examples/python/torch_tp.py, the tensor-parallel decoder over Gloo and
over ds4tp: its own checks must hold (ds4tp's logits equal the rank-order
float32 reference bit for bit; with 2 ranks Gloo's equal ds4tp's), on 2
and 4 ranks, with the model cut small to keep the test short."""

import os
import sys

import pytest

from harness import EXAMPLE, QUIET_WAITS, Ranks, start


@pytest.mark.parametrize("n", [2, 4])
def test_example_bit_for_bit(n):
    args = [sys.executable, str(EXAMPLE), "--nproc", str(n), "--tokens", "12", "--layers", "2",
            "--d-model", "128", "--ffn", "256", "--vocab", "512"]
    ranks = Ranks([start(args, env=dict(os.environ, **QUIET_WAITS))], timeout=240).check()
    out = ranks.out[0]
    assert "ds4tp logits == the rank-order float32 reference, bit for bit" in out, ranks.report()
    if n == 2:
        assert "gloo logits == ds4tp logits, bit for bit" in out, ranks.report()
    assert "tokens/s: gloo" in out, ranks.report()
