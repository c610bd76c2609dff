"""Cost model: the union estimate and its inverse, predictions' shape, the choice."""

import numpy as np
import pytest

from sparcml import ALGORITHMS, CostModel
from sparcml._model.costmodel import overlap_from_result, union_size


def test_union_size_matches_random_supports():
    rng = np.random.default_rng(0)
    dim, k, P = 100_000, 5_000, 6
    union = set()
    for _ in range(P):
        union |= set(rng.choice(dim, k, replace=False).tolist())
    assert union_size(k, P, dim) == pytest.approx(len(union), rel=0.01)
    assert union_size(k, 1, dim) == pytest.approx(k)
    assert union_size(k, P, dim, q=0.0) == pytest.approx(k)   # identical supports
    assert union_size(0, P, dim) == 0.0


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 1.0])
def test_overlap_from_result_inverts_union_size(q):
    dim, k, P = 1_000_000, 2_000, 8
    K = union_size(k, P, dim, q)
    assert overlap_from_result(k, K, P, dim) == pytest.approx(q, abs=1e-6)


def test_predictions_are_positive_and_grow_with_density():
    model = CostModel()
    for algorithm in ALGORITHMS:
        times = [model.predict(algorithm, P=8, N=1 << 20, k=d * (1 << 20))
                 for d in (1e-4, 1e-2, 0.5)]
        assert all(t > 0 for t in times), algorithm
        assert times == sorted(times), algorithm
    with pytest.raises(ValueError, match="unknown algorithm .magic."):
        model.predict("magic", P=2, N=10, k=1)


def test_choice_follows_the_parameters():
    # latency-bound network, tiny inputs: the log P-round butterfly wins
    lat = CostModel(alpha=1e-4, beta=1e-12, allgather_alpha=1e-3, allreduce_alpha=1e-3)
    assert lat.choose(P=16, N=1 << 24, k=100) == "ssar_recursive_double"
    # dense-ish result on a fast network: dense communication of the whole vector wins
    dense = CostModel(alpha=1e-4, beta=1e-11, gamma_merge=1e-8, allreduce_alpha=1e-5,
                      allreduce_beta=1e-12)
    assert dense.choose(P=4, N=1 << 20, k=0.6 * (1 << 20)) == "dense"
    for P in (2, 3, 8):
        chosen = CostModel().choose(P=P, N=1 << 20, k=1000)
        best = min(CostModel().predict(a, P=P, N=1 << 20, k=1000) for a in ALGORITHMS)
        assert CostModel().predict(chosen, P=P, N=1 << 20, k=1000) == best


def test_references():
    refs = CostModel.references(P=4, k=100, K=250)
    assert refs["floor_bytes"] == 150 * 8
    assert refs["rs_ag_bytes"] == pytest.approx(0.75 * 350 * 8)


def test_contenders_are_what_auto_measures_and_the_size_helpers_are_public():
    from sparcml._model import tuning
    from sparcml._model.costmodel import index_bytes, stream_bytes

    model = CostModel()
    shape = {"P": 8, "N": 1 << 20, "k": 5000, "q": 0.5, "s_idx": 4, "s_val": 4}
    ranked = [(model.predict(a, **shape), a) for a in ALGORITHMS
              if sparcml_in_auto(a)]
    assert model.contenders(**shape) == tuning.contenders_of(ranked)
    assert 1 <= len(model.contenders(**shape)) <= tuning.MAX_CONTENDERS
    assert model.contenders(**shape, candidates=["allgather"]) == ["allgather"]
    assert CostModel.union_size is union_size and CostModel.stream_bytes is stream_bytes
    assert CostModel.overlap_from_result is overlap_from_result
    assert CostModel.index_bytes is index_bytes


def sparcml_in_auto(name):
    import sparcml

    return sparcml.get_algorithm(name).in_auto
