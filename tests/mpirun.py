"""Run a Python snippet or module under ``mpiexec`` with a timeout, for multi-rank tests.

The launcher is the venv's MPI (MPICH or Open MPI), with the flags it needs here
(:mod:`sparcapps.launcher`: root, more ranks than cores); ``MPI_FLAVOR`` says which one, so that
a test can expect what differs between them (which signal reaches the ranks).

Each multi-rank test should spawn *few* MPI jobs that each check many cases: starting ranks and
compiling Numba kernels dominates the cost. A rank that raises aborts the whole job
(``python -m mpi4py``), and the timeout turns a deadlock into one failed test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sparcapps import launcher

__all__ = ["MPI_FLAVOR", "mpiexec_command", "mpiexec_path", "run_mpi"]

REPO = Path(__file__).resolve().parents[1]


def mpiexec_path() -> str:
    """The ``mpiexec`` beside this interpreter (the venv's MPI wheel), else the one on PATH."""
    return launcher.mpiexec_path()


try:
    MPI_FLAVOR = launcher.mpi_flavor(mpiexec_path())
except launcher.LauncherError:  # no MPI: run_mpi says so when a test calls it
    MPI_FLAVOR = launcher.UNKNOWN


def mpiexec_command(nprocs: int, command: list[str]) -> list[str]:
    """``mpiexec`` with the flags this MPI needs here, ``-n nprocs`` and ``command``."""
    return launcher.mpiexec_command(nprocs, command, mpiexec=mpiexec_path())


def run_mpi(nprocs: int, code: str | None = None, *, args: list[str] | None = None,
            timeout: float = 240, env: dict | None = None, check: bool = True,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (a Python source string) on ``nprocs`` ranks, or ``args`` as the command.

    Returns the CompletedProcess (stdout/stderr as text). With ``check`` a non-zero exit or a
    timeout raises AssertionError carrying both streams, so pytest shows what each rank said.
    """
    full_env = launcher.launch_env(MPI_FLAVOR)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    if code is not None:
        cmd = [sys.executable, "-m", "mpi4py", "-c", textwrap.dedent(code)]
    else:
        cmd = list(args or [])
    cmd = mpiexec_command(nprocs, cmd)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=cwd or REPO)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"mpiexec -n {nprocs} timed out after {timeout}s (deadlock?)\n"
                             f"--- stdout\n{out}\n--- stderr\n{err}") from None
    if check and proc.returncode != 0:
        raise AssertionError(f"mpiexec -n {nprocs} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def case_report(stdout: str, tag: str) -> list[str]:
    """The named cases an mpi_cases script ran (``tests/mpi_cases/_mpi_checks.report``):
    asserts that its report is there, that it planned some cases, and that exactly the planned
    ones ran, each once; returns them in order."""
    import json

    lines = [ln for ln in stdout.splitlines() if ln.startswith(f"{tag}-REPORT ")]
    assert len(lines) == 1, f"no {tag}-REPORT line in:\n{stdout}"
    report = json.loads(lines[0].split(" ", 1)[1])
    planned, done = report["planned"], report["done"]
    assert planned, f"{tag}: no case planned"
    assert len(set(planned)) == len(planned), f"{tag}: a case name is planned twice: {planned}"
    assert done == planned, (f"{tag}: not run: {sorted(set(planned) - set(done))}; "
                             f"unplanned or out of order: {[d for d in done if d not in planned]}")
    return done
