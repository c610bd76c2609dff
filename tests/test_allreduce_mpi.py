"""Multi-rank tests of sparcml.allreduce that need real processes: an uncaught error ends the
job, exit with requests in flight. The correctness matrix and bad input run on real and
simulated ranks in tests/test_matrix.py."""

import sys

import pytest

from mpirun import REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", [["-m", "mpi4py"], []], ids=["python-m-mpi4py", "wrapper"])
def test_an_uncaught_error_on_one_rank_ends_the_job(launcher):
    script = str(CASES / "uncaught.py")
    args = [sys.executable, *launcher, script] + ([] if launcher else ["wrapper"])
    proc = run_mpi(3, args=args, timeout=60, check=False)
    assert proc.returncode != 0
    assert "UNREACHABLE" not in proc.stdout
    assert "unsorted index 1 at position 1" in proc.stderr


@pytest.mark.mpi
def test_exit_with_requests_never_waited_for_is_clean():
    code = """
        import numpy as np, sparcml
        v = sparcml.SparseVector(100, [1, 2], np.ones(2))
        requests = [sparcml.iallreduce(v) for _ in range(20)]
        print("LEAVING", flush=True)
    """
    proc = run_mpi(3, code, timeout=60)
    assert proc.stdout.count("LEAVING") == 3
