"""sparcml.sim: the simulated communicator runs sparcml's unchanged algorithms at large P.

- the network spec parser (good specs, actionable errors);
- sharing on and off give the same bits and bytes (every algorithm's correctness at P from 1
  to 1000 is in the test matrix, tests/test_matrix.py, run on simulated and real ranks);
- communicator management the node-aware algorithm needs (Split_type by simulated node,
  Split, Bcast, point-to-point on sub-communicators);
- the virtual clock: a message of n bytes costs alpha + n beta; ranks of one node use the
  faster intra-node link;
- a failing rank fails the run (no hang);
- validation against real mpiexec at P = 2, 4, 8: results bitwise identical, bytes and
  messages per rank identical.
"""

import importlib.util
import os
import pickle
import sys

import numpy as np
import pytest
from mpi4py import MPI

import sparcml
import sparcml.sim as sim
from sparcml._registry import algorithm_names
from sparcml import SparseVector
from sparcml._errors import InvalidArgumentError

from mpirun import MPI_FLAVOR, REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"


def _validation_module():
    spec = importlib.util.spec_from_file_location("sim_validation", CASES / "sim_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- network specs -----------------------------------------------------------------------------
def test_network_spec_parses_the_emulate_vocabulary_and_options():
    net = sim.parse_network("1024x10gbit,ppn=8,intra=100gbit,latency=2us")
    assert (net.nodes, net.ppn) == (1024, 8)
    assert net.bandwidth == pytest.approx(10e9 / 8)
    assert net.intra_bandwidth == pytest.approx(100e9 / 8)
    assert net.latency == pytest.approx(2e-6)
    assert sim.parse_network("4x1gbit").ppn == 1
    assert sim.parse_network("2x12.5gB").bandwidth == pytest.approx(12.5e9)
    assert sim.parse_network(net.text) == net  # the canonical text parses back to the same


@pytest.mark.parametrize("spec, words", [
    ("4gbit", "NODESxRATE"), ("4x1gbits", "rate"), ("4x1gbit,ppn=0", "ppn"),
    ("4x1gbit,latency=2", "time"), ("4x1gbit,speed=3", "unknown option"), ("", "string")])
def test_bad_network_specs_name_the_problem(spec, words):
    with pytest.raises(InvalidArgumentError, match=words):
        sim.parse_network(spec)


def test_too_few_ranks_in_the_network_is_an_error():
    with pytest.raises(InvalidArgumentError, match="fewer than P"):
        sim.run(9, lambda comm: None, network="4x1gbit,ppn=2")


# ---- correctness at large P --------------------------------------------------------------------
def _input(rank, P, dim, density, pattern):
    rng = np.random.default_rng(rank + 17 * P)
    k = max(1, int(round(density * dim)))
    if pattern == "identical":
        idx = np.random.default_rng(P).choice(dim, k, replace=False)
    elif pattern == "disjoint":
        mine = np.arange(rank, dim, P)
        idx = rng.choice(mine, min(k, mine.size), replace=False)
    else:
        idx = rng.choice(dim, k, replace=False)
    idx = np.unique(idx)
    if rank == 0:
        idx = np.union1d(idx, [0])
    if rank == P - 1:
        idx = np.union1d(idx, [dim - 1])
    return SparseVector(dim, idx, rng.integers(1, 5, idx.size).astype(np.float32))


def _matrix_body(comm, cases, algorithms):
    out = []
    for dim, density, pattern in cases:
        vec = _input(comm.Get_rank(), comm.Get_size(), dim, density, pattern)
        for algorithm in algorithms:
            stats = sparcml.TrafficStats()
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=stats)
            out.append((res.is_dense, res.to_dense(), stats.bytes_sent))
    return out


def _check_matrix(P, cases, algorithms, share=True):
    res = sim.run(P, _matrix_body, args=(cases, algorithms), share=share, timeout=600)
    i = 0
    for dim, density, pattern in cases:
        expected = np.zeros(dim, np.float32)
        for r in range(P):
            v = _input(r, P, dim, density, pattern)
            expected[v.indices] += v.values  # small integers: exact in any order
        for algorithm in algorithms:
            tag = f"P={P} {algorithm} d={density} {pattern}"
            first = res.results[0][i]
            assert np.array_equal(first[1], expected), tag
            for r in range(P):
                mine = res.results[r][i]
                assert mine[0] == first[0] and mine[1].tobytes() == first[1].tobytes(), \
                    f"{tag}: rank {r} differs"
            i += 1
    return res


