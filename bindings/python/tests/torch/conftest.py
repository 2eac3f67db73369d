"""The torch.distributed backend's tests (harness.py launches the ranks).
ctest installs the package with the extension (DS4TP_TORCH=1) and runs
these through tests/bindings/python_torch.sh, which skips (exit 77) when
PyTorch is not installed; here a missing extension is a failure."""

import pytest

try:
    import torch  # noqa: F401
    import ds4tp.torch  # noqa: F401
except ImportError as e:
    pytest.exit(f"the torch backend tests need PyTorch and ds4tp.torch: {e}", returncode=1)
