"""Markdown tables of a simulated scaling study (BENCHMARKS.md, "Scaling studies").

    python scripts/scaling_tables.py RECORDS.jsonl [...]
    python scripts/scaling_tables.py --model RECORDS.jsonl [...]
    python scripts/scaling_tables.py --merge OUT.jsonl RECORDS.jsonl [...]

Per input (N, density, pattern): one row per P with each algorithm's median time in ms
(``~``: modeled only) and bytes sent per rank, the fastest algorithm, what ``auto`` ran and its
time over the fastest's; then the share of cells where ``auto`` is within 1.2x of the fastest
(by its own time, and by the time of the algorithm it chose, which takes the noise of one
repetition out). A later record of the same cell and algorithm replaces an earlier one.
Where ``dense`` is modeled only (P N values do not fit), its column is the simulator's
calibrated cost model (``sparcml.sim.network_cost_model``: MPI_Allreduce's communication plus
the dense path's local work as measured in the simulator), not the record's communication-only
time; so are all ``~`` rows, the model of the network the record names.

``--model``: instead, per algorithm and P, the range over the inputs of the simulator's
calibrated cost model (``sparcml.sim.network_cost_model`` of each record's network,
calibrated afresh in this process) over the simulated time: how far to trust the rows that
``--model-only`` predicted. ``--merge OUT``: write the records, one per cell and algorithm
(the later file's), to OUT (what ``sparc-report`` should plot); a modeled-only ``auto`` row is
chosen again as its measured refinement would choose with the merged rows
as its measurements: the contenders of the current model (``sparcml.sim.network_cost_model``,
the overlap ``auto`` would learn from the cell's result), the fastest of them by their rows,
as ``sparc-bench --model-only auto`` does; it takes the time and bytes of that row -- so a
model fixed after a run (the allgather cost, commit "allgather cost: ...") and rows simulated
in a later run count.
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


def _sent(rec, algos):
    """Bytes sent per rank; for a sparse row the model predicted, recomputed by the current
    ``_model_bytes`` from the cell's input and result sizes (records written before its fix
    for ``allgather`` said 64 MiB)."""
    m = rec["metrics"]
    if not m.get("modeled_only") or rec["algorithm"] in ("dense", "auto"):
        return rec["bytes"]["sent_per_rank_max"]
    from sparcapps.bench.simulate import _model_bytes
    from sparcml import index_dtype_for

    some = next((r for r in algos.values() if not r["metrics"].get("modeled_only")), None)
    if some is None:  # nothing simulated: the record's own (model) bytes
        return rec["bytes"]["sent_per_rank_max"]
    N = rec["N"]
    return _model_bytes(rec["algorithm"], rec["P"], N, some["bytes"]["input_nnz_max"],
                        some["metrics"]["result_density"] * N, index_dtype_for(N).itemsize, 4)


def _dense_model(rec) -> float:
    import sparcml.sim as sim
    from sparcml import index_dtype_for

    N = rec["N"]
    k = rec["density"] * N
    return sim.network_cost_model(rec["network"], rec["P"]).predict(
        "dense", P=rec["P"], N=N, k=k, s_idx=index_dtype_for(N).itemsize, s_val=4)


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
    big = max(k[0] for k in cells)
    inputs = sorted({k[:3] for k in cells},
                    key=lambda k: (k[2].startswith("replay"), k[0] != big, k[1], k[2], k[0]))
    tally = {True: [], False: []}
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
            if algos["dense"]["metrics"].get("modeled_only"):
                # the record's modeled dense is MPI_Allreduce's communication alone; the
                # simulator's calibrated model adds the dense path's local work, as auto sees it
                t["dense"] = _dense_model(algos["dense"])
                auto = algos.get("auto", {"metrics": {}})["metrics"]
                if auto.get("rechosen") and auto.get("ran") == "dense":   # the same row
                    t["auto"] = t["dense"]
            cols = []
            for a in ORDER:
                if a not in algos:
                    cols.append("-")
                    continue
                mark = "~" if algos[a]["metrics"].get("modeled_only") else ""
                cols.append(f"{mark}{t[a] * 1e3:.1f} / {_fmt_bytes(_sent(algos[a], algos))}")
            fixed = {a: v for a, v in t.items() if a != "auto"}
            best = min(fixed, key=fixed.get)
            # the support of the sum as the sparse algorithms hold it (a dense result counts
            # its nonzeros: explicit zeros of the inputs, e.g. sparc-linear's, are not counted)
            fill = next((algos[a]["metrics"]["result_density"]
                         for a in ("ssar_recursive_double", *algos) if a in algos
                         and not algos[a]["metrics"].get("modeled_only")), None)
            fill = "-" if fill is None else f"{fill:.3f}"
            if all(r["metrics"].get("modeled_only") for r in algos.values()):
                fill = f"~{algos['ssar_recursive_double']['metrics']['result_density']:.3f}"
            auto = algos.get("auto")
            if auto is None:
                tail = "-", "-"
            else:
                ran = auto["metrics"]["ran"]
                ratio = t["auto"] / fixed[best]
                chose = fixed.get(ran, t["auto"]) / fixed[best]
                # every sparse algorithm and auto simulated (dense may be modeled: its
                # communication alone, a bound in dense's favour)
                simulated = not any(r["metrics"].get("modeled_only")
                                    for a, r in algos.items() if a != "dense")
                tally[simulated].append((ratio <= 1.2, chose <= 1.2))
                if ratio > 1.2 or chose > 1.2:
                    misses.append(f"P={P} N={N:,} {density:.1%} {pattern}: auto ran {SHORT[ran]} "
                                  f"{ratio:.2f}x (its choice's own row {chose:.2f}x), fastest "
                                  f"{SHORT[best]}" + ("" if simulated else " (model rows)"))
                tail = SHORT[ran] + ("" if simulated else "~"), f"{ratio:.2f}" + (
                    "" if ratio <= 1.2 else " **miss**")
            print(f"| {P} | " + " | ".join(cols) + f" | {fill} | {SHORT[best]}"
                  + ("~" if algos[best]["metrics"].get("modeled_only") else "")
                  + f" | {tail[0]} | {tail[1]} |")
    for simulated, what in ((True, "cells where auto and every sparse algorithm ran in the "
                                   "simulator"),
                            (False, "cells with rows the model predicted (auto's choice by "
                                    "the model)")):
        v = tally[simulated]
        if v:
            own, chose = sum(a for a, _ in v), sum(b for _, b in v)
            print(f"\nauto within 1.2x of the fastest, {what}: {own}/{len(v)} "
                  f"({own / len(v):.0%}) by its own time, {chose}/{len(v)} "
                  f"({chose / len(v):.0%}) by the row of the algorithm it chose")
    all_v = tally[True] + tally[False]
    if all_v:
        chose = sum(b for _, b in all_v)
        print(f"\nall cells: {chose}/{len(all_v)} ({chose / len(all_v):.0%}) by its choice")
    for m in misses:
        print(f"- {m}")


def _row_time(rec) -> float:
    if rec["algorithm"] == "dense" and rec["metrics"].get("modeled_only"):
        return _dense_model(rec)
    return rec["timings"]["allreduce"]["median"]


def _rechoose(auto, algos):
    import sparcml.sim as sim
    from sparcml import index_dtype_for

    some = next((r for r in algos.values() if not r["metrics"].get("modeled_only")
                 and r["algorithm"] != "dense"), algos.get("ssar_recursive_double"))
    P, N = auto["P"], auto["N"]
    k = some["bytes"].get("input_nnz_max") or round(auto["density"] * N)
    K = some["metrics"]["result_density"] * N
    model = sim.network_cost_model(auto["network"], P)
    q = model.overlap_from_result(k, K, P, N)
    # as auto's measured refinement would: the model's contenders, the fastest by their rows
    contenders = [a for a in model.contenders(P=P, N=N, k=k, q=q,
                                              s_idx=index_dtype_for(N).itemsize, s_val=4)
                  if a in algos]
    choice = min(contenders, key=lambda a: _row_time(algos[a]))
    row = algos[choice]
    timings = row["timings"]
    if choice == "dense" and row["metrics"].get("modeled_only"):
        from sparcapps.records import summarize    # its time as the tables count it

        timings = {"allreduce": summarize([_row_time(row)])}
    auto = dict(auto, timings=timings, bytes=row["bytes"])
    auto["metrics"] = dict(auto["metrics"], ran=choice, rechosen=True)
    return auto


def merge(out, paths):
    last = {}
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            last[(r["P"], r["N"], r["density"], r["metrics"]["pattern"], r["algorithm"])] = r
    cells = defaultdict(dict)
    for key, r in last.items():
        cells[key[:4]][key[4]] = r
    with open(out, "w") as f:
        for algos in cells.values():
            for r in algos.values():
                if r["algorithm"] == "auto" and r["metrics"].get("modeled_only"):
                    r = _rechoose(r, algos)
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--merge"]:
        merge(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["--model"]:
        model_check(sys.argv[2:])
    else:
        main(sys.argv[1:])
