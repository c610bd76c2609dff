"""QSGD: unbiased stochastic quantization of float values to 2, 4 or 8 bits, tightly packed.

Values are cut into buckets of ``bucket_size``; each bucket gets a float32 scale (its max |v|, or
its L2 norm) and each value a sign and a level in ``[0, s]``, ``s = 2**(bits-1) - 1``:

1. ``r = |v| / scale * s`` (a real number in ``[0, s]``);
2. ``level = floor(r + u)`` with ``u`` uniform in ``[0, 1)``, so ``E[level] = r`` and the decoded
   value ``sign * scale * level / s`` is unbiased: ``E[decode(encode(v))] = v``;
3. the code ``sign << (bits-1) | level`` takes ``bits`` bits (4, 2 or 1 values a byte).

Variance: value i varies by ``(scale/s)**2 * f * (1 - f)``, ``f = frac(r)``, at most
``scale**2 / (4 s**2)``; with the L2 norm, a bucket of d values has
``E||Q(v) - v||**2 <= min(d / s**2, sqrt(d) / s) * ||v||**2`` (Alistarh et al., Lemma 3.1).

Encoding layout (little-endian): ``ceil(n / bucket_size)`` float32 scales, then
``ceil(n * bits / 8)`` bytes of codes (value i at bit ``(i * bits) % 8`` of byte
``(i * bits) // 8``). See :mod:`sparcml._quant.kernels` for the random stream.

Example
-------
>>> q = QSGD(bits=4, seed=0)
>>> buf = q.encode(np.ones(3000, np.float32))
>>> buf.nbytes == q.encoded_nbytes(3000) == 3 * 4 + 1500
True
>>> q.decode(buf, 3000)[:2]
array([1., 1.], dtype=float32)
"""

from __future__ import annotations

import sys

import numpy as np

from .._errors import CompressionError, QuantizationError, UnsupportedDtypeError
from .._lazy import lazy_module
quant_kernels = lazy_module("sparcml._quant.kernels")

__all__ = ["QSGD"]

_BITS = (2, 4, 8)
_NORMS = ("max", "l2")
_MAX_BUCKET = 2**28 - 1  # keeps `code` below 2**31
_VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# relative distance of r from an integer below which r *is* that level (float rounding of a
# decoded value): decoded values re-encode to themselves; see quant_kernels.qsgd_encode
_SNAP = {np.dtype(np.float32): 2.0**-22, np.dtype(np.float64): 2.0**-49}


# decode(streaming=True) writes around the caches (sparcml._streaming) from this output size on:
# a decode that large evicts what the caches hold anyway, and skipping the read-for-ownership
# halves its memory traffic. Below it the result is likely still cached when it is used.
STREAMING_DECODE_BYTES = 4 << 20
_LITTLE_ENDIAN = sys.byteorder == "little"


