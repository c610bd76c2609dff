"""Numba kernels of QSGD: encode/decode with bit packing, and its counter-based random stream.

Pure functions on arrays and scalars, ``@njit(cache=True, nogil=True)`` like ``kernels.py``; the
public wrapper (:mod:`sparcml._quant.qsgd`) validates and converts. NumPy references live
in ``tests/reference_kernels.py``.

Over 400 lines on purpose: the encode, decode and streaming-decode loops share their inner
helpers (bit packing, bucket scales), which must stay in one module for Numba to inline them.

QSGD code layout (``bits`` in {2, 4, 8}, ``s = 2**(bits-1) - 1`` levels): value i becomes the
``bits``-bit code ``sign << (bits-1) | level``; codes are packed little-endian inside each byte,
value i at bit offset ``(i * bits) % 8`` of byte ``(i * bits) // 8`` (4, 2 or 1 values a byte).
A level of 0 always has sign 0.

Random rounding uses a counter-based generator, cheap enough to vectorize in 32-bit lanes:
``(k0, kh)`` are the low and high halves of splitmix64(seed) (once per call); element i hashes the
counter word ``w = low32(i) * 0x9E3779B9 + k0`` with lowbias32 (Wellons), xor-ing in the key of its
2**32-block, ``lowbias32(kh ^ (i >> 32) * 0x85EBCA6B)``, after the first multiply, and takes the
top 24 bits as a float32 uniform in [0, 1). Element i of one call always gets the same uniform,
whatever the bucketing; two seeds share a stream only if the 64-bit mixes agree in kh.

Encoding works in chunks of 4096 values: the scale of each bucket (max |v| as an integer max over
the bits of |v|, which also finds NaN/Inf), then levels in the values' dtype (float32 math for
float32 input) into a uint8 scratch with branch-free selects, then 4 or 2 codes packed a byte.
Loops run over array views indexed from 0 so that LLVM vectorizes them (an index that may be
negative costs a wraparound fix-up and a gather).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache
from .._streaming import store_fence, stream_store_u64

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = [
    "counter_uniforms",
    "qsgd_encode",
    "qsgd_decode",
    "qsgd_decode_streaming",
]

_jit = njit(cache=True, nogil=True)
# helpers called once per bucket: inlined by Numba, since a call to another compiled function
# costs about 300 ns (it made the streaming decode 2x slower)
_inline = njit(cache=True, nogil=True, inline="always")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN32 = np.uint32(0x9E3779B9)
_BLOCK32 = np.uint32(0x85EBCA6B)
_LB1 = np.uint32(0x7FEB352D)
_LB2 = np.uint32(0x846CA68B)
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO_M24 = np.float32(2.0 ** -24)
_W32 = np.uint64(32)
_CHUNK = 4096  # values per chunk: a multiple of 8 (chunks start on a byte) dividing 2**32


@_jit
def _lowbias32(x):
    """Chris Wellons' lowbias32 integer hash (a bijection of uint32)."""
    x = np.uint32(x ^ (x >> np.uint32(16)))
    x = np.uint32(x * _LB1)
    x = np.uint32(x ^ (x >> np.uint32(15)))
    x = np.uint32(x * _LB2)
    return np.uint32(x ^ (x >> np.uint32(16)))


@_jit
def _stream_keys(seed):
    """``(k0, kh)``: the low and high 32 bits of splitmix64(seed) (scalar, once per call)."""
    z = seed + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return np.uint32(z & _LOW32), np.uint32(z >> np.uint64(32))


@_jit
def _block_key(kh, block):
    """Key of the elements ``block * 2**32 ..`` (block = i >> 32)."""
    return _lowbias32(np.uint32(kh ^ np.uint32(np.uint32(block) * _BLOCK32)))


@_jit
def _hash_uniform(w, key):
    """Uniform in [0, 1) (float32, a multiple of 2**-24) of counter word ``w = i * golden32 + k0``:
    lowbias32 with the block key xor-ed in after its first multiply, top 24 bits."""
    h = np.uint32(w ^ (w >> np.uint32(16)))
    h = np.uint32(h * _LB1)
    h = np.uint32(h ^ key)
    h = np.uint32(h ^ (h >> np.uint32(15)))
    h = np.uint32(h * _LB2)
    h = np.uint32(h ^ (h >> np.uint32(16)))
    return np.float32(np.int32(h >> np.uint32(8))) * _TWO_M24


