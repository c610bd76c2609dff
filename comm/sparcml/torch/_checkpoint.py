"""``DistributedOptimizer.state_dict`` / ``load_state_dict``: the wrapped optimizer's state in
PyTorch's own layout, plus this rank's sparcml state.

``state_dict()`` returns the wrapped optimizer's dict (``state``, ``param_groups``: what
``torch.optim.Optimizer.load_state_dict`` of a plain optimizer takes) with one more entry,
``"sparcml"``: the configuration, rank and size, the step count, the error-feedback memory (a
residual per bucket, DGC's velocities: they differ between ranks, so save one state per rank),
the compressor's state (PowerSGD's warm-start Q, signum's momentum, the step counts of random-k
and of DGC's warm-up) and the quantizer's RNG state: a run resumed from it continues bitwise as
the uninterrupted one. ``load_state_dict()`` takes that, the layout of earlier releases (``{"optimizer":
..., "sparcml": ...}``), or a plain optimizer's state (no ``"sparcml"`` entry: loaded into the
wrapped optimizer; the memory and the step count stay as they are).
"""

from __future__ import annotations

from .._errors import SparcmlError
from .._runtime.agreement import raise_everywhere

__all__ = ["state_dict", "load_state_dict", "config"]


def config(opt) -> dict:
    """What must match for a saved state to be loaded."""
    return {"compression": opt.compression.describe(), "bucket_bytes": opt.bucket_bytes,
            "warmup_steps": opt.warmup_steps, "seed": opt.seed,
            "buckets": [b.numel for b in opt._buckets]}


def state_dict(opt) -> dict:
    q = opt.compression.quantizer
    out = dict(opt.optimizer.state_dict())
    out["sparcml"] = {
        "config": config(opt), "rank": opt.rank, "size": opt.size, "step": opt._step,
        "memory": opt.compression.memory.state_dict(),
        "compressor": opt.compression.compressor.state_dict(),
        "quantizer": None if q is None else q.state_dict(),
    }
    return out


def load_state_dict(opt, state: dict) -> None:
    """Load ``state`` on every rank of the optimizer's communicator, or on none (collective).

    Each rank checks its own state and loads it (a snapshot of what it had kept aside); then
    the ranks agree: when any rank's state does not fit (another rank's residuals, as when
    every rank loads rank 0's file; other options; another step count than the others'),
    every rank restores its snapshot and raises the same :class:`SparcmlError` naming the
    failing ranks, so that no rank goes on alone and the next step cannot hang."""
    error = None
    snapshot = None
    step = -1
    try:
        snapshot = _snapshot(opt)
        step = _load_local(opt, state)
    except Exception as exc:  # noqa: BLE001 - agreed on below, whatever its class
        error = exc
    try:
        raise_everywhere(opt.comm, error)
        steps = opt.comm.allgather(step) if opt.size > 1 else [step]
        if step >= 0 and len(set(steps)) > 1:
            by_step: dict[int, list[int]] = {}
            for r, s in enumerate(steps):
                by_step.setdefault(s, []).append(r)
            raise SparcmlError(
                "the ranks loaded states of different steps ("
                + "; ".join(f"step {s}: rank{'s' if len(rs) > 1 else ''} "
                            f"{', '.join(map(str, rs))}" for s, rs in sorted(by_step.items()))
                + "): give every rank its own state from the same checkpoint")
    except BaseException:
        if snapshot is not None:
            _restore(opt, snapshot)
        raise


def _load_local(opt, state) -> int:
    """Check and load this rank's ``state``; its step count (-1 for a plain optimizer's)."""
    if not isinstance(state, dict):
        raise SparcmlError(f"load_state_dict() takes a dict, got {type(state).__name__}")
    mine = state.get("sparcml")
    if mine is None:  # a plain optimizer's state
        opt.optimizer.load_state_dict(state)
        return -1
    if mine.get("config") != config(opt):
        raise SparcmlError(f"the state was saved with {mine.get('config')}, this optimizer "
                           f"has {config(opt)}; use the same options and model")
    if (mine["rank"], mine["size"]) != (opt.rank, opt.size):
        raise SparcmlError(
            f"the state holds rank {mine['rank']} of {mine['size']}'s residuals; this is "
            f"rank {opt.rank} of {opt.size}: resume with the same number of ranks and "
            f"give each rank its own state")
    inner = state["optimizer"] if "optimizer" in state else {
        k: v for k, v in state.items() if k != "sparcml"}
    opt.optimizer.load_state_dict(inner)
    opt.compression.memory.load_state_dict(mine["memory"])
    if mine.get("compressor") is not None:  # absent in the states of earlier releases
        opt.compression.compressor.load_state_dict(mine["compressor"])
    if opt.compression.quantizer is not None:
        opt.compression.quantizer.load_state_dict(mine["quantizer"])
    opt._step = int(mine["step"])
    return opt._step


def _snapshot(opt) -> dict:
    import copy

    q = opt.compression.quantizer
    return {"optimizer": copy.deepcopy(opt.optimizer.state_dict()),
            "memory": copy.deepcopy(opt.compression.memory.state_dict()),
            "compressor": copy.deepcopy(opt.compression.compressor.state_dict()),
            "quantizer": None if q is None else copy.deepcopy(q.state_dict()),
            "step": opt._step}


def _restore(opt, snapshot: dict) -> None:
    opt.optimizer.load_state_dict(snapshot["optimizer"])
    opt.compression.memory.load_state_dict(snapshot["memory"])
    opt.compression.compressor.load_state_dict(snapshot["compressor"])
    if opt.compression.quantizer is not None:
        opt.compression.quantizer.load_state_dict(snapshot["quantizer"])
    opt._step = snapshot["step"]
