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

from sparcapps.cli_args import (BITS_CHOICES, DENSITY_MEANING, ListAction,
                                add_data_home_argument, algorithm_name, fraction,
                                nonnegative_int, positive_int)
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
            # 0 (full precision) everywhere (sparc-deep-bench's was 4)
            assert bits.default == 0, where
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
    for doc in ("README.md", "jobs/README.md", "datasets/README.md"):
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
def test_documented_command_parses(prog, argv, capsys):
    """Each documented command parses, in the vocabulary's spelling (no deprecation note)."""
    _parses(prog, argv)
    err = capsys.readouterr().err
    assert "deprecated" not in err, err


def _parses(prog, argv):
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


# -- one meaning per flag name (issue 23) -----------------------------------------------------

def _walk(prog):
    """``(path, parser)`` of ``prog``'s parser and its subcommands' (path: the subcommand
    words that reach it)."""
    def go(parser, path):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from go(sub, path + [name])
    yield from go(parser_of(prog), [])


def _visible(parser):
    return [a for a in parser._actions if a.help != argparse.SUPPRESS]


def _type_of(action):
    return action.item_type if isinstance(action, ListAction) else action.type


def _data_home_help():
    p = argparse.ArgumentParser()
    return add_data_home_argument(p).help


# flag -> (what it means, a check of the action); every tool that has the flag must pass it
CANONICAL = {
    "--topk": ("a count K of entries kept (a fraction is --density)",
               lambda a: _type_of(a) in (positive_int, nonnegative_int) and a.metavar == "K"),
    "--density": (f"a fraction in (0, 1]: the {DENSITY_MEANING}",
                  lambda a: _type_of(a) is fraction and a.help.startswith(DENSITY_MEANING)),
    "--N": ("vector dimensions, a list", lambda a: isinstance(a, ListAction)
            and a.item_type is positive_int),
    "--seed": ("an integer seed", lambda a: _type_of(a) in (int, nonnegative_int)),
    "--timeout-seconds": ("a limit in seconds", lambda a: a.metavar == "SECONDS"
                          and "seconds" in a.help),
    "--data-home": ("where data sets live", lambda a: a.help == _data_home_help()),
    "--output": ("the file the tool writes, named by its metavar; records are appended "
                 "(a directory is --output-dir)",
                 lambda a: a.metavar in ("FILE.jsonl", "FILE.h5", "FILE.npz", "FILE")
                 and (a.metavar != "FILE.jsonl" or "append" in a.help)),
    "--output-dir": ("the directory the tool writes into", lambda a: a.metavar == "DIR"),
    "--reps": ("timed repetitions", lambda a: a.type is positive_int
               and "repetitions" in a.help),
    "--warmup": ("untimed repetitions", lambda a: a.type is nonnegative_int
                 and "untimed repetitions" in a.help),
    "--batch-size": ("rows/examples per rank per step", lambda a: a.type is positive_int),
    "--epochs": ("passes over the data", lambda a: a.type is positive_int),
    "--algorithm": ("one registered algorithm", lambda a: a.type is algorithm_name),
    "--algorithms": ("registered algorithms, a list",
                     lambda a: _type_of(a) is algorithm_name or a.dest == "algorithms"
                     and isinstance(a, argparse._AppendAction)),
    "--tol": ("SGDClassifier's tol", lambda a: a.type is float),
    "-n": ("the ranks of each run, as mpiexec -n", lambda a: a.metavar == "P"
           and a.type is positive_int),
    "--clip-grad-norm": ("the optimizer's clipping of the averaged gradient (DGC's per-rank "
                         "clipping is --clip-norm)", lambda a: "averaged gradient" in a.help),
    "--clip-norm": ("DGC's clipping of each rank's bucket", lambda a: "each rank's bucket"
                    in a.help),
    # sparc-bench's was the dense baseline's budget: that is --sim-dense-memory (issue 36)
    "--sim-memory": ("with --simulate, the memory over which a P is refused",
                     lambda a: a.help.startswith("with --simulate: refuse a P")),
    "--sim-dense-memory": ("with --simulate, the memory the dense baseline may take",
                           lambda a: "dense baseline" in a.help),
    "--resume": ("the checkpoint a run continues from", lambda a: a.metavar == "CKPT"),
    # a short flag: its long form says which (sparc-data synth -o FILE, sparc-report -o DIR)
    "-o": ("the short form of --output (a file) or --output-dir (a directory)",
           lambda a: bool({"--output", "--output-dir"} & set(a.option_strings))),
}

