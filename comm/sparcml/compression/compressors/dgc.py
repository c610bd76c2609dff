"""``dgc``: Deep Gradient Compression (Lin et al. 2018): momentum correction, masking, clipping,
warm-up.

:class:`DGCCompressor` + :class:`DGCMemory`, as the paper's Algorithm (and its Figure 3):

- **local gradient clipping** (the memory): each rank's gradient is clipped to the L2 norm
  ``clip_norm * P**-0.5`` (the global threshold scaled by ``N**-1/2``, the rank's share if all
  N ranks had gradients alike) before it joins the accumulation; one norm per bucket (the
  model's gradient when it fits one bucket; the apps' default ``--bucket-mb`` holds the small
  models whole); ``clip_norm`` None: no clipping. The apps give it the run's own clipping
  threshold (``sparc-lstm``'s ``--clip-grad-norm``) unless ``--clip-norm`` is given, and then do not clip
  the averaged gradient again;
- **momentum correction**: ``u = m u + g``, ``v = v + u`` (``m``: ``--compressor-momentum``,
  0.9), the SGD then runs without momentum (its recommended ``--momentum`` is 0);
- **per-tensor selection**: the top ``density`` of ``|v|`` of every tensor of the bucket (the
  paper's threshold is per layer; the optimizer and the DDP hook pass the bucket's parameter
  ``shapes``; without them, the whole array). The exact top-k is used (DGC samples 0.1 to 1%
  to estimate the threshold);
- **momentum factor masking**: ``u`` and ``v`` set to zero where an entry was sent;
- **warm-up**: the density falls exponentially from ``initial_density`` (25%) to ``density`` in
  ``warmup_stages`` (4) equal stages over the first ``warmup_steps`` steps (the paper: 75%,
  93.75%, 98.4375%, 99.6% sparsity in the first four epochs, then 99.9%; the apps make
  ``warmup_steps`` four epochs unless ``--density-warmup-steps`` is given). The step counts
  per key are in the compressor's ``state_dict()``.

A dense warm-up step of the optimizer (``--warmup-steps``: the bucket sent whole) is a
momentum SGD step here (:meth:`DGCMemory.full_input`: ``u = m u + g`` sent whole, nothing
accumulated or masked), not plain SGD. Its cost: the default, the sparse allreduce of the top
``density``.
"""

from __future__ import annotations

import numpy as np

from ..._errors import CompressionError, UnsupportedDtypeError
from ..._topk.local import TopK
from ..._vector import SparseVector, VALUE_DTYPES
from .._common import _Steps, _check_density, _check_finite
from .._objects import (Compression, Compressor, NoneMemory, ResidualMemory, _EqualByRepr,
                        _join, _split,
                        per_tensor_topk)
from .._registry import (BITS, CompressorSpec, DENSITY, MOMENTUM, Param, bits_label,
                         nonnegative_int, percent_label, quantizer_of, register_compressor)

#: the paper's warm-up: four epochs (the apps' default ``--density-warmup-steps``), 4 stages
WARMUP_EPOCHS = 4


class DGCCompressor(_EqualByRepr, _Steps, Compressor):
    """Top ``density`` of the (momentum-corrected) input of each tensor, per key; during the
    first ``warmup_steps`` steps the density is ``initial_density * (density /
    initial_density) ** (stage / warmup_stages)``, ``stage = floor(step * warmup_stages /
    warmup_steps)`` (``warmup_stages`` None: ``stage / warmup_stages`` is ``step /
    warmup_steps``, a per-step exponential)."""

    checks_finite = True  # top-k's selection raises for NaN or Inf
    takes_shapes = True   # selection per tensor of the bucket

    def __init__(self, density: float = 0.001, *, warmup_steps: int = 0,
                 initial_density: float = 0.25, warmup_stages: int | None = 4):
        self.density = _check_density(density)
        self.initial_density = _check_density(initial_density, "initial_density")
        if isinstance(warmup_steps, (bool, np.bool_)) \
                or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
            raise CompressionError(f"warmup_steps must be an integer >= 0, got "
                                   f"{warmup_steps!r}")
        if warmup_stages is not None and (isinstance(warmup_stages, (bool, np.bool_)) or not
                                          isinstance(warmup_stages, (int, np.integer))
                                          or warmup_stages < 1):
            raise CompressionError(f"warmup_stages must be None or an integer >= 1, got "
                                   f"{warmup_stages!r}")
        self.warmup_steps = int(warmup_steps)
        self.warmup_stages = None if warmup_stages is None else int(warmup_stages)

    def density_at(self, step: int) -> float:
        """The density of step ``step`` (0-based)."""
        if step >= self.warmup_steps:
            return self.density
        ratio = self.density / self.initial_density
        if self.warmup_stages is None:
            return self.initial_density * ratio ** (step / self.warmup_steps)
        stage = (step * self.warmup_stages) // self.warmup_steps
        return self.initial_density * ratio ** (stage / self.warmup_stages)

    def default_memory(self) -> "DGCMemory":
        return DGCMemory()

    def _select(self, g: np.ndarray, density: float, shapes) -> SparseVector:
        topk = TopK(density=density, error_feedback=False)
        return topk.compress(g) if shapes is None else per_tensor_topk(g, shapes, topk)

    def compress(self, x: np.ndarray, shapes=None) -> SparseVector:
        return self._select(x, self.density, shapes)

    def compress_in(self, ctx, g: np.ndarray, key, shapes=None) -> SparseVector:
        return self._select(g, self.density_at(self._next_step(key)), shapes)

    def num_sent(self, n: int) -> int:
        return TopK(density=self.density, error_feedback=False).num_kept(n)

    def fresh(self) -> "DGCCompressor":
        return DGCCompressor(self.density, warmup_steps=self.warmup_steps,
                             initial_density=self.initial_density,
                             warmup_stages=self.warmup_stages)

    def __repr__(self) -> str:
        return (f"DGCCompressor(density={self.density}, warmup_steps={self.warmup_steps}, "
                f"initial_density={self.initial_density}, "
                f"warmup_stages={self.warmup_stages}, per_tensor=True)")


