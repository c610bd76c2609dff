"""Judge the overlap of ``iallreduce`` with compute on the records of ``sparc-bench --overlap``.

``sparc-bench-overlap RESULTS.jsonl...`` puts the runs of different process counts side by
side: one row per network (shared memory, or the link rate of the emulated one the records were
taken on, e.g. "net 1gbit" for 2x1gbit and 4x1gbit alike), compute backend (NumPy, PyTorch), N,
density, algorithm and compute target, and per P the comm, compute and overlapped times with
the ratio both/max = overlapped / max(comm, compute). A cell is *within* when that ratio is at
most ``--tolerance`` (default 1.25). sum/max is the ratio that no overlap at all would give,
(comm + compute) / max.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

from sparcapps.cli_args import make_parser
from sparcapps.records import read_records_or_exit

__all__ = ["summarize_overlap", "main"]


def _network(rec) -> str:
    """"shared memory", or the emulated network's link rate (and ranks per node when not 1),
    without its node count: runs at different P on the same kind of network share a row."""
    emulated = rec.get("environment", {}).get("emulated_network")
    if not emulated:
        return "shared memory"
    match = re.fullmatch(r"\d+x([^,]+)(?:,ppn=(\d+))?", emulated)
    if match is None:
        return emulated
    rate, ppn = match.group(1), match.group(2) or "1"
    return f"net {rate}" + ("" if ppn == "1" else f" {ppn}/node")


def _row_key(rec) -> tuple:
    m = rec["metrics"]
    network = _network(rec)
    compute_ms = m.get("compute_ms", rec.get("config", {}).get("compute_ms"))
    return (network, m.get("compute", "numpy"), rec["N"], rec["density"], rec["algorithm"],
            compute_ms)


def summarize_overlap(records, tolerance: float = 1.25) -> dict:
    """Rows (one per cell, a dict per P) and, per (network, P), the cells within
    ``tolerance`` and all cells."""
    rows = defaultdict(dict)
    for rec in records:
        if rec.get("app") != "sparc-bench-overlap" or rec.get("status") != "ok":
            continue
        t = rec["timings"]
        ratio = rec["metrics"]["ratio_to_max"]
        rows[_row_key(rec)][rec["P"]] = {
            "comm_ms": t["comm"]["median"] * 1e3, "compute_ms": t["compute"]["median"] * 1e3,
            "both_ms": t["overlapped"]["median"] * 1e3, "ratio": ratio,
            "serial": rec["metrics"]["sequential_ratio"], "within": ratio <= tolerance}
    counts = defaultdict(lambda: [0, 0])  # per (network, P)
    for key, by_p in rows.items():
        for P, cell in by_p.items():
            counts[key[0], P][0] += cell["within"]
            counts[key[0], P][1] += 1
    process_counts = sorted({p for by_p in rows.values() for p in by_p})

    def order(item):
        network, kind, N, density, algorithm, target = item[0]
        return (network, kind, N, density, algorithm, -1 if target is None else target)

    return {"rows": dict(sorted(rows.items(), key=order)),
            "process_counts": process_counts,
            "within": {key: tuple(c) for key, c in counts.items()}}


def main(argv=None) -> int:
    p = make_parser("sparc-bench-overlap", __doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", metavar="RECORDS.jsonl", help="sparc-bench records")
    p.add_argument("--tolerance", type=float, default=1.25,
                   help="a cell counts as overlapped when compute and comm together take "
                        "within this factor of the larger of the two alone (both/max)")
    args = p.parse_args(argv)
    records = read_records_or_exit(args.results)
    s = summarize_overlap(records, args.tolerance)
    if not s["rows"]:
        print(f"sparc-bench-overlap: no record of {' '.join(args.results)} is of an --overlap "
              "run: it compares runs such as mpiexec -n 4 sparc-bench --overlap 50 100 "
              "--output results/overlap.jsonl (one per P)", file=sys.stderr)
        return 1
    ps = s["process_counts"]
    head = (f"{'network':>14} {'backend':>7} {'N':>9} {'density':>7} {'algorithm':>22} "
            f"{'target ms':>9}")
    for P in ps:
        head += (f" | P={P}: {'compute ms':>10} {'comm ms':>7} {'both ms':>7} {'both/max':>8} "
                 f"{'sum/max':>7}")
    print("medians of the slowest rank; both/max = both / max(compute, comm); sum/max: the same "
          f"run one after the other; * = above {args.tolerance}")
    print(head)
    for (network, kind, N, density, algorithm, target), by_p in s["rows"].items():
        line = (f"{network:>14} {kind:>7} {N:>9} {density:>7.2g} {algorithm:>22} "
                f"{target if target is not None else '-':>9}")
        for P in ps:
            c = by_p.get(P)
            if c is None:
                line += f" | {'':>5} {'-':>10} {'-':>7} {'-':>7} {'-':>8} {'-':>7}"
                continue
            mark = " " if c["within"] else "*"
            line += (f" | {'':>5} {c['compute_ms']:>10.1f} {c['comm_ms']:>7.1f} "
                     f"{c['both_ms']:>7.1f} {c['ratio']:>7.2f}{mark} {c['serial']:>7.2f}")
        print(line)
    for network in sorted({net for net, _ in s["within"]}):
        per_p = [(P, *s["within"][network, P]) for P in ps if (network, P) in s["within"]]
        within, total = (sum(c[i] for c in per_p) for i in (1, 2))
        print(f"{network}: overlapped within {args.tolerance}x of the larger alone in "
              f"{within}/{total} cells ({100 * within / total:.0f}%; "
              + ", ".join(f"P={P}: {w}/{t}" for P, w, t in per_p) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
