"""allreduce(out=...) on one process (COMM_SELF): what is written, and what is refused."""

import numpy as np
import pytest
from mpi4py import MPI

import sparcml
from sparcml import InvalidOutputError, SparseVector


@pytest.mark.parametrize("algorithm", sparcml.ALGORITHMS + ("auto",))
def test_out_receives_every_entry(algorithm):
    vec = SparseVector(10, [2, 7], np.array([1.5, -2.0], np.float32))
    out = np.full(10, np.nan, np.float32)
    got = sparcml.allreduce(vec, MPI.COMM_SELF, algorithm=algorithm, out=out)
    assert got.is_dense and got.values is out
    np.testing.assert_array_equal(out, vec.to_dense())


def test_out_must_fit_and_not_overlap_the_input():
    dense = np.arange(8, dtype=np.float64)
    vec = SparseVector.dense(dense)
    with pytest.raises(InvalidOutputError, match="overlaps the input"):
        sparcml.allreduce(vec, MPI.COMM_SELF, out=dense)
    with pytest.raises(InvalidOutputError, match="NumPy array, got list"):
        sparcml.allreduce(vec, MPI.COMM_SELF, out=[0.0] * 8)
    with pytest.raises(InvalidOutputError, match="8 float64 values"):
        sparcml.allreduce(vec, MPI.COMM_SELF, out=np.empty((2, 4)))
    readonly = np.empty(8)
    readonly.flags.writeable = False
    with pytest.raises(InvalidOutputError, match="writeable"):
        sparcml.allreduce(vec, MPI.COMM_SELF, out=readonly)
    # nothing was written to the input
    np.testing.assert_array_equal(dense, np.arange(8))
