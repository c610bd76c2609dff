"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator.

Over 400 lines (about 470): the four small object families (compressor, quantizer glue, memory,
the bundle) are one vocabulary and are read together.

A :class:`Compression` bundles four small, swappable parts that work on flat NumPy arrays (no
torch), so that :class:`sparcml.torch.DistributedOptimizer`, a DDP communication hook and
plain mpi4py code share them:

- a **compressor** chooses what to send: :class:`TopKCompressor` (the ``density`` or ``k``
  largest magnitudes, globally or per ``chunk`` of values), :class:`GlobalTopKCompressor`
  (the same locally, then only the k largest of the *sum* over ranks travel back:
  :func:`sparcml.topk_allreduce`) or :class:`NoneCompressor` (all);
- an optional **quantizer**, a :class:`sparcml.QSGD`: the values travel quantized, encoded
  once by the wire format of the allreduce (sparse messages too);
- a **memory** keeps what was not delivered and adds it to the next input (error feedback):
  :class:`ResidualMemory` (one residual per key: a gradient bucket) or :class:`NoneMemory`;
- the **communicator**: the name of a registered allreduce algorithm (:mod:`sparcml._registry`,
  default :data:`sparcml.DEFAULT_ALGORITHM`) or ``"auto"``.

One reduction of a flat array ``x`` under key ``key`` (:meth:`Compression.allreduce_in`), on
every rank:

1. ``g = memory.compensate(x, key)``: ``x + residual`` (a copy of ``x`` the first time);
2. ``v = compressor.compress(g)``: a :class:`~sparcml.SparseVector` (top-k: the kept entries);
3. the allreduce of ``v`` with the algorithm and quantizer; it reports ``sent``, this rank's
   ``v`` as the other ranks received it (decoded: quantized once, by the wire codec);
4. ``memory.update(g, key, sent)``: ``residual = g - sent``, exactly, entry by entry.

So after any number of steps, per rank and key, ``sum of inputs == sum of sent + residual``
up to the rounding of the additions in step 1, and the residual holds the quantization error
as well as what top-k left out. Where a rank's input never travels on its own, ``sent`` is the
input unchanged: at P = 1 (nothing travels, nothing is quantized), with the dense baseline
``MPI_Allreduce`` (no quantizer), and on the rank that folds an extra rank's input into its own
in recursive doubling at a P that is not a power of two: that sum is quantized as a whole, and
its error (unbiased noise) is attributable to neither input, so no residual keeps it.

Example (plain mpi4py and NumPy; see :mod:`sparcml.torch` for PyTorch)::

    from sparcml import QSGD
    from sparcml.compression import Compression, ResidualMemory, TopKCompressor

    comp = Compression(TopKCompressor(density=0.01), quantizer=QSGD(4), memory=ResidualMemory())
    for step in range(steps):
        total = comp.allreduce(gradient(step), key="w")   # a SparseVector, the same on all ranks
        w -= lr * total.to_dense() / MPI.COMM_WORLD.Get_size()

The objects validate their options when built (:class:`~sparcml.CompressionError`,
:class:`~sparcml.UnknownAlgorithmError`, :class:`~sparcml.IncompatibleOptionsError`), so that
a mistake points at the line that made it.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .._model import auto
from .._collectives.algorithms import DEFAULT_ALGORITHM, DENSE_BASELINE
from .._runtime.call_context import call_context
from .._runtime.context import TrafficStats, context_for
from .._model.costmodel import TOPK_STEP
from .._collectives.entry import allreduce_in
from .._collectives.plan import AllreducePlan
from .._topk.plan import TopKPlan
from .._topk.entry import calibration_run, topk_allreduce_in
from .._errors import (CompressionError, IncompatibleOptionsError, InvalidOptionError,
                       UnsupportedDtypeError)
from .._options import CallOptions, Options, in_call, resolve_options
from .._quant.qsgd import QSGD
from .._registry import AUTO, check_algorithm_options
from .._collectives.validation import LocalFailure
from .._runtime.agreement import capture, raise_everywhere
from .._topk.local import TopK
from .._vector import VALUE_DTYPES, SparseVector
from ._cost import allreduce_seconds
from .._lazy import lazy_module
select_kernels = lazy_module("sparcml._topk.select_kernels")

__all__ = ["Compression", "Compressor", "TopKCompressor", "GlobalTopKCompressor",
           "NoneCompressor", "Memory", "per_tensor_topk",
           "ResidualMemory", "NoneMemory", "Reduced", "assemble_parts"]


