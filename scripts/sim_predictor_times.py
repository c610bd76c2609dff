"""How long the predictor takes: every algorithm's simulation of one call at P, N, density.

    python scripts/sim_predictor_times.py P [--N 1048576] [--density 0.001]
                                          [--cases a,b,...] [--compute model|measured]
                                          [--timeout 600]

Each case runs in a fresh interpreter (its peak RSS is its own): a P = 4 run that compiles the
kernels (and loads or calibrates the kernel rates), then ``sparcml.sim.run(P, ...)`` of one
call (one repetition) on random supports (density per rank, float32, seed [rank]), P nodes on
10 Gbit/s links. Printed per case: the wall time of that simulation, the modeled time of the
call (the slowest rank's clock between two barriers), its compute part (the slowest rank's),
the process's peak RSS (``ru_maxrss``) and the load average when it ended. Cases: an algorithm
name (``sparcml.allreduce``; ``dense`` simulates the MPI_Allreduce of every rank's full
vector, P N values) or ``topk`` (``sparcml.topk_allreduce`` keeping k, the per-rank nnz).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ALL = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather", "allgather",
       "auto", "topk", "dense")


def _body(comm, case, N, density, model=None):
    import numpy as np

    import sparcml
    import sparcml.sim as sim

    if model is not None:  # auto chooses by the simulated network, as sparc-bench --simulate
        sim.use_model(comm, model)

    rank = comm.Get_rank()
    k = max(1, int(N * density))
    rng = np.random.default_rng([rank])
    vec = sparcml.SparseVector(N, np.sort(rng.choice(N, k, replace=False)).astype(np.int32),
                               rng.standard_normal(k).astype(np.float32))
    comm.Barrier()
    t0 = comm.clock()
    if case == "topk":
        sparcml.topk_allreduce(vec, k, comm)
    else:
        sparcml.allreduce(vec, comm, algorithm=case)
    comm.Barrier()
    return comm.clock() - t0


def measure(P, case, N, density, compute):
    import sparcml.sim as sim

    network = f"{P}x10gbit"
    # auto: the network's cost model (sparcml.calibrate's measurements on P simulated ranks
    # would time this machine and hold P copies of its 2^20-entry inputs)
    model = sim.network_cost_model(network, P) if case == "auto" else None
    sim.run(4, _body, args=(case, 1 << 12, density), compute=compute)
    t0 = time.time()
    res = sim.run(P, _body, args=(case, N, density, model), network=network, compute=compute)
    wall = time.time() - t0
    return {"case": case, "P": P, "N": N, "density": density, "compute_mode": compute,
            "wall": wall, "modeled": max(res.results), "compute": max(res.compute),
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "load": os.getloadavg()[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("P", type=int)
    ap.add_argument("--N", type=int, default=1 << 20)
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--cases", default=",".join(ALL))
    ap.add_argument("--compute", choices=("model", "measured"), default="model")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.P, a.cases, a.N, a.density, a.compute)))
        return
    print(f"P = {a.P}, N = {a.N}, density {a.density:g}, compute {a.compute}, one call; "
          f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    for case in a.cases.split(","):
        t0 = time.time()
        need = a.P * a.N * 4  # dense: every rank's full float32 vector at once
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if case == "dense" and need > memory / 2:
            print(f"{case:24s} not simulated: P x N values are {need / 2**30:.0f} GiB, over half "
                  f"this machine's {memory / 2**30:.0f} GiB (sparc-bench --simulate models it, "
                  f"'~')", flush=True)
            continue
        try:
            proc = subprocess.run([sys.executable, __file__, str(a.P), "--N", str(a.N),
                                   "--density", str(a.density), "--cases", case,
                                   "--compute", a.compute, "--one"], capture_output=True,
                                  text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"{case:24s} over {a.timeout:.0f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
            continue
        if proc.returncode:
            why = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            print(f"{case:24s} failed: {why[0]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{case:24s} simulation {r['wall']:7.1f} s (process {time.time() - t0:6.1f} s)  "
              f"modeled {r['modeled'] * 1e3:9.3f} ms  compute {r['compute'] * 1e3:8.3f} ms  "
              f"peak RSS {r['rss'] / 2**20:7.0f} MiB  load {r['load']:.1f}", flush=True)


if __name__ == "__main__":
    main()
