"""Markdown tables of a simulated scaling study (BENCHMARKS.md, "Scaling studies").

    python scripts/scaling_tables.py RECORDS.jsonl [...]
    python scripts/scaling_tables.py --model RECORDS.jsonl [...]

Per input (N, density, pattern): one row per P with each algorithm's median time in ms
(``~``: modeled only) and bytes sent per rank, the fastest algorithm, what ``auto`` ran and its
time over the fastest's; then the share of cells where ``auto`` is within 1.2x of the fastest
(by its own time, and by the time of the algorithm it chose, which takes the noise of one
repetition out). A later record of the same cell and algorithm replaces an earlier one.

``--model``: instead, per algorithm and P, the range over the inputs of the simulator's
calibrated cost model (``sparcml.sim.network_cost_model`` of each record's network,
calibrated afresh in this process) over the simulated time: how far to trust the rows that
``--model-only`` predicted.
"""

import json
import sys
from collections import defaultdict

ORDER = ["dense", "allgather", "ssar_recursive_double", "ssar_split_allgather",
         "dsar_split_allgather"]
SHORT = {"dense": "dense", "allgather": "allgather", "ssar_recursive_double": "ssar_rd",
         "ssar_split_allgather": "ssar_split", "dsar_split_allgather": "dsar_split"}


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def model_check(paths):
    import numpy as np

    import sparcml.sim as sim
    from sparcml import index_dtype_for

    ratios = defaultdict(list)
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            m = r.get("metrics") or {}
            if (not r.get("simulated") or m.get("modeled_only")
                    or r["algorithm"] in ("auto", "dense")):
                continue
            P, N = r["P"], r["N"]
            k = r["bytes"]["input_nnz_max"]
            K = m["result_density"] * N
            model = sim.network_cost_model(r["network"], P)
            t = model.predict(r["algorithm"], P=P, N=N, k=k, K=K,
                              s_idx=index_dtype_for(N).itemsize, s_val=4)
            ratios[(r["algorithm"], P)].append(t / r["timings"]["allreduce"]["median"])
    print("| algorithm | P | cells | model / simulated: min - median - max |\n|---|---|---|---|")
    for (alg, P), v in sorted(ratios.items()):
        print(f"| {alg} | {P} | {len(v)} | {min(v):.2f} - {np.median(v):.2f} - {max(v):.2f} |")


def main(paths):
    cells = defaultdict(dict)
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r.get("app") != "sparc-bench" or not r.get("simulated"):
                continue
            m = r["metrics"]
            cells[(r["N"], r["density"], m["pattern"], r["P"])][r["algorithm"]] = r
    inputs = sorted({k[:3] for k in cells}, key=lambda k: (k[2].startswith("replay"), k[1], k[2]))
    within = within_choice = total = 0
    misses = []
    for inp in inputs:
        N, density, pattern = inp
        print(f"\n**N = {N:,}, density {density:.3%}, {pattern}** (time ms / sent per rank)\n")
        print("| P | " + " | ".join(SHORT[a] for a in ORDER) + " | result fill | fastest | "
              "auto ran | auto / fastest |")
        print("|---" * (len(ORDER) + 5) + "|")
        for P in sorted(k[3] for k in cells if k[:3] == inp):
            algos = cells[inp + (P,)]
            t = {a: r["timings"]["allreduce"]["median"] for a, r in algos.items()}
            cols = []
            for a in ORDER:
                if a not in algos:
                    cols.append("-")
                    continue
                mark = "~" if algos[a]["metrics"].get("modeled_only") else ""
                cols.append(f"{mark}{t[a] * 1e3:.1f} / "
                            f"{_fmt_bytes(algos[a]['bytes']['sent_per_rank_max'])}")
            fixed = {a: v for a, v in t.items() if a != "auto"}
            best = min(fixed, key=fixed.get)
            # the support of the sum as the sparse algorithms hold it (a dense result counts
            # its nonzeros: explicit zeros of the inputs, e.g. sparc-linear's, are not counted)
            fill = next((algos[a]["metrics"]["result_density"]
                         for a in ("ssar_recursive_double", *algos) if a in algos
                         and not algos[a]["metrics"].get("modeled_only")), None)
            auto = algos.get("auto")
            if auto is None:
                tail = "-", "-"
            else:
                ran = auto["metrics"]["ran"]
                ratio = t["auto"] / fixed[best]
                chose = fixed.get(ran, t["auto"]) / fixed[best]
                total += 1
                within += ratio <= 1.2
                within_choice += chose <= 1.2
                if ratio > 1.2 or chose > 1.2:
                    misses.append(f"P={P} {density:.1%} {pattern}: auto ran {SHORT[ran]} "
                                  f"{ratio:.2f}x (its choice's own row {chose:.2f}x), fastest "
                                  f"{SHORT[best]}")
                tail = SHORT[ran], f"{ratio:.2f}" + ("" if ratio <= 1.2 else " **miss**")
            print(f"| {P} | " + " | ".join(cols) + f" | {fill:.3f} | {SHORT[best]}"
                  + ("~" if algos[best]["metrics"].get("modeled_only") else "")
                  + f" | {tail[0]} | {tail[1]} |")
    if total:
        print(f"\nauto within 1.2x of the fastest: {within}/{total} cells "
              f"({within / total:.0%}) by its own time; {within_choice}/{total} "
              f"({within_choice / total:.0%}) by the time of the algorithm it chose")
        for m in misses:
            print(f"- {m}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--model"]:
        model_check(sys.argv[2:])
    else:
        main(sys.argv[1:])
