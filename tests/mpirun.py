"""Run a Python snippet or module under ``mpiexec`` with a timeout, for multi-rank tests.

Each multi-rank test should spawn *few* MPI jobs that each check many cases: starting ranks and
compiling Numba kernels dominates the cost. A rank that raises aborts the whole job
(``python -m mpi4py``), and the timeout turns a deadlock into one failed test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["mpiexec_path", "run_mpi"]

REPO = Path(__file__).resolve().parents[1]


def mpiexec_path() -> str:
    """The ``mpiexec`` beside this interpreter (the venv's mpich wheel), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise RuntimeError("no mpiexec found: install the [mpich] extra or an MPI library")
    return found


def run_mpi(nprocs: int, code: str | None = None, *, args: list[str] | None = None,
            timeout: float = 240, env: dict | None = None, check: bool = True,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (a Python source string) on ``nprocs`` ranks, or ``args`` as the command.

    Returns the CompletedProcess (stdout/stderr as text). With ``check`` a non-zero exit or a
    timeout raises AssertionError carrying both streams, so pytest shows what each rank said.
    """
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    if code is not None:
        cmd = [sys.executable, "-m", "mpi4py", "-c", textwrap.dedent(code)]
    else:
        cmd = list(args or [])
    cmd = [mpiexec_path(), "-n", str(nprocs), *cmd]
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
