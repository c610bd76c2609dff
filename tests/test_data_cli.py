"""The sparc-data command line."""

from __future__ import annotations

import subprocess
import sys

import h5py
import pytest

from sparcapps.data.cli import main


def test_synth_convert_info_list(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPARCML_DATA_HOME", str(tmp_path / "home"))
    svm = tmp_path / "s.svm.xz"
    assert main(["synth", "url", "--rows", "300", "--features", "4000", "-o", str(svm)]) == 0
    assert main(["convert", str(svm), "-o", str(tmp_path / "s.h5"), "--features", "4000",
                 "--chunk-mb", "0.01"]) == 0
    assert main(["synth", "url", "--rows", "300", "--features", "4000",
                 "-o", str(tmp_path / "d.h5")]) == 0
    with h5py.File(tmp_path / "s.h5") as a, h5py.File(tmp_path / "d.h5") as b:
        for k in ("indptr", "indices", "data", "labels"):
            assert (a[k][:] == b[k][:]).all()
        assert a.attrs["n_features"] == 4000 and a.attrs["source"] == "s.svm.xz"
    capsys.readouterr()
    assert main(["info", str(tmp_path / "s.h5")]) == 0
    out = capsys.readouterr().out
    assert "n_rows        300" in out and "nnz per row" in out
    assert "values        all finite" in out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "url" in out and "3,231,961" in out and str(tmp_path / "home") in out
    assert main(["info", "webspam"]) == 0
    assert "16,609,143" in capsys.readouterr().out


def test_custom_synth(tmp_path, capsys):
    out = tmp_path / "c.h5"
    assert main(["synth", "--rows", "50", "--features", "300", "--nnz-per-row", "10",
                 "-o", str(out)]) == 0
    assert h5py.File(out).attrs["n_rows"] == 50
    capsys.readouterr()
    assert main(["synth", "-o", str(tmp_path / "x.h5")]) == 2       # a usage error
    assert "--nnz-per-row" in capsys.readouterr().err


def test_errors_are_one_line_with_status_1(tmp_path, capsys):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n1 2:x\n")
    assert main(["convert", str(bad), "-o", str(tmp_path / "bad.h5")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sparc-data: error: ") and f"{bad}:2:" in err
    assert not (tmp_path / "bad.h5").exists()
    good = tmp_path / "g.svm"
    good.write_text("1 1:1\n")
    assert main(["convert", str(good), "-o", str(tmp_path / "g.h5")]) == 0
    assert main(["convert", str(good), "-o", str(tmp_path / "g.h5")]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["convert", "no-such-dataset"]) == 2
    assert "not a catalog name" in capsys.readouterr().err


def test_module_help():
    r = subprocess.run([sys.executable, "-m", "sparcapps.data.cli", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "fetch" in r.stdout and "convert" in r.stdout


def test_data_bench_leaves_nothing_in_the_temp_dir(tmp_path, monkeypatch, capsys):
    """Issue 23: sparc-data-bench left its generated text (105 MB at the README's size) in the
    temp directory. Without --workdir it works in a temporary directory removed at the end;
    with --workdir it keeps only the generated text (reused next time)."""
    import tempfile

    from sparcapps.data.bench_convert import main as bench

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert bench(["--rows", "200", "--reps", "1", "--skip-sklearn"]) == 0
    assert "MB/s" in capsys.readouterr().out
    assert list(tmp.iterdir()) == []
    work = tmp_path / "work"
    assert bench(["--rows", "200", "--reps", "1", "--skip-sklearn", "--workdir", str(work)]) == 0
    assert [p.name for p in work.iterdir()] == ["url-like-200-s0.svm"]


def test_info_counts_values_the_linear_apps_refuse(tmp_path, capsys):
    """A NaN or an infinity in the data (as `convert` stores "nan" or "1e39") is counted, with
    the first row that holds one, before a training run refuses the file."""
    import numpy as np

    from sparcapps.data import CsrWriter

    values = np.ones(2 * 70_000, np.float32)  # rows past the 65,536-row block too
    values[[11, 2 * 66_000 + 1, 2 * 69_000]] = [np.inf, np.nan, -np.inf]
    with CsrWriter(tmp_path / "bad.h5", n_features=10) as w:
        w.append(np.full(70_000, 2), np.tile([1, 4], 70_000), values,
                 np.tile([-1.0, 1.0], 35_000))
        w.commit(task="binary", index_base=0)
    capsys.readouterr()
    assert main(["info", str(tmp_path / "bad.h5")]) == 0
    out = capsys.readouterr().out
    assert "values        3 NaN or infinite (the first in row 5)" in out, out