def test_sharing_changes_no_bit_and_no_byte():
    cases = [(3001, 0.02, "random"), (3001, 0.4, "identical")]
    shared = _check_matrix(24, cases, sparcml.ALGORITHMS, share=True)
    alone = _check_matrix(24, cases, sparcml.ALGORITHMS, share=False)
    for a, b in zip(shared.results, alone.results):
        for x, y in zip(a, b):
            assert x[0] == y[0] and x[1].tobytes() == y[1].tobytes() and x[2] == y[2]
    assert shared.wire_bytes == alone.wire_bytes



def test_sharing_changes_no_bit_and_no_byte_when_every_call_is_memoized(monkeypatch):
    """With the size threshold at 0 every encode, sum, decode goes through the provenance memo
    (at benchmark sizes they do; at these sizes they would not): still the same bits."""
    from sparcml.sim import _sharing as sharing

    monkeypatch.setattr(sharing, "SMALL_BYTES", 0)
    cases = [(30011, 0.02, "random"), (30011, 0.4, "identical")]
    shared = _check_matrix(12, cases, sparcml.ALGORITHMS, share=True)
    monkeypatch.undo()
    alone = _check_matrix(12, cases, sparcml.ALGORITHMS, share=False)
    for a, b in zip(shared.results, alone.results):
        for x, y in zip(a, b):
            assert x[0] == y[0] and x[1].tobytes() == y[1].tobytes() and x[2] == y[2]
    assert shared.wire_bytes == alone.wire_bytes


def _memory_body(comm, dim):
    vec = _input(comm.Get_rank(), comm.Get_size(), dim, 0.01, "random")
    res = sparcml.allreduce(vec, comm, algorithm="ssar_recursive_double")
    return res.nnz if not res.is_dense else int(np.count_nonzero(res.values))


def test_recursive_doubling_memory_grows_like_n_plus_p_k_not_p_n(monkeypatch):
    """P = 64 ranks, N = 2^17, density 1% (fills in to ~47%): ranks of a group share their sums
    (with coded indices too: a decoded index array stands for the array the sender encoded),
    so the peak heap stays ~18 dense vectors (most of it the recent sums the memo keeps for
    late ranks), where unshared sums took ~190 (three per rank)."""
    import tracemalloc

    from sparcml.sim import _sharing as sharing

    monkeypatch.setattr(sharing, "SMALL_BYTES", 0)  # the memo path of benchmark sizes
    P, dim = 64, 1 << 17
    dense_bytes = dim * 4
    sim.run(4, _memory_body, args=(dim,))  # compile the kernels first
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        res = sim.run(P, _memory_body, args=(dim,))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(set(res.results)) == 1 and res.results[0] > 0.4 * dim
    assert peak < 40 * dense_bytes, f"peak heap {peak / dense_bytes:.1f} dense vectors at P={P}"


# ---- communicator management for node-aware algorithms ----------------------------------------
def _subcomm_body(comm):
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    leaders = comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, comm.Get_rank())
    x = np.array([float(comm.Get_rank())])
    node.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
    total = np.zeros(1)
    if leaders != MPI.COMM_NULL:
        leaders.Allreduce(x, total, op=MPI.SUM)
        peer = leaders.Get_rank() ^ 1
        if peer < leaders.Get_size():  # point-to-point on a sub-communicator
            req = leaders.Isend(np.array([leaders.Get_rank()], np.int64), peer, 5)
            got = np.empty(1, np.int64)
            leaders.Irecv(got, peer, 5).Wait()
            req.Wait()
            assert got[0] == peer
    node.Bcast(total, root=0)
    gathered = node.allgather(comm.Get_rank())
    return node.Get_size(), node.Get_rank(), gathered, total[0], node.bcast("hi", root=0)


