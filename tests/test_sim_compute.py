"""``sparcml.sim.run(compute=...)``: compute charged from calibrated kernel rates (the default,
deterministic under machine load) or measured; the rate cache; ``sparc-bench --simulate``'s
``--sim-compute``, ``--progress`` and its marks for a dense row that is modeled only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim
from sparcapps.bench import cli
from sparcml.sim import _rates


def _cell(comm, N, density, algorithm):
    """One allreduce of a random input (seeded by rank); the slowest rank's modeled time."""
    rng = np.random.default_rng(comm.Get_rank())
    k = max(1, int(N * density))
    idx = np.sort(rng.choice(N, k, replace=False)).astype(np.int32)
    vec = sparcml.SparseVector(N, idx, rng.standard_normal(k).astype(np.float32))
    comm.Barrier()
    t0 = comm.clock()
    sparcml.allreduce(vec, comm, algorithm=algorithm)
    return comm.clock() - t0


def _busy(n):
    """``n`` busy-loop processes (the background load of a test); stop them with _stop."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


@pytest.mark.parametrize("algorithm", ["ssar_split_allgather", "dense"])
def test_modeled_compute_agrees_under_load(algorithm):
    """P = 16, N = 2^18, 1%: two runs, one with two busy loops beside it, within 5%."""
    args = (1 << 18, 0.01, algorithm)
    quiet = sim.run(16, _cell, args=args, compute="model")
    load = _busy(2)
    try:
        loaded = sim.run(16, _cell, args=args, compute="model")
    finally:
        _stop(load)
    assert quiet.extra["compute"] == loaded.extra["compute"] == "model"
    a, b = max(quiet.results), max(loaded.results)
    assert a > 0 and b > 0
    assert abs(a - b) <= 0.05 * max(a, b), (a, b)


def test_measured_compute_runs():
    r = sim.run(5, _cell, args=(1 << 12, 0.05, "ssar_split_allgather"), compute="measured")
    assert r.extra["compute"] == "measured" and "rates" not in r.extra
    assert max(r.results) > 0 and max(r.compute) > 0


def test_bad_compute_mode_is_refused():
    with pytest.raises(sparcml.InvalidArgumentError, match="compute must be one of"):
        sim.run(2, _cell, args=(64, 0.1, "ssar_recursive_double"), compute="thread")


def _fake_rates(**over):
    rates = {name: 1e-12 for name in _rates.KERNELS}
    rates.update(over)
    return rates


def test_modeled_compute_is_rates_times_work(monkeypatch):
    """With every rate but the per-call one negligible, a rank's compute is its calls times
    that rate; raising the add rate raises the compute by the work of the adds."""
    monkeypatch.setattr(_rates, "_rates", _fake_rates(call=1e-3))
    r = sim.run(4, _cell, args=(1 << 12, 0.05, "ssar_recursive_double"))
    assert r.extra["rates"]["call"] == 1e-3
    for compute, calls in zip(r.compute, r.extra["calls"]):
        assert calls > 0
        assert compute == pytest.approx(calls * 1e-3, rel=1e-3)
    monkeypatch.setattr(_rates, "_rates", _fake_rates(call=1e-3, add=1e-6))
    r2 = sim.run(4, _cell, args=(1 << 12, 0.05, "ssar_recursive_double"))
    # two rounds of recursive doubling at P = 4, each an add of >= k + k entries (k = 204)
    extra = [c2 - c for c, c2 in zip(r.compute, r2.compute)]
    assert min(extra) >= 2 * 2 * 204 * 1e-6


def _native_cell(comm, N, density, algorithm, native):
    rng = np.random.default_rng(comm.Get_rank())
    k = max(1, int(N * density))
    idx = np.sort(rng.choice(N, k, replace=False)).astype(np.int32)
    vec = sparcml.SparseVector(N, idx, rng.standard_normal(k).astype(np.float32))
    sparcml.allreduce(vec, comm, algorithm=algorithm,
                      options=sparcml.Options(native_min_ranks=native))


@pytest.mark.parametrize("algorithm", ["ssar_split_allgather", "dsar_split_allgather"])
def test_packed_messages_are_charged_per_message_not_per_call(monkeypatch, algorithm):
    """On the collective path a split's P messages are one packed kernel call: a rank pays
    one ``op`` per call and ``encode_part`` / ``decode_part`` per message; on the
    point-to-point path, one ``op`` per message."""
    P = 12
    per_message = 1e-4
    monkeypatch.setattr(_rates, "_rates", _fake_rates(encode_part=per_message,
                                                      decode_part=per_message))
    packed = sim.run(P, _native_cell, args=(1 << 12, 0.05, algorithm, 1))
    # phase 1: P messages written, P read (the ssar's allgathered blocks: P more)
    reads = 2 if algorithm == "ssar_split_allgather" else 1
    for compute in packed.compute:
        assert compute == pytest.approx((1 + reads) * P * per_message, rel=0.05)
    monkeypatch.setattr(_rates, "_rates", _fake_rates(op=per_message))
    one_by_one = sim.run(P, _native_cell, args=(1 << 12, 0.05, algorithm, 10**6))
    for compute in one_by_one.compute:  # >= an encode and a decode per message
        assert compute >= 2 * (P - 1) * per_message
    monkeypatch.setattr(_rates, "_rates", _fake_rates(op=per_message))
    packed_ops = sim.run(P, _native_cell, args=(1 << 12, 0.05, algorithm, 1))
    for compute in packed_ops.compute:  # a few kernel calls, not P of them
        assert compute < P * per_message


def test_rate_cache_ignores_corrupt_and_foreign_files(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "rates.json"
    monkeypatch.setenv("SPARCML_SIM_RATES", str(path))
    calls = []

    def fake_calibrate(run):
        calls.append(1)
        return _fake_rates(call=2e-5)

    monkeypatch.setattr(_rates, "calibrate", fake_calibrate)
    for content in ("{not json", json.dumps({"key": {"machine": "elsewhere"},
                                              "rates": _fake_rates()}),
                    json.dumps({"key": _rates.rates_key(), "rates": {"add": -1.0}}),
                    None):
        if content is None:  # no file
            path.unlink()
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(content)
        _rates._reset_for_tests()
        assert _rates.kernel_rates(sim.run)["call"] == 2e-5
        stored = json.loads(path.read_text())  # rewritten, whole
        assert stored["key"] == _rates.rates_key()
        assert _rates.load_rates(path) == _fake_rates(call=2e-5)
    assert len(calls) == 4
    # a valid file is used as it is: no calibration
    _rates._reset_for_tests()
    _rates.save_rates(path, _fake_rates(call=3e-5))
    assert _rates.kernel_rates(sim.run)["call"] == 3e-5 and len(calls) == 4
    assert not [p for p in path.parent.iterdir() if p.name != path.name]  # no temporary left
    _rates._reset_for_tests()


def test_rate_cache_key_follows_the_kernels_source(tmp_path):
    """A kernel's edit is a new rate: the key holds a digest of every ``*kernels.py`` of the
    package (the version stays 0.1.0 across such edits), which moves with any of them."""
    import shutil

    package = Path(_rates.__file__).resolve().parent.parent
    assert _rates.rates_key()["kernels"] == _rates.kernels_digest(str(package))
    copy = tmp_path / "sparcml"
    for path in package.rglob("*kernels.py"):
        (copy / path.relative_to(package)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy / path.relative_to(package))
    assert _rates.kernels_digest(str(copy)) == _rates.rates_key()["kernels"]
    (copy / "_wire" / "packed_kernels.py").write_text(
        (copy / "_wire" / "packed_kernels.py").read_text() + "\n# edited\n")
    assert _rates.kernels_digest(str(copy)) != _rates.rates_key()["kernels"]
    (copy / "extra_kernels.py").write_text("")  # a new kernel file counts too
    edited = _rates.kernels_digest(str(copy))
    (copy / "extra_kernels.py").unlink()
    assert _rates.kernels_digest(str(copy)) != edited


def test_rate_cache_off_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARCML_SIM_RATES", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_rates, "calibrate", lambda run: _fake_rates(call=4e-5))
    from sparcml._options import sim_rates_cache_path

    assert sim_rates_cache_path() is None
    _rates._reset_for_tests()
    assert _rates.kernel_rates(sim.run)["call"] == 4e-5
    assert list(tmp_path.iterdir()) == []
    monkeypatch.delenv("SPARCML_SIM_RATES")
    assert sim_rates_cache_path() == str(tmp_path / "sparcml" / "sim-kernel-rates.json")
    _rates._reset_for_tests()


def test_rates_in_use_say_which_calibration_they_are(tmp_path, monkeypatch):
    """What a simulated record carries (sparcml.sim.rates_in_use): the rates charged, when they
    were measured (the cache file's time, kept across processes), and whether they came from
    the cache."""
    path = tmp_path / "rates.json"
    monkeypatch.setenv("SPARCML_SIM_RATES", str(path))
    monkeypatch.setattr(_rates, "calibrate", lambda run: _fake_rates(call=4e-5))
    _rates._reset_for_tests()
    assert "kernels" not in sim.rates_in_use()
    rates = _rates.kernel_rates(sim.run)
    used = sim.rates_in_use()["kernels"]
    assert used["source"] == "calibrated" and used["rates"] == rates
    assert used["measured"] == json.loads(path.read_text())["measured"] != ""
    used["rates"]["call"] = 1.0  # a copy: the caller cannot change what was charged
    assert sim.rates_in_use()["kernels"]["rates"]["call"] == 4e-5
    stored = json.loads(path.read_text())
    stored["measured"] = "2026-01-02T03:04:05Z"
    path.write_text(json.dumps(stored))
    _rates._reset_for_tests()
    _rates.kernel_rates(sim.run)
    again = sim.rates_in_use()["kernels"]
    assert again == {"rates": rates, "measured": "2026-01-02T03:04:05Z", "source": "cache"}
    monkeypatch.setenv("SPARCML_SIM_RATES", "off")
    _rates._reset_for_tests()
    _rates.kernel_rates(sim.run)
    assert sim.rates_in_use()["kernels"]["source"] == "calibrated, not cached"
    _rates._reset_for_tests()


def test_the_suite_calibrates_into_a_folder_of_its_own():
    """conftest.py points every rate cache (kernels, app steps) at a folder of the run's own,
    so rates measured under the suite's load never reach the cache a user's study reads."""
    path = os.environ.get("SPARCML_SIM_RATES")
    assert path is not None
    folder = Path(path).parent
    assert folder.name.startswith("sparcml-test-rates-") and folder.is_dir(), path
    from sparcml.sim._app_rates import _path

    assert Path(_path("linear-step")).parent == folder


def test_calibrated_rates_are_positive_and_finite():
    rates = _rates.calibrate(sim.run)
    assert set(rates) == set(_rates.KERNELS)
    assert all(0 < v < 1 for v in rates.values())


ARGS = ["--N", "100000", "--density", "0.01", "--pattern", "random", "--reps", "1",
        "--warmup", "0", "--algorithms", "dense", "ssar_recursive_double"]


def _table(out):
    """The rows of the sweep's table: (P, algorithm) -> the line's fields after the name."""
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0].isdigit() and fields[1].isdigit():
            rows[(int(fields[0]), fields[4])] = line
    return rows


@pytest.mark.parametrize("compute", ["model", "measured"])
def test_cli_compute_and_progress(tmp_path, capsys, compute):
    out = tmp_path / "r.jsonl"
    assert cli.main(["--simulate", "3", "--network", "3x10gbit", *ARGS, "--sim-compute", compute,
                     "--progress", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if "cell 1/1" in line]
    assert len(progress) == 1 and "P = 3" in progress[0] and "elapsed" in progress[0] \
        and "estimate" in progress[0]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["compute"] for r in recs} == {compute}
    assert {r["config"]["sim_compute"] for r in recs} == {compute}
    assert ("calibrated kernel rates" in captured.out) == (compute == "model")


def test_cli_progress_off(tmp_path, capsys):
    assert cli.main(["--simulate", "2", "--network", "2x10gbit", *ARGS, "--no-progress"]) == 0
    assert "cell 1/1" not in capsys.readouterr().err


def test_cli_bad_compute_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--simulate", "2", *ARGS, "--sim-compute", "fast"])
    assert exc.value.code == 2


def test_modeled_dense_row_is_marked_and_ratios_against_it_too(tmp_path, capsys):
    """A dense row that does not fit is modeled ('~'), the output says it once, and the
    'vs dense' of simulated rows against it is marked; records say both."""
    out = tmp_path / "r.jsonl"
    assert cli.main(["--simulate", "2", "4", "--network", "4x10gbit", *ARGS,
                     "--sim-dense-memory", "0.000001", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert len([line for line in text.splitlines() if line.startswith("note: dense")]) == 1
    rows = _table(text)
    for P in (2, 4):
        dense, sparse = rows[(P, "dense")].split(), rows[(P, "ssar_recursive_double")].split()
        assert dense[5].startswith("~")       # the time column: modeled only
        assert not sparse[5].startswith("~")  # simulated
        assert sparse[-1].startswith("~") and sparse[-1].endswith("x")  # mixed ratio
        assert not dense[-1].startswith("~")
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    for r in recs:
        assert r["metrics"]["dense_modeled_only"] is True
        assert r["metrics"]["speedup_mixed"] is (r["algorithm"] != "dense")


def test_simulated_dense_row_ratios_are_not_marked(tmp_path, capsys):
    assert cli.main(["--simulate", "2", "--network", "2x10gbit", *ARGS]) == 0
    text = capsys.readouterr().out
    assert "note: dense" not in text
    for line in _table(text).values():
        assert not line.split()[-1].startswith("~")


# ---- one timed call per case under modeled compute (issue 33, item 4) ---------------------------
def test_modeled_calls_repeat_the_same_figure():
    """What licenses one timed call: with modeled compute, repetitions of a case give the same
    modeled time (the split algorithms' periodic partition check aside: one small
    ``Allgather`` every ``CHECK_EVERY`` calls, a few percent) and the same bytes."""
    from sparcapps.bench.runner import BenchCase
    from sparcapps.bench.simulate import _cell as bench_cell

    algs = ["dense", "ssar_recursive_double", "allgather", "ssar_split_allgather"]
    cases = [BenchCase(50_000, 0.01, "random", a) for a in algs]
    res = sim.run(5, bench_cell, network="5x10gbit", args=(cases, 4, 0, 0, None)).results
    for i, a in enumerate(algs):
        times = np.max([r[i]["elapsed"] for r in res], axis=0)
        assert len(times) == 4 and times.min() > 0
        if "split" in a:
            assert times.max() <= 1.1 * times.min(), (a, times)
        else:
            # the same to rounding: t1 - t0 on a clock further along
            np.testing.assert_allclose(times, times[0], rtol=1e-9, err_msg=a)


@pytest.mark.parametrize("compute, want", [("model", 1), ("measured", 3)])
def test_modeled_compute_times_one_call_per_case(tmp_path, capsys, compute, want):
    """``--reps 3 --warmup 1`` under modeled compute: one timed call per case, and the records
    and the header say so; measured compute keeps the repetitions."""
    out = tmp_path / "r.jsonl"
    args = [a for a in ARGS if a not in ("--reps", "--warmup", "1", "0")]
    assert cli.main(["--simulate", "3", "--network", "3x10gbit", *args, "--reps", "3",
                     "--warmup", "1", "--sim-compute", compute, "--no-progress",
                     "--output", str(out)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2
    for r in recs:
        assert r["timings"]["allreduce"]["n"] == want
        assert r["config"]["reps"] == want and r["config"]["reps_requested"] == 3
        assert r["config"]["warmup"] == (0 if compute == "model" else 1)
        assert (r["config"]["reps_note"] is not None) == (compute == "model")
    assert ("one timed call per case" in header) == (compute == "model")
