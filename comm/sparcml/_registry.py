"""The algorithm registry: one record per sparse-allreduce algorithm.

Below the collectives (:mod:`sparcml._collectives`) and the cost model (:mod:`sparcml._model`),
which both read it; it imports only the errors and the tag allocator.

Everything that lists, validates, documents or models the algorithms reads this registry: the
public :data:`sparcml.ALGORITHMS`, argparse ``choices=`` and help texts of the CLIs, error
messages, the cost model and ``auto``. Adding an algorithm is one module that builds an
:class:`Algorithm` (its docstring states the ``run`` and ``cost`` contracts; ``run`` receives a
:class:`sparcml.CallContext`, whose docstring states what a plugin may use) and calls
:func:`register`: a module put in ``sparcml/_collectives/algorithms/`` is found and imported
with the package (no list to edit); ``tests/toy_algorithm.py`` is one written with public names
only. The registry allocates the message tags an algorithm declares
(:mod:`sparcml._runtime.tags`), and whether its messages carry a plan's error flag is declared
too (``routes_through_ops``). Third-party packages may
register theirs on import, or through the entry-point group :data:`PLUGIN_GROUP`
(``sparcml.algorithms``; each entry point names a module or callable), which
:func:`load_plugins` loads: the ``sparc-*`` CLIs call it before they read the algorithm names
(``sparcapps.cli_args``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

from ._errors import IncompatibleOptionsError, SparcmlError, UnknownAlgorithmError
from ._runtime.tags import Tags, message_tags, release_tags

__all__ = ["Algorithm", "AUTO", "ALGORITHMS", "register", "unregister", "get_algorithm",
           "algorithm_names", "algorithm_code", "algorithm_from_code",
           "check_algorithm_options", "load_plugins", "PLUGIN_GROUP"]

AUTO = "auto"  # not an algorithm: the cost model's choice per call (sparcml._model.auto)
PLUGIN_GROUP = "sparcml.algorithms"  # the entry-point group of installed algorithm plugins


@dataclass(frozen=True)
class Algorithm:
    """One sparse-allreduce algorithm: what :func:`register` takes.

    ``name``: an identifier other than ``"auto"``. ``summary``: one line for help texts.
    ``writes_out``: the algorithm computes a dense result anyway and writes it into the
    caller's ``out=`` itself. ``accepts_quantizer``: False when its messages cannot carry QSGD
    values (MPI_Allreduce adds raw floats). ``in_auto``: a candidate for ``algorithm="auto"``.
    ``baseline``: a reference others are compared with (printed as such by the benchmarks).
    ``order``: where it stands in :data:`sparcml.ALGORITHMS` (help texts, tables; ascending,
    then in registration order; the built-in ones take 10 to 50). ``tags``: the names of the
    point-to-point message tags it sends with; :func:`register` allocates their numbers
    (:mod:`sparcml._runtime.tags`), which ``run`` reads as ``ctx.tags.NAME`` (or
    ``algorithm.tags.NAME``; every process gets the same numbers). ``routes_through_ops``: True only when every message
    ``run`` exchanges goes through ``ctx.ops`` (its encode, decode and collectives, as the
    built-in split and butterfly algorithms do), so that a plan's error flag
    (:mod:`sparcml._collectives.plan`) travels in the messages and reaches every rank; with
    the default False a plan carries the flag in a one-integer non-blocking reduction beside
    each call, so an algorithm that calls ``ctx.comm`` directly cannot leave a failing rank
    alone in the plan's error agreement.

    ``run(ctx, vec, *, stats, codec, out, sent) -> SparseVector`` is called on every rank of the
    communicator after the ranks agreed on the arguments, for P >= 2 only (P = 1 never reaches it).
    ``ctx``: the call's :class:`~sparcml.CallContext`, whose docstring states what it holds
    (sparcml's own duplicate communicator, rank and size, the operations that carry a plan's
    error flag, the call's resolved options, the workspace, the tags allocated for
    ``tags``, the waiting policy) and is all an algorithm may use. ``vec``: this rank's input, in the representation of the switch rule
    unless ``writes_out`` (then as the caller gave it). ``stats``: the
    :class:`~sparcml.TrafficStats` to count this rank's traffic in
    (:meth:`~sparcml.TrafficStats.add_message` per message sent, ``bytes_received``). ``codec``:
    sparcml's wire encoding for this call (the built-in algorithms' messages; an algorithm that
    sends its own may ignore it). ``out``: the caller's buffer for ``writes_out`` algorithms, else
    None (the entry point copies the result into ``out``). ``sent``: None, except with a quantizer
    (so never for ``accepts_quantizer=False``), when the built-in algorithms report how the others
    received this rank's input. It must return the same sum on every rank, as fresh memory (never
    ``vec``'s arrays nor a view of them): build it with :meth:`SparseVector.unchecked
    <sparcml.SparseVector.unchecked>` when it is valid by construction (no second validation).

    ``cost(model, *, P, N, k, K, q, s_idx, s_val, options) -> seconds``: the predicted time for
    P >= 2 ranks, dimension N, k items per input, K in the result (None: estimate it from the
    overlap q), s_idx / s_val bytes per index / value, under the call's ``options`` (an
    :class:`~sparcml.Options` or the call's resolved options: ``options.code_indices``,
    whether sparse indices travel coded; ``options.native(P)``, whether the phases that
    exchange with every rank run as MPI vector collectives); pure arithmetic on the
    :class:`~sparcml.CostModel`'s parameters and methods (``message``, ``allgather``,
    ``allreduce``, ``exchange``), no MPI.
    """

    name: str
    run: Callable
    cost: Callable
    summary: str
    writes_out: bool = False
    accepts_quantizer: bool = True
    in_auto: bool = True
    baseline: bool = False
    order: int = 100
    tags: tuple[str, ...] = ()
    routes_through_ops: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name == AUTO:
            raise SparcmlError(f"an algorithm name must be an identifier other than {AUTO!r}, "
                               f"got {self.name!r}")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise SparcmlError(f"an algorithm's tags are a tuple of names, got {self.tags!r}")
        object.__setattr__(self, "tags", _DeclaredTags(tuple(self.tags)))

    @property
    def code(self) -> int:
        """A number that names the algorithm the same way in every process (for agreement)."""
        return algorithm_code(self.name)


class _DeclaredTags(tuple):
    """An algorithm's declared tag names (a tuple) whose attributes are the allocated numbers:
    ``algorithm.tags.round`` (allocated by :func:`register`, the same in every process)."""

    allocated: Tags | None = None  # set by register()

    def __getattr__(self, name: str) -> int:
        if name.startswith("__") or self.allocated is None:
            raise AttributeError(f"message tag {name!r} read before the algorithm was "
                                 f"registered" if not name.startswith("__") else name)
        return getattr(self.allocated, name)


def _tag_owner(name: str) -> str:
    return f"algorithm {name}"


_REGISTRY: dict[str, Algorithm] = {}
_PLUGINS_LOADED: set[tuple[str, str, str]] = set()  # (group, name, value) of load_plugins


def register(algorithm: Algorithm, *, replace: bool = False) -> Algorithm:
    """Add ``algorithm`` to the registry (``replace=True`` to overwrite one of that name)."""
    if not isinstance(algorithm, Algorithm):
        raise SparcmlError(f"register() takes a sparcml.Algorithm, got "
                           f"{type(algorithm).__name__}")
    if algorithm.name in _REGISTRY and not replace:
        raise SparcmlError(f"an algorithm named {algorithm.name!r} is already registered; "
                           f"pass replace=True to overwrite it")
    if algorithm.name in _REGISTRY:
        release_tags(_tag_owner(algorithm.name))
    algorithm.tags.allocated = message_tags(_tag_owner(algorithm.name), *algorithm.tags)
    _REGISTRY[algorithm.name] = algorithm
    _ORDERED.clear()
    return algorithm


def unregister(name: str) -> None:
    """Remove an algorithm and free its tags (tests and plugins that clean up after
    themselves)."""
    old = _REGISTRY.pop(name, None)
    if old is not None:
        release_tags(_tag_owner(name))
        _ORDERED.clear()


_ORDERED: list[str] = []  # the names by (order, registration), cached until the next change


def algorithm_names(*, auto: bool = False, in_auto_only: bool = False) -> tuple[str, ...]:
    """The registered names by ``order``, then registration order (``auto=True`` appends
    ``"auto"``)."""
    if not _ORDERED:
        at = {name: i for i, name in enumerate(_REGISTRY)}
        _ORDERED.extend(sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].order, at[n])))
    names = tuple(n for n in _ORDERED if _REGISTRY[n].in_auto or not in_auto_only)
    return names + (AUTO,) if auto else names


def get_algorithm(name) -> Algorithm:
    """The record of ``name``; :class:`UnknownAlgorithmError` listing the choices otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownAlgorithmError(
            f"unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())} or "
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
        able = [n for n in algorithm_names() if _REGISTRY[n].accepts_quantizer]
        raise IncompatibleOptionsError(
            f"algorithm {name!r} cannot add quantized values ({algorithm.summary}); with a "
            f"quantizer use one of {', '.join(able)} or {AUTO!r}")
    return algorithm


def load_plugins(group: str = PLUGIN_GROUP) -> list[str]:
    """Import the algorithms other installed packages declare under the entry-point ``group``
    (default ``"sparcml.algorithms"``); the ``sparc-*`` CLIs call it before reading the names.

    An entry point names a module (registering its algorithms when imported), an
    :class:`Algorithm` (registered unless one of its name is) or a callable (called with no
    argument). Returns the names of the entry points loaded by this call: each entry point is
    loaded once per process. A plugin that fails to import raises :class:`SparcmlError` naming
    it (a CLI should not silently lose an algorithm).
    """
    from importlib.metadata import entry_points

    loaded = []
    for ep in entry_points(group=group):
        if (group, ep.name, ep.value) in _PLUGINS_LOADED:
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - re-raised with the plugin's name
            raise SparcmlError(f"cannot load sparcml algorithm plugin {ep.name!r} "
                               f"({ep.value}): {type(exc).__name__}: {exc}") from exc
        if isinstance(obj, Algorithm) and obj.name not in _REGISTRY:
            register(obj)
        elif callable(obj) and not isinstance(obj, Algorithm):
            obj()
        _PLUGINS_LOADED.add((group, ep.name, ep.value))
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