def _check_int(name, value, lo, hi=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CompressionError(f"{name} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise CompressionError(f"{name} must be {bound}, got {value}")
    return int(value)


class QSGD:
    """Stochastic quantizer with a float32 scale per bucket and ``bits``-bit codes.

    Parameters
    ----------
    bits : {2, 4, 8}
        Bits per value: one sign bit and ``bits - 1`` level bits (``s = 1, 7, 127`` levels).
    bucket_size : int, default 1024
        Values sharing one scale (1 to 2**28 - 1).
    norm : {"max", "l2"}
        The bucket scale: max |v| (lower variance) or the L2 norm (QSGD paper).
    seed : int, numpy.random.SeedSequence or None
        Seeds the ``numpy.random.Generator`` that draws one 64-bit stream seed per
        :meth:`encode`; the same seed on every rank gives the same sequence of roundings.
        ``None``: fresh entropy.

    The instance holds only its configuration and that generator; :attr:`code` identifies the
    configuration (for agreement checks across ranks) and :meth:`from_code` rebuilds it.
    """

    def __init__(self, bits: int = 4, bucket_size: int = 1024, norm: str = "max", seed=None):
        if isinstance(bits, (bool, np.bool_)) or bits not in _BITS:
            raise CompressionError(f"bits must be 2, 4 or 8, got {bits!r}")
        if norm not in _NORMS:
            raise CompressionError(f"norm must be 'max' or 'l2', got {norm!r}")
        self.bits = int(bits)
        self.bucket_size = _check_int("bucket_size", bucket_size, 1, _MAX_BUCKET)
        self.norm = norm
        self.seed = seed
        try:
            self._rng = np.random.default_rng(seed)
        except (TypeError, ValueError) as exc:
            raise CompressionError(
                f"seed must be None, a non-negative int or a SeedSequence, got {seed!r}: {exc}"
            ) from None

    # -- configuration ------------------------------------------------------------------------

    @property
    def levels(self) -> int:
        """``s = 2**(bits-1) - 1``: the largest level."""
        return (1 << (self.bits - 1)) - 1

    @property
    def code(self) -> int:
        """``bucket_size << 3 | (norm == "l2") << 2 | log2(bits) - 1``: a small int (< 2**31)
        naming (bits, bucket_size, norm); equal codes mean identical encodings.
        """
        return (self.bucket_size << 3) | ((self.norm == "l2") << 2) | (_BITS.index(self.bits))

    @classmethod
    def from_code(cls, code: int, seed=None) -> "QSGD":
        """The quantizer whose :attr:`code` is ``code``."""
        code = _check_int("code", code, 0)
        if code & 3 == 3 or code >> 3 == 0:
            raise CompressionError(f"{code} is not a QSGD code")
        return cls(bits=_BITS[code & 3], bucket_size=code >> 3,
                   norm="l2" if code & 4 else "max", seed=seed)

    def __repr__(self) -> str:
        return (f"QSGD(bits={self.bits}, bucket_size={self.bucket_size}, norm={self.norm!r}, "
                f"seed={self.seed!r})")

    def state_dict(self) -> dict:
        """Configuration and generator state (for checkpoints): a dict of plain Python values."""
        return {"code": self.code, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restore the generator state saved by :meth:`state_dict` of the same configuration."""
        if state.get("code") != self.code:
            raise CompressionError(
                f"state is of QSGD code {state.get('code')!r}, this quantizer has {self.code} "
                f"({self!r}); build the quantizer with the saved configuration")
        self._rng.bit_generator.state = state["rng"]

    # -- sizes --------------------------------------------------------------------------------

    def num_buckets(self, n: int) -> int:
        """``ceil(n / bucket_size)``: the number of scales in an encoding of n values."""
        return -(-_check_int("n", n, 0) // self.bucket_size)

    def encoded_nbytes(self, n: int) -> int:
        """Exact byte size of an encoding of n values: 4 per scale + ``ceil(n * bits / 8)``."""
        return 4 * self.num_buckets(n) + (n * self.bits + 7) // 8

    # -- encode / decode ----------------------------------------------------------------------

    def encode(self, values, out=None, *, seed=None) -> np.ndarray:
        """Quantize a 1-d float32/float64 array of n values into ``encoded_nbytes(n)`` bytes.

        ``out``: a C-contiguous uint8 array of exactly that size to write into (returned).
        ``seed``: a 64-bit stream seed for this call instead of one drawn from the generator
        (e.g. derived from a step number on every rank). Raises :class:`QuantizationError` on
        NaN, Inf, or a bucket whose scale overflows float32.
        """
        values = self._check_values(values)
        n = values.shape[0]
        nbytes = self.encoded_nbytes(n)
        if out is None:
            out = np.empty(nbytes, dtype=np.uint8)
        elif not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.ndim == 1
                  and out.flags.c_contiguous and out.shape[0] == nbytes):
            raise QuantizationError(
                f"out must be a contiguous 1-d uint8 array of {nbytes} bytes for {n} values, got "
                f"{getattr(out, 'dtype', type(out).__name__)} of shape {getattr(out, 'shape', '?')}")
        stream = self._stream_seed(seed)
        nb = self.num_buckets(n)
        scales = np.empty(nb, dtype=np.float32)
        rc = quant_kernels.qsgd_encode(values, self.bucket_size, self.bits, self.norm == "l2",
                                       stream, _SNAP[values.dtype], scales, out[4 * nb:])
        if rc >= 0:
            raise QuantizationError(
                f"cannot quantize non-finite value {values[rc]} at position {rc}; check the "
                f"gradient for overflow (NaN/Inf) before compressing")
        if rc <= -2:
            b = -2 - rc
            raise QuantizationError(
                f"bucket {b} (values {b * self.bucket_size}..) has a scale beyond the float32 "
                f"range; QSGD scales are float32, rescale the values first")
        out[:4 * nb] = scales.astype("<f4", copy=False).view(np.uint8)
        return out

    def decode(self, buf, n: int, dtype=np.float32, out=None, *,
               streaming: bool = False) -> np.ndarray:
        """Decode n values from an encoding (any 1-d bytes-like of ``encoded_nbytes(n)`` bytes).

        Returns a new array of ``dtype`` (float32 or float64), or fills and returns ``out``
        (a C-contiguous 1-d float32/float64 array of length n; ``dtype`` is then ignored).
        ``streaming=True`` writes a large float32 ``out`` around the caches: about 2x faster
        into a buffer that is reused (already in memory), slower into freshly allocated memory,
        whose first touch is cheaper with ordinary stores. The values are the same either way.
        """
        nbytes = self.encoded_nbytes(n)
        buf = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
        if buf.dtype != np.uint8 or buf.ndim != 1 or buf.shape[0] != nbytes:
            raise QuantizationError(
                f"expected {nbytes} bytes (uint8, 1-d) for {n} values with {self!r}, got "
                f"{buf.dtype} of shape {buf.shape}")
        if out is None:
            dtype = np.dtype(dtype)
            if dtype not in _VALUE_DTYPES:
                raise UnsupportedDtypeError(f"dtype must be float32 or float64, got {dtype}")
            out = np.empty(n, dtype=dtype)
        elif not (isinstance(out, np.ndarray) and out.dtype in _VALUE_DTYPES and out.ndim == 1
                  and out.flags.c_contiguous and out.flags.writeable and out.shape[0] == n):
            raise QuantizationError(
                f"out must be a writeable contiguous 1-d float32/float64 array of length {n}, got "
                f"{getattr(out, 'dtype', type(out).__name__)} of shape {getattr(out, 'shape', '?')}")
        nb = self.num_buckets(n)
        scales = buf[:4 * nb].view("<f4")
        if not scales.flags.aligned or scales.dtype != np.float32:
            scales = scales.astype(np.float32)
        if not np.all(np.isfinite(scales) & (scales >= 0)):
            bad = scales[~(np.isfinite(scales) & (scales >= 0))][:3]
            raise QuantizationError(
                f"corrupt encoding: scales must be finite and >= 0, got {bad} (wrong quantizer "
                f"configuration or a truncated message?)")
        codes = buf[4 * nb:]
        if not codes.flags.c_contiguous:
            codes = np.ascontiguousarray(codes)
        kernel = quant_kernels.qsgd_decode
        if streaming and out.nbytes >= STREAMING_DECODE_BYTES and out.dtype == np.float32 \
                and out.flags.aligned and _LITTLE_ENDIAN:
            kernel = quant_kernels.qsgd_decode_streaming
        return kernel(scales, codes, n, self.bucket_size, self.bits, out)

    def quantize(self, values, *, seed=None) -> np.ndarray:
        """``decode(encode(values))`` in the dtype of ``values``: the values a receiver sees."""
        values = self._check_values(values)
        return self.decode(self.encode(values, seed=seed), values.shape[0], values.dtype)

    # -- helpers ------------------------------------------------------------------------------

    def _stream_seed(self, seed) -> np.uint64:
        if seed is None:
            return np.uint64(self._rng.integers(0, 2**64, dtype=np.uint64))
        return np.uint64(_check_int("seed", seed, 0, 2**64 - 1))

    @staticmethod
    def _check_values(values) -> np.ndarray:
        values = np.asarray(values)
        if values.dtype not in _VALUE_DTYPES:
            raise UnsupportedDtypeError(
                f"QSGD quantizes float32 or float64 values, got {values.dtype}; convert first, "
                f"e.g. values.astype(np.float32)")
        if values.ndim != 1:
            raise CompressionError(f"QSGD expects a 1-d array, got shape {values.shape}")
        return np.ascontiguousarray(values)
