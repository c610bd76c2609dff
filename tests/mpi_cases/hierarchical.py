"""The node-aware allreduce (``hierarchical=``) against the flat sum, on any P.

Run with ``python -m mpi4py``; rank 0 prints ``HIERARCHICAL <n> OK``. Node phases through the
shared-memory window, and once as messages (``SPARCML_NODE_SHM=0``). Groupings: MPI's own
(one node on this machine) and ``SPARCML_RANKS_PER_NODE`` = 1, 2, 3 (uneven last nodes, e.g.
P = 5 with 2 per node). For each: every registered inner algorithm, sparse and dense results,
integer values (exact: equal to the dense sum) and random floats, ``out=``, ``iallreduce``.

Equality with the flat sum:
- bitwise where the order of addition is the same: one rank per node (the flat algorithm
  runs); one node (the rank-order sum, which the flat ``allgather`` computes too); and the
  inner algorithms that add the node sums in leader order (``allgather`` and the two split
  algorithms, entry by entry), against that nested rank-order sum;
- allclose otherwise: recursive doubling adds in butterfly order and ``dense`` in MPI's order.
"""

import os
import sys
import zlib

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector
from sparcml._collectives.entry import allreduce_in
from sparcml._runtime.context import context_for
ENV_NODE_SHM, ENV_RANKS_PER_NODE = "SPARCML_NODE_SHM", "SPARCML_RANKS_PER_NODE"

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
ALL = tuple(sparcml.ALGORITHMS)
# the algorithms that add the node sums in leader order (entry by entry)
ORDERED = {"allgather", "ssar_split_allgather", "dsar_split_allgather"}
assert ORDERED <= set(ALL)
cases = 0


def groups(R):
    """The ranks of each node, in order (None: MPI's grouping, one node on this machine)."""
    if R is None:
        return [list(range(P))]
    return [list(range(s, min(s + R, P))) for s in range(0, P, R)]


def nested_sum(dense_all, nodes, dtype):
    """Each node's inputs in rank order, then the nodes in order: the order of the scheme."""
    total = np.zeros(dense_all[0].size, dtype)
    for node in nodes:
        part = np.zeros_like(total)
        for r in node:
            part += dense_all[r]
        total += part
    return total


def inputs(dim, density, dtype, integer, seed):
    rng = np.random.default_rng([seed, rank])
    idx = np.flatnonzero(rng.random(dim) < density)
    if density > 0 and rank == P - 1:
        idx = np.union1d(idx, [0, dim - 1])
    val = (rng.integers(1, 9, idx.size) if integer else rng.standard_normal(idx.size))
    return SparseVector(dim, idx, val.astype(dtype))


def same_everywhere(vec):
    mine = (vec.is_dense, vec.to_dense().tobytes())
    return all(x == mine for x in comm.allgather(mine))


# a sparse result of integers (exact), a dense result of random floats, a sparse one of floats
INPUTS = ((997, 0.01, np.float32, True), (997, 0.7, np.float64, False),
          (4099, 0.002, np.float32, False))


