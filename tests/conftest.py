import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# tests/ helpers (mpirun.py, reference kernels, the matrix package) importable as plain modules
sys.path.insert(0, str(Path(__file__).resolve().parent))

# What launches MPI ranks (jobs/emulate.sh: mpiexec over emulated nodes). A test that starts
# one of these carries the ``mpi`` marker, so that ``-m "not mpi"`` really spawns no MPI job:
# the guard below fails a test that forgets it.
_LAUNCHERS = {"mpiexec", "mpirun", "mpiexec.hydra", "mpiexec.gforker", "orterun", "prterun",
              "emulate.sh"}


def _launches_mpi(args) -> bool:
    words = shlex.split(args) if isinstance(args, str) else [os.fspath(a) for a in args]
    return any(os.path.basename(str(w)) in _LAUNCHERS for w in words)


@pytest.fixture(autouse=True)
def _mpi_marker_guard(request, monkeypatch):
    """Fails a test without ``@pytest.mark.mpi`` that starts a process whose command line
    names an MPI launcher (``run_mpi``, ``mpiexec_path()``, ``sparc-jobs run -- mpiexec``).
    It sees the commands this process starts, not what a child starts on its own."""
    if request.node.get_closest_marker("mpi") is not None:
        yield
        return
    spawned = []
    real = subprocess.Popen

    class Guarded(real):
        def __init__(self, args, *rest, **kwargs):
            if _launches_mpi(args):
                spawned.append(args)
                pytest.fail(f"{request.node.nodeid} starts MPI ranks ({args!r}) without "
                            f"@pytest.mark.mpi", pytrace=False)
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Guarded)
    yield
    call = getattr(request.node, "_call_report", None)
    if spawned and (call is None or call.passed):  # the test caught the failure
        pytest.fail(f"{request.node.nodeid} starts MPI ranks without @pytest.mark.mpi",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        item._call_report = outcome.get_result()  # for the guard's teardown


def pytest_configure(config):
    """Rates the suite calibrates (the simulator's kernels, the apps' steps) go to a folder of
    its own, seeded with copies of the user's cached ones: a test run never writes the cache a
    user's simulated study then charges its compute from (SPARCML_SIM_RATES=off is kept)."""
    given = os.environ.get("SPARCML_SIM_RATES", "").strip()
    if given.lower() in ("0", "off", "false", "no"):
        return
    if given and given.lower() not in ("1", "on", "true", "yes"):
        user = Path(given).expanduser().parent  # as sparcml._options.sim_rates_cache_path
    else:
        user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparcml"
    folder = tempfile.mkdtemp(prefix="sparcml-test-rates-")
    for cached in user.glob("*-rates.json"):
        shutil.copy2(cached, folder)
    os.environ["SPARCML_SIM_RATES"] = os.path.join(folder, "sim-kernel-rates.json")
    config._sparcml_rates_folder = folder


def pytest_unconfigure(config):
    folder = getattr(config, "_sparcml_rates_folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
