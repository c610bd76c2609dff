"""Gradient buckets: parameters cut into flat host buffers, in the order backward fills them.

Package-internal: :class:`~sparcml.torch.DistributedOptimizer` builds them once. A bucket
holds consecutive parameters of one dtype, in reverse registration order (roughly the order in
which ``backward()`` produces their gradients); a new bucket starts whenever ``bucket_bytes``
are full or the communication dtype changes. A parameter is never split.

Communication dtype: float32 and float64 gradients travel as they are; float16 and bfloat16
ones travel as float32 (:data:`COMM_DTYPES`): the wire format and the Numba kernels take
float32/float64, a sum of P half-precision values overflows at 65504 (float16) or loses all but
8 bits (bfloat16), and the error-feedback residual must keep what a half could not hold. The
host buffer costs twice the parameter bytes; the network carries what the compressor and
quantizer send, not the parameter dtype.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from .._runtime.context import TrafficStats
from .._errors import IncompatibleOptionsError, UnsupportedDtypeError
from .._vector import SparseVector

__all__ = ["Bucket", "named_parameters", "make_buckets", "gather_gradients", "scatter_gradients",
           "owner", "check_unowned", "claim", "release", "COMM_DTYPES", "comm_dtype",
           "pin_host_buffers", "modified_since_gather"]

#: parameter dtype -> the dtype its gradient travels in (see the module docstring)
COMM_DTYPES = {torch.float32: torch.float32, torch.float64: torch.float64,
               torch.float16: torch.float32, torch.bfloat16: torch.float32}
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
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
    ready: dict = field(default_factory=dict)  # id(parameter) -> backward passes accumulated
    versions: list = field(default_factory=list)  # (id, _version) of each .grad when gathered
    request: object = None
    sent: SparseVector | None = None        # this step's contribution as received (tests, stats)
    values_sent: int = 0
    full: bool = False                      # this step sent the full gradient
    finite: bool = True                     # this step's gradient held no Inf/NaN
    compress_seconds: float = 0.0
    to_host_bytes: int = 0                  # copied between the parameters and the host this
    to_device_bytes: int = 0                # step (the host path's staging; the device path's)
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


def comm_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype in which a gradient of ``dtype`` travels; UnsupportedDtypeError otherwise."""
    if dtype not in COMM_DTYPES:
        raise UnsupportedDtypeError(
            f"parameter {name!r} is {dtype}; sparcml reduces float16/bfloat16/float32/float64 "
            f"gradients")
    return COMM_DTYPES[dtype]


def pin_host_buffers(devices, cuda_available: bool) -> bool:
    """Whether host buffers are pinned: some tensor lives on an accelerator (a device type
    other than "cpu" and "meta") and CUDA is there to pin memory for it."""
    return cuda_available and any(d.type not in ("cpu", "meta") for d in devices)


def make_buckets(named, bucket_bytes: int) -> list[Bucket]:
    """Cut ``named`` parameters into buckets (see the module docstring) with host buffers."""
    pinned = pin_host_buffers([p.device for _, p in named], torch.cuda.is_available())
    groups: list[list[tuple[str, torch.Tensor]]] = []
    nbytes = 0
    last = None
    for name, p in reversed(named):  # backward produces the last layers' gradients first
        wire = comm_dtype(name, p.dtype)
        if p.is_sparse:
            raise UnsupportedDtypeError(f"parameter {name!r} is a sparse tensor")
        if not groups or nbytes >= bucket_bytes or wire != last:
            groups.append([])
            nbytes = 0
        last = wire
        groups[-1].append((name, p))
        nbytes += p.numel() * wire.itemsize
    buckets = []
    for i, group in enumerate(groups):
        offsets, n = [], 0
        for _, p in group:
            offsets.append(n)
            n += p.numel()
        dtype = COMM_DTYPES[group[0][1].dtype]
        host = torch.zeros(n, dtype=dtype, pin_memory=pinned)
        buckets.append(Bucket(i, [p for _, p in group], [nm for nm, _ in group], offsets, n,
                              np.dtype(_NUMPY[dtype]), host, host.numpy()))
    return buckets


def gather_gradients(b: Bucket) -> None:
    """Copy the bucket's gradients into its host buffer (zeros for a missing gradient; half
    precision cast up), noting each gradient's identity and version in ``b.versions``."""
    b.versions = [None if p.grad is None else (id(p.grad), p.grad._version) for p in b.params]
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
                b.to_host_bytes += p.grad.numel() * p.grad.element_size()


def modified_since_gather(b: Bucket) -> bool:
    """True when a gradient of ``b`` was replaced or changed in place after
    :func:`gather_gradients` (``GradScaler.unscale_``, ``clip_grad_norm_`` before the reduction
    finished): writing the reduced gradient back would undo that change."""
    now = [None if p.grad is None else (id(p.grad), p.grad._version) for p in b.params]
    return now != b.versions


def scatter_gradients(b: Bucket) -> None:
    """Write the host buffer back into the parameters' ``.grad`` (cast to their dtype)."""
    with torch.no_grad():
        for p, off in zip(b.params, b.offsets):
            src = b.host[off:off + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(src)
            b.to_device_bytes += src.numel() * src.element_size()


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
