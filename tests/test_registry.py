"""The algorithm registry is the one list of algorithms; the comm layer has no import cycle."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun import REPO, run_mpi

import sparcml
from sparcml._collectives import registry
from sparcml._model.costmodel import CostModel

CODE_DIRS = [REPO / "comm", REPO / "sparcapps"]
PACKAGE = REPO / "comm" / "sparcml"


def _value_position_literals(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """String constants equal to an algorithm name, where they stand for a value: not dict
    keys, subscripts, ``.get()`` keys of records or ``__all__`` entries (which name a
    function such as ``sparcml.allgather``), and not docstrings."""
    tree = ast.parse(path.read_text(), str(path))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "pop", "setdefault") and node.args:
            skip.add(id(node.args[0]))
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip.update(id(e) for e in ast.walk(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef)):
            if node.body and isinstance(node.body[0], ast.Expr) \
                    and isinstance(node.body[0].value, ast.Constant):
                skip.add(id(node.body[0].value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
            and id(n) not in skip]


def test_each_algorithm_name_is_written_in_exactly_one_code_place():
    names = set(sparcml.ALGORITHMS)
    found: dict[str, list[str]] = {n: [] for n in names}
    for root in CODE_DIRS:
        for path in root.rglob("*.py"):
            for line, name in _value_position_literals(path, names):
                found[name].append(f"{path.relative_to(REPO)}:{line}")
    for name, places in found.items():
        assert len(places) == 1, f"{name!r} is written in {places}; use the registry"
        assert places[0].startswith("comm/sparcml/_collectives/algorithms/"), places


def test_registry_drives_everything():
    assert tuple(sparcml.ALGORITHMS) == registry.algorithm_names()
    assert sparcml.DEFAULT_ALGORITHM in sparcml.ALGORITHMS
    assert sparcml.DENSE_BASELINE in sparcml.ALGORITHMS
    with pytest.raises(sparcml.UnknownAlgorithmError, match="choose one of"):
        registry.get_algorithm("magic")
    with pytest.raises(sparcml.IncompatibleOptionsError, match="cannot add quantized"):
        registry.check_algorithm_options(sparcml.DENSE_BASELINE, quantizer=sparcml.QSGD(4))
    with pytest.raises(sparcml.SparcmlError, match="already registered"):
        registry.register(registry.get_algorithm(sparcml.DEFAULT_ALGORITHM))
    model = CostModel()
    for name in sparcml.ALGORITHMS:
        assert model.predict(name, P=5, N=1 << 16, k=300) > 0
        assert name in registry.help_text()


def test_a_toy_algorithm_registers_and_is_known_everywhere():
    sys.path.insert(0, str(REPO / "tests"))
    import toy_algorithm

    try:
        assert toy_algorithm.NAME in sparcml.ALGORITHMS
        assert toy_algorithm.NAME not in registry.algorithm_names(in_auto_only=True)
        from sparcapps.cli_args import algorithm_list

        assert algorithm_list(toy_algorithm.NAME) == [toy_algorithm.NAME]
        assert CostModel().predict(toy_algorithm.NAME, P=3, N=100, k=10) > 0
        # P = 1 needs no exchange at all
        import numpy as np

        vec = sparcml.SparseVector(10, [2], np.ones(1, np.float32))
        assert sparcml.allreduce(vec, algorithm=toy_algorithm.NAME).to_dense()[2] == 1
    finally:
        registry.unregister(toy_algorithm.NAME)
        sys.modules.pop("toy_algorithm", None)
    assert toy_algorithm.NAME not in sparcml.ALGORITHMS


@pytest.mark.mpi
def test_toy_algorithm_at_three_ranks_and_through_sparc_bench():
    proc = run_mpi(3, args=[sys.executable, str(REPO / "tests/mpi_cases/toy_algorithm_run.py"),
                            str(REPO / "tests")], timeout=300)
    assert "TOY OK" in proc.stdout
    assert "toy_reduce_to_root" in proc.stdout  # its row in sparc-bench's table


def _sparcml_imports(path: Path) -> set[str]:
    """The sparcml modules a module imports at its top level (relative or absolute)."""
    tree = ast.parse(path.read_text())
    mod = "sparcml." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    mod = mod.removesuffix(".__init__")
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("sparcml"):
                out.add(target)
                for alias in node.names:
                    if (PACKAGE.parent / (target.replace(".", "/") + f"/{alias.name}.py")).exists():
                        out.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("sparcml"))
    return out


def test_no_import_cycle_in_the_comm_layer():
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = "sparcml." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {m: {t for t in _sparcml_imports(p) if t in modules and t != m and t != "sparcml"}
             for m, p in modules.items()}
    # a package's __init__ importing its own submodules is not a cycle; everything else is
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in graph[m]:
            if m.startswith(t + "."):
                continue  # a module of a package importing the package (its __init__)
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [m, t]))
            if t not in state:
                visit(t, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    # and each module imports on its own in a fresh interpreter
    code = ("import importlib, sys\nfor m in sys.argv[1:]:\n"
            "    importlib.import_module(m)\n")
    names = sorted(m for m in modules if not m.startswith("sparcml.torch"))
    subprocess.run([sys.executable, "-c", code, *names], check=True, timeout=300)


def test_no_comm_module_over_400_lines_without_a_reason():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > 420:
            head = text[:3000]
            assert "400 lines" in head, f"{path.relative_to(REPO)} has {text.count(chr(10))} " \
                                        f"lines and no reason at its top"


def test_costmodel_imports_no_mpi():
    src = (PACKAGE / "_model" / "costmodel.py").read_text()
    assert "mpi4py" not in src
