""":class:`DistributedOptimizer`: Horovod's wrapper, reducing gradient buckets during backward."""

from __future__ import annotations

import contextlib
import time
import weakref

import numpy as np
import torch
from mpi4py import MPI

from ..agreement import agree_on_lines, capture
from ..compression import Compression
from ..errors import IncompatibleOptionsError, SparcmlError
from ..nonblocking import submit
from . import legacy
from .buckets import (Bucket, check_unowned, claim, gather_gradients, make_buckets,
                      named_parameters as _named_parameters, release, scatter_gradients)
from .stats import CompressionStats

__all__ = ["DistributedOptimizer", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 4 << 20  # 1M float32 gradient values per bucket


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise IncompatibleOptionsError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _reduce_bucket(ctx, b: Bucket, compression: Compression, full: bool, check: bool):
    """On the communication thread: compress bucket ``b`` and allreduce it.

    Runs in submission order, so every rank compresses and reduces its buckets in the same
    order; top-k and QSGD (Numba kernels, GIL released) overlap the rest of ``backward()``.
    """
    r = compression.allreduce_in(ctx, b.flat, key=b.index, stats=b.traffic, check=check,
                                 full=full)
    # a full gradient sent as it is lives in b.flat, which the result overwrites
    b.sent = r.sent if compression.lossy and not full else None
    b.values_sent, b.compress_seconds = r.values_sent, r.compress_seconds
    return r.result


class DistributedOptimizer:
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over all ranks.

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
    warmup_steps : int
        The first N steps send full gradients through the dense baseline (no compressor,
        quantizer or memory); nothing changes when the compression loses nothing.
    comm : mpi4py communicator, default ``COMM_WORLD``.
    seed : int
        Seeds the random rounding of the quantizer (the same on every rank).

    Deprecated keywords (one release, with a :class:`DeprecationWarning` that shows the new
    call): ``density``, ``k``, ``bits``, ``bucket_size`` (bytes), ``algorithm``,
    ``error_feedback``, ``topk_bucket_size``, ``quantizer_bucket_size``.

    Collective: every rank constructs it with the same model structure and options (checked;
    otherwise :class:`~sparcml.RankMismatchError`, and any rank's invalid option its error,
    on every rank). Attributes: ``optimizer``, ``compression``, ``stats``
    (:class:`CompressionStats`, cumulative), ``last_step`` (the latest step's), ``buckets``
    (read-only description). Hand ``opt.optimizer`` to LR schedulers.

    Example: top-k 1% per bucket, 4-bit QSGD, error feedback, the default algorithm::

        from sparcml import QSGD
        from sparcml.compression import Compression, ResidualMemory, TopKCompressor

        opt = DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
            compression=Compression(TopKCompressor(density=0.01), quantizer=QSGD(4),
                                    memory=ResidualMemory()))
    """

    def __init__(self, optimizer, named_parameters=None, *, compression=None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, warmup_steps: int = 0, comm=None,
                 seed: int = 0, **deprecated):
        legacy.check_names(deprecated)
        if deprecated:
            legacy.warn(deprecated, stacklevel=2)
        self.optimizer = optimizer
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._buckets: list[Bucket] = []
        lines: list[str] = []
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
            self.bucket_bytes = _check_int("bucket_bytes", bucket_bytes, 1)
            self.warmup_steps = _check_int("warmup_steps", warmup_steps, 0)
            self.seed = _check_int("seed", seed, 0)
            self._buckets = make_buckets(_named_parameters(optimizer, named_parameters),
                                         self.bucket_bytes)
            check_unowned(self._buckets)
            lines = [f"compression={compression.describe()} bucket_bytes={self.bucket_bytes} "
                     f"warmup_steps={self.warmup_steps} seed={self.seed}"] + [
                f"bucket {b.index}: {n} {tuple(p.shape)} {p.dtype}"
                for b in self._buckets for n, p in zip(b.names, b.params)]
        agree_on_lines(self.comm, lines, "the parameters or options of DistributedOptimizer",
                       failed.error)
        # the communication thread alone uses it (memory, quantizer RNG), in submission order
        self.compression = compression.fresh(seed=self.seed)
        self._step = 0
        self._synchronized = False
        self.stats = CompressionStats()
        self.last_step = CompressionStats()
        self._current = CompressionStats()
        self._handles = []
        for b in self._buckets:
            for p in b.params:
                self._handles.append(p.register_post_accumulate_grad_hook(self._hook(b)))
                claim(p, self)
        self._next_launch = 0

    # -- the Optimizer surface ---------------------------------------------------------------

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    @property
    def defaults(self):
        return self.optimizer.defaults

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
        flattening order), ``numel``, ``dtype``, ``residual`` (the error-feedback memory, a
        NumPy array, or None) and ``sent`` (a :class:`~sparcml.SparseVector`: this rank's
        contribution to the latest step as the other ranks received it, quantized when a
        quantizer is used, so that ``residual == gradient + old residual - sent``; None
        after a step that sent the full gradient as it is)."""
        memory = self.compression.memory
        return [{"index": b.index, "names": list(b.names), "numel": b.numel,
                 "dtype": str(b.dtype), "residual": memory.residual(b.index), "sent": b.sent}
                for b in self._buckets]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """:meth:`synchronize` (unless already done this step), then the wrapped step."""
        if closure is not None:
            raise IncompatibleOptionsError(
                "DistributedOptimizer.step() takes no closure: a closure would run backward() "
                "again inside the step; compute the loss and call backward() before step()")
        if not self._synchronized:
            self.synchronize()
        out = self.optimizer.step()
        self._synchronized = False
        return out

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's idiom for code that calls :meth:`synchronize` itself (to clip the
        averaged gradient, say): ``opt.synchronize(); clip(...); with opt.skip_synchronize():
        opt.step()``. (``step()`` right after ``synchronize()`` never reduces twice anyway.)"""
        if not self._synchronized:
            raise SparcmlError("skip_synchronize() without synchronize() first: the gradients "
                               "would be stepped without being averaged")
        yield

    def remove_hooks(self) -> None:
        """Detach the gradient hooks (the optimizer no longer reduces anything by itself)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        for b in self._buckets:
            for p in b.params:
                release(p, self)

    # -- the reduction -----------------------------------------------------------------------

    def _hook(self, bucket: Bucket):
        # a weak reference: the parameters must not keep a discarded optimizer alive
        ref = weakref.ref(self)

        def hook(param: torch.Tensor) -> None:
            self = ref()
            if self is None:
                return
            if bucket.request is not None or id(param) in bucket.ready:
                raise SparcmlError(
                    f"the gradient of {bucket.name_of(param)!r} was accumulated twice before "
                    f"step(): DistributedOptimizer reduces after every backward(); call step() "
                    f"(or synchronize()) after each backward(), or sum the losses of the "
                    f"micro-batches and call backward() once")
            if self._synchronized:  # the first gradient of a new step
                self._synchronized = False
            bucket.ready.add(id(param))
            self._launch_ready()
        return hook

    def _launch_ready(self) -> None:
        """Launch, in bucket order, every bucket whose gradients are all ready."""
        while self._next_launch < len(self._buckets):
            b = self._buckets[self._next_launch]
            if len(b.ready) < len(b.params):
                return
            self._launch(b)

    def _launch(self, b: Bucket) -> None:
        t0 = time.perf_counter()
        gather_gradients(b)
        full = self._step < self.warmup_steps and self.compression.lossy
        b.full = full or self.compression.compressor.lossless
        self._current.flatten_seconds += time.perf_counter() - t0
        b.request = submit(self.comm, f"DistributedOptimizer bucket {b.index}", _reduce_bucket,
                           b, self.compression, full, self._step == 0)
        self._next_launch += 1

    def synchronize(self) -> None:
        """Finish this step's reductions: launch the buckets not launched yet (a parameter
        without a gradient counts as zeros), wait for all, and set every parameter's ``.grad``
        to the sum over ranks divided by P. Collective (every rank, same number of calls).

        Once per step: a second call before ``step()`` or the next ``backward()`` returns at
        once (so ``step()`` after an explicit ``synchronize()`` does not reduce again)."""
        if self._synchronized:
            return
        while self._next_launch < len(self._buckets):
            self._launch(self._buckets[self._next_launch])
        t0 = time.perf_counter()
        cur = self._current
        full_count = 0
        try:
            for b in self._buckets:
                result = b.request.wait()
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
        cur.wait_seconds += time.perf_counter() - t0
        cur.bytes_sent = sum(b.traffic.bytes_sent for b in self._buckets)
        cur.messages = sum(b.traffic.messages for b in self._buckets)
        for b in self._buckets:
            b.traffic.reset()
        cur.steps, cur.dense_steps = 1, int(full_count == len(self._buckets))
        self.stats._add(cur)
        self.last_step, self._current = cur, CompressionStats()
        self._step += 1
        self._synchronized = True

    # -- checkpoints -------------------------------------------------------------------------

    def _config(self) -> dict:
        return {"compression": self.compression.describe(), "bucket_bytes": self.bucket_bytes,
                "warmup_steps": self.warmup_steps, "seed": self.seed,
                "buckets": [b.numel for b in self._buckets]}

    def state_dict(self) -> dict:
        """This rank's state: the wrapped optimizer's, the step count, the error-feedback
        memory (a residual per bucket) and the quantizer's RNG state. Residuals differ between
        ranks: save one per rank. Call between steps (no reduction in flight)."""
        if any(b.request is not None for b in self._buckets):
            raise SparcmlError("state_dict() while reductions are in flight; call it after "
                               "step() (or synchronize())")
        q = self.compression.quantizer
        return {
            "optimizer": self.optimizer.state_dict(),
            "sparcml": {
                "config": self._config(), "rank": self.rank, "size": self.size,
                "step": self._step, "memory": self.compression.memory.state_dict(),
                "quantizer": None if q is None else q.state_dict(),
            },
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` of an identically configured optimizer, saved by the rank
        of the same number in a job of the same size (the residuals are that rank's)."""
        mine = state.get("sparcml") if isinstance(state, dict) else None
        if mine is None:
            raise SparcmlError("not a DistributedOptimizer state: no 'sparcml' entry (a plain "
                               "optimizer state goes to opt.optimizer.load_state_dict)")
        if mine.get("config") != self._config():
            raise SparcmlError(f"the state was saved with {mine.get('config')}, this optimizer "
                               f"has {self._config()}; use the same options and model")
        if (mine["rank"], mine["size"]) != (self.rank, self.size):
            raise SparcmlError(
                f"the state holds rank {mine['rank']} of {mine['size']}'s residuals; this is "
                f"rank {self.rank} of {self.size}: resume with the same number of ranks and "
                f"give each rank its own state")
        self.optimizer.load_state_dict(state["optimizer"])
        self.compression.memory.load_state_dict(mine["memory"])
        if self.compression.quantizer is not None:
            self.compression.quantizer.load_state_dict(mine["quantizer"])
        self._step = int(mine["step"])

    def __repr__(self) -> str:
        return (f"DistributedOptimizer({type(self.optimizer).__name__}, "
                f"{self.compression.describe()}, buckets={len(self._buckets)}, P={self.size})")
