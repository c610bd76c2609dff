""":class:`DistributedOptimizer`: Horovod's wrapper, reducing gradient buckets during backward.

A little over 400 lines: the optimizer surface, the gradient hooks, ``synchronize`` and the
accumulation options are one state machine (which buckets are ready, launched, reduced) and
are read together; the buckets, the reduction on the communication thread and the checkpoint
layout live in :mod:`.buckets`, :mod:`.reduction` and :mod:`.checkpoint`.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections import OrderedDict

import numpy as np
import torch
from mpi4py import MPI

from .._runtime.agreement import agree_on_lines, capture
from ..compression._objects import Compression
from .._options import Options
from .._errors import IncompatibleOptionsError, SparcmlError
from .._runtime.nonblocking import call, submit
from . import _checkpoint as checkpoint, _legacy as legacy
from ._device import DevicePath, supported as device_supported
from ._buckets import (Bucket, check_unowned, claim, gather_gradients, make_buckets,
                       modified_since_gather, named_parameters as _named_parameters, release,
                       scatter_gradients)
from ._reduction import MODIFIED, NONFINITE, agree_flags, reduce_flat
from ._stats import CompressionStats

__all__ = ["DistributedOptimizer", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 4 << 20  # 1M float32 gradient values per bucket


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise IncompatibleOptionsError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _reduce_bucket(ctx, b: Bucket, compression: Compression, full: bool, check: bool):
    """On the communication thread: compress bucket ``b`` and allreduce it
    (:func:`~.reduction.reduce_flat`, which also notes whether it was finite).

    Runs in submission order, so every rank compresses and reduces its buckets in the same
    order; top-k and QSGD (Numba kernels, GIL released) overlap the rest of ``backward()``.
    The step's last bucket runs in ``synchronize()`` on the calling thread instead, in its
    place in that order (:func:`sparcml._runtime.nonblocking.call`).
    """
    r, b.finite = reduce_flat(ctx, compression, b.flat, b.index, full=full, check=check,
                              stats=b.traffic, shapes=[tuple(p.shape) for p in b.params])
    # a full gradient sent as it is lives in b.flat, which the result overwrites
    b.sent = r.sent if compression.lossy and not full else None
    b.values_sent, b.compress_seconds = r.values_sent, r.compress_seconds
    return r.result


def _exchange_bucket(ctx, b: Bucket, device: DevicePath, vec, full: bool, check: bool):
    """On the communication thread: the device path's exchange of the selected ``vec``."""
    result = device.exchange(ctx, b, vec, full=full, check=check)
    b.sent = vec if not full else None
    b.values_sent = vec.nnz
    return result


class DistributedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over all ranks.

    A ``torch.optim.Optimizer`` itself (LR schedulers, ``GradScaler``, step hooks take it):
    ``param_groups``, ``state`` and ``defaults`` are the wrapped optimizer's own objects.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Built on this rank's model; its parameters (those with ``requires_grad``) are reduced.
    named_parameters : iterable of (name, Parameter), optional
        ``model.named_parameters()``: names for error messages and the cross-rank check.
        Every parameter of ``optimizer`` must be named; default names ``param.<i>``.
    compression : sparcml.compression.Compression, optional
        Compressor (top-k per bucket, per chunk, or none), quantizer (a :class:`sparcml.QSGD`
        or none), memory (error feedback per bucket, or none) and allreduce algorithm. Default
        ``Compression()``: full gradients through :data:`sparcml.DEFAULT_ALGORITHM`;
        ``Compression.none()`` is the ``MPI_Allreduce`` baseline. The optimizer works on its
        own :meth:`~sparcml.compression.Compression.fresh` copy (``opt.compression``): an
        empty memory, and the quantizer's random rounding seeded by ``seed``.
    bucket_bytes : int
        Bytes of gradient per bucket (a parameter is never split; one larger than this is a
        bucket of its own). Smaller buckets start communicating earlier in ``backward()``.
    backward_passes_per_step : int
        Horovod's gradient accumulation: a bucket is reduced once each of its gradients has
        been accumulated this many times (``backward()`` calls) since the last step; the
        reduced gradient is the sum over the passes (scale the loss for a mean), averaged over
        the ranks. See also :meth:`no_sync`.
    warmup_steps : int
        The first N steps send full gradients through the dense baseline (no compressor,
        quantizer or memory); nothing changes when the compression loses nothing.
    comm : mpi4py communicator, default ``COMM_WORLD``.
    seed : int
        Seeds the random rounding of the quantizer (the same on every rank).
    options : sparcml.Options, optional
        The options of every reduction (partitions, index coding, node shared memory, ...),
        replacing ``compression.options``; default: the compression's, else the process
        defaults (the ``SPARCML_*`` environment). Agreed across ranks with the others.
    device_path : bool, optional
        Device-resident compression (:mod:`sparcml.torch._device`): the memory, the selection
        and the result's scatter stay on the parameters' device, and only the selected entries
        and the exchange's result cross to the host. Default (None): on when the parameters
        live on an accelerator (CUDA), on one device, and the compression is one the device
        path takes (top-k, random-k, threshold, DGC; no quantizer); the others keep the host
        path. True: on, CPU parameters included (the tests), an
        :class:`~sparcml.IncompatibleOptionsError` for a compression it does not take.
        False: the host path.

    Deprecated keywords (one release, with a :class:`DeprecationWarning` that shows the new
    call): ``density``, ``k``, ``bits``, ``bucket_size`` (bytes), ``algorithm``,
    ``error_feedback``, ``topk_bucket_size``, ``quantizer_bucket_size``.

    Parameters may be float32, float64, float16 or bfloat16; half-precision gradients travel
    as float32 (see :mod:`.buckets`). An Inf or NaN gradient on any rank does not raise: the
    averaged gradients of its bucket are NaN on every rank (:mod:`.reduction`), so that
    ``GradScaler`` skips the step on every rank alike. With ``GradScaler`` (as with Horovod)::

        scaler.scale(loss).backward()
        opt.synchronize()            # the averaged, still scaled gradients
        scaler.unscale_(opt)         # finds the same Inf/NaN on every rank
        with opt.skip_synchronize():
            scaler.step(opt)         # skipped on every rank alike
        scaler.update()

    The plain AMP recipe works too: ``scaler.step(opt)`` without ``synchronize()`` first. The
    optimizer declares ``_step_supports_amp_scaling``, so GradScaler calls :meth:`step` on every
    rank (never skipping it on the rank that saw a local Inf, which would leave the others
    waiting) and hands itself over; :meth:`step` then averages first and unscales the
    averaged gradients, so every rank finds the same Inf/NaN, skips alike and updates the scale
    alike. (torch warns once that it will stop passing the scaler; the Horovod pattern above
    does not depend on it.) Gradients changed in place after their reduction began, by
    ``clip_grad_norm_`` say, are detected by their version counter and raise
    :class:`~sparcml.SparcmlError` on every rank.

    Collective: every rank constructs it with the same model structure and options (checked;
    otherwise :class:`~sparcml.RankMismatchError`, and any rank's invalid option its error,
    on every rank). Attributes: ``optimizer``, ``compression``, ``stats``
    (:class:`CompressionStats`, cumulative), ``last_step`` (the latest step's), ``buckets``
    (read-only description).

    Example: top-k 1% per bucket, 4-bit QSGD, error feedback, the default algorithm::

        from sparcml import QSGD
        from sparcml.compression import Compression, ResidualMemory, TopKCompressor

        opt = DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
            compression=Compression(TopKCompressor(density=0.01), quantizer=QSGD(4),
                                    memory=ResidualMemory()))
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
    """

    def __init__(self, optimizer, named_parameters=None, *, compression=None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, backward_passes_per_step: int = 1,
                 warmup_steps: int = 0, comm=None, seed: int = 0,
                 options: Options | None = None, device_path: bool | None = None,
                 **deprecated):
        legacy.check_names(deprecated)
        if deprecated:
            legacy.warn(deprecated, stacklevel=2)
        self._base_init()
        self.optimizer = optimizer
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._buckets: list[Bucket] = []
        self._handles = []
        reduce_options, options = options, ""  # options: from here, the description line
        with capture() as failed:  # every rank validates, then all raise the same error
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise IncompatibleOptionsError(
                    f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
            if deprecated:
                compression, bucket_bytes = legacy.translate(
                    deprecated, compression, bucket_bytes, DEFAULT_BUCKET_BYTES)
            elif compression is None:
                compression = Compression()
            elif not isinstance(compression, Compression):
                raise IncompatibleOptionsError(
                    f"compression must be a sparcml.compression.Compression, got "
                    f"{type(compression).__name__}; e.g. Compression(TopKCompressor("
                    f"density=0.01), quantizer=sparcml.QSGD(4))")
            if reduce_options is not None:
                compression = compression.with_options(reduce_options)
            self.bucket_bytes = _check_int("bucket_bytes", bucket_bytes, 1)
            self.backward_passes_per_step = _check_int("backward_passes_per_step",
                                                       backward_passes_per_step, 1)
            self.warmup_steps = _check_int("warmup_steps", warmup_steps, 0)
            self.seed = _check_int("seed", seed, 0)
            options = (f"compression={compression.describe()} bucket_bytes={self.bucket_bytes}"
                       f" backward_passes_per_step={self.backward_passes_per_step} "
                       f"warmup_steps={self.warmup_steps} seed={self.seed}")
            if device_path not in (None, True, False):
                raise IncompatibleOptionsError(f"device_path must be None, True or False, "
                                               f"got {device_path!r}")
            if device_path is not None:
                options += f" device_path={device_path}"
            why = device_supported(compression)
            if device_path and why is not None:
                raise IncompatibleOptionsError(
                    f"device_path=True takes top-k, random-k, threshold or DGC without a "
                    f"quantizer, not {why}; leave device_path unset for the host path")
        self._names = named_parameters = (None if named_parameters is None
                                          else list(named_parameters))
        self._build(options, failed.error)
        # the communication thread alone uses it (memory, quantizer RNG), in submission order
        self.compression = compression.fresh(seed=self.seed)
        self._options = options
        self._device_path = device_path
        self._device = self._device_for(device_path)
        self._step = 0
        self._synchronized = False
        self._no_sync = False
        self.stats = CompressionStats()
        self.last_step = CompressionStats()
        self._current = CompressionStats()

    def _device_for(self, device_path) -> DevicePath | None:
        """The device path's state when it runs (see ``device_path``), else None."""
        if device_path is False or device_supported(self.compression) is not None:
            return None
        devices = {p.device for b in self._buckets for p in b.params}
        if device_path is None and (len(devices) != 1
                                    or next(iter(devices)).type != "cuda"):
            return None
        if len(devices) > 1:
            raise IncompatibleOptionsError(
                f"device_path=True needs every parameter on one device, got "
                f"{sorted(map(str, devices))}")
        return DevicePath(self.compression, self.rank, self.size)

    def _base_init(self) -> None:
        """What ``torch.optim.Optimizer.__init__`` sets up besides the parameter groups, which
        stay the wrapped optimizer's (step and state-dict hooks, the profiler's step name)."""
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
                     "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
                     "_optimizer_load_state_dict_pre_hooks",
                     "_optimizer_load_state_dict_post_hooks"):
            setattr(self, name, OrderedDict())
        self._patch_step_function()
        self._warned_capturable_if_run_uncaptured = True

    def _build(self, options: str, error) -> None:
        """Collective: cut the parameters into buckets, check that every rank has the same,
        and hook them (at construction and after :meth:`add_param_group`)."""
        lines: list[str] = []
        with capture() as failed:
            if error is None:
                self._buckets = make_buckets(_named_parameters(self.optimizer, self._names),
                                             self.bucket_bytes)
                check_unowned(self._buckets)
                lines = [options] + [f"bucket {b.index}: {n} {tuple(p.shape)} {p.dtype}"
                                     for b in self._buckets for n, p in zip(b.names, b.params)]
        agree_on_lines(self.comm, lines, "the parameters or options of DistributedOptimizer",
                       error or failed.error)
        self._params = {id(p) for b in self._buckets for p in b.params}
        for b in self._buckets:
            for p in b.params:
                self._handles.append(p.register_post_accumulate_grad_hook(self._hook(b)))
                claim(p, self)
        self._next_launch = 0
        self._deferred = None

    # -- the Optimizer surface ---------------------------------------------------------------

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self.optimizer.defaults = value

    @property
    def algorithm(self) -> str:
        """The allreduce algorithm of the compression (``"auto"`` included)."""
        return self.compression.algorithm

    @property
    def step_count(self) -> int:
        """Steps synchronized so far (the warm-up counts them)."""
        return self._step

    @property
    def buckets(self) -> list[dict]:
        """One dict per bucket, in launch order: ``index``, ``names`` (its parameters, in
        flattening order), ``numel``, ``dtype`` (as it travels), ``residual`` (the
        error-feedback memory, a NumPy array, or None) and ``sent`` (a
        :class:`~sparcml.SparseVector`: this rank's contribution to the latest step as the
        other ranks received it, quantized when a quantizer is used, so that ``residual ==
        gradient + old residual - sent``; None after a step that sent the full gradient)."""
        memory = self.compression.memory
        if self._device is not None:
            self._device.export()
        return [{"index": b.index, "names": list(b.names), "numel": b.numel,
                 "dtype": str(b.dtype), "residual": memory.residual(b.index), "sent": b.sent}
                for b in self._buckets]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group to the wrapped optimizer and reduce its parameters too. Collective
        (every rank, the same group shapes), between steps; the buckets are cut again and the
        error-feedback memory starts empty (its residuals belonged to the old buckets)."""
        self._idle("add_param_group()")
        self.optimizer.add_param_group(param_group)
        if self._names is not None:  # name the new parameters after their group
            known = {id(p) for _, p in self._names}
            gi = len(self.optimizer.param_groups) - 1
            self._names += [(f"param_groups.{gi}.{i}", p) for i, p in enumerate(
                self.optimizer.param_groups[gi]["params"]) if id(p) not in known]
        self.remove_hooks()
        self._build(self._options, None)
        self.compression.memory.reset()
        self._device = self._device_for(self._device_path)

    # GradScaler.step(opt) then calls step(grad_scaler=scaler) on every rank instead of
    # skipping it on the ranks whose local gradients hold an Inf (they would not reduce).
    _step_supports_amp_scaling = True

    def step(self, closure=None, grad_scaler=None):
        """:meth:`synchronize` (unless already done this step), then the wrapped step.

        ``grad_scaler``: passed by ``torch.amp.GradScaler.step`` (never give it yourself): the
        averaged gradients are unscaled (unless ``scaler.unscale_(opt)`` ran already) and the
        wrapped step is skipped when they hold an Inf/NaN, the same on every rank."""
        if closure is not None:
            raise IncompatibleOptionsError(
                "DistributedOptimizer.step() takes no closure: a closure would run backward() "
                "again inside the step; compute the loss and call backward() before step()")
        if not self._synchronized:
            self.synchronize()
        if grad_scaler is not None:
            from torch.amp.grad_scaler import OptState

            if grad_scaler._per_optimizer_states[id(self)]["stage"] is OptState.READY:
                grad_scaler.unscale_(self)  # the averaged gradients: one verdict everywhere
            found = sum(float(v.item()) for v in
                        grad_scaler._per_optimizer_states[id(self)]["found_inf_per_device"]
                        .values())
            out = None if found else self.optimizer.step()
        else:
            out = self.optimizer.step()
        self._synchronized = False
        return out

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's idiom for code that calls :meth:`synchronize` itself (to clip or unscale
        the averaged gradient): ``opt.synchronize(); clip(...); with opt.skip_synchronize():
        opt.step()``. (``step()`` right after ``synchronize()`` never reduces twice anyway.)"""
        if not self._synchronized:
            raise SparcmlError("skip_synchronize() without synchronize() first: the gradients "
                               "would be stepped without being averaged")
        yield

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's gradient accumulation: the ``backward()`` calls inside accumulate locally and
        start no reduction; the first ``backward()`` after the block starts them as usual (so
        its gradient is the sum over all these passes). Collective in effect: every rank must
        run the same passes inside and outside."""
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    def remove_hooks(self) -> None:
        """Detach the gradient hooks (the optimizer no longer reduces anything by itself)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        for b in self._buckets:
            for p in b.params:
                release(p, self)

    # -- the reduction -----------------------------------------------------------------------

    def _idle(self, what: str) -> None:
        if any(b.request is not None or b.ready for b in self._buckets):
            raise SparcmlError(f"{what} while gradients of this step are accumulated or in "
                               f"flight; call it after step() (or synchronize())")

    def _hook(self, bucket: Bucket):
        # a weak reference: the parameters must not keep a discarded optimizer alive
        ref = weakref.ref(self)

        def hook(param: torch.Tensor) -> None:
            self = ref()
            if self is None or self._no_sync:
                return
            passes = bucket.ready.get(id(param), 0) + 1
            if bucket.request is not None or passes > self.backward_passes_per_step:
                if bucket.versions:  # step() goes on with the passes reduced before this one
                    i = [id(p) for p in bucket.params].index(id(param))
                    bucket.versions[i] = (id(param.grad), param.grad._version)
                raise SparcmlError(
                    f"the gradient of {bucket.name_of(param)!r} was accumulated twice before "
                    f"step(): DistributedOptimizer reduces after every "
                    f"{self.backward_passes_per_step} backward() pass(es); call step() (or "
                    f"synchronize()) after them, or accumulate with backward_passes_per_step=N"
                    f" or inside opt.no_sync()")
            if self._synchronized:  # the first gradient of a new step
                self._synchronized = False
            bucket.ready[id(param)] = passes
            self._launch_ready()
        return hook

    def _launch_ready(self) -> None:
        """Launch, in bucket order, every bucket whose gradients are all ready."""
        n = self.backward_passes_per_step
        while self._next_launch < len(self._buckets):
            b = self._buckets[self._next_launch]
            if len(b.ready) < len(b.params) or any(c < n for c in b.ready.values()):
                return
            self._launch(b)

    def _launch(self, b: Bucket) -> None:
        """Take bucket ``b``'s gradients (the host path's copy into its buffer, or the device
        path's selection) and hand its reduction to the communication thread; the step's last
        bucket's reduction is kept for :meth:`synchronize`, which runs it on the calling
        thread: launched here it would overlap only the end of ``backward()`` (its gradients
        are the last ones), and the thread's wake-up and the result's hand-back cost a step
        more than that (issue 33: 0.5-2 ms at P = 1 on 2 busy cores)."""
        t0 = time.perf_counter()
        full = self._step < self.warmup_steps and self.compression.lossy
        b.full = full or self.compression.compressor.lossless
        if self._device is not None:  # select on the device here, exchange on the thread
            vec, b.finite = self._device.select(b, full=full)
            b.compress_seconds = time.perf_counter() - t0
            work = (_exchange_bucket, b, self._device, vec, full, self._step == 0)
        else:
            gather_gradients(b)
            self._current.flatten_seconds += time.perf_counter() - t0
            work = (_reduce_bucket, b, self.compression, full, self._step == 0)
        self._next_launch += 1
        if self._next_launch == len(self._buckets):
            self._deferred = work
        else:
            b.request = submit(self.comm, f"DistributedOptimizer bucket {b.index}", *work)

    def _results(self) -> list:
        """The reductions' results, in bucket order: the last bucket's run here (after the
        others, as the thread would have run it), then the others' waited for. A failure is
        raised after all ran, the first bucket's first, as waiting for each in turn would."""
        if not self._buckets:
            return []
        last, error = None, None
        if self._deferred is not None:
            work, self._deferred = self._deferred, None
            try:
                last = call(self.comm, *work)
            except BaseException as exc:  # noqa: BLE001 - raised after the earlier buckets'
                error = exc
        results = [b.request.wait() for b in self._buckets[:-1]]
        if error is not None:
            raise error
        return results + [last]

    def synchronize(self) -> None:
        """Finish this step's reductions: launch the buckets not launched yet (a parameter
        without a gradient counts as zeros), wait for all, agree on non-finite buckets, and set
        every parameter's ``.grad`` to the sum over ranks divided by P (NaN in a bucket where
        any rank had an Inf or NaN). Collective (every rank, same number of calls).

        Once per step: a second call before ``step()`` or the next ``backward()`` returns at
        once (so ``step()`` after an explicit ``synchronize()`` does not reduce again)."""
        if self._synchronized:
            return
        mine = {id(p) for g in self.optimizer.param_groups for p in g["params"]
                if p.requires_grad}
        if not mine <= self._params:
            raise IncompatibleOptionsError(
                f"{len(mine - self._params)} parameter(s) of the wrapped optimizer are not "
                f"reduced: a group was added to opt.optimizer directly; call "
                f"add_param_group() on the DistributedOptimizer (on every rank) instead")
        while self._next_launch < len(self._buckets):
            self._launch(self._buckets[self._next_launch])
        t0 = time.perf_counter()
        cur = self._current
        full_count = 0
        try:
            results = self._results()
            flags = np.array([0 if b.finite else NONFINITE for b in self._buckets] + [
                MODIFIED if any(modified_since_gather(b) for b in self._buckets) else 0],
                dtype=np.uint8)
            if self.size > 1:  # on this thread too (the earlier calls are done)
                flags = call(self.comm, agree_flags, flags)
            if flags[-1] & MODIFIED:
                raise SparcmlError(
                    "gradients were changed in place after backward() started their reduction "
                    "(clip_grad_norm_ or GradScaler.unscale_ before the averaged gradients "
                    "arrived), on some rank: call opt.synchronize() first, then clip or "
                    "unscale, then `with opt.skip_synchronize(): opt.step()` (or "
                    "scaler.step(opt))")
            for b, result, flag in zip(self._buckets, results, flags):
                if self._device is not None:
                    cur.values += b.numel
                    cur.sent_values += b.values_sent
                    cur.result_values += self._device.apply(b, result, bool(flag & NONFINITE))
                    cur.dense_bytes += (2 * (self.size - 1) * b.numel * b.dtype.itemsize
                                        // self.size)
                    full_count += b.full
                    cur.compress_seconds += b.compress_seconds
                    continue
                if flag & NONFINITE:
                    b.flat.fill(np.nan)
                else:
                    result.to_dense(out=b.flat)
                    if self.size > 1:
                        np.divide(b.flat, self.size, out=b.flat)
                cur.values += b.numel
                cur.sent_values += b.values_sent
                cur.result_values += (int(np.count_nonzero(b.flat)) if result.is_dense
                                      else result.nnz)
                cur.dense_bytes += 2 * (self.size - 1) * b.numel * b.dtype.itemsize // self.size
                full_count += b.full
                cur.compress_seconds += b.compress_seconds
                scatter_gradients(b)
        finally:
            for b in self._buckets:
                b.request = None
                b.ready.clear()
            self._next_launch = 0
            self._deferred = None
        cur.wait_seconds += time.perf_counter() - t0
        cur.bytes_sent = sum(b.traffic.bytes_sent for b in self._buckets)
        cur.to_host_bytes = sum(b.to_host_bytes for b in self._buckets)
        cur.to_device_bytes = sum(b.to_device_bytes for b in self._buckets)
        cur.messages = sum(b.traffic.messages for b in self._buckets)
        for b in self._buckets:
            b.traffic.reset()
            b.to_host_bytes = b.to_device_bytes = 0
        cur.steps, cur.dense_steps = 1, int(full_count == len(self._buckets))
        self.stats._add(cur)
        self.last_step, self._current = cur, CompressionStats()
        self._step += 1
        self._synchronized = True

    # -- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The wrapped optimizer's ``state_dict()`` (``state``, ``param_groups``) plus a
        ``"sparcml"`` entry: this rank's step count, error-feedback memory and quantizer RNG
        state (see :mod:`.checkpoint`). Save one per rank; call between steps."""
        self._idle("state_dict()")
        if self._device is not None:
            self._device.export()
        return checkpoint.state_dict(self)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict` (or a plain optimizer's state: see :mod:`.checkpoint`)."""
        self._idle("load_state_dict()")
        checkpoint.load_state_dict(self, state_dict)
        if self._device is not None:
            self._device.clear()  # the next step takes the loaded memory to the device

    def __repr__(self) -> str:
        return (f"DistributedOptimizer({type(self.optimizer).__name__}, "
                f"{self.compression.describe()}, buckets={len(self._buckets)}, P={self.size})")
