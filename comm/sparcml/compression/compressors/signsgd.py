"""``signsgd``: signSGD with majority vote (Bernstein et al. 2018), no momentum.

:class:`SignCompressor` (also ``signum``'s): every rank sends the signs of its input
(``momentum > 0``: of its local momentum ``m = momentum * m + (1 - momentum) g``: signum) with
``sign(0) = 0``: two bits per value (the bits of ``v > 0`` and of ``v < 0``,
:func:`~sparcml.compression.pack_ternary`), so that an entry whose gradient is exactly 0 (a third
of a small CNN's batch gradient) abstains from the vote instead of voting +1 and drifting by the
learning rate every step (there is no memory to take it back). One ``Allgather`` of ``2 ceil(n /
8)`` bytes per rank (its cost); every rank takes the majority vote ``sign(sum of signs)`` (0 on a
tie). The result is ``P * vote`` so that the optimizer's average over ranks is the vote itself.
No memory. The row ``signsgd`` is signSGD itself: the apps run its SGD without momentum unless
``--momentum`` is given (then it is sign-then-momentum, and the table's row says so); its
recommended learning rate is signum's (the update of an entry is the rate itself).
"""

from __future__ import annotations

import math
import numpy as np

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import (_Stateless, _allgather, pack_signs, pack_ternary, unpack_signs,
                       unpack_ternary)
from .._objects import Compression, Compressor, NoneMemory, Reduced, _join, _split
from .._registry import CompressorSpec, register_compressor


class SignCompressor(_Stateless, Compressor):
    """signSGD (``momentum=0``) or signum (``0 < momentum < 1``) with majority vote.
    ``zero_sign=0`` (default): ``sign(0) = 0``, two bits per value; ``zero_sign=1``: a zero
    votes +1, one bit per value (the code of earlier releases, for their records)."""

    def __init__(self, momentum: float = 0.0, *, zero_sign: int = 0):
        if isinstance(momentum, (bool, np.bool_)) or not isinstance(
                momentum, (int, float, np.integer, np.floating)) or not 0 <= momentum < 1:
            raise CompressionError(f"momentum must be a number in [0, 1), got {momentum!r}")
        if zero_sign not in (0, 1) or isinstance(zero_sign, bool):
            raise CompressionError(f"zero_sign must be 0 or 1, got {zero_sign!r}")
        self.momentum = float(momentum)
        self.zero_sign = int(zero_sign)
        self._m: dict = {}

    def _options(self) -> dict:
        return {"momentum": self.momentum, "zero_sign": self.zero_sign}

    def _pack(self, x: np.ndarray) -> np.ndarray:
        return pack_ternary(x) if self.zero_sign == 0 else pack_signs(x)

    def _unpack(self, buf: np.ndarray, n: int, dtype) -> np.ndarray:
        return unpack_ternary(buf, n, dtype) if self.zero_sign == 0 else \
            unpack_signs(buf, n, dtype)

    def default_memory(self):
        return NoneMemory()

    def compress(self, x: np.ndarray) -> SparseVector:
        return SparseVector.dense(self._unpack(self._pack(x), x.shape[0], x.dtype))

    def num_sent(self, n: int) -> int:
        return n

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """An ``Allgather`` of ``2 ceil(n / 8)`` bytes per rank (the packed signs; ``ceil(n /
        8)`` with ``zero_sign=1``)."""
        return model.allgather(P * (2 - self.zero_sign) * math.ceil(n / 8))

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
        everyone = _allgather(ctx, self._pack(s), stats)
        votes = np.zeros(n, np.int64)
        for r in range(ctx.size):
            votes += self._unpack(everyone[r], n, np.int64)
        result = (np.sign(votes) * ctx.size).astype(g.dtype)
        sent = self._unpack(everyone[ctx.rank], n, g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent), n, 0.0)

    def fresh(self) -> "SignCompressor":
        return SignCompressor(self.momentum, zero_sign=self.zero_sign)

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


#: Bernstein et al. 2018 tune sign methods' rates apart from SGD's (1e-4 for Signum on
#: ImageNet): the update of an entry is the rate itself. 1/30 of the dense rate: issue 35's
#: measurement (LSTM lr 0.01 against dense 0.3), not re-tuned here.
SIGN_LR_SCALE = 1 / 30


SPEC = register_compressor(CompressorSpec(
    name="signsgd", order=80, build=build,
    labels=(("lr", lambda lr: f"lr {lr:g}"),
            ("momentum", lambda m: f"then SGD momentum {m:g}" if m else None)),
    recommended={"lr_scale": SIGN_LR_SCALE, "momentum": 0.0,
                 "source": "Bernstein et al. 2018: signSGD has no momentum; the rate 1/30 of "
                           "the dense one measured in issue 35 (LSTM)"},
    summary="signSGD: signs {-1, 0, +1} (2 bits per value, sign(0) = 0), allgather, majority "
            "vote; no momentum unless --momentum is given (sign-then-momentum)"))
