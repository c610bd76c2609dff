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


def _dense_call(comm, N):
    vec = sparcml.SparseVector.dense(np.ones(N, np.float32))
    comm.Barrier()
    t0 = comm.clock()
    sparcml.allreduce(vec, comm, algorithm=sparcml.DENSE_BASELINE)
    return comm.clock() - t0


def test_compute_scale_scales_the_dense_baselines_local_additions():
    """Issue 33: ``--compute-scale`` did not scale the dense baseline's local additions (its
    modeled row, nor a simulated ``Allreduce``), so a near-zero scale biased every sparse /
    dense ratio toward sparse. Now at scale 1e-6 the additions all but vanish from both, and
    the model is what the simulation charges at every scale."""
    from sparcml.sim._collective_cost import allreduce_time
    from sparcml.sim._rates import kernel_rates

    P, N, net = 4, 1 << 20, "4x400gbit"
    nbytes = N * 4
    alpha, beta = sim.parse_network(net).collective_link(range(P))
    wire = allreduce_time(P, nbytes, alpha, beta)  # no additions
    adds = (P - 1) / P * nbytes * kernel_rates(sim.run)["dense_add"]
    assert adds > 0.5 * wire  # large enough for the test to see (a fast network)
    full, _ = sim.dense_allreduce_model(net, P, nbytes)
    tiny, _ = sim.dense_allreduce_model(net, P, nbytes, compute_scale=1e-6)
    assert full == pytest.approx(wire + adds, rel=1e-9)
    assert tiny == pytest.approx(wire + 1e-6 * adds, rel=1e-9)
    runs = {scale: sim.run(P, _dense_call, args=(N,), network=net, compute_scale=scale)
            for scale in (1.0, 1e-6)}
    time = {s: max(r.results) for s, r in runs.items()}
    compute = {s: max(r.compute) for s, r in runs.items()}  # sparcml's Python, the kernels
    # what the simulated call lost beyond its ranks' own compute: the Allreduce's additions
    assert (time[1.0] - time[1e-6]) - (compute[1.0] - compute[1e-6]) == pytest.approx(
        (1 - 1e-6) * adds, rel=1e-6)
    # at the tiny scale: the modeled call plus the agreement check's rounds, no compute
    assert tiny <= time[1e-6] < tiny + 1e-4


def test_sparc_bench_modeled_dense_row_follows_compute_scale(tmp_path):
    import json

    from sparcapps.bench.cli import main

    def dense_ms(scale):
        out = tmp_path / f"r{scale}.jsonl"
        assert main(["--simulate", "4", "--network", "4x10gbit", "--N", "1048576",
                     "--density", "0.01", "--reps", "1", "--algorithms", "dense",
                     "--sim-dense-memory", "0.000001", "--compute-scale", str(scale), "--no-model",
                     "--no-progress", "--output", str(out)]) == 0
        (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
        assert rec["metrics"]["modeled_only"] is True
        return rec["timings"]["allreduce"]["median"]

    from sparcml.sim._collective_cost import allreduce_time
    from sparcml.sim._rates import kernel_rates

    net = sim.parse_network("4x10gbit")
    full, tiny = dense_ms(1.0), dense_ms(1e-6)
    # the row is the whole simulated call (agreement, sparcml's Python, the Allreduce): what
    # shrinks with the scale is its compute, the local additions included
    rates = kernel_rates(sim.run)
    adds = 3 / 4 * (1 << 22) * rates["dense_add"]
    assert full - tiny == pytest.approx((1 - 1e-6) * (adds + 2 * rates["call"]), rel=1e-6)
    alpha, beta = net.collective_link(range(4))
    assert tiny > allreduce_time(4, 1 << 22, alpha, beta)


@pytest.mark.parametrize("kw, match", [({"compute": "fast"}, "compute must"),
                                       ({"compute_scale": 0}, "compute_scale must"),
                                       ({"compute_scale": float("nan")}, "compute_scale must")])
def test_bad_compute_options_name_the_argument(kw, match):
    with pytest.raises(sparcml.InvalidArgumentError, match=match):
        sim.dense_allreduce_model("4x1gbit", 4, 8, **kw)
