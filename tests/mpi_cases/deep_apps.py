"""sparc-cnn and sparc-lstm end to end on P ranks, in one job: digits, checkpoint and resume,
and the CIFAR-10 / PTB paths on tiny files. Usage: ``python -m mpi4py deep_apps.py DIR``
where DIR holds ``cifar10/`` and ``ptb/`` test files; records go to ``DIR/*.jsonl``.
Rank 0 prints ``DEEP-APPS OK``; the test reads the records.
"""

import sys
from pathlib import Path

from mpi4py import MPI

from sparcapps.deep import cnn, lstm

d = Path(sys.argv[1])
tiny = ["--no-progress", "--threads", "1", "--data-home", str(d)]
cnn_args = tiny + ["--width", "4", "--batch-size", "16", "--density", "0.05", "--bits", "4",
                   "--bucket-mb", "0.002"]
# interrupted after epoch 1, resumed to epoch 3; and the same run uninterrupted
assert cnn.main(cnn_args + ["--epochs", "1", "--checkpoint-every", "1", "--checkpoint",
                            str(d / "cnn.ckpt"), "--output", str(d / "first.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "3", "--resume", str(d / "cnn.ckpt"),
                            "--output", str(d / "resumed.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "3", "--output", str(d / "straight.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "1", "--dense", "--output", str(d / "dense.jsonl")]) == 0
assert lstm.main(tiny + ["--epochs", "1", "--width", "8", "--no-error-feedback",
                         "--output", str(d / "lstm.jsonl")]) == 0
assert cnn.main(tiny + ["--dataset", "cifar10", "--width", "2", "--depth", "1", "--epochs", "1",
                        "--batch-size", "8", "--output", str(d / "cifar.jsonl")]) == 0
assert lstm.main(tiny + ["--dataset", "ptb", "--width", "6", "--epochs", "2", "--batch-size",
                         "4", "--bptt", "5", "--output", str(d / "ptb.jsonl")]) == 0
# options that cannot go together fail cleanly on every rank (exit status 2, no hang)
assert cnn.main(tiny + ["--algorithm", "dense", "--bits", "4"]) == 2
MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.Get_rank() == 0:
    print("DEEP-APPS OK", flush=True)
