"""The compressor registry: what ``--compressor NAME`` selects, one record per name.

Everything that lists, builds, documents or names the compressors reads this registry: the
public :data:`COMPRESSORS` (name -> one line), :func:`build`, the deep apps' ``--compressor``
choices, help and flags (:func:`sparcapps.cli_args.add_compressor_arguments`), the apps'
default learning rate and SGD momentum per compressor (:func:`recommended_hyperparameters`)
and the table of compressors (``sparc-compressor-table``: its row names, and the records'
defaults). A compressor is one module of
``sparcml/compression/compressors/`` (found and imported with the package, no list to edit;
or a module of another package that registers on import) which builds a
:class:`CompressorSpec` (its CLI name, one line, its parameters as :class:`Param` records,
what builds it, the table's row label, its paper's recommended hyperparameters) and calls
:func:`register_compressor`. Its cost is its class's
:meth:`~sparcml.compression.Compressor.predicted_seconds` (the cost model of
:func:`sparcml.compression.predicted_seconds`), so it is where the class is.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable

from .._collectives.algorithms import DEFAULT_ALGORITHM
from .._errors import CompressionError, SparcmlError
from .._quant.qsgd import QSGD
from ._objects import Compression, NoneMemory, ResidualMemory

__all__ = ["Param", "CompressorSpec", "register_compressor", "unregister_compressor",
           "get_compressor", "compressor_names", "compressor_params", "COMPRESSORS", "build",
           "DENSITY", "BITS", "MOMENTUM", "SEED", "CHUNK", "quantizer_of", "memory_of",
           "recommended_hyperparameters",
           "positive_int", "nonnegative_int", "bits_label", "percent_label"]


def _int_at_least(text, low: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
    return value


def positive_int(text) -> int:
    """An argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def nonnegative_int(text) -> int:
    """An argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def bits_label(bits) -> str | None:
    """A table row's phrase for ``--bits``: ``"4-bit"``, nothing for 0."""
    return f"{bits}-bit" if bits else None


def percent_label(fraction) -> str | None:
    """A table row's phrase for a fraction such as ``--density``: ``"1%"``."""
    return f"{100 * fraction:g}%"


@dataclass(frozen=True)
class Param:
    """One parameter of a compressor: a keyword of its ``build`` and a command-line flag.

    ``name``: the keyword :func:`build` and the spec's ``build`` take. ``flag``: the option
    of the deep apps (``"--threshold"``); its argparse ``dest`` is the flag without the
    dashes, ``-`` as ``_`` (the key in a run record's config). ``help``: one line (the apps
    prefix it with ``--compressor NAMES:``). ``type``, ``default``, ``action`` (e.g.
    ``"store_true"``), ``choices``, ``metavar``: as ``argparse.add_argument`` takes them;
    ``default`` is also :func:`build`'s. ``app_flag``: the apps define the flag themselves
    (``--density``, ``--bits``, ``--seed``, ``--topk-bucket-size``: the shared records
    :data:`DENSITY` ... below), so
    :func:`~sparcapps.cli_args.add_compressor_arguments` does not add it. Two compressors
    may declare the same flag with the same definition (one argparse option then serves
    both).
    """

    name: str
    flag: str
    help: str
    type: Callable | None = float
    default: Any = None
    action: str | None = None
    choices: tuple | None = None
    metavar: str | None = None
    app_flag: bool = False

    @property
    def dest(self) -> str:
        """The argparse destination (and run-record config key) of :attr:`flag`."""
        return self.flag.lstrip("-").replace("-", "_")

    def argparse_kwargs(self) -> dict:
        """Keyword arguments for ``parser.add_argument(self.flag, ...)`` (help aside)."""
        kw = {"default": self.default}
        if self.action is not None:
            kw["action"] = self.action
        else:
            kw["type"] = self.type
        if self.choices is not None:
            kw["choices"] = list(self.choices)
        if self.metavar is not None:
            kw["metavar"] = self.metavar
        return kw


#: the parameters the apps read from their own flags (shared by the compressors)
DENSITY = Param("density", "--density", "fraction of the values sent per bucket", default=0.01,
                app_flag=True)
BITS = Param("bits", "--bits", "QSGD bits per value sent (0: full precision)", type=int,
             default=0, app_flag=True)
#: the momentum a compressor applies itself (DGC's momentum correction, signum's beta): its own
#: flag, apart from the apps' ``--momentum`` (the SGD's, outside the compressor)
MOMENTUM = Param("momentum", "--compressor-momentum",
                 "the momentum the compressor applies itself (not the SGD's --momentum)",
                 default=0.9)
