"""Sparsifiers over the sparse allreduce: random-k, threshold-v and DGC (with its memory).

- :class:`RandomKCompressor`: ``k`` positions drawn uniformly without replacement, from a
  stream seeded by ``(seed, key, step)`` (the step: how many times this key was reduced by
  this copy). ``shared=True``: every rank draws the same positions, so only the k values
  travel, through one dense allreduce of k values (no indices); ``shared=False``: the rank's
  number joins the seed, every rank sends its own positions through the sparse allreduce.
- :class:`ThresholdCompressor`: every entry with ``|v| >= threshold`` (variable k).
- :class:`DGCCompressor` + :class:`DGCMemory` (Lin et al., Deep Gradient Compression, 2018):
  the memory does local gradient clipping, momentum correction (``u = m u + g``, ``v = v + u``)
  and momentum factor masking (``u`` and ``v`` set to zero where entries were sent); the
  compressor keeps the top ``density`` of ``v``, starting at ``initial_density`` and falling
  exponentially to ``density`` over ``warmup_steps`` steps. The exact top-k is used (DGC
  samples to estimate the threshold). Use it with plain SGD: the memory applies the momentum.

Stateful compressors count steps per key; :meth:`fresh` gives a copy whose counts start at 0;
the counts are in their ``state_dict()`` (checkpoints: a resumed run draws the random-k
positions and follows the warm-up of the uninterrupted one).
"""

from __future__ import annotations

import zlib

import numpy as np

from .._collectives.algorithms import DENSE_BASELINE
from .._collectives.entry import allreduce_in
from .._errors import CompressionError, UnsupportedDtypeError
from .._topk.local import TopK
from .._vector import VALUE_DTYPES, SparseVector
from ._objects import Compressor, Reduced, ResidualMemory, _join, _split

__all__ = ["RandomKCompressor", "ThresholdCompressor", "DGCCompressor", "DGCMemory",
           "key_seed"]


def key_seed(key) -> int:
    """A number for ``key`` that is the same on every rank and run (CRC-32 of its repr)."""
    return zlib.crc32(repr(key).encode())


def _check_finite(x: np.ndarray, who: str) -> None:
    if not np.isfinite(x).all():
        raise CompressionError(f"{who}: the array holds NaN or Inf")


def _check_density(density, name="density") -> float:
    if isinstance(density, (bool, np.bool_)) or not isinstance(
            density, (int, float, np.integer, np.floating)) or not 0 < density <= 1:
        raise CompressionError(f"{name} must be a number in (0, 1], got {density!r}")
    return float(density)


class _Steps:
    """A per-key step count (the mixin of the stateful compressors), in their state."""

    def _next_step(self, key) -> int:
        steps = self.__dict__.setdefault("_steps", {})
        step = steps.get(key, 0)
        steps[key] = step + 1
        return step

    def state_dict(self) -> dict:
        """``{"steps": {key: calls so far}}``."""
        return {"steps": dict(self.__dict__.get("_steps", {}))}

    def load_state_dict(self, state: dict) -> None:
        self._steps = {k: int(v) for k, v in dict(state.get("steps") or {}).items()}

    def split_state(self, key, sizes) -> list[dict]:
        step = self.__dict__.get("_steps", {}).get(key)
        return [{} if step is None else {"step": step} for _ in sizes]

    def join_state(self, key, pieces: list[dict]) -> None:
        # every bucket is reduced once per step: the pieces' counts agree (the latest wins)
        steps = self.__dict__.setdefault("_steps", {})
        if pieces and all("step" in p for p in pieces):
            steps[key] = max(int(p["step"]) for p in pieces)
        else:
            steps.pop(key, None)


