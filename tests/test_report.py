"""sparc-report: tables whose numbers are the records', plots that are PNG images."""

import json
import re

import pytest

from sparcapps.records import RecordError, append_record, make_record, summarize
from sparcapps.report import build_report, main, rerun_command

PNG = b"\x89PNG\r\n\x1a\n"
ENV = {"hosts": ["n0", "n1"], "python": "3.11", "git_commit": "abc123",
       "command": ["sparc-bench", "--N", "1000"], "mpi_library": "MPICH Version: 5\nmore",
       "slurm": {"SLURM_JOB_ID": "77"}}


def _bench(P, density, alg, median, **metrics):
    samples = [median * 0.9, median, median * 1.3]
    return make_record("sparc-bench", config={"pattern": "random", "dtype": "float32"},
                       environment={**ENV, "hosts": [f"n{i}" for i in range(P)]}, P=P, N=1000,
                       density=density, algorithm=alg, timings={"allreduce": summarize(samples)},
                       metrics=metrics, bytes={"sent_per_rank": 8 * P})


@pytest.fixture
def sweep(tmp_path):
    """A small sweep: P x density x algorithm, plus an app, a failure, and two bad lines."""
    path = tmp_path / "sweep.jsonl"
    expected = {}
    for P in (2, 4, 8):
        for d in (0.001, 0.01):
            dense_t = 0.01 * P
            append_record(path, _bench(P, d, "dense", dense_t, model_seconds=dense_t * 0.7))
            t = 0.001 * P * (1 + 100 * d)
            # the model as sparc-bench writes it, for one algorithm; flat keys for dense
            append_record(path, _bench(P, d, "ssar_split_allgather", t,
                                       model={"predicted_s": t * 0.8, "floor_s": t * 0.3,
                                              "rs_ag_s": t * 0.5}))
            expected[(P, d, "ssar_split_allgather")] = (t, dense_t / t)
            expected[(P, d, "dense")] = (dense_t, 1.0)
            # allgather carries its own speedup, which the report must show as recorded
            append_record(path, _bench(P, d, "allgather", 2 * t, speedup_over_dense=1.2345))
            expected[(P, d, "allgather")] = (2 * t, 1.2345)
    epochs = [{"epoch": e, "wall_seconds": 1.5 * e, "loss": 1 / e, "test_accuracy": 0.5 + e / 10}
              for e in (1, 2, 3)]
    append_record(path, make_record("sparc-linear", config={"bits": 4,
                                                            "no_error_feedback": True},
                                    environment=ENV, P=2,
                                    algorithm="ssar_split_allgather", density=0.01,
                                    metrics={"epochs": epochs}))
    append_record(path, make_record("sparc-bench", config={"command": ["mpiexec", "sparc-bench"]},
                                    environment=ENV, P=4, status="failed",
                                    error="mpiexec exited with status 9\nkilled"))
    with open(path, "a") as fh:
        fh.write('{"schema": 1, "app": "sparc-bench", "status": "ok", "timings": {"allreduce": \n')
        fh.write(json.dumps(_bench(2, 0.5, "dense", 1e9))[:-40])  # partial: writer died
    return path, expected


def _table(md, heading):
    """Rows (dicts) of the first Markdown table after ``heading``."""
    section = md.split(heading + "\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("|"))
    lines = []
    for line in section[start:]:
        if not line.startswith("|"):
            break
        lines.append([c.strip() for c in line.strip("|").split("|")])
    return [dict(zip(lines[0], cells)) for cells in lines[2:]]


def test_report_tables_match_records(sweep, tmp_path):
    path, expected = sweep
    md_path, problems = build_report([path], tmp_path / "out")
    md = md_path.read_text()
    # the two bad lines are skipped and named by file:line
    assert [p.line for p in problems] == [21, 22]  # 18 bench + app + failure, then 2
    assert f"{path}:21" in md and f"{path}:22" in md
    assert "1e+09" not in md
    rows = _table(md, "## Collectives")
    assert len(rows) == len(expected) == 18
    for row in rows:
        t, speedup = expected[(int(row["P"]), float(row["density"]), row["algorithm"])]
        assert float(row["median s"]) == pytest.approx(t, rel=1e-5)
        assert float(row["q75 s"]) == pytest.approx(t * 1.15, rel=1e-5)
        assert float(row["speedup vs dense"]) == pytest.approx(speedup, rel=1e-5)
        assert int(row["sent bytes/rank"]) == 8 * int(row["P"])
        assert int(row["nodes"]) == int(row["P"])
        model = {"ssar_split_allgather": (0.8, 0.3, 0.5), "dense": (0.7, None, None)}.get(
            row["algorithm"], (None, None, None))
        for col, factor in zip(("model s", "floor s", "RS+AG s"), model):
            if factor is None:
                assert row[col] == ""
            else:
                assert float(row[col]) == pytest.approx(t * factor, rel=1e-5)
    # the failure is shown, with its error
    assert "## Failed runs" in md and "mpiexec exited with status 9" in md
    # training run table: final epoch values
    train = _table(md, "## Training runs")[0]
    assert (train["app"], train["epochs"], float(train["test accuracy"]),
            float(train["wall s"]), train["compression"]) == ("sparc-linear", "3", 0.8, 4.5,
                                                               "q4 no EF")
    # environment and rerun commands
    assert "MPICH Version: 5" in md and "abc123" in md and "77" in md
    assert "mpiexec -n 4 sparc-bench --N 1000" in md


def test_rerun_command():
    rec = {"P": 8, "environment": {"command": ["sparc-bench", "--N", "1 2"]}}
    assert rerun_command(rec) == "mpiexec -n 8 sparc-bench --N '1 2'"
    rec["environment"]["emulated_network"] = "4x1gbit,ppn=2"
    assert rerun_command(rec) == "bash jobs/emulate.sh --ranks-per-node 2 4x1gbit -- " \
                                 "sparc-bench --N '1 2'"


def test_report_plots_are_png_images(sweep, tmp_path):
    path, _ = sweep
    out = tmp_path / "out"
    md_path, _ = build_report([path], out)
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md_path.read_text())
    kinds = {name.split("-")[0] for name in images}
    assert {"speedup", "time", "model", "test_accuracy"} <= kinds
    for name in images:
        data = (out / name).read_bytes()
        assert data[:8] == PNG, name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width > 300 and height > 200
    html = (out / "report.html").read_text()
    assert html.count("<img ") == len(images) and "<table>" in html
    assert (out / "collectives.csv").read_text().count("\n") == 19


def test_cli(sweep, tmp_path, capsys):
    path, _ = sweep
    assert main([str(path), "-o", str(tmp_path / "a")]) == 0
    assert "skipped" in capsys.readouterr().err
    assert main([str(path), "-o", str(tmp_path / "b"), "--strict"]) == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("garbage\n")
    assert main([str(empty), "-o", str(tmp_path / "c")]) == 2
    assert "no valid records" in capsys.readouterr().err
    with pytest.raises(RecordError):
        build_report([tmp_path / "nope"], tmp_path / "d")
