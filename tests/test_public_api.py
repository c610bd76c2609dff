"""The public API is ``__all__`` of ``sparcml`` and of its public subpackages, and the apps use
nothing else.

Walks every import (top level and inside functions) and every attribute chain on a ``sparcml``
module or object in ``sparcapps/``, ``scripts/``, ``tests/toy_algorithm.py`` and
``tests/toy_compressor.py`` (the examples a plug-in author copies), and fails on a private name: a
module or name with a leading underscore, or a name missing from its module's ``__all__``. And
every name of each public ``__all__`` exists and has a docstring (a constant: its package docstring
names it).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun import REPO

PACKAGE_DIR = REPO / "comm" / "sparcml"
PUBLIC_PACKAGES = ("sparcml", "sparcml.compression", "sparcml.sim", "sparcml.torch")
CHECKED = sorted([*(REPO / "sparcapps").rglob("*.py"), *(REPO / "scripts").rglob("*.py"),
                  *(REPO / "benchmarks").rglob("*.py"), REPO / "tests" / "toy_algorithm.py",
                  REPO / "tests" / "toy_compressor.py"])

# Each entry a deliberate exception with its reason: (file, private module or name: it and
# everything under it) -> why.
ALLOWED = {
    ("scripts/kernel_bench.py", "sparcml._kernels"):
        "the kernel benchmark times the private merge kernels themselves",
    ("scripts/kernel_bench.py", "sparcml._runtime.workspace"):
        "the kernel benchmark times merge_add_into into the private Workspace",
    ("scripts/cold_call.py", "sparcml._kernels"):
        "its parts mode times one Numba kernel's dispatch cold and warm (a piece of a call)",
    ("scripts/packed_vs_parts.py", "sparcml._collectives"):
        "times the private per-message and packed folds and assembles side by side",
    ("scripts/packed_vs_parts.py", "sparcml._wire"):
        "times the private per-message and packed encoders side by side",
    ("scripts/packed_vs_parts.py", "sparcml.sim._model_ops"):
        "prints what the simulator's private compute model charges for each step",
    ("scripts/packed_vs_parts.py", "sparcml.sim._rates"):
        "the simulator's private calibrated kernel rates, which the model charges",
    ("scripts/deep_step_profile.py", "sparcml._runtime.nonblocking"):
        "the profiler counts the engine's hand-offs and sets its calling thread's waits",
    ("scripts/deep_step_profile.py", "sparcml._runtime.progress"):
        "the profiler times every wait and counts its pauses (Waiter's private pause)",
}


def _allowed(rel: str, name: str):
    """The entry of :data:`ALLOWED` that covers ``name`` in file ``rel``, or None."""
    return next(((f, a) for f, a in ALLOWED
                 if f == rel and (name == a or name.startswith(a + "."))), None)


def _static_all(package: str) -> tuple[str, ...]:
    """``__all__`` of a public package read from its source (no import: torch stays out)."""
    path = PACKAGE_DIR.joinpath(*package.split(".")[1:], "__init__.py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    if package == "sparcml.compression":  # re-exports its one module's __all__
        return _module_all(PACKAGE_DIR / "compression" / "_objects.py")
    raise AssertionError(f"{path} has no literal __all__")


def _module_all(path: Path) -> tuple[str, ...]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no literal __all__")


PUBLIC_ALL = {p: frozenset(_static_all(p)) for p in PUBLIC_PACKAGES}


def _resolve(dotted: str) -> tuple[str | None, list[str]]:
    """Walk ``sparcml.a.b.c``: returns (the deepest public package reached, the names after it)
    and whether every step is public. A name after a package must be a public subpackage or
    in that package's ``__all__``; after that, only underscores are checked."""
    parts = dotted.split(".")
    assert parts[0] == "sparcml"
    module, rest = "sparcml", parts[1:]
    while rest and f"{module}.{rest[0]}" in PUBLIC_ALL:
        module, rest = f"{module}.{rest[0]}", rest[1:]
    return module, rest


def private_names(source: str) -> list[str]:
    """The private ``sparcml`` names ``source`` uses, as dotted paths."""
    tree = ast.parse(source)
    outer = set()  # id of each attribute chain's outermost node: a chain is checked once
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and not isinstance(node, ast.Attribute):
                outer.add(id(child))
    bad: list[str] = []
    aliases: dict[str, str] = {}  # local name -> dotted sparcml path it is bound to

    def check(dotted: str) -> None:
        module, rest = _resolve(dotted)
        if rest and rest[0] not in PUBLIC_ALL[module]:
            bad.append(dotted)
        elif any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                 for p in rest[1:]):
            bad.append(dotted)

    for node in ast.walk(tree):  # imports anywhere: module level, functions, branches
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "sparcml" or a.name.startswith("sparcml."):
                    check(a.name)
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases["sparcml"] = "sparcml"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "sparcml" or node.module.startswith("sparcml.")):
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                check(dotted)
                aliases[a.asname or a.name] = dotted
    for node in ast.walk(tree):  # attribute chains on those names: sparcml.x.y, Class._z
        if isinstance(node, ast.Attribute) and id(node) in outer:
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                check(".".join([aliases[base.id], *reversed(chain)]))
    return bad


