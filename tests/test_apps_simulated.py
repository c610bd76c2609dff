"""Apps on simulated ranks (``--simulate``): the same bits as a real mpiexec run, modeled
times that do not follow the load, and the usage rules of the simulation options."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun import REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"
sys.path.insert(0, str(CASES))
from linear_sim_configs import CONFIGS, common  # noqa: E402

# what a simulated run must reproduce exactly, per epoch
EPOCH_KEYS = ("loss", "data_loss", "train_accuracy", "test_accuracy", "test_loss",
              "samples_seen", "bytes_sent", "bytes_sent_total", "gradient_density",
              "local_gradient_density", "steps", "rows", "test_rows")
ONE_NODE = "1x10gbit,ppn=4"  # as the real runs here: one node (the same index coding)


def _records(path: Path) -> dict[int, dict]:
    return {r["P"]: r for r in map(json.loads, path.read_text().splitlines())}


def _linear_main(argv, prog):
    from sparcapps.linear.cli import main

    return main(argv, prog=prog, loss={"sparc-svm": "hinge", "sparc-linear": None}[prog])


@pytest.mark.mpi
@pytest.mark.slow
def test_linear_apps_simulated_equal_mpiexec_bitwise(tmp_path, capsys):
    for P in (2, 3, 4):
        run_mpi(P, args=[sys.executable, "-m", "mpi4py", str(CASES / "linear_for_sim.py"),
                         str(tmp_path)], timeout=300)
    for name, prog, extra in CONFIGS:
        assert _linear_main([*common(tmp_path), *extra, "--simulate", "2", "3", "4",
                             "--network", ONE_NODE, "--output",
                             str(tmp_path / f"sim-{name}.jsonl")], prog) == 0
        real = _records(tmp_path / f"real-{name}.jsonl")
        simulated = _records(tmp_path / f"sim-{name}.jsonl")
        assert sorted(real) == sorted(simulated) == [2, 3, 4], name
        for P in (2, 3, 4):
            r, s = real[P], simulated[P]
            assert not r.get("simulated") and s["simulated"] is True
            assert s["network"].startswith("1x10gbit") and s["compute"] == "model"
            # the calibration the modeled seconds rest on: the kernels' and the steps' rates
            assert {"kernels", "linear-step"} <= set(s["sim_rates"]), s["sim_rates"]
            assert all(v["measured"] and v["rates"] for v in s["sim_rates"].values())
            assert "sim_rates" not in r
            assert s["metrics"]["weights_digest"] == r["metrics"]["weights_digest"], (name, P)
            assert s["bytes"] == r["bytes"], (name, P)
            assert len(s["metrics"]["epochs"]) == len(r["metrics"]["epochs"]) == 2
            for re_, se in zip(r["metrics"]["epochs"], s["metrics"]["epochs"]):
                for key in EPOCH_KEYS:
                    assert se[key] == re_[key], (name, P, key, se[key], re_[key])
                assert se["train_seconds"] > 0 and se["comm_seconds"] > 0
    _report_draws_measured_beside_simulated(tmp_path)
    _scripts_read_the_records(tmp_path)
    # across nodes the index coding may change the bytes, never the model
    assert _linear_main([*common(tmp_path), *CONFIGS[0][2], "--simulate", "3", "--network",
                         "100gbit", "--output", str(tmp_path / "nodes.jsonl")],
                        "sparc-linear") == 0
    assert (_records(tmp_path / "nodes.jsonl")[3]["metrics"]["weights_digest"]
            == _records(tmp_path / "real-log-sparse.jsonl")[3]["metrics"]["weights_digest"])


def _report_draws_measured_beside_simulated(tmp_path):
    """sparc-report on the real and simulated records: epoch time and time to accuracy
    against P, the measured and simulated lines and the dense baseline on one axes."""
    from sparcapps.report.build import build

    paths = [tmp_path / f"{side}-{name}.jsonl" for side in ("real", "sim")
             for name in ("log-sparse", "log-dense")]
    _, problems, figs = build(paths, tmp_path / "report")
    assert not problems
    scaling = {f.id: f for f in figs if f.id.startswith("scaling-")}
    assert {"epoch_time", "time_to_accuracy"} <= {i.split("-")[1] for i in scaling}, scaling
    for fig in scaling.values():
        assert len(fig.meta["panels"]) == 1  # one axes: measured, simulated, dense together
        labels = [line["label"] for line in fig.meta["lines"]]
        assert any(lb.startswith("dense baseline, measured") for lb in labels), labels
        assert any(lb.startswith("dense baseline, simulated") for lb in labels), labels
        styles = {line["label"]: line["linestyle"] for line in fig.meta["lines"]}
        assert all((styles[lb] != "-") == ("simulated" in lb) for lb in labels)
        assert fig.meta["xdata"] == [2.0, 3.0, 4.0]
    # every point re-runnable from its record: a simulated one without a launcher
    from sparcapps.report.commands import rerun_command

    simulated = _records(tmp_path / "sim-log-dense.jsonl")[3]
    line = rerun_command(simulated, tmp_path / "again.jsonl")
    assert line.startswith("sparc-linear ") and "--simulate 2 3 4" in line
    assert f"--output {tmp_path / 'again.jsonl'}" in line and "mpiexec" not in line


def _scripts_read_the_records(tmp_path):
    """The study's table and the validation table read real and simulated records: every
    measured run finds its simulated twin with the same bytes ('='), and the table has a row
    per source and P with the speedup over dense."""
    real, sim_ = tmp_path / "real-log-sparse.jsonl", tmp_path / "sim-log-sparse.jsonl"
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "app_validation_table.py"),
                          str(real), str(sim_)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| sparc-linear")]
    assert len(rows) == 3 and all(" = |" in ln or " =" in ln for ln in rows), out.stdout
    both = [str(tmp_path / f"{side}-{name}.jsonl") for side in ("real", "sim")
            for name in ("log-sparse", "log-dense")]
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "app_scaling_table.py"),
                          *both], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| sparc-linear")]
    assert len(rows) == 6 and all(ln.count("x |") == 1 for ln in rows), out.stdout
    assert all("| ssar_recursive_double |" in ln for ln in rows), out.stdout
    calibrations = [ln for ln in out.stdout.splitlines() if ln.startswith("simulated compute:")]
    assert len(calibrations) == 1 and "kernels measured 20" in calibrations[0], out.stdout


def _epoch_seconds(path: Path) -> list[tuple]:
    rec = _records(path)[3]
    return [(e["train_seconds"], e["compute_seconds"], e["comm_seconds"])
            for e in rec["metrics"]["epochs"]]


def test_simulated_times_do_not_follow_the_load(tmp_path):
    """The same simulated run gives the same modeled seconds alone and beside two busy
    loops (compute charged from calibrated rates, not measured)."""
    argv = [*common(tmp_path), "--simulate", "3", "--network", "3x1gbit,latency=20us"]
    assert _linear_main([*argv, "--output", str(tmp_path / "quiet.jsonl")], "sparc-linear") == 0
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        assert _linear_main([*argv, "--output", str(tmp_path / "busy.jsonl")],
                            "sparc-linear") == 0
    finally:
        for p in busy:
            p.kill()
            p.wait()
    quiet, loaded = _epoch_seconds(tmp_path / "quiet.jsonl"), _epoch_seconds(tmp_path / "busy.jsonl")
    assert quiet == loaded and all(t > 0 for row in quiet for t in row)


def test_step_seconds_and_compute_scale_are_charged(tmp_path):
    """``--step-seconds S --compute-scale F``: each step's local compute is exactly S x F."""
    argv = [*common(tmp_path), "--simulate", "2", "--epochs", "1", "--step-seconds", "0.25",
            "--compute-scale", "2", "--output", str(tmp_path / "given.jsonl")]
    assert _linear_main(argv, "sparc-linear") == 0
    rec = _records(tmp_path / "given.jsonl")[2]
    epoch = rec["metrics"]["epochs"][0]
    assert rec["compute"] == "given"
    assert epoch["compute_seconds"] == pytest.approx(epoch["steps"] * 0.25 * 2, rel=1e-9)
    assert epoch["train_seconds"] > epoch["compute_seconds"]