# headers that are labels or counts: their unit is what they name
LABEL_COLUMNS = {"N", "P", "algorithm", "pattern", "config", "kernel", "history", "network",
                 "backend", "fastest", "auto ran", "name", "task", "rows", "features", "nnz",
                 "nnz per row", "indices", "max index", "values"}
_HEADER_UNIT = re.compile(r"\bms\b|\bs\b|\bus\b|\bB\b|KiB|MiB|GiB|bytes|/|\(x\)|%|\bshare\b|"
                          r"density")
_FLAG_UNIT = re.compile(r"\b(seconds?|ms|milliseconds|minutes|us|MiB|GiB|KiB|MB|GB|bytes|"
                        r"values|rows|examples|entries)\b", re.I)
_TIME_OR_SIZE = re.compile(r"timeout|time|latency|duration|interval|delay|memory|size|bytes|"
                           r"-mb$|-gb$")
_RST = re.compile(r"``|:(mod|func|class|meth|attr|data|exc):`")


def test_every_console_script_is_checked():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == set(SCRIPTS), set(scripts) ^ set(SCRIPTS)


# other spellings of the vocabulary's flags (hidden deprecated aliases aside)
SYNONYMS = {"--n": "--N", "--timeout": "--timeout-seconds", "--workdir": "--synth-cache",
            "--data-dir": "--data-home", "--out": "--output", "--outdir": "--output-dir",
            "--nprocs": "-n", "--np": "-n", "--clip": "--clip-grad-norm"}


@pytest.mark.parametrize("prog", VOCABULARY)
def test_one_meaning_per_flag(prog):
    for _, p in _walk(prog):
        for action in _visible(p):
            for flag in action.option_strings:
                assert flag not in SYNONYMS, f"{p.prog} {flag}: the vocabulary says " \
                                             f"{SYNONYMS[flag]}"
                if flag in CANONICAL:
                    meaning, ok = CANONICAL[flag]
                    assert ok(action), f"{p.prog} {flag}: the vocabulary's {flag} is {meaning}"


@pytest.mark.parametrize("prog", VOCABULARY)
def test_units_and_help_text(prog):
    for _, p in _walk(prog):
        for action in _visible(p):
            if isinstance(action, argparse._SubParsersAction):
                continue  # its subcommands have their help
            where = f"{p.prog} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{where}: no help"
            for flag in action.option_strings:
                name = flag.lstrip("-")
                if _TIME_OR_SIZE.search(name):
                    assert _FLAG_UNIT.search(name.replace("-", " ")) or \
                        re.search(r"-(mb|gb|seconds|ms)$", name) or \
                        _FLAG_UNIT.search(action.help) or \
                        _FLAG_UNIT.search(str(action.metavar or "")), \
                        f"{where}: a time or size without its unit in the name or the help"
        text = p.format_help()
        assert not _RST.search(text), f"{p.prog} --help: reStructuredText markup " \
                                      f"{_RST.search(text).group(0)!r}"
        assert "python -m sparcapps" not in text, f"{p.prog} --help: name the console script"


def _tool_refs(text):
    """``(tool, flag)`` for each ``sparc-x [sub] --flag`` in ``text`` (flag None if none)."""
    for m in re.finditer(r"\b(sparc-[a-z]+(?:-[a-z]+)*)\b((?:\s+[a-z]+)?)(\s+--[a-z][a-z-]*)?",
                         text):
        yield m.group(1), (m.group(3) or "").strip() or None


def _flags_of(prog):
    return {s for _, p in _walk(prog) for a in p._actions for s in a.option_strings}


@pytest.mark.parametrize("prog", VOCABULARY)
def test_help_names_real_tools_and_their_flags(prog):
    """A tool's help that names another tool (or itself) names a console script and, with a
    flag, one that tool has: no help text left behind by a rename or copied from elsewhere."""
    for _, p in _walk(prog):
        text = " ".join(p.format_help().split())
        for tool, flag in _tool_refs(text):
            assert tool in SCRIPTS, f"{p.prog} --help names {tool}, not a console script"
            if flag is not None:
                assert flag in _flags_of(tool), f"{p.prog} --help: {tool} has no {flag}"


