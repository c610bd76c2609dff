"""The table of the apps' scaling study (BENCHMARKS.md, "Applications at cluster scale").

    python scripts/app_scaling_table.py benchmarks/app-scaling/records.jsonl

One row per (app, data set, source, P, sparse series): the sparse run's and the dense
baseline's epoch time
(median of the epochs after the first, :func:`sparcapps.report.training.scaling_points`), the
speedup (dense / sparse), both runs' final test accuracy, and the training seconds each took to
the stated target (99% of the lowest best test accuracy the dense baseline reached at any P,
per app and data set; "-" where a run did not reach it in its epochs). Where the dense
baseline was modeled beside the sparse run (``sparc-linear --dense-model``: too large to
simulate), its row says "(dense modeled)" and its accuracy is the sparse run's. Last, the
calibrations the simulated rows' modeled compute rests on (``sim_rates``): modeled seconds
compare only within one.
"""

import sys

from sparcapps.records import modeled_compute, read_records
from sparcapps.report.training import scaling_points, training_runs


def _fmt(x, unit=""):
    if x is None:
        return "-"
    if unit == "s":
        return f"{x:.3g}"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    records, problems = read_records(argv, strict=False)
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    data = scaling_points(training_runs(records))
    print("| app | data | source | P | sparse series | sparse s/epoch | dense s/epoch | speedup "
          "| test acc sparse / dense | s to target sparse / dense |")
    print("|" + "---|" * 10)
    for (app, dataset), d in data.items():
        rows = {}
        for p in d["points"]:
            rows.setdefault((p["source"], p["P"]), {})[p["series"]] = p
        for (source, P), series in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            dn = series.pop("dense baseline", None)
            modeled = series.pop("dense baseline (modeled)", None)
            mark = ""
            if dn is None and modeled is not None:  # sparc-linear --dense-model
                dn, mark = modeled, " (dense modeled)"
            for name, s in sorted(series.items()):
                es, ed = s["epoch_seconds"], dn and dn["epoch_seconds"]
                acc = [p and p["run"]["epochs"][-1].get("test_accuracy") for p in (s, dn)]
                print(f"| {app} | {dataset} | {source} | {P} | {name} | {_fmt(es, 's')} | "
                      f"{_fmt(ed, 's')} | "
                      f"{_fmt(ed / es, 's') + 'x' + mark if es and ed else '-'} | "
                      f"{_fmt(acc[0])} / {_fmt(acc[1])} | "
                      f"{_fmt(s['to_target'], 's')} / {_fmt(dn and dn['to_target'], 's')} |")
        print(f"\n{app} on {dataset}: target test accuracy {d['target']:.4f} "
              f"(basis: {d['basis']})\n")
    calibrations = sorted({modeled_compute(r) for r in records} - {None})
    for line in calibrations:
        print(f"simulated compute: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
