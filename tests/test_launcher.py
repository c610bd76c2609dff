"""sparcapps.launcher: which MPI an mpiexec is, the flags each needs here, SIGTERM that Open MPI
does not forward (through sparc-jobs run), and the sparc-mpiexec command.

Fake ``mpiexec`` scripts stand for the MPI not installed in this venv, so both flavors are
checked whichever one the venv has; the real one is checked by the multi-rank tests.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpirun import MPI_FLAVOR, mpiexec_path
from sparcapps import launcher
from sparcapps.records import read_records

# every test here starts a launcher (real or a stand-in named mpiexec): tests/conftest.py's
# guard counts them as MPI jobs
pytestmark = pytest.mark.mpi

BIN = Path(sys.executable).parent
VERSIONS = {
    "openmpi": "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/\n",
    "openmpi4": "mpiexec (OpenRTE) 4.1.6\n\nReport bugs to http://www.open-mpi.org/\n",
    "mpich": "HYDRA build details:\n    Version:  5.0.2\n",
    "other": "some launcher 1.0\n",
}
# a fake mpiexec: --version as VERSION; otherwise waits, exits 138 on SIGUSR1 (ranks that
# stopped) and on SIGTERM TERM_EXIT: 1 for Open MPI (it ends the job), 143 for MPICH (the
# ranks stopped), as the real ones do
FAKE = """#!/usr/bin/env bash
if [[ "${1:-}" == "--version" ]]; then printf '%s' "$VERSION"; exit 0; fi
trap 'echo got-usr1 >&2; exit 138' USR1
trap 'echo got-term >&2; exit TERM_EXIT' TERM
echo started > "$STARTED"
for _ in $(seq 600); do sleep 0.1; done
"""


def _fake(tmp_path, kind) -> str:
    d = tmp_path / kind
    d.mkdir()
    exe = d / "mpiexec"
    exe.write_text(FAKE.replace('"$VERSION"', repr(VERSIONS[kind]))
                   .replace("TERM_EXIT", "1" if kind.startswith("openmpi") else "143"))
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.parametrize("kind, flavor", [("openmpi", "openmpi"), ("openmpi4", "openmpi"),
                                          ("mpich", "mpich"), ("other", "unknown")])
def test_flavor_from_version(tmp_path, kind, flavor):
    assert launcher.mpi_flavor(_fake(tmp_path, kind)) == flavor


def test_the_venvs_mpiexec_is_known():
    assert MPI_FLAVOR in ("mpich", "openmpi"), launcher._version_text(mpiexec_path())


def test_flags_env_and_ranks_per_node(monkeypatch):
    assert launcher.launch_flags("mpich") == []
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert launcher.launch_flags("openmpi") == ["--oversubscribe", "--allow-run-as-root"]
    assert launcher.launch_flags("openmpi", oversubscribe=False) == ["--allow-run-as-root"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert launcher.launch_flags("openmpi") == ["--oversubscribe"]
    assert launcher.per_node_flags("mpich", 2) == ["-ppn", "2"]
    assert launcher.per_node_flags("openmpi", 2) == ["--map-by", "ppr:2:node"]
    with pytest.raises(ValueError, match="positive"):
        launcher.per_node_flags("mpich", 0)
    assert launcher.launch_env("openmpi", {})["OMPI_MCA_osc"] == "^ucx"
    assert launcher.launch_env("openmpi", {"OMPI_MCA_osc": "ucx"})["OMPI_MCA_osc"] == "ucx"
    assert "OMPI_MCA_osc" not in launcher.launch_env("mpich", {})


def test_stop_signal_only_sigterm_to_open_mpi(tmp_path):
    ompi, mpich = _fake(tmp_path, "openmpi"), _fake(tmp_path, "mpich")
    assert launcher.stop_signal_for([ompi, "-n", "2", "x"], signal.SIGTERM) == signal.SIGUSR1
    assert launcher.stop_signal_for([ompi, "-n", "2", "x"], signal.SIGINT) == signal.SIGINT
    assert launcher.stop_signal_for([mpich, "-n", "2", "x"], signal.SIGTERM) == signal.SIGTERM
    assert launcher.stop_signal_for(["srun", "x"], signal.SIGTERM) == signal.SIGTERM
    # sparc-mpiexec execs the mpiexec beside it
    (tmp_path / "openmpi" / "sparc-mpiexec").symlink_to(BIN / "sparc-mpiexec")
    assert launcher.stop_signal_for([str(tmp_path / "openmpi" / "sparc-mpiexec"), "-n", "2"],
                                    signal.SIGTERM) == signal.SIGUSR1
    assert launcher.stop_signal_for([], signal.SIGTERM) == signal.SIGTERM


@pytest.mark.parametrize("kind", ["openmpi", "mpich"])
def test_sparc_jobs_run_gets_sigterm_through_to_the_ranks(tmp_path, kind):
    """SIGTERM to sparc-jobs run (Slurm's warning): an Open MPI mpiexec gets SIGUSR1 (it would
    end the job on SIGTERM), MPICH's SIGTERM; either way the job exits 143 with a record."""
    exe, started, out = _fake(tmp_path, kind), tmp_path / "started", tmp_path / "r.jsonl"
    proc = subprocess.Popen([str(BIN / "sparc-jobs"), "run", "--output", str(out), "--", exe,
                             "-n", "2", "sparc-linear"], env={**os.environ,
                                                               "STARTED": str(started)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240  # generous: the machine may be loaded
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, (proc.returncode, err)
    (rec,), _ = read_records([out])
    assert rec["status"] == "failed" and "after SIGTERM" in rec["error"]
    if kind == "openmpi":
        assert "got-usr1" in err and "got-term" not in err
        assert "sent as SIGUSR1" in rec["error"] and "status 138" in rec["error"]
    else:
        assert "got-term" in err and "sent as" not in rec["error"]


def test_sparc_mpiexec_command_line(tmp_path):
    flags = launcher.launch_flags(MPI_FLAVOR)
    proc = subprocess.run([str(BIN / "sparc-mpiexec"), "-n", "3", "--print", "app", "--N", "5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [mpiexec_path(), *flags, "-n", "3", "app", "--N", "5"]
    proc = subprocess.run([str(BIN / "sparc-mpiexec"), "-n", "2", "--ranks-per-node", "2",
                           sys.executable, "-c", "print('rank up')"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and proc.stdout.count("rank up") == 2, proc.stdout + proc.stderr
    assert "osc_ucx" not in proc.stderr
    proc = subprocess.run([str(BIN / "sparc-mpiexec"), "-n", "2"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "needs -n P and a COMMAND" in proc.stderr


def test_emulate_refuses_open_mpi_before_building_a_network(tmp_path):
    """jobs/emulate.sh needs Hydra's -launcher fork -hosts: an Open MPI mpiexec is refused with
    exit 2 and a message naming the [mpich] extra, before any namespace exists (so no root)."""
    repo = Path(__file__).resolve().parents[1]
    ompi = _fake(tmp_path, "openmpi")
    proc = subprocess.run(["bash", str(repo / "jobs" / "emulate.sh"), "2x1gbit", "--", "true"],
                          env={**os.environ, "MPIEXEC": ompi}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "not MPICH's (Hydra) mpiexec" in proc.stderr and "[mpich]" in proc.stderr
    assert "namespaces" not in proc.stderr  # the network was not built
