"""A DDP communication hook: sparcml's compression and sparse allreduce under
``torch.nn.parallel.DistributedDataParallel``.

Usage (every rank; the process group is DDP's own, here gloo, and carries only DDP's parameter
broadcast: the gradients travel over MPI, beside it)::

    from torch.nn.parallel import DistributedDataParallel as DDP
    from sparcml.compression import Compression, TopKCompressor
    from sparcml.torch import SparcmlHookState, init_process_group, sparcml_hook

    init_process_group()                 # gloo, rank and size from MPI.COMM_WORLD
    ddp = DDP(model)
    ddp.register_comm_hook(SparcmlHookState(Compression(TopKCompressor(density=0.01))),
                           sparcml_hook)

What :func:`sparcml_hook` does with each bucket DDP hands it (a ``GradBucket``: a flat buffer of
gradients, in DDP's bucket order, which is the same on every rank):

(On the device path, :mod:`._device`: for CUDA buckets and top-k, random-k, threshold or DGC
without a quantizer, step 2's memory and selection run on the device in the hook itself and only
the k entries cross to the host; the result is written into the buffer on the device.)

1. the buffer goes to a host array (itself for a CPU float32/float64 buffer; else a float32 or
   float64 copy, pinned for an accelerator; half precision travels as float32, as in
   :mod:`.buckets`);
2. sparcml's communication thread (the one of :func:`sparcml.iallreduce` and
   :class:`~sparcml.torch.DistributedOptimizer`) reduces it with the state's compression --
   memory (error feedback per bucket index), compressor, quantizer, allreduce algorithm
   (:func:`~.reduction.reduce_flat`) -- while ``backward()`` goes on; the step's last bucket,
   which has nothing left to overlap with, is reduced in the hook itself, in its place in the
   thread's order (as the optimizer's ``synchronize()`` reduces its last);
3. the sum divided by P is written back into the buffer; when the step's last bucket is
   reduced, the ranks agree on buckets that held an Inf or NaN on any rank (those become NaN on
   every rank, so ``GradScaler`` skips the step everywhere; see :mod:`.reduction`) and every
   bucket's future completes with its buffer, which DDP copies into the ``.grad`` fields.

With the same compression and seed this is the same computation as
:class:`~sparcml.torch.DistributedOptimizer` whenever the buckets hold the same parameters in
the same order (tested). DDP rebuilds its buckets after the first iteration (in the order the
gradients came): the compression's state then moves with the parameters into the new buckets
(:meth:`~sparcml.compression.Compression.split_state` per parameter, joined again per new
bucket): error-feedback residuals, DGC velocities, signum momenta, PowerSGD's warm-start
``Q`` per matrix and the step counts (random-k, DGC's warm-up). Each bucket's parameter shapes
go to the compressor (PowerSGD compresses each matrix on its own).
"""

from __future__ import annotations

import socket

import numpy as np
import torch
from mpi4py import MPI

from .._runtime.agreement import agree_on_lines, capture
from ..compression._objects import Compression
from .._options import Options
from .._runtime.context import TrafficStats
from .._errors import IncompatibleOptionsError, UnsupportedDtypeError
from .._runtime.nonblocking import call, submit
from ._buckets import COMM_DTYPES, pin_host_buffers
from ._device import DevicePath, supported as device_supported
from ._reduction import NONFINITE, agree_flags, reduce_flat

__all__ = ["SparcmlHookState", "sparcml_hook", "init_process_group"]


