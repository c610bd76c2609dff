"""Argument types shared by the CLIs: one vocabulary and one validation for every entry point.

Algorithm names come from the registry (:mod:`sparcml.registry`), so a registered algorithm is
accepted by every CLI, and a wrong one is refused by argparse (one line, exit 2) before any MPI
work. Numbers that must be positive or fractions are checked here, not deep in a run.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "nonnegative_int", "fraction", "algorithm_name", "algorithm_list",
           "algorithm_help"]


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
    from sparcml.errors import SparcmlError
    from sparcml.validation import check_density

    try:
        return check_density(float(text), name="value")
    except (ValueError, SparcmlError) as exc:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from exc


def algorithm_name(text: str) -> str:
    """argparse type: a registered algorithm or ``auto``."""
    from sparcml.registry import algorithm_names

    choices = algorithm_names(auto=True)
    if text not in choices:
        raise argparse.ArgumentTypeError(
            f"unknown algorithm {text!r}; choose from {', '.join(choices)}")
    return text


def algorithm_list(text: str) -> list[str]:
    """argparse type: comma-separated algorithm names (each registered, or ``auto``)."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected at least one algorithm name")
    return [algorithm_name(a) for a in names]


def algorithm_help(prefix: str = "") -> str:
    """The registry's one-line-per-algorithm help, after ``prefix``."""
    from sparcml.registry import help_text

    return (prefix + " " if prefix else "") + help_text().replace("%", "%%")
