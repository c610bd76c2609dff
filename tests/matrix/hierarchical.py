"""The node-aware allreduce (``hierarchical=``) against the flat sum, on any P (profile
``full``).

Groupings: the communicator's own (MPI's shared-memory nodes: one node under mpiexec on this
machine; the network's nodes on simulated ranks) and ``Options(ranks_per_node=R)`` for
R = 1, 2, 3 (uneven last nodes, e.g. P = 5 with 2 per node); the node phases through the
shared-memory window and once as messages (``node_shm=False``). For each: every registered
inner algorithm, sparse and dense results, integer values (exact: equal to the dense sum) and
random floats, ``out=``, ``iallreduce``; ``auto`` and a quantizer in two of the runs.

Equality with the flat sum:
- bitwise where the order of addition is the same: one rank per node (the flat algorithm
  runs); one node (the rank-order sum, which the flat ``allgather`` computes too); and the
  inner algorithms that add the node sums in leader order (``allgather`` and the two split
  algorithms, entry by entry), against that nested rank-order sum;
- allclose otherwise: recursive doubling adds in butterfly order and ``dense`` in MPI's order.

Real ranks only: options that come from environment defaults (simulated ranks share one
process environment) and the release of the node communicators with their communicator.
"""

import os
import zlib

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector
from sparcml._collectives.entry import allreduce_in
from sparcml._registry import get_algorithm
from sparcml._model.tuning import EXPLORING_CALLS
from sparcml._runtime.context import context_for

from . import Case

ENV_RANKS_PER_NODE = "SPARCML_RANKS_PER_NODE"
ALL = tuple(sparcml.ALGORITHMS)
# the algorithms that add the node sums in leader order (entry by entry)
ORDERED = {"allgather", "ssar_split_allgather", "dsar_split_allgather"}
# a sparse result of integers (exact), a dense result of random floats, a sparse one of floats
INPUTS = ((997, 0.01, np.float32, True), (997, 0.7, np.float64, False),
          (4099, 0.002, np.float32, False))


def groups(comm, R):
    """The ranks of each node, in order (None: the communicator's shared-memory nodes)."""
    P = comm.Get_size()
    if R is not None:
        return [list(range(s, min(s + R, P))) for s in range(0, P, R)]
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, comm.Get_rank())
    first = comm.allgather(min(node.allgather(comm.Get_rank())))
    node.Free()
    return [[r for r in range(P) if first[r] == f] for f in sorted(set(first))]


def nested_sum(dense_all, nodes, dtype):
    """Each node's inputs in rank order, then the nodes in order: the order of the scheme."""
    total = np.zeros(dense_all[0].size, dtype)
    for node in nodes:
        part = np.zeros_like(total)
        for r in node:
            part += dense_all[r]
        total += part
    return total


def inputs(comm, dim, density, dtype, integer, seed):
    rank, P = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([seed, rank])
    idx = np.flatnonzero(rng.random(dim) < density)
    if density > 0 and rank == P - 1:
        idx = np.union1d(idx, [0, dim - 1])
    val = (rng.integers(1, 9, idx.size) if integer else rng.standard_normal(idx.size))
    return SparseVector(dim, idx, val.astype(dtype))


def bits(vec):
    return vec.is_dense, vec.to_dense().tobytes()