class _NoOptions:
    """Objects without options: equal when of the same class, printed as ``Class()``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class _EqualByRepr:
    """Objects whose ``repr`` shows every option: equal when of the same class and repr."""

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash((type(self), repr(self)))


# -- compressors ------------------------------------------------------------------------------

class Compressor(ABC):
    """What to send of a flat array. Subclasses set :attr:`lossless` and implement
    :meth:`compress`; they hold configuration only (no state across calls), so one instance
    serves every bucket and thread."""

    lossless: bool = False
    #: True: :meth:`Compression.allreduce_in` passes ``shapes=`` (the shapes of the tensors a
    #: bucket concatenates) to its ``reduce_in`` hook, for compressors that work per tensor
    takes_shapes: bool = False
    #: True: :meth:`compress` raises :class:`~sparcml.CompressionError` for NaN or Inf itself,
    #: so :meth:`Compression.allreduce_in` skips its own pass over the input (issue 36)
    checks_finite: bool = False

    def default_memory(self) -> "Memory | None":
        """The memory a :class:`Compression` of this compressor gets when none is given; None:
        :class:`ResidualMemory` when something is lost (not :attr:`lossless`, or a quantizer),
        else :class:`NoneMemory`."""
        return None

    def predicted_seconds(self, model, *, P: int, n: int, sent: float | None, itemsize: int,
                          quantizer, algorithm: str, shapes=None) -> float:
        """Its cost: the seconds of one reduction of a bucket of ``n`` values at ``P >= 2``
        ranks under the :class:`~sparcml.CostModel` ``model`` (``sent``: values a rank sends,
        measured, or None for what the options give; ``quantizer`` and ``algorithm``: the
        bundle's). By default the sparse allreduce of ``sent`` values through ``algorithm``
        (the dense ``MPI_Allreduce`` for a lossless compressor without quantizer, the global
        top-k step when :meth:`global_k` keeps a number); a compressor with its own wire
        format overrides it (:func:`sparcml.compression.predicted_seconds` calls it)."""
        return allreduce_seconds(self, model, P=P, n=n, sent=sent, itemsize=itemsize,
                                 quantizer=quantizer, algorithm=algorithm)

    @abstractmethod
    def compress(self, x: np.ndarray) -> SparseVector:
        """The entries of the 1-d float32/float64 array ``x`` to send, as a vector of
        ``dim = len(x)`` in ``x``'s dtype. Must not modify ``x``."""

    def num_sent(self, n: int) -> int:
        """How many values :meth:`compress` sends from an array of n values."""
        return n

    def global_k(self, n: int) -> int | None:
        """Entries of the sum over ranks to keep (:func:`sparcml.topk_allreduce`), or None:
        the sum of what every rank sends is reduced exactly."""
        return None

    def fresh(self) -> "Compressor":
        """A copy for one optimizer or hook: ``self`` for compressors without state; those
        with state across calls (a step count, a momentum, a warm start) return a new one."""
        return self

    # State across calls (a step count, a momentum, a warm start; none by default), per key:
    # saved and restored with checkpoints, and cut per parameter and joined again when a DDP
    # bucket is rebuilt with other parameters (:meth:`Compression.split_state`).

    def state_dict(self) -> dict:
        """A copy of the state kept across calls (``{}`` for none)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""

    def split_state(self, key, sizes) -> list[dict]:
        """The key's state cut into pieces of ``sizes`` consecutive values (one per
        parameter): a dict per piece (empty where nothing can be cut)."""
        return [{} for _ in sizes]

    def join_state(self, key, pieces: list[dict]) -> None:
        """Make the key's state the concatenation of ``pieces`` (from :meth:`split_state` of
        other keys); the key forgets its state when some piece has none."""

    # Optional hooks (looked up with getattr, so the compressors above need neither; their
    # ``ctx`` is a :class:`sparcml.CallContext`, whose docstring states what they may use:
    # ``ctx.rank``, ``ctx.size``, ``ctx.comm`` and ``ctx.waiter`` for their own collectives,
    # ``ctx.allreduce`` for sparcml's; so is the ``ctx`` of a memory's ``compensate_in`` and
    # ``full_input``, or None outside a reduction):
    # ``compress_in(ctx, g, key) -> SparseVector``: used instead of :meth:`compress` by
    # :meth:`Compression.allreduce_in` when the choice depends on the rank, the key or a step;
    # ``reduce_in(ctx, g, key, *, stats, check) -> Reduced``: the whole reduction of the
    # compensated ``g`` (its own wire format: signs, 16-bit floats, low-rank factors); the
    # bundle then updates the memory with the ``sent`` it reports. When the compressor
    # declares :attr:`takes_shapes`, ``compress``, ``compress_in`` and ``reduce_in`` get
    # ``shapes=`` (the bucket's tensor shapes, or None) for a choice per tensor.


class NoneCompressor(_NoOptions, Compressor):
    """Send everything: the array as a dense-backed vector (no copy)."""

    lossless = True

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(x)


class TopKCompressor(_EqualByRepr, Compressor):
    """Keep the largest magnitudes: a fraction ``density`` in (0, 1], or ``k`` entries (at most
    the array's length), of the whole array, or of every ``chunk`` consecutive values (512 in
    the original CNTK integration of SparCML). Exactly one of ``density`` and ``k``. Ties go to
    the lower index; the counts are those of :class:`sparcml.TopK` (``num_sent`` gives them).
    Raises :class:`~sparcml.CompressionError` for NaN or Inf in the array."""

    checks_finite = True  # compress() raises for NaN or Inf (Compression skips its own check)

    def __init__(self, density: float | None = None, k: int | None = None, *,
                 chunk: int | None = None, per_tensor: bool = False):
        if (density is None) == (k is None):
            raise CompressionError(f"TopKCompressor takes exactly one of density and k, got "
                                   f"density={density!r}, k={k!r}")
        if per_tensor and (density is None or chunk is not None):
            raise CompressionError("per_tensor=True takes a density (a fraction of each "
                                   "tensor) and no chunk")
        if density is not None and (isinstance(density, (bool, np.bool_)) or not isinstance(
                density, (int, float, np.integer, np.floating)) or not 0 < density <= 1):
            raise CompressionError(f"density must be a number in (0, 1], got {density!r}; "
                                   f"NoneCompressor() sends everything")
        if k is not None and (isinstance(k, (bool, np.bool_))
                              or not isinstance(k, (int, np.integer)) or k < 1):
            raise CompressionError(f"k must be an integer >= 1, got {k!r}")
        if chunk is not None and (isinstance(chunk, (bool, np.bool_))
                                  or not isinstance(chunk, (int, np.integer)) or chunk < 1):
            raise CompressionError(f"chunk must be None or a number of values >= 1, "
                                   f"got {chunk!r}")
        self.density = None if density is None else float(density)
        self.k = None if k is None else int(k)
        self.chunk = None if chunk is None else int(chunk)
        self.per_tensor = bool(per_tensor)
        self.takes_shapes = self.per_tensor  # Compression then passes the bucket's shapes
        # without error feedback a TopK holds configuration only: safe to share
        self._topk = TopK(k=self.k, density=self.density, error_feedback=False,
                          bucket_size=self.chunk)

    def compress(self, x: np.ndarray, shapes=None) -> SparseVector:
        """The top entries of ``x``; with ``per_tensor`` and the bucket's ``shapes``, the top
        ``density`` of each tensor (:func:`per_tensor_topk`)."""
        if self.per_tensor and shapes is not None:
            return per_tensor_topk(x, shapes, self._topk)
        return self._topk.compress(x)

    def num_sent(self, n: int) -> int:
        return self._topk.num_kept(n)

    def __repr__(self) -> str:
        what = f"density={self.density}" if self.density is not None else f"k={self.k}"
        return f"TopKCompressor({what}" + (f", chunk={self.chunk}" if self.chunk else "") + (
            ", per_tensor=True" if self.per_tensor else "") + ")"


def per_tensor_topk(x: np.ndarray, shapes, topk: TopK) -> SparseVector:
    """``topk`` (a :class:`sparcml.TopK` without error feedback: its density or k) of each
    tensor of ``x`` on its own: ``shapes`` are the shapes of the tensors ``x`` concatenates,
    in order (their sizes add up to ``len(x)``; an empty tensor has no entry). One vector of
    ``dim = len(x)``, indices sorted."""
    n = x.shape[0]
    idx, val, at = [], [], 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        if size:
            v = topk.compress(x[at:at + size])
            idx.append(np.asarray(v.indices, np.int64) + at)
            val.append(np.asarray(v.values, x.dtype))
        at += size
    if at != n:
        raise CompressionError(f"shapes {tuple(shapes)} hold {at} values, the array {n}")
    if not idx:
        return SparseVector.unchecked(n, np.empty(0, np.int64), np.empty(0, x.dtype))
    return SparseVector.unchecked(n, np.concatenate(idx), np.concatenate(val))


class GlobalTopKCompressor(TopKCompressor):
    """Global top-k: every rank keeps its local top ``density`` (or ``k``) entries as
    :class:`TopKCompressor` does (``chunk`` not allowed), and the reduction
    (:func:`sparcml.topk_allreduce`) returns only the same number of entries of largest
    ``|sum|`` over ranks, in bytes per rank bounded independently of P. What a rank selected
    locally but the global selection dropped stays in its memory (error feedback)."""

    def __init__(self, density: float | None = None, k: int | None = None):
        super().__init__(density=density, k=k)

    def global_k(self, n: int) -> int:
        return self.num_sent(n)

    def __repr__(self) -> str:
        return "Global" + super().__repr__()


# -- memories ---------------------------------------------------------------------------------

class Memory(ABC):
    """Error feedback: what was not delivered, per key, added to the key's next input.

    :meth:`compensate` and :meth:`update` are called in pairs for a key, on one thread at a
    time; :meth:`fresh` gives an empty memory of the same kind (one per optimizer or hook)."""

    error_feedback: bool = True

    @abstractmethod
    def compensate(self, x: np.ndarray, key) -> np.ndarray:
        """``x`` plus the key's residual, in an array the memory owns (``x`` is not modified)."""

    @abstractmethod
    def update(self, compensated: np.ndarray, key, sent: SparseVector) -> None:
        """Keep ``compensated - sent`` as the key's residual; ``compensated`` is the array
        :meth:`compensate` returned (the memory takes it over)."""

    def residual(self, key) -> np.ndarray | None:
        """The key's residual (what has not been delivered yet), or None."""
        return None

    def compensate_in(self, ctx, x: np.ndarray, key) -> np.ndarray:
        """:meth:`compensate` on a communication context (what
        :meth:`Compression.allreduce_in` calls): a memory that depends on the number of ranks
        (DGC's clipping threshold) overrides it."""
        return self.compensate(x, key)

    def full_input(self, ctx, x: np.ndarray, key) -> np.ndarray:
        """What a warm-up step (``full=True``: sent whole through the dense baseline) sends of
        ``x``: ``x`` itself (the memory keeps its residual for later); DGC's memory applies its
        momentum (a momentum SGD step)."""
        return x

    def reset(self) -> None:
        """Forget every residual."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def split_state(self, key, sizes) -> list[dict]:
        """The key's state cut into pieces of ``sizes`` consecutive values (see
        :meth:`Compressor.split_state`)."""
        return [{} for _ in sizes]

    def join_state(self, key, pieces: list[dict]) -> None:
        """Make the key's state the concatenation of ``pieces``, or forget it when a piece
        has none."""

    def fresh(self) -> "Memory":
        return type(self)()


class NoneMemory(_NoOptions, Memory):
    """No error feedback: what is not sent is dropped."""

    error_feedback = False

    def compensate(self, x: np.ndarray, key) -> np.ndarray:
        return x

    def update(self, compensated: np.ndarray, key, sent: SparseVector) -> None:
        pass


class ResidualMemory(_NoOptions, Memory):
    """One residual per key (a bucket), in the inputs' dtype; two buffers per key, reused.

    ``residual = compensated - sent`` entry by entry: zero where a value was delivered exactly,
    the quantization error where it was delivered quantized, the whole compensated value where
    nothing was sent. A key's input must keep its length and dtype (:meth:`reset` otherwise).
    """

    def __init__(self):
        self._residuals: dict = {}
        self._scratch: dict = {}

    def compensate(self, x: np.ndarray, key) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype not in VALUE_DTYPES or x.ndim != 1:
            raise UnsupportedDtypeError(f"ResidualMemory takes 1-d float32/float64 arrays, got "
                                        f"{x.dtype} of shape {x.shape}")
        r = self._residuals.get(key)
        if r is None:
            return x.copy()
        if r.shape != x.shape or r.dtype != x.dtype:
            raise CompressionError(
                f"the residual of {key!r} holds {r.shape[0]} {r.dtype} values, the input has "
                f"{x.shape[0]} {x.dtype}; call reset() when the arrays change")
        out = self._scratch.pop(key, None)
        if out is None:
            out = np.empty_like(r)
        return np.add(x, r, out=out)

    def update(self, compensated: np.ndarray, key, sent: SparseVector) -> None:
        if sent.dim != compensated.shape[0]:
            raise CompressionError(f"sent covers {sent.dim} values, the input {key!r} has "
                                   f"{compensated.shape[0]}")
        if sent.is_dense:
            np.subtract(compensated, sent.values, out=compensated)
        elif sent.nnz:
            compensated[sent.indices] -= sent.values
        old = self._residuals.get(key)
        self._residuals[key] = compensated
        if old is not None and old is not compensated:
            self._scratch[key] = old  # the next compensate() writes there

    def residual(self, key) -> np.ndarray | None:
        return self._residuals.get(key)

    def reset(self) -> None:
        self._residuals.clear()
        self._scratch.clear()

    def split_state(self, key, sizes) -> list[dict]:
        return _split(self._residuals.get(key), sizes, "residual")

    def join_state(self, key, pieces: list[dict]) -> None:
        self._scratch.pop(key, None)
        joined = _join(pieces, "residual")
        if joined is None:
            self._residuals.pop(key, None)
        else:
            self._residuals[key] = joined

    def state_dict(self) -> dict:
        """A copy of every residual, ``{"residuals": {key: array}}`` (for checkpoints)."""
        return {"residuals": {k: r.copy() for k, r in self._residuals.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s residuals (arrays or anything ``np.asarray`` takes,
        such as CPU tensors)."""
        residuals = {}
        for key, r in dict(state.get("residuals") or {}).items():
            r = np.array(r)
            if r.ndim != 1 or r.dtype not in VALUE_DTYPES:
                raise CompressionError(f"the saved residual of {key!r} must be a 1-d float32/"
                                       f"float64 array, got {r.dtype} of shape {r.shape}")
            residuals[key] = r
        self._residuals = residuals
        self._scratch.clear()


