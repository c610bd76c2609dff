"""What the scaling studies found in the simulator: the simulated ``auto``'s model charges
sparcml's software per message (so it stops choosing the split algorithms' P - 1 messages
where they lose). (The garbage-collection finding is tested in ``test_sim.py``.)"""

import pytest

import sparcml.sim as sim
from sparcml import Options
from sparcml.sim import network_cost_model, parse_network
from sparcml.sim._model import message_overhead


def test_simulated_cost_model_charges_software_per_message(monkeypatch):
    # the local merge and add rates are measured on this machine; under load they grow until
    # the merges of recursive doubling outweigh the messages this test is about: fix them at
    # a quiet 2-core machine's figures (measured: 7.7e-9 s per merged item, 5.9e-10 s per add)
    import sparcml.sim._model as sim_model
    monkeypatch.setattr(sim_model, "_local_rates", lambda: (7.7e-9, 5.9e-10))
    net = parse_network("64x10gbit,latency=5us")
    assert network_cost_model(net, 16, overhead=2e-4, factors=False).alpha == pytest.approx(
        5e-6 + 2e-4)
    o = message_overhead(net.text)  # measured in the simulator: sparcml's Python per message
    assert 0 < o < 0.01
    assert network_cost_model(net, 16, factors=False).alpha == pytest.approx(5e-6 + o)
    # with it, the P - 1 small messages of the split algorithms cost what they cost: at
    # 4,096 of 16M nonzeros per rank on 1,024 ranks, 1,023 point-to-point messages of ~4 items
    # each lose to 10 rounds of recursive doubling (0.126 s against 0.083 s); with the link
    # latency alone (5 us) they would not (0.023 s). (At 0.1% the sum fills in and recursive
    # doubling's dense rounds lose either way.) The point-to-point path is forced: by default
    # from 16 ranks the phase is one Alltoallv, whose P - 1 messages MPI posts, and o no longer
    # multiplies them.
    shape = dict(P=1024, N=1 << 24, k=1 << 12)
    big = net.text.replace("64x", "1024x")
    with_o = network_cost_model(big, 1024, overhead=1e-4, part_overhead=5e-6, factors=False)
    without = network_cost_model(big, 1024, overhead=0.0, part_overhead=5e-6, factors=False)
    p2p_options = Options(native_min_ranks=2**31 - 1)
    for model, split_loses in ((with_o, True), (without, False)):
        split = model.predict("ssar_split_allgather", options=p2p_options, **shape)
        rd = model.predict("ssar_recursive_double", options=p2p_options, **shape)
        assert (split > rd) == split_loses
    p2p = with_o.predict("ssar_split_allgather", options=p2p_options, **shape)
    native = with_o.predict("ssar_split_allgather", **shape)
    assert native < p2p - 1023 * 1e-4 + 1024 * 5e-6 + 1e-3


def test_simulated_model_adds_each_algorithms_measured_residual_and_scale():
    from sparcml._registry import algorithm_names
    from sparcml.sim._model import algorithm_factors

    factors = algorithm_factors("4x10gbit", 4)  # measured on 4 simulated ranks
    assert set(factors) == set(algorithm_names(in_auto_only=True))
    for residual, scale in factors.values():
        assert residual >= 0 and 0.25 <= scale <= 8
    shape = dict(P=64, N=1 << 20, k=5000)
    plain = network_cost_model("64x10gbit", 64, overhead=1e-4, factors=False)
    fixed = {name: (2e-3, 1.0) for name in factors}
    doubled = {name: (0.0, 2.0) for name in factors}
    for name in factors:
        analytic = plain.predict(name, **shape)
        with_residual = network_cost_model("64x10gbit", 64, overhead=1e-4, factors=fixed)
        assert with_residual.predict(name, **shape) == pytest.approx(analytic + 2e-3)
        tiny = plain.analytic(name, P=64, N=1024, k=1, K=64)
        with_scale = network_cost_model("64x10gbit", 64, overhead=1e-4, factors=doubled)
        assert with_scale.predict(name, **shape) == pytest.approx(2 * analytic - tiny)


def test_allgather_cost_merges_sparse_inputs_even_when_their_sum_is_dense():
    """arith.fold_parts merges P sparse streams (P k log P work) unless a part is dense; the
    cost model charged a dense add once P k passed N / 2, and auto chose allgather at P = 512,
    0.1% of 16M, where the simulator took 840 ms (split allgather: 293 ms)."""
    import math

    from sparcml._model.costmodel import CostModel

    model = CostModel()
    P, N, k = 512, 1 << 24, 16777  # P k = 8.6M > N / 2: the sum is dense, the inputs are not
    merge = model.gamma_merge * P * k * math.log2(P)
    assert model.predict("allgather", P=P, N=N, k=k) > merge
