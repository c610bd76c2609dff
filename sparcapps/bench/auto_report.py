"""Judge ``auto`` and the cost model on the records of a sparc-bench sweep.

``python -m sparcapps.bench.auto_report RESULTS.jsonl...`` groups the records by cell (P, N,
density, pattern, dtype, blocking or not), and prints per cell: the fastest algorithm measured,
what ``auto`` ran and its time relative to the fastest, and the worst ratio of predicted to
measured time over the algorithms. The sweep must time ``auto`` beside the algorithms
(``sparc-bench --algorithms ... auto``) with the cost model (``sparc-bench``'s default); without
such a cell it says which run it needs and exits 1.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from sparcml import ALGORITHMS, AUTO
from sparcapps.cli_args import make_parser
from sparcapps.records import read_records_or_exit

__all__ = ["summarize_auto", "main"]


def _cells(records):
    cells = defaultdict(dict)
    for rec in records:
        if rec.get("app") != "sparc-bench" or rec.get("status") != "ok":
            continue
        m = rec["metrics"]
        key = (rec["P"], rec["N"], rec["density"], m["pattern"], m["dtype"],
               m.get("nonblocking", False))
        cells[key][rec["algorithm"]] = rec
    return cells


def summarize_auto(records, tolerance: float = 1.2) -> dict:
    """Per-cell verdicts and the totals: cells where auto is within ``tolerance`` of the
    fastest, and algorithm rows whose prediction is within 2x of the measurement."""
    rows = []
    model_ok = model_total = 0
    for key, algos in sorted(_cells(records).items()):
        if "auto" not in algos:
            continue
        measured = {a: r["timings"]["allreduce"]["median"] for a, r in algos.items()
                    if a != "auto"}
        best = min(measured, key=measured.get)
        auto = algos["auto"]
        ratio = auto["timings"]["allreduce"]["median"] / measured[best]
        worst_model = 1.0
        for a, r in algos.items():
            model = r["metrics"].get("model")
            if a == "auto" or not model:
                continue
            pm = model["predicted_s"] / measured[a]
            spread = max(pm, 1 / pm)
            model_total += 1
            model_ok += spread <= 2.0
            worst_model = max(worst_model, spread)
        rows.append({"cell": key, "best": best, "auto": auto["metrics"]["ran"],
                     "auto_ratio": ratio, "within": ratio <= tolerance,
                     "worst_model_spread": worst_model})
    within = sum(r["within"] for r in rows)
    return {"rows": rows, "cells": len(rows), "within": within,
            "model_within_2x": model_ok, "model_rows": model_total}


def _all_with_auto() -> list[str]:
    """Every registered algorithm and ``auto``: the sweep this report judges."""
    return [*ALGORITHMS, AUTO]


def main(argv=None) -> int:
    p = make_parser("sparc-bench-auto", __doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", metavar="RECORDS.jsonl", help="sparc-bench records")
    p.add_argument("--tolerance", type=float, default=1.2,
                   help="auto matches a cell when its time is within this factor of the "
                        "fastest algorithm's (auto/fastest)")
    args = p.parse_args(argv)
    records = read_records_or_exit(args.results)
    s = summarize_auto(records, args.tolerance)
    if not s["cells"]:
        print(f"sparc-bench-auto: no cell of {' '.join(args.results)} has an 'auto' row: it "
              "judges sweeps that time auto beside the algorithms, e.g. mpiexec -n 4 "
              "sparc-bench --algorithms " + " ".join(_all_with_auto()) + " --output "
              "results/auto.jsonl", file=sys.stderr)
        return 1
    print(f"{'P':>3} {'N':>9} {'density':>8} {'pattern':>8} {'fastest':>22} {'auto ran':>22} "
          f"{'auto/fastest':>12} {'model error (x)':>16}")
    for r in s["rows"]:
        P, N, density, pattern, _, _ = r["cell"]
        mark = "" if r["within"] else "  <-- outside"
        print(f"{P:>3} {N:>9} {density:>8.2g} {pattern:>8} {r['best']:>22} {r['auto']:>22} "
              f"{r['auto_ratio']:>12.2f} {r['worst_model_spread']:>16.2f}{mark}")
    print(f"auto within {args.tolerance}x of the fastest in {s['within']}/{s['cells']} cells "
          f"({100 * s['within'] / s['cells']:.0f}%); predictions within 2x of the "
          f"measurement in {s['model_within_2x']}/{s['model_rows']} rows "
          f"({100 * s['model_within_2x'] / max(1, s['model_rows']):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