def test_split_type_groups_ranks_by_simulated_node():
    P = 12
    res = sim.run(P, _subcomm_body, network="4x1gbit,ppn=3")
    for r, (size, nrank, gathered, total, word) in enumerate(res.results):
        assert size == 3 and nrank == r % 3
        assert gathered == [3 * (r // 3) + j for j in range(3)]
        assert total == sum(range(P)) and word == "hi"


def _node_aware_body(comm, dim, density, algorithms):
    vec = _input(comm.Get_rank(), comm.Get_size(), dim, density, "random")
    out = []
    for algorithm in algorithms:
        for hierarchical in (False, True):
            stats = sparcml.TrafficStats()
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=hierarchical,
                                    stats=stats)
            out.append((res.to_dense(), stats.bytes_sent, stats.inter_node_bytes,
                        stats.hierarchical))
    return out


@pytest.mark.parametrize("P, spec", [pytest.param(64, "8x10gbit,ppn=8", marks=pytest.mark.slow),
                                     (21, "4x10gbit,ppn=6")])
def test_node_aware_sends_no_more_per_node_than_flat_sends_per_rank(P, spec):
    """Issue 13, item 5 at test size: with R ranks per node, what a node's leader sends off the
    node is no more than what one rank sends in the flat algorithm (the sum of the node's R
    inputs has at most R times one input's entries, but the leaders are P / R), and the result
    is the dense sum on every rank. 21 ranks on nodes of 6: a last node of 3."""
    dim, density = 20011, 0.01
    algorithms = [a for a in algorithm_names(in_auto_only=True) if a != sparcml.DENSE_BASELINE]
    res = sim.run(P, _node_aware_body, args=(dim, density, algorithms), network=spec,
                  timeout=600)
    expected = np.zeros(dim, np.float32)
    for r in range(P):
        v = _input(r, P, dim, density, "random")
        expected[v.indices] += v.values
    ppn = int(spec.split("ppn=")[1])
    leaders = range(0, P, ppn)
    for i, algorithm in enumerate(algorithms):
        flat, aware = 2 * i, 2 * i + 1
        flat_per_rank = max(r[flat][1] for r in res.results)
        per_node = max(res.results[r][aware][2] for r in leaders)
        assert all(res.results[r][aware][3] and not res.results[r][flat][3] for r in range(P))
        assert all(res.results[r][aware][2] == 0 for r in range(P) if r % ppn), algorithm
        assert 0 < per_node <= flat_per_rank, (algorithm, per_node, flat_per_rank)
        for r in range(P):
            assert np.array_equal(res.results[r][flat][0], expected), (algorithm, r)
            assert np.array_equal(res.results[r][aware][0], expected), (algorithm, r)


# ---- the virtual clock -------------------------------------------------------------------------
def _ping(comm, nbytes):
    buf = np.zeros(nbytes, np.uint8)
    # Allocating 10 MB is real compute (milliseconds on a loaded machine: glibc may zero it
    # eagerly) and the simulator charges it; the barrier starts both clocks after it.
    comm.Barrier()
    if comm.Get_rank() == 0:
        sent_at = comm.clock()
        comm.Send(buf, 1, 0)
        return sent_at
    elif comm.Get_rank() == 1:
        comm.Recv(buf, 0, 0)
    return comm.clock()


def test_a_message_costs_alpha_plus_n_beta():
    n = 10_000_000
    inter = sim.run(2, _ping, args=(n,), network="2x1gbit,latency=100us")
    # 10 MB at 125 MB/s = 80 ms, plus 100 us; compute after the barrier is microseconds
    assert inter.results[1] - inter.results[0] == pytest.approx(0.08 + 1e-4, rel=0.01)
    intra = sim.run(2, _ping, args=(n,), network="1x1gbit,ppn=2,intra=80gbit,latency=100us")
    assert intra.results[1] - intra.results[0] == pytest.approx(n / 10e9, abs=2e-4)  # not 80 ms


def _fails(comm):
    if comm.Get_rank() == 3:
        raise ValueError("boom on rank 3")
    comm.Barrier()


def test_a_failing_rank_fails_the_run_without_hanging():
    with pytest.raises(sim.SimulationError, match="rank 3.*boom"):
        sim.run(8, _fails, timeout=60)


# ---- probing a network -------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["4x1gbit,latency=20us",
                                  "3x10gbit,ppn=4,intra=50gbit,latency=3us,intra-latency=1us"])
def test_probing_a_simulated_network_recovers_its_spec(spec):
    """probe_network times with the virtual clock on a simulated communicator: the rates come
    back within 10% (8 MiB exchanges; the simulator discounts its own copy of a message from
    the measured compute, not to the microsecond), the latencies no lower than the spec's and
    at most the Python time of a ping-pong (charged as compute) above it."""
    net = sim.parse_network(spec)
    res = sim.run(net.nodes * net.ppn, lambda c: sim.probe_network(c), network=spec)
    got = res.results[0]
    assert all(r == got for r in res.results)
    assert (got.nodes, got.ppn) == (net.nodes, net.ppn)
    assert got.bandwidth == pytest.approx(net.bandwidth, rel=0.1)
    assert net.latency <= got.latency <= net.latency + 20e-6
    if net.ppn > 1:
        assert got.intra_bandwidth == pytest.approx(net.intra_bandwidth, rel=0.1)
        assert net.intra_latency <= got.intra_latency <= net.intra_latency + 20e-6


