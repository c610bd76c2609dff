"""Per-call options of the collectives (:class:`Options`) and their process defaults.

Every knob that changes how a call runs but not what it computes travels in one frozen
:class:`Options`, passed as ``options=`` to :func:`sparcml.allreduce`, ``iallreduce``,
``topk_allreduce``, ``itopk_allreduce``, ``allgather``, ``reduce_scatter``, ``bcast``, and to
the PyTorch adapter and the CLIs. Without it a call takes :func:`default_options`: the
environment variables below, read and parsed here and nowhere else in sparcml.

==================  ==========================  ======================  ==============
field               environment default         accepted values         agreed
==================  ==========================  ======================  ==============
``partitions``      ``SPARCML_PARTITIONS``      ``balanced``, ``equal``  yes
``index_coding``    ``SPARCML_INDEX_CODING``    ``auto``, ``coded``,    yes
                                                ``raw``
``node_shm``        ``SPARCML_NODE_SHM``        True, False (``1/0``)   yes
``ranks_per_node``  ``SPARCML_RANKS_PER_NODE``  None, an int >= 1       yes
``auto_tuning``     ``SPARCML_AUTO_TUNING``     True, False (``1/0``)   yes
``wait``            ``SPARCML_WAIT``            ``auto``, ``spin``,     yes (the policy
                                                ``yield``               it gives)
``native_min_ranks`` ``SPARCML_NATIVE_MIN_RANKS`` an int >= 1 (16)    yes
==================  ==========================  ======================  ==============

The agreed fields are one group of the call's agreement (:func:`option_fields`): a rank whose
options differ makes every rank raise :class:`~sparcml.RankMismatchError` naming the field and
each rank's value. A call made inside another sparcml call (``auto``'s calibration runs)
takes the outer call's options (:func:`current_options`).

Options are resolved once per call, at the entry point, after the agreement: into a
:class:`CallOptions` (index coding split into ``code_indices`` and the links' costs,
partitions, the native phases' threshold) that the call's codec carries to the algorithms,
the exchanges and the cost model. Below the entry points nothing reads the process defaults
or :func:`current_options`, and nothing is written onto the communicator's context per call.
"""

from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ._errors import InvalidOptionError

__all__ = ["Options", "CallOptions", "default_options", "resolve_options", "current_options",
           "in_call", "option_fields", "option_labels", "ENVIRONMENT", "PARTITIONS", "INDEX_CODINGS",
           "WAITS", "MAX_RANKS_PER_NODE", "NATIVE_MIN_RANKS", "sim_rates_cache_path"]

PARTITIONS = ("balanced", "equal")
INDEX_CODINGS = ("auto", "coded", "raw")
WAITS = ("auto", "spin", "yield")
MAX_RANKS_PER_NODE = 2**31 - 1  # an MPI rank count is an int
# from this many ranks the O(P) phases go through MPI's vector collectives (Alltoallv,
# Allgatherv, Gatherv) instead of P - 1 Python messages: below it the point-to-point loop was
# faster on the 2-core development machine (BENCHMARKS.md, "Native MPI collectives")
NATIVE_MIN_RANKS = 16

# field -> the environment variable giving its process default
ENVIRONMENT = {"partitions": "SPARCML_PARTITIONS", "index_coding": "SPARCML_INDEX_CODING",
               "node_shm": "SPARCML_NODE_SHM", "ranks_per_node": "SPARCML_RANKS_PER_NODE",
               "auto_tuning": "SPARCML_AUTO_TUNING", "wait": "SPARCML_WAIT",
               "native_min_ranks": "SPARCML_NATIVE_MIN_RANKS"}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _choice(name, value, accepted):
    if not isinstance(value, str) or value not in accepted:
        raise InvalidOptionError(f"Options.{name} must be one of {', '.join(accepted)}, got "
                                 f"{value!r}")


