"""Multi-rank tests of sparcml.allreduce: one mpiexec job per process count, many cases each."""

import sys

import pytest

from mpirun import REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 7, 8])
def test_every_algorithm_equals_the_dense_sum(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py",
                                 str(CASES / "allreduce_matrix.py")], timeout=300)
    assert "CASES 864 OK" in proc.stdout, proc.stdout + proc.stderr


def test_every_algorithm_equals_the_dense_sum_at_16_ranks():
    """Above 8 ranks for real: 16 processes on this machine's cores (oversubscribed), the
    smaller matrix (``SPARC_MATRIX=small``); P in {64, 256, 1000} run in tests/test_sim.py."""
    proc = run_mpi(16, args=[sys.executable, "-m", "mpi4py", str(CASES / "allreduce_matrix.py")],
                   timeout=600, env={"SPARC_MATRIX": "small"})
    assert "CASES 204 OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("nprocs", [2, 3, 5])
def test_bad_input_raises_the_same_error_on_every_rank(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASES / "bad_input.py")],
                   timeout=180)
    assert "BAD-INPUT 60 OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("launcher", [["-m", "mpi4py"], []], ids=["python-m-mpi4py", "wrapper"])
def test_an_uncaught_error_on_one_rank_ends_the_job(launcher):
    script = str(CASES / "uncaught.py")
    args = [sys.executable, *launcher, script] + ([] if launcher else ["wrapper"])
    proc = run_mpi(3, args=args, timeout=60, check=False)
    assert proc.returncode != 0
    assert "UNREACHABLE" not in proc.stdout
    assert "unsorted index 1 at position 1" in proc.stderr


@pytest.mark.parametrize("nprocs", [1, 2, 3, 5, 8])
def test_nonblocking_and_other_collectives(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASES / "collectives.py")],
                   timeout=240)
    assert "COLLECTIVES 228 OK" in proc.stdout, proc.stdout + proc.stderr


def test_exit_with_requests_never_waited_for_is_clean():
    code = """
        import numpy as np, sparcml
        v = sparcml.SparseVector(100, [1, 2], np.ones(2))
        requests = [sparcml.iallreduce(v) for _ in range(20)]
        print("LEAVING", flush=True)
    """
    proc = run_mpi(3, code, timeout=60)
    assert proc.stdout.count("LEAVING") == 3