@pytest.mark.mpi
def test_sparc_bench_probe_network_prints_a_spec_simulate_accepts():
    exe = os.path.join(os.path.dirname(sys.executable), "sparc-bench")
    proc = run_mpi(2, args=[exe, "--probe-network"], timeout=120)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("--network "))
    net = sim.parse_network(line.split(maxsplit=1)[1])
    assert net.nodes == 1 and net.ppn == 2, line  # one machine: MPI's shared-memory group


# ---- validation against real mpiexec ----------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 4, 8])
def test_simulator_matches_mpiexec_bit_for_bit_and_byte_for_byte(P, tmp_path, monkeypatch):
    # the same index codes on both sides: real ranks on one node would weigh the coding's CPU
    # against shared memory and send raw indices, the simulated ones' links are 1 Gbit/s
    monkeypatch.setenv("SPARCML_INDEX_CODING", "coded")
    out = tmp_path / "real.pkl"
    proc = run_mpi(P, args=[sys.executable, "-m", "mpi4py", str(CASES / "sim_validation.py"),
                            str(out)], timeout=300)
    assert "SIM-VALIDATION" in proc.stdout, proc.stdout + proc.stderr
    real = pickle.loads(out.read_bytes())
    mod = _validation_module()
    simulated = sim.run(P, mod.run_cases, network=f"{P}x1gbit", timeout=300)
    assert len(real) == len(simulated.results[0]) > 10
    for case, (result, per_rank) in real.items():
        dense_baseline = case[4] == sparcml.DENSE_BASELINE
        for r in range(P):
            mine = simulated.results[r][case]
            assert tuple(mine[3:]) == tuple(per_rank[r]), f"{case} rank {r}: bytes, messages"
            if dense_baseline and MPI_FLAVOR != "mpich":  # the simulator adds as MPICH does
                assert np.allclose(np.frombuffer(mine[2], np.dtype(case[3])),
                                   np.frombuffer(result[2], np.dtype(case[3])), atol=1e-5)
            else:
                assert mine[:3] == result, f"{case} rank {r}: result bits"


