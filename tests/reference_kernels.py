"""Slow, obvious NumPy references of the Numba kernels in ``sparcml._kernels``."""

import numpy as np


def merge_add(a_idx, a_val, b_idx, b_val):
    idx = np.union1d(a_idx, b_idx).astype(a_idx.dtype)
    val = np.zeros(idx.size, dtype=a_val.dtype)
    val[np.searchsorted(idx, a_idx)] += a_val
    val[np.searchsorted(idx, b_idx)] += b_val
    return idx, val


def merge_many(offsets, idx, val):
    streams = [(idx[offsets[s]:offsets[s + 1]], val[offsets[s]:offsets[s + 1]])
               for s in range(len(offsets) - 1)]
    out_idx = np.unique(idx).astype(idx.dtype)
    out_val = np.zeros(out_idx.size, dtype=val.dtype)
    seen = np.zeros(out_idx.size, dtype=bool)
    for s_idx, s_val in streams:  # fold in stream order, as the kernel promises
        pos = np.searchsorted(out_idx, s_idx)
        out_val[pos] = np.where(seen[pos], out_val[pos] + s_val, s_val)
        seen[pos] = True
    return out_idx, out_val


def scatter_add(dense, idx, val, offset):
    np.add.at(dense, idx - offset, val)


def dense_to_sparse(x, offset, index_dtype):
    nz = np.flatnonzero(x)
    return (nz + offset).astype(index_dtype), x[nz]


# -- compressors (sparcml._quant.kernels) -------------------------------------------------------

def _lowbias32(x):
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def counter_uniforms(seed, n):
    """(k0, kh) = low/high 32 bits of splitmix64(seed); element i hashes the counter word
    ``w = low32(i) * 0x9E3779B9 + k0`` with lowbias32, xor-ing in the key of its 2**32-block
    ``lowbias32(kh ^ (i >> 32) * 0x85EBCA6B)`` after the first multiply; top 24 bits / 2**24."""
    m64 = (1 << 64) - 1
    z = (int(seed) + 0x9E3779B97F4A7C15) & m64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
    z ^= z >> 31
    k0, kh = np.uint32(z & 0xFFFFFFFF), np.uint32(z >> 32)
    i = np.arange(n, dtype=np.uint64)
    key = _lowbias32(kh ^ ((i >> np.uint64(32)).astype(np.uint32) * np.uint32(0x85EBCA6B)))
    w = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32) * np.uint32(0x9E3779B9) + k0
    h = w ^ (w >> np.uint32(16))
    h = (h * np.uint32(0x7FEB352D)) ^ key
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    h = h ^ (h >> np.uint32(16))
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


def pack_codes(codes, bits):
    """Codes (< 2**bits each) packed little-endian within bytes, 8 // bits per byte."""
    per = 8 // bits
    padded = np.zeros(-(-codes.size // per) * per, np.uint8)
    padded[:codes.size] = codes
    packed = np.zeros(padded.size // per, np.uint8)
    for t in range(per):
        packed |= (padded[t::per] << (bits * t)).astype(np.uint8)
    return packed


def unpack_codes(packed, n, bits):
    per = 8 // bits
    out = np.empty(packed.size * per, np.uint8)
    for t in range(per):
        out[t::per] = (packed >> (bits * t)) & ((1 << bits) - 1)
    return out[:n]


def qsgd_encode(values, bucket_size, bits, use_l2, seed, snap):
    """``(scales float32, packed codes uint8)`` with the kernel's random stream and snapping; the
    level arithmetic in the dtype of ``values`` (float32 or float64), as the kernel does it."""
    dt = values.dtype.type
    s = 2 ** (bits - 1) - 1
    one, zero = dt(1), dt(0)
    u = counter_uniforms(seed, values.size)
    nb = -(-values.size // bucket_size)
    scales = np.zeros(nb, np.float32)
    codes = np.zeros(values.size, np.uint8)
    for b in range(nb):
        sl = slice(b * bucket_size, (b + 1) * bucket_size)
        a = np.abs(values[sl])
        a64 = a.astype(np.float64)
        acc = np.sqrt(np.cumsum(a64 * a64)[-1]) if use_l2 else a64.max()  # cumsum: in order
        sc = np.float32(acc)
        if sc < acc:
            sc = np.nextafter(sc, np.float32(np.inf))
        scales[b] = sc
        scd = dt(sc)
        pre = dt(2.0**64) if scd < dt(2.0**-64) else one  # exact rescaling of tiny buckets
        inv = dt(s) / (scd * pre) if sc > 0 else zero
        r = (a * pre) * inv
        fl = np.floor(r)
        f = r - fl
        t = dt(snap) * r
        f = np.where(f <= t, zero, np.where(one - f <= t, one, f))
        level = np.minimum(fl + (u[sl] < f), s).astype(np.uint8)
        sign = ((values[sl] < 0) & (level > 0)).astype(np.uint8) << (bits - 1)
        codes[sl] = level | sign
    return scales, pack_codes(codes, bits)


def qsgd_decode(scales, packed, n, bucket_size, bits, dtype):
    s = 2 ** (bits - 1) - 1
    codes = unpack_codes(packed, n, bits)
    level = (codes & s).astype(np.float64)
    scale = np.repeat(scales.astype(np.float64), bucket_size)[:n]
    v = (scale * level / s).astype(dtype)
    return np.where(codes >> (bits - 1) == 1, -v, v)


def topk_select(x, k):
    """Increasing positions of the k largest |x|, ties to the lower index (stable sort)."""
    return np.sort(np.argsort(-np.abs(x), kind="stable")[:k])


def topk_select_buckets(x, bucket_size, k_full, k_last):
    out = []
    for lo in range(0, x.size, bucket_size):
        seg = x[lo:lo + bucket_size]
        out.append(topk_select(seg, k_full if seg.size == bucket_size else k_last) + lo)
    return np.concatenate(out) if out else np.empty(0, np.int64)
