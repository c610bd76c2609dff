"""One CLI vocabulary across every console script (issue 15, defects 1 and 7), and every
command documented in README.md and jobs/README.md parses.

Each script's parser is taken from its real ``main`` (``parse_args`` is intercepted, so nothing
runs).
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path
from unittest import mock

import pytest

from sparcapps.cli_args import BITS_CHOICES, ListAction
from sparcapps.entry import SCRIPTS

REPO = Path(__file__).resolve().parents[1]
READS_DATA = {"sparc-linear", "sparc-logreg", "sparc-svm", "sparc-cnn", "sparc-lstm",
              "sparc-linear-bench", "sparc-linear-compare"}
VOCABULARY = sorted(SCRIPTS)


class _Got(Exception):
    pass


def parser_of(prog: str) -> argparse.ArgumentParser:
    module, func = SCRIPTS[prog].split(":")
    main = getattr(importlib.import_module(module), func)

    def grab(self, *args, **kwargs):
        raise _Got(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", grab):
        try:
            main([])
        except _Got as got:
            return got.args[0]
    raise AssertionError(f"{prog}'s main did not parse arguments")


def _all_parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def _options(parser):
    return {s: a for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize("prog", VOCABULARY)
def test_the_vocabulary(prog):
    for p in _all_parsers(parser_of(prog)):
        where = p.prog
        assert p.allow_abbrev is False, f"{where}: abbreviations allowed"
        text = p.format_help()
        assert "(default: None)" not in text, where
        opts = _options(p)
        for action in p._actions:
            if action.help in (None, argparse.SUPPRESS):
                continue
            shown = p._get_formatter()._expand_help(action) if action.help else ""
            assert shown.lower().count("(default") <= 1, f"{where} {action.option_strings}"
            assert "comma-separated" not in shown, f"{where} {action.option_strings}: lists " \
                                                   "are space-separated"
            if isinstance(action, argparse._AppendAction):  # repeated flags: only sparc-jobs
                assert where.startswith("sparc-jobs sweep"), f"{where} {action.option_strings}"
        for flag in ("--epochs", "--lr"):
            if flag in opts:
                assert re.search(rf"{flag} \S+\s+.*\(default: [\d.]+\)",
                                 " ".join(text.split())), f"{where}: {flag} hides its default"
        if "--bits" in opts:
            bits = opts["--bits"]
            assert tuple(bits.choices) == BITS_CHOICES, where
            # 0 (full precision) everywhere; the deep step-time benchmark times top-k + 4 bit
            assert bits.default == (4 if prog == "sparc-deep-bench" else 0), where
        for flag in opts:
            if flag.startswith("--checkpoint-every"):
                assert flag in ("--checkpoint-every-steps", "--checkpoint-every-epochs") or \
                    opts[flag].help == argparse.SUPPRESS, f"{where}: {flag} has no unit"
        for action in p._actions:
            if action.nargs in ("+", "*") and action.option_strings:
                assert isinstance(action, (ListAction, argparse._AppendAction)), \
                    f"{where} {action.option_strings}: a list without ListAction"
    if prog in READS_DATA:
        assert "--data-home" in _options(parser_of(prog)), prog


def test_old_spellings_still_parse():
    bench = parser_of("sparc-bench")
    assert bench.parse_args(["--algorithms", "dense,allgather"]).algorithms == \
        ["dense", "allgather"]
    assert bench.parse_args(["--algorithms", "dense", "allgather"]).algorithms == \
        ["dense", "allgather"]
    linear = parser_of("sparc-linear")
    args = linear.parse_args(["--synth", "url", "--checkpoint-every", "7"])
    assert args.checkpoint_every_steps == 7
    cnn = parser_of("sparc-cnn")
    assert cnn.parse_args(["--checkpoint-every", "2"]).checkpoint_every_epochs == 2
    with pytest.raises(SystemExit):  # abbreviations are refused
        bench.parse_args(["--algo", "dense"])


@pytest.mark.parametrize("prog", ["sparc-cnn", "sparc-lstm", "sparc-linear", "sparc-bench"])
def test_usage_errors_are_one_line_once(prog, capsys, monkeypatch):
    """Defect 9: ``sparc-cnn --algorithm bogus`` on every rank: one line on rank 0, exit 2."""
    parser = parser_of(prog)
    argv = ["--algorithm" if prog != "sparc-bench" else "--algorithms", "bogus"]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv + (["--synth", "url"] if prog == "sparc-linear" else []))
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: ") and "bogus" in err[0], err
    monkeypatch.setenv("PMI_RANK", "1")
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert capsys.readouterr().err == ""


def test_sweep_algorithm_flag_is_not_ambiguous(capsys):
    """Defect 1: ``--algorithm-flag --algorithm`` was 'ambiguous option'."""
    from sparcapps import jobs

    tmpl = str(REPO / "jobs" / "app.sbatch")
    assert jobs.main(["sweep", tmpl, "--nodes", "1", "2", "--algorithms", "ssar_split_allgather",
                      "--algorithm-flag", "--algorithm", "--dry-run", "--", "sparc-linear",
                      "--data", "url.h5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.endswith("--algorithm ssar_split_allgather")
                                   for line in lines), lines
    assert jobs.main(["sweep", tmpl, "--nodes", "1", "--algorithm-flag", "--algorithm",
                      "--algorithms", "ssar_recursive_double", "--algorithms", "allgather",
                      "--dry-run", "--", "sparc-cnn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-2:] for line in lines] == [["--algorithm", "ssar_recursive_double"],
                                                     ["--algorithm", "allgather"]]


# -- the documented commands ------------------------------------------------------------------

def _fenced_commands(path: Path):
    """Each command line of the ``bash`` blocks of ``path`` (continuations joined)."""
    text = path.read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and "..." not in words and not any("[" in w for w in words):
                yield line.strip(), words


def _app_words(words):
    """``(prog, argv)`` of the sparc-* command in ``words``, skipping environment settings,
    sudo/env, mpiexec -n N, sbatch/templates (whose arguments are the app's)."""
    i = 0
    while i < len(words):
        w = words[i]
        base = w.rsplit("/", 1)[-1]
        if base in SCRIPTS:
            return base, words[i + 1:]
        if w == "python" and words[i + 1:i + 2] == ["-m"]:
            module = words[i + 2]
            progs = [p for p, t in SCRIPTS.items() if t.split(":")[0] == module]
            return (progs[0] if progs else module), words[i + 3:]
        if base.endswith(".sbatch"):
            rest = words[i + 1:]
            if base == "app.sbatch":
                return _app_words(rest)
            return "sparc-bench", rest
        if base == "emulate.sh":
            return _app_words(words[words.index("--") + 1:])
        i += 1
    return None, []


def _documented():
    out = []
    for doc in ("README.md", "jobs/README.md"):
        for line, words in _fenced_commands(REPO / doc):
            prog, argv = _app_words(words)
            if prog is not None:
                out.append(pytest.param(prog, argv, id=f"{doc}: {line[:60]}"))
    return out


DOCUMENTED = _documented()


def test_the_docs_have_commands():
    progs = {p.values[0] for p in DOCUMENTED}
    assert {"sparc-bench", "sparc-jobs", "sparc-linear", "sparc-cnn", "sparc-data",
            "sparc-report"} <= progs, progs


@pytest.mark.parametrize("prog,argv", DOCUMENTED)
def test_documented_command_parses(prog, argv):
    assert prog in SCRIPTS, f"{prog} is not a console script"
    parser = parser_of(prog)
    if prog == "sparc-jobs":
        from sparcapps import jobs

        rest = argv[argv.index("--") + 1:] if "--" in argv else []
        argv = jobs._join_flag_values(argv[:argv.index("--")] if "--" in argv else argv,
                                      "--algorithm-flag")
        args = parser.parse_args(argv)
        if args.cmd != "sweep":
            return
        template = REPO / args.template
        # each job's command line, as sbatch would get it: the app must parse it
        for job in jobs.plan_sweep(template, args.nodes, algorithms=args.algorithms,
                                   app_args=rest, sbatch_args=args.sbatch_arg,
                                   algorithm_flag=args.algorithm_flag):
            after = job.argv[job.argv.index(str(template)) + 1:]
            app, app_argv = ("sparc-bench", after) if template.name != "app.sbatch" else \
                (after[0], after[1:])
            parser_of(app).parse_args(app_argv)
        return
    parser.parse_args(argv)