@_jit
def _counter_uniforms(seed, n):
    k0, kh = _stream_keys(seed)
    out = np.empty(n, dtype=np.float32)
    for c0 in range(0, n, _CHUNK):
        key = _block_key(kh, c0 >> 32)
        seg = out[c0:min(c0 + _CHUNK, n)]
        w = np.uint32(np.uint32(c0) * _GOLDEN32 + k0)
        for j in range(seg.shape[0]):
            seg[j] = _hash_uniform(w, key)
            w = np.uint32(w + _GOLDEN32)
    return out


def counter_uniforms(seed, n):
    """The uniforms the encoder draws for elements ``0..n-1`` of stream ``seed`` (float32,
    multiples of 2**-24 in [0, 1)); see the module docstring."""
    return _counter_uniforms(np.uint64(seed), n)


@_jit
def _bucket_scale(values, sbits, ubits, absmask, infbits, lo, hi, use_l2, word, word_value):
    """Scale of ``values[lo:hi]`` as float64 (max |v| or L2 norm), or -1 - (first non-finite
    position). The max |v| is taken over the bits (integer order is float order for finite values
    >= 0), which vectorizes and catches NaN/Inf (magnitude bits >= ``infbits``): the max of the
    signed view ``sbits`` is the largest positive value's bits (if >= 0), the max of the unsigned
    view ``ubits`` the sign bit plus the largest negative value's magnitude (if any negative);
    neither needs a mask, which would widen the lanes to 64 bits."""
    sseg = sbits[lo:hi]  # views indexed from 0 (see _qsgd_encode)
    useg = ubits[lo:hi]
    mpos = sseg[0]
    mneg = useg[0]
    for j in range(1, sseg.shape[0]):
        mpos = max(mpos, sseg[j])
        mneg = max(mneg, useg[j])
    # through `word` (unsigned) so that no signed/unsigned mix is typed as float64
    word[0] = mneg & absmask if mneg > absmask else 0
    m = word[0]
    if mpos > 0:
        word[0] = mpos
        m = max(m, word[0])
    if m >= infbits:
        for j in range(useg.shape[0]):
            if (useg[j] & absmask) >= infbits:
                return -1.0 - (lo + j)
    if use_l2:
        vals = values[lo:hi]
        acc = 0.0
        for j in range(vals.shape[0]):
            v = np.float64(vals[j])
            acc += v * v
        return np.sqrt(acc)
    word[0] = m
    return np.float64(word_value[0])


