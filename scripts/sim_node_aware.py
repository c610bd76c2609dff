"""Node-aware against flat allreduce on a simulated cluster: bytes off each node, modeled time.

    python scripts/sim_node_aware.py P N DENSITY NETWORK ALGORITHM[,ALGORITHM...]
    python scripts/sim_node_aware.py 512 16777216 0.01 64x10gbit,ppn=8 ssar_recursive_double

Every rank holds sparc-bench's ``random`` input (float32, seed 0). Each algorithm runs flat
(``hierarchical=False``) and node-aware (``hierarchical=True``), once each, after one untimed
call of each. Prints the modeled time (slowest rank), the most bytes one rank sent, and the
most ``inter_node_bytes`` (node-aware: what a node's leader sent off its node; a flat call
counts all of a rank's bytes, those to its node's peers included).
"""

import sys
import time

import numpy as np


def cell(comm, N, density, algorithms):
    import sparcml
    from sparcapps.bench.inputs import make_input

    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(N, density, "random", rank, size, dtype=np.dtype("float32"), seed=0)
    out = {}
    for algorithm in algorithms:
        for hierarchical in (False, True):
            sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=hierarchical)
            stats = sparcml.TrafficStats()
            comm.Barrier()
            t0 = comm.clock()
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=hierarchical,
                                    stats=stats)
            out[(algorithm, hierarchical)] = (
                comm.clock() - t0, stats.bytes_sent, stats.inter_node_bytes, stats.hierarchical,
                int(res.count_nonzero() if res.is_dense else res.nnz))
            del res
    return out


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    import sparcml.sim as sim

    P, N, density, spec = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    algorithms = sys.argv[5].split(",")
    t = time.time()
    res = sim.run(P, cell, network=spec, args=(N, density, algorithms)).results
    print(f"P={P} N={N} density={density} network={sim.parse_network(spec).text}")
    print(f"{'algorithm':>24} {'mode':>10} {'modeled ms':>11} {'sent/rank max B':>16} "
          f"{'off-node max B':>15} {'result nnz':>11}")
    for algorithm in algorithms:
        for hierarchical in (False, True):
            rows = [r[(algorithm, hierarchical)] for r in res]
            assert all(row[3] == hierarchical for row in rows)
            print(f"{algorithm:>24} {'node-aware' if hierarchical else 'flat':>10} "
                  f"{max(x[0] for x in rows) * 1e3:>11.2f} {max(x[1] for x in rows):>16,} "
                  f"{max(x[2] for x in rows):>15,} {rows[0][4]:>11,}")
    print(f"wall {time.time() - t:.0f} s")


if __name__ == "__main__":
    main()
