"""Issue 36, items 1-2: plans that cannot be crossed, no one-rank failure before the agreement.

The multi-rank cases live in ``tests/mpi_cases/crossed_calls.py`` (plain ``python script.py``,
no ``-m mpi4py``: a hang there would be a hang for users; the timeout turns it into a failed
test); one job per process count runs all of them. The single-rank checks are here.
"""

import re
import sys

import numpy as np
import pytest

import sparcml
from mpirun import REPO, case_report, run_mpi
from sparcml.compression import (COMPRESSORS, CastCompressor, Compression, DGCCompressor,
                                 DGCMemory, TopKCompressor)

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("P", [2, 3, 5])
def test_crossed_calls_and_one_rank_failures_raise_everywhere(P):
    proc = run_mpi(P, args=[sys.executable, str(CASES / "crossed_calls.py")], timeout=500)
    ran = case_report(proc.stdout, "CROSSED")
    # every group ran: crossed plans, the lean path, every compressor of the catalog
    assert "plan/plan vs topk_plan" in ran and "plan/dropped" in ran and "plan/auto nnz" in ran
    assert "lean/SPARCML_PARTITIONS" in ran and "lean/iallreduce wait" in ran
    for name in COMPRESSORS:
        assert f"compression/{name} nan" in ran and f"compression/{name} inf" in ran
    assert "compression/fp16 overflow" in ran
    assert len(ran) == readme_case_count(), (
        f"README's failure semantics says {readme_case_count()} cases, "
        f"crossed_calls.py ran {len(ran)}: update the README")


def readme_case_count() -> int:
    """The number of crossed_calls.py's cases that README's "Failure semantics" states."""
    text = " ".join((REPO / "README.md").read_text().split())
    found = re.findall(r"tests/mpi_cases/crossed_calls\.py`, (\d+) cases at P = 2, 3, 5", text)
    assert len(found) == 1, "README no longer states crossed_calls.py's case count"
    return int(found[0])


@pytest.mark.parametrize("steps", [True, False, np.bool_(True), 1.0, -1, "3"])
def test_dgc_warmup_steps_must_be_an_integer(steps):
    with pytest.raises(sparcml.CompressionError, match="warmup_steps"):
        DGCCompressor(0.1, warmup_steps=steps)


def test_dgc_memory_refuses_nan_before_its_velocity_takes_it():
    mem = DGCMemory(momentum=0.5)
    x = np.ones(8, np.float32)
    mem.compensate(x, "w")
    before = mem.velocity("w").copy()
    bad = x.copy()
    bad[2] = np.nan
    with pytest.raises(sparcml.CompressionError, match="NaN"):
        mem.compensate(bad, "w")
    assert np.array_equal(mem.velocity("w"), before)  # the next step starts from it
    with pytest.raises(sparcml.CompressionError, match="velocity"):
        mem.compensate(np.ones(7, np.float32), "w")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_compression_refuses_nonfinite_input_and_keeps_its_memory(bad):
    from mpi4py import MPI

    comm = MPI.COMM_SELF
    comp = Compression(TopKCompressor(0.25))
    x = np.linspace(-1, 1, 16).astype(np.float32)
    comp.allreduce(x, key="w", comm=comm)
    residual = comp.memory.residual("w").copy()
    y = x.copy()
    y[5] = bad
    with pytest.raises(sparcml.CompressionError, match="(?i)nan|inf"):
        comp.allreduce(y, key="w", comm=comm)
    assert np.array_equal(comp.memory.residual("w"), residual)
    assert np.isfinite(comp.allreduce(x, key="w", comm=comm).to_dense()).all()


def test_fp16_overflow_is_an_error_not_an_inf():
    from mpi4py import MPI

    comp = Compression(CastCompressor("fp16"))
    with pytest.raises(sparcml.CompressionError, match="overflowed"):
        comp.allreduce(np.array([1.0, 70000.0], np.float32), comm=MPI.COMM_SELF)
    got = comp.allreduce(np.array([1.0, 2.0], np.float32), comm=MPI.COMM_SELF).to_dense()
    assert got.tolist() == [1.0, 2.0]