def grouping(comm, check, R, with_auto, node_shm=True, inputs_used=INPUTS):
    rank, P = comm.Get_rank(), comm.Get_size()
    opts = sparcml.Options(ranks_per_node=R, node_shm=node_shm)
    nodes = groups(comm, R)
    my_node = next(n for n in nodes if rank in n)
    leader = my_node[0] == rank
    trivial = all(len(n) == 1 for n in nodes)
    for dim, density, dtype, integer in inputs_used[:1] if trivial else inputs_used:
        seed = zlib.crc32(repr((R, dim, density, str(dtype), integer)).encode())
        vec = inputs(comm, dim, density, dtype, integer, seed)
        dense_all = comm.allgather(vec.to_dense())
        nested = nested_sum(dense_all, nodes, dtype)
        exact = np.sum(dense_all, axis=0, dtype=np.float64)
        for algorithm in ALL:
            tag = f"[dim={dim} d={density} {np.dtype(dtype).name} int={integer} {algorithm}]"
            stats = sparcml.TrafficStats()
            got = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                    stats=stats, options=opts)
            flat = sparcml.allreduce(vec, comm, algorithm=algorithm, options=opts)
            check(got.dim == dim and got.dtype == dtype, f"{tag} shape")
            check.same(bits(got), tag)
            check(not np.shares_memory(got.values, vec.values), f"{tag} shares the input")
            g = got.to_dense()
            if integer:
                check(np.array_equal(g, exact.astype(dtype)), f"{tag} not the exact sum")
            if trivial:  # one rank per node: the flat algorithm itself, bit for bit
                check(not stats.hierarchical, f"{tag} ran node-aware with one rank per node")
                check(bits(got) == bits(flat), f"{tag} not the flat bits")
            else:
                check(stats.hierarchical and stats.algorithm == algorithm, f"{tag} stats")
            if len(nodes) == 1 or algorithm in ORDERED:  # the same order of addition
                check(g.tobytes() == nested.tobytes(), f"{tag} not bitwise the nested sum")
            else:  # butterfly order (recursive doubling) or MPI's (dense)
                tol = 1e-5 if dtype == np.float32 else 1e-12
                check(np.allclose(g, exact, rtol=tol, atol=tol * P), f"{tag} not the sum")
            if algorithm in ("dense", "dsar_split_allgather"):
                check(got.is_dense, f"{tag} sparse")
            # traffic: a non-leader only talks to its leader
            if len(my_node) > 1 and not leader:
                check(stats.intra_node_bytes > 0 and stats.inter_node_bytes == 0,
                      f"{tag} a non-leader's traffic")
            if len(my_node) == 1:
                check(stats.intra_node_bytes == 0, f"{tag} intra-node bytes of a lone rank")
            # out=: the same bits, written in full
            buffer = np.full(dim, np.nan, dtype)
            into = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                     out=buffer, options=opts)
            check(into.is_dense and into.values is buffer, f"{tag} out=")
            check(buffer.tobytes() == g.tobytes(), f"{tag} out= differs")
        # non-blocking: the same bits as the blocking call, out= too
        for algorithm in (ALL[0], "dsar_split_allgather") if density == INPUTS[0][1] else ():
            want = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                     options=opts)
            buffer = np.full(dim, np.nan, dtype)
            req = sparcml.iallreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                     options=opts)
            req_out = sparcml.iallreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                         out=buffer, options=opts)
            check(req.wait(60).to_dense().tobytes() == want.to_dense().tobytes(),
                  f"iallreduce {algorithm}")
            req_out.wait(60)
            check(buffer.tobytes() == want.to_dense().tobytes(), f"iallreduce out= {algorithm}")
    if len(nodes) == 1 or trivial:  # nothing to gain: "auto" runs the flat algorithm
        stats = sparcml.TrafficStats()
        sparcml.allreduce(inputs(comm, 101, 0.1, np.float32, True, 9), comm, algorithm=ALL[0],
                          hierarchical="auto", stats=stats, options=opts)
        check(not stats.hierarchical and stats.algorithm == ALL[0],
              f"hierarchical='auto' with nothing to gain: {stats.algorithm}")
    if with_auto:
        _auto_and_quantizer(comm, check, opts, nodes, my_node)


def _auto_and_quantizer(comm, check, opts, nodes, my_node):
    """auto: any choice, the right sum; "auto" for the flag alone keeps the algorithm. The
    flat model is the default one (its calibration is tested elsewhere); the node-aware model
    is calibrated here. A quantizer: the inner messages quantized, the same estimate
    everywhere; error feedback sees a non-leader's input unchanged."""
    rank, P = comm.Get_rank(), comm.Get_size()
    context_for(comm).model = sparcml.CostModel()
    vec = inputs(comm, 3001, 0.01, np.float32, True, 7)
    exact = np.sum(comm.allgather(vec.to_dense()), axis=0).astype(np.float32)
    for algorithm, option in (("auto", "auto"), ("auto", True), (ALL[1], "auto")):
        ran = []
        for _ in range(EXPLORING_CALLS + 2):
            stats = sparcml.TrafficStats()
            got = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=option,
                                    stats=stats, options=opts)
            check(np.array_equal(got.to_dense(), exact), f"{algorithm} {option}: not the sum")
            check(stats.algorithm in ALL and (algorithm == "auto"
                                              or stats.algorithm == algorithm),
                  f"{algorithm} {option}: ran {stats.algorithm}")
            if option is True and P > 1 and not all(len(n) == 1 for n in nodes):
                check(stats.hierarchical, f"{algorithm} {option}: flat")
            check.same((stats.algorithm, stats.hierarchical), f"{algorithm} {option}: choice")
            ran.append((stats.algorithm, stats.hierarchical))
        check(len(set(ran[-2:])) == 1, f"{algorithm} {option}: no settled choice {ran}")
    vec = inputs(comm, 4099, 0.3, np.float32, False, 11)
    exact = np.sum(comm.allgather(vec.to_dense()), axis=0)
    for algorithm in ALL:
        if not get_algorithm(algorithm).accepts_quantizer:
            continue
        for n_bits, quantize_sparse, tolerance in ((8, False, 0.1), (2, True, 3.0)):
            sent = []
            got = allreduce_in(context_for(comm), vec, algorithm=algorithm, hierarchical=True,
                               quantizer=sparcml.QSGD(bits=n_bits, seed=[3, rank]),
                               quantize_sparse=quantize_sparse, sent=sent, options=opts)
            check.same(bits(got), f"quantized {algorithm}")
            err = np.linalg.norm(got.to_dense() - exact) / np.linalg.norm(exact)
            check(err < tolerance, f"quantized {algorithm} {n_bits} bits: error {err}")
            if len(my_node) > 1:
                if check(len(sent) == 1, f"quantized {algorithm}: {len(sent)} sent"):
                    part = sent[0]
                    as_dense = part.values if part.is_dense else np.zeros(vec.dim, vec.dtype)
                    if not part.is_dense:
                        as_dense[part.indices] = part.values
                    check(np.array_equal(as_dense, vec.to_dense()),
                          f"quantized {algorithm}: the memory saw another input")


