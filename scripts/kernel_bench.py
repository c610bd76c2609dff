"""Merge-add kernel against scipy.sparse CSR addition of the same two vectors, side by side.

    python scripts/kernel_bench.py [--output FILE.jsonl] [--seed 0]
                                   [--items 1000000] [--dim 16777216] [--reps 15]

A developer's tool (it was ``sparc-bench --kernels``): it times sparcml's private Numba kernels
and workspace themselves, which no public call exposes alone. One process, no MPI. Prints one
row per history and variant; ``--output`` appends one record (app ``sparc-bench-kernels``).

Four ways to add, each timed in two allocation histories of the process, all interleaved
repetition by repetition so that machine noise hits them alike:

- ``alloc``: ``kernels.merge_add``, which allocates its output every call;
- ``workspace``: ``kernels.merge_add_into`` into a :class:`sparcml._runtime.workspace.Workspace` pair,
  which is allocated once and reused;
- ``branchy``: a plain two-pointer merge (``if``/``elif``/``else``, compiled here) into the same
  workspace: the reference that shows the branch-free kernel's margin in the same run. The
  kernel's loop is branch-free only if LLVM keeps its choices as loads or selects; once they
  became jumps (BENCHMARKS "Comm core") and the kernel ran at 0.8x scipy unnoticed. The
  script prints the kernel's speed against this one: at or below 1x, it has happened again;
- ``scipy``: ``a + b`` of two prebuilt 1 x dim ``csr_matrix``.

Histories: ``warm``: the call follows an untimed call of the same kind, so the allocator
hands back the memory it just freed, already mapped. ``fresh``: before the call the C allocator
returns its free memory to the operating system (glibc ``malloc_trim(0)``), so a new output is
pages the kernel's first stores fault in, as in a process whose allocator has just released
them (glibc trims its heap top on ``free`` past a threshold, and blocks above its mmap
threshold, at most 32 MiB, are unmapped on every ``free``). Where there is no ``malloc_trim``
only the warm history is measured.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
import time

import numpy as np
import scipy.sparse as sp
from numba import njit

from sparcml import _kernels as kernels
from sparcml._runtime.workspace import Workspace
from sparcapps.records import append_record, capture_environment, make_record, summarize

__all__ = ["bench_merge_add", "HISTORIES", "VARIANTS", "main"]

HISTORIES = ("warm", "fresh")
VARIANTS = ("alloc", "workspace", "branchy", "scipy")


@njit(nogil=True)
def _branchy_merge_into(a_idx, a_val, b_idx, b_val, out_idx, out_val):
    """The two-pointer merge as first written: a branch per item (see ``branchy`` above)."""
    na, nb = a_idx.shape[0], b_idx.shape[0]
    i = j = n = 0
    while i < na and j < nb:
        ai, bj = a_idx[i], b_idx[j]
        if ai < bj:
            out_idx[n] = ai
            out_val[n] = a_val[i]
            i += 1
        elif bj < ai:
            out_idx[n] = bj
            out_val[n] = b_val[j]
            j += 1
        else:
            out_idx[n] = ai
            out_val[n] = a_val[i] + b_val[j]
            i += 1
            j += 1
        n += 1
    while i < na:
        out_idx[n] = a_idx[i]
        out_val[n] = a_val[i]
        i += 1
        n += 1
    while j < nb:
        out_idx[n] = b_idx[j]
        out_val[n] = b_val[j]
        j += 1
        n += 1
    return n


def _sorted_support(rng, dim, k):
    out = np.unique(rng.integers(0, dim, k + k // 4))
    return np.sort(rng.choice(out, k, replace=False)).astype(np.int32)


def _malloc_trim():
    """glibc's ``malloc_trim`` (returns free heap memory to the OS), or None without one."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _minor_faults() -> int | None:
    try:
        import resource  # Unix only
    except ImportError:  # pragma: no cover - not on Unix
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def bench_merge_add(items: int = 1_000_000, dim: int = 16 * 2**20, reps: int = 15,
                    seed: int = 0) -> dict:
    """Time merge-add of two sorted int32/float32 streams of ``items`` each, in [0, dim).

    Returns, per history in ``result["histories"]`` (``"fresh"`` only where ``malloc_trim``
    exists): per variant the median and spread (seconds), the throughput in million input items
    per second, the ratio to scipy measured in the same history, and the median minor page
    faults per call. The top-level ``numba``, ``scipy``, ``numba_mitems_per_s``,
    ``scipy_mitems_per_s`` and ``speedup`` are the warm history's allocating kernel against
    scipy. All results are checked equal to scipy's before timing.
    """
    rng = np.random.default_rng(seed)
    a_idx, b_idx = _sorted_support(rng, dim, items), _sorted_support(rng, dim, items)
    a_val = rng.standard_normal(items).astype(np.float32)
    b_val = rng.standard_normal(items).astype(np.float32)
    a = sp.csr_matrix((a_val, a_idx, np.array([0, items])), shape=(1, dim))
    b = sp.csr_matrix((b_val, b_idx, np.array([0, items])), shape=(1, dim))
    ws = Workspace()

    def into_workspace():
        idx, val = ws.pair("merge", 2 * items, np.int32, np.float32)
        n = kernels.merge_add_into(a_idx, a_val, b_idx, b_val, idx, val)
        return idx[:n], val[:n]

    def branchy():
        idx, val = ws.pair("branchy", 2 * items, np.int32, np.float32)
        n = _branchy_merge_into(a_idx, a_val, b_idx, b_val, idx, val)
        return idx[:n], val[:n]

    run = {"alloc": lambda: kernels.merge_add(a_idx, a_val, b_idx, b_val),
           "workspace": into_workspace,
           "branchy": branchy,
           "scipy": lambda: a + b}
    expected = run["scipy"]()  # the first calls compile or load the kernels from the cache
    for name in ("alloc", "workspace", "branchy"):
        got_i, got_v = run[name]()
        if not (np.array_equal(expected.indices, got_i) and np.array_equal(expected.data, got_v)):
            raise AssertionError(f"merge_add ({name}) and scipy.sparse disagree")
    del expected, got_i, got_v
    trim = _malloc_trim()
    histories = HISTORIES if trim is not None else ("warm",)
    times = {(h, v): [] for h in histories for v in VARIANTS}
    faults = {key: [] for key in times}
    for rep in range(reps):
        for h in histories:
            for k in range(len(VARIANTS)):  # rotate the order so that none always goes first
                v = VARIANTS[(rep + k) % len(VARIANTS)]
                if h == "warm":
                    run[v]()  # untimed: what it allocates and frees is mapped for the next call
                else:
                    trim(0)
                f0 = _minor_faults()
                t0 = time.perf_counter()
                run[v]()
                times[h, v].append(time.perf_counter() - t0)
                if f0 is not None:
                    faults[h, v].append(_minor_faults() - f0)
    total = 2 * items
    out: dict = {"items": items, "dim": dim, "histories": {}}
    for h in histories:
        s = {v: summarize(times[h, v]) for v in VARIANTS}
        out["histories"][h] = {
            **s,
            "mitems_per_s": {v: total / s[v]["median"] / 1e6 for v in VARIANTS},
            "speedup": {v: s["scipy"]["median"] / s[v]["median"] for v in VARIANTS},
            "faults_per_call": {v: float(np.median(faults[h, v])) if faults[h, v] else None
                                for v in VARIANTS},
        }
    warm = out["histories"]["warm"]
    out.update({
        "numba": warm["alloc"], "scipy": warm["scipy"],
        "numba_mitems_per_s": warm["mitems_per_s"]["alloc"],
        "scipy_mitems_per_s": warm["mitems_per_s"]["scipy"],
        "speedup": warm["speedup"]["alloc"],
    })
    return out


