"""``randomk``: ``--density`` random positions per step, seeded; optionally the same on every rank.

:class:`RandomKCompressor`: ``k`` positions drawn uniformly without replacement, from a stream
seeded by ``(seed, key, step)`` (the step: how many times this key was reduced by this copy;
the counts are in its ``state_dict()``, so a resumed run draws the positions of the
uninterrupted one; :meth:`fresh` starts them at 0). ``shared=True``: every rank draws the same
positions, so only the k values travel, through one dense allreduce of k values (no indices:
its cost); ``shared=False``: the rank's number joins the seed, every rank sends its own
positions through the sparse allreduce (the default cost).

``rescale=True`` (what ``build`` gives without error feedback): the values sent are
``(n / k) g[idx]``, so that the expectation over the draws is ``g`` itself (unbiased random-k,
Wangni et al. 2018, Stich et al. 2018's ``rand_k`` operator scaled by ``d / k``); with error
feedback (Stich et al. 2018, "Sparsified SGD with memory") the values go unscaled and the memory
keeps the rest. The paper's SGD has no momentum: the registry's recommended momentum is 0 (the
apps' default unless ``--momentum`` is given).
"""

from __future__ import annotations

import numpy as np

from ..._collectives.algorithms import DENSE_BASELINE
from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import _Steps, _check_density, key_seed
from .._objects import Compression, Compressor, Reduced, _EqualByRepr
from .._registry import (BITS, CompressorSpec, DENSITY, Param, SEED, bits_label, memory_of,
                         percent_label, quantizer_of, register_compressor)


class RandomKCompressor(_EqualByRepr, _Steps, Compressor):
    """``k`` (or a fraction ``density``) uniformly random positions per call, seeded by
    ``(seed, key, step)`` and, with ``shared=False``, the rank. Exactly one of density and k.
    ``rescale``: send ``(n / k) g[idx]`` (unbiased; for use without error feedback)."""

    def __init__(self, density: float | None = None, k: int | None = None, *, seed: int = 0,
                 shared: bool = True, rescale: bool = False):
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
        self.seed, self.shared, self.rescale = int(seed), bool(shared), bool(rescale)

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
        return SparseVector.unchecked(g.shape[0], idx, self._values(g, idx))

    def _values(self, g: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``g[idx]`` (a copy), times ``n / k`` with :attr:`rescale`."""
        values = g[idx]
        if self.rescale and idx.size:
            values *= np.asarray(g.shape[0] / idx.size, g.dtype)
        return values

    def __getattr__(self, name):
        # reduce_in exists only in the shared mode (the bundle looks it up with getattr)
        if name == "reduce_in" and self.__dict__.get("shared"):
            return self._reduce_shared
        raise AttributeError(name)

    def _reduce_shared(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        idx = self.indices(n, key, self._next_step(key))
        values = self._values(g, idx)  # a copy: the allreduce's buffer
        total = ctx.allreduce(SparseVector.dense(values.copy()), algorithm=DENSE_BASELINE,
                              stats=stats, check=check)
        sent = SparseVector.unchecked(n, idx, values)
        return Reduced(SparseVector.unchecked(n, idx, np.asarray(total.values, g.dtype)), sent,
                       idx.size, 0.0)

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """Shared indices: one dense ``MPI_Allreduce`` of the k values; else the default."""
        if self.shared:
            return model.allreduce(self.num_sent(n) * itemsize)
        return super().predicted_seconds(model, P=P, n=n, sent=sent, itemsize=itemsize,
                                         quantizer=quantizer, algorithm=algorithm)

    def fresh(self) -> "RandomKCompressor":
        return RandomKCompressor(self.density, self.k, seed=self.seed, shared=self.shared,
                                 rescale=self.rescale)

    def __repr__(self) -> str:
        what = f"density={self.density}" if self.density is not None else f"k={self.k}"
        scaled = ", rescale=True" if self.rescale else ""
        return f"RandomKCompressor({what}, seed={self.seed}, shared={self.shared}{scaled})"


SHARED = Param("shared", "--shared-indices", "every rank draws the same positions (a dense "
               "allreduce of k values)", type=None, default=False, action="store_true")


def build(*, density, bits, seed, shared, algorithm, error_feedback):
    # without memory the draw is rescaled by n / k (unbiased); with it, the memory keeps the rest
    return Compression(RandomKCompressor(density=density, seed=seed, shared=shared,
                                         rescale=not error_feedback),
                       quantizer_of(bits), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="randomk", order=30, build=build, params=(DENSITY, BITS, SEED, SHARED),
    no_quantizer=lambda p: "with shared indices" if p["shared"] else None,
    labels=(("bits", bits_label), ("density", percent_label),
            ("shared_indices", lambda shared: "shared" if shared else None),
            ("momentum", lambda m: f"SGD momentum {m:g}" if m else None)),
    recommended={"momentum": 0.0,
                 "source": "Stich et al. 2018 (with memory) and Wangni et al. 2018 (without: "
                           "scaled by n / k, unbiased): plain SGD, no momentum"},
    summary="--density random positions per step, seeded, error feedback (without: scaled by "
            "n / k, unbiased); --shared-indices: the same on every rank (a dense allreduce of "
            "k values); no SGD momentum unless --momentum is given"))