def _flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidOptionError(f"Options.{name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class Options:
    """How a collective call runs (never what it computes: results are the same bits).

    ``partitions``: blocks of the split algorithms' reduce-scatter and of ``topk_allreduce``:
    ``"balanced"`` (cut where every owner receives about the same bytes) or ``"equal"``.
    ``index_coding``: indices of sparse messages: ``"auto"`` (a code where the link time it
    saves exceeds its CPU time), ``"coded"`` (the smallest code whenever smaller), ``"raw"``.
    ``node_shm``: node phases through one shared-memory window per node (else messages).
    ``ranks_per_node``: None (MPI's grouping by shared memory) or R: ranks ``[jR, (j+1)R)``
    form node j (to try multi-node paths on one machine). ``auto_tuning``: ``auto`` measures
    near-ties instead of trusting the cost model alone. ``wait``: ``"spin"`` (MPI's busy
    polling), ``"yield"`` (test and sleep) or ``"auto"`` (yield when a node's ranks outnumber
    its cores); agreed as the policy it gives (a blocking collective on one rank does not
    match a non-blocking one on another). Local on non-blocking calls (``iallreduce``,
    ``itopk_allreduce``, a plan's ``iallreduce``): their communication thread always waits
    with sleeps, so ``wait`` changes nothing there and may differ between ranks.
    ``native_min_ranks``: on a communicator (or node,
    for the node-aware reduce) of at least this many ranks, the phases that exchange with
    every rank (the split algorithms' and ``topk_allreduce``'s reduce-scatter, the top-k
    allgather, the node reduce) run as one MPI vector collective (``Alltoall`` of the sizes +
    ``Alltoallv``, ``Allgatherv``, ``Gather`` + ``Gatherv``) instead of P - 1 messages posted
    from Python; 1 always, a number above P never (the same bits either way).

    Validated when made: :class:`~sparcml.InvalidOptionError` names the field and the values
    it accepts. Frozen and hashable; ``dataclasses.replace(opts, partitions="equal")`` makes
    a variant.
    """

    partitions: str = "balanced"
    index_coding: str = "auto"
    node_shm: bool = True
    ranks_per_node: int | None = None
    auto_tuning: bool = True
    wait: str = "auto"
    native_min_ranks: int = NATIVE_MIN_RANKS

    def __post_init__(self):
        _choice("partitions", self.partitions, PARTITIONS)
        _choice("index_coding", self.index_coding, INDEX_CODINGS)
        _flag("node_shm", self.node_shm)
        _flag("auto_tuning", self.auto_tuning)
        _choice("wait", self.wait, WAITS)
        r = self.ranks_per_node
        if r is not None and (isinstance(r, (bool, np.bool_))
                              or not isinstance(r, (int, np.integer))
                              or not 1 <= r <= MAX_RANKS_PER_NODE):
            raise InvalidOptionError(f"Options.ranks_per_node must be None (MPI's grouping) "
                                     f"or an integer from 1 to {MAX_RANKS_PER_NODE}, got {r!r}")
        n = self.native_min_ranks
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) \
                or not 1 <= n <= MAX_RANKS_PER_NODE:
            raise InvalidOptionError(f"Options.native_min_ranks must be an integer from 1 to "
                                     f"{MAX_RANKS_PER_NODE} (ranks from which MPI's vector "
                                     f"collectives replace Python's messages), got {n!r}")
        object.__setattr__(self, "native_min_ranks", int(n))
        # plain Python values: equal options compare and hash equal whatever they came from
        object.__setattr__(self, "node_shm", bool(self.node_shm))
        object.__setattr__(self, "auto_tuning", bool(self.auto_tuning))
        if r is not None:
            object.__setattr__(self, "ranks_per_node", int(r))

    @property
    def code_indices(self) -> bool:
        """Whether sparse indices may travel coded (every coding but ``"raw"``)."""
        return self.index_coding != "raw"

    def native(self, ranks: int) -> bool:
        """Whether a phase among ``ranks`` ranks runs as an MPI vector collective."""
        return ranks >= self.native_min_ranks


