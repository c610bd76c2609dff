"""``--model-only`` against the simulation on a reference grid (issue 33, item 4).

    python scripts/model_vs_sim_grid.py [--P 16 64 256] [--N 1048576 16777216]
        [--density 0.0001 0.001 0.01] [--pattern random overlap]
        [--network 256x94.1gbit,latency=2.1us]
        [--output benchmarks/model-vs-sim/grid.jsonl] [--table benchmarks/model-vs-sim/grid.md]

Per cell (P, N, density, pattern), in order of cost (every N = 1M cell first, P = 256 at
the largest N last): every built-in algorithm (the dense baseline where ``sparc-bench
--simulate`` would simulate it: P x N values within its default ``--sim-dense-memory``) simulated as ``sparc-bench --simulate`` runs it
(:func:`sparcapps.bench.simulate._cell`: the same inputs, an untimed first call, then one timed
call under modeled compute; no cost model, so the index coding follows the ranks' nodes), and
the same algorithm as ``--model-only`` predicts it (:func:`sparcapps.bench.simulate._modeled_row`
from the cell's first simulated sparse row's input and result sizes, as the sweep does), and
once more from the sizes ``--model-only`` estimates when no algorithm of the cell is simulated
(:func:`sparcapps.bench.simulate._estimated_sizes`). One JSON line per (cell, algorithm) in
``--output`` (appended after each cell: an interrupted run keeps what it finished), then the
table of model-only / simulated ratios (time and bytes) in ``--table``, with the worst cells.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ALGORITHMS = ("dense", "ssar_recursive_double", "ssar_split_allgather",
              "dsar_split_allgather", "allgather")


SIM_MEMORY = 8 * 2**30  # sparc-bench's default --sim-dense-memory


def _cell(P, N, density, pattern, net):
    import sparcml.sim as sim
    from sparcapps.bench.runner import BenchCase
    from sparcapps.bench.simulate import (_cell as bench_cell, _dense_fits, _estimated_sizes,
                                          _modeled_row, _simulated_row)

    # the dense baseline only where sparc-bench would simulate it (P N values within
    # --sim-dense-memory); beyond, its row is the model's in both
    algorithms = [a for a in ALGORITHMS if a != "dense" or _dense_fits(P, N, 4, SIM_MEMORY)]
    cases = [BenchCase(N, density, pattern, a) for a in algorithms]
    t0 = time.monotonic()
    res = sim.run(P, bench_cell, network=net, args=(cases, 1, 0, 0, None)).results
    wall = time.monotonic() - t0
    rows = {a: _simulated_row([r[i] for r in res], N) for i, a in enumerate(algorithms)}
    some = rows[ALGORITHMS[1]]
    estimated = _estimated_sizes(P, N, density, pattern)
    out = []
    for a in algorithms:
        sim_row = rows[a]
        model = _modeled_row(a, P, N, "float32", net, some, rows)
        guess = _modeled_row(a, P, N, "float32", net, estimated, rows)
        t_sim = sim_row["timings"]["allreduce"]["median"]
        b_sim = sim_row["bytes"]["sent_per_rank_max"]
        out.append({
            "P": P, "N": N, "density": density, "pattern": pattern, "algorithm": a,
            "network": net.text, "simulated_s": t_sim, "simulated_bytes": b_sim,
            "model_s": model["timings"]["allreduce"]["median"],
            "model_bytes": model["bytes"]["sent_per_rank_max"],
            "estimated_sizes_model_s": guess["timings"]["allreduce"]["median"],
            "estimated_sizes_model_bytes": guess["bytes"]["sent_per_rank_max"],
            "k": some["bytes"]["input_nnz_max"], "K": some["result"]["nnz"],
            "K_estimated": estimated["result"]["nnz"], "cell_wall_s": wall})
    return out


def _order(Ps, Ns, densities, patterns):
    big = max(Ns)
    cells = [(P, N, d, p) for N in sorted(Ns) for P in sorted(Ps) for d in densities
             for p in patterns]
    return sorted(cells, key=lambda c: (c[1] == big and c[0] == max(Ps), c[1], c[0]))


def _table(recs) -> str:
    lines = ["| P | N | density | pattern | algorithm | simulated ms | model-only ms | time ratio "
             "| bytes ratio | from estimated sizes: time, bytes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        lines.append(
            f"| {r['P']} | {r['N']:,} | {r['density']:g} | {r['pattern']} | {r['algorithm']} | "
            f"{r['simulated_s'] * 1e3:.3f} | {r['model_s'] * 1e3:.3f} | "
            f"{r['model_s'] / r['simulated_s']:.3f} | "
            f"{r['model_bytes'] / r['simulated_bytes']:.3f} | "
            f"{r['estimated_sizes_model_s'] / r['simulated_s']:.3f}, "
            f"{r['estimated_sizes_model_bytes'] / r['simulated_bytes']:.3f} |")
    return "\n".join(lines) + "\n"


def summary(recs) -> str:
    """The ratios' range and the worst cells, time and bytes."""
    t = np.array([r["model_s"] / r["simulated_s"] for r in recs])
    b = np.array([r["model_bytes"] / r["simulated_bytes"] for r in recs])
    worst = sorted(recs, key=lambda r: -abs(np.log(r["model_s"] / r["simulated_s"])))[:5]
    cells = len({(r["P"], r["N"], r["density"], r["pattern"]) for r in recs})
    text = (f"{len(recs)} rows ({cells} cells; the dense baseline simulated where P x N values "
            f"fit sparc-bench's --sim-dense-memory 8 GiB): model-only / simulated time {t.min():.3f}-{t.max():.3f} "
            f"({int(np.sum((t <= 1.3) & (t >= 1 / 1.3)))}/{len(t)} within 1.3x); bytes "
            f"{b.min():.3f}-{b.max():.3f} ({int(np.sum(b == 1.0))} exactly equal)\n\nworst "
            "time ratios:\n\n")
    return text + _table(worst)