def test_dense_model_is_the_simulated_dense_baseline(tmp_path, capsys):
    """``--dense-model`` beside a sparse simulated run records the dense baseline: its bytes
    and accuracies those of the simulated dense run, its epoch times within 0.5% of them
    (5% in the first epoch, where the dense run also makes its plan), marked modeled only; P = 1
    (no reduction) the run's own figures; the sparse record keeps only its own."""
    net = ["--network", "5x1gbit,latency=20us"]
    model, dense = tmp_path / "model.jsonl", tmp_path / "dense.jsonl"
    for extra, out in ((["--algorithm", "ssar_split_allgather", "--dense-model"], model),
                       (["--algorithm", "dense"], dense)):
        assert _linear_main([*common(tmp_path), *extra, "--simulate", "1", "3", "5", *net,
                             "--output", str(out)], "sparc-svm") == 0
    assert "the dense baseline (modeled from this run)" in capsys.readouterr().out
    rows = [json.loads(line) for line in model.read_text().splitlines()]
    assert [(r["P"], r["algorithm"]) for r in rows] == [
        (P, a) for P in (1, 3, 5) for a in ("ssar_split_allgather", "dense")]
    simulated = _records(dense)
    for sparse, modeled in zip(rows[::2], rows[1::2]):
        P, ref = modeled["P"], simulated[modeled["P"]]
        assert modeled["metrics"]["modeled_only"] is True and "modeled_only" not in ref["metrics"]
        assert modeled["metrics"]["accuracy_from"] == "ssar_split_allgather"
        assert modeled["bytes"] == ref["bytes"], P
        for s, m, r in zip(sparse["metrics"]["epochs"], modeled["metrics"]["epochs"],
                           ref["metrics"]["epochs"]):
            assert not any(key.startswith("dense_") for key in s), s
            assert m["test_accuracy"] == r["test_accuracy"] == s["test_accuracy"], P
            assert m["bytes_sent"] == r["bytes_sent"] and m["steps"] == r["steps"]
            if P == 1:  # one rank: the same single-rank path, no reduction either way
                assert m["train_seconds"] == s["train_seconds"]
            else:
                # the first epoch's dense run also makes its plan (one agreement, not modeled)
                low = 0.95 if m["epoch"] == 1 else 0.995
                assert low < m["train_seconds"] / r["train_seconds"] <= 1.0 + 1e-9, (P, m, r)
                assert m["train_seconds"] != s["train_seconds"]


