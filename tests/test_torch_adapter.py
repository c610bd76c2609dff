"""sparcml.torch (imports torch): one mpiexec job per process count, many checks in each.

See ``tests/mpi_cases/torch_adapter.py`` for what is checked: the wrapped optimizer without
compression equals plain SGD on the concatenated batch; top-k (+ QSGD) keeps the parameters
bitwise identical on all ranks for every algorithm; the residual of every bucket is exactly
``g + r - sent``; a run resumed from ``state_dict()`` continues bitwise; collective errors.
"""

import sys

import pytest

from mpirun import REPO, run_mpi

pytest.importorskip("torch")

CASE = REPO / "tests" / "mpi_cases" / "torch_adapter.py"
EXPECTED_CHECKS = {1: 232, 2: 236, 3: 212}


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_distributed_optimizer(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASE)], timeout=240,
                   env={"OMP_NUM_THREADS": "1"})
    assert f"TORCH-ADAPTER {EXPECTED_CHECKS[nprocs]} OK" in proc.stdout, proc.stdout + proc.stderr
