"""Collective argument checks: the ranks agree, or every rank raises the same error.

The one agreement API of the project (the comm layer's entry points, the PyTorch adapter, the
estimator and the CLIs all use it):

- :func:`agree`: integer ``fields`` that must be equal on every rank, this rank's own
  validation error, and integers whose maximum is wanted, in one small ``Allreduce`` (max of
  each field and of its negation; on MPI-4 a persistent request per communicator, shared by
  every agreement and plan identity check on it: :mod:`sparcml._runtime.agreement_request`).
  Only on failure is more exchanged (the messages, so that every rank can say what went
  wrong where).
- :func:`raise_everywhere`: "did any rank fail?" for code that validates something else first
  (a data file, a checkpoint), and the first failing rank's error raised on every rank.
- :func:`agree_on_lines`: a description (model structure, options) identical on every rank.
- :func:`capture`: run a validation step and keep any exception it raises as this rank's error.
- :func:`agreed_call`: the prologue of every collective entry point: resolve the call's
  :class:`~sparcml.Options`, validate on this rank, agree on the call's fields and the options
  as one group.

Packing the fields into int64 is part of the agreement: a value that cannot be packed (an
integer beyond int64, a float, a string, None, NaN) is that rank's error
(:class:`~sparcml.AgreementFieldError` naming the field), raised on every rank like any other,
never an exception on one rank before the collective.

Errors of any class are carried: a :class:`~sparcml.SparcmlError` keeps its class; another
exception (an ``OverflowError`` from NumPy, a Numba typing error) becomes
:class:`~sparcml.InvalidArgumentError` on every rank, with its class and message, so that one
rank's surprise never leaves the others waiting in the next collective.

Over 400 lines: one protocol, the packing of the fields into the one array, its reduction and,
on a difference, the exchange that lets every rank name it; the lean calls' kept agreement
(:func:`kept_agreement`, :func:`agree_kept`) is the same protocol with its arrays kept between
calls. Split apart, each piece would import the others' private packing and slots.
"""

from __future__ import annotations

import hashlib
import importlib
import zlib
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from .._errors import AgreementFieldError, InvalidArgumentError, RankMismatchError, SparcmlError
from .._options import Options, option_fields, option_labels, resolve_options
from .agreement_request import reduce_max

__all__ = ["agree", "raise_everywhere", "agree_on_lines", "capture", "collective_errors",
           "as_sparcml_error", "agreed_call", "AgreedCall", "pack_fields", "VALUE_DTYPE_NAMES",
           "raise_agreed", "agreement_array", "agreed_maxima", "MAXIMA_SLOT", "kept_agreement",
           "agree_kept"]

MAX_FIELDS = 14  # per agree() call: every call reduces the same number of integers
MAX_MAXIMA = 4
VALUE_DTYPE_NAMES = {4: "float32", 8: "float64"}  # "value dtype" fields, for messages


