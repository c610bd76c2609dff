"""sparcml.torch's device-resident compression (issue 35), tested on CPU tensors with
``device_path=True``: see ``tests/mpi_cases/torch_device_path.py`` for the checks (the same
update as the host path bit for bit, O(k) host copies per step). P = 1 runs in this process;
P = 2 in one mpiexec job."""

import re
import sys

import pytest

from mpirun import REPO, run_mpi

torch = pytest.importorskip("torch")

CASE = REPO / "tests" / "mpi_cases" / "torch_device_path.py"
# 8 compressions x (3 steps x up to 5 checks + parameters + residuals) + the refusal, per rank
MIN_CHECKS = 100


def test_device_path_matches_host_path_at_one_rank():
    from mpi4py import MPI

    sys.path.insert(0, str(CASE.parent))
    try:
        import torch_device_path as case
    finally:
        sys.path.remove(str(CASE.parent))
    assert case.check_all(MPI.COMM_SELF) >= MIN_CHECKS


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2])
def test_device_path_matches_host_path(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASE)], timeout=120,
                   env={"OMP_NUM_THREADS": "1"})
    found = re.search(r"TORCH-DEVICE-PATH (\d+) OK", proc.stdout)
    assert found and int(found.group(1)) >= MIN_CHECKS * nprocs, proc.stdout + proc.stderr
