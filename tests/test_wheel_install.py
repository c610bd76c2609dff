"""CI step: build the wheel, install it NON-editable into a fresh venv, run it from elsewhere.

What a user of ``pip install sparcml[mpich]`` gets: the wheel is built from a copy of the
tracked files (no stale ``build/``), installed with only the core dependencies and the bundled
MPI (from the pip cache; ``constraints.txt`` pins the versions) into a venv made without
``--system-site-packages``, and run with the working directory outside the checkout:

- the main job, small (``mpiexec -n 2 sparc-bench``), writes its records;
- ``sparc-data list`` reads the catalog from the package data and puts the data home in the
  per-user cache;
- an app whose extra is missing (``sparc-linear``) says which extra to install, in one line;
- ``import sparcml`` resolves inside the new venv, not to the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # builds a wheel, a fresh venv


def _tracked_copy(dest: Path) -> Path:
    """The files git tracks (plus untracked, unignored ones), copied to ``dest``."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True,
                             timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = None
    if names is None:  # not a git checkout: copy what matters to a wheel
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "dist", "results", "datasets", "*.egg-info",
            "__pycache__"))
        return dest
    for name in names:
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _clean_env(venv: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPARCML_DATA_HOME", "SPARCML_CATALOG",
                        "PYTHONHOME") and not k.startswith(("PMI_", "PMIX_", "OMPI_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(home / "cache")
    env["NUMBA_CACHE_DIR"] = str(home / "numba-cache")
    return env


def _run(cmd, *, env, cwd, timeout=240, check=True):
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                             f"--- stderr\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    src = _tracked_copy(base / "src")
    assert not (src / "build").exists()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base / "dist"),
                str(src)], env=dict(os.environ), cwd=base, timeout=300)
    wheels = list((base / "dist").glob("sparcml-*.whl"))
    assert len(wheels) == 1, wheels
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=dict(os.environ),
         cwd=base)
    # pip of this environment installs into the fresh one: core dependencies and MPICH only
    _run(pip + ["--python", str(venv / "bin" / "python"), "install", "-q", "-c",
                str(REPO / "constraints.txt"), f"{wheels[0]}[mpich]"],
         env=dict(os.environ), cwd=base, timeout=400)
    work = base / "elsewhere"
    work.mkdir()
    return venv, work, _clean_env(venv, base)


def test_wheel_has_the_catalog_and_no_apps_dependencies(wheel_venv):
    venv, work, env = wheel_venv
    code = ("import importlib.util as u, sparcml, sparcapps; print(sparcml.__file__); "
            "print(sorted(m for m in ('scipy', 'sklearn', 'h5py', 'matplotlib', 'tqdm', "
            "'pooch', 'torch') if u.find_spec(m)))")
    out = _run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=work).stdout.split("\n")
    assert Path(out[0]).resolve().is_relative_to(venv.resolve()), out[0]  # not the checkout
    assert out[1] == "[]", f"core install pulled in app dependencies: {out[1]}"


@pytest.mark.mpi
def test_main_job_runs_from_the_wheel(wheel_venv):
    venv, work, env = wheel_venv
    records = work / "main.jsonl"
    _run([str(venv / "bin" / "mpiexec"), "-n", "2", str(venv / "bin" / "sparc-bench"),
          "--N", "65536", "--density", "0.01", "0.5", "--algorithms", "ssar_recursive_double",
          "--reps", "2", "--warmup", "1", "--no-model", "--output", str(records)],
         env=env, cwd=work, timeout=300)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    # dense (always timed, the reference) and the sparse algorithm, at both densities
    assert sorted((r["algorithm"], r["density"]) for r in rows) == [
        ("dense", 0.01), ("dense", 0.5), ("ssar_recursive_double", 0.01),
        ("ssar_recursive_double", 0.5)], rows
    assert all(r["P"] == 2 and r["status"] == "ok" for r in rows), rows[0]


def test_data_list_reads_the_packaged_catalog(wheel_venv):
    venv, work, env = wheel_venv
    out = _run([str(venv / "bin" / "sparc-data"), "list"], env=env, cwd=work).stdout
    names = {line.split()[0] for line in out.splitlines()[1:-1]}
    assert {"url", "webspam", "cifar10", "ptb"} <= names, out
    assert out.splitlines()[-1] == f"data home: {Path(env['XDG_CACHE_HOME']) / 'sparcml'}"
    # SPARCML_DATA_HOME still wins
    env2 = dict(env, SPARCML_DATA_HOME=str(work / "mine"))
    out = _run([str(venv / "bin" / "sparc-data"), "list"], env=env2, cwd=work).stdout
    assert out.splitlines()[-1] == f"data home: {work / 'mine'}"


def test_missing_extra_is_one_line_naming_it(wheel_venv):
    venv, work, env = wheel_venv
    proc = _run([str(venv / "bin" / "sparc-linear"), "--synth", "url", "--epochs", "1"],
                env=env, cwd=work, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sparcml[apps]" in lines[0] and "scipy" in lines[0], proc.stderr
