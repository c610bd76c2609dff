"""``sparc-bench --simulate --model-only``: the prediction is the simulator's own charges
replayed without running (:mod:`sparcml.sim._predict`), so it agrees with the simulation of the
same cell (issue 33 item 4: the old analytic path gave 1.3-3.6x the simulated time and 35-40%
fewer bytes). The reference grid at P = 16-256 is ``scripts/model_vs_sim_grid.py``; here a few
cells small enough for the test suite."""

import json

import pytest

import sparcml.sim as sim
from sparcapps.bench.runner import BenchCase
from sparcapps.bench.simulate import _cell, _modeled_row, _simulated_row
from sparcml.sim import _predict

ALGORITHMS = _predict.predicted_algorithms()
NET = "128x94.1gbit,ppn=8,latency=2.1us,intra=98gbit"


def _rows(P, N, density, pattern, net):
    cases = [BenchCase(N, density, pattern, a) for a in ALGORITHMS]
    res = sim.run(P, _cell, network=net, args=(cases, 1, 0, 0, None)).results
    return {a: _simulated_row([r[i] for r in res], N) for i, a in enumerate(ALGORITHMS)}


# P: point-to-point phases (3, 5: not a power of two; 8: intra- and inter-node rounds) and the
# native collectives (16: from Options.native_min_ranks)
@pytest.mark.parametrize("P", [1, 3, 5, 8, 16])
def test_model_only_agrees_with_the_simulation(P):
    net = sim.parse_network(NET)
    for density, pattern in ((0.002, "random"), (0.03, "overlap"), (0.03, "random")):
        N = 1 << 17
        rows = _rows(P, N, density, pattern, net)
        some = rows["ssar_recursive_double"]
        for a in ALGORITHMS:
            simulated, model = rows[a], _modeled_row(a, P, N, "float32", net, some, rows)
            t_sim = simulated["timings"]["allreduce"]["median"]
            t_model = model["timings"]["allreduce"]["median"]
            cell = (P, density, pattern, a, t_model, t_sim)
            assert model["modeled_only"] and model["bytes"]["estimated"]
            assert t_sim / 1.3 <= t_model <= 1.3 * t_sim, cell
            b_sim = simulated["bytes"]["sent_per_rank_max"]
            b_model = model["bytes"]["sent_per_rank_max"]
            if a in ("dense", "allgather") or P == 1:  # the sizes are known: exact
                assert b_model == b_sim, (cell, b_model, b_sim)
            else:  # the encoding of the expected block and round sizes
                assert abs(b_model - b_sim) <= 0.1 * b_sim, (cell, b_model, b_sim)


def test_prediction_follows_compute_scale_and_the_network():
    """Not a constant: the compute part scales with compute_scale, the rest with the links."""
    from sparcml.sim._rates import kernel_rates

    rates = kernel_rates(sim.run)
    kw = dict(P=16, N=1 << 20, k=10_000, K=150_000, rates=rates)
    slow, fast = sim.parse_network("16x1gbit"), sim.parse_network("16x100gbit")
    for a in ALGORITHMS:
        one = _predict.predict(a, network=slow, **kw)
        tenth = _predict.predict(a, network=slow, compute_scale=0.1, **kw)
        assert one.compute > 0 and tenth.compute == pytest.approx(0.1 * one.compute)
        # what overlaps a transfer (the Python of a receive while the bytes stream) or sits
        # inside a collective (the Allreduce's additions) moves the difference either way
        assert tenth.seconds < one.seconds and one.seconds - tenth.seconds > 0.5 * one.compute
        assert _predict.predict(a, network=fast, **kw).seconds < one.seconds, a
    with pytest.raises(ValueError, match="no prediction"):
        _predict.predict("auto", network=slow, **kw)


def test_sparc_bench_model_only_rows_match_simulated_ones(tmp_path):
    """The same cell through the CLI: simulated at P = 16, then every algorithm modeled only
    (sizes estimated: no algorithm simulated) -- within 1.3x, and the records say which."""
    from sparcapps.bench.cli import main

    common = ["--simulate", "16", "--network", NET, "--N", "131072", "--density", "0.01",
              "--pattern", "overlap", "--sim-dense-memory", "100", "--no-model", "--no-progress",
              "--algorithms", *ALGORITHMS]
    a, b = tmp_path / "sim.jsonl", tmp_path / "model.jsonl"
    assert main([*common, "--output", str(a)]) == 0
    assert main([*common, "--model-only", *ALGORITHMS[1:], "--output", str(b)]) == 0

    def rows(path):
        return {r["algorithm"]: r for r in map(json.loads, path.read_text().splitlines())}

    simulated, modeled = rows(a), rows(b)
    assert set(simulated) == set(modeled) == set(ALGORITHMS)
    for name in ALGORITHMS[1:]:
        assert not simulated[name]["metrics"]["modeled_only"]
        assert modeled[name]["metrics"]["modeled_only"]
        ratio = (modeled[name]["timings"]["allreduce"]["median"]
                 / simulated[name]["timings"]["allreduce"]["median"])
        assert 1 / 1.3 <= ratio <= 1.3, (name, ratio)


def test_a_p_modeled_only_is_not_refused_for_the_memory_its_simulation_would_take(tmp_path,
                                                                                  capsys):
    """Every algorithm of P = 20,000 modeled only (the dense baseline past --sim-dense-memory too):
    nothing is simulated at that P, so the size estimate (640 GB for the split algorithms'
    pairs of ranks) does not refuse it; the rows come in seconds."""
    from sparcapps.bench.cli import main

    out = tmp_path / "r.jsonl"
    assert main(["--simulate", "20000", "--N", "1000000", "--density", "0.001",
                 "--pattern", "random", "--no-model", "--no-progress",
                 "--algorithms", *ALGORITHMS, "--model-only", *ALGORITHMS[1:],
                 "--output", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == len(ALGORITHMS) and all(r["metrics"]["modeled_only"] for r in recs)
    assert "estimate" not in capsys.readouterr().err


def _plan_call_seconds(comm, N, algorithm):
    import numpy as np

    import sparcml

    r = comm.Get_rank()
    idx = np.arange(r, N, 97, dtype=np.int32)
    vec = sparcml.SparseVector(N, idx, np.ones(idx.size, np.float32))
    plan = sparcml.plan(N, np.float32, comm, algorithm=algorithm)
    plan.allreduce(vec)  # made and warm
    comm.Barrier()
    t0 = comm.clock()
    plan.allreduce(vec)
    return comm.clock() - t0


@pytest.mark.parametrize("P", [3, 5])
def test_prediction_of_a_plan_call_of_the_dense_baseline(P):
    """``predict("dense", plan=True)``: a plan's call of the dense baseline as simulated (its
    identity check and the error flag's reduction beside MPI_Allreduce), what
    ``sparc-linear --dense-model`` charges per step."""
    net = sim.parse_network("8x1gbit,latency=20us")
    for N in (6001, 1 << 18):
        simulated = max(sim.run(P, _plan_call_seconds, network=net, args=(N, "dense")).results)
        plain = sim.predict("dense", P=P, N=N, k=1, K=N, network=net)
        planned = sim.predict("dense", P=P, N=N, k=1, K=N, network=net, plan=True)
        assert planned.seconds > plain.seconds and planned.bytes == plain.bytes
        assert planned.seconds == pytest.approx(simulated, rel=1e-3), (N, planned, simulated)
