"""Simulated step times of the training apps against measured ones (issue 33, item 3).

    python scripts/app_validation_table.py MEASURED.jsonl SIMULATED.jsonl

Matches training records by (app, algorithm, P) and prints a markdown table of the time per
step, measured / modeled, in all and split into its local compute and its communication: the
median over the epochs after the first (the first compiles kernels in a measured run), each
divided by the epoch's steps. The bytes per rank are compared too (``=`` where equal). The
last line counts the rows whose step time is within 1.3x. Exits 1 when a measured record has
no simulated twin.

The linear apps' epochs give ``train_seconds``, the deep apps' ``epoch_seconds`` (the same
thing: the epoch's training steps, evaluation excluded); the deep apps' bytes are their
``bytes_per_step`` times the steps. The measured runs come from
``jobs/emulate.sh NODESx1gbit -- sparc-linear ...`` (or ``sparc-cnn``, ``sparc-lstm``); the
simulated ones from ``sparc-linear ... --simulate P --network SPEC --compute-scale C`` with the
spec ``sparc-bench --probe-network`` printed on the same emulated network and C the ranks per
core of the measured run (this machine's cores are shared by the emulated nodes).
"""

import statistics
import sys

from sparcapps.records import read_records

LIMIT = 1.3


def _key(rec):
    return (rec["app"], rec["algorithm"], rec["P"])


def _index(path):
    records, _ = read_records([path], strict=True)
    return {_key(r): r for r in records
            if r.get("status") == "ok" and (r.get("metrics") or {}).get("epochs")}


def _per_step(rec, key):
    epochs = rec["metrics"]["epochs"]
    use = epochs[1:] if len(epochs) > 1 else epochs
    if key == "train_seconds" and "train_seconds" not in use[0]:
        key = "epoch_seconds"  # a deep app's record
    return statistics.median(e[key] / max(e["steps"], 1) for e in use)


def _sent(rec):
    """Bytes sent per rank in the whole run (the linear apps' max over ranks)."""
    if "sent_per_rank_max" in rec["bytes"]:
        return rec["bytes"]["sent_per_rank_max"]
    return sum(e["bytes_per_step"] * e["steps"] for e in rec["metrics"]["epochs"])


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    measured, simulated = _index(argv[0]), _index(argv[1])
    print("| app | algorithm | P | sent/rank | step ms measured | modeled | ratio | "
          "compute ratio | comm ratio |")
    print("|" + "---|" * 9)
    within = missing = 0
    for key in sorted(measured):
        app, algorithm, P = key
        m, s = measured[key], simulated.get(key)
        if s is None:
            print(f"| {app} | {algorithm} | {P} | no simulated twin | | | | | |")
            missing += 1
            continue
        ratios = [_per_step(m, k) / max(_per_step(s, k), 1e-12)
                  for k in ("train_seconds", "compute_seconds", "comm_seconds")]
        sent_m, sent_s = _sent(m), _sent(s)
        sent = f"{sent_m / 2**10:,.1f} KiB" + (" =" if sent_m == sent_s else
                                               f" (sim {sent_s / 2**10:,.1f})")
        within += (1 / LIMIT) <= ratios[0] <= LIMIT
        print(f"| {app} | {algorithm} | {P} | {sent} | "
              f"{_per_step(m, 'train_seconds') * 1e3:.2f} | "
              f"{_per_step(s, 'train_seconds') * 1e3:.2f} | {ratios[0]:.2f} | "
              f"{ratios[1]:.2f} | {ratios[2]:.2f} |")
    print(f"\n{within} of {len(measured) - missing} rows within {LIMIT}x (step time)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