class RandomKCompressor(_Steps, Compressor):
    """``k`` (or a fraction ``density``) uniformly random positions per call, seeded by
    ``(seed, key, step)`` and, with ``shared=False``, the rank. Exactly one of density and k."""

    def __init__(self, density: float | None = None, k: int | None = None, *, seed: int = 0,
                 shared: bool = True):
        if (density is None) == (k is None):
            raise CompressionError(f"RandomKCompressor takes exactly one of density and k, "
                                   f"got density={density!r}, k={k!r}")
        if density is not None:
            density = _check_density(density)
        if k is not None and (isinstance(k, (bool, np.bool_))
                              or not isinstance(k, (int, np.integer)) or k < 1):
            raise CompressionError(f"k must be an integer >= 1, got {k!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise CompressionError(f"seed must be an integer >= 0, got {seed!r}")
        self.density, self.k = density, None if k is None else int(k)
        self.seed, self.shared = int(seed), bool(shared)

    def num_sent(self, n: int) -> int:
        if self.k is not None:
            return min(self.k, n)
        return min(n, max(1, int(round(self.density * n))))

    def indices(self, n: int, key, step: int, rank: int = 0) -> np.ndarray:
        """The sorted positions drawn for ``key`` at ``step`` (``rank`` ignored when shared)."""
        entropy = [self.seed, key_seed(key), step] + ([] if self.shared else [rank + 1])
        rng = np.random.default_rng(entropy)
        return np.sort(rng.choice(n, self.num_sent(n), replace=False)).astype(np.int64)

    def compress(self, x: np.ndarray) -> SparseVector:
        raise CompressionError("RandomKCompressor draws per key and step: use it through "
                               "Compression (compress_in / reduce_in)")

    def compress_in(self, ctx, g: np.ndarray, key) -> SparseVector:
        idx = self.indices(g.shape[0], key, self._next_step(key), ctx.rank)
        return SparseVector.unchecked(g.shape[0], idx, g[idx])

    def __getattr__(self, name):
        # reduce_in exists only in the shared mode (the bundle looks it up with getattr)
        if name == "reduce_in" and self.__dict__.get("shared"):
            return self._reduce_shared
        raise AttributeError(name)

    def _reduce_shared(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        idx = self.indices(n, key, self._next_step(key))
        values = g[idx]  # a copy: the allreduce's buffer
        total = allreduce_in(ctx, SparseVector.dense(values.copy()), algorithm=DENSE_BASELINE,
                             stats=stats, check=check)
        sent = SparseVector.unchecked(n, idx, values)
        return Reduced(SparseVector.unchecked(n, idx, np.asarray(total.values, g.dtype)), sent,
                       idx.size, 0.0)

    def fresh(self) -> "RandomKCompressor":
        return RandomKCompressor(self.density, self.k, seed=self.seed, shared=self.shared)

    def __repr__(self) -> str:
        what = f"density={self.density}" if self.density is not None else f"k={self.k}"
        return f"RandomKCompressor({what}, seed={self.seed}, shared={self.shared})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


class ThresholdCompressor(Compressor):
    """Every entry with ``|v| >= threshold`` (> 0): a variable number per call and rank.
    Raises :class:`~sparcml.CompressionError` for NaN or Inf."""

    def __init__(self, threshold: float):
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(
                threshold, (int, float, np.integer, np.floating)) or not 0 < threshold < np.inf:
            raise CompressionError(f"threshold must be a finite number > 0, got {threshold!r}")
        self.threshold = float(threshold)

    def compress(self, x: np.ndarray) -> SparseVector:
        _check_finite(x, "ThresholdCompressor")
        idx = np.flatnonzero(np.abs(x) >= self.threshold).astype(np.int64)
        return SparseVector.unchecked(x.shape[0], idx, x[idx])

    def num_sent(self, n: int) -> int:  # not known in advance: at most n
        return n

    def __repr__(self) -> str:
        return f"ThresholdCompressor(threshold={self.threshold})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.threshold == self.threshold

    def __hash__(self) -> int:
        return hash((type(self), self.threshold))


class DGCCompressor(_Steps, Compressor):
    """Top ``density`` of the (momentum-corrected) input, per key; during the first
    ``warmup_steps`` steps the density is ``initial_density * (density / initial_density) **
    (step / warmup_steps)`` (DGC's exponential warm-up, 25% down to 0.1% in the paper)."""

    checks_finite = True  # top-k's selection raises for NaN or Inf

    def __init__(self, density: float = 0.001, *, warmup_steps: int = 0,
                 initial_density: float = 0.25):
        self.density = _check_density(density)
        self.initial_density = _check_density(initial_density, "initial_density")
        if isinstance(warmup_steps, (bool, np.bool_)) \
                or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
            raise CompressionError(f"warmup_steps must be an integer >= 0, got "
                                   f"{warmup_steps!r}")
        self.warmup_steps = int(warmup_steps)

    def density_at(self, step: int) -> float:
        """The density of step ``step`` (0-based)."""
        if step >= self.warmup_steps:
            return self.density
        ratio = self.density / self.initial_density
        return self.initial_density * ratio ** (step / self.warmup_steps)

    def default_memory(self) -> "DGCMemory":
        return DGCMemory()

    def compress(self, x: np.ndarray) -> SparseVector:
        return TopK(density=self.density, error_feedback=False).compress(x)

    def compress_in(self, ctx, g: np.ndarray, key) -> SparseVector:
        density = self.density_at(self._next_step(key))
        return TopK(density=density, error_feedback=False).compress(g)

    def num_sent(self, n: int) -> int:
        return TopK(density=self.density, error_feedback=False).num_kept(n)

    def fresh(self) -> "DGCCompressor":
        return DGCCompressor(self.density, warmup_steps=self.warmup_steps,
                             initial_density=self.initial_density)

    def __repr__(self) -> str:
        return (f"DGCCompressor(density={self.density}, warmup_steps={self.warmup_steps}, "
                f"initial_density={self.initial_density})")

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


class DGCMemory(ResidualMemory):
    """DGC's memory: per key a velocity ``u`` and an accumulation ``v`` (the residual).

    :meth:`compensate`: ``x`` clipped to L2 norm ``clip_norm`` (None: no clipping), then
    ``u = momentum * u + x`` and returns ``v + u``; :meth:`update`: ``v = g - sent`` (the
    residual, as :class:`ResidualMemory`) and ``u = 0`` where ``sent`` holds an entry
    (momentum factor masking)."""

    def __init__(self, momentum: float = 0.9, clip_norm: float | None = None):
        super().__init__()
        if isinstance(momentum, (bool, np.bool_)) or not isinstance(
                momentum, (int, float, np.integer, np.floating)) or not 0 <= momentum < 1:
            raise CompressionError(f"momentum must be a number in [0, 1), got {momentum!r}")
        if clip_norm is not None and not (isinstance(clip_norm, (int, float)) and clip_norm > 0):
            raise CompressionError(f"clip_norm must be None or a number > 0, got "
                                   f"{clip_norm!r}")
        self.momentum = float(momentum)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self._velocity: dict = {}

    def compensate(self, x: np.ndarray, key) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype not in VALUE_DTYPES or x.ndim != 1:
            raise UnsupportedDtypeError(f"DGCMemory takes 1-d float32/float64 arrays, got "
                                        f"{x.dtype} of shape {x.shape}")
        if self.clip_norm is not None:
            norm = float(np.linalg.norm(x))
            if norm > self.clip_norm:
                x = x * np.asarray(self.clip_norm / norm, x.dtype)
        u = self._velocity.get(key)
        if u is not None and (u.shape != x.shape or u.dtype != x.dtype):
            raise CompressionError(
                f"the velocity of {key!r} holds {u.shape[0]} {u.dtype} values, the input has "
                f"{x.shape[0]} {x.dtype}; call reset() when the arrays change")
        _check_finite(x, "DGCMemory")  # before the velocity takes it: the next step works
        if u is None:
            u = self._velocity[key] = np.zeros_like(x)
        u *= np.asarray(self.momentum, u.dtype)
        u += x
        return super().compensate(u, key)

    def update(self, compensated: np.ndarray, key, sent: SparseVector) -> None:
        u = self._velocity.get(key)
        if u is not None:
            if sent.is_dense:
                u[sent.values != 0] = 0
            else:
                u[sent.indices] = 0
        super().update(compensated, key, sent)

    def velocity(self, key) -> np.ndarray | None:
        """The key's velocity ``u``, or None."""
        return self._velocity.get(key)

    def reset(self) -> None:
        super().reset()
        self._velocity.clear()

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["velocities"] = {k: u.copy() for k, u in self._velocity.items()}
        return state

    def split_state(self, key, sizes) -> list[dict]:
        return [{**r, **u} for r, u in zip(super().split_state(key, sizes),
                                           _split(self._velocity.get(key), sizes, "velocity"))]

    def join_state(self, key, pieces: list[dict]) -> None:
        super().join_state(key, pieces)
        joined = _join(pieces, "velocity")
        if joined is None:
            self._velocity.pop(key, None)
        else:
            self._velocity[key] = joined

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._velocity = {k: np.array(u) for k, u in dict(state.get("velocities") or {}).items()}

    def fresh(self) -> "DGCMemory":
        return DGCMemory(self.momentum, self.clip_norm)

    def __repr__(self) -> str:
        return f"DGCMemory(momentum={self.momentum}, clip_norm={self.clip_norm})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))
