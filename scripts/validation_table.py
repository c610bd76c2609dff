"""Modeled (``sparc-bench --simulate``) against measured (``mpiexec`` / ``jobs/emulate.sh``) times.

    python scripts/validation_table.py MEASURED.jsonl SIMULATED.jsonl [SIMULATED.jsonl ...]

Matches records by (P, N, density, pattern, algorithm) and prints a markdown table: the bytes
sent per rank (``=`` where every simulation sent exactly the measured bytes, else the
simulated figure), the measured median, and per simulation file its modeled median and the
ratio measured / modeled. The last line counts the sparse algorithms' rows within 1.5x
(``dense`` and ``dsar_split_allgather`` are listed, not counted: the issue's criterion is the
sparse algorithms). Exits 1 when a measured row has no simulated twin.
"""

import sys

from sparcapps.records import read_records

SPARSE = ("ssar_recursive_double", "ssar_split_allgather", "allgather")


def _key(rec):
    return (rec["P"], rec["N"], rec["density"], rec["metrics"]["pattern"], rec["algorithm"])


def _index(path):
    records, _ = read_records([path], strict=True)
    return {_key(r): r for r in records
            if r.get("app") == "sparc-bench" and r.get("status") == "ok"}


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    measured, sims = _index(argv[0]), [_index(p) for p in argv[1:]]
    head = "| P | density, pattern | algorithm | sent/rank | measured ms | " + " | ".join(
        f"modeled ms ({i + 1}) | ratio ({i + 1})" for i in range(len(sims))) + " |"
    print(head)
    print("|" + "---|" * (5 + 2 * len(sims)))
    within, counted, missing = [0] * len(sims), 0, 0
    for key in sorted(measured, key=lambda k: (k[0], k[2], k[3], k[4])):
        P, N, density, pattern, algorithm = key
        m = measured[key]
        twins = [s.get(key) for s in sims]
        if any(t is None for t in twins):
            missing += 1
            print(f"| {P} | {density:g} {pattern} | {algorithm} | (no simulated twin) |")
            continue
        sent = m["bytes"]["sent_per_rank_max"]
        same = all(t["bytes"]["sent_per_rank_max"] == sent for t in twins)
        mt = m["timings"]["allreduce"]["median"]
        cells = []
        counted += algorithm in SPARSE
        for i, t in enumerate(twins):
            st = t["timings"]["allreduce"]["median"]
            ratio = mt / st
            if algorithm in SPARSE and 1 / 1.5 <= ratio <= 1.5:
                within[i] += 1
            cells.append(f"{st * 1e3:.1f} | {ratio:.2f}")
        label = f"{sent / 1024:,.1f} KiB " + ("=" if same else
                                               f"(sim {twins[0]['bytes']['sent_per_rank_max']})")
        print(f"| {P} | {density * 100:g}% {pattern} | {algorithm} | {label} | {mt * 1e3:.1f} | "
              + " | ".join(cells) + " |")
    print()
    print("sparse algorithms within 1.5x: " + ", ".join(
        f"({i + 1}) {w}/{counted}" for i, w in enumerate(within)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
