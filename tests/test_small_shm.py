"""A container's small ``/dev/shm`` (Docker's default: 64 MB): the shared-memory window of
``topk_allreduce`` and of the node phases of ``hierarchical=True`` does not fit, and sparcml
falls back to messages with one warning instead of dying with SIGBUS (issue 25, item 2).

Run inside a private mount namespace (``unshare --mount``) with a 32 MB tmpfs on /dev/shm (MPICH itself needs about 24 MB for 3 ranks), so
the machine's own /dev/shm is untouched; needs root (CI runs as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun import mpiexec_path

CASE = Path(__file__).resolve().parent / "mpi_cases" / "small_shm.py"
N = 4 << 20  # the window needs ~64 MiB at P = 2, more than the 32 MB tmpfs

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                 reason="a private mount namespace needs root and unshare")]


def _run(nprocs, *, small_shm, env_extra=None):
    launch = f"{mpiexec_path()} -n {nprocs} {sys.executable} {CASE} {N}"
    inner = f"mount -t tmpfs -o size=32m tmpfs /dev/shm && {launch}" if small_shm else launch
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_small_dev_shm_falls_back_to_messages_with_one_warning(nprocs):
    small = _run(nprocs, small_shm=True)
    assert small.returncode == 0, small.stderr[-3000:]  # SIGBUS was exit 7
    warnings = [ln for ln in small.stderr.splitlines() if "SharedMemoryWarning" in ln]
    assert len(warnings) == 1, small.stderr  # one per node, once per process
    assert "exchanging through MPI messages instead" in warnings[0]
    messages = _run(nprocs, small_shm=False, env_extra={"SPARCML_NODE_SHM": "0"})
    assert messages.returncode == 0, messages.stderr[-3000:]
    hashes = [ln for ln in small.stdout.splitlines() if ln.startswith("HASHES")]
    assert hashes and hashes == [ln for ln in messages.stdout.splitlines()
                                 if ln.startswith("HASHES")]