def test_the_checker_finds_every_kind_of_private_use():
    source = textwrap.dedent("""
        import sparcml
        import sparcml.sim as sim
        import sparcml._kernels
        from sparcml import SparseVector, _kernels, not_public
        from sparcml.compression._objects import Compression
        from sparcml.sim import run
        from sparcml.sim._world import add_rate

        def f():
            from sparcml._model import tuning
            import sparcml.torch._hooks as hooks
            x = sparcml._model.tuning.EXPLORING_CALLS
            y = sparcml.allreduce
            z = SparseVector._trusted(1, None, None)
            w = SparseVector.unchecked(1, None, None)
            return sim.run, sim._world, sparcml.sim.parse_network
    """)
    assert sorted(private_names(source)) == sorted([
        "sparcml._kernels", "sparcml._kernels", "sparcml.not_public",
        "sparcml.compression._objects.Compression", "sparcml.sim._world.add_rate",
        "sparcml._model.tuning", "sparcml.torch._hooks",
        "sparcml._model.tuning.EXPLORING_CALLS", "sparcml.SparseVector._trusted",
        "sparcml.sim._world"])


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(REPO)))
def test_apps_scripts_and_the_toy_algorithm_use_only_public_names(path):
    rel = str(path.relative_to(REPO))
    bad = [name for name in private_names(path.read_text()) if _allowed(rel, name) is None]
    assert not bad, f"{rel} uses private sparcml names {sorted(set(bad))}: use the public API " \
                    f"(sparcml.__all__ and the public subpackages' __all__) or make one"


def test_the_apps_use_no_private_sparcml_name_at_all():
    """``sparcapps`` is built on the public API alone: no exception is allowed there (a
    developer's tool on the internals lives in ``scripts/``). Every kind of import the checker
    knows counts: ``import sparcml._x``, ``from sparcml._x import``, ``from sparcml import _x``,
    ``from sparcml.sub._x import``, at module level or inside a function."""
    assert not [f for f, _ in ALLOWED if f.startswith("sparcapps/")]
    bad = {str(p.relative_to(REPO)): names for p in sorted((REPO / "sparcapps").rglob("*.py"))
           if (names := sorted(set(private_names(p.read_text()))))}
    assert not bad, f"sparcapps uses private sparcml names: {bad}"
    # the check can fail: each of those import forms is found
    for line in ("import sparcml._kernels", "from sparcml._runtime.workspace import Workspace",
                 "from sparcml import _kernels", "from sparcml.sim._world import add_rate",
                 "def f():\n    import sparcml._kernels as k"):
        assert private_names(line), line
    # nor do its docstrings and comments point a user at one (``sparcml._x.y``, ``sparcml.sim._z``)
    named = re.compile(r"\bsparcml(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")
    pointed = {str(p.relative_to(REPO)): sorted(set(named.findall(p.read_text())))
               for p in sorted((REPO / "sparcapps").rglob("*.py"))
               if named.search(p.read_text())}
    assert not pointed, f"sparcapps text names private sparcml paths: {pointed}"
    assert named.findall("see sparcml._collectives.partition.CHECK_EVERY") == \
        ["sparcml._collectives"]


def test_every_allowed_exception_is_still_used():
    used = {_allowed(str(p.relative_to(REPO)), n) for p in CHECKED
            for n in private_names(p.read_text())}
    assert not set(ALLOWED) - used, f"stale entries: {sorted(set(ALLOWED) - used)}"


def _undocumented(package: str) -> list[str]:
    """Names of ``package.__all__`` that are missing or have no docstring of their own."""
    import importlib
    import inspect

    mod = importlib.import_module(package)
    out = []
    for name in mod.__all__:
        if not hasattr(mod, name):
            out.append(f"{name} (missing)")
            continue
        obj = getattr(mod, name)
        if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
            doc = obj.__doc__ if not inspect.isclass(obj) else obj.__dict__.get("__doc__")
        elif type(obj).__module__.startswith("sparcml"):
            doc = type(obj).__doc__  # an instance of a sparcml class (ALGORITHMS)
        else:  # a constant: its package docstring names it
            doc = name if f"``{name}``" in (mod.__doc__ or "") else None
        if not (doc or "").strip():
            out.append(name)
    return out


@pytest.mark.parametrize("package", ["sparcml", "sparcml.compression", "sparcml.sim"])
def test_every_public_name_exists_and_has_a_docstring(package):
    assert not _undocumented(package), f"{package}: {_undocumented(package)}"
    assert set(__import__(package, fromlist=["x"]).__all__) == PUBLIC_ALL[package]


@pytest.mark.parametrize("package", ["sparcml", "sparcml.compression", "sparcml.sim"])
def test_no_public_callable_takes_a_private_argument(package):
    """Issue 34, item 3: no private constructor arguments (plans took ``_ctx=``; a plan made
    on a communication thread's context is ``AllreducePlan._on_context`` now)."""
    import inspect

    mod = __import__(package, fromlist=["x"])
    private = []
    for name in mod.__all__:
        obj = getattr(mod, name)
        calls = [obj]
        if inspect.isclass(obj):
            calls = [obj.__init__, *(getattr(obj, a) for a in vars(obj)
                                     if not a.startswith("_") and callable(getattr(obj, a)))]
        for call in calls:
            try:
                params = inspect.signature(call).parameters
            except (TypeError, ValueError):  # builtins without a signature
                continue
            private += [f"{name}: {p}" for p in params if p.startswith("_")]
    assert not private, private


def test_every_public_torch_name_exists_and_has_a_docstring():
    pytest.importorskip("torch")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_public_api as t; "
            "print(t._undocumented('sparcml.torch'))")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "tests")], text=True,
                          capture_output=True, timeout=300, cwd=REPO / "tests")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
