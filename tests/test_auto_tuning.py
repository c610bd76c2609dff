"""auto's measured refinement (sparcml._model.tuning): the pure bookkeeping, and on the simulator a
cost model that ranks the algorithms wrongly is overruled by measurement (torch-free, one
process)."""


import numpy as np
import pytest

import sparcml
from sparcml import sim
from sparcml._model import tuning
from sparcml._model.costmodel import CostModel

KEY = ("tuning", "flat", 100, 10, 4, 4, False)


def _explore(times: dict, ranked: list, calls: int = 20) -> list:
    """Drive tuning.choose/begin/end/resolve as the entry point does, with measured seconds
    from ``times``; returns what each call ran."""
    state, ran, clock = tuning.TuningState(), [], [0.0]
    for _ in range(calls):
        tuning.resolve(state, tuning.pending_ns(state))
        option = tuning.choose(state, KEY, lambda: ranked)
        tuning.begin(state, clock=lambda: clock[0])
        clock[0] += times.get(option, 0.0)
        tuning.end(state)
        ran.append(option)
    return ran


def test_contenders_within_the_margin_one_try_each_then_the_near_ties_again_then_the_fastest():
    ranked = [(1.0, "a"), (3.9, "b"), (2.0, "c"), (4.1, "far")]   # "far": outside MARGIN
    ran = _explore({"a": 5.0, "b": 1.0, "c": 1.4}, ranked)
    # round 1 in predicted order; round 2 in reverse order: b and c (within RETRY of 1.0),
    # not a (5.0)
    assert ran[:5] == ["a", "c", "b", "b", "c"]
    assert set(ran[5:]) == {"b"}
    assert "far" not in ran


def test_one_slow_try_does_not_rule_an_algorithm_out():
    times = iter([2.0, 5.0, 1.0, 2.1])          # b's first try is slow (cold), its second not
    state, ran = tuning.TuningState(), []
    for _ in range(8):
        tuning.resolve(state, tuning.pending_ns(state))
        option = tuning.choose(state, KEY, lambda: [(1.0, "a"), (1.1, "b")])
        ran.append(option)
        if option is not None and tuning.settled(state, KEY) is None:
            state.measured = (KEY, option, int(next(times) * 1e9))
            state.trial = None
    assert ran[:4] == ["a", "b", "b", "a"] and set(ran[4:]) == {"b"}


def test_a_clear_winner_is_kept_after_one_round_and_one_contender_at_once():
    ran = _explore({"a": 1.0, "b": 3.5}, [(1.0, "a"), (1.1, "b")])
    assert ran[:2] == ["a", "b"] and set(ran[2:]) == {"a"}
    ran = _explore({"a": 1.0}, [(1.0, "a"), (10.0, "b")])
    assert set(ran) == {"a"}


def test_at_most_max_contenders_and_the_bound_on_exploring_calls():
    ranked = [(1.0 + i / 100, f"alg{i}") for i in range(10)]
    ran = _explore({f"alg{i}": 1.0 for i in range(10)}, ranked, calls=30)
    assert len(set(ran)) == tuning.MAX_CONTENDERS
    # the first call of a size is the model's (not here), then at most 2 tries per contender
    assert len(set(ran[tuning.EXPLORING_CALLS - 1:])) == 1


def test_a_time_for_another_option_or_no_time_changes_nothing():
    state = tuning.TuningState()
    assert tuning.choose(state, KEY, lambda: [(1.0, "a"), (1.2, "b")]) == "a"
    state.measured = (KEY, "b", 5)          # not the call in flight
    tuning.resolve(state, 5)
    assert state.shapes[KEY]["times"] == {} and state.shapes[KEY]["plan"] == ["a", "b"]
    tuning.resolve(state, 0)
    assert state.shapes[KEY]["plan"] == ["a", "b"]


def test_shape_key_buckets_nnz_by_sqrt2_and_fill_by_2():
    vec = sparcml.SparseVector(1000, np.arange(10, dtype=np.int32), np.ones(10, np.float32))
    keys = {tuning.shape_key("flat", vec, n, False) for n in (1000, 1100, 1200)}
    assert len(keys) == 1
    assert tuning.shape_key("flat", vec, 1000, False) != tuning.shape_key("flat", vec, 2000,
                                                                         False)
    assert tuning.fill_bucket(None, 10) == -1                 # nothing learnt yet
    assert tuning.fill_bucket(10, 10) == 0                    # full overlap
    assert tuning.fill_bucket(80, 10) == 3                    # disjoint, P = 8


