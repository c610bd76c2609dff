"""Results are never lost to an unwritable path (issue 25, item 5), and a broken replay file is
one clear error (item 6).

Every CLI that writes checks its output path when it reads its command line (one line, exit 2,
before any work); a write that still fails at the end goes to a fallback file, said on stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpirun import run_mpi
from sparcapps.output_paths import (OutputPathError, check_output_dir, check_output_file,
                                    fallback_path, write_with_fallback)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "FILE"
    f.write_text("not a directory\n")
    return f


def test_file_checks_name_the_problem(tmp_path, a_file):
    with pytest.raises(OutputPathError, match="FILE is a file, not a directory"):
        check_output_file(a_file / "x.jsonl")
    with pytest.raises(OutputPathError, match="is a directory"):
        check_output_file(tmp_path)
    with pytest.raises(OutputPathError, match="empty"):
        check_output_file("")
    deep = tmp_path / "new" / "deeper" / "x.jsonl"
    assert check_output_file(deep) == deep
    assert not (tmp_path / "new").exists(), "a check must create nothing"
    assert check_output_file(a_file) == a_file  # an existing file is appended to


def test_dir_checks_name_the_problem(tmp_path, a_file):
    with pytest.raises(OutputPathError, match="it is a file, not a directory"):
        check_output_dir(a_file)
    with pytest.raises(OutputPathError, match="FILE is a file"):
        check_output_dir(a_file / "report")
    assert check_output_dir(tmp_path / "r" / "s") == tmp_path / "r" / "s"
    assert not (tmp_path / "r").exists()


CLIS = [
    ("sparcapps.report", ["x.jsonl", "-o", "{file}"], "-o/--output-dir"),
    ("sparcapps.report", ["x.jsonl", "-o", "{file}/report"], "-o/--output-dir"),
    ("sparcapps.bench.cli", ["--N", "1000", "--output", "{file}/x.jsonl"], "-o/--output"),
    ("sparcapps.bench.cli", ["--N", "1000", "-o", "{dir}"], "-o/--output"),
    ("sparcapps.linear.cli", ["--output", "{file}/x.jsonl"], "-o/--output"),
    ("sparcapps.linear.cli", ["--save-model", "{file}/m.h5"], "--save-model"),
    ("sparcapps.linear.bench", ["--output", "{file}/x.jsonl"], "-o/--output"),
    ("sparcapps.bench.record_gradients", ["linear", "--output", "{file}/x.npz"], "--output"),
]



def test_read_only_file_system_is_named_not_called_a_permission(tmp_path, monkeypatch):
    """Where the kernel refuses writes because the file system is mounted read-only, the
    message says so (the permission bits may allow it: "no permission" sent users to chmod);
    on a writable file system a refusal still names the permission."""
    import os
    import types

    import sparcapps.output_paths as op

    existing = tmp_path / "old.jsonl"
    existing.write_text("")
    monkeypatch.setattr(op.os, "access", lambda *a, **k: False)
    flags = {"f_flag": os.ST_RDONLY}
    monkeypatch.setattr(op.os, "statvfs", lambda p: types.SimpleNamespace(**flags))
    for check, path in ((check_output_file, tmp_path / "new.jsonl"),
                        (check_output_file, existing), (check_output_dir, tmp_path),
                        (check_output_dir, tmp_path / "newdir")):
        with pytest.raises(OutputPathError, match="read-only file system"):
            check(path)
    flags["f_flag"] = 0
    with pytest.raises(OutputPathError, match="no permission to create files"):
        check_output_file(tmp_path / "new.jsonl")
    with pytest.raises(OutputPathError, match="no write permission"):
        check_output_file(existing)

@pytest.mark.parametrize("module,argv,flag", CLIS)
def test_every_cli_refuses_an_unwritable_output_before_working(module, argv, flag, tmp_path,
                                                               a_file, capsys):
    import importlib

    main = importlib.import_module(module).main
    argv = [a.format(file=a_file, dir=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"argument {flag}: cannot write" in err[0], err


def test_deep_clis_check_output_without_torch_work(tmp_path, a_file):
    # the deep apps import torch: run them in a subprocess, parse only
    for module, flag in (("sparcapps.deep.bench", "--output"),
                         ("sparcapps.deep.accuracy", "--output"),
                         ("sparcapps.deep.cnn", "--checkpoint"),
                         ("sparcapps.deep.lstm", "--checkpoint")):
        proc = subprocess.run([sys.executable, "-m", module, flag, f"{a_file}/x.jsonl"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (module, proc.stderr)
        assert "FILE is a file, not a directory" in proc.stderr, proc.stderr


def test_append_record_falls_back_when_the_path_broke_during_the_run(tmp_path, capsys):
    from sparcapps.records import append_record

    target = tmp_path / "results" / "r.jsonl"
    check_output_file(target)              # fine when the run started ...
    (tmp_path / "results").write_text("")  # ... then someone put a file where the directory was
    written = append_record(target, {"a": 1})
    assert written == fallback_path(target, Path(sys.argv[0]).name or "sparcapps")
    assert json.loads(written.read_text()) == {"a": 1}
    err = capsys.readouterr().err
    assert f"could not write the record to {target}" in err and str(written) in err
    written.unlink()


def test_write_with_fallback_creates_parents_and_falls_back(tmp_path, capsys):
    out = write_with_fallback(tmp_path / "a" / "b" / "m.txt",
                              lambda p: p.write_text("ok"), prog="t")
    assert out.read_text() == "ok" and out.parent.name == "b"
    calls = []

    def flaky(p):
        calls.append(p)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        p.write_text("saved")

    spare = write_with_fallback(tmp_path / "m.txt", flaky, prog="t", what="model")
    assert spare != tmp_path / "m.txt" and spare.read_text() == "saved"
    assert "No space left on device" in capsys.readouterr().err
    spare.unlink()


@pytest.mark.mpi
def test_bad_output_on_every_rank_is_one_line_and_exit_2(tmp_path, a_file):
    # no -m mpi4py: the CLI's own handling, P = 3
    proc = run_mpi(3, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", "1000",
                            "--output", f"{a_file}/x.jsonl"], timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "cannot write" in ln]
    assert len(lines) == 1, proc.stderr


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04truncated", None])
def test_empty_or_truncated_replay_file_is_one_clear_error(tmp_path, content):
    from sparcapps.bench.replay import ReplayFileError, load_replay, save_replay

    path = tmp_path / "g.npz"
    if content is None:  # a real file cut in half
        save_replay(path, "x", 100, [(np.array([1, 5]), np.array([1.0, 2.0]))] * 3)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(content)
    with pytest.raises(ReplayFileError, match="empty, truncated or not a replay file"):
        load_replay(path)


def test_sparc_bench_replay_of_an_empty_file_is_one_line_not_a_traceback(tmp_path):
    empty = tmp_path / "g.npz"
    empty.write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "sparcapps.bench.cli", "--pattern", "replay",
                           "--replay", str(empty), "--reps", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # sparc-bench's status for a bad input file
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "empty, truncated" in lines[0], proc.stderr


def test_save_replay_is_atomic_and_names_its_file(tmp_path):
    from sparcapps.bench.replay import load_replay, save_replay

    written = save_replay(tmp_path / "g", "x", 10, [(np.array([3]), np.array([1.0]))])
    assert written.endswith("g.npz") and load_replay(written).count == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz"]


# -- issue 25 item 6: widths the suite cannot train, typed fields of records ---------------

def _sparc(tool, *args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-c", f"import sys; from sparcapps.entry import "
                           f"{tool.replace('-', '_')} as m; sys.exit(m())", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_convert_refuses_a_feature_index_beyond_the_trainable_width(tmp_path):
    (tmp_path / "huge.svm").write_text("1 3:1.0 1099511627776:2.0\n0 5:1.0\n")
    proc = _sparc("sparc-data", "convert", "huge.svm", "-o", "huge.h5", cwd=tmp_path)
    assert proc.returncode != 0
    assert "huge.svm:1: feature index 1099511627776" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.svm"], "nothing half-written"


@pytest.mark.mpi
def test_linear_on_a_foreign_file_wider_than_memory_is_one_line(tmp_path):
    import h5py

    (tmp_path / "small.svm").write_text("1 3:1.0 7:2.0\n0 5:1.0\n1 2:1\n0 4:1\n")
    assert _sparc("sparc-data", "convert", "small.svm", "-o", "small.h5",
                  cwd=tmp_path).returncode == 0
    with h5py.File(tmp_path / "small.h5", "r+") as f:  # a file someone else wrote
        f.attrs["n_features"] = 2**40
    proc = run_mpi(2, args=[sys.executable, "-c", "import sys; from sparcapps.entry import "
                            "sparc_linear as m; sys.exit(m())", "--data", "small.h5",
                            "--epochs", "1", "--no-progress"],
                   timeout=240, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "1099511627776 features" in lines[0], proc.stderr


def test_report_skips_a_record_with_wrongly_typed_fields(tmp_path):
    from sparcapps.records import make_record, read_records

    good = make_record("sparc-bench", config={}, environment={"hosts": ["h"]},
                       algorithm="dense", P=2, N=10, density=0.1,
                       timings={"total": {"median": 0.1}})
    bad = dict(good, P="four")
    worse = dict(good, timings={"total": {"median": "slow"}})
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, bad, worse, good)))
    records, problems = read_records([path])
    assert len(records) == 2
    assert [p.line for p in problems] == [2, 3]
    assert "'P' must be an integer >= 1, got 'four'" in problems[0].reason
    proc = _sparc("sparc-report", str(path), "-o", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rep" / "report.md").exists()
    assert "r.jsonl:2" in proc.stderr and "r.jsonl:3" in proc.stderr