# ---- sparc-bench --simulate --------------------------------------------------------------------
def test_sparc_bench_simulate_writes_simulated_records(tmp_path, capsys):
    import json

    from sparcapps.bench.cli import main

    out = tmp_path / "sim.jsonl"
    assert main(["--simulate", "4", "9", "--network", "8x1gbit,ppn=2,latency=3us", "--N", "5000",
                 "--density", "0.01", "--reps", "2", "--warmup", "0",
                 "--algorithms", "ssar_recursive_double,auto", "--sim-dense-memory", "0.0001",
                 "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["P"] for r in records}) == [4, 9]
    assert len(records) == 2 * 3  # dense, recursive doubling, auto at each P
    for r in records:
        assert r["simulated"] is True
        assert r["network"] == sim.parse_network("8x1gbit,ppn=2,latency=3us").text
        assert r["bytes"]["sent_per_rank_max"] > 0 and r["timings"]["allreduce"]["median"] > 0
        assert r["ranks_per_node"] == 2 and r["nodes"] == -(-r["P"] // 2)
        # P x N values above --sim-dense-memory: the dense baseline is modeled, and says so
        assert r["metrics"]["modeled_only"] is (r["algorithm"] == sparcml.DENSE_BASELINE)
    assert "~" in capsys.readouterr().out


def test_sparc_bench_network_needs_simulate(capsys):
    from sparcapps.bench.cli import main

    for argv in (["--network", "4x1gbit"], ["--compute-scale", "2"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and "needs --simulate" in capsys.readouterr().err


def test_sparc_bench_network_without_node_count_and_bad_spec(tmp_path, capsys):
    """Issue 23: ``--simulate 4 --network 1gbit`` was a traceback. The node count defaults to
    what the largest P needs (one rank per node, or ppn=R); a bad spec is one line, exit 2."""
    import json

    from sparcapps.bench.cli import main

    out = tmp_path / "sim.jsonl"
    for spec, nodes, ppn in (("1gbit", 5, 1), ("1gbit,ppn=2", 3, 2)):
        assert main(["--simulate", "3", "5", "--network", spec, "--N", "4096", "--density",
                     "0.01", "--reps", "1", "--warmup", "0", "--algorithms",
                     "ssar_recursive_double", "--no-model", "--output", str(out)]) == 0
        records = [json.loads(line) for line in out.read_text().splitlines()]
        out.unlink()
        assert {r["network"] for r in records} == {
            sim.parse_network(f"{nodes}x{spec}").text}, records[0]["network"]
        assert {r["ranks_per_node"] for r in records} == {ppn}
    capsys.readouterr()
    for spec in ("1gbot", "4x1gbit,ppm=2", ""):
        with pytest.raises(SystemExit) as info:
            main(["--simulate", "4", "--network", spec])
        assert info.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("sparc-bench: error: --network: "), err


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), "2"])
def test_compute_scale_must_be_a_positive_number(scale):
    with pytest.raises(InvalidArgumentError, match="compute_scale"):
        sim.run(2, lambda comm: None, compute_scale=scale)


def _burn_cpu(comm, seconds):
    import time

    comm.Barrier()
    t0 = comm.clock()
    start = time.thread_time()
    while time.thread_time() - start < seconds:  # exactly this much thread CPU time
        pass
    comm.Barrier()
    return comm.clock() - t0


def _collect_garbage(comm, heap):
    import gc
    import time

    comm.Barrier()
    t0, cpu0 = comm.clock(), time.thread_time()
    if comm.Get_rank() == 0:
        gc.collect()  # scans every rank's objects: the simulator's heap, not this rank's
    cpu = time.thread_time() - cpu0
    comm.Barrier()
    return comm.clock() - t0, cpu


def test_garbage_collection_is_not_charged_as_compute():
    heap = [[i] for i in range(1_000_000)]  # a large shared heap, as at P = 1,024
    res = sim.run(2, _collect_garbage, args=(heap,), network="2x1tbit,latency=1ns",
                  compute="measured").results
    charged, cpu = res[0]
    assert cpu > 0.01 and charged < 0.2 * cpu, (charged, cpu)


def test_compute_scale_multiplies_the_measured_compute():
    """Compute is the thread CPU time between two calls, times compute_scale."""
    fast = "2x1tbit,latency=1ns"
    for scale in (1.0, 4.0):
        times = sim.run(2, _burn_cpu, args=(0.02,), network=fast, compute_scale=scale,
                        compute="measured").results
        assert all(0.02 * scale <= t < 0.02 * scale * 1.1 + 1e-3 for t in times), (scale, times)


@pytest.mark.mpi
def test_sparc_bench_simulated_bytes_equal_the_real_sweeps(tmp_path):
    """The simulated sweep calls the algorithms in the real sweep's order (first calls, then
    repetitions interleaved), so what the balanced partitions learn between calls, and hence
    every byte, matches ``mpiexec -n 4 sparc-bench`` on the same inputs."""
    import json

    from sparcapps.bench.cli import main

    flags = ["--N", "1000000", "--density", "0.01", "--pattern", "overlap", "random",
             "--reps", "6", "--warmup", "1", "--no-model",
             "--algorithms", "ssar_split_allgather", "ssar_recursive_double", "allgather"]
    real, simulated = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    exe = os.path.join(os.path.dirname(sys.executable), "sparc-bench")
    run_mpi(4, args=[exe, *flags, "--output", str(real)], timeout=180)
    # one node of 4, as mpiexec runs here: the index coding depends on where the ranks are
    assert main(["--simulate", "4", "--network", "1x10gbit,ppn=4", *flags,
                 "--output", str(simulated)]) == 0

    def sent(path):
        return {(r["metrics"]["pattern"], r["algorithm"]): r["bytes"]["sent_per_rank_max"]
                for r in map(json.loads, path.read_text().splitlines())}

    got, expected = sent(simulated), sent(real)
    assert len(expected) == 8 and got == expected


def test_a_rank_that_skips_a_collective_is_a_reported_deadlock():
    """Issue 25 item 3: a simulated rank that skips a collective used to leave the others
    waiting forever; now the run stops within seconds and says which ranks wait where."""
    import time

    def skips(comm):
        v = sparcml.SparseVector(100, np.array([comm.rank]), np.ones(1, np.float32))
        if comm.Get_rank() != 1:
            sparcml.allreduce(v, comm, algorithm="ssar_split_allgather")

    t0 = time.perf_counter()
    with pytest.raises(sim.SimulationError, match="simulated deadlock") as info:
        sim.run(3, skips, timeout=600)
    assert time.perf_counter() - t0 < 60, "found at once, not after the wall timeout"
    msg = str(info.value)
    assert "rank 0 waits in" in msg and "rank 2 waits in" in msg, msg
    assert "rank 1 returned from the simulated function" in msg, msg

    def receives_what_nobody_sends(comm):
        buf = np.empty(4, np.uint8)
        if comm.Get_rank() == 0:
            comm.Recv(buf, source=1, tag=7)

    with pytest.raises(sim.SimulationError, match="rank 0 waits in .*Recv"):
        sim.run(2, receives_what_nobody_sends, timeout=600)
    # and a run that completes is not mistaken for one
    assert sim.run(3, lambda comm: comm.Get_rank()).results == [0, 1, 2]
