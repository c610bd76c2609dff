"""The modeled dense baseline (``sparc-linear --simulate P --dense-model``) against the
simulated one, where both ran: per epoch, modeled / simulated training seconds, and whether
the bytes and the test accuracy are equal.

    python scripts/dense_model_check.py MODELED.jsonl [...] --against SIMULATED.jsonl [...]

Each modeled record of the first files (``metrics.modeled_only``, the dense baseline) is
paired with the simulated dense record of the same app, loss, P, network (its node count aside:
:func:`sparcapps.report.training.network_of_run`), data and epochs in the ``--against`` files.
Exits 1 when a modeled record finds no twin.
"""

import sys

from sparcml import DENSE_BASELINE
from sparcapps.records import read_records
from sparcapps.report.training import network_of_run

_SAME = ("loss", "synth", "rows", "data", "batch_size", "epochs", "seed", "alpha")


def _key(r):
    cfg = r.get("config") or {}
    return (r.get("app"), r.get("P"), network_of_run(r.get("network")),
            *(cfg.get(k) for k in _SAME))


def _dense(paths):
    records, problems = read_records(paths, strict=False)
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return [r for r in records if r.get("algorithm") == DENSE_BASELINE and r.get("simulated")]


def main(argv):
    if "--against" not in argv or argv.index("--against") in (0, len(argv) - 1):
        raise SystemExit(__doc__)
    cut = argv.index("--against")
    simulated = {_key(r): r for r in _dense(argv[cut + 1:])
                 if not r["metrics"].get("modeled_only")}
    modeled = [r for r in _dense(argv[:cut]) if r["metrics"].get("modeled_only")]
    print("| app | P | network | epoch | modeled s | simulated s | ratio | bytes equal "
          "| test acc modeled / simulated |")
    print("|" + "---|" * 9)
    status = 0
    for m in modeled:
        twin = simulated.get(_key(m))
        if twin is None:
            print(f"no simulated twin for {m.get('app')} P = {m.get('P')} on {m.get('network')}",
                  file=sys.stderr)
            status = 1
            continue
        for a, b in zip(m["metrics"]["epochs"], twin["metrics"]["epochs"]):
            print(f"| {m['app']} | {m['P']} | {network_of_run(m['network'])} | {a['epoch']} | "
                  f"{a['train_seconds']:.4g} | {b['train_seconds']:.4g} | "
                  f"{a['train_seconds'] / b['train_seconds']:.4f} | "
                  f"{'yes' if a['bytes_sent'] == b['bytes_sent'] else 'NO'} | "
                  f"{a.get('test_accuracy'):.4f} / {b.get('test_accuracy'):.4f} |")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