def _outcome(comm, fn):
    try:
        fn()
    except sparcml.SparcmlError as exc:
        return comm.allgather((type(exc).__name__, str(exc)))
    return comm.allgather(("no exception", ""))


def disagreeing_arguments(comm, check):
    """A flag or ranks_per_node that differs on one rank: the same error on every rank; then
    the communicator goes on."""
    rank, P = comm.Get_rank(), comm.Get_size()
    vec = inputs(comm, 101, 0.1, np.float32, True, 5)
    bad = [("hierarchical", {"hierarchical": rank == 0}, "RankMismatchError"),
           ("hierarchical", {"hierarchical": "yes" if rank == P - 1 else True},
            "InvalidArgumentError"),
           ("hierarchical", {"hierarchical": 1 if rank == 0 else True}, "InvalidArgumentError"),
           ("ranks_per_node", {"hierarchical": True, "options": sparcml.Options(
               ranks_per_node=2 if rank == 0 else 3)}, "RankMismatchError")]
    for field, kwargs, error in bad:
        got = _outcome(comm, lambda: sparcml.allreduce(vec, comm, **kwargs))
        check(all(g[0] == error and field in g[1] for g in got), f"{field}: {got}")
    check.same(bits(sparcml.allreduce(vec, comm, hierarchical=True)), "after the errors")


def environment_defaults(comm, check):
    """SPARCML_RANKS_PER_NODE that differs on one rank, or is not a number: the same error on
    every rank (an invalid default is an error of flat calls too); then all goes on."""
    rank, P = comm.Get_rank(), comm.Get_size()
    vec = inputs(comm, 101, 0.1, np.float32, True, 5)
    old = os.environ.get(ENV_RANKS_PER_NODE)
    try:
        for value in ("2" if rank == 0 else "3", "two" if rank == P - 1 else "2"):
            os.environ[ENV_RANKS_PER_NODE] = value
            got = _outcome(comm, lambda: sparcml.allreduce(vec, comm, hierarchical=True))
            check(all(g[0] in ("RankMismatchError", "InvalidOptionError")
                      and (ENV_RANKS_PER_NODE in g[1] or "ranks_per_node" in g[1])
                      for g in got), f"{ENV_RANKS_PER_NODE}={value} on one rank: {got}")
        os.environ[ENV_RANKS_PER_NODE] = "nonsense"
        got = _outcome(comm, lambda: sparcml.allreduce(vec, comm))
        check(all(g[0] == "InvalidOptionError" and f"{ENV_RANKS_PER_NODE}='nonsense'" in g[1]
                  for g in got), f"{ENV_RANKS_PER_NODE}=nonsense: {got}")
    finally:
        if old is None:
            os.environ.pop(ENV_RANKS_PER_NODE, None)
        else:
            os.environ[ENV_RANKS_PER_NODE] = old
    check.same(bits(sparcml.allreduce(vec, comm, hierarchical=True)), "after the errors")


def freed_with_the_communicator(comm, check):
    """The node and leader communicators of a duplicate are freed with it."""
    P = comm.Get_size()
    dup = comm.Dup()
    sparcml.allreduce(inputs(comm, 50, 0.2, np.float32, True, 1), dup, hierarchical=True,
                      options=sparcml.Options(ranks_per_node=2))
    ctx = context_for(dup)
    layouts = list(ctx.subcomms.values())
    check((P == 1) == (not layouts), f"{len(layouts)} layouts at P={P}")
    dup.Free()
    check(not ctx.subcomms, "subcommunicators kept after Free")
    for layout in layouts:
        check(layout.node.comm == MPI.COMM_NULL, "node communicator not freed")
        check(layout.leaders is None or layout.leaders.comm == MPI.COMM_NULL,
              "leaders' communicator not freed")


def cases(profile, P, simulated):
    if profile != "full":
        raise ValueError(f"hierarchical: unknown profile {profile!r}")
    groupings = [None] + [R for R in (1, 2, 3) if R < P]
    # auto (calibrations) and the quantizer in two of the runs: P = 3 (nodes of 2 and 1), 6
    out = [Case(f"grouping {'mpi' if R is None else R} per node", grouping,
                {"R": R, "with_auto": P in (3, 6) and R == 2}) for R in groupings]
    last = "mpi" if groupings[-1] is None else groupings[-1]
    out.append(Case(f"grouping {last} per node, node phases as messages", grouping,
                    {"R": groupings[-1], "with_auto": False, "node_shm": False,
                     "inputs_used": INPUTS[:2]}))
    if P > 1:
        out.append(Case("disagreeing arguments", disagreeing_arguments))
        if not simulated:
            out.append(Case("environment defaults", environment_defaults))
    if not simulated:
        out.append(Case("freed with the communicator", freed_with_the_communicator))
    return out
