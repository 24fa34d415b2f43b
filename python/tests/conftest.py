"""python/tests/conftest.py — fixtures of the ctxlab pytest suite (docs/python.md).

The suite imports the ctxlab package from PYTHONPATH (ctest sets BUILD/python, the build tree's
package) or from an installed wheel. `torch_ref` gives the independent PyTorch reference model
of tests/python/ (torch_ref.py, the one pytorch_parity uses) with parity.py's helpers; torch is
required as for pytorch_parity (tests/python/deps.py): missing, the test FAILS, and it is skipped
(printing "SKIP: ..." for .ci/check_skips.py) only where CTXLAB_ALLOW_MISSING lists torch.
`cuda_device` is test_cuda.py's device check: 'cuda', or (a real CUDA build on a machine without
a GPU only) a skip printing "SKIP: no GPU on this machine; ctxlab said: <the library's error>",
which .ci/check_skips.py allows outside the emulator build.
"""

import os
import sys

import pytest

import ctxlab

TESTS_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python")
sys.path.insert(0, os.path.abspath(TESTS_PYTHON))

import deps  # noqa: E402  (tests/python/deps.py: the required-dependency policy)

_allowed_skips = []   # "SKIP: ..." lines, printed uncaptured at the end for .ci/check_skips.py


def pytest_terminal_summary(terminalreporter):
    for line in _allowed_skips:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def torch_ref():
    """(torch, torch_ref, parity) or a failure / an allowed skip when torch does not import."""
    try:
        import torch
        import torch_ref as ref
        import parity
    except ImportError as e:
        why = f"cannot import torch with {sys.executable}: {e}"
        if deps.missing_allowed("torch"):
            _allowed_skips.append(f"SKIP: dependency 'torch' missing, allowed by CTXLAB_ALLOW_MISSING: {why}")
            pytest.skip(why)
        pytest.fail(f"required dependency 'torch' missing: {why} (scripts/setup.sh installs python3-torch; "
                    f"set CTXLAB_ALLOW_MISSING=torch only on a machine that cannot have it)")
    return torch, ref, parity


@pytest.fixture(scope="session")
def cuda_device():
    """'cuda' when this CUDA build can use it; the emulator's device is always there."""
    try:
        ctxlab.Tensor.zeros([1], device="cuda")
    except ctxlab.Error as e:
        if not ctxlab._ctxlab.cuda_emulator and "no CUDA GPU available" in str(e):
            _allowed_skips.append(f"SKIP: no GPU on this machine; ctxlab said: {e}")
            pytest.skip(f"no GPU on this machine; ctxlab said: {e}")
        raise
    return "cuda"
