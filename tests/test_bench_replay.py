"""sparc-bench --pattern replay: recorded vectors replayed per rank, real and simulated sweeps;
--simulate --model-only."""

import json
import sys

import numpy as np
import pytest

import sparcml
from mpirun import run_mpi
from sparcapps.bench import cli
from sparcapps.bench.inputs import bench_cells, make_input
from sparcapps.bench.replay import ReplayFileError, load_replay, save_replay

DIM = 5000


def _record(path, count=2, seed=0):
    rng = np.random.default_rng(seed)
    vecs = [(rng.choice(DIM, 40 + 10 * j, replace=False), rng.standard_normal(40 + 10 * j))
            for j in range(count)]
    save_replay(path, "toy", DIM, vecs, source="test vectors")
    return vecs


def _union(vecs, P):
    return np.unique(np.concatenate([vecs[r % len(vecs)][0] for r in range(P)])).size


def test_replay_file_round_trip_and_rank_rule(tmp_path):
    path = tmp_path / "toy.npz"
    vecs = _record(path, count=3)
    stream = load_replay(path)
    assert (stream.name, stream.dim, stream.count) == ("toy", DIM, 3)
    assert stream.density == pytest.approx((40 + 50 + 60) / 3 / DIM)
    for rank in range(7):
        v = make_input(DIM, 0.5, "replay", rank, 7, dtype=np.float64, replay=str(path))
        idx, val = vecs[rank % 3]
        order = np.argsort(idx)
        assert np.array_equal(v.indices, idx[order])
        assert np.allclose(v.values, val[order].astype(np.float32))
    cells = bench_cells([100], [0.1], ["random", "replay"], str(path))
    assert cells == [(100, 0.1, "random", "random"),
                     (DIM, stream.density, "replay", "replay:toy")]


def test_replay_errors_are_specific(tmp_path):
    with pytest.raises(ReplayFileError, match="distinct"):
        save_replay(tmp_path / "dup.npz", "x", 10, [(np.array([1, 1]), np.ones(2))])
    np.savez(tmp_path / "other.npz", a=np.ones(3))
    with pytest.raises(ReplayFileError, match="not a replay file"):
        load_replay(tmp_path / "other.npz")
    with pytest.raises(ReplayFileError, match="not found"):
        load_replay(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="needs --replay"):
        bench_cells([10], [0.1], ["replay"], None)
    _record(tmp_path / "toy.npz")
    with pytest.raises(ValueError, match="dimension"):
        make_input(DIM + 1, 0.1, "replay", 0, 2, replay=str(tmp_path / "toy.npz"))


