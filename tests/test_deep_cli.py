"""sparc-cnn / sparc-lstm without torch in the test process: imports stay light, --help works."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["sparcapps.deep", "sparcapps.deep.cnn", "sparcapps.deep.lstm",
                                    "sparcapps.deep.tasks", "sparcapps.deep.checkpoint",
                                    "sparcapps.deep.data", "sparcapps.deep.train"])
def test_importing_the_apps_does_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("app", ["cnn", "lstm"])
def test_help_lists_the_options(app):
    out = subprocess.run([sys.executable, "-m", f"sparcapps.deep.{app}", "--help"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    for flag in ("--density", "--bits", "--algorithm", "--no-error-feedback", "--dense",
                 "--epochs", "--batch-size", "--lr", "--seed", "--width", "--depth", "--output",
                 "--checkpoint-every-epochs", "--resume", "--threads", "--data-home"):
        assert flag in out, flag


def test_the_communication_flags_build_a_compression():
    from sparcml import DENSE_BASELINE, DEFAULT_ALGORITHM
    from sparcml.compression._objects import NoneMemory, ResidualMemory, TopKCompressor

    from sparcapps.deep import cnn
    from sparcapps.deep.train import _check_args, compression_from_args

    parse = cnn.build_parser().parse_args
    c = compression_from_args(parse([]))  # --bits 0, full precision, is every CLI's default
    assert c.compressor == TopKCompressor(density=0.01) and c.quantizer is None
    assert isinstance(c.memory, ResidualMemory) and c.algorithm == DEFAULT_ALGORITHM
    assert compression_from_args(parse(["--bits", "4"])).quantizer.bits == 4
    c = compression_from_args(parse(["--bits", "0", "--no-error-feedback", "--density", "0.1",
                                     "--topk-bucket-size", "512", "--algorithm", "auto"]))
    assert c.compressor == TopKCompressor(density=0.1, chunk=512) and c.quantizer is None
    assert isinstance(c.memory, NoneMemory) and c.algorithm == "auto"
    assert compression_from_args(parse(["--dense"])).algorithm == DENSE_BASELINE
    assert _check_args(parse([])) == []
    assert _check_args(parse(["--dense", "--algorithm", DENSE_BASELINE])) == []
    (problem,) = _check_args(parse(["--algorithm", DENSE_BASELINE, "--bits", "4"]))
    assert problem.startswith("--bits needs a sparse algorithm") and "--bits 0" in problem
    with pytest.raises(SystemExit):  # argparse refuses it: one line, exit 2
        parse(["--algorithm", "ring"])
    args = parse([])
    args.algorithm = "ring"
    (problem,) = _check_args(args)
    assert problem.startswith("--algorithm: unknown algorithm 'ring'")


@pytest.mark.mpi
@pytest.mark.parametrize("app,argv,needle", [
    ("sparc-cnn", ["--depth", "1"],
     "the digits CNN needs --width >= 1 and --depth >= 2, got 16, 1"),
    ("sparc-lstm", ["--width", "0"], "--width and --depth must be >= 1, got 0, 1"),
    ("sparc-cnn", ["--resume", "junk.ckpt"],
     "cannot read checkpoint junk.ckpt: not a file --checkpoint wrote (UnpicklingError)"),
])
def test_model_shape_errors_are_one_line_on_rank_0(tmp_path, app, argv, needle):
    """Defect 9 of issue 15: a --width/--depth the model cannot take was a ValueError traceback
    on every rank (and an abort); now one line on rank 0 and exit status 2, like bad options.
    The same for a --resume file that is not a checkpoint (a traceback and exit 1 before)."""
    from mpirun import run_mpi

    (tmp_path / "junk.ckpt").write_text("not a checkpoint\n")

    exe = str(__import__("pathlib").Path(sys.executable).parent / app)
    proc = run_mpi(2, args=[exe, "--epochs", "1", "--no-progress", "--threads", "1",
                            "--output", str(tmp_path / "r.jsonl"), *argv],
                   timeout=180, check=False, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count(needle) == 1, proc.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_accuracy_records_default_to_results_and_say_where(tmp_path, monkeypatch, capsys):
    """Issue 23: sparc-deep-accuracy wrote its records to a random temporary file by default.
    Now ``results/deep-accuracy.jsonl`` (appended), named first. The runs are faked here."""
    from sparcapps.deep import accuracy
    from sparcapps.records import append_record, make_record

    def fake_run(cmd, **kwargs):
        if cmd[1:] == ["--version"]:  # launcher.mpi_flavor, when its cache is cold
            return subprocess.CompletedProcess(cmd, 0, "HYDRA build details", "")
        out = cmd[cmd.index("--output") + 1]
        run_id = cmd[cmd.index("--run-id") + 1]
        append_record(out, make_record("sparc-cnn", config={"run_id": run_id}, environment={},
                                       algorithm="x",
                                       P=2, N=10, density=1.0, timings={},
                                       metrics={"test_accuracy": 0.9, "epochs": [{}]},
                                       bytes={"sent_per_step": 100}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(accuracy.subprocess, "run", fake_run)
    assert accuracy.main(["-n", "2", "--seeds", "0", "--apps", "cnn"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sparc-deep-accuracy: records appended to "
                          "results/deep-accuracy.jsonl\n"), out
    lines = (tmp_path / "results" / "deep-accuracy.jsonl").read_text().splitlines()
    assert len(lines) == 3  # dense_baseline, topk-ef, topk-noef


def test_accuracy_reads_each_runs_own_record_with_another_writer(tmp_path, monkeypatch, capsys):
    """sparc-deep-accuracy read "the first record after the ones it saw before": another writer
    appending to the same file (a second sparc-deep-accuracy, a re-run) shifted what it
    reported. Each run now has a --run-id and its own record is read by it. The faked runs
    here append a foreign record before and after their own."""
    from sparcapps.deep import accuracy
    from sparcapps.records import append_record, make_record

    def record(run_id, acc, nbytes):
        return make_record("sparc-cnn", config={"run_id": run_id}, environment={},
                           algorithm="x", P=2, N=10, density=1.0, timings={},
                           metrics={"test_accuracy": acc, "epochs": [{}]},
                           bytes={"sent_per_step": nbytes})

    runs = []

    def fake_run(cmd, **kwargs):
        if cmd[1:] == ["--version"]:  # launcher.mpi_flavor, when its cache is cold
            return subprocess.CompletedProcess(cmd, 0, "HYDRA build details", "")
        out = cmd[cmd.index("--output") + 1]
        run_id = cmd[cmd.index("--run-id") + 1]
        runs.append(run_id)
        dense = "--dense" in cmd
        append_record(out, record("someone-else", 0.11, 7))  # the other writer, first
        append_record(out, record(run_id, 0.9 if dense else 0.8, 400 if dense else 40))
        append_record(out, record(None, 0.22, 9))             # and after
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(accuracy.subprocess, "run", fake_run)
    assert accuracy.main(["-n", "2", "--seeds", "0", "1", "--apps", "cnn",
                          "--configs", "topk-ef"]) == 0
    out = capsys.readouterr().out
    assert len(runs) == len(set(runs)) == 4 and all(r.startswith("deep-accuracy-") for r in runs)
    assert "| sparc-cnn | dense_baseline | 90.00, 90.00 | 90.00 | +0.00 | 400 |" in out, out
    assert "| sparc-cnn | topk-ef | 80.00, 80.00 | 80.00 | -10.00 | 40 |" in out, out
    assert "11.00" not in out and "22.00" not in out

    def twice(cmd, **kwargs):  # a run whose id is found twice: refused, not guessed
        fake_run(cmd)
        append_record(cmd[cmd.index("--output") + 1], record(runs[-1], 0.5, 1))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(accuracy.subprocess, "run", twice)
    assert accuracy.main(["-n", "2", "--seeds", "0", "--apps", "cnn"]) == 1
    assert "2 records of run deep-accuracy-" in capsys.readouterr().err