@dataclass(frozen=True)
class CallOptions:
    """:class:`Options` resolved for the calls on one communicator: what the algorithms, the
    exchanges and the cost model read (through the call's
    :class:`~sparcml._wire.codec.Codec`, ``codec.options``), made once at the entry point
    (:func:`sparcml._model.link_costs.call_options`, cached per :class:`Options` object).

    ``options``: the agreed :class:`Options` it was resolved from (for calls nested in the
    call, such as ``auto``'s calibration runs; its ``partitions``, ``node_shm``,
    ``ranks_per_node`` and :meth:`native` are read through this object). ``code_indices``:
    sparse indices may travel coded (every ``index_coding`` but ``"raw"``). ``link_costs``:
    ``(seconds per byte of the links, seconds to encode and decode an index)`` for
    ``index_coding="auto"`` (a code only where the link time it saves exceeds its CPU time),
    None to code whenever the code is smaller (``"coded"``, or one rank).

    The default is :class:`Options`'s defaults without link costs (coded whenever smaller):
    what a codec made outside a call (tests, the simulator's rates) uses.
    """

    options: Options = Options()
    code_indices: bool = True
    link_costs: tuple | None = None

    @classmethod
    def of(cls, options: Options, link_costs: tuple | None = None) -> "CallOptions":
        """``options`` resolved with the call's ``link_costs`` (dropped for
        ``index_coding="coded"``; unused for ``"raw"``, which codes nothing)."""
        return cls(options, options.code_indices,
                   None if options.index_coding == "coded" else link_costs)

    @property
    def partitions(self) -> str:
        return self.options.partitions

    @property
    def node_shm(self) -> bool:
        return self.options.node_shm

    @property
    def ranks_per_node(self) -> int | None:
        return self.options.ranks_per_node

    def native(self, ranks: int) -> bool:
        """Whether a phase among ``ranks`` ranks runs as an MPI vector collective."""
        return self.options.native(ranks)


def _env_text(name: str, environ) -> str:
    return environ.get(ENVIRONMENT[name], "").strip().lower()


def _env_flag(name: str, environ) -> bool:
    text = _env_text(name, environ)
    if text == "" or text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidOptionError(f"{ENVIRONMENT[name]}={environ[ENVIRONMENT[name]]!r} (the default "
                             f"of Options.{name}): expected 1 or 0 (or true/false, yes/no, "
                             f"on/off)")


def _env_choice(name: str, environ, accepted) -> str:
    text = _env_text(name, environ) or accepted[0]
    if text not in accepted:
        raise InvalidOptionError(f"{ENVIRONMENT[name]}={environ[ENVIRONMENT[name]]!r} (the "
                                 f"default of Options.{name}): expected one of "
                                 f"{', '.join(accepted)}")
    return text


def _env_ranks_per_node(environ) -> int | None:
    var = ENVIRONMENT["ranks_per_node"]
    text = environ.get(var, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_RANKS_PER_NODE:
        raise InvalidOptionError(f"{var}={text!r} (the default of Options.ranks_per_node) must "
                                 f"be an integer from 1 to {MAX_RANKS_PER_NODE} (ranks per "
                                 f"emulated node); unset it to use MPI's grouping by shared "
                                 f"memory")
    return value


def _env_native_min_ranks(environ) -> int:
    var = ENVIRONMENT["native_min_ranks"]
    text = environ.get(var, "").strip()
    if not text:
        return NATIVE_MIN_RANKS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_RANKS_PER_NODE:
        raise InvalidOptionError(f"{var}={text!r} (the default of Options.native_min_ranks) "
                                 f"must be an integer from 1 to {MAX_RANKS_PER_NODE}")
    return value


_cache: tuple | None = None  # (the variables' text, their Options)
# CPython's os.environ keeps its variables in a dict of bytes (POSIX), which os.environ's
# assignments, putenv-through-os.environ and monkeypatching all update; where that is not
# so (another platform or interpreter) the mapping interface is used
_RAW_ENVIRON = getattr(os.environ, "_data", None) if os.name == "posix" else None
if _RAW_ENVIRON is not None and not isinstance(_RAW_ENVIRON, dict):
    _RAW_ENVIRON = None
_RAW_KEYS = tuple(os.fsencode(var) for var in ENVIRONMENT.values())


def default_options(environ=None) -> Options:
    """The process defaults: an :class:`Options` from the ``SPARCML_*`` variables of
    ``environ`` (default ``os.environ``, read at each call; unset: the field's default).
    Raises :class:`~sparcml.InvalidOptionError` naming the variable and the values it
    accepts."""
    global _cache
    if environ is None and _RAW_ENVIRON is not None:
        # the per-call path: os.environ's own store, without its per-key encode and decode
        key = tuple(map(_RAW_ENVIRON.get, _RAW_KEYS))
        environ = os.environ
    else:
        environ = os.environ if environ is None else environ
        key = tuple(environ.get(var) for var in ENVIRONMENT.values())
    cached = _cache
    if cached is not None and cached[0] == key:
        return cached[1]
    made = Options(partitions=_env_choice("partitions", environ, PARTITIONS),
                   index_coding=_env_choice("index_coding", environ, INDEX_CODINGS),
                   node_shm=_env_flag("node_shm", environ),
                   ranks_per_node=_env_ranks_per_node(environ),
                   auto_tuning=_env_flag("auto_tuning", environ),
                   wait=_env_choice("wait", environ, WAITS),
                   native_min_ranks=_env_native_min_ranks(environ))
    _cache = (key, made)
    return made


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("sparcml call options", default=None)


def current_options() -> Options:
    """The options of the sparcml call running in this thread (set by :func:`in_call`), else
    :func:`default_options`: what an entry point given ``options=None`` takes
    (:func:`resolve_options`)."""
    opts = _CURRENT.get()
    return default_options() if opts is None else opts


@contextmanager
def in_call(options: Options):
    """``with in_call(opts):`` the body is a call made with ``opts``: sparcml calls nested in
    it without ``options=`` (``auto``'s calibration runs) take them at their entry point.
    Below the entry points nothing reads them: a call's resolved options travel in its codec
    (:class:`CallOptions`)."""
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)