class _Misleading(CostModel):
    """Ranks dense first (it is ~10x slower here), then recursive doubling, then allgather."""
    RANKS = {"dense": 1.0, "ssar_recursive_double": 2.0, "allgather": 3.0}

    def predict(self, algorithm, **_):
        return self.RANKS.get(algorithm, 100.0)


def _workload(comm, calls):
    rng = np.random.default_rng(comm.Get_rank())
    N, k = 1 << 20, 1 << 10                                  # 0.1%, random supports
    vec = sparcml.SparseVector(N, np.sort(rng.choice(N, k, replace=False)).astype(np.int32),
                               rng.standard_normal(k).astype(np.float32))
    sim.use_model(comm, _Misleading())
    want = np.sum(comm.allgather(vec.to_dense()), axis=0, dtype=np.float64)
    ran = []
    for _ in range(calls):
        stats = sparcml.TrafficStats()
        got = sparcml.allreduce(vec, comm, algorithm="auto", stats=stats)
        assert np.allclose(got.to_dense(), want, atol=1e-4)
        ran.append(stats.algorithm)
    fixed = {}
    for name in _Misleading.RANKS:                           # each contender on its own
        times = []
        for _ in range(3):
            comm.Barrier()
            t0 = comm.clock()
            sparcml.allreduce(vec, comm, algorithm=name)
            times.append(comm.clock() - t0)
        fixed[name] = min(times)
    return ran, fixed


@pytest.mark.parametrize("P", [5, 16])
def test_simulated_auto_overrules_a_wrong_model_by_measurement(P):
    calls = tuning.EXPLORING_CALLS + 3
    res = sim.run(P, _workload, args=(calls,), network=f"{P}x10gbit")
    ran, fixed = res.results[0]
    assert all(r[0] == ran for r in res.results), "ranks ran different algorithms"
    assert ran[0] == "dense"                                 # the model's choice, untimed
    assert set(ran[1:1 + 3]) == set(_Misleading.RANKS)      # round 1: every contender
    kept = ran[-1]
    assert set(ran[-3:]) == {kept}
    assert fixed[kept] <= 1.5 * min(fixed.values()), (kept, fixed)  # near-ties: noise
    assert kept != "dense", fixed


def test_simulated_auto_keeps_the_models_choice_with_tuning_off(monkeypatch):
    monkeypatch.setenv("SPARCML_AUTO_TUNING", "0")
    res = sim.run(4, _workload, args=(6,), network="4x10gbit")
    assert all(r[0] == ["dense"] * 6 for r in res.results)


def test_a_full_history_keeps_the_models_choice_instead_of_growing(monkeypatch):
    """An application whose shapes never repeat must not grow auto's memory without bound:
    past the history limit a new shape runs the model's choice, untimed."""
    from sparcml._model import auto

    monkeypatch.setattr(auto, "_HISTORY_LIMIT", 0)
    res = sim.run(4, _workload, args=(6,), network="4x10gbit")
    ran = res.results[0][0]
    assert ran == ["dense"] * 6


class _ByCoding(CostModel):
    """Chooses dense for raw indices, allgather for coded ones."""

    def choose(self, *, options=None, **_):
        return "dense" if options.options.index_coding == "raw" else "allgather"


def _two_codings(comm):
    sim.use_model(comm, _ByCoding())
    N, r = 1 << 16, comm.Get_rank()
    vec = sparcml.SparseVector(N, np.arange(r, N, 64, dtype=np.int32),
                               np.ones(N // 64, np.float32))
    ran = []
    for coding in ("raw", "coded", "raw", "coded"):
        stats = sparcml.TrafficStats()
        sparcml.allreduce(vec, comm, algorithm="auto", stats=stats,
                          options=sparcml.Options(index_coding=coding, auto_tuning=False))
        ran.append(stats.algorithm)
    return ran


def test_auto_remembers_a_choice_per_options():
    """The same shape under other options (another index coding: other message sizes) is
    chosen again, not given the choice remembered for the first options."""
    res = sim.run(3, _two_codings, network="3x10gbit")
    assert all(r == ["dense", "allgather", "dense", "allgather"] for r in res.results), \
        res.results