def main(argv=None) -> int:
    import sparcml.sim as sim

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--P", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--N", type=int, nargs="+", default=[1 << 20, 1 << 24])
    p.add_argument("--density", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    p.add_argument("--pattern", nargs="+", default=["random", "overlap"])
    p.add_argument("--network", default="256x94.1gbit,latency=2.1us")
    p.add_argument("--output", default="benchmarks/model-vs-sim/grid.jsonl")
    p.add_argument("--table", default="benchmarks/model-vs-sim/grid.md")
    args = p.parse_args(argv)
    net = sim.parse_network(args.network)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    done = set()
    if os.path.exists(args.output):  # resume: the cells already there are kept
        with open(args.output) as f:
            for line in f:
                r = json.loads(line)
                done.add((r["P"], r["N"], r["density"], r["pattern"]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for cell in _order(args.P, args.N, args.density, args.pattern):
        if cell in done:
            continue
        load = os.getloadavg()[0]
        recs = _cell(*cell, net)
        with open(args.output, "a") as f:
            for r in recs:
                f.write(json.dumps({**r, "commit": commit, "load_before": load,
                                    "load_after": os.getloadavg()[0]}) + "\n")
        worst = max(abs(np.log(r["model_s"] / r["simulated_s"])) for r in recs)
        print(f"P {cell[0]} N {cell[1]} density {cell[2]:g} {cell[3]}: wall "
              f"{recs[0]['cell_wall_s']:.0f} s, worst time ratio {np.exp(worst):.3f}",
              flush=True)
    with open(args.output) as f:
        recs = [json.loads(line) for line in f]
    recs.sort(key=lambda r: (r["N"], r["P"], r["density"], r["pattern"],
                             ALGORITHMS.index(r["algorithm"])))
    with open(args.table, "w") as f:
        f.write(f"# --model-only / simulated, network {net.text}\n\n"
                f"`python scripts/model_vs_sim_grid.py` (commits "
                f"{', '.join(sorted({r['commit'] for r in recs}))}; load average "
                f"{min(r['load_before'] for r in recs):.1f}-"
                f"{max(r['load_after'] for r in recs):.1f}: modeled compute, the ratios do "
                f"not depend on it)\n\n" + summary(recs) + "\nevery row:\n\n" + _table(recs))
    print(summary(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
