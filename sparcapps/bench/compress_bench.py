"""Compression throughput: QSGD encode/decode at 2/4/8 bits, TopK at 1% of 5M values.

Run ``sparc-bench-compress [--N N ...] [--density D ...] [--reps R]``. Prints medians of CPU time
(``time.process_time``: on a shared machine, what a rank pays) over interleaved repetitions (so
machine noise hits each variant alike); ratios are the figures to trust on a shared machine. The
QSGD rows also time the streaming decode (``decode(..., streaming=True)``: non-temporal stores,
for outputs that are reused) and the previous kernels (scalar splitmix64 stream, float64
levels, a value at a time; kept in ``_compress_kernels`` as ``_before_encode``/``_before_decode``) on the same
data: the M values/s columns read "before -> now".
The TopK rows compare the selection kernel of :func:`sparcml.select_topk` (radix select, ties to the
lower index, sorted output) with ``np.argpartition`` on ``|x|`` plus a sort of the kept positions
(ties in no defined order), and time the whole ``TopK.compress``.
"""

from __future__ import annotations

import time

import numpy as np

# select_topk: the selection behind TopK; the bench times it alone, without TopK's gather
from sparcml import QSGD, TopK, select_topk
from sparcapps.cli_args import (add_deprecated_alias, add_list_argument, density_help, fraction,
                                make_parser, positive_int)

__all__ = ["bench_qsgd", "bench_topk", "main"]


