"""The scaling study of the linear apps (issue 33, item 3): sparse LR and SVM on the url-like
and webspam-like twins, measured at P = 1-8 on this machine and simulated at P = 16-256 on two
networks, against the dense allreduce baseline.

Every run is a plain command line (printed before it runs), so its records carry the command
that made them and ``sparc-report --rerun`` can run any figure again. Records are appended to
``OUT/records.jsonl`` (default ``benchmarks/app-scaling``); ``sparc-report OUT -o REPORT``
draws epoch time and time to accuracy against P, measured beside simulated.

Usage::

    python scripts/app_scaling_study.py --part simulated            # minutes to an hour
    python scripts/app_scaling_study.py --part measured             # needs a quiet machine
    python scripts/app_scaling_study.py --part simulated --dry-run  # print the commands

Settings, stated once here and in BENCHMARKS.md ("Applications at cluster scale"):

- url-like twin: 130,000 rows (the apps' default), 3,231,961 features, 256 rows per rank and
  step; webspam-like twin: 40,000 rows, 16,609,143 features, 64 rows per rank and step (its
  rows hold 3,700 entries each: the gradient of 64 rows is already 1.4% of the features);
  3 epochs of url, 2 of webspam; seed 0; the test set is 20% of the rows.
- sparse: the apps' default algorithm (``ssar_recursive_double``), and for LR on url from
  P = 16 also ``ssar_split_allgather``; dense: ``--algorithm dense`` (MPI_Allreduce of the
  densified gradient).
- networks (one rank per node): ``10gbit,latency=10us`` (10 Gbit Ethernet with an MPI
  latency of 10 us) and ``100gbit,latency=1.5us`` (a 100 Gbit InfiniBand-like fabric).
  Full bisection, no contention (see sparcml.sim).
- simulated P: 2, 4, 8, 16, 64, 256 (url); 4, 16, 64, 128, 256 (webspam; the small P take
  hundreds of steps per epoch); compute modeled from this machine's calibrated rates
  (``--compute-scale 1``). The webspam dense baseline at P = 128 and 256 is modeled beside the
  sparse runs (``--dense-model``: its P dense vectors of 16.6M values need 32 and 63 GiB, where
  the sparse runs need 4-7 GiB); webspam LR also runs ``ssar_split_allgather`` at P = 16-256.
- the deep apps (``--data cnn lstm``): digits, 3 epochs, 8 examples per rank and step (the
  CNN at lr 0.025, a quarter of its default, which is set for 32; the LSTM at its default),
  top-k 1% + 4-bit QSGD with error feedback against ``--dense``; simulated on the same
  two networks (P = 2, 4, 16, 64), measured at P = 1, 2, 4.
- measured P: 1, 2, 4, 8 (url and webspam) with ``sparc-mpiexec`` on this machine (2
  cores: P = 4 and 8 run 2 and 4 ranks per core, so their times measure the host more than
  the algorithm).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = {"url": ["--synth", "url", "--batch-size", "256"],
        "webspam": ["--synth", "webspam", "--rows", "40000", "--batch-size", "64"]}
# the deep apps on scikit-learn's digits (offline): top-k 1% + 4-bit QSGD against dense
# the CNN at lr 0.025: its default 0.1 is set for 32 examples per rank, and at 8 dense
# oscillates and top-k + QSGD collapses (BENCHMARKS.md); the LSTM trains at its default 0.3
DEEP = {"cnn": ["sparc-cnn", "--lr", "0.025"], "lstm": ["sparc-lstm"]}
DEEP_MODES = {"topk-qsgd": ["--density", "0.01", "--bits", "4"], "dense": ["--dense"]}
DEEP_COMMON = ["--epochs", "3", "--batch-size", "8", "--seed", "0", "--no-progress"]
DEEP_SIM_P = [2, 4, 16, 64]
DEEP_MEASURED_P = [1, 2, 4]
SIM_P = {"url": [2, 4, 8, 16, 64, 256], "webspam": [4, 16, 64]}
# P whose dense baseline is modeled beside the sparse runs (--dense-model), not simulated
DENSE_MODELED_P = {"url": [], "webspam": [128, 256]}
# the split algorithm beside the default for LR, from P = 16 (recursive doubling's messages
# carry the growing union every round)
SPLIT_P = {"url": [16, 64, 256], "webspam": [16, 64, 128, 256]}
MEASURED_P = {"url": [1, 2, 4, 8], "webspam": [1, 2, 4, 8]}
NETWORKS = ["10gbit,latency=10us", "100gbit,latency=1.5us"]
APPS = {"lr": ["sparc-linear", "--loss", "log"], "svm": ["sparc-svm"]}
ALGORITHMS = {"sparse": [], "dense": ["--algorithm", "dense"]}
EPOCHS = {"url": ["--epochs", "3"], "webspam": ["--epochs", "2"]}
COMMON = ["--seed", "0", "--no-progress"]


def commands(part: str, data: list[str], out: Path) -> list[list[str]]:
    cmds = []
    records = ["--output", str(out / "records.jsonl")]
    for name in data:
        if name in DEEP:
            for mode in DEEP_MODES.values():
                base = [*DEEP[name], *mode, *DEEP_COMMON, *records]
                if part == "simulated":
                    cmds += [[*base, "--simulate", *map(str, DEEP_SIM_P), "--network", net]
                             for net in NETWORKS]
                else:
                    cmds += [["sparc-mpiexec", "-n", str(P), *base] for P in DEEP_MEASURED_P]
            continue
        for app in APPS.values():
            for alg in ALGORITHMS.values():
                base = [*app, *DATA[name], *EPOCHS[name], *COMMON, *alg, *records]
                if part == "simulated":
                    for net in NETWORKS:
                        cmds.append([*base, "--simulate", *map(str, SIM_P[name]),
                                     "--network", net])
                        if not alg and DENSE_MODELED_P[name]:
                            cmds.append([*base, "--simulate", *map(str, DENSE_MODELED_P[name]),
                                         "--network", net, "--dense-model"])
                    if not alg and app is APPS["lr"]:
                        split = [*app, *DATA[name], *EPOCHS[name], *COMMON, "--algorithm",
                                 "ssar_split_allgather", *records]
                        cmds += [[*split, "--simulate", *map(str, SPLIT_P[name]),
                                  "--network", net] for net in NETWORKS]
                else:
                    for P in MEASURED_P[name]:
                        cmds.append(["sparc-mpiexec", "-n", str(P), *base])
    return cmds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("simulated", "measured"), required=True)
    p.add_argument("--data", nargs="+", choices=sorted({*DATA, *DEEP}), default=sorted(DATA),
                   help="url and webspam: the linear apps; cnn and lstm: the deep apps")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "app-scaling")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for cmd in commands(args.part, args.data, args.out):
        line = shlex.join(cmd)
        print(f"$ {line}", flush=True)
        if args.dry_run:
            continue
        t0 = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        print(f"# exit {code} after {time.perf_counter() - t0:.0f} s, load {' '.join(load)}",
              flush=True)
        status = max(status, code)
    return status


if __name__ == "__main__":
    sys.exit(main())
