"""Peak memory and wall time of one simulated allreduce sweep cell at large P.

    python scripts/sim_scale.py P N ALGORITHM[,ALGORITHM...] [--density D] [--no-share]

Runs ``sparcml.sim.run(P, ...)`` on the cell of ``sparc-bench --simulate`` (random supports,
float32, one repetition, no warm-up) and prints, per algorithm, the modeled time, the result's
fill-in, then the process's peak RSS (sampled every 50 ms, and ``ru_maxrss``) and the wall time.
"""

import argparse
import os
import resource
import threading
import time


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("P", type=int)
    ap.add_argument("N", type=int)
    ap.add_argument("algorithms")
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--no-share", action="store_true")
    a = ap.parse_args()
    import sparcml.sim as sim
    from sparcapps.bench.runner import BenchCase
    from sparcapps.bench.simulate import _cell

    peak = [_rss()]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss())

    threading.Thread(target=sample, daemon=True).start()
    algs = a.algorithms.split(",")
    t = time.time()
    cases = [BenchCase(a.N, a.density, "random", alg) for alg in algs]
    res = sim.run(a.P, _cell, network=f"{a.P}x10gbit", share=not a.no_share,
                  args=(cases, 1, 0, 0, None))
    wall = time.time() - t
    done.set()
    for i, alg in enumerate(algs):
        r0 = res.results[0][i]
        print(f"{alg}: modeled {max(max(r[i]['elapsed']) for r in res.results) * 1e3:.1f} ms, "
              f"fill-in {r0['nnz'] / a.N:.3f}, sent/rank {r0['bytes'] / 2**20:.2f} MiB")
    print(f"P={a.P} N={a.N} density={a.density}: peak RSS {peak[0] / 2**30:.2f} GiB "
          f"(ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB), "
          f"wall {wall:.1f} s")


if __name__ == "__main__":
    main()
