"""PyTorch adapter: data-parallel SGD with top-k, QSGD and the sparse allreduce (Horovod-style).

Import it as ``import sparcml.torch`` (``import sparcml`` alone never imports torch).

:class:`DistributedOptimizer` wraps any ``torch.optim.Optimizer``. Per step, on every rank:

1. the parameters are cut into *buckets* once, at construction: in reverse registration order
   (roughly the order in which ``backward()`` produces their gradients), a new bucket whenever
   ``bucket_size`` bytes are full or the dtype changes; the order is checked to be identical on
   all ranks;
2. a gradient hook (``register_post_accumulate_grad_hook``) notes each gradient as it is
   accumulated; when every gradient of a bucket is ready *and* every earlier bucket has been
   launched, the bucket is flattened into a host buffer (pinned when the model lives on an
   accelerator) and handed to sparcml's communication thread (the one of
   :func:`sparcml.iallreduce`), which compresses it and runs the allreduce while ``backward()``
   goes on: the calling thread only copies gradients, so an accelerator is never kept waiting
   for top-k. Buckets are launched in bucket order on every rank, whatever order their
   gradients come in, and the thread takes them in that order;
3. compression (the *compressor*/*memory* split of GRACE): :class:`sparcml.TopK` keeps the
   ``density`` (or ``k``) largest entries of ``gradient + residual`` per bucket and keeps the
   rest in the bucket's residual (error feedback); with ``bits`` the kept values are quantized
   by QSGD first, and the quantization error goes into the residual too;
4. :meth:`DistributedOptimizer.synchronize` (called by :meth:`~DistributedOptimizer.step`)
   launches what is left, waits for every bucket, divides the sum by P and writes it into the
   ``.grad`` of each parameter; then the wrapped optimizer steps.

Quantization, exactly (``bits`` given): the sender quantizes its kept values with QSGD (random
rounding from a stream derived from ``(seed, rank, step, bucket)``), so what it sends is
``sent = Q(g[kept])`` and ``residual = g - sent`` holds exactly what was not delivered. The
allreduce runs with the same QSGD configuration and ``quantize_sparse=True``: a rank's own
message travels unchanged (QSGD re-encodes its own decoded values to themselves when the bucket
boundaries are the same, which they are for a rank's first message), so at P = 2 the result is
exactly ``sent_0 + sent_1``. Partial sums sent in later rounds of recursive doubling (P > 2) are
quantized again on the wire: unbiased extra noise that no residual accounts for (the ranks hold
different partial sums, so none of them could keep it). Every rank ends with the same result.

Example
-------
>>> import sparcml.torch as st                                            # doctest: +SKIP
>>> st.broadcast_parameters(model)                                        # doctest: +SKIP
>>> opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
...                               named_parameters=model.named_parameters(),
...                               density=0.01, bits=4)                    # doctest: +SKIP
>>> loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()         # doctest: +SKIP

Every rank must build the optimizer, and call ``step()`` (or ``synchronize()``), the same number
of times in the same order. Wrap a script's ``main`` in :func:`sparcml.abort_on_error`: an error
in one rank's ``backward()`` (NaN gradients, say) otherwise leaves the others waiting.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import weakref
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from mpi4py import MPI

from .algorithms import ALGORITHMS, AUTO, allreduce_in
from .context import TrafficStats
from .nonblocking import submit
from .errors import (IncompatibleOptionsError, RankMismatchError, SparcmlError,
                     UnknownAlgorithmError, UnsupportedDtypeError)
from .qsgd import QSGD
from .topk import TopK
from .vector import SparseVector

__all__ = ["DistributedOptimizer", "CompressionStats", "broadcast_parameters",
           "broadcast_optimizer_state", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 4 << 20  # 1M float32 gradient values per bucket
_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
# id(parameter) -> (weakref to it, weakref to the DistributedOptimizer whose hooks it carries):
# one reduction per gradient (tensors compare element-wise, so no WeakKeyDictionary)
_OWNERS: dict = {}


def _owner(p):
    entry = _OWNERS.get(id(p))
    if entry is None or entry[0]() is not p:
        return None
    return entry[1]()


# -- helpers ----------------------------------------------------------------------------------

def _comm(comm):
    return MPI.COMM_WORLD if comm is None else comm


def _check_agreement(comm, description: list[str], what: str) -> None:
    """Raise the same :class:`RankMismatchError` on every rank unless ``description`` (a list of
    lines) is identical on all ranks of ``comm``. Collective."""
    digest = hashlib.sha256("\n".join(description).encode()).hexdigest()
    digests = comm.allgather(digest)
    if len(set(digests)) == 1:
        return
    everyone = comm.allgather(description)
    ref = everyone[0]
    for rank, lines in enumerate(everyone):
        if lines == ref:
            continue
        for i in range(max(len(ref), len(lines))):
            a = ref[i] if i < len(ref) else "<nothing>"
            b = lines[i] if i < len(lines) else "<nothing>"
            if a != b:
                raise RankMismatchError(
                    f"{what} differ across ranks: entry {i} is {a!r} on rank 0 but {b!r} on "
                    f"rank {rank}; build the same model and options on every rank (same code, "
                    f"same arguments) before wrapping it")
    raise RankMismatchError(f"{what} differ across ranks")  # pragma: no cover - digests collided


def _host_bytes(t: torch.Tensor) -> tuple[np.ndarray, bool]:
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


def broadcast_parameters(params, root: int = 0, comm=None) -> None:
    """Overwrite, in place, every rank's tensors with ``root``'s: all ranks start equal.

    ``params``: an ``nn.Module`` (its ``state_dict``: parameters and buffers), a dict of name ->
    tensor, or an iterable of ``(name, tensor)`` pairs. Any dtype and device (accelerator
    tensors go through host memory). Collective over ``comm`` (default ``COMM_WORLD``): every
    rank must call with the same names, shapes and dtypes, in the same order, or every rank
    raises :class:`~sparcml.RankMismatchError`.
    """
    comm = _comm(comm)
    items = _tensors_of(params)
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise UnsupportedDtypeError(f"broadcast_parameters: {name!r} is a "
                                        f"{type(t).__name__}, expected a torch.Tensor")
    _check_agreement(comm, [f"{n} {tuple(t.shape)} {t.dtype}" for n, t in items],
                     "the tensors passed to broadcast_parameters")
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


def broadcast_optimizer_state(optimizer, root: int = 0, comm=None) -> None:
    """Give every rank ``root``'s optimizer state (momentum buffers, step counts, lr).

    ``optimizer``: a ``torch.optim.Optimizer`` or a :class:`DistributedOptimizer` (its wrapped
    optimizer's state; the residuals are per rank and stay). Collective; the state travels
    pickled, so it suits models that fit comfortably in host memory.
    """
    comm = _comm(comm)
    inner = optimizer.optimizer if isinstance(optimizer, DistributedOptimizer) else optimizer
    if comm.Get_size() == 1:
        return
    state = None
    if comm.Get_rank() == root:
        state = _to_cpu(inner.state_dict())
    state = comm.bcast(state, root=root)
    try:
        inner.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise RankMismatchError(
            f"rank {comm.Get_rank()} cannot load the optimizer state of rank {root}: {exc}; "
            f"build the same optimizer (same parameter groups) on every rank") from exc


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


# -- statistics -------------------------------------------------------------------------------

@dataclass
class CompressionStats:
    """What this rank communicated, summed over the steps since the last :meth:`reset`.

    ``values``: gradient values reduced (N per step); ``sent_values``: values this rank sent
    (N when dense, about ``density * N`` with top-k); ``result_values``: nonzeros of the summed
    gradients; ``bytes_sent``: bytes this rank sent (:class:`sparcml.TrafficStats`);
    ``dense_bytes``: what a bandwidth-optimal dense allreduce of the same gradients would send
    per rank, ``2 (P-1)/P * N * itemsize``; ``flatten_seconds``: copying the gradients into the
    host buffers, on the calling thread (inside ``backward()``); ``compress_seconds``: top-k and
    quantization, on the communication thread (overlapping backward); ``wait_seconds``: time
    blocked in :meth:`DistributedOptimizer.synchronize` (the communication not hidden behind
    backward).
    """

    steps: int = 0
    dense_steps: int = 0
    values: int = 0
    sent_values: int = 0
    result_values: int = 0
    bytes_sent: int = 0
    messages: int = 0
    dense_bytes: int = 0
    flatten_seconds: float = 0.0
    compress_seconds: float = 0.0
    wait_seconds: float = 0.0

    @property
    def sent_density(self) -> float:
        """Fraction of the gradient values this rank sent."""
        return self.sent_values / self.values if self.values else 0.0

    @property
    def result_density(self) -> float:
        """Fraction of nonzeros in the averaged gradients (the effective density of updates)."""
        return self.result_values / self.values if self.values else 0.0

    @property
    def bytes_per_step(self) -> float:
        return self.bytes_sent / self.steps if self.steps else 0.0

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(sent_density=self.sent_density, result_density=self.result_density,
                   bytes_per_step=self.bytes_per_step)
        return out

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def _add(self, other: "CompressionStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


# -- buckets ----------------------------------------------------------------------------------

@dataclass
class _Bucket:
    index: int
    params: list
    names: list
    offsets: list
    numel: int
    dtype: np.dtype
    host: torch.Tensor                      # flat host buffer (pinned for accelerator models)
    flat: np.ndarray                        # the same memory as NumPy
    topk: TopK | None
    ready: set = field(default_factory=set)  # ids of parameters whose gradient is accumulated
    request: object = None
    sent: SparseVector | None = None        # this step's message (for tests and statistics)
    dense: bool = False
    compress_seconds: float = 0.0
    traffic: TrafficStats = field(default_factory=TrafficStats)


def _reduce_bucket(ctx, b: _Bucket, dense: bool, q, algorithm, quantizer, check: bool):
    """On the communication thread: compress bucket ``b`` (unless dense), then allreduce it.

    Runs in submission order, so every rank compresses and reduces its buckets in the same
    order; top-k and QSGD (Numba kernels, GIL released) overlap the rest of ``backward()``.
    """
    t0 = time.perf_counter()
    vec = SparseVector.dense(b.flat) if dense else b.topk.compress(b.flat, quantizer=q)
    b.sent = vec
    b.compress_seconds = time.perf_counter() - t0
    return allreduce_in(ctx, vec, algorithm, quantizer, quantizer is not None, b.traffic, check)


class _SeededQuantizer:
    """``quantize(values)`` with one fixed stream seed: what TopK calls on the sender."""

    __slots__ = ("q", "seed")

    def __init__(self, q: QSGD, seed: int):
        self.q, self.seed = q, seed

    def quantize(self, values):
        return self.q.quantize(values, seed=self.seed)


class DistributedOptimizer:
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over all ranks.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Built on this rank's model; its parameters (those with ``requires_grad``) are reduced.
    named_parameters : iterable of (name, Parameter), optional
        ``model.named_parameters()``: names for error messages and the cross-rank check.
        Every parameter of ``optimizer`` must be named; default names ``param.<i>``.
    density, k : float in (0, 1] / int, optional
        Top-k sparsification per bucket: keep this fraction (or this many per bucket, at most
        the bucket's size) of ``gradient + residual``. Neither: send the full gradient.
    bits : {2, 4, 8}, optional
        QSGD-quantize the values sent (per ``quantizer_bucket_size`` values, max norm).
    bucket_size : int
        Bytes of gradient per bucket (a parameter is never split; one larger than this is a
        bucket of its own). Smaller buckets start communicating earlier in ``backward()``.
    algorithm : str
        A :data:`sparcml.ALGORITHMS` name or ``"auto"``. ``"dense"`` (MPI_Allreduce) cannot
        carry quantized values.
    error_feedback : bool
        Keep what top-k (and quantization) did not send and add it to the next step's gradient.
    warmup_steps : int
        The first N steps send full gradients with the dense algorithm (no top-k, no QSGD).
    comm : mpi4py communicator, default ``COMM_WORLD``.
    topk_bucket_size : int, optional
        Select the top entries per chunk of this many values instead of per bucket
        (``sparcml.TopK(bucket_size=...)``; 512 in the original CNTK integration).
    quantizer_bucket_size : int
        Values sharing one QSGD scale.
    seed : int
        Seeds the random rounding (same on all ranks; streams are derived per rank and step).

    Collective: every rank constructs it with the same model structure and options (checked:
    :class:`~sparcml.RankMismatchError` on every rank otherwise). Attributes: ``optimizer``,
    ``stats`` (:class:`CompressionStats`, cumulative), ``last_step`` (the latest step's),
    ``buckets`` (read-only description). Hand ``opt.optimizer`` to LR schedulers.
    """

    def __init__(self, optimizer, named_parameters=None, *, density=None, k=None, bits=None,
                 bucket_size: int = DEFAULT_BUCKET_BYTES,
                 algorithm: str = "ssar_recursive_double", error_feedback: bool = True,
                 warmup_steps: int = 0, comm=None, topk_bucket_size=None,
                 quantizer_bucket_size: int = 1024, seed: int = 0):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise IncompatibleOptionsError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if algorithm not in ALGORITHMS and algorithm != AUTO:
            raise UnknownAlgorithmError(
                f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)} or "
                f"'auto'")
        if bits is not None and algorithm == "dense":
            raise IncompatibleOptionsError(
                "bits=... quantizes the values sent, but algorithm='dense' (MPI_Allreduce) "
                "cannot add quantized values; use ssar_recursive_double, ssar_split_allgather, "
                "dsar_split_allgather or auto")
        if isinstance(bucket_size, bool) or not isinstance(bucket_size, int) or bucket_size < 1:
            raise IncompatibleOptionsError(f"bucket_size must be a number of bytes >= 1, "
                                           f"got {bucket_size!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) \
                or warmup_steps < 0:
            raise IncompatibleOptionsError(f"warmup_steps must be an integer >= 0, "
                                           f"got {warmup_steps!r}")
        if density is not None and k is not None:
            raise IncompatibleOptionsError(
                f"give density or k, not both (got density={density}, k={k})")
        if density is not None and not (isinstance(density, (int, float)) and 0 < density <= 1):
            raise IncompatibleOptionsError(f"density must be in (0, 1], got {density!r}")
        self.optimizer = optimizer
        self.comm = _comm(comm)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.density, self.k, self.bits = density, k, bits
        self.algorithm = algorithm
        self.error_feedback = bool(error_feedback)
        self.warmup_steps = warmup_steps
        self.bucket_size = bucket_size
        self.topk_bucket_size = topk_bucket_size
        self.seed = int(seed)
        self.compressing = density is not None or k is not None
        # the wire quantizer is used only by the communication thread, in submission order
        self._wire_q = (QSGD(bits, bucket_size=quantizer_bucket_size, seed=self.seed)
                        if bits is not None else None)
        self._step = 0
        self._synchronized = False
        self.stats = CompressionStats()
        self.last_step = CompressionStats()
        self._current = CompressionStats()
        names = self._named(named_parameters)
        self._buckets = self._make_buckets(names)
        config = [f"density={density} k={k} bits={bits} bucket_size={bucket_size} "
                  f"algorithm={algorithm} error_feedback={self.error_feedback} "
                  f"warmup_steps={warmup_steps} topk_bucket_size={topk_bucket_size} "
                  f"quantizer_bucket_size={quantizer_bucket_size} seed={seed}"]
        _check_agreement(self.comm, config + [
            f"bucket {b.index}: {n} {tuple(p.shape)} {p.dtype}"
            for b in self._buckets for n, p in zip(b.names, b.params)],
            "the parameters or options of DistributedOptimizer")
        for key in [k for k, (pref, oref) in _OWNERS.items() if pref() is None or
                    oref() is None]:
            del _OWNERS[key]
        for b in self._buckets:
            for name, p in zip(b.names, b.params):
                if _owner(p) is not None:
                    raise IncompatibleOptionsError(
                        f"parameter {name!r} is already reduced by another DistributedOptimizer"
                        f"; call remove_hooks() on that one first")
        self._handles = []
        for b in self._buckets:
            for p in b.params:
                self._handles.append(p.register_post_accumulate_grad_hook(self._hook(b)))
                _OWNERS[id(p)] = (weakref.ref(p), weakref.ref(self))
        self._next_launch = 0

    # -- construction ------------------------------------------------------------------------

    def _named(self, named_parameters) -> list[tuple[str, torch.Tensor]]:
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.requires_grad]
        if len({id(p) for p in params}) != len(params):
            raise IncompatibleOptionsError("a parameter appears twice in the optimizer's "
                                           "param_groups")
        if named_parameters is None:
            return [(f"param.{i}", p) for i, p in enumerate(params)]
        named = list(named_parameters)
        name_of = {}
        for name, p in named:
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

    def _make_buckets(self, named) -> list[_Bucket]:
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
            size = p.numel() * p.element_size()
            if not groups or nbytes >= self.bucket_size or groups[-1][0][1].dtype != p.dtype:
                groups.append([])
                nbytes = 0
            groups[-1].append((name, p))
            nbytes += size
        buckets = []
        for i, group in enumerate(groups):
            offsets, n = [], 0
            for _, p in group:
                offsets.append(n)
                n += p.numel()
            dtype = group[0][1].dtype
            host = torch.zeros(n, dtype=dtype, pin_memory=pinned)
            topk = None
            if self.compressing:
                kb = None if self.k is None else min(int(self.k), n)
                topk = TopK(k=kb, density=self.density, error_feedback=self.error_feedback,
                            bucket_size=self.topk_bucket_size)
            buckets.append(_Bucket(i, [p for _, p in group], [nm for nm, _ in group], offsets,
                                   n, np.dtype(_DTYPES[dtype]), host, host.numpy(), topk))
        return buckets

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
    def step_count(self) -> int:
        """Steps synchronized so far (the warm-up counts them)."""
        return self._step

    @property
    def buckets(self) -> list[dict]:
        """One dict per bucket, in launch order: ``index``, ``names`` (its parameters, in
        flattening order), ``numel``, ``dtype``, ``residual`` (the error-feedback memory, a
        NumPy array, or None) and ``sent`` (the :class:`~sparcml.SparseVector` this rank sent
        in the latest compressed step, values as sent: quantized when ``bits`` is set; None
        after a dense step)."""
        return [{"index": b.index, "names": list(b.names), "numel": b.numel,
                 "dtype": str(b.dtype),
                 "residual": None if b.topk is None else b.topk.residual,
                 "sent": None if b.dense else b.sent}
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
                if _owner(p) is self:
                    del _OWNERS[id(p)]

    # -- the reduction -----------------------------------------------------------------------

    @property
    def _dense_now(self) -> bool:
        return self._step < self.warmup_steps or not self.compressing

    def _hook(self, bucket: _Bucket):
        # a weak reference: the parameters must not keep a discarded optimizer alive
        ref = weakref.ref(self)

        def hook(param: torch.Tensor) -> None:
            self = ref()
            if self is None:
                return
            if bucket.request is not None or id(param) in bucket.ready:
                name = bucket.names[[id(p) for p in bucket.params].index(id(param))]
                raise SparcmlError(
                    f"the gradient of {name!r} was accumulated twice before step(): "
                    f"DistributedOptimizer reduces after every backward(); call step() (or "
                    f"synchronize()) after each backward(), or sum the losses of the micro-"
                    f"batches and call backward() once")
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

    def _launch(self, b: _Bucket) -> None:
        t0 = time.perf_counter()
        with torch.no_grad():
            for p, off in zip(b.params, b.offsets):
                dst = b.host[off:off + p.numel()]
                if p.grad is None:  # not used in this step's graph: contributes zeros
                    dst.zero_()
                elif p.grad.is_sparse:
                    raise UnsupportedDtypeError(
                        f"parameter {b.names[b.params.index(p)]!r} has a sparse gradient; "
                        f"build the layer with sparse=False")
                else:
                    dst.copy_(p.grad.reshape(-1))
        dense = self._dense_now
        q = None
        if dense:
            algorithm = "dense" if self.compressing else self.algorithm
            quantizer = None if algorithm == "dense" else self._wire_q
        else:
            if self._wire_q is not None:
                q = _SeededQuantizer(self._wire_q, self._sender_seed(b.index))
            algorithm, quantizer = self.algorithm, self._wire_q
        b.dense = dense
        self._current.flatten_seconds += time.perf_counter() - t0
        b.request = submit(self.comm, f"DistributedOptimizer bucket {b.index}", _reduce_bucket,
                           b, dense, q, algorithm, quantizer, self._step == 0)
        self._next_launch += 1

    def _sender_seed(self, bucket: int) -> int:
        ss = np.random.SeedSequence([self.seed, self.rank, self._step, bucket])
        return int(ss.generate_state(1, np.uint64)[0])

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
        dense_count = 0
        try:
            for b in self._buckets:
                result = b.request.wait()
                result.to_dense(out=b.flat)
                if self.size > 1:
                    np.divide(b.flat, self.size, out=b.flat)
                cur.values += b.numel
                cur.sent_values += b.sent.nnz
                cur.result_values += (int(np.count_nonzero(b.flat)) if result.is_dense
                                      else result.nnz)
                cur.dense_bytes += 2 * (self.size - 1) * b.numel * b.dtype.itemsize // self.size
                dense_count += b.dense
                cur.compress_seconds += b.compress_seconds
                with torch.no_grad():
                    for p, off in zip(b.params, b.offsets):
                        src = b.host[off:off + p.numel()].view_as(p)
                        if p.grad is None:
                            p.grad = torch.empty_like(p)
                        p.grad.copy_(src)
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
        cur.steps, cur.dense_steps = 1, int(dense_count == len(self._buckets))
        self.stats._add(cur)
        self.last_step, self._current = cur, CompressionStats()
        self._step += 1
        self._synchronized = True

    # -- checkpoints -------------------------------------------------------------------------

    def _config(self) -> dict:
        return {"density": self.density, "k": self.k, "bits": self.bits,
                "bucket_size": self.bucket_size, "algorithm": self.algorithm,
                "error_feedback": self.error_feedback, "warmup_steps": self.warmup_steps,
                "topk_bucket_size": self.topk_bucket_size, "seed": self.seed,
                "buckets": [b.numel for b in self._buckets]}

    def state_dict(self) -> dict:
        """This rank's state: the wrapped optimizer's, the step count, the error-feedback
        residual of every bucket and the wire quantizer's RNG state. Residuals differ between
        ranks: save one per rank. Call between steps (no reduction in flight)."""
        if any(b.request is not None for b in self._buckets):
            raise SparcmlError("state_dict() while reductions are in flight; call it after "
                               "step() (or synchronize())")
        return {
            "optimizer": self.optimizer.state_dict(),
            "sparcml": {
                "config": self._config(), "rank": self.rank, "size": self.size,
                "step": self._step,
                "topk": [None if b.topk is None else b.topk.state_dict()
                         for b in self._buckets],
                "quantizer": None if self._wire_q is None else self._wire_q.state_dict(),
            },
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` of an identically configured optimizer, saved by the rank
        of the same number in a job of the same size (the residuals are that rank's)."""
        mine = state.get("sparcml") if isinstance(state, dict) else None
        if mine is None:
            raise SparcmlError("not a DistributedOptimizer state: no 'sparcml' entry (a plain "
                               "optimizer state goes to opt.optimizer.load_state_dict)")
        if mine["config"] != self._config():
            raise SparcmlError(f"the state was saved with {mine['config']}, this optimizer has "
                               f"{self._config()}; use the same options and model")
        if (mine["rank"], mine["size"]) != (self.rank, self.size):
            raise SparcmlError(
                f"the state holds rank {mine['rank']} of {mine['size']}'s residuals; this is "
                f"rank {self.rank} of {self.size}: resume with the same number of ranks and "
                f"give each rank its own state")
        self.optimizer.load_state_dict(state["optimizer"])
        for b, s in zip(self._buckets, mine["topk"]):
            if b.topk is not None:
                b.topk.load_state_dict(s)
        if self._wire_q is not None:
            self._wire_q.load_state_dict(mine["quantizer"])
        self._step = int(mine["step"])

    def __repr__(self) -> str:
        what = ("dense" if not self.compressing else
                f"density={self.density}" if self.density is not None else f"k={self.k}")
        return (f"DistributedOptimizer({type(self.optimizer).__name__}, {what}, bits={self.bits}, "
                f"algorithm={self.algorithm!r}, buckets={len(self._buckets)}, P={self.size})")