SEED = Param("seed", "--seed", "the random streams' seed", type=int, default=0, app_flag=True)
CHUNK = Param("chunk", "--topk-bucket-size", "select per this many consecutive values",
              type=int, default=None, app_flag=True)


@dataclass(frozen=True)
class CompressorSpec:
    """One named compressor: what :func:`register_compressor` takes.

    ``name``: what ``--compressor`` and :func:`build` take. ``summary``: one line for help
    texts and the README. ``build(*, algorithm, error_feedback, **params) -> Compression``:
    the :class:`~sparcml.compression.Compression` for the declared ``params`` (each a
    :class:`Param`; it receives exactly their names, defaults filled in), the allreduce
    ``algorithm`` and whether to keep error feedback. A spec that declares :data:`BITS` takes
    a QSGD quantizer (:func:`build` refuses ``bits`` elsewhere); ``no_quantizer(params)``,
    when given, returns why these parameters take none (a phrase such as ``"with shared
    indices"``) or None. ``labels``: how a table row names a run of it, ``(config key,
    format)`` pairs, the key a record's config's (an argparse dest, ``"lr"`` included),
    ``format(value)`` a phrase or None (left out). ``own_momentum``: it applies a momentum
    itself (:data:`MOMENTUM`, ``--compressor-momentum``); its ``recommended`` SGD momentum is
    then 0 (a ``--momentum`` the user gives is added outside it). ``error_feedback``: whether it
    keeps an error-feedback memory when :func:`build` is not told (the method's paper: QSGD's
    has none, and its 4-bit L2 scale is no contraction, so a carried residual grows).
    ``recommended``: its paper's recommended hyperparameters as data, for the apps to use
    unless told otherwise (:func:`recommended_hyperparameters`): ``"lr_scale"`` multiplies the
    app's dense learning rate, ``"momentum"`` is the SGD momentum *outside* the compressor (0
    where the method has its own momentum or none), ``"warmup_epochs"`` the epochs of its
    own warm-up (DGC), ``"source"`` says where the figures come from; a key left out: the
    app's own default. ``order``: where it
    stands in :data:`COMPRESSORS` (ascending, then registration order; the built-in ones
    take 10 to 130).
    """

    name: str
    summary: str
    build: Callable[..., Compression]
    params: tuple[Param, ...] = ()
    no_quantizer: Callable[[dict], str | None] | None = None
    labels: tuple[tuple[str, Callable[[Any], str | None]], ...] = ()
    own_momentum: bool = False
    recommended: Mapping = field(default_factory=dict)
    order: int = 1000
    error_feedback: bool = True

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or not self.name.replace(
                "-", "_").isidentifier():
            raise SparcmlError(f"a compressor name is letters, digits, - and _, got "
                               f"{self.name!r}")
        if not all(isinstance(p, Param) for p in self.params):
            raise SparcmlError(f"the params of compressor {self.name!r} must be Param "
                               f"records, got {self.params!r}")
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "recommended", MappingProxyType(dict(self.recommended)))

    @property
    def takes_bits(self) -> bool:
        return any(p.name == BITS.name for p in self.params)


_REGISTRY: dict[str, CompressorSpec] = {}
_ORDERED: list[str] = []


def register_compressor(spec: CompressorSpec, *, replace: bool = False) -> CompressorSpec:
    """Add ``spec`` (``replace=True`` to overwrite one of its name). A flag that another
    registered compressor declares differently raises :class:`~sparcml.SparcmlError`."""
    if not isinstance(spec, CompressorSpec):
        raise SparcmlError(f"register_compressor() takes a CompressorSpec, got "
                           f"{type(spec).__name__}")
    if spec.name in _REGISTRY and not replace:
        raise SparcmlError(f"a compressor named {spec.name!r} is already registered; pass "
                           f"replace=True to overwrite it")
    for p in spec.params:
        for other in compressor_params():
            if other.flag == p.flag and _definition(other) != _definition(p):
                raise SparcmlError(f"compressor {spec.name!r} declares {p.flag} unlike "
                                   f"another compressor does ({other!r}); share one Param")
    _REGISTRY[spec.name] = spec
    _ORDERED.clear()
    return spec


def _definition(p: Param) -> tuple:
    """What two declarations of one flag must agree on (the help may differ)."""
    return (p.name, p.flag, p.type, p.default, p.action, p.choices, p.app_flag)