def _split(arr, sizes, name: str) -> list[dict]:
    """``arr`` cut into copies of ``sizes`` consecutive values, as ``{name: piece}`` dicts
    (empty dicts when ``arr`` is None or does not have ``sum(sizes)`` values)."""
    sizes = [int(n) for n in sizes]
    if arr is None or arr.shape[0] != sum(sizes):
        return [{} for _ in sizes]
    offsets = np.cumsum([0] + sizes)
    return [{name: arr[a:b].copy()} for a, b in zip(offsets, offsets[1:])]


def _join(pieces, name: str):
    """The concatenation of the pieces' ``name`` arrays, or None when a piece has none."""
    if not pieces or any(name not in p for p in pieces):
        return None
    return np.concatenate([np.asarray(p[name]) for p in pieces])


# -- what a rank sent -------------------------------------------------------------------------

def check_shapes(shapes, n: int) -> tuple:
    """``shapes`` as a tuple of int tuples whose sizes add up to ``n``; else
    :class:`~sparcml.CompressionError`."""
    try:
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    except (TypeError, ValueError):
        raise CompressionError(f"shapes must be a sequence of tensor shapes, got "
                               f"{shapes!r}") from None
    total = sum(math.prod(s) for s in shapes)  # (np.prod per shape: 10 us each)
    if total != n or any(d < 0 for s in shapes for d in s):
        raise CompressionError(f"shapes {shapes} hold {total} values, the array {n}")
    return shapes


