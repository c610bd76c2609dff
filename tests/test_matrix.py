"""One test matrix (``tests/matrix``): the same multi-rank cases on simulated ranks
(``sparcml.sim.run(P)``, threads in this process) and on real ones (one mpiexec job per
process count, marked ``mpi``). Each side asserts that every case of the list it derives from
the case module ran and none failed (``tests/matrix/harness.py``).

The simulator covers the algorithms at every P cheaply (no process start, kernels compiled
once: the full allreduce matrix at P = 8 takes 17 s of CPU simulated, where one mpiexec job of
3 ranks takes about 50, more than half of it system time of MPICH's polling); mpiexec covers
what only real ranks have (MPI's matching and progress, the shared-memory window of one node)
at fewer process counts.
"""

import pytest

from matrix.harness import run_in_mpiexec, run_in_sim

SMALL_P = (1, 2, 3, 4, 5, 8)
# the fast subset's sample (seconds each): the rest of the small-P runs are marked slow
QUICK = {("allreduce", "small", 3), ("bad_input", "full", 3), ("compression", "full", 2),
         ("partitions", "full", 3), ("hierarchical", "full", 3), ("plans", "full", 3)}
SIMULATED = [(module, "full", P) for P in SMALL_P
             for module in ("allreduce", "collectives", "topk", "compression")]
SIMULATED += [("bad_input", "full", P) for P in SMALL_P if P > 1]  # one rank differs
SIMULATED += [("allreduce", "small", 3)]
SIMULATED += [("partitions", "full", P) for P in (1, 2, 3, 5, 8, 16)]
SIMULATED += [("hierarchical", "full", P) for P in (1, 2, 3, 5, 6)]
SIMULATED += [("plans", "full", P) for P in SMALL_P]  # issue 21: persistent plans


# ---- simulated ranks ---------------------------------------------------------------------------
@pytest.mark.parametrize("module, profile, P", [
    pytest.param(*run, marks=() if run in QUICK else pytest.mark.slow) for run in SIMULATED])
def test_cases_on_simulated_ranks(module, profile, P):
    run_in_sim(P, module, profile, timeout=600)


@pytest.mark.parametrize("P", [1, 2, 3, 5, 16, pytest.param(17, marks=pytest.mark.slow)])
def test_native_and_point_to_point_paths_on_simulated_ranks(P):
    """Issue 21, item 2: the phases that exchange with every rank, through MPI's vector
    collectives and through point-to-point messages, forced either way by
    ``Options.native_min_ranks``: the same bits and bytes (but the size exchange's)."""
    run_in_sim(P, "allreduce", "native", timeout=600)


def test_node_aware_cases_on_simulated_nodes_of_several_ranks():
    """The network's nodes as the communicator's own grouping: 2 nodes of 3 ranks (P = 6) and
    an uneven last node (P = 5)."""
    for P in (6, 5):
        run_in_sim(P, "hierarchical", "full", network="2x10gbit,ppn=3", timeout=600)


@pytest.mark.parametrize("P", [16, pytest.param(64, marks=pytest.mark.slow),
                               pytest.param(256, marks=pytest.mark.slow)])
def test_allreduce_on_many_simulated_ranks(P):
    run_in_sim(P, "allreduce", "large", timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("P", [1000, 999])
def test_allreduce_on_a_thousand_simulated_ranks(P):
    """P = 1000: not a power of two (the fold of recursive doubling); 999: odd."""
    run_in_sim(P, "allreduce", "log-p", timeout=900)


@pytest.mark.parametrize("P", [64, pytest.param(257, marks=pytest.mark.slow)])
def test_topk_allreduce_on_many_simulated_ranks(P):
    run_in_sim(P, "topk", "large", timeout=600)


# ---- real ranks --------------------------------------------------------------------------------
# Timeouts: a deadlock fails one test. On a machine shared by many jobs (load 30 to 100 on 2
# cores) a full matrix at P = 7 took over 600 s; the mpiexec limit stays under pytest's 900 s.
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("P", [1, 3, 5])  # 2, 4, 8: simulated; above 8: 16 real ranks below
def test_allreduce_under_mpiexec(P):
    run_in_mpiexec(P, "allreduce", "full", timeout=850)


@pytest.mark.mpi
@pytest.mark.slow
def test_allreduce_on_16_real_ranks():
    """Above 8 ranks for real: 16 processes on this machine's cores (oversubscribed)."""
    run_in_mpiexec(16, "allreduce", "small", timeout=850)


@pytest.mark.mpi
@pytest.mark.parametrize("P", [1, 2, pytest.param(3, marks=pytest.mark.slow),
                               pytest.param(5, marks=pytest.mark.slow)])
def test_native_and_point_to_point_paths_under_mpiexec(P):
    """MPI's own Alltoall/Alltoallv, Allgatherv, Gather/Gatherv against the point-to-point
    path, on real ranks with the threshold lowered (``Options.native_min_ranks=1``)."""
    run_in_mpiexec(P, "allreduce", "native", timeout=600)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("P", [1, 3, 8])  # 2, 4, 5: simulated
def test_collectives_under_mpiexec(P):
    run_in_mpiexec(P, "collectives", "full", timeout=600)


@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 5])  # 3, 4, 8: simulated
def test_bad_input_under_mpiexec(P):
    run_in_mpiexec(P, "bad_input", "full", timeout=300)


@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 3])
def test_compression_under_mpiexec(P):
    run_in_mpiexec(P, "compression", "full", timeout=300)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("P,shm", [(1, "1"), (3, "1"), (3, "0"), (5, "1"), (8, "1")])
def test_topk_under_mpiexec(P, shm):
    """On one node through the shared-memory window, and (SPARCML_NODE_SHM=0) messages."""
    run_in_mpiexec(P, "topk", "full", timeout=600, env={"SPARCML_NODE_SHM": shm})


@pytest.mark.mpi
@pytest.mark.parametrize("P", [1, 3, 5, 6])  # 2, 8, 16: simulated
def test_node_aware_and_partitions_under_mpiexec(P):
    """One node through the shared-memory window under forced groupings, the environment
    defaults and the release of the node communicators (real ranks only); the balanced cut."""
    run_in_mpiexec(P, "hierarchical", "full", timeout=400)
    run_in_mpiexec(P, "partitions", "full", timeout=400)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("P", [1, 3])  # 2, 4, 5, 8: simulated
def test_plans_under_mpiexec(P):
    """Persistent plans on real ranks: the fast path's own receives, MPI's matching."""
    run_in_mpiexec(P, "plans", "full", timeout=600)
