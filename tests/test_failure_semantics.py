"""Issue 11: one rank's bad argument never hangs the others; a rank that fails inside an
exchange ends the job quickly instead of leaving the others waiting."""

import sys
import time

import pytest

import sparcml
from mpirun import REPO, case_report, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_one_bad_rank_raises_everywhere_without_mpi4py_abort(nprocs):
    # plain `python script.py`, not `-m mpi4py`: a hang here would be a hang for users
    proc = run_mpi(nprocs, args=[sys.executable, str(CASES / "one_bad_rank.py")], timeout=240)
    ran = case_report(proc.stdout, "ONE-BAD-RANK")
    for algorithm in sparcml.ALGORITHMS:  # the per-algorithm cases cover every registered one
        assert f"big-endian {algorithm}" in ran and f"check=False {algorithm}" in ran


@pytest.mark.mpi
@pytest.mark.parametrize("mode,call", [("raise", "blocking"), ("raise", "nonblocking"),
                                       ("kill", "blocking"), ("kill", "nonblocking")])
def test_failure_inside_an_exchange_ends_the_job(mode, call):
    t0 = time.perf_counter()
    proc = run_mpi(4, args=[sys.executable, str(CASES / "fail_in_exchange.py"), mode, call],
                   timeout=120, check=False)
    elapsed = time.perf_counter() - t0
    assert proc.returncode != 0
    if mode == "raise":
        assert "CollectiveFailure" in proc.stderr or "failed during allreduce" in proc.stderr
        assert "injected failure" in proc.stderr
    # start-up of 4 ranks and Numba's cache load dominate; the failure itself ends it at once
    assert elapsed < 60, elapsed
