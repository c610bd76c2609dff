"""Argument types and flags shared by the CLIs: one vocabulary and one validation for every
entry point.

Algorithm names come from the registry (:data:`sparcml.ALGORITHMS`, after
:func:`sparcml.load_plugins` has loaded the installed plugins: :func:`registered_algorithms`),
so a registered algorithm is accepted by every CLI, and a wrong one is refused by argparse
(one line, exit 2) before any MPI work. Numbers that must be positive or fractions are checked
here, not deep in a run.

The vocabulary (every ``sparc-*`` command builds its parser with :func:`make_parser`):

- lists are space-separated (``--algorithms a b``, ``--density 0.01 0.1``; :class:`ListAction`);
  the old comma form ``a,b`` is still read, with a deprecation note on stderr;
- options are never abbreviated (``allow_abbrev=False``: ``--algorithm`` is not a prefix of
  ``--algorithms``);
- ``--bits {0,2,4,8}``: QSGD bits per value, 0 (the default everywhere) full precision
  (:func:`add_bits_argument`);
- flags that count say their unit (``--checkpoint-every-steps``, ``--checkpoint-every-epochs``;
  :func:`add_checkpoint_every_argument`, the old ``--checkpoint-every`` kept as an alias);
- ``--data-home`` wherever data are read (:func:`add_data_home_argument`);
- one meaning per flag name across the tools (``tests/test_cli_vocabulary.py`` holds the table):
  ``--topk K`` a count of entries, ``--density`` a fraction in (0, 1] of each rank's vector
  that enters the allreduce (:data:`DENSITY_MEANING`, :func:`density_help`), ``--N`` vector
  dimensions, ``--seed`` an integer seed, ``--reps`` / ``--warmup`` timed / untimed
  repetitions, ``--output`` the file the tool writes, named by its metavar (``FILE.jsonl``:
  records, appended; :func:`add_records_output_argument`), ``--output-dir`` a directory,
  ``-n P`` the ranks of each run (as ``mpiexec -n``), ``--timeout-seconds``
  (:func:`add_timeout_argument`); time and size flags name their unit (``--bucket-mb``,
  ``--chunk-mb``, ``--timeout-seconds``) or say it in the help;
- a renamed flag keeps its old spelling as a hidden alias that still works and prints one
  ``PROG: deprecated: --old is now --new`` line (:func:`add_deprecated_alias`);
- help shows each default once, and none where there is none (:class:`HelpFormatter`);
- output paths are checked when the command line is read (:func:`output_file`,
  :func:`output_dir`), so that a run never ends in an unwritable path;
  descriptions are plain text: docstrings' reStructuredText markup is stripped and their
  paragraphs and ``-`` lists kept (:func:`plain_text`);
- a usage error is one line, ``PROG: error: MESSAGE (see PROG --help)``, printed once per job
  (rank 0), exit status 2 (:class:`Parser`).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap
from dataclasses import replace

from .output_paths import OutputPathError, check_output_dir, check_output_file

__all__ = ["positive_int", "nonnegative_int", "fraction", "registered_algorithms",
           "algorithm_name", "algorithm_list", "algorithm_help", "make_parser", "HelpFormatter",
           "ListAction", "BITS_CHOICES",
           "add_bits_argument", "add_checkpoint_every_argument", "add_data_home_argument",
           "add_list_argument", "deprecation_note", "first_rank", "Parser", "output_file",
           "output_dir", "positive_float", "nonnegative_float", "add_deprecated_alias",
           "add_timeout_argument", "add_records_output_argument", "plain_text",
           "add_compressor_arguments", "DENSITY_MEANING", "density_help",
           "add_options_arguments", "options_from_args"]

BITS_CHOICES = (0, 2, 4, 8)
_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def first_rank() -> bool:
    """True unless an MPI launcher or Slurm says this process is not rank 0 (no MPI call)."""
    for var in _RANK_VARIABLES:
        value = os.environ.get(var)
        if value is not None:
            return value.strip() == "0"
    return True


def deprecation_note(prog: str, message: str) -> None:
    """Print ``PROG: deprecated: MESSAGE`` on stderr, once per job (rank 0)."""
    if first_rank():
        print(f"{prog}: deprecated: {message}", file=sys.stderr, flush=True)


_RST_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj|ref|doc):`~?([^`]+)`")
_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str | None) -> str | None:
    """``text`` (a docstring) without reStructuredText markup: ````x```` and ``:role:`x```
    become ``x``, a paragraph's closing ``::`` becomes ``:``."""
    if text is None:
        return None
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_LITERAL.sub(r"\1", text)
    return re.sub(r"::(\s*\n)", r":\1", text)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` after an option's help, unless X is None or False (nothing to show; a
    preset or the app fills it, and the help says so) or the help already names its default.
    Descriptions keep their paragraphs (blank lines), ``- `` list items and indented blocks
    (examples); help texts lose reStructuredText markup (:func:`plain_text`)."""

    def _fill_text(self, text, width, indent):
        blocks = []
        for para in re.split(r"\n\s*\n", plain_text(text).strip("\n")):
            lines = para.splitlines()
            if all(line.startswith("    ") for line in lines):  # a literal block: as is
                blocks.append("\n".join(indent + line for line in lines))
                continue
            items, current = [], []
            for line in lines:
                if line.lstrip().startswith("- ") and current:
                    items.append(current)
                    current = []
                current.append(line.strip())
            items.append(current)
            filled = []
            for item in items:
                joined = " ".join(item)
                hang = "  " if joined.startswith("- ") else ""
                filled.append(textwrap.fill(joined, width, initial_indent=indent,
                                            subsequent_indent=indent + hang,
                                            break_on_hyphens=False))
            blocks.append("\n".join(filled))
        return "\n\n".join(b for b in blocks if b.strip())

    def _split_lines(self, text, width):
        # a name such as sparc-record-gradients or --checkpoint-every-steps stays whole
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action):
        text = plain_text(action.help or "")
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS \
                or "default" in text.lower() or (isinstance(default, (list, tuple))
                                                 and not default):  # never "(default: )"
            return text
        if isinstance(default, (list, tuple)):  # as it is typed: space-separated
            shown = " ".join(map(str, default)).replace("%", "%%")
            return f"{text} (default: {shown})"
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (``PROG: error: MESSAGE (see PROG --help)``),
    printed by rank 0 only when an MPI launcher started the ranks; exit status 2."""

    def error(self, message: str):
        if first_rank():
            self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        self.exit(2)


_OPTION_FLAGS = ("partitions", "index_coding")  # the Options fields given as flags


def add_options_arguments(group) -> None:
    """``--partitions`` and ``--index-coding``: fields of the :class:`sparcml.Options` every
    call gets (:func:`options_from_args`); unset, the process defaults (``SPARCML_*``, as the
    library reads them); given, the flag wins over the variable."""
    group.add_argument("--partitions", choices=["balanced", "equal"], default=None,
                       help="blocks of the split algorithms' reduce-scatter (default: "
                            "$SPARCML_PARTITIONS if set, else balanced; the flag wins)")
    group.add_argument("--index-coding", choices=["auto", "coded", "raw"], default=None,
                       help="indices of sparse messages (default: $SPARCML_INDEX_CODING if "
                            "set, else auto: coded where the link time saved exceeds the CPU "
                            "time; the flag wins)")


def options_from_args(args, parser=None):
    """The :class:`sparcml.Options` of :func:`add_options_arguments`'s flags: the process
    defaults (:func:`sparcml.default_options`, the ``SPARCML_*`` variables every sparcml call
    reads) with the flags given (a flag wins over its variable).

    With ``parser`` (a CLI's, called right after parsing): a bad ``SPARCML_*`` variable is a
    usage error (``parser.error``: one line naming the variable, exit 2), as a bad flag is,
    and the flags left unset are filled in ``args`` with the values that will run, so that
    the run's record says what ran. Without, :class:`sparcml.InvalidOptionError`."""
    import sparcml  # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help

    given = {name: getattr(args, name, None) for name in _OPTION_FLAGS}
    try:
        options = replace(sparcml.default_options(),
                          **{name: value for name, value in given.items() if value is not None})
    except sparcml.InvalidOptionError as exc:
        if parser is None:
            raise
        parser.error(str(exc))
    if parser is not None:
        for name in _OPTION_FLAGS:
            if hasattr(args, name):
                setattr(args, name, getattr(options, name))
    return options


def make_parser(prog: str, description: str | None = None, *, parser_class=None,
                **kwargs) -> argparse.ArgumentParser:
    """A :class:`Parser` (or ``parser_class``, a subclass) of the project's vocabulary: no
    abbreviations, defaults shown by :class:`HelpFormatter` (unless another
    ``formatter_class`` is given)."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    kwargs.setdefault("allow_abbrev", False)
    return (parser_class or Parser)(prog=prog, description=plain_text(description), **kwargs)


class ListAction(argparse.Action):
    """``nargs="+"``: space-separated values, each converted by ``item_type``; a value with
    commas (the old form ``a,b``) is split, with a deprecation note. Bad items are argparse
    errors (one line, exit 2)."""

    def __init__(self, option_strings, dest, item_type=str, item_choices=None, **kwargs):
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)
        self.item_type, self.item_choices = item_type, item_choices

    def __call__(self, parser, namespace, values, option_string=None):
        items = []
        for value in values:
            parts = [v.strip() for v in value.split(",")] if "," in value else [value]
            if len(parts) > 1:
                deprecation_note(parser.prog, f"{option_string} {value}: comma-separated "
                                 f"lists are read for now; write {option_string} "
                                 f"{' '.join(p for p in parts if p)}")
            for part in parts:
                if not part:
                    continue
                try:
                    item = self.item_type(part)
                except (argparse.ArgumentTypeError, ValueError) as exc:
                    raise argparse.ArgumentError(self, str(exc) or f"invalid value {part!r}")
                if self.item_choices is not None and item not in self.item_choices:
                    raise argparse.ArgumentError(self, f"invalid choice: {part!r} (choose from "
                                                 f"{', '.join(map(str, self.item_choices))})")
                items.append(item)
        if not items:
            raise argparse.ArgumentError(self, "expected at least one value")
        setattr(namespace, self.dest, items)


def add_list_argument(parser, *flags, item_type=str, choices=None, **kwargs):
    """``parser.add_argument(*flags, action=ListAction, ...)``: a space-separated list."""
    return parser.add_argument(*flags, action=ListAction, item_type=item_type,
                               item_choices=choices, **kwargs)


class _DeprecatedAlias(argparse.Action):
    """An old flag name: stores into the new flag's dest (a one-item list where the new flag
    takes a list) and says the new name."""

    def __init__(self, option_strings, dest, new_flag, type=None, as_list=False, **kwargs):
        super().__init__(option_strings, dest, nargs=1, help=argparse.SUPPRESS, **kwargs)
        self.new_flag, self.convert, self.as_list = new_flag, type, as_list

    def __call__(self, parser, namespace, values, option_string=None):
        deprecation_note(parser.prog, f"{option_string} is now {self.new_flag}")
        value = values[0]
        if self.convert is not None:
            try:
                value = self.convert(value)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise argparse.ArgumentError(self, str(exc) or f"invalid value {value!r}")
        setattr(namespace, self.dest, [value] if self.as_list else value)


def add_deprecated_alias(parser, old: str, new: argparse.Action):
    """``old`` (a flag users may have in scripts) as a hidden alias of the option ``new`` (the
    action ``add_argument`` returned): it stores the same value (converted by ``new``'s type
    and choices) and prints ``PROG: deprecated: OLD is now NEW`` once per job."""
    as_list = isinstance(new, ListAction)
    convert = new.item_type if as_list else new.type
    choices = new.item_choices if as_list else new.choices

    def checked(text):
        value = convert(text) if convert is not None else text
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                             f"{', '.join(map(str, choices))})")
        return value

    return parser.add_argument(old, action=_DeprecatedAlias, dest=new.dest,
                               new_flag=new.option_strings[-1], type=checked, as_list=as_list)


def add_timeout_argument(parser, *, default: float | None, what: str, old: str | None = None):
    """``--timeout-seconds SECONDS``: a limit in seconds on ``what``; ``old`` (e.g.
    ``--timeout``) a deprecated alias."""
    action = parser.add_argument("--timeout-seconds", type=positive_float, default=default,
                                 metavar="SECONDS", help=f"limit in seconds on {what}")
    if old:
        add_deprecated_alias(parser, old, action)
    return action


def add_records_output_argument(parser, *, per: str = "run", default: str | None = None,
                                default_text: str = ""):
    """``-o/--output FILE.jsonl``: append one JSON record per ``per`` to this file (the records of
    :mod:`sparcapps.records`, which ``sparc-report`` reads), checked writable when the command
    line is read (:func:`output_file`); ``default`` is used without the flag (None: nothing
    is written), ``default_text`` says what happens then when it is not the path itself."""
    shown = default_text or default
    note = f" (default: {shown})" if shown else ""
    return parser.add_argument("-o", "--output", metavar="FILE.jsonl", type=output_file,
                               default=default,
                               help=f"append one JSON record per {per} to this file{note}")


#: what ``--density`` means in every tool (the allreduce's view: how sparse each rank's
#: contribution is); each tool's help goes on to say where that vector comes from
DENSITY_MEANING = "fraction of each rank's vector that enters the allreduce (nonzeros / N)"


def density_help(source: str) -> str:
    """The help of a ``--density`` flag: :data:`DENSITY_MEANING`, then ``source`` (where the
    vector comes from in this tool)."""
    return f"{DENSITY_MEANING}: {source}"


def add_bits_argument(parser, *, default: int = 0, what: str = "dense messages"):
    """``--bits {0,2,4,8}``: QSGD bits per value of ``what``; 0 is full precision."""
    return parser.add_argument(
        "--bits", type=int, choices=BITS_CHOICES, default=default,
        help=f"QSGD-quantize {what} to this many bits per value; 0: full precision")


def add_compressor_arguments(group):
    """``--compressor NAME`` (:data:`sparcml.compression.COMPRESSORS`; default: top-k from
    ``--density``) and the flags of the registered compressors' parameters
    (:func:`sparcml.compression.compressor_params`: ``--threshold``, ``--powersgd-rank``,
    ``--shared-indices``, ``--density-warmup-steps``, ``--clip-norm``, ..., each helped as
    ``--compressor NAMES: ...``). The parameters read from the app's own flags (``--density``,
    ``--bits``, ``--seed``, ``--topk-bucket-size``; ``app_flag``) are not
    added; ``--no-error-feedback`` and ``--algorithm`` are the app's too."""
    # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help
    from sparcml.compression import COMPRESSORS, compressor_names, compressor_params, \
        get_compressor

    group.add_argument("--compressor", default=None, choices=list(COMPRESSORS), metavar="NAME",
                       help="gradient compressor: " + "; ".join(
                           f"{k}: {v}" for k, v in COMPRESSORS.items())
                       + ". Default: topk (or --global-topk)")
    for param in compressor_params():
        if param.app_flag:
            continue
        users = [n for n in compressor_names()
                 if any(p.flag == param.flag for p in get_compressor(n).params)]
        group.add_argument(param.flag, help=f"--compressor {', '.join(users)}: {param.help}",
                           **param.argparse_kwargs())


def compressor_params_from_args(args) -> dict:
    """The keyword parameters of :func:`sparcml.compression.build`, every registered
    compressor's, read from the parsed flags (a flag the namespace lacks, in a record of an
    older version, takes its default): ``build`` uses those of ``args.compressor`` and refuses
    ``--bits`` where it takes no quantizer."""
    # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help
    from sparcml.compression import compressor_params

    return {p.name: getattr(args, p.dest, p.default) for p in compressor_params()}


def add_checkpoint_every_argument(parser, unit: str, *, help: str):
    """``--checkpoint-every-{unit}`` (``steps`` or ``epochs``), with the old
    ``--checkpoint-every`` as a deprecated alias."""
    if unit not in ("steps", "epochs"):
        raise ValueError(f"unit must be 'steps' or 'epochs', got {unit!r}")
    flag = f"--checkpoint-every-{unit}"
    dest = flag[2:].replace("-", "_")
    parser.add_argument(flag, type=nonnegative_int, default=0, metavar=unit.upper(),
                        help=help + "; 0: none")
    parser.add_argument("--checkpoint-every", action=_DeprecatedAlias, dest=dest,
                        new_flag=flag, type=nonnegative_int)


def add_data_home_argument(parser):
    """``--data-home DIR``: where data sets are fetched to and read from."""
    return parser.add_argument(
        "--data-home", metavar="DIR",
        help="where data sets live (default: $SPARCML_DATA_HOME, else datasets/ of a "
             "checkout, else $XDG_CACHE_HOME/sparcml or ~/.cache/sparcml)")


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _finite_float(text: str, low: float, strict: bool) -> float:
    what = f"a finite number {'>' if strict else '>='} {low:g}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (not nan, not inf)."""
    return _finite_float(text, 0.0, strict=True)


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _finite_float(text, 0.0, strict=False)


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1] (a density)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


_plugins_loaded = False


def registered_algorithms() -> tuple[str, ...]:
    """The registered algorithm names, the installed plugins' included: the first call loads
    them (:func:`sparcml.load_plugins`). A plugin that cannot be loaded ends the program with
    one line naming it (exit status 1)."""
    global _plugins_loaded
    import sparcml  # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help

    if not _plugins_loaded:
        try:
            sparcml.load_plugins()
        except sparcml.SparcmlError as exc:
            raise SystemExit(f"error: {exc}") from None
        _plugins_loaded = True
    return tuple(sparcml.ALGORITHMS)


def output_file(text: str) -> str:
    """argparse type: a file the run can write or append to, checked before any work
    (:func:`sparcapps.output_paths.check_output_file`); the text is returned unchanged."""
    try:
        check_output_file(text)
    except OutputPathError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def output_dir(text: str) -> str:
    """argparse type: a directory the run can write into (existing or creatable), checked
    before any work (:func:`sparcapps.output_paths.check_output_dir`)."""
    try:
        check_output_dir(text)
    except OutputPathError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def algorithm_name(text: str) -> str:
    """argparse type: a registered algorithm or ``auto``."""
    # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help
    from sparcml import AUTO

    choices = registered_algorithms() + (AUTO,)
    if text not in choices:
        raise argparse.ArgumentTypeError(
            f"unknown algorithm {text!r}; choose from {', '.join(choices)}")
    return text


def algorithm_list(text: str) -> list[str]:
    """argparse type: comma-separated algorithm names (each registered, or ``auto``); the
    CLIs take space-separated lists (:class:`ListAction` with :func:`algorithm_name`)."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected at least one algorithm name")
    return [algorithm_name(a) for a in names]


def algorithm_help(prefix: str = "") -> str:
    """One line per registered algorithm (its summary), then ``auto``'s, after ``prefix``."""
    # sparcml (numba, MPI) only for the tools that use it, not every CLI's --help
    from sparcml import AUTO, get_algorithm

    lines = [f"{a}: {get_algorithm(a).summary}" for a in registered_algorithms()]
    lines.append(f"{AUTO}: the calibrated cost model's choice per call")
    return (prefix + " " if prefix else "") + "; ".join(lines).replace("%", "%%")
