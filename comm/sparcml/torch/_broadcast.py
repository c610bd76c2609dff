"""Start every rank from the same state: :func:`broadcast_parameters`,
:func:`broadcast_optimizer_state`."""

from __future__ import annotations

import torch
from mpi4py import MPI

from .._runtime.agreement import agree_on_lines, capture, raise_everywhere
from .._errors import RankMismatchError, UnsupportedDtypeError

__all__ = ["broadcast_parameters", "broadcast_optimizer_state"]


def _host_bytes(t: torch.Tensor):
    """A contiguous uint8 NumPy view of ``t``'s bytes on the host; True when it is a copy."""
    src = t.detach()
    host = src.cpu().contiguous().reshape(-1)
    copied = host.data_ptr() != src.data_ptr() if src.device.type == "cpu" else True
    return host.view(torch.uint8).numpy(), copied


def _tensors_of(obj) -> list[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.nn.Module):
        return list(obj.state_dict(keep_vars=True).items())
    if isinstance(obj, dict):
        return list(obj.items())
    return list(obj)


def _root(root, root_rank) -> int:
    """``root``, or Horovod's name for it, ``root_rank`` (not both)."""
    if root_rank is None:
        return root
    if root not in (0, root_rank):
        raise TypeError(f"root={root} and root_rank={root_rank}: pass one of them (root_rank "
                        f"is Horovod's name for root)")
    return root_rank


def broadcast_parameters(params, root: int = 0, comm=None, *, root_rank=None) -> None:
    """Overwrite, in place, every rank's tensors with ``root``'s: all ranks start equal.

    ``params``: an ``nn.Module`` (its ``state_dict``: parameters and buffers), a dict of name ->
    tensor, or an iterable of ``(name, tensor)`` pairs. Any dtype and device (accelerator
    tensors go through host memory). Collective over ``comm`` (default ``COMM_WORLD``): every
    rank must call with the same names, shapes and dtypes, in the same order, or every rank
    raises :class:`~sparcml.RankMismatchError` (a rank that passes something else than tensors:
    every rank raises its error). ``root_rank``: Horovod's name for ``root``.
    """
    root = _root(root, root_rank)
    comm = MPI.COMM_WORLD if comm is None else comm
    lines: list[str] = []
    with capture() as failed:
        items = _tensors_of(params)
        for name, t in items:
            if not isinstance(t, torch.Tensor):
                raise UnsupportedDtypeError(f"broadcast_parameters: {name!r} is a "
                                            f"{type(t).__name__}, expected a torch.Tensor")
        lines = [f"{n} {tuple(t.shape)} {t.dtype}" for n, t in items]
    agree_on_lines(comm, lines, "the tensors passed to broadcast_parameters", failed.error)
    if comm.Get_size() == 1:
        return
    with torch.no_grad():
        for _, t in items:
            if t.numel() == 0:
                continue
            host, copied = _host_bytes(t)
            comm.Bcast([host, MPI.BYTE], root=root)
            if copied:
                t.copy_(torch.from_numpy(host).view(t.dtype).reshape(t.shape))


def broadcast_optimizer_state(optimizer, root: int = 0, comm=None, *, root_rank=None) -> None:
    """Give every rank ``root``'s optimizer state (momentum buffers, step counts, lr).

    ``optimizer``: a ``torch.optim.Optimizer`` or a :class:`DistributedOptimizer` (its wrapped
    optimizer's state; the error-feedback memory is per rank and stays). Collective; the state
    travels pickled, so it suits models that fit comfortably in host memory. A rank that cannot
    load it: :class:`~sparcml.RankMismatchError` on every rank. ``root_rank``: Horovod's
    name for ``root``.
    """
    from ._optimizer import DistributedOptimizer

    root = _root(root, root_rank)
    comm = MPI.COMM_WORLD if comm is None else comm
    inner = optimizer.optimizer if isinstance(optimizer, DistributedOptimizer) else optimizer
    if comm.Get_size() == 1:
        return
    state = None
    if comm.Get_rank() == root:
        state = _to_cpu(inner.state_dict())
    state = comm.bcast(state, root=root)
    error = None
    try:
        inner.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as exc:
        error = RankMismatchError(
            f"cannot load the optimizer state of rank {root}: {exc}; build the same optimizer "
            f"(same parameter groups) on every rank")
        error.__cause__ = exc
    raise_everywhere(comm, error)  # every rank raises it, none goes on alone


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
