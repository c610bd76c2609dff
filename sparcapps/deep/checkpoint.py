"""Checkpoints of the deep training apps: written by rank 0, atomically, resumable bitwise.

A checkpoint holds the model, every rank's :class:`~sparcml.torch.DistributedOptimizer` state
(momentum, error-feedback residuals, the compressor's state such as DGC's velocities and
PowerSGD's warm start, quantizer RNG), the epoch and step reached, the history so
far and, for a stop inside an epoch, each rank's running sums and the task's carried state. It
loads with ``torch.load(weights_only=True)``. Importing this module does not import torch.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "RESUMABLE", "FORMAT"]

# 2: the optimizer states of sparcml.torch with compression objects (a memory, not a TopK);
# 3: with the compressor's state (PowerSGD's Q, step counts, signum's momentum)
FORMAT = 3
# options that may change between a checkpointed run and its resumption
RESUMABLE = {"epochs", "output", "checkpoint", "checkpoint_every_epochs", "resume", "threads",
             "no_progress", "data_home", "run_id"}


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed here (other options, other P, unreadable file)."""


def _numpy_to_torch(obj):
    import torch  # the [torch] extra: not at --help

    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: _numpy_to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numpy_to_torch(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_numpy_to_torch(v) for v in obj)
    return obj


def _fingerprint(args) -> dict:
    return {k: v for k, v in sorted(vars(args).items()) if k not in RESUMABLE}


def save_checkpoint(path, comm, *, app, args, epoch, model, opt, history, wall, step=0,
                    partial=None):
    """Collective. ``epoch`` epochs done, and ``step`` batches of the next one; ``partial``
    (with ``step``): this rank's ``{"sums": [loss_sum, correct, count, seconds], "carry":
    task.carry()}`` of that epoch so far."""
    import torch  # the [torch] extra: not at --help

    states = comm.gather(_numpy_to_torch(opt.state_dict()), root=0)
    partials = comm.gather(partial, root=0)
    if comm.Get_rank() == 0:
        ckpt = {"app": app, "format": FORMAT, "epoch": epoch, "P": comm.Get_size(),
                "config": _fingerprint(args), "model": model.state_dict(),
                "optimizers": states, "history": history, "wall_seconds": wall,
                "step": step, "partials": partials if step else None}
        path = Path(path)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        torch.save(ckpt, tmp)
        os.replace(tmp, path)
    comm.Barrier()


def load_checkpoint(path, comm, *, app, args) -> dict:
    """The checkpoint at ``path`` if this run (``app``, P, options) can resume it; else
    :class:`CheckpointError` naming what differs."""
    import torch  # the [torch] extra: not at --help

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    except Exception as exc:  # the unpickler's errors on a file torch.save did not write
        raise CheckpointError(f"cannot read checkpoint {path}: not a file --checkpoint wrote "
                              f"({type(exc).__name__})") from exc
    if not isinstance(ckpt, dict) or "app" not in ckpt:
        raise CheckpointError(f"cannot read checkpoint {path}: not a file --checkpoint wrote "
                              f"(a torch file of something else)")
    if ckpt.get("app") != app:
        raise CheckpointError(f"{path} is a checkpoint of {ckpt.get('app')!r}, not {app}")
    if ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {ckpt.get('format')!r}, this "
                              f"version reads format {FORMAT}; resume it with the sparcml "
                              f"version that wrote it")
    if ckpt["P"] != comm.Get_size():
        raise CheckpointError(f"{path} was written by {ckpt['P']} ranks; resume with mpiexec "
                              f"-n {ckpt['P']} (the error-feedback residuals are per rank)")
    mine = _fingerprint(args)
    diff = {k: (ckpt["config"].get(k), v) for k, v in mine.items() if ckpt["config"].get(k) != v}
    if diff:
        raise CheckpointError(f"{path} was written with other options: "
                              + ", ".join(f"--{k.replace('_', '-')} {a!r} (now {b!r})"
                                          for k, (a, b) in diff.items()))
    return ckpt
