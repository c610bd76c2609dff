"""Peak memory of one simulated call per case, against the N + P k bound of sharing.

    python scripts/sim_memory.py P [--N 1048576] [--density 0.01] [--cases a,b,...]
                                   [--ppn 8] [--timeout 1200]

Each case runs in a fresh interpreter (so one case's caches and freed pages do not count in
the next): ``sparcml.sim.run(P, ...)`` of one call on random supports (density ``density``
per rank, float32, seed [rank]), after a P = 4 run that compiles the kernels. Cases: an
algorithm name (a flat ``sparcml.allreduce``), ``NAME+hier`` (``hierarchical=True`` on
``P/ppn`` nodes of ``ppn`` ranks) or ``topk`` (``sparcml.topk_allreduce`` keeping k, the
per-rank nnz). Printed per case: the peak of the traced heap (``tracemalloc``: every NumPy
array, less what was held before the run), the peak RSS (sampled every 20 ms, less the RSS
before), both in units of the bound ``(N + P k) x 8`` bytes (a 4-byte index and a 4-byte value
per entry), the result's fill-in and the wall time. Only public API: the same script measures
any version of sparcml.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

ALL = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather", "allgather",
       "ssar_recursive_double+hier", "ssar_split_allgather+hier", "dsar_split_allgather+hier",
       "allgather+hier", "topk")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _body(comm, case, N, density):
    import numpy as np

    import sparcml

    rank = comm.Get_rank()
    k = max(1, int(N * density))
    rng = np.random.default_rng([rank])
    vec = sparcml.SparseVector(N, np.sort(rng.choice(N, k, replace=False)).astype(np.int32),
                               rng.standard_normal(k).astype(np.float32))
    if case == "topk":
        res = sparcml.topk_allreduce(vec, k, comm).result
    else:
        name, _, hier = case.partition("+")
        res = sparcml.allreduce(vec, comm, algorithm=name, hierarchical=bool(hier))
    return int(np.count_nonzero(res.values)) if res.is_dense else res.nnz


def measure(P: int, case: str, N: int, density: float, ppn: int) -> dict:
    """One case in this process (see the module docstring)."""
    import tracemalloc

    import sparcml.sim as sim

    net = f"{max(1, P // ppn)}x10gbit,ppn={ppn}" if case.endswith("+hier") else f"{P}x10gbit"
    sim.run(4, _body, args=(case, 1 << 12, density),
            network="2x10gbit,ppn=2" if case.endswith("+hier") else None)
    peak_rss = [_rss()]
    base_rss = peak_rss[0]
    done = threading.Event()

    def sample():
        while not done.wait(0.02):
            peak_rss[0] = max(peak_rss[0], _rss())

    threading.Thread(target=sample, daemon=True).start()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.time()
    res = sim.run(P, _body, args=(case, N, density), network=net)
    wall = time.time() - t0
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    done.set()
    k = max(1, int(N * density))
    bound = (N + P * k) * 8
    return {"case": case, "P": P, "N": N, "density": density, "traced_peak": peak,
            "rss_peak": peak_rss[0] - base_rss, "bound": bound,
            "traced_over_bound": peak / bound, "rss_over_bound": (peak_rss[0] - base_rss) / bound,
            "fill": res.results[0] / N, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("P", type=int)
    ap.add_argument("--N", type=int, default=1 << 20)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--cases", default=",".join(ALL))
    ap.add_argument("--ppn", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.P, a.cases, a.N, a.density, a.ppn)))
        return
    for case in a.cases.split(","):
        try:
            proc = subprocess.run([sys.executable, __file__, str(a.P), "--N", str(a.N),
                                   "--density", str(a.density), "--cases", case,
                                   "--ppn", str(a.ppn), "--one"], capture_output=True,
                                  text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"{case:30s} P={a.P}: over {a.timeout:.0f} s", flush=True)
            continue
        if proc.returncode:
            print(f"{case:30s} P={a.P}: failed: {proc.stderr.strip().splitlines()[-1:]}",
                  flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{case:30s} P={r['P']:5d}  traced {r['traced_peak'] / 2**20:8.1f} MiB "
              f"({r['traced_over_bound']:5.2f} x bound)  RSS {r['rss_peak'] / 2**20:8.1f} MiB "
              f"({r['rss_over_bound']:5.2f} x)  bound {r['bound'] / 2**20:6.1f} MiB  "
              f"fill {r['fill']:.3f}  wall {r['wall']:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
