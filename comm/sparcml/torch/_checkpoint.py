"""``DistributedOptimizer.state_dict`` / ``load_state_dict``: the wrapped optimizer's state in
PyTorch's own layout, plus this rank's sparcml state.

``state_dict()`` returns the wrapped optimizer's dict (``state``, ``param_groups``: what
``torch.optim.Optimizer.load_state_dict`` of a plain optimizer takes) with one more entry,
``"sparcml"``: the configuration, rank and size, the step count, the error-feedback memory (a
residual per bucket: they differ between ranks, so save one state per rank) and the quantizer's
RNG state. ``load_state_dict()`` takes that, the layout of earlier releases (``{"optimizer":
..., "sparcml": ...}``), or a plain optimizer's state (no ``"sparcml"`` entry: loaded into the
wrapped optimizer; the memory and the step count stay as they are).
"""

from __future__ import annotations

from .._errors import SparcmlError

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
        "quantizer": None if q is None else q.state_dict(),
    }
    return out


def load_state_dict(opt, state: dict) -> None:
    if not isinstance(state, dict):
        raise SparcmlError(f"load_state_dict() takes a dict, got {type(state).__name__}")
    mine = state.get("sparcml")
    if mine is None:  # a plain optimizer's state
        opt.optimizer.load_state_dict(state)
        return
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
    if opt.compression.quantizer is not None:
        opt.compression.quantizer.load_state_dict(mine["quantizer"])
    opt._step = int(mine["step"])