def resolve_options(options) -> Options:
    """``options`` itself when it is an :class:`Options`, :func:`current_options` for None;
    raises :class:`~sparcml.InvalidOptionError` for anything else."""
    if options is None:
        return current_options()
    if not isinstance(options, Options):
        raise InvalidOptionError(f"options must be a sparcml.Options or None, got "
                                 f"{type(options).__name__} {options!r}")
    return options


# the agreed fields, as the agreement's integer fields (names as in its messages)
_AGREED = ("partitions", "index_coding", "node_shm", "ranks_per_node", "auto_tuning",
           "native_min_ranks")


def option_fields(options: Options | None) -> dict[str, int]:
    """The agreed fields of ``options`` as integers for :func:`sparcml._runtime.agreement.agree`
    (keys ``"options.<field>"``); None: every field -1 (a rank whose options were invalid)."""
    if options is None:
        return {f"options.{name}": -1 for name in _AGREED}
    return {"options.partitions": PARTITIONS.index(options.partitions),
            "options.index_coding": INDEX_CODINGS.index(options.index_coding),
            "options.node_shm": int(options.node_shm),
            "options.ranks_per_node": options.ranks_per_node or 0,
            "options.auto_tuning": int(options.auto_tuning),
            "options.native_min_ranks": options.native_min_ranks}


def option_labels() -> dict[str, dict[int, str]]:
    """The codes of :func:`option_fields` as names, for the agreement's messages."""
    flag = {0: "False", 1: "True", -1: "(invalid)"}
    return {"options.partitions": {**dict(enumerate(map(repr, PARTITIONS))), -1: "(invalid)"},
            "options.index_coding": {**dict(enumerate(map(repr, INDEX_CODINGS))),
                                     -1: "(invalid)"},
            "options.node_shm": flag, "options.auto_tuning": flag,
            "options.ranks_per_node": {0: "None (MPI's grouping)", -1: "(invalid)"},
            "options.native_min_ranks": {-1: "(invalid)"},
            "options.wait": {0: "spin", 1: "yield", -1: "(invalid)"}}



# ---- the simulator's kernel-rate cache (sparcml.sim, compute="model") ---------------------------
SIM_RATES_VARIABLE = "SPARCML_SIM_RATES"


def sim_rates_cache_path(environ=None):
    """Where :mod:`sparcml.sim` keeps its calibrated kernel rates, or None not to read or write
    a cache (``SPARCML_SIM_RATES=off``: measure once per process). Default
    ``$XDG_CACHE_HOME/sparcml/sim-kernel-rates.json`` (``~/.cache`` when unset); any other
    value of ``SPARCML_SIM_RATES`` is taken as the file's path."""
    environ = os.environ if environ is None else environ
    text = environ.get(SIM_RATES_VARIABLE, "").strip()
    if text.lower() in _FALSE:
        return None
    if text and text.lower() not in _TRUE:
        return os.path.expanduser(text)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparcml", "sim-kernel-rates.json")
