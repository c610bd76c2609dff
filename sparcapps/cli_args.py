"""Argument types and flags shared by the CLIs: one vocabulary and one validation for every
entry point.

Algorithm names come from the registry (:mod:`sparcml._collectives.registry`), so a registered algorithm is
accepted by every CLI, and a wrong one is refused by argparse (one line, exit 2) before any MPI
work. Numbers that must be positive or fractions are checked here, not deep in a run.

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
- help shows each default once, and none where there is none (:class:`HelpFormatter`);
- a usage error is one line, ``PROG: error: MESSAGE (see PROG --help)``, printed once per job
  (rank 0), exit status 2 (:class:`Parser`).
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["positive_int", "nonnegative_int", "fraction", "algorithm_name", "algorithm_list",
           "algorithm_help", "make_parser", "HelpFormatter", "ListAction", "BITS_CHOICES",
           "add_bits_argument", "add_checkpoint_every_argument", "add_data_home_argument",
           "add_list_argument", "add_options_arguments", "options_from_args",
           "deprecation_note", "first_rank", "Parser"]

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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` after an option's help, unless X is None or False (nothing to show; a
    preset or the app fills it, and the help says so) or the help already names its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS \
                or "default" in text.lower():
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (``PROG: error: MESSAGE (see PROG --help)``),
    printed by rank 0 only when an MPI launcher started the ranks; exit status 2."""

    def error(self, message: str):
        if first_rank():
            self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        self.exit(2)


def add_options_arguments(group) -> None:
    """``--partitions`` and ``--index-coding``: fields of the :class:`sparcml.Options` every
    call gets (:func:`options_from_args`); unset, the process defaults (``SPARCML_*``)."""
    group.add_argument("--partitions", choices=["balanced", "equal"], default=None,
                       help="blocks of the split algorithms' reduce-scatter (default: "
                            "SPARCML_PARTITIONS, else balanced)")
    group.add_argument("--index-coding", choices=["auto", "coded", "raw"], default=None,
                       help="indices of sparse messages (default: SPARCML_INDEX_CODING, else "
                            "auto: coded where the link time saved exceeds the CPU time)")


def options_from_args(args):
    """The :class:`sparcml.Options` of :func:`add_options_arguments`'s flags: the process
    defaults with the flags given."""
    from dataclasses import replace

    import sparcml

    given = {name: getattr(args, name, None) for name in ("partitions", "index_coding")}
    return replace(sparcml.default_options(),
                   **{name: value for name, value in given.items() if value is not None})


def make_parser(prog: str, description: str | None = None, **kwargs) -> argparse.ArgumentParser:
    """A :class:`Parser` of the project's vocabulary: no abbreviations, defaults shown by
    :class:`HelpFormatter` (unless another ``formatter_class`` is given)."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    kwargs.setdefault("allow_abbrev", False)
    return Parser(prog=prog, description=description, **kwargs)


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
    """An old flag name: stores into the new flag's dest and says the new name."""

    def __init__(self, option_strings, dest, new_flag, type=None, **kwargs):
        super().__init__(option_strings, dest, nargs=1, help=argparse.SUPPRESS, **kwargs)
        self.new_flag, self.convert = new_flag, type

    def __call__(self, parser, namespace, values, option_string=None):
        deprecation_note(parser.prog, f"{option_string} is now {self.new_flag}")
        value = values[0]
        if self.convert is not None:
            try:
                value = self.convert(value)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise argparse.ArgumentError(self, str(exc) or f"invalid value {value!r}")
        setattr(namespace, self.dest, value)


def add_bits_argument(parser, *, default: int = 0, what: str = "dense messages"):
    """``--bits {0,2,4,8}``: QSGD bits per value of ``what``; 0 is full precision."""
    return parser.add_argument(
        "--bits", type=int, choices=BITS_CHOICES, default=default,
        help=f"QSGD-quantize {what} to this many bits per value; 0: full precision")


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


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1] (a density), by sparcml's own check."""
    from sparcml._errors import SparcmlError
    from sparcml._collectives.validation import check_density

    try:
        return check_density(float(text), name="value")
    except (ValueError, SparcmlError) as exc:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from exc


def algorithm_name(text: str) -> str:
    """argparse type: a registered algorithm or ``auto``."""
    from sparcml._collectives.registry import algorithm_names

    choices = algorithm_names(auto=True)
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
    """The registry's one-line-per-algorithm help, after ``prefix``."""
    from sparcml._collectives.registry import help_text

    return (prefix + " " if prefix else "") + help_text().replace("%", "%%")