def as_sparcml_error(exc: BaseException) -> SparcmlError:
    """``exc`` itself when it is a :class:`SparcmlError`, else an :class:`InvalidArgumentError`
    that names its class and message (chained to it)."""
    if isinstance(exc, SparcmlError):
        return exc
    wrapped = InvalidArgumentError(f"{type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    return wrapped


class capture:
    """``with capture() as failed: validate()``; afterwards ``failed.error`` holds the first
    exception the block raised (any ``Exception``), or None. Nothing propagates, so that the
    caller can go on to the collective agreement and raise the same error on every rank. One
    ``capture`` may guard several blocks: the first error is kept."""

    __slots__ = ("error",)

    def __init__(self):
        self.error: BaseException | None = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and isinstance(exc, Exception):
            if self.error is None:
                self.error = exc
            return True
        return False


def _resolve_class(module: str, qualname: str) -> type | None:
    """The exception class ``module.qualname`` if it can be imported, else None."""
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - an unknown class is simply not rebuilt
        return None
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None


def _gather_failures(comm, local_error):
    mine = None
    if local_error is not None:
        cls = type(local_error)
        mine = (cls.__module__, cls.__qualname__, str(local_error))
    return [(r, f) for r, f in enumerate(comm.allgather(mine)) if f is not None]


def _reraise(comm, local_error, *, sparcml_only: bool, prefix_own: bool):
    failures = _gather_failures(comm, local_error)
    first_rank, (module, qualname, _) = failures[0]
    cls = _resolve_class(module, qualname)
    if sparcml_only and not (cls is not None and issubclass(cls, SparcmlError)):
        cls = InvalidArgumentError
    elif cls is None:
        cls = InvalidArgumentError
    if len(failures) == 1:
        _, (_, name, msg) = failures[0]
        text = f"rank {first_rank}: " + (msg if cls.__qualname__ == name else f"{name}: {msg}")
    else:
        text = f"invalid input on {len(failures)} rank(s): " + "; ".join(
            f"rank {r}: {msg if cls.__qualname__ == name else f'{name}: {msg}'}"
            for r, (_, name, msg) in failures)
    if local_error is not None and not prefix_own and isinstance(local_error, cls):
        raise local_error
    try:
        exc = cls(text)
    except Exception:  # noqa: BLE001 - a class that takes other arguments
        exc = InvalidArgumentError(text)
    raise exc from local_error


def raise_everywhere(comm, local_error: BaseException | None, *, waiter=None,
                     keep_class: bool = True) -> None:
    """Collective: when any rank of ``comm`` passes an error, every rank raises one.

    The raised error has the first failing rank's class (rebuilt by its import path; any
    exception class with a one-message constructor) and its message prefixed ``rank R:``,
    chained to the local error on the failing rank. ``keep_class=False`` turns classes that
    are not :class:`SparcmlError` into :class:`InvalidArgumentError`. Costs one integer
    ``Allreduce`` when nobody failed. ``comm`` None or of size 1: raises ``local_error``.
    """
    if comm is None or comm.Get_size() == 1:
        if local_error is not None:
            raise local_error if keep_class else as_sparcml_error(local_error)
        return
    flag = np.array([0 if local_error is None else 1], np.int64)
    if waiter is None:
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
    else:
        waiter.collective(comm, "Allreduce", MPI.IN_PLACE, flag, MPI.MAX)
    if flag[0]:
        _reraise(comm, local_error, sparcml_only=not keep_class, prefix_own=True)


def raise_agreed(comm, local_error: BaseException | None) -> None:
    """Collective, for when every rank already knows that some rank failed (a persistent
    plan's error flag, :mod:`sparcml._collectives.plan`): every rank raises the first failing
    rank's error, as :func:`agree` does (a :class:`SparcmlError` keeps its class, another
    becomes :class:`InvalidArgumentError`; the failing rank re-raises its own). One
    ``allgather`` of the errors. At least one rank must pass an error."""
    if comm.Get_size() == 1:
        if local_error is not None:
            raise as_sparcml_error(local_error)
        return
    _reraise(comm, local_error, sparcml_only=True, prefix_own=False)


_INT64 = (-2**63, 2**63 - 1)


def _packable(value) -> int:
    """``value`` as a Python int when it is an integer (bool and NumPy integers included) of
    int64's range; raises TypeError or OverflowError otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"{type(value).__name__} {value!r} is not an integer")
    value = int(value)
    if not _INT64[0] <= value <= _INT64[1]:
        raise OverflowError(f"{value} is outside int64's range [-2**63, 2**63)")
    return value


def pack_fields(fields: dict, maxima: dict) -> tuple[np.ndarray, np.ndarray,
                                                     AgreementFieldError | None]:
    """``(field values, maxima, error)``: int64 arrays of :data:`MAX_FIELDS` and
    :data:`MAX_MAXIMA` entries (zero padded) and None, or, when a value cannot be packed
    (:func:`_packable`), that entry -1 and an :class:`AgreementFieldError` naming the first such
    field. Never raises for any values: the agreement must reach its collective."""
    vals = np.zeros(MAX_FIELDS, np.int64)
    extra = np.zeros(MAX_MAXIMA, np.int64)
    error = None
    for out, what in ((vals, fields), (extra, maxima)):
        for i, (name, value) in enumerate(what.items()):
            try:
                out[i] = _packable(value)
            except Exception as exc:  # noqa: BLE001 - any value at all becomes this rank's error
                out[i] = -1
                if error is None:
                    error = AgreementFieldError(
                        f"{name!s} must be an integer that int64 holds (the ranks compare it), "
                        f"got {_shown(value)}: {exc}")
    return vals, extra, error


def _shown(value) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still reported
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:40] + "..." + text[-12:]


def agree(comm: MPI.Comm, fields: dict[str, int], local_error: BaseException | None = None,
          describe=None, *, waiter=None,
          maxima: dict[str, int] | None = None) -> dict[str, int]:
    """Check that every rank passed the same integer ``fields`` and that no rank failed.

    Collective over ``comm``. ``local_error`` is this rank's own validation error, if any (any
    exception): a :class:`SparcmlError` is re-raised here as it is and the other ranks raise
    the same class naming this rank; any other exception becomes
    :class:`InvalidArgumentError` on every rank. ``describe`` maps a field's codes to names
    for the message (or a function returning that mapping, called only when a field differs).
    ``waiter`` (a :class:`~sparcml._runtime.progress.Waiter`) completes the check's
    reduction. Raises :class:`RankMismatchError` (on every rank) naming each field whose value
    differs. ``maxima`` are integers that may differ: their maximum over ranks is returned
    (same dict keys), at no extra cost. A field or maximum that is not an integer of int64's
    range is this rank's error (:class:`~sparcml.AgreementFieldError`, on every rank).

    Every call of ``agree`` reduces the same number of integers (at most
    :data:`MAX_FIELDS` fields and :data:`MAX_MAXIMA` maxima, padded), led by a signature of the
    field names: ranks that reached different sparcml calls at the same point (one rank's
    ``topk_allreduce`` against the others' ``allreduce``) get :class:`RankMismatchError`
    everywhere, naming each rank's call, instead of a reduction of mismatched sizes.
    """
    names = tuple(fields)
    maxima = maxima or {}
    both, vals, local_error = agreement_array(fields, maxima, local_error)
    reduce_max(comm, both, waiter, out=both)
    return agreed_maxima(comm, both, vals, names, maxima, local_error, describe)


def agreement_array(fields: dict, maxima: dict, local_error=None):
    """What this rank contributes to :func:`agree`'s reduction: ``(the int64 array to reduce
    with MAX, this rank's packed fields, local_error or the error of an unpackable field)``.
    Depends only on the names and values, so a caller may build it once and reduce copies
    (every rank's array of one call has the same layout)."""
    names = tuple(fields)
    if len(names) > MAX_FIELDS or len(maxima) > MAX_MAXIMA:
        raise ValueError(f"agree: at most {MAX_FIELDS} fields and {MAX_MAXIMA} maxima")
    width = 2 + MAX_FIELDS
    both = np.zeros(2 * width + MAX_MAXIMA, np.int64)
    values, extra_values = list(fields.values()), list(maxima.values())
    try:  # plain ints (the usual case): assigned at once; anything else packed one by one
        for v in values + extra_values:
            if type(v) is not int:
                raise TypeError
        both[2:2 + len(values)] = values
        both[2 * width:2 * width + len(extra_values)] = extra_values
    except (TypeError, OverflowError):
        packed, extra, unpackable = pack_fields(fields, maxima)
        if local_error is None:
            local_error = unpackable
        both[2:width] = packed
        both[2 * width:] = extra
    both[0] = 1 if local_error is not None else 0
    both[1] = _signature(names)
    vals = both[:width].copy()
    # ~x (= -x - 1) reverses the order without overflow, unlike -x at -2**63: the MAX of
    # the inverted values is the inverted MIN
    np.invert(vals, out=both[width:2 * width])
    return both, vals, local_error


def agreed_maxima(comm, both, vals, names: tuple, maxima: dict, local_error, describe):
    """:func:`agree` after the reduction of ``both`` (from :func:`agreement_array`): the
    maxima, or the same error raised on every rank."""
    width = 2 + MAX_FIELDS
    reduced = both.tolist()
    hi, lo = reduced[:width], [~x for x in reduced[width:2 * width]]
    if hi[0]:
        _reraise(comm, local_error, sparcml_only=True, prefix_own=False)
    if hi[1] != lo[1]:  # different calls: their fields mean different things
        calls = comm.allgather(", ".join(names))
        per_rank = "; ".join(f"rank {r}: ({c})" for r, c in enumerate(calls))
        raise RankMismatchError(
            f"ranks reached different sparcml calls at the same point (the arguments each "
            f"checks: {per_rank}); every rank must make the same collective calls in the same "
            f"order")
    if hi == lo:
        return dict(zip(maxima, reduced[2 * width:2 * width + len(maxima)]))
    differing = [i for i in range(2, 2 + len(names)) if hi[i] != lo[i]]
    every = np.array(comm.allgather(vals))
    describe = (describe() if callable(describe) else describe) or {}
    parts = []
    for i in differing:
        name = names[i - 2]
        codes = describe.get(name, {})
        per_rank = ", ".join(f"rank {r}: {codes.get(int(v), int(v))}"
                             for r, v in enumerate(every[:, i]))
        parts.append(f"{name} ({per_rank})")
    raise RankMismatchError("ranks disagree on " + "; ".join(parts) +
                            "; every rank must pass the same value")


MAXIMA_SLOT = 2 * (2 + MAX_FIELDS)  # where the maxima start in an agreement_array


def kept_agreement(fields: dict, maxima: dict) -> tuple:
    """:func:`agreement_array` of ``fields`` and ``maxima`` (integers that int64 holds: a
    caller's own, never a user's unchecked value), kept for a call made many times with the
    same fields: ``(send array, receive array, the array's bytes before the maxima, packed
    fields, names, maxima)``. Before each :func:`agree_kept` the caller writes this call's
    maxima into the send array from :data:`MAXIMA_SLOT` on (in ``maxima``'s order)."""
    both, vals, error = agreement_array(fields, maxima)
    if error is not None:
        raise error
    return both, np.empty_like(both), both[:MAXIMA_SLOT].tobytes(), vals, tuple(fields), maxima


def agree_kept(comm, waiter, kept: tuple, wait_code: int, describe) -> np.ndarray:
    """:func:`agree` of a :func:`kept_agreement` (its send array's maxima written by the
    caller): the reduced array (the maxima over ranks from :data:`MAXIMA_SLOT` on), or the
    same error raised on every rank when a rank's fields differ or a rank failed.

    Collective over ``comm``, completed as ``waiter`` waits now (the one reduction of
    :func:`~sparcml._runtime.agreement_request.reduce_max`); afterwards ``waiter`` waits
    as ``wait_code`` (the agreed ``options.wait`` field) says. ``describe``: a function
    returning the fields' code names, called only when a field differs. The received array
    is the kept one: read it before the next call."""
    send, received, head, vals, names, maxima = kept
    reduce_max(comm, send, waiter, out=received)
    if received[:MAXIMA_SLOT].tobytes() != head:  # some rank differs or failed
        agreed_maxima(comm, received.copy(), vals, names, maxima, None, describe)
    waiter.yield_cpu = bool(wait_code)  # waiter.use(options.wait): the policy just agreed
    return received


_SIGNATURES: dict[tuple, int] = {}  # the field names of each call -> their crc32


def _signature(names: tuple) -> int:
    """A 32-bit signature of a call's field names (computed once per set of names)."""
    sig = _SIGNATURES.get(names)
    if sig is None:
        sig = zlib.crc32("|".join(map(str, names)).encode())
        if len(_SIGNATURES) < 256:
            _SIGNATURES[names] = sig
    return sig


_DEFAULTS = Options()  # frozen: one instance serves every call


class AgreedCall:
    """What :func:`agreed_call` gives the entry point's validation block: ``options`` (the
    call's :class:`~sparcml.Options`; the defaults where this rank's were invalid: the
    agreement then raises), ``fields`` and ``maxima`` (dicts to fill in), and after the block
    ``agreed`` (the maxima over ranks)."""

    __slots__ = ("options", "fields", "maxima", "agreed")

    def __init__(self, fields, maxima):
        self.options = _DEFAULTS
        self.fields = fields
        self.maxima = maxima
        self.agreed: dict[str, int] = {}


@contextmanager
def agreed_call(ctx, options, fields: dict, describe=None, maxima: dict | None = None):
    """The prologue of a collective entry point, around its validation block::

        with agreed_call(ctx, options, {"dim": -1, "k": -1}, describe) as call:
            vec = coerce_vector(vec)            # this rank's checks (any exception is kept)
            call.fields["dim"] = vec.dim        # the call's own agreed fields
            ...call.options...                  # the resolved options
        # here every rank agreed (or every rank raised the same error)

    Resolves ``options`` (None: :func:`~sparcml._options.current_options`) and adds its
    agreed fields to ``fields`` as one group (:func:`~sparcml._options.option_fields`), runs
    the block capturing any exception as this rank's error, then :func:`agree` (``fields``
    preset to the values of a rank that fails early: every rank must pass the same names) and
    sets ``ctx.waiter``'s policy to the options' ``wait`` (agreed as the policy it gives:
    ``"auto"`` and ``"yield"`` agree where the automatic policy yields). ``describe``: as for :func:`agree`,
    for the call's own fields (the options' are named here)."""
    call = AgreedCall(fields, dict(maxima or {}))
    failed = capture()
    resolved = None
    with failed:
        resolved = resolve_options(options)
    fields.update(option_fields(resolved))
    # how the ranks will wait: a blocking collective on one rank and its non-blocking twin
    # on another do not match, so the policy each rank would use is agreed (options' wait)
    fields["options.wait"] = -1 if resolved is None else int(ctx.waiter.policy(resolved.wait))
    if resolved is not None:
        call.options = resolved
    with failed:
        yield call

    def described():
        names = describe() if callable(describe) else dict(describe or {})
        return {**names, **option_labels()}

    call.agreed = agree(ctx.comm, fields, failed.error, described, waiter=ctx.waiter,
                        maxima=call.maxima)
    ctx.waiter.use(call.options.wait)


def agree_on_lines(comm, lines: list[str], what: str,
                   local_error: BaseException | None = None) -> None:
    """Collective: raise the same :class:`RankMismatchError` on every rank unless ``lines``
    (a description: parameter names and shapes, options) is identical on all ranks of
    ``comm``; the message names the first differing line and rank. A ``local_error`` (any
    exception found while building ``lines``) is raised on every rank first, as by
    :func:`raise_everywhere`. One ``allgather`` of a digest when all agree."""
    raise_everywhere(comm, local_error)
    if comm is None or comm.Get_size() == 1:
        return
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    digests = comm.allgather(digest)
    if len(set(digests)) == 1:
        return
    everyone = comm.allgather(lines)
    ref = everyone[0]
    for rank, theirs in enumerate(everyone):
        if theirs == ref:
            continue
        for i in range(max(len(ref), len(theirs))):
            a = ref[i] if i < len(ref) else "<nothing>"
            b = theirs[i] if i < len(theirs) else "<nothing>"
            if a != b:
                raise RankMismatchError(
                    f"{what} differ across ranks: entry {i} is {a!r} on rank 0 but {b!r} on "
                    f"rank {rank}; build the same model and options on every rank (same code, "
                    f"same arguments)")
    raise RankMismatchError(f"{what} differ across ranks")  # pragma: no cover - digest collision


@contextmanager
def collective_errors(comm, *, waiter=None, keep_class: bool = True):
    """``with collective_errors(comm): validate()``: every rank leaves the block, then all
    raise the first failing rank's error (or none does). Any ``Exception`` counts."""
    with capture() as failed:
        yield
    raise_everywhere(comm, failed.error, waiter=waiter, keep_class=keep_class)

