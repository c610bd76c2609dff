"""The deep apps' runs that tests/test_deep_simulate.py compares with their ``--simulate`` twins,
on P real ranks in one job: ``python -m mpi4py deep_simulate.py DIR``; each run appends its
record to ``DIR/NAME.jsonl`` (NAME from ``CONFIGS``). Rank 0 prints ``DEEP-SIMULATE OK``.
"""

import sys
from pathlib import Path

from mpi4py import MPI

from sparcapps.deep import cnn, lstm

# name -> (app, options): the smallest runs that still train (one epoch, a few steps)
TINY = ["--no-progress", "--threads", "1", "--epochs", "1", "--batch-size", "8", "--seed", "3"]
CONFIGS = {
    "cnn-sparse": ("cnn", TINY + ["--width", "8", "--density", "0.01", "--bits", "4"]),
    "cnn-dense": ("cnn", TINY + ["--width", "8", "--dense"]),
    "lstm-sparse": ("lstm", TINY + ["--width", "16", "--density", "0.01", "--bits", "4"]),
    "lstm-dense": ("lstm", TINY + ["--width", "16", "--dense"]),
}
APPS = {"cnn": cnn, "lstm": lstm}

if __name__ == "__main__":
    d = Path(sys.argv[1])
    for name, (app, options) in CONFIGS.items():
        assert APPS[app].main(options + ["--output", str(d / f"{name}.jsonl")]) == 0, name
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("DEEP-SIMULATE OK", flush=True)
