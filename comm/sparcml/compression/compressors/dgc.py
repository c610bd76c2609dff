"""``dgc``: Deep Gradient Compression (Lin et al. 2018): momentum correction, masking, clipping.

:class:`DGCCompressor` + :class:`DGCMemory`: the memory does local gradient clipping, momentum
correction (``u = m u + g``, ``v = v + u``) and momentum factor masking (``u`` and ``v`` set to
zero where entries were sent); the compressor keeps the top ``density`` of ``v``, starting at
``initial_density`` and falling exponentially to ``density`` over ``warmup_steps`` steps (the
step counts per key are in its ``state_dict()``). The exact top-k is used (DGC samples to
estimate the threshold). Use it with plain SGD: the memory applies the momentum
(``own_momentum``). Its cost: the default, the sparse allreduce of the top ``density``.
"""

from __future__ import annotations

import numpy as np

from ..._errors import CompressionError, UnsupportedDtypeError
from ..._topk.local import TopK
from ..._vector import SparseVector, VALUE_DTYPES
from .._common import _Steps, _check_density, _check_finite
from .._objects import Compression, Compressor, NoneMemory, ResidualMemory, _join, _split
from .._registry import (BITS, CompressorSpec, DENSITY, MOMENTUM, Param, bits_label,
                         nonnegative_int, percent_label, quantizer_of, register_compressor)


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


WARMUP = Param("density_warmup_steps", "--density-warmup-steps",
               "steps of the exponential density warm-up from 25%% down to --density",
               type=nonnegative_int, default=0)
CLIP = Param("clip_norm", "--clip-norm", "clip the L2 norm of each rank's bucket to this "
             "before compression (DGC's local clipping; the deep apps' optimizer clipping is "
             "sparc-lstm --clip-grad-norm; default: no clipping)", type=float,
             default=None)


def build(*, density, bits, momentum, density_warmup_steps, clip_norm, algorithm,
          error_feedback):
    memory = DGCMemory(momentum, clip_norm) if error_feedback else NoneMemory()
    return Compression(DGCCompressor(density, warmup_steps=density_warmup_steps),
                       quantizer_of(bits), memory, algorithm)


SPEC = register_compressor(CompressorSpec(
    name="dgc", order=50, build=build, params=(DENSITY, BITS, MOMENTUM, WARMUP, CLIP),
    own_momentum=True, labels=(("bits", bits_label), ("density", percent_label)),
    summary="Deep Gradient Compression: --density top-k of the momentum-corrected gradient, "
            "momentum factor masking, --clip-norm, --density-warmup-steps (its memory applies "
            "--momentum: the SGD then runs without)"))