def assemble_parts(parts, dim: int, dtype) -> SparseVector:
    """One vector of ``dim`` from the :class:`~sparcml._wire.codec.Part` objects an allreduce reported
    in ``sent=`` (disjoint ranges of this rank's input): sparse when every part is, else dense
    (zeros where a sparse part holds no entry). Always a new array."""
    dtype = np.dtype(dtype)
    parts = sorted(parts, key=lambda p: p.offset)
    if all(p.indices is not None for p in parts):
        if not parts:
            return SparseVector(dim, np.empty(0, np.int64), np.empty(0, dtype), check=False)
        idx = np.concatenate([p.indices for p in parts])
        values = np.concatenate([np.asarray(p.values, dtype) for p in parts])
        return SparseVector(dim, idx, values, check=False)
    out = np.zeros(dim, dtype)
    for p in parts:
        if p.indices is None:
            out[p.offset:p.offset + p.length] = p.values
        else:
            out[p.indices] = p.values
    return SparseVector.dense(out)


class Reduced(NamedTuple):
    """What :meth:`Compression.allreduce_in` returns.

    ``result``: the sum over ranks (the same on every rank); ``sent``: this rank's contribution
    as the other ranks received it (may be a view of the input when it travelled unchanged);
    ``values_sent``: entries this rank put in (``len(x)`` for a full array);
    ``compress_seconds``: memory and compressor time on this thread (the quantization runs
    inside the allreduce)."""

    result: SparseVector
    sent: SparseVector
    values_sent: int
    compress_seconds: float