SIMULATION_OPTIONS = ("--simulate", "--network", "--compute-scale", "--step-seconds",
                      "--sim-memory", "--sim-timeout")


def test_no_help_copied_across_tools():
    """The same flag with the same help in two tools is either one of the vocabulary's flags
    (defined once) or the same option of the same kind of tool (the linear apps, the deep
    apps); anything else is help carried over from another tool (sparc-bench-overlap
    --tolerance read like sparc-bench-auto's)."""
    families = [{"sparc-linear", "sparc-logreg", "sparc-svm", "sparc-linear-bench",
                 "sparc-linear-compare"}, {"sparc-cnn", "sparc-lstm"}, {"sparc-data"}]
    seen = {}
    for prog in VOCABULARY:
        for _, p in _walk(prog):
            for action in _visible(p):
                for flag in action.option_strings:
                    if flag in CANONICAL or flag in ("-h", "--help"):
                        continue
                    seen.setdefault((flag, action.help), set()).add(prog)
    for (flag, _), progs in seen.items():
        if len(progs) > 1:
            # options of the same meaning in training and benchmark tools alike; the training
            # apps' simulation options (defined once: sparcapps.simapp.add_simulate_arguments)
            assert any(progs <= f for f in families) or flag in (
                "--quantize-sparse", "--no-progress", "--bucket-mb", "--partitions",
                "--index-coding") or flag in SIMULATION_OPTIONS, \
                f"{flag}: the same help in {sorted(progs)}"


def _module_files(prog):
    """The source files of ``prog``'s main module and the sibling modules it imports."""
    module = importlib.import_module(SCRIPTS[prog].split(":")[0])
    path = Path(module.__file__)
    files = [path]
    for sibling in re.findall(r"from \.(\w+) import", path.read_text()):
        if (path.parent / f"{sibling}.py").exists():
            files.append(path.parent / f"{sibling}.py")
    return files


def _printed_headers(prog):
    """The literal table headers ``prog`` prints (``{'header':>8}`` in an f-string)."""
    out = set()
    for f in _module_files(prog):
        for h in re.findall(r"\{'([^'{}]*)':[<>^]?\d*s?\}", f.read_text()):
            if h.strip(" -") and not h.startswith("("):  # '(...)': a note under a header
                out.add(h)
    return out


@pytest.mark.parametrize("prog", VOCABULARY)
def test_table_columns_have_units(prog):
    for h in _printed_headers(prog):
        assert h in LABEL_COLUMNS or _HEADER_UNIT.search(h), \
            f"{prog} prints a column {h!r} without its unit"


@pytest.mark.parametrize("prog", VOCABULARY)
def test_help_points_at_printed_columns(prog):
    headers = _printed_headers(prog)
    for _, p in _walk(prog):
        text = " ".join(p.format_help().split())
        for name in re.findall(r"['\"]([^'\"]+)['\"] column|column ['\"]([^'\"]+)['\"]", text):
            name = name[0] or name[1]
            assert name in headers, f"{p.prog} --help points at a column {name!r} that it " \
                                    f"does not print ({sorted(headers)})"


# -- renamed flags: the old spelling still works, with one line ------------------------------

# the arguments a parser needs besides the flag (required options, a subcommand)
_BASE = {"sparc-record-gradients": ["cnn", "--output", "x.npz"], "sparc-report": ["r.jsonl"],
         "sparc-linear": ["--synth", "url"], "sparc-logreg": ["--synth", "url"],
         "sparc-svm": ["--synth", "url"], "sparc-data fetch": ["url"],
         "sparc-jobs wait": ["1"], "sparc-jobs sweep": ["t.sbatch", "--nodes", "1"]}
_VALUE = {"--n": "1000", "--topk": "0.05", "--timeout": "5", "--workdir": "/tmp/x",
          "--checkpoint-every": "3", "--nprocs": "2", "--clip": "0.5", "--output": "/tmp/rep",
          "--sim-memory": "2"}


