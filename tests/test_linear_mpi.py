"""sparcapps.linear under mpiexec: few jobs, many checks each (see tests/mpi_cases/linear_*.py)."""

import shutil
import sys
from pathlib import Path

import pytest

from mpirun import REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_estimator_same_weights_on_every_rank_and_for_every_P(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py",
                                 str(CASES / "linear_cases.py")], timeout=240)
    expected = 28 if nprocs == 1 else 29  # the feature-count mismatch needs two ranks
    assert f"LINEAR-CASES {expected} OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("nprocs", [2, 3])
def test_cli_resume_is_bitwise_dense_baseline_and_bad_input(nprocs, tmp_path):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASES / "linear_cli.py"),
                                 str(tmp_path)], timeout=240)
    assert "LINEAR-CLI 7 OK" in proc.stdout, proc.stdout + proc.stderr


def test_console_scripts(tmp_path):
    bindir = Path(sys.executable).parent
    svm = shutil.which("sparc-svm", path=str(bindir)) or shutil.which("sparc-svm")
    assert svm is not None, "console scripts not installed: run scripts/test.sh (pip install -e .)"
    proc = run_mpi(2, args=[svm, "--synth", "url", "--rows", "800", "--features", "3000",
                            "--synth-cache", str(tmp_path), "--epochs", "1", "--no-progress",
                            "--output", str(tmp_path / "r.jsonl")], timeout=120)
    assert "epoch 1:" in proc.stdout, proc.stdout + proc.stderr
    assert '"app": "sparc-svm"' in (tmp_path / "r.jsonl").read_text()
    logreg = Path(svm).with_name("sparc-logreg")
    import subprocess

    out = subprocess.run([str(logreg), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--checkpoint-every" in out.stdout and "--loss {" not in out.stdout
