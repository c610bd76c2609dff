"""The algorithm registry: one record per sparse-allreduce algorithm.

Everything that lists, validates, documents or models the algorithms reads this registry: the
public :data:`sparcml.ALGORITHMS`, argparse ``choices=`` and help texts of the CLIs, error
messages, the cost model and ``auto``. Adding an algorithm is one module that builds an
:class:`Algorithm` and calls :func:`register` (see ``sparcml/algorithms/`` for the built-in
ones). Third-party packages may register theirs on import, or through the entry-point group
``sparcml.algorithms`` (each entry point names a module or callable; it is loaded by
:func:`load_plugins`, which the CLIs call).

An algorithm's ``run`` contract (called on every rank of the communicator, after the ranks
agreed on the arguments)::

    run(ctx, vec, *, stats, codec, out) -> SparseVector

``ctx`` is the call's :class:`~sparcml._runtime.context.CommContext` (``comm``, ``rank``, ``size``,
``waiter``); ``vec`` this rank's input, in the representation of the switch rule unless the
record says ``writes_out`` (then as the caller gave it); ``codec`` the call's
:class:`~sparcml._wire.codec.Codec`; ``out`` the caller's buffer or None (only for ``writes_out``
algorithms; the others get None and the entry point copies the result into ``out``). It must
return the same sum on every rank, for any P >= 2 (P = 1 never reaches ``run``).

The ``cost`` contract: ``cost(model, *, P, N, k, K, q, s_idx, s_val) -> seconds``, pure
arithmetic on a :class:`~sparcml._model.costmodel.CostModel`'s parameters for P >= 2 (no agreement
check, no MPI).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

from .._errors import IncompatibleOptionsError, SparcmlError, UnknownAlgorithmError

__all__ = ["Algorithm", "AUTO", "ALGORITHMS", "register", "unregister", "get_algorithm",
           "algorithm_names", "algorithm_code", "algorithm_from_code",
           "check_algorithm_options", "help_text", "load_plugins"]

AUTO = "auto"  # not an algorithm: the cost model's choice per call (sparcml._model.auto)


@dataclass(frozen=True)
class Algorithm:
    """One sparse-allreduce algorithm (see the module docstring for ``run`` and ``cost``).

    ``summary``: one line for help texts. ``writes_out``: the algorithm computes a dense
    result anyway and writes it into the caller's ``out=`` itself. ``accepts_quantizer``:
    False when its messages cannot carry QSGD values (MPI_Allreduce adds raw floats).
    ``in_auto``: a candidate for ``algorithm="auto"``. ``baseline``: a reference others are
    compared with (printed as such by the benchmarks).
    """

    name: str
    run: Callable
    cost: Callable
    summary: str
    writes_out: bool = False
    accepts_quantizer: bool = True
    in_auto: bool = True
    baseline: bool = False

    def __post_init__(self):
        if not self.name or not self.name.isidentifier() or self.name == AUTO:
            raise SparcmlError(f"an algorithm name must be an identifier other than {AUTO!r}, "
                               f"got {self.name!r}")

    @property
    def code(self) -> int:
        """A number that names the algorithm the same way in every process (for agreement)."""
        return algorithm_code(self.name)


_REGISTRY: dict[str, Algorithm] = {}


def register(algorithm: Algorithm, *, replace: bool = False) -> Algorithm:
    """Add ``algorithm`` to the registry (``replace=True`` to overwrite one of that name)."""
    if not isinstance(algorithm, Algorithm):
        raise SparcmlError(f"register() takes a sparcml.Algorithm, got "
                           f"{type(algorithm).__name__}")
    if algorithm.name in _REGISTRY and not replace:
        raise SparcmlError(f"an algorithm named {algorithm.name!r} is already registered; "
                           f"pass replace=True to overwrite it")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def unregister(name: str) -> None:
    """Remove an algorithm (tests and plugins that clean up after themselves)."""
    _REGISTRY.pop(name, None)


def algorithm_names(*, auto: bool = False, in_auto_only: bool = False) -> tuple[str, ...]:
    """The registered names in registration order (``auto=True`` appends ``"auto"``)."""
    names = tuple(a.name for a in _REGISTRY.values() if a.in_auto or not in_auto_only)
    return names + (AUTO,) if auto else names


def get_algorithm(name) -> Algorithm:
    """The record of ``name``; :class:`UnknownAlgorithmError` listing the choices otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownAlgorithmError(
            f"unknown algorithm {name!r}; choose one of {', '.join(_REGISTRY)} or "
            f"{AUTO!r}") from None


def algorithm_code(name: str) -> int:
    """CRC-32 of the name: equal across processes (unlike ``hash``), for agreement checks."""
    return zlib.crc32(name.encode())


def algorithm_from_code(code: int) -> str:
    """The name of a code (``auto`` included), or ``"(invalid)"``."""
    for name in algorithm_names(auto=True):
        if algorithm_code(name) == code:
            return name
    return "(invalid)"


def check_algorithm_options(name, *, quantizer=None) -> Algorithm | None:
    """Validate an algorithm choice with its options; returns the record (None for ``auto``).

    Raises :class:`UnknownAlgorithmError` or :class:`IncompatibleOptionsError` (a quantizer
    with an algorithm that cannot carry quantized values). The one place this is checked.
    """
    if name == AUTO:
        return None
    algorithm = get_algorithm(name)
    if quantizer is not None and not algorithm.accepts_quantizer:
        able = [a.name for a in _REGISTRY.values() if a.accepts_quantizer]
        raise IncompatibleOptionsError(
            f"algorithm {name!r} cannot add quantized values ({algorithm.summary}); with a "
            f"quantizer use one of {', '.join(able)} or {AUTO!r}")
    return algorithm


def help_text() -> str:
    """One line per algorithm, for ``--help``."""
    lines = [f"{a.name}: {a.summary}" for a in _REGISTRY.values()]
    lines.append(f"{AUTO}: the calibrated cost model's choice per call")
    return "; ".join(lines)


def load_plugins(group: str = "sparcml.algorithms") -> list[str]:
    """Import the algorithms other installed packages declare under the entry-point ``group``.

    Returns the names of the entry points loaded. A plugin that fails to import raises
    :class:`SparcmlError` naming it (a CLI should not silently lose an algorithm).
    """
    from importlib.metadata import entry_points

    loaded = []
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - re-raised with the plugin's name
            raise SparcmlError(f"cannot load sparcml algorithm plugin {ep.name!r} "
                               f"({ep.value}): {type(exc).__name__}: {exc}") from exc
        if isinstance(obj, Algorithm) and obj.name not in _REGISTRY:
            register(obj)
        elif callable(obj) and not isinstance(obj, Algorithm):
            obj()
        loaded.append(ep.name)
    return loaded


class _AlgorithmNames(Sequence):
    """A read-only, live view of the registered names (what ``sparcml.ALGORITHMS`` is)."""

    def __getitem__(self, i):
        return algorithm_names()[i]

    def __len__(self):
        return len(_REGISTRY)

    def __add__(self, other):
        return algorithm_names() + tuple(other)

    def __radd__(self, other):
        return tuple(other) + algorithm_names()

    def __eq__(self, other):
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self):
        return hash(algorithm_names())

    def __repr__(self):
        return repr(algorithm_names())


ALGORITHMS = _AlgorithmNames()
