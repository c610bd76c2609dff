"""sparcapps.linear under mpiexec: few jobs, many checks each (see tests/mpi_cases/linear_*.py)."""

import shutil
import sys
from pathlib import Path

import pytest

import sparcml
from mpirun import REPO, case_report, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_estimator_same_weights_on_every_rank_and_for_every_P(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py",
                                 str(CASES / "linear_cases.py")], timeout=240)
    ran = case_report(proc.stdout, "LINEAR-CASES")
    for algorithm in sparcml.ALGORITHMS:
        assert f"log {algorithm}" in ran and f"hinge {algorithm}" in ran
    # the feature-count mismatch needs two ranks
    assert ("differ in feature count" in ran) == (nprocs > 1)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
def test_cli_resume_is_bitwise_dense_baseline_and_bad_input(nprocs, tmp_path):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASES / "linear_cli.py"),
                                 str(tmp_path)], timeout=240)
    assert "SIGTERM" in case_report(proc.stdout, "LINEAR-CLI")


@pytest.mark.mpi
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


@pytest.mark.mpi
def test_sigterm_through_sparc_jobs_and_mpiexec_checkpoints_and_resumes(tmp_path):
    """The chain a Slurm time-limit warning takes: SIGTERM to ``sparc-jobs run`` (the batch
    step), forwarded to mpiexec, forwarded by it to the ranks; they stop after the same step
    with a checkpoint, the job exits 143 with a failed record, and the checkpoint resumes.
    Open MPI's mpiexec does not forward SIGTERM: sparc-jobs sends it SIGUSR1 instead, which
    reaches the ranks, and still exits 143."""
    import re
    import signal
    import subprocess
    import time

    from mpirun import MPI_FLAVOR, mpiexec_command
    from sparcapps.launcher import OPENMPI, launch_env
    from sparcapps.records import read_records

    bindir = Path(sys.executable).parent
    linear = shutil.which("sparc-linear", path=str(bindir))
    jobs = shutil.which("sparc-jobs", path=str(bindir))
    assert linear and jobs, "console scripts not installed: run scripts/test.sh"
    ck, records = tmp_path / "run.ckpt.h5", tmp_path / "r.jsonl"
    common = [linear, "--synth", "url", "--rows", "2000", "--features", "8000", "--synth-cache",
              str(tmp_path), "--batch-size", "30", "--no-progress", "--checkpoint", str(ck),
              "--epochs", "500"]  # minutes if never stopped
    proc = subprocess.Popen([jobs, "run", "--output", str(records), "--",
                             *mpiexec_command(2, [*common, "--checkpoint-every-steps", "10",
                                                  "--output", str(records)])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=launch_env(MPI_FLAVOR))
    try:
        deadline = time.monotonic() + 120
        while not ck.exists():  # training has started
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, out, err)
    reached = "SIGUSR1" if MPI_FLAVOR == OPENMPI else "SIGTERM"  # what the ranks got
    match = re.search(rf"interrupted by {reached} after (\d+) steps; checkpoint in", out)
    assert match, out + err
    steps = int(match.group(1))
    (failed,), _ = read_records([records])
    assert failed["status"] == "failed" and "after SIGTERM" in failed["error"]
    resumed = run_mpi(2, args=[*common, "--resume", str(ck), "--stop-after", str(steps + 3)],
                      timeout=120)
    assert f"stopped after {steps + 3} steps" in resumed.stdout, resumed.stdout + resumed.stderr