class SparcmlHookState:
    """The state of :func:`sparcml_hook`: a :meth:`~sparcml.compression.Compression.fresh`
    copy of ``compression`` (default ``Compression()``: full gradients, the default algorithm)
    whose quantizer is seeded by ``seed`` (the same on every rank), the MPI communicator
    ``comm`` (default ``COMM_WORLD``: its ranks must be the process group's, in the same
    order), ``warmup_steps`` (the first N steps send full gradients through the dense
    baseline, as the optimizer's) and ``options`` (a :class:`sparcml.Options` for every
    reduction, replacing ``compression.options``; default: the compression's, else the
    process defaults). ``device_path``: as :class:`~sparcml.torch.DistributedOptimizer`'s
    (default: compress on the device for CUDA buckets when the compression is top-k, random-k,
    threshold or DGC without a quantizer; only the k entries and the result cross to the host).

    Collective: every rank builds it with the same options (else
    :class:`~sparcml.RankMismatchError`, or any rank's invalid option, on every rank).
    Attributes: ``compression``, ``step`` (steps reduced so far), ``traffic``
    (:class:`~sparcml.TrafficStats` of this rank, cumulative).
    """

    def __init__(self, compression: Compression | None = None, *, comm=None,
                 warmup_steps: int = 0, seed: int = 0, options: Options | None = None,
                 device_path: bool | None = None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        lines: list[str] = []
        with capture() as failed:
            compression = Compression() if compression is None else compression
            if not isinstance(compression, Compression):
                raise IncompatibleOptionsError(
                    f"compression must be a sparcml.compression.Compression, got "
                    f"{type(compression).__name__}")
            if options is not None:
                compression = compression.with_options(options)
            for name, value in (("warmup_steps", warmup_steps), ("seed", seed)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise IncompatibleOptionsError(f"{name} must be an integer >= 0, "
                                                   f"got {value!r}")
            if device_path not in (None, True, False):
                raise IncompatibleOptionsError(f"device_path must be None, True or False, "
                                               f"got {device_path!r}")
            why = device_supported(compression)
            if device_path and why is not None:
                raise IncompatibleOptionsError(
                    f"device_path=True takes top-k, random-k, threshold or DGC without a "
                    f"quantizer, not {why}; leave device_path unset for the host path")
            lines = [f"compression={compression.describe()} warmup_steps={warmup_steps} "
                     f"seed={seed}" + ("" if device_path is None
                                       else f" device_path={device_path}")]
        agree_on_lines(self.comm, lines, "the options of SparcmlHookState", failed.error)
        self.compression = compression.fresh(seed=seed)
        self.warmup_steps = warmup_steps
        self._device_path = device_path
        self._device = (None if device_path is False or device_supported(self.compression)
                        else DevicePath(self.compression, self.rank, self.size))
        self.step = 0
        self.traffic = TrafficStats()
        self._pending: list[_Bucket] = []
        self._layout: dict = {}  # bucket index -> (parameter ids, their sizes)
        self._pieces = None      # per-parameter state while DDP's buckets are rebuilt

    def __repr__(self) -> str:
        return (f"SparcmlHookState({self.compression.describe()}, step={self.step}, "
                f"P={self.size})")


class _Bucket:
    __slots__ = ("future", "buffer", "host", "index", "finite", "traffic", "result",
                 "to_host_bytes", "to_device_bytes")

    def __init__(self, future, buffer, host, index, traffic=None):
        self.future, self.buffer, self.host, self.index = future, buffer, host, index
        self.finite = True
        self.traffic, self.result = traffic, None
        self.to_host_bytes = self.to_device_bytes = 0


def sparcml_hook(state, bucket):  # DDP rejects string annotations: none here
    """DDP communication hook (``ddp.register_comm_hook(state, sparcml_hook)``): reduce the
    ``torch.distributed.GradBucket`` with ``state``'s (a :class:`SparcmlHookState`)
    compression over MPI; returns a ``torch.futures.Future[torch.Tensor]`` that holds the
    averaged buffer. See the module docstring for the steps."""
    if not isinstance(state, SparcmlHookState):
        raise IncompatibleOptionsError(f"sparcml_hook's state must be a SparcmlHookState, "
                                       f"got {type(state).__name__}")
    buf = bucket.buffer()
    wire = COMM_DTYPES.get(buf.dtype)
    if wire is None:
        raise UnsupportedDtypeError(f"sparcml_hook reduces float16/bfloat16/float32/float64 "
                                    f"gradients, got {buf.dtype}")
    index = bucket.index()
    params = bucket.parameters()
    layout = (tuple(id(p) for p in params), tuple(p.numel() for p in params))
    shapes = [tuple(p.shape) for p in params]
    old = None
    if state._layout.get(index, layout) != layout:
        old = dict(state._layout)  # the layouts the residuals were kept in
    state._layout[index] = layout
    if state._device is not None and (state._device_path or buf.device.type == "cuda"):
        return _hook_on_device(state, bucket, buf, wire, index, old, layout, shapes)
    if buf.device.type == "cpu" and buf.dtype == wire and buf.is_contiguous():
        host = buf
    else:
        host = torch.empty(buf.numel(), dtype=wire, pin_memory=pin_host_buffers(
            [buf.device], torch.cuda.is_available()))
        host.copy_(buf.reshape(-1))
    item = _Bucket(torch.futures.Future(), buf, host, index)
    state._pending.append(item)
    pending = None
    if bucket.is_last():
        pending, state._pending = state._pending, []
    full = state.step < state.warmup_steps and state.compression.lossy
    _launch(state, f"sparcml_hook bucket {index}", pending, _reduce, state, item, full,
            state.step == 0, (old, layout) if old is not None else None, pending, shapes)
    return item.future


def _hook_on_device(state, bucket, buf, wire, index, old, layout, shapes):
    """:func:`sparcml_hook` on the device path (:mod:`._device`): compensate and select here,
    on the device; the exchange of the k entries on the communication thread, which writes the
    averaged result into the buffer on the device."""
    device = state._device
    if old is not None:  # a rebuilt bucket: its parameters' state, through the host memory
        if state._pieces is None:
            device.export()
        _move_state(state, index, old, layout)
        device.residual.pop(index, None)
        device.velocity.pop(index, None)
    item = _Bucket(torch.futures.Future(), buf, None, index, state.traffic)
    full = state.step < state.warmup_steps and state.compression.lossy
    vec, item.finite = device.compress(buf.reshape(-1).to(wire), index, shapes, item,
                                       full=full)
    state._pending.append(item)
    pending = None
    if bucket.is_last():
        pending, state._pending = state._pending, []
        state._pieces = None
    _launch(state, f"sparcml_hook bucket {index}", pending, _exchange, state, item, vec, full,
            state.step == 0, pending)
    return item.future


def _launch(state: SparcmlHookState, label: str, pending, fn, *args) -> None:
    """Reduce a bucket: on the communication thread while ``backward()`` goes on, or, for the
    step's last bucket (``pending``: the step's buckets), here on the calling thread, in its
    place in the thread's order (:func:`sparcml._runtime.nonblocking.call`): nothing is left
    to overlap it with, and DDP waits for its future next, so the hand-off to the thread and
    back would only add two wake-ups. Either way an error reaches the step's futures, which
    DDP raises where it waits for them."""
    if pending is None:
        submit(state.comm, label, fn, *args)
        return
    state.step += 1
    try:
        call(state.comm, fn, *args)
    except Exception as exc:  # noqa: BLE001 - fn gave it to the futures; DDP raises it
        _fail_step(pending, exc)


def _exchange(ctx, state: SparcmlHookState, item: _Bucket, vec, full: bool, check: bool,
              pending) -> None:
    """On the communication thread, the device path: exchange one bucket's selection; after
    the step's last, agree on non-finite buckets and complete every future of the step."""
    def finish(it: _Bucket, nonfinite: bool) -> None:
        out, _ = state._device.averaged(it.result, it.buffer.numel(),
                                        COMM_DTYPES[it.buffer.dtype], it.buffer.device, it,
                                        nonfinite)
        it.buffer.copy_(out.view_as(it.buffer))

    try:
        item.result = state._device.exchange(ctx, item, vec, full=full, check=check)
        if pending is not None:
            _complete_step(ctx, pending, finish)
    except BaseException as exc:
        _fail_step(pending or [item], exc)
        raise


def _complete_step(ctx, pending, finish) -> None:
    """After a step's last bucket (communication thread): agree with every rank on which
    buckets held a non-finite value, then ``finish(bucket, nonfinite)`` each and complete its
    future with its buffer."""
    flags = agree_flags(ctx, np.array([0 if it.finite else NONFINITE for it in pending],
                                      dtype=np.uint8))
    for it, flag in zip(pending, flags):
        finish(it, bool(flag & NONFINITE))
        it.future.set_result(it.buffer)


def _fail_step(buckets, exc: BaseException) -> None:
    """Give ``exc`` to every future of ``buckets`` not completed yet (the caller re-raises)."""
    for it in buckets:
        if not it.future.done():
            it.future.set_exception(exc)


def _move_state(state: SparcmlHookState, key, old_layouts: dict, layout) -> None:
    """DDP rebuilt bucket ``key`` as ``layout``: give it the compression state of its
    parameters as it was kept under ``old_layouts`` (residuals, DGC velocities, signum
    momenta, PowerSGD's Q, step counts). The per-parameter pieces are cut once per rebuild,
    before any bucket of the new layout updates its state; a parameter without a piece (it
    was in no old bucket) leaves the bucket's state empty."""
    compression = state.compression
    if state._pieces is None:
        state._pieces = {}
        for k, (ids, sizes) in old_layouts.items():
            state._pieces.update(zip(ids, compression.split_state(k, sizes)))
    ids, _ = layout
    compression.join_state(key, [state._pieces.get(pid, {}) for pid in ids])


def _reduce(ctx, state: SparcmlHookState, item: _Bucket, full: bool, check: bool, moved,
            pending, shapes=None) -> None:
    """On the communication thread: reduce one bucket; after the step's last, agree on
    non-finite buckets and complete every future of the step."""
    try:
        if moved is not None:
            _move_state(state, item.index, *moved)
        flat = item.host.numpy()
        r, item.finite = reduce_flat(ctx, state.compression, flat, item.index, full=full,
                                     check=check, stats=state.traffic, shapes=shapes)
        r.result.to_dense(out=flat)
        if state.size > 1:
            np.divide(flat, state.size, out=flat)
        if pending is None:
            return
        state._pieces = None
        _complete_step(ctx, pending, _host_to_buffer)
    except BaseException as exc:
        _fail_step(pending or [item], exc)
        raise


def _host_to_buffer(it: _Bucket, nonfinite: bool) -> None:
    """The host path's end of a bucket: its averaged sum (NaN where some rank's gradient was
    not finite) into DDP's buffer."""
    if nonfinite:
        it.host.fill_(float("nan"))
    if it.host is not it.buffer:
        it.buffer.copy_(it.host.view_as(it.buffer))


def init_process_group(backend: str = "gloo", comm=None, **kwargs) -> None:
    """``torch.distributed.init_process_group`` over the ranks of ``comm`` (default
    ``COMM_WORLD``), for a script started by ``mpiexec``: rank and world size from MPI, and a
    TCP rendezvous at a free port of rank 0's host (127.0.0.1 when every rank runs on one
    host), shared over MPI. Collective. ``kwargs`` go to ``init_process_group`` (``timeout``).
    """
    import torch.distributed as dist

    comm = MPI.COMM_WORLD if comm is None else comm
    hosts = comm.allgather(socket.gethostname())
    addr = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
    port = None
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}",
                            rank=comm.Get_rank(), world_size=comm.Get_size(), **kwargs)
