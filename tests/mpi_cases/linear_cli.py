"""sparc-linear's command line in one MPI job (P >= 1): a run stopped and resumed ends with the
same weights, bit for bit, as an uninterrupted one (stopping inside an epoch and at its end, and
on a SIGTERM to one rank);
--algorithm dense gives the same model up to summation order; records carry the per-epoch
metrics; bad input exits 2 with the same message on every rank.

Usage: ``mpiexec -n P python -m mpi4py linear_cli.py DIR``. Rank 0 prints the
cases planned and passed (``LINEAR-CLI-REPORT``: _mpi_checks.py).
"""

import io
import os
import signal
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import h5py
import numpy as np
from mpi4py import MPI

from _mpi_checks import done, plan, report
from sparcapps.interrupt import StopOnSignal
from sparcapps.linear.cli import main
from sparcapps.linear.io import load_model
from sparcapps.records import read_records

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
d = Path(sys.argv[1])
BAD_INPUT = {"not a sparcml-csr file": ["--data", str(d / "foreign.h5")],
             "n_features: checkpoint 8000, data 9000": ["--resume", str(d / "full.ckpt.h5"),
                                                        "--features", "9000"],
             "alpha: checkpoint": ["--resume", str(d / "full.ckpt.h5"), "--alpha", "0.5"],
             "no such checkpoint file": ["--resume", str(d / "nothing.h5")]}
plan("records", "resume finished run", "stop and resume", "SIGTERM", "dense baseline",
     *BAD_INPUT)
GB = 60  # global batch, divisible by 1..4
COMMON = ["--synth", "url", "--rows", "2000", "--features", "8000", "--synth-cache", str(d),
          "--epochs", "2", "--batch-size", str(GB // P), "--no-progress", "--seed", "3"]
STEPS_PER_EPOCH = None


def run(*extra, expect=0):
    err = io.StringIO()
    with redirect_stderr(err):
        code = main([*COMMON, *extra])
    assert code == expect, f"exit {code}, expected {expect}: {err.getvalue()}"
    comm.Barrier()  # rank 0 writes the files
    return err.getvalue()


def model(name):
    m = load_model(d / name)
    return m.coef_, m.intercept_, m.history_


# uninterrupted, with checkpoints along the way and a record
run("--save-model", str(d / "full.h5"), "--checkpoint-every-steps", "7", "--checkpoint",
    str(d / "full.ckpt.h5"), "--output", str(d / "r.jsonl"))
full = model("full.h5") if rank == 0 else None
records, problems = read_records([d / "r.jsonl"])
assert not problems and len(records) == 1
rec = records[0]
assert rec["app"] == "sparc-linear" and rec["P"] == P and rec["N"] == 8000
epochs = rec["metrics"]["epochs"]
assert [e["epoch"] for e in epochs] == [1, 2]
for key in ("loss", "train_accuracy", "test_accuracy", "compute_seconds", "comm_seconds",
            "bytes_sent", "gradient_density", "wall_seconds", "eval_seconds"):
    assert all(key in e for e in epochs), key
assert 0.5 < epochs[-1]["test_accuracy"] <= 1.0
assert epochs[0]["wall_seconds"] < epochs[1]["wall_seconds"]
STEPS_PER_EPOCH = epochs[0]["steps"]
done("records")

# resuming the finished run (its checkpoint has all --epochs): says so and what the checkpoint
# holds on rank 0, trains nothing, appends no record, exit 0
said = io.StringIO()
with redirect_stdout(said):
    run("--resume", str(d / "full.ckpt.h5"), "--output", str(d / "r.jsonl"))
said = comm.allgather(said.getvalue())
assert "full.ckpt.h5 is a finished run (2 epochs; after the last: loss " in said[0], said[0]
assert "nothing to train, no record appended" in said[0] and "epoch 1:" not in said[0], said[0]
assert all(s == "" for s in said[1:]), said
assert len(read_records([d / "r.jsonl"])[0]) == 1
done("resume finished run")

# stopped inside epoch 1, resumed, stopped at the end of epoch 1, resumed to the end
ck = str(d / "stop.ckpt.h5")
out = run("--stop-after", "5", "--checkpoint", ck)
written = os.stat(ck).st_mtime_ns if rank == 0 else None
run("--resume", ck, "--stop-after", str(STEPS_PER_EPOCH))  # no --checkpoint: into ck itself
if rank == 0:
    assert os.stat(ck).st_mtime_ns > written, "a resumed run checkpoints into its --resume file"
    assert not Path("sparc-linear.ckpt.h5").exists(), "checkpointed elsewhere"
run("--resume", ck, "--save-model", str(d / "resumed.h5"), "--checkpoint", ck)
if rank == 0:
    resumed = model("resumed.h5")
    assert np.array_equal(resumed[0], full[0]), "resumed weights differ from uninterrupted"
    assert np.array_equal(resumed[1], full[1])
    assert [h["loss"] for h in resumed[2]] == [h["loss"] for h in full[2]]
    assert [h["test_accuracy"] for h in resumed[2]] == [h["test_accuracy"] for h in full[2]]
done("stop and resume")

# SIGTERM to one rank (Slurm's warning, as mpiexec forwards it) in the middle of epoch 1: every
# rank stops after the same step with a checkpoint and exits 128 + 15; the resumed run ends
# with the uninterrupted weights, bit for bit
real_poll = StopOnSignal.poll
polls = [0]


def poll_with_a_signal(self):
    self.check_every_s = 0.0  # agree at every step: the stop comes at the signalled step
    polls[0] += 1
    if rank == P - 1 and polls[0] == 9:
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next line
    return real_poll(self)


StopOnSignal.poll = poll_with_a_signal
ck = str(d / "signal.ckpt.h5")
out = run("--checkpoint", ck, expect=128 + signal.SIGTERM)
StopOnSignal.poll = real_poll
stopped_at = comm.allgather(polls[0])
assert stopped_at == [9] * P, stopped_at
run("--resume", ck, "--save-model", str(d / "signalled.h5"), "--checkpoint", ck)
if rank == 0:
    again = model("signalled.h5")
    assert np.array_equal(again[0], full[0]) and np.array_equal(again[1], full[1])
    assert [h["loss"] for h in again[2]] == [h["loss"] for h in full[2]]
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handler was left installed"
done("SIGTERM")

# the dense baseline: same code, one flag, same model up to summation order
run("--algorithm", "dense", "--save-model", str(d / "dense.h5"))
run("--algorithm", "ssar_split_allgather", "--bits", "8", "--save-model", str(d / "q.h5"))
if rank == 0:
    dense = model("dense.h5")
    np.testing.assert_allclose(dense[0], full[0], rtol=1e-4, atol=1e-6 * np.abs(full[0]).max())
    assert np.isfinite(model("q.h5")[0]).all()
done("dense baseline")

# bad input: exit 2 on every rank with the same message, nothing hangs
if rank == 0:
    with h5py.File(d / "foreign.h5", "w") as f:
        f["x"] = np.arange(3)
comm.Barrier()
for needle, extra in BAD_INPUT.items():
    if extra[0] == "--data":
        saved = COMMON[:]
        COMMON[:6] = []  # drop --synth url --rows N --features F
        msg = run(*extra, expect=2)
        COMMON[:] = saved
    else:
        msg = run(*extra, expect=2)
    every = comm.allgather(msg)
    assert needle in every[0], every[0]
    assert all(m == "" for m in every[1:]), "only rank 0 prints the error"
    done(needle)

report("LINEAR-CLI")
sys.exit(0)