def _median_time(fns, reps):
    """Median CPU seconds of each callable, calls interleaved round-robin after one warm-up."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(times, fns):
            t0 = time.process_time()
            fn()
            t.append(time.process_time() - t0)
    return [float(np.median(t)) for t in times]


def bench_qsgd(n: int = 5_000_000, reps: int = 7, dtype=np.float32, seed: int = 0) -> list:
    """Per bit width: encode and decode medians (s), M values/s, bytes and ratio to ``dtype``;
    ``decode_streaming_s``: the decode with ``streaming=True`` (into the same, reused, output);
    ``before_*``: the same for the previous kernels."""
    from ._compress_kernels import _BEFORE_SNAP, _before_decode, _before_encode  # Numba: not at --help

    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    rows = []
    for bits in (2, 4, 8):
        q = QSGD(bits=bits, seed=seed)
        buf = q.encode(x)
        out = np.empty(n, dtype)
        nb = q.num_buckets(n)
        scales, codes = np.empty(nb, np.float32), np.empty(buf.size - 4 * nb, np.uint8)
        snap = _BEFORE_SNAP[np.dtype(dtype)]
        enc, dec, stream, old_enc, old_dec = _median_time([
            lambda: q.encode(x, out=buf), lambda: q.decode(buf, n, out=out),
            lambda: q.decode(buf, n, out=out, streaming=True),
            lambda: _before_encode(x, q.bucket_size, bits, np.uint64(seed), snap, scales, codes),
            lambda: _before_decode(scales, codes, n, q.bucket_size, bits, out)], reps)
        rows.append({"bits": bits, "n": n, "encode_s": enc, "decode_s": dec,
                     "decode_streaming_s": stream,
                     "encode_mvals_s": n / enc / 1e6, "decode_mvals_s": n / dec / 1e6,
                     "before_encode_mvals_s": n / old_enc / 1e6,
                     "before_decode_mvals_s": n / old_dec / 1e6,
                     "bytes": buf.nbytes, "ratio": x.nbytes / buf.nbytes})
    return rows


def bench_topk(n: int = 5_000_000, density: float = 0.01, reps: int = 7, dtype=np.float32,
               seed: int = 0) -> dict:
    """Selection of ``density * n`` entries: kernel vs argpartition, and whole compress calls."""
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    k = TopK(density=density).num_kept(n)

    def argpartition():
        idx = np.argpartition(np.abs(x), n - k)[n - k:]
        idx.sort()
        return idx

    if not np.array_equal(select_topk(x, k), argpartition()):  # no ties in Gaussian data
        raise AssertionError("kernel and argpartition selections differ")
    ef, bucket = TopK(density=density), TopK(density=density, bucket_size=512)
    plain, q4 = TopK(density=density, error_feedback=False), QSGD(4, seed=seed)
    t = _median_time([lambda: select_topk(x, k), argpartition, lambda: select_topk(x, 5, 512, 1),
                      lambda: plain.compress(x), lambda: ef.compress(x),
                      lambda: ef.compress(x, quantizer=q4), lambda: bucket.compress(x)], reps)
    return {"n": n, "k": k, "kernel_s": t[0], "argpartition_s": t[1], "bucket512_select_s": t[2],
            "compress_no_ef_s": t[3], "compress_ef_s": t[4], "compress_ef_qsgd4_s": t[5],
            "compress_bucket512_ef_s": t[6], "speedup": t[1] / t[0]}


def main(argv=None) -> None:
    parser = make_parser("sparc-bench-compress", __doc__)
    n_flag = add_list_argument(parser, "--N", item_type=positive_int, default=[5_000_000],
                               metavar="N", help="values per vector (vector dimensions)")
    add_deprecated_alias(parser, "--n", n_flag)
    parser.add_argument("--reps", type=positive_int, default=7,
                        help="timed repetitions per case")
    add_list_argument(parser, "--density", item_type=fraction, default=[0.01], metavar="D",
                      help=density_help("what TopK keeps, one case per value"))
    args = parser.parse_args(argv)
    for n in args.N:
        _print_qsgd(n, args.reps)
        for density in args.density:
            _print_topk(n, density, args.reps)


def _print_qsgd(n: int, reps: int) -> None:
    print(f"QSGD, {n} float32 values, bucket 1024, max norm (median of {reps}, CPU time)")
    print(f"{'bits/value':>10} {'encode ms':>10} {'encode M values/s':>18} {'decode ms':>10} "
          f"{'decode M values/s':>18} {'streaming ms':>12} {'bytes':>10} {'smaller (x)':>11}")
    print(f"{'':>10} {'':>10} {'(before -> now)':>18} {'':>10} {'(before -> now)':>18}")
    for r in bench_qsgd(n, reps):
        enc = f"{r['before_encode_mvals_s']:.0f} -> {r['encode_mvals_s']:.0f}"
        dec = f"{r['before_decode_mvals_s']:.0f} -> {r['decode_mvals_s']:.0f}"
        print(f"{r['bits']:>10} {r['encode_s'] * 1e3:>10.1f} {enc:>18} "
              f"{r['decode_s'] * 1e3:>10.1f} {dec:>18} {r['decode_streaming_s'] * 1e3:>12.1f} "
              f"{r['bytes']:>10} {r['ratio']:>11.2f}")
    print("before -> now: M values/s of the previous kernels (a scalar splitmix64 stream, float64 "
          "levels, a value at a time) -> sparcml.QSGD's, timed on the same data")


def _print_topk(n: int, density: float, reps: int) -> None:
    t = bench_topk(n, density, reps)
    print(f"\nTopK, {t['n']} float32 values, density {density:g}, k = {t['k']} (median of "
          f"{reps}, CPU time), ms")
    print(f"  select, kernel (radix, sorted, ties to lower index) {t['kernel_s'] * 1e3:8.1f}")
    print(f"  select, np.argpartition(|x|) + sort                 {t['argpartition_s'] * 1e3:8.1f}"
          f"   kernel {t['speedup']:.1f}x faster")
    print(f"  select, per bucket of 512 (5 each)                  "
          f"{t['bucket512_select_s'] * 1e3:8.1f}")
    print(f"  compress, no error feedback                         "
          f"{t['compress_no_ef_s'] * 1e3:8.1f}")
    print(f"  compress, error feedback                            {t['compress_ef_s'] * 1e3:8.1f}")
    print(f"  compress, error feedback + QSGD 4-bit               "
          f"{t['compress_ef_qsgd4_s'] * 1e3:8.1f}")
    print(f"  compress, per bucket of 512, error feedback         "
          f"{t['compress_bucket512_ef_s'] * 1e3:8.1f}")
    print()


if __name__ == "__main__":
    main()