def unregister_compressor(name: str) -> None:
    """Remove a compressor (tests and plugins that clean up after themselves)."""
    if _REGISTRY.pop(name, None) is not None:
        _ORDERED.clear()


def compressor_names() -> tuple[str, ...]:
    """The registered names by ``order``, then registration order."""
    if not _ORDERED:
        at = {n: i for i, n in enumerate(_REGISTRY)}
        _ORDERED.extend(sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].order, at[n])))
    return tuple(_ORDERED)


def get_compressor(name) -> CompressorSpec:
    """The spec of ``name``; :class:`~sparcml.CompressionError` listing the names otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise CompressionError(f"unknown compressor {name!r}; one of "
                               f"{', '.join(compressor_names())}") from None


def compressor_params() -> list[Param]:
    """Every registered compressor's parameters, each flag once, in :data:`COMPRESSORS`
    order."""
    seen, out = set(), []
    for name in compressor_names():
        for p in _REGISTRY[name].params:
            if p.flag not in seen:
                seen.add(p.flag)
                out.append(p)
    return out


class _Compressors(Mapping):
    """A read-only, live view: name -> one line (what ``sparcml.compression.COMPRESSORS``
    is)."""

    def __getitem__(self, name):
        return _REGISTRY[name].summary

    def __iter__(self):
        return iter(compressor_names())

    def __len__(self):
        return len(_REGISTRY)

    def __repr__(self):
        return repr(dict(self))


#: name -> one line (the README's list, the CLI's help), live
COMPRESSORS = _Compressors()


def recommended_hyperparameters(name: str, *, lr: float, momentum: float) -> dict:
    """``{"lr": ..., "momentum": ...}`` that compressor ``name`` recommends, given the app's
    dense defaults ``lr`` and ``momentum`` (the SGD's): ``lr`` times its ``lr_scale``, its
    ``momentum`` (the SGD's, outside the compressor), each the app's where it states none."""
    rec = get_compressor(name).recommended
    return {"lr": lr * float(rec.get("lr_scale", 1.0)),
            "momentum": float(rec.get("momentum", momentum))}


def quantizer_of(bits: int) -> QSGD | None:
    """A QSGD quantizer of ``bits`` bits, or None for 0 (the specs' shared helper)."""
    return QSGD(bits) if bits else None


def memory_of(error_feedback: bool):
    """:class:`ResidualMemory` with error feedback, else :class:`NoneMemory`."""
    return ResidualMemory() if error_feedback else NoneMemory()


def build(name: str, *, algorithm: str = DEFAULT_ALGORITHM, error_feedback: bool | None = None,
          **params) -> Compression:
    """The :class:`Compression` named ``name`` (a key of :data:`COMPRESSORS`) with these
    parameters: any registered compressor's (``density``, ``bits``, ``threshold``, ``rank``,
    ``momentum``, ``shared``, ``density_warmup_steps``, ``clip_norm``, ``seed``, ``chunk``,
    ...); those that ``name`` does not declare are ignored, those it declares and that are not
    given take their defaults. ``error_feedback``: keep an error-feedback memory (None: the
    compressor's default, :attr:`CompressorSpec.error_feedback`). ``bits`` adds a QSGD quantizer to the compressors that declare
    it and is refused elsewhere. Raises :class:`~sparcml.CompressionError` for an unknown name
    or parameter, or a bad value."""
    spec = get_compressor(name)
    known = {p.name for n in compressor_names() for p in _REGISTRY[n].params}
    unknown = sorted(set(params) - known)
    if unknown:
        raise CompressionError(f"unknown compressor parameter {unknown[0]!r}; the compressors "
                               f"take {', '.join(sorted(known))}")
    values = {p.name: params.get(p.name, p.default) for p in spec.params}
    bits = params.get(BITS.name) or 0
    why = spec.no_quantizer(values) if spec.takes_bits and spec.no_quantizer else None
    if bits and (not spec.takes_bits or why):
        able = [n for n in compressor_names() if _takes_bits_with(_REGISTRY[n], params)]
        raise CompressionError(f"the {name} compressor{' ' + why if why else ''} takes no "
                               f"quantizer (bits={bits}); bits go with {', '.join(able)}")
    if error_feedback is None:
        error_feedback = spec.error_feedback
    return spec.build(algorithm=algorithm, error_feedback=bool(error_feedback), **values)


def _takes_bits_with(spec: CompressorSpec, params: dict) -> bool:
    if not spec.takes_bits:
        return False
    values = {p.name: params.get(p.name, p.default) for p in spec.params}
    return spec.no_quantizer is None or not spec.no_quantizer(values)
