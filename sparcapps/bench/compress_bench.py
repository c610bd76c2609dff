"""Compression throughput: QSGD encode/decode at 2/4/8 bits, TopK at 1% of 5M values.

Run ``python -m sparcapps.bench.compress_bench [--n N] [--reps R]``. Prints medians over
interleaved repetitions (so machine noise hits each variant alike); ratios are the figures to
trust on a shared machine. The TopK rows compare the selection kernel of :mod:`sparcml.topk`
(radix select, ties to the lower index, sorted output) with ``np.argpartition`` on ``|x|`` plus a
sort of the kept positions (ties in no defined order), and time the whole ``TopK.compress``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sparcml.qsgd import QSGD
from sparcml.topk import TopK, select_topk

__all__ = ["bench_qsgd", "bench_topk", "main"]


def _median_time(fns, reps):
    """Median seconds of each callable, calls interleaved round-robin after one warm-up call."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(times, fns):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def bench_qsgd(n: int = 5_000_000, reps: int = 7, dtype=np.float32, seed: int = 0) -> list:
    """Per bit width: encode and decode medians (s), M values/s, bytes and ratio to ``dtype``."""
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    rows = []
    for bits in (2, 4, 8):
        q = QSGD(bits=bits, seed=seed)
        buf = q.encode(x)
        out = np.empty(n, dtype)
        enc, dec = _median_time([lambda: q.encode(x, out=buf), lambda: q.decode(buf, n, out=out)],
                                reps)
        rows.append({"bits": bits, "n": n, "encode_s": enc, "decode_s": dec,
                     "encode_mvals_s": n / enc / 1e6, "decode_mvals_s": n / dec / 1e6,
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
    parser = argparse.ArgumentParser(prog="python -m sparcapps.bench.compress_bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000, help="values (default 5M)")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (default 7)")
    parser.add_argument("--density", type=float, default=0.01, help="TopK density (0.01)")
    args = parser.parse_args(argv)
    print(f"QSGD, {args.n} float32 values, bucket 1024, max norm (median of {args.reps})")
    print(f"{'bits':>4} {'encode ms':>10} {'M val/s':>8} {'decode ms':>10} {'M val/s':>8} "
          f"{'bytes':>10} {'x smaller':>9}")
    for r in bench_qsgd(args.n, args.reps):
        print(f"{r['bits']:>4} {r['encode_s'] * 1e3:>10.1f} {r['encode_mvals_s']:>8.0f} "
              f"{r['decode_s'] * 1e3:>10.1f} {r['decode_mvals_s']:>8.0f} {r['bytes']:>10} "
              f"{r['ratio']:>9.2f}")
    t = bench_topk(args.n, args.density, args.reps)
    print(f"\nTopK, {t['n']} float32 values, k = {t['k']} (median of {args.reps}), ms")
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


if __name__ == "__main__":
    main()