# -- the bundle -------------------------------------------------------------------------------

def _check_finite(g: np.ndarray) -> None:
    """:class:`~sparcml.CompressionError` when the compensated input holds NaN or Inf (two
    reductions; NaN propagates through ``min``/``max``)."""
    if g.size and not (np.isfinite(g.min()) and np.isfinite(g.max())):
        raise CompressionError("the input (with the memory's residual) holds NaN or Inf on "
                               "this rank; check the loss and learning rate, or scale the "
                               "gradients (a loss scaler) before compressing")


def _length(x) -> int:
    try:
        return int(np.shape(x)[0])
    except Exception:  # noqa: BLE001 - a stand-in shape: the collective reports the failure
        return 0


def _dtype(x):
    dtype = getattr(x, "dtype", None)
    return dtype if dtype in VALUE_DTYPES else np.dtype(np.float32)


class Compression:
    """A compressor, an optional quantizer, a memory and an allreduce algorithm.

    Parameters
    ----------
    compressor : Compressor, default ``NoneCompressor()``
    quantizer : sparcml.QSGD, optional
        Quantize the values sent, sparse messages included. Not with the dense baseline.
    memory : Memory, optional
        Default: :class:`ResidualMemory` when something is lost (a top-k compressor or a
        quantizer), else :class:`NoneMemory`.
    algorithm : str, default :data:`sparcml.DEFAULT_ALGORITHM`
        A registered algorithm (:data:`sparcml.ALGORITHMS`) or ``"auto"``.
    options : sparcml.Options, optional
        The options of every reduction (passed as ``options=``); default: the process
        defaults at each call (the ``SPARCML_*`` environment).

    With a :class:`GlobalTopKCompressor` the reduction is :func:`sparcml.topk_allreduce`;
    ``algorithm="auto"`` then lets the cost model choose per call between it and the best
    allreduce of the local selections (:meth:`~sparcml.CostModel.choose_topk_step`); a named
    algorithm is not used.

    :meth:`none` is the uncompressed dense baseline. The memory is the only state; an optimizer
    or hook works on :meth:`fresh` copies, so one ``Compression`` may configure several.
    """

    __slots__ = ("compressor", "quantizer", "memory", "algorithm", "options", "_plans")

    def __init__(self, compressor: Compressor | None = None, quantizer: QSGD | None = None,
                 memory: Memory | None = None, algorithm: str = DEFAULT_ALGORITHM, *,
                 options: Options | None = None):
        compressor = NoneCompressor() if compressor is None else compressor
        if not isinstance(compressor, Compressor):
            raise IncompatibleOptionsError(
                f"compressor must be a sparcml.compression.Compressor (TopKCompressor(...), "
                f"NoneCompressor()), got {compressor!r}")
        if quantizer is not None and not isinstance(quantizer, QSGD):
            raise IncompatibleOptionsError(f"quantizer must be a sparcml.QSGD or None, got "
                                           f"{quantizer!r}; e.g. quantizer=sparcml.QSGD(4)")
        if memory is None:
            memory = compressor.default_memory()
        if memory is None:
            lossy = not compressor.lossless or quantizer is not None
            memory = ResidualMemory() if lossy else NoneMemory()
        if not isinstance(memory, Memory):
            raise IncompatibleOptionsError(f"memory must be a sparcml.compression.Memory "
                                           f"(ResidualMemory(), NoneMemory()), got {memory!r}")
        check_algorithm_options(algorithm, quantizer=quantizer)
        if quantizer is not None and hasattr(compressor, "reduce_in"):
            raise IncompatibleOptionsError(
                f"{compressor!r} sends its own wire format; it takes no quantizer")
        if quantizer is not None and compressor.global_k(1) is not None:
            raise IncompatibleOptionsError(
                "GlobalTopKCompressor sends exact values (sparcml.topk_allreduce takes no "
                "quantizer); drop the quantizer or use TopKCompressor")
        if options is not None and not isinstance(options, Options):
            raise InvalidOptionError(f"options must be a sparcml.Options or None, got "
                                     f"{options!r}")
        self.compressor, self.quantizer, self.memory = compressor, quantizer, memory
        self.algorithm = algorithm
        self.options = options
        self._plans: dict = {}  # (context, key) -> a persistent plan (see _plan)

    @classmethod
    def none(cls, algorithm: str = DENSE_BASELINE, *,
             options: Options | None = None) -> "Compression":
        """Full gradients, no quantizer, no memory, through the dense baseline
        (``MPI_Allreduce``) unless another ``algorithm`` is named."""
        return cls(NoneCompressor(), None, NoneMemory(), algorithm, options=options)

    @property
    def lossy(self) -> bool:
        """True when the result is not the exact sum of the inputs (top-k or quantization)."""
        return not self.compressor.lossless or self.quantizer is not None

    def describe(self) -> str:
        """One line naming the configuration (no random state): for agreement across ranks and
        for checkpoints."""
        q = None if self.quantizer is None else (
            f"QSGD(bits={self.quantizer.bits}, bucket_size={self.quantizer.bucket_size}, "
            f"norm={self.quantizer.norm!r})")
        plain = self.options is None or self.options == Options()
        options = "" if plain else f", options={self.options!r}"
        return (f"Compression(compressor={self.compressor!r}, quantizer={q}, "
                f"memory={self.memory!r}, algorithm={self.algorithm!r}{options})")

    __repr__ = describe

    def fresh(self, seed=None) -> "Compression":
        """The same configuration with an empty memory and, with a quantizer, a new QSGD of the
        same bits, bucket size and norm whose random stream is seeded by ``seed``."""
        q = None if self.quantizer is None else QSGD.from_code(self.quantizer.code, seed=seed)
        return Compression(self.compressor.fresh(), q, self.memory.fresh(), self.algorithm,
                           options=self.options)

    def with_options(self, options: Options | None) -> "Compression":
        """The same configuration (the same memory and quantizer objects) whose reductions
        take ``options`` (:class:`sparcml.Options`, or None: the process defaults)."""
        return Compression(self.compressor, self.quantizer, self.memory, self.algorithm,
                           options=options)

    # -- reductions ---------------------------------------------------------------------------

    def allreduce_in(self, ctx, x: np.ndarray, *, key=0, stats: TrafficStats | None = None,
                     check: bool = True, full: bool = False, shapes=None) -> Reduced:
        """Compensate, compress, allreduce and update the memory (see the module docstring) on
        a :class:`~sparcml._runtime.context.CommContext` (the blocking path's or a communication
        thread's). Collective: every rank, same keys in the same order, arrays of the same
        length and dtype. ``full=True`` (warm-up steps) sends ``x`` as it is through the dense
        baseline: no compressor, quantizer or memory. ``shapes``: the shapes of the tensors
        ``x`` concatenates (a bucket's parameters, in order; their sizes must add up to
        ``len(x)``), for the compressors that work per tensor (PowerSGD: each matrix at
        rank r); None: ``x`` is one flat array."""
        if shapes is not None:
            shapes = check_shapes(shapes, x.shape[0])
        # what the hooks of the compressor and the memory receive: the public, narrow context
        view = call_context(ctx, CallOptions.of(resolve_options(self.options)))
        if full:
            vec = SparseVector.dense(self.memory.full_input(view, x, key))
            result = allreduce_in(ctx, vec, algorithm=DENSE_BASELINE, stats=stats, check=check,
                                  options=self.options)
            return Reduced(result, vec, vec.nnz, 0.0)
        t0 = time.perf_counter()
        # this rank's own steps (compensate, compress) may fail where the others' do not (a
        # NaN, a residual of another length): the failure is carried into the collective,
        # which raises it on every rank (see _LocalFailure), and the memory stays as it was
        failed = capture()
        g = vec = None
        with failed:
            g = self.memory.compensate_in(view, x, key)
            if not self.compressor.checks_finite:
                _check_finite(g)  # (top-k's selection checks as it goes: no second pass)
        reduce = getattr(self.compressor, "reduce_in", None)
        if reduce is not None:  # the compressor's own collectives: one agreement first
            raise_everywhere(ctx.comm, failed.error, waiter=ctx.waiter)
            per_tensor = {"shapes": shapes} if self.compressor.takes_shapes else {}
            red = reduce(view, g, key, stats=stats, check=check, **per_tensor)
            t1 = time.perf_counter()
            self.memory.update(g, key, red.sent)
            return red._replace(compress_seconds=red.compress_seconds
                                + time.perf_counter() - t1)
        compress_in = getattr(self.compressor, "compress_in", None)
        if failed.error is None:
            per_tensor = {"shapes": shapes} if self.compressor.takes_shapes else {}
            with failed:
                vec = self.compressor.compress(g, **per_tensor) if compress_in is None else \
                    compress_in(view, g, key, **per_tensor)
        seconds = time.perf_counter() - t0
        n = vec.dim if vec is not None else _length(x)
        k_global = self.compressor.global_k(n)
        algorithm, use_global = self.algorithm, k_global is not None
        if use_global and algorithm == AUTO:  # every rank's vec has num_sent(n) items
            raise_everywhere(ctx.comm, failed.error, waiter=ctx.waiter)
            with nullcontext() if self.options is None else in_call(self.options):
                algorithm = auto.choose_topk_step(ctx, vec, vec.nnz, calibration_run,
                                                  self.options)
            use_global = algorithm == TOPK_STEP
        given = vec if failed.error is None else LocalFailure(failed.error, n, _dtype(x))
        if use_global:
            if self.algorithm == AUTO:  # the choice is per call: no fixed plan
                reduced = topk_allreduce_in(ctx, given, k_global, stats=stats, check=check,
                                            options=self.options)
            else:
                reduced = self._planned(ctx, key, given, k_global, stats, check)
            t0 = time.perf_counter()
            # sent: the local selection less what the global one dropped (kept in the memory)
            idx, val = select_kernels.drop_indices(vec.indices, vec.values,
                                                   reduced.dropped.indices)
            sent = SparseVector.unchecked(vec.dim, idx, val)
            self.memory.update(g, key, sent)
            return Reduced(reduced.result, sent, vec.nnz,
                           seconds + time.perf_counter() - t0)
        q = self.quantizer
        parts = [] if q is not None else None
        if q is None and algorithm != AUTO:  # a fixed bucket shape: its persistent plan
            result = self._planned(ctx, key, given, None, stats, check)
        else:
            result = allreduce_in(ctx, given, algorithm=algorithm, quantizer=q,
                                  quantize_sparse=q is not None, stats=stats, check=check,
                                  sent=parts, options=self.options)
        t0 = time.perf_counter()
        sent = vec if parts is None else assemble_parts(parts, vec.dim, vec.dtype)
        self.memory.update(g, key, sent)
        return Reduced(result, sent, vec.nnz, seconds + time.perf_counter() - t0)

    def _planned(self, ctx, key, vec: SparseVector, k: int | None, stats, check):
        """The reduction of ``vec`` under ``key`` through the key's persistent plan
        (:func:`sparcml.plan`, or :func:`sparcml.topk_plan` with ``k``), made collectively at
        the key's first call: every rank reduces the same keys in the same order, so every
        rank makes it at the same point. The plans follow the shape (``follow_shape``): when
        every rank's vector changed shape (a DDP bucket rebuilt), each remakes itself, with
        the compressor's k of the new dim."""
        entry = (id(ctx), key, k is not None)  # k follows the dim (global_k)
        comm, plan = self._plans.get(entry, (None, None))
        if plan is None or comm is not ctx.comm:
            if k is None:  # (vec may be a LocalFailure: its dim and dtype, best effort)
                plan = AllreducePlan._on_context(ctx, vec.dim, vec.dtype,
                                                 algorithm=self.algorithm,
                                                 options=self.options, follow_shape=True)
            else:
                plan = TopKPlan._on_context(ctx, vec.dim, vec.dtype, k, options=self.options,
                                            follow_shape=self.compressor.global_k)
            self._plans[entry] = (ctx.comm, plan)
        if k is None:
            return plan.allreduce_in(ctx, vec, stats=stats, check=check)
        return plan.topk_allreduce_in(ctx, vec, stats=stats, check=check)

    def allreduce(self, x: np.ndarray, key=0, comm: MPI.Comm | None = None, *,
                  stats: TrafficStats | None = None, shapes=None) -> SparseVector:
        """Blocking: the sum over the ranks of ``comm`` (default ``COMM_WORLD``) of every
        rank's compressed ``x``; this object's memory keeps the key's residual. Collective.
        ``shapes``: as in :meth:`allreduce_in`."""
        return self.reduce(x, key, comm, stats=stats, shapes=shapes).result

    def reduce(self, x: np.ndarray, key=0, comm: MPI.Comm | None = None, *,
               stats: TrafficStats | None = None, shapes=None) -> Reduced:
        """:meth:`allreduce` with the whole record of the reduction: a :class:`Reduced`
        (the sum, this rank's contribution as sent, the values it sent, the compression
        seconds). Collective, like :meth:`allreduce`."""
        ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
        return self.allreduce_in(ctx, x, key=key, stats=stats, shapes=shapes)

    # -- state: checkpoints and rebuilt buckets -----------------------------------------------

    def state_dict(self) -> dict:
        """A copy of the state kept across calls: ``{"memory": ..., "compressor": ...,
        "quantizer": ...}`` (residuals, DGC velocities, PowerSGD's Q, step counts, the
        quantizer's RNG); per rank (they differ between ranks)."""
        q = self.quantizer
        return {"memory": self.memory.state_dict(), "compressor": self.compressor.state_dict(),
                "quantizer": None if q is None else q.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (a missing ``"compressor"`` entry, from a checkpoint of
        an earlier release, leaves the compressor's state as it is)."""
        self.memory.load_state_dict(state.get("memory") or {})
        if state.get("compressor") is not None:
            self.compressor.load_state_dict(state["compressor"])
        if self.quantizer is not None and state.get("quantizer") is not None:
            self.quantizer.load_state_dict(state["quantizer"])

    def split_state(self, key, sizes) -> list[dict]:
        """The state of ``key`` (memory and compressor) cut per tensor of ``sizes`` values,
        one dict per tensor: what moves with a parameter when buckets are rebuilt."""
        sizes = [int(n) for n in sizes]
        return [{"memory": m, "compressor": c} for m, c in zip(
            self.memory.split_state(key, sizes), self.compressor.split_state(key, sizes))]

    def join_state(self, key, pieces: list[dict]) -> None:
        """Give ``key`` the state of ``pieces`` (from :meth:`split_state`), in order."""
        self.memory.join_state(key, [p.get("memory", {}) for p in pieces])
        self.compressor.join_state(key, [p.get("compressor", {}) for p in pieces])
