"""What the compressors of ``compression/compressors/`` share: key seeds, argument checks, the
per-key step count of the stateful ones, the sign packing of signSGD and EF-signSGD, the
counted byte allgather of the compressors with their own wire format.

Bytes are counted in ``stats`` as :class:`sparcml.TrafficStats` counts MPI collectives.
"""

from __future__ import annotations

import numpy as np
import zlib

from mpi4py import MPI

from .._collectives.algorithms import ALLGATHER_BASELINE
from .._errors import CompressionError

__all__ = ["key_seed", "pack_signs", "unpack_signs", "pack_ternary", "unpack_ternary"]


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


def pack_signs(x: np.ndarray) -> np.ndarray:
    """``ceil(len(x) / 8)`` bytes: bit i (little order) is 1 where ``x[i] >= 0``."""
    return np.packbits(x >= 0, bitorder="little")


def unpack_signs(buf: np.ndarray, n: int, dtype) -> np.ndarray:
    """The ``n`` signs (+1 / -1, in ``dtype``) that :func:`pack_signs` packed into ``buf``."""
    bits = np.unpackbits(np.asarray(buf, np.uint8), count=n, bitorder="little")
    return bits.astype(dtype) * 2 - 1


def pack_ternary(x: np.ndarray) -> np.ndarray:
    """``2 ceil(len(x) / 8)`` bytes: the bits of ``x > 0``, then those of ``x < 0`` (little
    order), so that a zero travels as 0 (``sign(0) = 0``)."""
    return np.concatenate([np.packbits(x > 0, bitorder="little"),
                           np.packbits(x < 0, bitorder="little")])


def unpack_ternary(buf: np.ndarray, n: int, dtype) -> np.ndarray:
    """The ``n`` values in {-1, 0, +1} (in ``dtype``) that :func:`pack_ternary` packed."""
    buf = np.asarray(buf, np.uint8)
    half = (n + 7) // 8
    pos = np.unpackbits(buf[:half], count=n, bitorder="little")
    neg = np.unpackbits(buf[half:2 * half], count=n, bitorder="little")
    return pos.astype(dtype) - neg.astype(dtype)


def _segments(n: int, shapes=None, chunk: int | None = None) -> np.ndarray:
    """The lengths (> 0) of the consecutive segments of an array of ``n`` values that carry a
    scale each: one per tensor of ``shapes`` (their sizes add up to ``n``; empty tensors have
    none), else one per ``chunk`` values, else one for the whole array (none when n = 0)."""
    if shapes is not None:
        sizes = np.array([int(np.prod(s, dtype=np.int64)) for s in shapes], np.int64)
        return sizes[sizes > 0]
    if n == 0:
        return np.zeros(0, np.int64)
    c = n if chunk is None else max(1, min(int(chunk), n))
    sizes = np.full(n // c, c, np.int64)
    return np.append(sizes, n % c) if n % c else sizes


def _segment_l1_means(x: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``|x|_1 / m`` of each segment (``sizes``, m values each), summed in float64."""
    if sizes.size == 0:
        return np.zeros(0, np.float64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return np.add.reduceat(np.abs(x).astype(np.float64), starts) / sizes


def _count(stats, P: int, sent: float, received: float) -> None:
    if stats is not None:
        stats.calls += 1
        if P > 1:
            stats.bytes_sent += int(sent)
            stats.bytes_received += int(received)
            stats.messages += 1


def _allgather(ctx, buf: np.ndarray, stats) -> np.ndarray:
    """``(P, len(buf))`` uint8: every rank's ``buf`` (counted as TrafficStats counts it)."""
    out = np.empty((ctx.size, buf.size), np.uint8)
    if ctx.size == 1:
        out[0] = buf
    else:
        ctx.waiter.collective(ctx.comm, "Allgather", [buf, MPI.BYTE], [out, MPI.BYTE])
    _count(stats, ctx.size, (ctx.size - 1) * buf.size, (ctx.size - 1) * buf.size)
    if stats is not None:
        stats.algorithm = ALLGATHER_BASELINE
    return out


class _Stateless:
    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self._options().items())
        return f"{type(self).__name__}({opts})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._options() == self._options()

    def __hash__(self) -> int:
        return hash((type(self), tuple(self._options().items())))
