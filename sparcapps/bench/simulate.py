"""``sparc-bench --simulate P [P ...] --network SPEC``: the sweep on simulated ranks.

Runs in one process (no mpiexec): for each P, ``sparcml.sim.run`` executes the same cells as
a real sweep -- the same inputs (:func:`make_input`), every algorithm interleaved, ``dense``
first -- on P virtual ranks of the network SPEC. Times are the simulator's virtual clocks
(measured compute + modeled communication; the slowest rank per repetition); bytes, results
and fill-in are exact. Records carry ``"simulated": true`` and ``"network": SPEC``.

The ``dense`` baseline holds every rank's full vector (P N values, nothing can be shared):
when that exceeds ``--sim-memory`` it is *modeled only* (Rabenseifner's bytes and time, no
data; records say ``"modeled_only": true``), and the speedups refer to the modeled time.
"""

from __future__ import annotations

import numpy as np

__all__ = ["run_simulated_sweep"]


def _cell(comm, cases, dim, density, pattern, dtype, reps, warmup, seed, model):
    import sparcml
    import sparcml.sim as sim

    from .inputs import make_input

    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(dim, density, pattern, rank, size, dtype=np.dtype(dtype), seed=seed)
    if model is not None:
        sim.use_model(comm, model)
    # the real sweep's order (sparcapps.bench.runner): one untimed first call per case, then
    # the repetitions interleaved case by case, so state kept between calls (the balanced
    # partitions' estimate) evolves the same way and bytes match a real run's
    for algorithm in cases:
        sparcml.allreduce(vec, comm, algorithm=algorithm)
    stats = [sparcml.TrafficStats() for _ in cases]
    elapsed = [[] for _ in cases]
    results = [None] * len(cases)
    for rep in range(warmup + reps):
        for i, algorithm in enumerate(cases):
            stats[i].reset()
            results[i] = None
            comm.Barrier()
            t0 = comm.clock()
            results[i] = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=stats[i])
            t1 = comm.clock()
            if rep >= warmup:
                elapsed[i].append(t1 - t0)
    out = []
    for i, algorithm in enumerate(cases):
        result, st = results[i], stats[i]
        nnz = result.count_nonzero() if result.is_dense else result.nnz
        out.append({"elapsed": elapsed[i], "bytes": st.bytes_sent, "messages": st.messages,
                    "dense_messages": st.dense_messages, "ran": st.algorithm,
                    "nnz": int(nnz), "dense": bool(result.is_dense), "k": int(vec.nnz)})
        results[i] = None
    return out


def _cells(comm, cells, dtype, reps, warmup, seed, model):
    return [_cell(comm, run_algs, dim, density, pattern, dtype, reps, warmup, seed, model)
            for dim, density, pattern, run_algs in cells]


def _dense_fits(P, dim, itemsize, budget) -> bool:
    return P * dim * itemsize * 3 <= budget


def _modeled_dense(P, dim, dtype, net):
    from sparcml.sim.collective_cost import allreduce_time
    from sparcml.sim.world import add_rate

    nbytes = dim * np.dtype(dtype).itemsize
    alpha, beta = net.collective_link(range(P))
    t = allreduce_time(P, nbytes, alpha, beta, add_rate())
    return t, 2 * (P - 1) * nbytes // P