def test_simulated_sweep_replays_and_models_only_where_asked(tmp_path, capsys):
    path, out = tmp_path / "toy.npz", tmp_path / "sim.jsonl"
    vecs = _record(path, count=2)
    assert cli.main(["--simulate", "3", "5", "--network", "8x10gbit", "--pattern", "replay",
                     "--replay", str(path), "--reps", "1", "--warmup", "0",
                     "--algorithms", "ssar_recursive_double", "ssar_split_allgather", "auto",
                     "--model-only", "ssar_split_allgather", "auto", "--model-only-from", "5",
                     "--output", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2 * 4  # P = 3, 5 x (dense, two algorithms, auto)
    for rec in recs:
        assert rec["simulated"] and rec["N"] == DIM
        assert rec["metrics"]["pattern"] == "replay:toy" and rec["metrics"]["replay"] == str(path)
        # rank r replays vector r mod 2: the result's support is the union of both
        assert rec["metrics"]["result_density"] == pytest.approx(_union(vecs, rec["P"]) / DIM)
        modeled = rec["algorithm"] in ("ssar_split_allgather", "auto") and rec["P"] == 5
        assert rec["metrics"]["modeled_only"] == modeled
        if rec["algorithm"] == "auto":  # modeled: a contender's row, its time and bytes
            # the model's choice follows the calibration of this machine, and may be an
            # algorithm outside the sweep (then there is no row to compare with)
            assert rec["metrics"]["ran"] in sparcml.ALGORITHMS
            chosen = [r for r in recs if r["P"] == rec["P"]
                      and r["algorithm"] == rec["metrics"]["ran"]]
            assert not (modeled and chosen) or rec["timings"] == chosen[0]["timings"]
        assert rec["timings"]["allreduce"]["median"] > 0 and rec["bytes"]["sent_per_rank_max"] > 0
    assert "replay:toy" in capsys.readouterr().out


@pytest.mark.mpi
def test_real_sweep_replays_the_same_inputs(tmp_path):
    path, out = tmp_path / "toy.npz", tmp_path / "real.jsonl"
    vecs = _record(path, count=2)
    run_mpi(3, args=[sys.executable, "-m", "sparcapps.bench.cli", "--pattern", "replay",
                     "--replay", str(path), "--reps", "1", "--warmup", "0", "--no-model",
                     "--algorithms", "ssar_recursive_double", "--output", str(out)],
            timeout=180)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["algorithm"] for r in recs] == ["dense", "ssar_recursive_double"]
    rd = recs[1]
    assert rd["N"] == DIM and rd["metrics"]["pattern"] == "replay:toy"
    assert rd["metrics"]["result_density"] == pytest.approx(_union(vecs, 3) / DIM)


def test_report_marks_modeled_only_rows_apart(tmp_path):
    """sparc-report: a row sparc-bench --simulate predicted by its model (``modeled_only``)
    is marked apart from the simulated rows: a line of its own, "(modeled)", with its own
    marker and line style, on the simulated rows' axes (issue 33: not a panel with its own y
    axis); the table names it a source of its own."""
    from sparcapps.report import plotting as pl

    from sparcapps.records import append_record, make_record, summarize
    from sparcapps.report.build import build

    path = tmp_path / "r.jsonl"
    env = {"command": ["sparc-bench", "--simulate", "2", "8"], "launcher": None}
    for P in (2, 8):
        for alg in ("dense", "ssar_split_allgather"):
            modeled = alg == "ssar_split_allgather" and P == 8
            rec = make_record("sparc-bench", config={}, environment=env, P=P, N=1000,
                              density=0.01, algorithm=alg,
                              timings={"allreduce": summarize([1e-3 * P])},
                              metrics={"pattern": "random", "dtype": "float32",
                                       "modeled_only": modeled},
                              bytes={"sent_per_rank": 8 * P})
            rec.update(simulated=True, network="8x10gbit")
            append_record(path, rec)
    md, _, figs = build([path], tmp_path / "out")
    strong = next(f for f in figs if f.id.startswith("strong"))
    assert strong.meta["panel_titles"] == ["simulated (8x10gbit)"]
    lines = {line["label"]: line for line in strong.meta["lines"]}
    assert set(lines) == {"dense", "ssar_split_allgather", "ssar_split_allgather (modeled)"}
    assert lines["ssar_split_allgather (modeled)"]["marker"] == pl.MODELED_MARKER
    assert lines["ssar_split_allgather (modeled)"]["linestyle"] == pl.MODELED_LINESTYLE
    assert "Left out" not in strong.caption
    assert "| simulated (8x10gbit; modeled only) |" in md.read_text()


def test_every_sparse_algorithm_model_only_uses_the_models_sizes(tmp_path):
    """No algorithm simulated (every sparse one --model-only, dense too large): k as the
    input would have it, K the model's expected union; bytes the predictor's."""
    from sparcml._model.costmodel import union_size

    out = tmp_path / "m.jsonl"
    assert cli.main(["--simulate", "64", "--network", "64x10gbit", "--N", "100000",
                     "--density", "0.01", "--pattern", "random", "--sim-dense-memory", "0.000001",
                     "--algorithms", "ssar_recursive_double", "ssar_split_allgather",
                     "allgather", "auto", "--model-only", "ssar_recursive_double",
                     "ssar_split_allgather", "allgather", "auto",
                     "--output", str(out)]) == 0
    recs = {r["algorithm"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert all(r["metrics"]["modeled_only"] for r in recs.values())
    k = 1000
    assert recs["allgather"]["metrics"]["result_density"] == pytest.approx(
        round(union_size(k, 64, 100_000)) / 100_000)
    assert recs["allgather"]["bytes"]["sent_per_rank_max"] > 63 * k * 4  # 63 inputs' values
    # auto: the fastest of its contenders, rows of this run or modeled for it (any algorithm
    # auto may pick, dsar_split_allgather too)
    from sparcml._registry import algorithm_names

    assert recs["auto"]["metrics"]["ran"] in algorithm_names(in_auto_only=True)
    ran = recs.get(recs["auto"]["metrics"]["ran"])
    if ran is not None:
        assert recs["auto"]["timings"] == ran["timings"]
