"""``signsgd``: 1-bit signs, bit-packed allgather, majority vote (Bernstein et al. 2018).

:class:`SignCompressor` (also ``signum``'s): every rank sends the signs of its input
(``momentum > 0``: of its local momentum ``m = momentum * m + (1 - momentum) g``: signum), 1 bit
per value, bit-packed (``np.packbits``, little bit order; bit 1 for ``v >= 0``, so a zero
counts as +1, as in GRACE); one ``Allgather`` of ``ceil(n / 8)`` bytes per rank (its cost);
every rank takes the majority vote ``sign(sum of signs)`` (0 on a tie). The result is
``P * vote`` so that the optimizer's average over ranks is the vote itself. No memory.
"""

from __future__ import annotations

import math
import numpy as np

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import _Stateless, _allgather, pack_signs, unpack_signs
from .._objects import Compression, Compressor, NoneMemory, Reduced, _join, _split
from .._registry import CompressorSpec, register_compressor


class SignCompressor(_Stateless, Compressor):
    """signSGD (``momentum=0``) or signum (``0 < momentum < 1``) with majority vote."""

    def __init__(self, momentum: float = 0.0):
        if isinstance(momentum, (bool, np.bool_)) or not isinstance(
                momentum, (int, float, np.integer, np.floating)) or not 0 <= momentum < 1:
            raise CompressionError(f"momentum must be a number in [0, 1), got {momentum!r}")
        self.momentum = float(momentum)
        self._m: dict = {}

    def _options(self) -> dict:
        return {"momentum": self.momentum}

    def default_memory(self):
        return NoneMemory()

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(unpack_signs(pack_signs(x), x.shape[0], x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """An ``Allgather`` of ``ceil(n / 8)`` bytes per rank (the packed signs)."""
        return model.allgather(P * math.ceil(n / 8))

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        s = g
        if self.momentum:
            m = self._m.get(key)
            if m is None:
                m = self._m[key] = np.zeros_like(g)
            m *= np.asarray(self.momentum, g.dtype)
            m += np.asarray(1 - self.momentum, g.dtype) * g
            s = m
        everyone = _allgather(ctx, pack_signs(s), stats)
        votes = np.zeros(n, np.int64)
        for r in range(ctx.size):
            votes += unpack_signs(everyone[r], n, np.int64)
        result = (np.sign(votes) * ctx.size).astype(g.dtype)
        sent = unpack_signs(everyone[ctx.rank], n, g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)

    def fresh(self) -> "SignCompressor":
        return SignCompressor(self.momentum)

    def state_dict(self) -> dict:
        """``{"momentum": {key: m}}``: signum's local momentum per key (none for signSGD)."""
        return {"momentum": {k: m.copy() for k, m in self._m.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._m = {k: np.array(m) for k, m in dict(state.get("momentum") or {}).items()}

    def split_state(self, key, sizes) -> list[dict]:
        if not self.momentum:
            return [{"momentum": None} for _ in sizes]  # nothing to move
        return _split(self._m.get(key), sizes, "momentum")

    def join_state(self, key, pieces: list[dict]) -> None:
        joined = None if not self.momentum else _join(pieces, "momentum")
        if joined is None:
            self._m.pop(key, None)
        else:
            self._m[key] = joined


def build(*, algorithm, error_feedback):
    return Compression(SignCompressor(0.0), None, NoneMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="signsgd", order=80, build=build, labels=(("lr", lambda lr: f"lr {lr:g}"),),
    summary="1-bit signs, bit-packed allgather, majority vote"))
