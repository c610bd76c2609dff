"""sparcml.sim.dense_allreduce_model: the dense baseline's MPI_Allreduce as the simulator
charges it, without running it."""

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim


def test_the_model_is_what_a_simulated_dense_allreduce_is_charged():
    P, N = 4, 1 << 18

    def body(comm):
        vec = sparcml.SparseVector.dense(np.ones(N, np.float32))
        stats = sparcml.TrafficStats()
        comm.Barrier()
        t0 = comm.clock()
        sparcml.allreduce(vec, comm, algorithm=sparcml.DENSE_BASELINE, stats=stats)
        return comm.clock() - t0, stats.bytes_sent

    result = sim.run(P, body, network="4x1gbit")
    seconds, nbytes = sim.dense_allreduce_model("4x1gbit", P, N * 4)
    assert nbytes == result.results[0][1] == 2 * (P - 1) * N * 4 // P
    # the run adds the agreement and the measured compute around the modeled Allreduce
    assert 0.5 * seconds < max(t for t, _ in result.results) < 2 * seconds + 0.01
    assert sim.dense_allreduce_model(sim.parse_network("4x1gbit"), P, N * 4)[0] == seconds
    assert sim.dense_allreduce_model("4x1gbit", 1, N * 4) == (0.0, 0)


@pytest.mark.parametrize("P, nbytes", [(0, 8), (2, -1), (2.0, 8), (True, 8)])
def test_bad_sizes_name_the_argument(P, nbytes):
    with pytest.raises(sparcml.InvalidArgumentError, match="P must|nbytes must"):
        sim.dense_allreduce_model("4x1gbit", P, nbytes)