def check_grouping(R, with_auto, inputs_used=INPUTS):
    global cases
    if R is None:
        os.environ.pop(ENV_RANKS_PER_NODE, None)
    else:
        os.environ[ENV_RANKS_PER_NODE] = str(R)
    nodes = groups(R)
    my_node = next(n for n in nodes if rank in n)
    leader = my_node[0] == rank
    trivial = all(len(n) == 1 for n in nodes)
    for dim, density, dtype, integer in inputs_used[:1] if trivial else inputs_used:
        seed = zlib.crc32(repr((R, dim, density, str(dtype), integer)).encode())
        vec = inputs(dim, density, dtype, integer, seed)
        dense_all = comm.allgather(vec.to_dense())
        nested = nested_sum(dense_all, nodes, dtype)
        exact = np.sum(dense_all, axis=0, dtype=np.float64)
        for algorithm in ALL:
            tag = f"[R={R} dim={dim} d={density} {np.dtype(dtype).name} int={integer} " \
                  f"{algorithm} P={P} rank={rank}]"
            stats = sparcml.TrafficStats()
            got = sparcml.allreduce(vec, algorithm=algorithm, hierarchical=True,
                                    stats=stats)
            flat = sparcml.allreduce(vec, algorithm=algorithm)
            assert got.dim == dim and got.dtype == dtype, tag
            assert same_everywhere(got), f"{tag} ranks differ"
            assert not np.shares_memory(got.values, vec.values), tag
            g = got.to_dense()
            if integer:
                assert np.array_equal(g, exact.astype(dtype)), tag
            if trivial:  # one rank per node: the flat algorithm itself, bit for bit
                assert not stats.hierarchical, tag
                assert g.tobytes() == flat.to_dense().tobytes(), tag
                assert got.is_dense == flat.is_dense, tag
            else:
                assert stats.hierarchical and stats.algorithm == algorithm, tag
            if len(nodes) == 1 or algorithm in ORDERED:  # the same order of addition
                assert g.tobytes() == nested.tobytes(), f"{tag} not bitwise"
            else:  # butterfly order (recursive doubling) or MPI's (dense)
                tol = 1e-5 if dtype == np.float32 else 1e-12
                assert np.allclose(g, exact, rtol=tol, atol=tol * P), tag
            if algorithm in ("dense", "dsar_split_allgather"):
                assert got.is_dense, tag
            # traffic: a non-leader only talks to its leader
            if len(my_node) > 1 and not leader:
                assert stats.intra_node_bytes > 0, tag
                assert stats.inter_node_bytes == 0, tag
            if len(my_node) == 1:
                assert stats.intra_node_bytes == 0, tag
            # out=: the same bits, written in full
            buffer = np.full(dim, np.nan, dtype)
            into = sparcml.allreduce(vec, algorithm=algorithm, hierarchical=True,
                                     out=buffer)
            assert into.is_dense and into.values is buffer, f"{tag} out="
            assert buffer.tobytes() == g.tobytes(), f"{tag} out= differs"
            cases += 1
        # non-blocking: the same bits as the blocking call, out= too
        for algorithm in (ALL[0], "dsar_split_allgather") if density == INPUTS[0][1] else ():
            want = sparcml.allreduce(vec, algorithm=algorithm, hierarchical=True)
            buffer = np.full(dim, np.nan, dtype)
            req = sparcml.iallreduce(vec, algorithm=algorithm, hierarchical=True)
            req_out = sparcml.iallreduce(vec, algorithm=algorithm, hierarchical=True,
                                         out=buffer)
            assert req.wait(60).to_dense().tobytes() == want.to_dense().tobytes()
            req_out.wait(60)
            assert buffer.tobytes() == want.to_dense().tobytes()
            cases += 1
    if len(nodes) == 1 or trivial:  # nothing to gain: "auto" runs the flat algorithm
        stats = sparcml.TrafficStats()
        sparcml.allreduce(inputs(101, 0.1, np.float32, True, 9), algorithm=ALL[0],
                          hierarchical="auto", stats=stats)
        assert not stats.hierarchical and stats.algorithm == ALL[0]
        cases += 1
    if not with_auto:
        return
    # auto: any choice, the right sum; "auto" for the flag alone keeps the algorithm. The flat
    # model is the default one (its calibration is tested elsewhere); the node-aware model is
    # calibrated here (the leaders' sub-communicator and the node links)
    context_for(comm).model = sparcml.CostModel()
    vec = inputs(3001, 0.01, np.float32, True, 7)
    exact = np.sum(comm.allgather(vec.to_dense()), axis=0).astype(np.float32)
    for algorithm, option in (("auto", "auto"), ("auto", True), (ALL[1], "auto")):
        ran = []
        # the calls after the first measure the options the models cannot separate, then
        # keep one (sparcml._model.tuning): every call the same choice on every rank, the right sum
        for _ in range(sparcml._model.tuning.EXPLORING_CALLS + 2):
            stats = sparcml.TrafficStats()
            got = sparcml.allreduce(vec, algorithm=algorithm, hierarchical=option, stats=stats)
            assert np.array_equal(got.to_dense(), exact), (algorithm, option)
            assert stats.algorithm in ALL and (algorithm == "auto"
                                               or stats.algorithm == algorithm)
            if option is True and P > 1 and not all(len(n) == 1 for n in nodes):
                assert stats.hierarchical
            assert comm.allgather((stats.algorithm, stats.hierarchical)) == \
                [(stats.algorithm, stats.hierarchical)] * P
            ran.append((stats.algorithm, stats.hierarchical))
        assert len(set(ran[-2:])) == 1, ran
        cases += 1
    # a quantizer: the inner messages quantized, the same estimate everywhere; error feedback
    # sees a non-leader's input unchanged (it travels only inside its node's sum)
    vec = inputs(4099, 0.3, np.float32, False, 11)
    exact = np.sum(comm.allgather(vec.to_dense()), axis=0)
    for algorithm in ALL:
        if not sparcml._collectives.registry.get_algorithm(algorithm).accepts_quantizer:
            continue
        for bits, quantize_sparse, tolerance in ((8, False, 0.1), (2, True, 3.0)):
            sent = []
            ctx = context_for(comm)
            got = allreduce_in(ctx, vec, algorithm=algorithm, hierarchical=True,
                               quantizer=sparcml.QSGD(bits=bits, seed=[3, rank]),
                               quantize_sparse=quantize_sparse, sent=sent)
            assert same_everywhere(got), algorithm
            err = np.linalg.norm(got.to_dense() - exact) / np.linalg.norm(exact)
            assert err < tolerance, (algorithm, bits, err)
            if len(my_node) > 1:
                assert len(sent) == 1, algorithm
                part = sent[0]
                as_dense = part.values if part.is_dense else np.zeros(vec.dim, vec.dtype)
                if not part.is_dense:
                    as_dense[part.indices] = part.values
                assert np.array_equal(as_dense, vec.to_dense()), algorithm
            cases += 1