class DGCMemory(_EqualByRepr, ResidualMemory):
    """DGC's memory: per key a velocity ``u`` and an accumulation ``v`` (the residual).

    :meth:`compensate_in`: ``x`` clipped to L2 norm ``clip_norm / sqrt(P)`` (P: the ranks;
    ``clip_norm`` None: no clipping), then ``u = momentum * u + x`` and returns ``v + u``
    (:meth:`compensate`: the same at P = 1); :meth:`update`: ``v = g - sent`` (the residual,
    as :class:`ResidualMemory`) and ``u = 0`` where ``sent`` holds an entry (momentum factor
    masking)."""

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

    def clip_threshold(self, P: int) -> float | None:
        """The local clipping threshold at ``P`` ranks: ``clip_norm * P**-0.5``."""
        return None if self.clip_norm is None else self.clip_norm / float(np.sqrt(P))

    def _momentum_step(self, x: np.ndarray, key, P: int) -> np.ndarray:
        """Clip ``x`` and fold it into the key's velocity; returns the velocity (owned)."""
        x = np.asarray(x)
        if x.dtype not in VALUE_DTYPES or x.ndim != 1:
            raise UnsupportedDtypeError(f"DGCMemory takes 1-d float32/float64 arrays, got "
                                        f"{x.dtype} of shape {x.shape}")
        threshold = self.clip_threshold(P)
        if threshold is not None:
            norm = float(np.linalg.norm(x))
            if norm > threshold:
                x = x * np.asarray(threshold / norm, x.dtype)
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
        return u

    def compensate(self, x: np.ndarray, key) -> np.ndarray:
        return self.compensate_in(None, x, key)

    def compensate_in(self, ctx, x: np.ndarray, key) -> np.ndarray:
        u = self._momentum_step(x, key, 1 if ctx is None else ctx.size)
        return super().compensate(u, key)

    def full_input(self, ctx, x: np.ndarray, key) -> np.ndarray:
        """A dense warm-up step: ``u = m u + clip(x)`` sent whole (a momentum SGD step); the
        accumulation keeps what it holds, nothing is masked."""
        return self._momentum_step(x, key, 1 if ctx is None else ctx.size).copy()

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


WARMUP = Param("density_warmup_steps", "--density-warmup-steps",
               "steps of the exponential density warm-up from 25%% down to --density in 4 "
               "stages (default: the paper's 4 epochs; 0: none)",
               type=nonnegative_int, default=None)
CLIP = Param("clip_norm", "--clip-norm",
             "DGC's local clipping of each rank's bucket: the global L2 threshold, each "
             "rank clipping to it times P**-0.5 (default: the app's own gradient clipping "
             "threshold, if it has one)",
             type=float, default=None)


def build(*, density, bits, momentum, density_warmup_steps, clip_norm, algorithm,
          error_feedback):
    memory = DGCMemory(momentum, clip_norm) if error_feedback else NoneMemory()
    return Compression(DGCCompressor(density, warmup_steps=density_warmup_steps or 0),
                       quantizer_of(bits), memory, algorithm)


SPEC = register_compressor(CompressorSpec(
    name="dgc", order=50, build=build, params=(DENSITY, BITS, MOMENTUM, WARMUP, CLIP),
    own_momentum=True, labels=(("bits", bits_label), ("density", percent_label),
                               ("momentum", lambda m: f"SGD momentum {m:g}" if m else None)),
    recommended={"momentum": 0.0, "warmup_epochs": WARMUP_EPOCHS,
                 "source": "Lin et al. 2018: momentum 0.9 inside the compression "
                           "(--compressor-momentum), no SGD momentum, the dense learning "
                           "rate, sparsity warm-up over the first 4 epochs"},
    summary="Deep Gradient Compression: per-tensor --density top-k of the momentum-corrected "
            "gradient (--compressor-momentum, 0.9), momentum factor masking, local clipping "
            "at --clip-norm / sqrt(P), exponential warm-up over 4 epochs "
            "(--density-warmup-steps); no SGD momentum unless --momentum is given"))
