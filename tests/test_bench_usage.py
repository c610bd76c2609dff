"""Usage errors of ``sparc-bench --simulate`` and ``sparc-data synth`` are one line and exit 2
before any work (issue 25 item 3), and records never hold NaN or Infinity (invalid JSON)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

NINES = "9" * 400


@pytest.mark.parametrize("argv, words", [
    (["--simulate", "4", "--compute-scale", "0"], "--compute-scale: expected a finite number > 0"),
    (["--simulate", "4", "--compute-scale", "nan"], "--compute-scale: expected a finite number"),
    (["--simulate", "4", "--compute-scale", "-1"], "--compute-scale: expected a finite number"),
    (["--simulate", "4", "--sim-dense-memory", "-1"],
     "--sim-dense-memory: expected a finite number > 0"),
    (["--overlap", "-5"], "--overlap: expected a finite number >= 0"),
    (["--simulate", "4", "--network", "2x1gbit"], "2 ranks, fewer than --simulate 4"),
    (["--simulate", "4", "--network", f"4x1gbit,latency={NINES}s"], "is outside 0 to 60 s"),
    (["--simulate", "4", "--network", "4x0.000001bit"], "outside 1 kbit to 1 Pbit"),
    (["--compute-scale", "2"], "--compute-scale needs --simulate"),
    (["--network", "4x1gbit"], "--network needs --simulate"),
])
def test_sparc_bench_usage_errors_are_one_line_exit_2(argv, words, capsys):
    from sparcapps.bench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--N", "1000", "--reps", "1", *argv])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], err
    assert out == "", "nothing printed before the usage error (no table header)"


@pytest.mark.parametrize("argv", [["--scale", "0"], ["--scale", "inf"], ["--rows", "0"],
                                  ["--nnz-per-row", "-2"], ["--features", "0"]])
def test_synth_sizes_must_be_positive(argv, tmp_path, capsys):
    from sparcapps.data.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["synth", "url", "-o", str(tmp_path / "x.h5"), *argv])
    assert exc.value.code == 2
    assert "expected" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_records_hold_no_nan_or_infinity(tmp_path):
    from sparcapps.records import append_record

    path = append_record(tmp_path / "r.jsonl", {
        "a": float("nan"), "b": [float("inf"), 1.5], "c": np.float32("nan"),
        "d": np.int64(3), "e": {"f": -math.inf}})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}")) == {
        "a": None, "b": [None, 1.5], "c": None, "d": 3, "e": {"f": None}}


def test_a_simulation_too_large_for_this_machine_is_refused_at_once(capsys):
    """``--simulate 100000`` grew to 8 GiB in 41 s; now the estimate refuses it first."""
    import time

    from sparcapps.bench.cli import main
    from sparcapps.sim_estimate import estimate

    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(["--N", "1000", "--simulate", "100000", "--reps", "1"])
    assert exc.value.code == 2 and time.perf_counter() - t0 < 30
    out, err = capsys.readouterr()
    assert out == "" and "more than this machine's" in err and "GiB of memory" in err, err
    # the estimate grows with P, and with P^2 for the all-to-all algorithms
    small = estimate(256, [1 << 20], [0.01], ["ssar_recursive_double"])
    split = estimate(256, [1 << 20], [0.01], ["ssar_split_allgather"])
    assert small.bytes < split.bytes < estimate(1024, [1 << 20], [0.01],
                                                 ["ssar_split_allgather"]).bytes