def _aliases():
    out = []
    for prog in VOCABULARY:
        for path, p in _walk(prog):
            for a in p._actions:
                if type(a).__name__ == "_DeprecatedAlias":
                    out.append(pytest.param(prog, path, a.option_strings[0], a.new_flag,
                                            id=f"{' '.join([prog, *path])} {a.option_strings[0]}"))
    return out


ALIASES = _aliases()


def test_the_renames_have_aliases():
    got = {(prog, old, new) for prog, _, old, new in (a.values for a in ALIASES)}
    assert {("sparc-bench-compress", "--n", "--N"),
            ("sparc-deep-accuracy", "--nprocs", "-n"), ("sparc-lstm", "--clip", "--clip-grad-norm"),
            ("sparc-report", "--output", "--output-dir"),
            ("sparc-record-gradients", "--topk", "--density"),
            ("sparc-data", "--timeout", "--timeout-seconds"),
            ("sparc-jobs", "--timeout", "--timeout-seconds"),
            ("sparc-data-bench", "--workdir", "--synth-cache"),
            ("sparc-bench", "--sim-memory", "--sim-dense-memory")} <= got, got


@pytest.mark.parametrize("prog,path,old,new", ALIASES)
def test_deprecated_alias_works_and_says_so(prog, path, old, new, capsys):
    parser = parser_of(prog)
    base = path + _BASE.get(" ".join([prog, *path]), _BASE.get(prog, []) if not path else [])
    value = _VALUE[old]
    with_old = parser.parse_args(base + [old, value])
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{' '.join([prog, *path])}: deprecated: {old} is now {new}"], err
    with_new = parser.parse_args(base + [new, value])
    assert vars(with_old) == vars(with_new)
    assert capsys.readouterr().err == ""


def _doc_lines():
    """Each line of README.md, jobs/README.md, datasets/README.md, BENCHMARKS.md and the sbatch
    templates."""
    files = [REPO / "README.md", REPO / "jobs" / "README.md", REPO / "datasets" / "README.md",
             REPO / "BENCHMARKS.md",
             *sorted((REPO / "jobs").glob("*.sbatch"))]
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            yield f"{f.relative_to(REPO)}:{n}", line


def test_docs_use_no_renamed_flag():
    """No line of the docs or templates runs a tool with a flag it renamed."""
    modules = {SCRIPTS[p].split(":")[0]: p for p in SCRIPTS}
    old_of = {}
    for prog, _, old, _ in (a.values for a in ALIASES):
        old_of.setdefault(prog, set()).add(old)
    bad = []
    for where, line in _doc_lines():
        for m in re.finditer(r"(sparc-[a-z]+(?:-[a-z]+)*|python -m ([\w.]+))(.*)", line):
            prog = m.group(1) if not m.group(2) else modules.get(m.group(2))
            for old in old_of.get(prog, ()):
                if re.search(rf"(^|\s){re.escape(old)}(\s|=|$|`)", m.group(3)):
                    bad.append(f"{where}: {prog} {old}")
    assert not bad, bad


# -- every flag a help text names exists (issue 36 item 4) ------------------------------------

# flags of other programs a help text may name, with the program it must name beside them
FOREIGN_FLAGS = {"--allow-run-as-root": "Open MPI", "--oversubscribe": "Open MPI",
                 "--map-by": "Open MPI", "--partition": "sbatch"}


def _help_flag_problems(prog, parser_texts):
    """``(where, flag)`` for each ``--flag`` named in a help text (``parser_texts``: ``(where,
    text)`` of ``prog``'s parsers) that is neither ``prog``'s own, nor one of a ``sparc-*`` tool
    the same text names, nor another program's flag with that program named."""
    own = _flags_of(prog)
    bad = []
    for where, text in parser_texts:
        flat = " ".join(text.split())
        named = {t for t, _ in _tool_refs(flat) if t in SCRIPTS}
        theirs = set().union(*(_flags_of(t) for t in named)) if named else set()
        for flag in re.findall(r"(?<![\w-])(--[a-zA-Z][\w-]*)", flat):
            if flag in own or flag in theirs:
                continue
            if flag in FOREIGN_FLAGS and FOREIGN_FLAGS[flag] in flat:
                continue
            bad.append((where, flag))
    return bad