@pytest.mark.parametrize("argv, message", [
    (["--dense-model"], "--dense-model needs --simulate"),
    (["--simulate", "2", "--dense-model", "--algorithm", "dense"], "not with --algorithm dense"),
    (["--simulate", "2", "--dense-model", "--bits", "4"], "not with --bits"),
    (["--network", "10gbit"], "--network needs --simulate"),
    (["--compute-scale", "2"], "--compute-scale needs --simulate"),
    (["--step-seconds", "1"], "--step-seconds needs --simulate"),
    (["--simulate", "4", "--network", "2x10gbit"], "fewer than --simulate 4"),
    (["--simulate", "2", "--network", "2xfast"], "--network"),
    (["--simulate", "2", "--resume", "x.h5"], "does not checkpoint"),
    (["--simulate", "0"], "--simulate"),
    (["--simulate", "2", "--step-seconds", "nan"], "--step-seconds"),
])
def test_simulate_usage_errors_exit_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        _linear_main([*common(tmp_path), *argv], "sparc-linear")
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_simulate_refuses_what_does_not_fit_before_any_work(tmp_path, capsys):
    code = _linear_main([*common(tmp_path), "--simulate", "2", "64", "--sim-memory", "0.01"],
                        "sparc-linear")
    err = capsys.readouterr().err
    assert code == 2 and "--simulate 2 needs about" in err and "GiB" in err
    assert not list(tmp_path.glob("*.h5"))  # refused before the data were made