@_jit
def _qsgd_encode(values, sbits, ubits, absmask, infbits, consts, bucket_size, bits, use_l2,
                 seed, scales, codes, word, word_value):
    n = values.shape[0]
    snap, fs, one, big, small = consts[0], consts[1], consts[2], consts[3], consts[4]
    zero = one - one
    fsign = fs + one  # the sign bit, 2**(bits-1), as a value
    per = 8 // bits
    nbuckets = scales.shape[0]
    scratch = np.zeros(_CHUNK + 8, dtype=np.uint8)
    k0, kh = _stream_keys(seed)
    scaled = 0  # buckets whose scale is known
    for c0 in range(0, n, _CHUNK):
        c1 = min(c0 + _CHUNK, n)
        while scaled < nbuckets and scaled * bucket_size < c1:
            lo = scaled * bucket_size
            acc = _bucket_scale(values, sbits, ubits, absmask, infbits, lo,
                                min(lo + bucket_size, n), use_l2, word, word_value)
            if acc < 0:
                return np.int64(-1.0 - acc)
            sc = np.float32(acc)
            if np.float64(sc) < acc:
                sc = np.nextafter(sc, np.float32(np.inf))
            if not np.isfinite(sc):
                return -2 - scaled
            scales[scaled] = sc
            scaled += 1
        if bits == 8:
            dst = codes
            off = 0
        else:
            dst = scratch
            off = c0
        key = _block_key(kh, c0 >> 32)  # a chunk never straddles a 2**32 boundary
        a = c0
        while a < c1:
            b = a // bucket_size
            e = min((b + 1) * bucket_size, c1)
            sc = one * scales[b]
            # tiny scales: work on values * 2**64 (exact) so that s / scale stays finite
            pre = big if sc < small else one
            inv = fs / (sc * pre) if sc > zero else zero
            vs = values[a:e]  # views indexed from 0: no negative-index fix-ups, so LLVM vectorizes
            ds = dst[a - off:e - off]
            w = np.uint32(np.uint32(a) * _GOLDEN32 + k0)
            for j in range(e - a):
                u = _hash_uniform(w, key)
                w = np.uint32(w + _GOLDEN32)
                v = vs[j]
                r = (abs(v) * pre) * inv
                fl = np.floor(r)
                f = r - fl
                t = snap * r
                # snap: within t of a level means that level; else round up with probability f
                f = zero if f <= t else (one if one - f <= t else f)
                level = min(fl + (one if u < f else zero), fs)
                code = level + (fsign if (v < zero) & (level > zero) else zero)
                ds[j] = np.uint8(np.int32(code))
            a = e
        if bits != 8:
            m = c1 - c0
            nbyte = (m * bits + 7) // 8
            for j in range(m, nbyte * per):
                scratch[j] = 0
            out = codes[(c0 * bits) // 8:(c0 * bits) // 8 + nbyte]
            if bits == 4:
                for k in range(nbyte):
                    out[k] = np.uint8(scratch[2 * k] | (scratch[2 * k + 1] << 4))
            else:
                for k in range(nbyte):
                    out[k] = np.uint8(scratch[4 * k] | (scratch[4 * k + 1] << 2)
                                      | (scratch[4 * k + 2] << 4) | (scratch[4 * k + 3] << 6))
    return -1


def qsgd_encode(values, bucket_size, bits, use_l2, seed, snap, scales, codes):
    """Quantize ``values`` (float32/float64, length n) into ``scales`` and packed ``codes``.

    Parameters
    ----------
    bucket_size, bits : int
        Values per bucket; bits per code (2, 4 or 8).
    use_l2 : bool
        Scale = L2 norm of the bucket (else max |v|); rounded *up* to float32 so |v| <= scale.
    seed : uint64
        Stream of the random rounding (see :func:`counter_uniforms`).
    snap : float
        Relative tolerance: a value whose level ``r = |v| * s / scale`` lies within ``snap * r``
        of an integer takes that level exactly (no random rounding), so decoded values re-encode
        to themselves. Use about 2**-22 for float32 input, 2**-49 for float64.
    scales : float32 array of ``ceil(n / bucket_size)`` (output)
    codes : uint8 array of ``ceil(n * bits / 8)`` (output, every byte written)

    Level arithmetic runs in the dtype of ``values``: ``r = (|v| * pre) * (s / (scale * pre))``
    (``pre = 2**64`` for scales below 2**-64, else 1: exact), ``f = r - floor(r)``; f is snapped
    to 0 or 1 within ``snap * r``, and the level is ``floor(r) + (u < f)`` with u the element's
    24-bit uniform, so ``E[level] = r`` up to float rounding (and 2**-24).

    Returns -1 on success; else the position of the first non-finite value, or ``-2 - b`` when
    bucket b's scale exceeds the float32 range.
    """
    dt = values.dtype
    itype, stype = (np.uint32, np.int32) if dt.itemsize == 4 else (np.uint64, np.int64)
    absmask = itype((1 << (8 * dt.itemsize - 1)) - 1)
    infbits = np.array([np.inf], dt).view(itype)[0]
    consts = np.array([snap, (1 << (bits - 1)) - 1, 1.0, 2.0**64, 2.0**-64], dt)
    word = np.zeros(1, itype)
    return _qsgd_encode(values, values.view(stype), values.view(itype), absmask, infbits, consts,
                        bucket_size, bits, bool(use_l2), np.uint64(seed), scales, codes, word,
                        word.view(dt))


@_inline
def _level_table(scale, s, table):
    """``table[c]`` = the value of code c: ``sign * scale * level / s`` (float64, then rounded)."""
    half = table.shape[0] >> 1
    sc = np.float64(scale)
    for level in range(half):
        table[level] = sc * level / s
    for level in range(half):
        table[level + half] = -table[level]


@_inline
def _decode_tail(codes, table, bits, lo, hi, out):
    """Values lo..hi-1 one at a time, with ordinary stores (a bucket's ends that do not fill a
    byte, or a word for the streaming kernels)."""
    mask = table.shape[0] - 1
    for i in range(lo, hi):
        pos = i * bits
        out[i] = table[(codes[pos >> 3] >> (pos & 7)) & mask]


@_jit
def qsgd_decode(scales, codes, n, bucket_size, bits, out):
    """Decode n values from ``scales`` and packed ``codes`` into ``out`` (float32/float64).

    Value = sign * scale * level / s, computed in float64 (``scale * s / s == scale`` exactly)
    then rounded to ``out``'s dtype; one table of ``2**bits`` values per bucket, whole bytes
    decoded at once where a bucket covers them.
    """
    s = (1 << (bits - 1)) - 1
    table = np.empty(1 << bits, dtype=out.dtype)
    per = 8 // bits  # values a byte
    for b in range(scales.shape[0]):
        _level_table(scales[b], s, table)
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        i = min(hi, -(-lo // per) * per)  # to a byte boundary
        _decode_tail(codes, table, bits, lo, i, out)
        # whole bytes, over 0-based views (see _qsgd_encode): 1, 2 or 4 values a byte
        nfull = (hi - i) // per
        ob = out[i:i + nfull * per]
        cb = codes[(i * bits) >> 3:((i * bits) >> 3) + nfull]
        if bits == 8:
            for k in range(nfull):
                ob[k] = table[cb[k]]
        elif bits == 4:
            for k in range(nfull):
                c = cb[k]
                ob[2 * k] = table[c & 15]
                ob[2 * k + 1] = table[c >> 4]
        else:
            for k in range(nfull):
                c = cb[k]
                ob[4 * k] = table[c & 3]
                ob[4 * k + 1] = table[(c >> 2) & 3]
                ob[4 * k + 2] = table[(c >> 4) & 3]
                ob[4 * k + 3] = table[c >> 6]
        _decode_tail(codes, table, bits, i + nfull * per, hi, out)
    return out


@_inline
def _word_table(scale, s, table, words):
    """:func:`_level_table`, and each value's float32 bits as a uint64 in ``words``."""
    _level_table(scale, s, table)
    as32 = table.view(np.uint32)
    for c in range(words.shape[0]):
        words[c] = np.uint64(as32[c])


# One kernel per width. Each: buckets of float32 values, ``lo`` rounded up to a whole byte (and, for 8 bits,
# to an even value), whole words stored non-temporally, the rest by :func:`_decode_tail`.

@_jit
def _decode_streaming_4(scales, codes, n, bucket_size, out):
    table = np.empty(16, dtype=out.dtype)
    words = np.empty(16, dtype=np.uint64)
    pairs = np.empty(256, dtype=np.uint64)  # each byte's two values as one word
    for b in range(scales.shape[0]):
        _word_table(scales[b], 7, table, words)
        for c in range(256):
            pairs[c] = words[c & 15] | (words[c >> 4] << _W32)
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        i = lo + (lo & 1)
        _decode_tail(codes, table, 4, lo, i, out)
        nfull = (hi - i) >> 1
        cb = codes[i >> 1:(i >> 1) + nfull]
        for k in range(nfull):
            stream_store_u64(out, i + 2 * k, pairs[cb[k]])
        _decode_tail(codes, table, 4, i + 2 * nfull, hi, out)
    store_fence()
    return out


@_jit
def _decode_streaming_2(scales, codes, n, bucket_size, out):
    table = np.empty(4, dtype=out.dtype)
    words = np.empty(4, dtype=np.uint64)
    pairs = np.empty(16, dtype=np.uint64)  # each half byte's two values as one word
    for b in range(scales.shape[0]):
        _word_table(scales[b], 1, table, words)
        for c in range(16):
            pairs[c] = words[c & 3] | (words[c >> 2] << _W32)
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        i = min(hi, (lo + 3) & ~3)
        _decode_tail(codes, table, 2, lo, i, out)
        nfull = (hi - i) >> 2
        cb = codes[i >> 2:(i >> 2) + nfull]
        for k in range(nfull):
            c = cb[k]
            stream_store_u64(out, i + 4 * k, pairs[c & 15])
            stream_store_u64(out, i + 4 * k + 2, pairs[c >> 4])
        _decode_tail(codes, table, 2, i + 4 * nfull, hi, out)
    store_fence()
    return out


@_jit
def _decode_streaming_8(scales, codes, n, bucket_size, out):
    table = np.empty(256, dtype=out.dtype)
    words = np.empty(256, dtype=np.uint64)
    for b in range(scales.shape[0]):
        _word_table(scales[b], 127, table, words)
        lo = b * bucket_size
        hi = min(lo + bucket_size, n)
        i = lo + (lo & 1)
        _decode_tail(codes, table, 8, lo, min(i, hi), out)
        npairs = max(0, hi - i) >> 1
        cb = codes[i:i + 2 * npairs]
        for k in range(npairs):
            stream_store_u64(out, i + 2 * k, words[cb[2 * k]] | (words[cb[2 * k + 1]] << _W32))
        _decode_tail(codes, table, 8, max(lo, i + 2 * npairs), hi, out)
    store_fence()
    return out


def qsgd_decode_streaming(scales, codes, n, bucket_size, bits, out):
    """:func:`qsgd_decode` into a float32 ``out`` far larger than the caches: the same values,
    written two at a time (one 8-byte word, low address first: little-endian machines only) with
    non-temporal stores, then a fence. ``out``: C-contiguous, 4-byte aligned float32.
    """
    kernel = {2: _decode_streaming_2, 4: _decode_streaming_4, 8: _decode_streaming_8}[bits]
    return kernel(scales, codes, n, bucket_size, out)
