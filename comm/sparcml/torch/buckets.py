"""Gradient buckets: parameters cut into flat host buffers, in the order backward fills them.

Package-internal: :class:`~sparcml.torch.DistributedOptimizer` builds them once. A bucket
holds consecutive parameters of one dtype, in reverse registration order (roughly the order in
which ``backward()`` produces their gradients); a new bucket starts whenever ``bucket_bytes``
are full or the dtype changes. A parameter is never split.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from ..context import TrafficStats
from ..errors import IncompatibleOptionsError, UnsupportedDtypeError
from ..vector import SparseVector

__all__ = ["Bucket", "named_parameters", "make_buckets", "gather_gradients", "scatter_gradients",
           "owner", "check_unowned", "claim", "release"]

_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
# id(parameter) -> (weakref to it, weakref to the DistributedOptimizer whose hooks it carries):
# one reduction per gradient (tensors compare element-wise, so no WeakKeyDictionary)
_OWNERS: dict = {}


@dataclass
class Bucket:
    index: int
    params: list
    names: list
    offsets: list
    numel: int
    dtype: np.dtype
    host: torch.Tensor                      # flat host buffer (pinned for accelerator models)
    flat: np.ndarray                        # the same memory as NumPy
    ready: set = field(default_factory=set)  # ids of parameters whose gradient is accumulated
    request: object = None
    sent: SparseVector | None = None        # this step's contribution as received (tests, stats)
    values_sent: int = 0
    full: bool = False                      # this step sent the full gradient
    compress_seconds: float = 0.0
    traffic: TrafficStats = field(default_factory=TrafficStats)

    def name_of(self, param) -> str:
        return self.names[[id(p) for p in self.params].index(id(param))]


def named_parameters(optimizer, named) -> list[tuple[str, torch.Tensor]]:
    """The optimizer's parameters that need a gradient, in ``param_groups`` order, named by
    ``named`` (``model.named_parameters()``) or ``param.<i>``."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    if len({id(p) for p in params}) != len(params):
        raise IncompatibleOptionsError("a parameter appears twice in the optimizer's "
                                       "param_groups")
    if named is None:
        return [(f"param.{i}", p) for i, p in enumerate(params)]
    name_of = {}
    for name, p in list(named):
        if not isinstance(p, torch.Tensor):
            raise IncompatibleOptionsError(
                f"named_parameters must yield (name, tensor) pairs; {name!r} is a "
                f"{type(p).__name__}; pass model.named_parameters()")
        name_of.setdefault(id(p), name)
    missing = [i for i, p in enumerate(params) if id(p) not in name_of]
    if missing:
        raise IncompatibleOptionsError(
            f"{len(missing)} parameter(s) of the optimizer (param_groups positions "
            f"{missing[:5]}) are not in named_parameters; pass the model's "
            f"named_parameters() that the optimizer was built from")
    return [(name_of[id(p)], p) for p in params]


def make_buckets(named, bucket_bytes: int) -> list[Bucket]:
    """Cut ``named`` parameters into buckets (see the module docstring) with host buffers."""
    pinned = any(p.device.type != "cpu" for _, p in named) and torch.cuda.is_available()
    groups: list[list[tuple[str, torch.Tensor]]] = []
    nbytes = 0
    for name, p in reversed(named):  # backward produces the last layers' gradients first
        if p.dtype not in _DTYPES:
            raise UnsupportedDtypeError(
                f"parameter {name!r} is {p.dtype}; sparcml reduces float32/float64 "
                f"gradients: keep float32 master weights (e.g. torch.autocast for the "
                f"compute)")
        if p.is_sparse:
            raise UnsupportedDtypeError(f"parameter {name!r} is a sparse tensor")
        if not groups or nbytes >= bucket_bytes or groups[-1][0][1].dtype != p.dtype:
            groups.append([])
            nbytes = 0
        groups[-1].append((name, p))
        nbytes += p.numel() * p.element_size()
    buckets = []
    for i, group in enumerate(groups):
        offsets, n = [], 0
        for _, p in group:
            offsets.append(n)
            n += p.numel()
        dtype = group[0][1].dtype
        host = torch.zeros(n, dtype=dtype, pin_memory=pinned)
        buckets.append(Bucket(i, [p for _, p in group], [nm for nm, _ in group], offsets, n,
                              np.dtype(_DTYPES[dtype]), host, host.numpy()))
    return buckets


def gather_gradients(b: Bucket) -> None:
    """Copy the bucket's gradients into its host buffer (zeros for a missing gradient)."""
    with torch.no_grad():
        for p, off in zip(b.params, b.offsets):
            dst = b.host[off:off + p.numel()]
            if p.grad is None:  # not used in this step's graph: contributes zeros
                dst.zero_()
            elif p.grad.is_sparse:
                raise UnsupportedDtypeError(
                    f"parameter {b.name_of(p)!r} has a sparse gradient; build the layer with "
                    f"sparse=False")
            else:
                dst.copy_(p.grad.reshape(-1))


def scatter_gradients(b: Bucket) -> None:
    """Write the host buffer back into the parameters' ``.grad``."""
    with torch.no_grad():
        for p, off in zip(b.params, b.offsets):
            src = b.host[off:off + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(src)


# -- which optimizer reduces a parameter ------------------------------------------------------

def owner(p):
    """The live DistributedOptimizer whose hooks ``p`` carries, or None."""
    entry = _OWNERS.get(id(p))
    if entry is None or entry[0]() is not p:
        return None
    return entry[1]()


def check_unowned(buckets: list[Bucket]) -> None:
    for key in [k for k, (pref, oref) in _OWNERS.items() if pref() is None or oref() is None]:
        del _OWNERS[key]
    for b in buckets:
        for name, p in zip(b.names, b.params):
            if owner(p) is not None:
                raise IncompatibleOptionsError(
                    f"parameter {name!r} is already reduced by another DistributedOptimizer; "
                    f"call remove_hooks() on that one first")


def claim(p, opt) -> None:
    _OWNERS[id(p)] = (weakref.ref(p), weakref.ref(opt))


def release(p, opt) -> None:
    if owner(p) is opt:
        del _OWNERS[id(p)]