def check_errors():
    """Bad or disagreeing options raise the same error on every rank; then all goes on."""
    global cases
    vec = inputs(101, 0.1, np.float32, True, 5)
    os.environ.pop(ENV_RANKS_PER_NODE, None)
    bad = [({"hierarchical": True if rank == 0 else False}, sparcml.RankMismatchError),
           ({"hierarchical": "yes" if rank == P - 1 else True}, sparcml.InvalidArgumentError),
           ({"hierarchical": 1 if rank == 0 else True}, sparcml.InvalidArgumentError)]
    for kwargs, error in bad:
        try:
            sparcml.allreduce(vec, **kwargs)
        except error as exc:
            assert "hierarchical" in str(exc) or "rank" in str(exc), exc
        else:
            raise AssertionError(f"no {error.__name__} for {kwargs} on rank {rank}")
        cases += 1
    for value in ("2" if rank == 0 else "3", "two" if rank == P - 1 else "2"):
        os.environ[ENV_RANKS_PER_NODE] = value
        try:
            sparcml.allreduce(vec, hierarchical=True)
        except (sparcml.RankMismatchError, sparcml.InvalidArgumentError) as exc:
            assert ENV_RANKS_PER_NODE in str(exc) or "ranks_per_node" in str(exc), exc
        else:
            raise AssertionError(f"no error for {ENV_RANKS_PER_NODE}={value} on rank {rank}")
        cases += 1
    # an invalid default is an error of every call (flat ones too), on every rank; then the
    # communicator is still usable
    os.environ[ENV_RANKS_PER_NODE] = "nonsense"
    try:
        sparcml.allreduce(vec)
    except sparcml.InvalidOptionError as exc:
        assert f"{ENV_RANKS_PER_NODE}='nonsense'" in str(exc), exc
    else:
        raise AssertionError(f"no error for {ENV_RANKS_PER_NODE}=nonsense on rank {rank}")
    os.environ.pop(ENV_RANKS_PER_NODE)
    assert same_everywhere(sparcml.allreduce(vec, hierarchical=True))


def check_freed_with_the_communicator():
    global cases
    os.environ[ENV_RANKS_PER_NODE] = "2"
    dup = comm.Dup()
    sparcml.allreduce(inputs(50, 0.2, np.float32, True, 1), dup, hierarchical=True)
    ctx = context_for(dup)
    layouts = list(ctx.subcomms.values())
    assert (P == 1) == (not layouts)
    dup.Free()
    assert not ctx.subcomms
    for layout in layouts:
        assert layout.node.comm == MPI.COMM_NULL
        assert layout.leaders is None or layout.leaders.comm == MPI.COMM_NULL
    cases += 1


# forced groupings that differ from one node
GROUPINGS = [None] + [R for R in (1, 2, 3) if R < P]
# auto (calibrations) and the quantizer in two of the jobs: P = 3 (nodes of 2 and 1), P = 6
for R in GROUPINGS:
    check_grouping(R, with_auto=P in (3, 6) and R == 2)
# the node phases as point-to-point messages and a Bcast (what sparcml.sim runs), not through
# the shared-memory window: the same checks
os.environ[ENV_NODE_SHM] = "0"
check_grouping(GROUPINGS[-1], with_auto=False, inputs_used=INPUTS[:2])
os.environ.pop(ENV_NODE_SHM)
if P > 1:
    check_errors()
check_freed_with_the_communicator()
comm.Barrier()
if rank == 0:
    print(f"HIERARCHICAL {cases} OK", flush=True)
sys.exit(0)
