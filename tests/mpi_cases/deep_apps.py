"""sparc-cnn and sparc-lstm end to end on P ranks, in one job: digits, checkpoint and resume (at
an epoch's end, and inside one after a SIGTERM), and the CIFAR-10 / PTB paths on tiny files. Usage: ``python -m mpi4py deep_apps.py DIR``
where DIR holds ``cifar10/`` and ``ptb/`` test files; records go to ``DIR/*.jsonl``.
Rank 0 prints ``DEEP-APPS OK``; the test reads the records.
"""

import os
import signal
import sys
from pathlib import Path

from mpi4py import MPI

from sparcapps.deep import cnn, lstm
from sparcapps.interrupt import StopOnSignal
from sparcapps.records import read_records

rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()

d = Path(sys.argv[1])
tiny = ["--no-progress", "--threads", "1", "--data-home", str(d)]
cnn_args = tiny + ["--width", "4", "--batch-size", "16", "--density", "0.05", "--bits", "4",
                   "--bucket-mb", "0.002"]
# interrupted after epoch 1, resumed to epoch 3; and the same run uninterrupted
assert cnn.main(cnn_args + ["--epochs", "1", "--checkpoint-every-epochs", "1", "--checkpoint",
                            str(d / "cnn.ckpt"), "--output", str(d / "first.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "3", "--resume", str(d / "cnn.ckpt"),
                            "--output", str(d / "resumed.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "3", "--output", str(d / "straight.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "1", "--dense", "--output", str(d / "dense.jsonl")]) == 0
assert cnn.main(cnn_args + ["--epochs", "1", "--bits", "0", "--global-topk",
                            "--output", str(d / "global.jsonl")]) == 0
assert lstm.main(tiny + ["--epochs", "1", "--width", "8", "--no-error-feedback",
                         "--output", str(d / "lstm.jsonl")]) == 0
assert cnn.main(tiny + ["--dataset", "cifar10", "--width", "2", "--depth", "1", "--epochs", "1",
                        "--batch-size", "8", "--output", str(d / "cifar.jsonl")]) == 0
assert lstm.main(tiny + ["--dataset", "ptb", "--width", "6", "--epochs", "2", "--batch-size",
                         "4", "--bptt", "5", "--output", str(d / "ptb.jsonl")]) == 0
# SIGTERM to one rank inside an epoch: every rank stops after the same step (exit 128 + 15)
# with a checkpoint; resumed, the run ends with the uninterrupted run's parameters, bit for bit
# (the CNN; and the LSTM, whose hidden state is carried across the stop)
real_poll = StopOnSignal.poll


def signal_at(poll_number):
    polls = [0]

    def poll(self):
        self.check_every_s = 0.0  # agree at every step: the stop comes at the signalled step
        polls[0] += 1
        if rank == size - 1 and polls[0] == poll_number:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_poll(self)

    StopOnSignal.poll = poll


ptb_args = tiny + ["--dataset", "ptb", "--width", "6", "--batch-size", "4", "--bptt", "5"]
for main, args, at, straight in [(cnn.main, cnn_args + ["--epochs", "3"], 7, "straight"),
                                 (lstm.main, ptb_args + ["--epochs", "2"], 3, "ptb")]:
    ckpt = str(d / f"signal-{straight}.ckpt")
    signal_at(at)
    assert main(args + ["--checkpoint", ckpt]) == 128 + signal.SIGTERM
    StopOnSignal.poll = real_poll
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert main(args + ["--resume", ckpt, "--output", str(d / f"signal-{straight}.jsonl")]) == 0
    MPI.COMM_WORLD.Barrier()
    if rank == 0:
        (done,), _ = read_records([d / f"signal-{straight}.jsonl"])
        (want,), _ = read_records([d / f"{straight}.jsonl"])
        assert done["metrics"]["params_sha256"] == want["metrics"]["params_sha256"], straight
        assert [e["loss"] for e in done["metrics"]["epochs"]] == \
            [e["loss"] for e in want["metrics"]["epochs"]], straight
        assert want["metrics"]["epochs"][0]["steps"] > at, "the stop was not inside epoch 1"

# options that cannot go together fail cleanly on every rank (exit status 2, no hang)
assert cnn.main(tiny + ["--algorithm", "dense", "--bits", "4"]) == 2
# resuming a finished run says so, exits 0 and appends no second record
assert cnn.main(cnn_args + ["--epochs", "1", "--resume", str(d / "cnn.ckpt"),
                            "--output", str(d / "again.jsonl")]) == 0
assert not (d / "again.jsonl").exists()
# a data set missing on every rank, then on rank 1 only: one line on rank 0, exit 2, no hang
nowhere = ["--no-progress", "--threads", "1", "--dataset", "cifar10", "--width", "2",
           "--depth", "1", "--epochs", "1", "--batch-size", "8"]
assert cnn.main(nowhere + ["--data-home", str(d / "nowhere")]) == 2
assert cnn.main(nowhere + ["--data-home", str(d if rank == 0 else d / "nowhere")]) == 2
MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.Get_rank() == 0:
    print("DEEP-APPS OK", flush=True)
