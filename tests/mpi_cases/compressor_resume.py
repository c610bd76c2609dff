"""sparc-cnn with a stateful compressor, checkpointed after epoch 1 and resumed to epoch 2,
against the same run uninterrupted: the parameters must be identical bit for bit (the
checkpoint holds the compressor's state: DGC's velocities and warm-up step count, PowerSGD's
warm-start Q, random-k's step count). Usage: ``python -m mpi4py compressor_resume.py DIR``;
rank 0 prints ``COMPRESSOR-RESUME <n> OK``.
"""

import sys
from pathlib import Path

from mpi4py import MPI

from sparcapps.deep import cnn
from sparcapps.records import read_records

rank = MPI.COMM_WORLD.Get_rank()
d = Path(sys.argv[1])
base = ["--no-progress", "--threads", "1", "--width", "4", "--batch-size", "32",
        "--bucket-mb", "0.01"]
cases = {"dgc": ["--compressor", "dgc", "--density", "0.05", "--density-warmup-steps", "40"],
         "powersgd": ["--compressor", "powersgd", "--powersgd-rank", "2"],
         "randomk": ["--compressor", "randomk", "--density", "0.05", "--shared-indices"]}
checked = 0
for name, flags in cases.items():
    ckpt = str(d / f"{name}.ckpt")
    out = {k: str(d / f"{name}-{k}.jsonl") for k in ("first", "resumed", "straight")}
    assert cnn.main(base + flags + ["--epochs", "1", "--checkpoint-every-epochs", "1",
                                    "--checkpoint", ckpt, "--output", out["first"]]) == 0
    assert cnn.main(base + flags + ["--epochs", "2", "--resume", ckpt,
                                    "--output", out["resumed"]]) == 0
    assert cnn.main(base + flags + ["--epochs", "2", "--output", out["straight"]]) == 0
    MPI.COMM_WORLD.Barrier()
    if rank == 0:
        (resumed,), _ = read_records([out["resumed"]])
        (straight,), _ = read_records([out["straight"]])
        assert resumed["metrics"]["params_sha256"] == straight["metrics"]["params_sha256"], \
            f"{name}: the resumed run differs from the uninterrupted one"
        assert [e["loss"] for e in resumed["metrics"]["epochs"]] == \
            [e["loss"] for e in straight["metrics"]["epochs"]], name
        checked += 1
if rank == 0:
    print(f"COMPRESSOR-RESUME {checked} OK", flush=True)
