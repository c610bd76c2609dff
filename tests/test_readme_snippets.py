"""A README that stays true for a newcomer (issue 36 item 4): every Python snippet runs as
written (a named test runs it) or says, in its first line, that it is a fragment and what it
needs; commands a root user can paste (no ``sudo``); one figure id in both READMEs, the one the
report makes; measured times with the commit and the load they were measured at."""

from __future__ import annotations

import ast
import builtins
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "jobs/README.md", "datasets/README.md")
_RUN_BY = re.compile(r"<!-- run by (tests/[\w/]+\.py)::(\w+) -->")


def _python_blocks(doc: str):
    """``(line, comments before it, code)`` of each ``python`` block of ``doc``: the HTML
    comment lines right above the fence."""
    lines = (REPO / doc).read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            above, k = [], i - 1
            while k >= 0 and lines[k].startswith("<!--"):
                above.insert(0, lines[k])
                k -= 1
            end = lines.index("```", i + 1)
            out.append((i + 1, "\n".join(above), "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return out


def free_names(code: str) -> set[str]:
    """Names ``code`` reads that it never binds (assignment, import, def, argument, loop or
    comprehension target) and that are not builtins: what it needs from elsewhere."""
    tree = ast.parse(code)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound - set(dir(builtins))


def _problems(doc: str, blocks) -> list[str]:
    bad = []
    for line, above, code in blocks:
        where = f"{doc}:{line}"
        first = code.splitlines()[0] if code.strip() else ""
        needs = free_names(code)
        if first.startswith("# a fragment"):
            said = set(re.findall(r"\w+", first))
            if not needs:
                bad.append(f"{where}: marked a fragment but needs nothing: run it in a test")
            elif needs - said:
                bad.append(f"{where}: a fragment that does not say it needs "
                           f"{sorted(needs - said)}")
            continue
        if needs:
            bad.append(f"{where}: needs {sorted(needs)}, and its first line does not say it is "
                       "a fragment ('# a fragment: needs ...')")
        found = _RUN_BY.search(above)
        if not found:
            bad.append(f"{where}: runnable, but no '<!-- run by tests/FILE.py::TEST -->' above")
            continue
        path, name = found.groups()
        if not (REPO / path).is_file() or f"def {name}(" not in (REPO / path).read_text():
            bad.append(f"{where}: {path}::{name} does not exist")
    return bad


@pytest.mark.parametrize("doc", DOCS)
def test_every_snippet_runs_or_says_it_is_a_fragment(doc):
    """The PyTorch snippet raised ``NameError: model`` with nothing saying it was a fragment."""
    assert _problems(doc, _python_blocks(doc)) == []


def test_the_snippet_check_can_fail():
    code = "opt = make(model.parameters())\nfor x, y in batches:\n    loss_fn(x, y)\n"
    assert free_names(code) == {"make", "model", "batches", "loss_fn"}
    assert _problems("X", [(1, "", code)])[0] == (
        "X:1: needs ['batches', 'loss_fn', 'make', 'model'], and its first line does not say "
        "it is a fragment ('# a fragment: needs ...')")
    frag = "# a fragment: needs model\n" + code
    assert "does not say it needs ['batches', 'loss_fn', 'make']" in _problems(
        "X", [(1, "", frag)])[0]
    assert "no '<!-- run by" in _problems("X", [(1, "", "x = 1\n")])[0]
    assert "does not exist" in _problems(
        "X", [(1, "<!-- run by tests/test_readme_snippets.py::test_nothing -->", "x = 1\n")])[0]


def test_the_comm_layer_snippet_runs_as_written(tmp_path):
    """"Using the comm layer" as a script, as written, on one rank (``python script.py``, no
    launcher: MPI's singleton): the sum's nonzeros are printed."""
    (line, _, code), = [b for b in _python_blocks("README.md") if "from mpi4py import MPI" in b[2]]
    script = tmp_path / "script.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "1000", "False"], proc.stdout


def _bash_lines(doc: str):
    text = (REPO / doc).read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                yield line.strip(), words


@pytest.mark.parametrize("doc", DOCS)
def test_commands_paste_as_root(doc):
    """``sudo bash jobs/slurm-local-up.sh`` fails for root on a machine without sudo: the
    documented lines are what root types (the prose says what a sudo user adds)."""
    assert [line for line, words in _bash_lines(doc) if "sudo" in words] == []


def test_both_readmes_rerun_the_figure_the_report_makes():
    """The figure ids of ``--rerun`` in README.md and jobs/README.md: one id, the strong-scaling
    figure the report makes for the sweep both documents (N = 16M, density 0.1%, random,
    float32)."""
    from sparcapps.report.fmt import slug

    ids = {doc: {words[words.index("--rerun") + 1] for _, words in _bash_lines(doc)
                 if "--rerun" in words} for doc in DOCS}
    assert ids["README.md"] == ids["jobs/README.md"] == {
        slug("strong", "N", 16777216, "d", 0.001, "random", "float32")}, ids


_MEASURED = re.compile(r"\btook \d|\b\d+ min\b|\b\d+ minutes\b")
_COMMIT = re.compile(r"\b[0-9a-f]{7}\b")
_LOAD = re.compile(r"\bload\b|\bquiet\b")


def _paragraphs(doc: str):
    text = re.sub(r"```.*?```", "", (REPO / doc).read_text(), flags=re.S)
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]


def _unsourced(paragraphs) -> list[str]:
    """The sentences (and clauses joined by ``) and``) that state a measured duration without
    a commit and a load."""
    bad = []
    for p in paragraphs:
        for sentence in re.split(r"(?<=\.)\s+(?=[A-Z])|(?<=\)) and ", p):
            if _MEASURED.search(sentence) and not (_COMMIT.search(sentence)
                                                   and _LOAD.search(sentence)):
                bad.append(sentence[:160])
    return bad


@pytest.mark.parametrize("doc", DOCS)
def test_measured_times_carry_commit_and_load(doc):
    """A sentence that states a measured duration (``took ...``, ``N min``) names the commit it
    was measured at and the machine's load: "the first took 57 s (an earlier measurement)"
    went stale with neither."""
    assert _unsourced(_paragraphs(doc)) == []
    assert _unsourced(["On a fresh clone the first took 57 s (an earlier measurement) and the "
                       "second about 21 min (at e8a0c4a, load 2)."]) == [
        "On a fresh clone the first took 57 s (an earlier measurement)"]