def run_simulated_sweep(args, dims, densities, patterns, reps, warmup, algorithms) -> int:
    import sparcml.sim as sim
    from sparcml import AUTO, DENSE_BASELINE
    from sparcapps.records import append_record, capture_environment, make_record, summarize

    net = sim.parse_network(args.network)
    environment = capture_environment()
    budget = args.sim_memory * 2**30
    print(f"sparc-bench --simulate: network {net.text}; time = median over reps of the "
          f"slowest rank's virtual time (measured compute + modeled communication); bytes and "
          f"results exact; '~' = modeled only (no data)")
    print(f"{'P':>5} {'N':>10} {'density':>8} {'pattern':>8} {'algorithm':>22} "
          f"{'median ms':>10} {'sent/rank':>10} {'result':>7} {'vs dense':>8}")
    for P in args.simulate:
        if P > net.nodes * net.ppn:
            raise SystemExit(f"sparc-bench: --network {net.text} has {net.nodes * net.ppn} "
                             f"ranks, fewer than --simulate {P}")
        model = None if args.no_model else sim.network_cost_model(net, P)
        itemsize = np.dtype(args.dtype).itemsize
        cells = [(dim, density, pattern,
                  [a for a in algorithms if a != DENSE_BASELINE or _dense_fits(P, dim, itemsize,
                                                                              budget)])
                 for dim in dims for density in densities for pattern in patterns]
        # one simulation per P, the cells in the real sweep's order: sparcml keeps state on
        # a communicator from cell to cell (the balanced partitions' estimate), as a real job does
        all_results = sim.run(P, _cells, network=net, compute_scale=args.compute_scale,
                              args=(cells, args.dtype, reps, warmup, args.seed, model)).results
        for c, (dim, density, pattern, run_algs) in enumerate(cells):
            dense_fits = DENSE_BASELINE in run_algs
            cell_results = [r[c] for r in all_results]
            rows = {}
            for i, algorithm in enumerate(run_algs):
                per_rank = [r[i] for r in cell_results]
                times = np.max([p["elapsed"] for p in per_rank], axis=0)
                sent = [p["bytes"] for p in per_rank]
                rows[algorithm] = {
                    "timings": {"allreduce": summarize(times)},
                    "bytes": {"sent_per_rank_max": int(max(sent)),
                              "sent_per_rank_mean": float(np.mean(sent)),
                              "input_nnz_max": max(p["k"] for p in per_rank),
                              "messages": per_rank[0]["messages"],
                              "dense_messages": per_rank[0]["dense_messages"]},
                    "result": {"nnz": per_rank[0]["nnz"], "dense": per_rank[0]["dense"],
                               "density": per_rank[0]["nnz"] / dim if dim else 0.0},
                    "ran": per_rank[0]["ran"], "modeled_only": False}
            if not dense_fits:
                t, nbytes = _modeled_dense(P, dim, args.dtype, net)
                some = next(iter(rows.values()), None)
                rows[DENSE_BASELINE] = {
                    "timings": {"allreduce": summarize([t])},
                    "bytes": {"sent_per_rank_max": nbytes,
                              "sent_per_rank_mean": float(nbytes)},
                    "result": {"nnz": None if some is None else some["result"]["nnz"],
                               "dense": True,
                               "density": None if some is None
                               else some["result"]["density"]},
                    "ran": DENSE_BASELINE, "modeled_only": True}
            dense_median = rows[DENSE_BASELINE]["timings"]["allreduce"]["median"]
            for algorithm in algorithms:
                row = rows[algorithm]
                t = row["timings"]["allreduce"]
                speedup = dense_median / t["median"] if t["median"] > 0 else float("nan")
                name = algorithm if algorithm != AUTO else f"auto:{row['ran']}"
                mark = "~" if row["modeled_only"] else " "
                rd = row["result"]["density"]
                print(f"{P:>5} {dim:>10} {density:>8.2g} {pattern:>8} {name:>22} "
                      f"{mark}{t['median'] * 1e3:>9.3f} "
                      f"{_fmt_bytes(row['bytes']['sent_per_rank_max']):>10} "
                      f"{'-' if rd is None else f'{rd:.3f}':>7} {speedup:>7.2f}x",
                      flush=True)
                if args.output:
                    rec = make_record(
                        "sparc-bench", config={**vars(args), "N": dims,
                                               "density": densities,
                                               "pattern": patterns, "reps": reps,
                                               "warmup": warmup,
                                               "algorithms": algorithms},
                        environment=environment, algorithm=algorithm, P=P, N=dim,
                        density=density, timings=row["timings"], bytes=row["bytes"],
                        metrics={"speedup_over_dense": speedup, "pattern": pattern,
                                 "dtype": args.dtype, "ran": row["ran"],
                                 "result_density": row["result"]["density"],
                                 "result_dense": row["result"]["dense"],
                                 "modeled_only": row["modeled_only"],
                                 "network_model": net.to_dict()})
                    rec["simulated"] = True
                    rec["network"] = net.text
                    rec["nodes"] = -(-P // net.ppn)
                    rec["ranks_per_node"] = min(P, net.ppn)
                    append_record(args.output, rec)
    return 0


def _fmt_bytes(n: float) -> str:
    from .cli import _fmt_bytes as fmt

    return fmt(n)