def _readme_training_loop() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Predict a training run"):text.index("## Applications")]
    return section[section.index("```python") + len("```python"):].split("```")[0]


def test_readme_training_loop_runs_and_serves_real_ranks_alike(capsys):
    """The README's own-training-loop program runs as written; its ranks share one ``w``;
    on a real communicator the same ``train`` does what one rank does alone."""
    from mpi4py import MPI

    import sparcml.sim as sim

    namespace: dict = {}
    exec(compile(_readme_training_loop(), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert len({r[0] for r in result.results}) == 1 and result.time > 20 * 1e-3
    assert "ms modeled" in capsys.readouterr().out
    alone, _ = namespace["train"](MPI.COMM_SELF)
    assert sim.run(1, namespace["train"]).results[0][0] == alone


def test_replicas_refuse_ranks_that_diverge():
    """A rank whose update inputs differ from the first rank's is an error naming the key,
    never a silently shared wrong state; ``shared`` objects are one object."""
    import numpy as np

    import sparcml.sim as sim

    def body(comm):
        replicas = sim.Replicas(comm)
        a = replicas.shared("a", lambda: np.zeros(4))
        replicas.once("step", lambda: a.__iadd__(1), check=np.zeros(3))  # alike: fine
        replicas.once("step", lambda: a.__iadd__(1), check=np.full(3, comm.Get_rank() == 2))
        return id(a)

    with pytest.raises(sim.SimulationError) as exc:
        sim.run(3, body)
    assert isinstance(exc.value.__cause__, sim.ReplicaDivergedError)
    assert "'step'" in str(exc.value)
    ids = sim.run(3, lambda comm: id(sim.Replicas(comm).shared("x", list))).results
    assert len(set(ids)) == 1
    unshared = sim.run(3, lambda comm: id(sim.Replicas(comm).shared("x", list)), share=False)
    assert len(set(unshared.results)) == 3


def test_validation_table_reads_the_deep_apps_records():
    """The committed deep validation records (sparc-cnn / sparc-lstm: ``epoch_seconds`` and
    ``bytes_per_step`` where the linear apps have ``train_seconds`` and ``bytes``): every
    measured run finds its simulated twin with the same bytes, and the count line is there."""
    deep = REPO / "benchmarks" / "app-validation" / "deep"
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "app_validation_table.py"),
                          str(deep / "measured.jsonl"), str(deep / "simulated.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith(("| sparc-cnn", "| sparc-lstm"))]
    assert len(rows) == 8 and all(" KiB = |" in ln for ln in rows), out.stdout
    assert "rows within 1.3x" in out.stdout.splitlines()[-1]
    assert out.stdout == (deep / "table.md").read_text()


def test_committed_dense_model_checks_hold():
    """BENCHMARKS' table of the modeled dense baseline against the simulated one comes from
    the committed records: every modeled record finds its simulated twin, with equal bytes,
    equal accuracies and a ratio within 0.5% (1.0000 after the first epoch)."""
    bench = REPO / "benchmarks" / "app-scaling"
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dense_model_check.py"),
         *sorted(map(str, (REPO / "benchmarks" / "dense-model-check").glob("*.jsonl"))),
         "--against",
         str(bench / "records.jsonl"), str(bench / "webspam.jsonl")],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines()[2:]]
    assert len(rows) == 10
    for row in rows:
        epoch, ratio, same_bytes, acc = int(row[3]), float(row[6]), row[7].strip(), row[8]
        assert same_bytes == "yes" and len({a.strip() for a in acc.split("/")}) == 1, row
        assert (0.995 if epoch == 1 else 0.9999) <= ratio <= 1.0, row