def test_help_names_only_flags_that_exist():
    """Every ``--flag`` any console script's ``--help`` (subcommands included) mentions exists
    (``sparc-cnn --help`` named ``--compressor-momentum`` before it existed), and no help shows
    an empty ``(default: )``."""
    bad, empty = [], []
    for prog in VOCABULARY:
        texts = [(p.prog, p.format_help()) for _, p in _walk(prog)]
        bad += _help_flag_problems(prog, texts)
        empty += [where for where, text in texts if "(default: )" in " ".join(text.split())]
    assert not bad, bad
    assert not empty, empty
    # the check can fail: a made-up flag in a help text is found
    assert _help_flag_problems("sparc-cnn", [("x", "uses --compressor-velocity")]) == \
        [("x", "--compressor-velocity")]
    assert _help_flag_problems("sparc-cnn", [("x", "like sparc-bench --probe-network")]) == []


_HELP_PROBE = r"""
import contextlib, io, importlib, json, sys, time
from sparcapps.entry import SCRIPTS
heavy = tuple(sys.argv[1].split(","))
out = {}
for prog, target in sorted(SCRIPTS.items()):
    module, func = target.split(":")
    sys.argv = [prog, "--help"]
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(importlib.import_module(module), func)()
    except SystemExit:
        pass
    out[prog] = [time.perf_counter() - start, [m for m in heavy if m in sys.modules]]
print(json.dumps(out))
"""


def _help_probe(heavy) -> dict:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _HELP_PROBE, ",".join(heavy)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == set(SCRIPTS)
    print({prog: round(t, 2) for prog, (t, _) in got.items()})
    return {prog: mods for prog, (_, mods) in got.items() if mods}


def test_help_is_fast_imports_no_app_dependency():
    """``--help`` of every console script (run in one fresh interpreter, in order) imports
    none of the apps' heavy dependencies (torch, scikit-learn, h5py, matplotlib, tqdm,
    threadpoolctl): the linear apps' help took 6-8 s under load when ``sparcapps.linear``
    imported scikit-learn and h5py on the way to its parser. The module check is the bound (it
    does not move with the machine's load); the seconds are printed."""
    loaded = _help_probe(("torch", "sklearn", "h5py", "matplotlib", "tqdm", "threadpoolctl"))
    assert not loaded, f"--help imported {loaded} (the first tool named loaded them)"


def test_help_imports_no_numba():
    """Nor Numba and SciPy, in any tool: sparcml's kernel modules load on first use
    (``sparcml._lazy``), so ``sparc-bench --help`` took 0.48-0.54 s at load 2 where it took
    1.1 s with Numba; the linear apps' own kernels (``sparcapps.linear._kernels``, which
    ``schedule`` imported on the way to the parser) load at their first batch
    (``sparcapps._lazy.lazy_module``): ``sparc-linear --help`` took 0.8-1.0 s of CPU with them,
    0.4-0.5 s without (load 11, where the wall-clock seconds are not the machine's)."""
    loaded = _help_probe(("numba", "scipy", "llvmlite"))
    assert not loaded, f"--help imported {loaded} (the first tool named loaded them)"


def test_renamed_preset_still_works_and_says_so(capsys):
    """``--preset default`` was never the default (``small`` is): it is ``acceptance`` now, and
    the old name still reads, with one line."""
    bench = parser_of("sparc-bench")
    assert bench.parse_args([]).preset == "small"
    assert bench.parse_args(["--preset", "acceptance"]).preset == "acceptance"
    assert capsys.readouterr().err == ""
    assert bench.parse_args(["--preset", "default"]).preset == "acceptance"
    assert capsys.readouterr().err.splitlines() == [
        "sparc-bench: deprecated: --preset default is now --preset acceptance"]
    text = " ".join(bench.format_help().split())
    assert "--preset {acceptance,small}" in text and "(default: small)" in text, text


def test_report_requires_its_directory():
    """``sparc-report`` without ``-o/--output-dir`` (or the old ``--output``) is a usage error."""
    report = importlib.import_module("sparcapps.report")
    with pytest.raises(SystemExit) as exit_:
        report.main(["r.jsonl"])
    assert exit_.value.code == 2