_LABEL = {"alloc": "merge_add (allocating)", "workspace": "merge_add_into (workspace)",
          "branchy": "branchy merge (workspace)", "scipy": "scipy.sparse a+b"}


def print_table(r: dict) -> None:
    """The result of :func:`bench_merge_add` as a table, one row per history and variant."""
    print(f"merge-add of {r['items']:,} + {r['items']:,} sorted int32/float32 items in "
          f"[0, {r['dim']:,}), median of {r['numba']['n']}, all interleaved:")
    print(f"  {'history':8s} {'kernel':28s} {'median ms':>9s} {'M items/s':>10s} "
          f"{'vs scipy (x)':>12s} {'faults/call':>12s}")
    for h, res in r["histories"].items():
        for v in VARIANTS:
            faults = res["faults_per_call"][v]
            print(f"  {h:8s} {_LABEL[v]:28s} {res[v]['median'] * 1e3:9.2f} "
                  f"{res['mitems_per_s'][v]:10.1f} {res['speedup'][v]:11.2f}x "
                  f"{'-' if faults is None else f'{faults:.0f}':>12s}")
    warm = r["histories"]["warm"]
    margin = warm["branchy"]["median"] / warm["workspace"]["median"]
    print(f"  branch-free / branchy, warm: {margin:.2f}x"
          + ("" if margin > 1 else "  <- the kernel's choices compile to jumps again"))
    print("  warm: the allocator reuses memory the previous call freed; fresh: it has returned "
          "its free memory\n  to the OS (malloc_trim) just before the call, so a new output "
          "is faulted in page by page")
    if "fresh" not in r["histories"]:
        print("  (no malloc_trim in this C library: the fresh history is not measured)")


def make_kernel_record(r: dict, config: dict) -> dict:
    """One ``sparc-bench-kernels`` record of the result ``r``: every history and variant."""
    timings = {"numba": r["numba"], "scipy": r["scipy"],  # as before: warm, allocating
               **{f"{h}/{v}": r["histories"][h][v] for h in HISTORIES
                  if h in r["histories"] for v in VARIANTS}}
    metrics = {"speedup": r["speedup"], "numba_mitems_per_s": r["numba_mitems_per_s"],
               "scipy_mitems_per_s": r["scipy_mitems_per_s"]}
    for h, res in r["histories"].items():
        for v in VARIANTS:
            metrics[f"{h}/{v}/mitems_per_s"] = res["mitems_per_s"][v]
            metrics[f"{h}/{v}/speedup"] = res["speedup"][v]
            metrics[f"{h}/{v}/faults_per_call"] = res["faults_per_call"][v]
    return make_record("sparc-bench-kernels", config=config, environment=capture_environment(),
                       algorithm="merge_add", N=r["dim"], timings=timings, metrics=metrics)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="scripts/kernel_bench.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--output", metavar="FILE.jsonl", help="append one record here")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    p.add_argument("--items", type=int, default=1_000_000, help="items of each input")
    p.add_argument("--dim", type=int, default=16 * 2**20, help="the vectors' dimension")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions")
    args = p.parse_args(argv)
    r = bench_merge_add(items=args.items, dim=args.dim, reps=args.reps, seed=args.seed)
    print_table(r)
    if args.output:
        append_record(args.output, make_kernel_record(r, vars(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
