"""Simulated wall time and modeled time: point-to-point messages vs MPI's vector collectives.

    python scripts/sim_native.py --P 16 32 --N 1048576 --density 0.01 [--paths p2p native]

For each P and each of ``ssar_split_allgather``, ``dsar_split_allgather`` and
``topk_allreduce`` (k = the input's nnz), one ``sparcml.sim.run`` per path: the cell of
``sparc-bench --simulate`` (random supports, float32, ``sparcapps.bench.inputs.make_input``,
one call, no warm-up) with ``Options(native_min_ranks=1)`` (the phases that exchange with
every rank as one ``Alltoallv`` / ``Allgatherv`` each: one simulated event) or with the
point-to-point path forced (P - 1 messages per rank and phase: P^2 simulated messages).
Prints the wall time of the ``sim.run``, the modeled time of the call (the slowest rank's
virtual clock), its compute part, and point-to-point messages per rank. ``--network``:
default ``PxRATE`` of 10 Gbit/s links.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

NEVER = 2**31 - 1


def _body(comm, name, N, density, native):
    import sparcml
    from sparcapps.bench.inputs import make_input

    vec = make_input(N, density, "random", comm.Get_rank(), comm.Get_size(),
                     dtype=np.dtype(np.float32))
    if "native_min_ranks" in sparcml.Options.__dataclass_fields__:
        opts = sparcml.Options(native_min_ranks=1 if native else NEVER)
    else:  # a version without the option (main before issue 21): point to point only
        opts = None
    comm.Barrier()
    t0 = comm.clock()
    if name == "topk_allreduce":
        res = sparcml.topk_allreduce(vec, vec.nnz, comm, options=opts).result
    else:
        res = sparcml.allreduce(vec, comm, algorithm=name, options=opts)
    took = comm.clock() - t0
    nnz = int(res.count_nonzero() if res.is_dense else res.nnz)
    return took, nnz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--N", type=int, default=1 << 20)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--algorithms", nargs="+",
                    default=["ssar_split_allgather", "dsar_split_allgather", "topk_allreduce"])
    ap.add_argument("--paths", nargs="+", default=["p2p", "native"],
                    choices=["p2p", "native"])
    ap.add_argument("--network", default=None)
    a = ap.parse_args()
    import sparcml.sim as sim

    print(f"{'P':>5} {'algorithm':<22} {'path':<7} {'wall s':>8} {'modeled ms':>11} "
          f"{'compute ms':>11} {'msgs/rank':>9} {'result nnz':>10}", flush=True)
    for P in a.P:
        net = a.network or f"{P}x10gbit"
        for name in a.algorithms:
            for path in a.paths:
                t = time.perf_counter()
                res = sim.run(P, _body, args=(name, a.N, a.density, path == "native"),
                              network=net)
                wall = time.perf_counter() - t
                modeled = max(r[0] for r in res.results)
                print(f"{P:>5} {name:<22} {path:<7} {wall:>8.1f} {modeled * 1e3:>11.2f} "
                      f"{max(res.compute) * 1e3:>11.2f} {max(res.messages):>9} "
                      f"{res.results[0][1]:>10}", flush=True)


if __name__ == "__main__":
    main()
