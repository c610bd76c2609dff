"""Test accuracy of quantized top-k SGD against the dense baseline, per app and seed.

``sparc-deep-accuracy [-n 4] [--seeds 0 1 2] [--apps cnn lstm]`` launches, for every app and
seed, ``mpiexec -n P`` runs of the app (sparc-cnn, sparc-lstm; each with its default epochs,
model and learning rate) in three configurations: ``dense_baseline`` (full gradients, dense
allreduce), ``topk-ef`` (density 1%, 4-bit QSGD, error feedback) and ``topk-noef`` (the same
without error feedback); ``--configs`` adds ``global-topk-ef`` (the top 1% of the gradients' sum
over ranks, ``--global-topk``, exact values, error feedback); ``--compressors NAME ...`` adds
one configuration ``compressor-NAME`` per name of :data:`sparcml.compression.COMPRESSORS`
(``--compressor NAME``; its parameters after ``--``). It prints the final test accuracy of each
run, the mean per configuration and the difference to dense in points, and the bytes sent per
step and rank.
Records go to ``--output`` (default: ``results/deep-accuracy.jsonl``, appended; the path is
printed first), one per run, as the apps write them. Each run gets its own ``--run-id``
(``deep-accuracy-<random hex>-<app>-<seed>-<configuration>``, kept in the record's config),
and its figures are read from the record with that id: other writers may append to the same
file meanwhile (a second sparc-deep-accuracy, a re-run) without shifting what is reported.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np

from sparcml.compression import COMPRESSORS
from sparcapps import launcher
from sparcapps.cli_args import (add_deprecated_alias, add_list_argument,
                                add_records_output_argument, make_parser, positive_int)
from sparcapps.records import read_records

__all__ = ["main", "CONFIGS"]

CONFIGS = {
    "dense_baseline": ["--dense"],
    "topk-ef": ["--density", "0.01", "--bits", "4"],
    "topk-noef": ["--density", "0.01", "--bits", "4", "--no-error-feedback"],
    # not run by default (--configs): global top-k of the sum, exact values, error feedback
    "global-topk-ef": ["--density", "0.01", "--bits", "0", "--global-topk"],
}
DEFAULT_CONFIGS = ["dense_baseline", "topk-ef", "topk-noef"]


def main(argv=None) -> int:
    p = make_parser("sparc-deep-accuracy", __doc__)
    nprocs = p.add_argument("-n", dest="nprocs", metavar="P", type=positive_int, default=4,
                            help="ranks of each run, as mpiexec -n")
    add_deprecated_alias(p, "--nprocs", nprocs)
    add_list_argument(p, "--seeds", item_type=int, default=[0, 1, 2], metavar="SEED",
                      help="one run per seed and configuration")
    add_list_argument(p, "--apps", choices=("cnn", "lstm"), default=["cnn", "lstm"],
                      metavar="APP", help="cnn, lstm or both")
    add_list_argument(p, "--configs", choices=list(CONFIGS), default=DEFAULT_CONFIGS,
                      metavar="CONFIG",
                      help="configurations to run (dense_baseline is always run: the reference)")
    add_list_argument(p, "--compressors", choices=list(COMPRESSORS), default=[],
                      metavar="NAME", help="also run --compressor NAME for each NAME")
    add_records_output_argument(p, per="run", default="results/deep-accuracy.jsonl")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: options for every run")
    args = p.parse_args(argv)
    extra = [a for a in args.extra if a != "--"]
    configs = {name: CONFIGS[name] for name in CONFIGS
               if name == "dense_baseline" or name in args.configs}
    configs.update({f"compressor-{c}": ["--compressor", c] for c in args.compressors})
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"sparc-deep-accuracy: records appended to {out}", flush=True)
    table: dict = {}
    session = uuid.uuid4().hex[:12]
    for app in args.apps:
        for seed in args.seeds:
            for name, flags in configs.items():
                run_id = f"deep-accuracy-{session}-{app}-{seed}-{name}"
                script = Path(sys.executable).parent / f"sparc-{app}"  # the console script
                launch = [str(script)] if script.exists() else [sys.executable, "-m",
                                                                f"sparcapps.deep.{app}"]
                cmd = launcher.mpiexec_command(args.nprocs, [
                    *launch, "--seed", str(seed), "--no-progress", "--output", str(out),
                    "--run-id", run_id, *flags, *extra])
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      env=launcher.launch_env(launcher.mpi_flavor(cmd[0])))
                if proc.returncode != 0:
                    print(proc.stdout + proc.stderr, file=sys.stderr)
                    return proc.returncode
                mine = [r for r in read_records([out])[0]
                        if r.get("config", {}).get("run_id") == run_id]
                if len(mine) != 1:
                    print(f"sparc-deep-accuracy: {len(mine)} records of run {run_id} in {out} "
                          f"(expected one)", file=sys.stderr)
                    return 1
                rec = mine[0]
                acc = rec["metrics"]["test_accuracy"]
                table[(app, name, seed)] = (acc, rec["bytes"]["sent_per_step"])
                print(f"sparc-{app} seed {seed} {name:20}: test accuracy {acc:.4f}, "
                      f"{rec['bytes']['sent_per_step']:,.0f} B/step/rank, "
                      f"{len(rec['metrics']['epochs'])} epochs", flush=True)
    print(f"\nP={args.nprocs}, seeds {args.seeds}; records in {out}")
    print("| app | configuration | test accuracy per seed | mean | vs dense (points) "
          "| bytes/step/rank |")
    print("|---|---|---|---|---|---|")
    for app in args.apps:
        dense_mean = np.mean([table[(app, "dense_baseline", s)][0] for s in args.seeds])
        for name in configs:
            accs = [table[(app, name, s)][0] for s in args.seeds]
            nbytes = np.mean([table[(app, name, s)][1] for s in args.seeds])
            print(f"| sparc-{app} | {name} | {', '.join(f'{100 * a:.2f}' for a in accs)} | "
                  f"{100 * np.mean(accs):.2f} | {100 * (np.mean(accs) - dense_mean):+.2f} | "
                  f"{nbytes:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
