"""The apps read as short named steps, with their imports at the top (issue 34, item 5).

- No function in ``sparcapps`` is longer than 80 lines (``end_lineno - lineno``, as ast
  counts), but the exceptions listed with their reason.
- An import inside a function is there for a reason the function states in a comment (on an
  import line or the line above the first): a dependency that ``--help`` or a tool without
  the extra must not load (torch, matplotlib, scikit-learn, scipy, h5py, tqdm, threadpoolctl;
  sparcml and MPI where a tool's ``--help`` runs without them; ``test_cli_vocabulary``'s
  ``--help`` test checks what is loaded). Never the standard library: it costs nothing at the
  top. (The private-name rule for the apps is in ``test_public_api``.)

Static (ast and the source lines): no import, no MPI, well under a second.
"""

from __future__ import annotations

import ast
import sys
import textwrap

from mpirun import REPO

APPS = sorted((REPO / "sparcapps").rglob("*.py"))
LIMIT = 80

# "file::function" -> why it stays one function
LONG_ALLOWED = {
    "sparcapps/data/_parse.py::parse_block":
        "a Numba kernel: one pass of the LIBSVM parser's state machine over the bytes, whose "
        "early returns carry the parser's position and counts; as several calls the hot loop "
        "would depend on the compiler inlining them",
}


def long_functions(source: str, limit: int = LIMIT) -> dict[str, int]:
    """``{name: lines}`` of the functions (methods, nested ones) of ``source`` over ``limit``."""
    return {node.name: node.end_lineno - node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno > limit}


def _own_imports(fn) -> list:
    """The import statements of function ``fn`` itself (not of functions nested in it)."""
    nested = set()
    for sub in ast.walk(fn):
        if sub is not fn and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested |= {id(n) for n in ast.walk(sub)}
    return sorted((n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))
                   and id(n) not in nested), key=lambda n: n.lineno)


def _module(node) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name
    return "." * node.level + (node.module or "")


def import_problems(source: str) -> list[str]:
    """What breaks the import rule in ``source``: a standard-library import inside a function,
    a function whose imports carry no comment."""
    lines = source.splitlines()
    problems = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        imports = _own_imports(fn)
        if not imports:
            continue
        for node in imports:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [_module(node)])
            for name in names:
                if not name.startswith(".") and name.split(".")[0] in sys.stdlib_module_names:
                    problems.append(f"{fn.name}:{node.lineno} imports {name} (standard "
                                    f"library: import it at the top)")
        said = any("#" in lines[i] for node in imports
                   for i in range(max(node.lineno - 2, 0), node.end_lineno))
        if not said:
            problems.append(f"{fn.name}:{imports[0].lineno} imports "
                            f"{sorted({_module(n) for n in imports})} inside the function "
                            f"and does not say why (one comment)")
    return problems


def test_no_app_function_is_over_80_lines():
    found = {}
    for path in APPS:
        rel = path.relative_to(REPO).as_posix()
        for name, n in long_functions(path.read_text()).items():
            found[f"{rel}::{name}"] = n
    over = {key: n for key, n in found.items() if key not in LONG_ALLOWED}
    assert not over, f"functions over {LIMIT} lines (split them into named steps): {over}"
    stale = set(LONG_ALLOWED) - set(found)
    assert not stale, f"no longer over {LIMIT} lines: drop from LONG_ALLOWED: {sorted(stale)}"
    # the check can fail
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT + 1))
    assert long_functions(f"def f():\n{body}\n") == {"f": LIMIT + 1}
    assert long_functions("def f():\n    return 1\n") == {}


def test_imports_inside_app_functions_say_why_and_skip_the_standard_library():
    problems = {path.relative_to(REPO).as_posix(): p for path in APPS
                if (p := import_problems(path.read_text()))}
    assert not problems, problems
    # the check can fail: a silent lazy import, a standard-library one; a stated one passes
    assert len(import_problems(textwrap.dedent("""
        def f():
            import torch
            import os
            return torch, os
    """))) == 2
    assert import_problems(textwrap.dedent("""
        def f():
            # torch is optional (the [torch] extra)
            import torch
            from .models import Net

            def g():
                import matplotlib  # optional too
            return torch, Net, g
    """)) == []
