"""Device-resident compression for :class:`~sparcml.torch.DistributedOptimizer` and the DDP
hook (:mod:`._hooks`) (issue 35).

The host path (:mod:`._buckets`) copies every bucket's whole gradient to a (pinned) host
buffer, compresses it there and copies the whole result back. On the device path, for the
sparse compressors -- :class:`~sparcml.compression.TopKCompressor` (per bucket or per tensor,
no ``chunk``), :class:`RandomKCompressor` (shared positions or not, rescaled or not),
:class:`ThresholdCompressor` and :class:`DGCCompressor` -- with no quantizer and a
:class:`ResidualMemory`, :class:`DGCMemory` or :class:`NoneMemory`, everything but the exchange
stays where the parameters are (torch ops on their device):

- the bucket's gradients are concatenated on the device (cast to the wire dtype);
- the error-feedback memory (the residual; DGC's velocity, clipping and masking) is device
  tensors, one per bucket;
- the selection (top-k with ties to the lower index, as :func:`sparcml.select_topk`; the
  threshold; DGC's per-tensor top-k at its warm-up density) runs there; random-k's positions
  are drawn on the host by the compressor's own seeded stream (the same positions as the host
  path) and the k positions go to the device;
- only the k selected positions and values cross to the host, and only the result of the
  exchange comes back (the sum of P sparse vectors: at most P k entries; a dense result, as a
  dense algorithm returns, comes back whole), scattered into ``.grad`` on the device.

Per step and bucket, the host copies are therefore O(k), not O(N): every copy between the
device and the host goes through :func:`to_host` / :func:`to_device`, which count it in the
bucket (the step's ``to_host_bytes`` / ``to_device_bytes`` of
:class:`~sparcml.torch.CompressionStats`);
one flag byte says whether the gradient was finite. Warm-up steps (``warmup_steps``: the
bucket sent whole) copy the whole bucket, as they must.

The same update as the host path, bit for bit: the same selection (exact top-k, ties to the
lower index; the same random positions; ``|v| >= threshold``), the same elementwise float
arithmetic in the same order (``x + r``, ``u = m u + x``, ``values * (n / k)``, the division
by P) and the same exchange (the compression's own planned allreduce of the same vectors).
The exception is DGC's clipping (``clip_norm``): the norm is summed in another order on the
device, so the scale, and what follows, may differ in the last bits.

Compressors the device path does not take (signSGD, EF-signSGD, signum, QSGD, TernGrad,
PowerSGD, fp16/bf16, global top-k, a quantizer, top-k per ``chunk``) keep the host path: see
:func:`supported`.

``device_path=True`` runs this path for CPU tensors too (the tests: same code, the "device"
is the CPU, the copies are counted all the same).
"""

from __future__ import annotations

import numpy as np
import torch

from .._collectives.algorithms import DENSE_BASELINE
from .._collectives.entry import allreduce_in
from .._registry import AUTO
from .._errors import UnsupportedDtypeError
from .._vector import SparseVector
from ..compression._objects import (Compression, NoneMemory, ResidualMemory, TopKCompressor)
from ..compression.compressors.dgc import DGCCompressor, DGCMemory
from ..compression.compressors.randomk import RandomKCompressor
from ..compression.compressors.threshold import ThresholdCompressor
from .._topk.local import TopK
from ._buckets import Bucket

__all__ = ["DevicePath", "supported", "to_host", "to_device"]


def to_host(t: torch.Tensor, b: Bucket | None) -> np.ndarray:
    """A host copy of ``t`` as NumPy (counted in bucket ``b``'s ``to_host_bytes``; None: a
    checkpoint's copy, not a step's)."""
    if b is not None:
        b.to_host_bytes += t.numel() * t.element_size()
    return t.detach().to("cpu", copy=True).numpy()


def to_device(a: np.ndarray, device, b: Bucket | None) -> torch.Tensor:
    """A copy of ``a`` on ``device`` (counted in bucket ``b``'s ``to_device_bytes``; None: a
    checkpoint's copy, not a step's)."""
    if b is not None:
        b.to_device_bytes += a.nbytes
    return torch.from_numpy(np.ascontiguousarray(a)).to(device, copy=True)


def supported(compression: Compression) -> str | None:
    """None when the device path takes ``compression``; else why not (one phrase)."""
    c, m = compression.compressor, compression.memory
    if compression.quantizer is not None:
        return "a quantizer"
    if type(c) is TopKCompressor:
        if c.chunk is not None:
            return "top-k per chunk"
    elif type(c) not in (RandomKCompressor, ThresholdCompressor, DGCCompressor):
        return f"{type(c).__name__}"
    if type(m) not in (ResidualMemory, DGCMemory, NoneMemory):
        return f"{type(m).__name__}"
    return None


def _topk(a: torch.Tensor, k: int) -> torch.Tensor:
    """The increasing positions of the ``k`` largest entries of ``a`` (>= 0), ties to the lower
    index (:func:`sparcml.select_topk`'s set)."""
    n = a.shape[0]
    if k >= n:
        return torch.arange(n, device=a.device)
    if k == 0:
        return torch.empty(0, dtype=torch.int64, device=a.device)
    t = torch.topk(a, k, sorted=False).values.min()
    above = torch.nonzero(a > t).flatten()
    tied = torch.nonzero(a == t).flatten()[:k - above.shape[0]]
    return torch.sort(torch.cat([above, tied])).values


def _per_tensor(a: torch.Tensor, shapes, count) -> torch.Tensor:
    """:func:`_topk` of each tensor of ``a`` (its ``shapes``), ``count(size)`` of each."""
    parts, at = [], 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        if size:
            parts.append(_topk(a[at:at + size], count(size)) + at)
        at += size
    if not parts:
        return torch.empty(0, dtype=torch.int64, device=a.device)
    return torch.cat(parts)


class DevicePath:
    """The device-side state of one optimizer (residuals, DGC velocities, per bucket index)
    and its steps; see the module docstring."""

    def __init__(self, compression: Compression, rank: int, size: int):
        self.compression, self.rank, self.size = compression, rank, size
        self.residual: dict = {}
        self.velocity: dict = {}

    # -- state shared with the host memory (checkpoints, ``opt.buckets``) --------------------

    def export(self) -> None:
        """Copy the device state into the compression's (host) memory."""
        m = self.compression.memory
        if isinstance(m, ResidualMemory):
            m._residuals.update({k: to_host(r, None) for k, r in self.residual.items()})
            m._scratch.clear()
        if isinstance(m, DGCMemory):
            m._velocity.update({k: to_host(u, None) for k, u in self.velocity.items()})

    def clear(self) -> None:
        """Forget the device state (the next step takes the host memory's, if any)."""
        self.residual.clear()
        self.velocity.clear()

    def _state(self, store: dict, host: dict, key, like: torch.Tensor, zeros: bool):
        t = store.get(key)
        if t is None and key in host:  # loaded from a checkpoint: to the device once
            t = store[key] = to_device(host[key], like.device, None)
        if t is None and zeros:
            t = store[key] = torch.zeros_like(like)
        return t

    # -- a step --------------------------------------------------------------------------

    def gather(self, b: Bucket) -> torch.Tensor:
        """The bucket's gradients, concatenated on their device in the wire dtype (zeros for a
        missing gradient), noting their versions as :func:`~._buckets.gather_gradients`."""
        b.versions = [None if p.grad is None else (id(p.grad), p.grad._version)
                      for p in b.params]
        wire = b.host.dtype
        parts = []
        with torch.no_grad():
            for p in b.params:
                if p.grad is None:
                    parts.append(torch.zeros(p.numel(), dtype=wire, device=p.device))
                elif p.grad.is_sparse:
                    raise UnsupportedDtypeError(
                        f"parameter {b.name_of(p)!r} has a sparse gradient; build the layer "
                        f"with sparse=False")
                else:
                    parts.append(p.grad.reshape(-1).to(wire))
            return torch.cat(parts) if len(parts) > 1 else parts[0].clone()

    def _momentum(self, x: torch.Tensor, key) -> torch.Tensor:
        """DGC: clip ``x``, ``u = m u + x``; returns ``u``."""
        m = self.compression.memory
        threshold = m.clip_threshold(self.size)
        if threshold is not None:
            norm = float(torch.linalg.vector_norm(x))
            if norm > threshold:
                x = x * torch.tensor(threshold / norm, dtype=x.dtype, device=x.device)
        u = self._state(self.velocity, m._velocity, key, x, True)
        u.mul_(torch.tensor(m.momentum, dtype=u.dtype, device=u.device))
        u.add_(x)
        return u

    def select(self, b: Bucket, *, full: bool):
        """:meth:`compress` the gradients of bucket ``b`` (:meth:`gather`)."""
        return self.compress(self.gather(b), b.index, [tuple(p.shape) for p in b.params],
                             b, full=full)

    def compress(self, x: torch.Tensor, key, shapes, counter, *, full: bool):
        """Compensate, select and update the memory of ``key`` on the device of ``x`` (flat,
        in the wire dtype; the tensors of ``shapes``); returns the host vector to exchange and
        whether ``x`` was finite. ``counter``: what counts the copies (a bucket)."""
        c, m = self.compression.compressor, self.compression.memory
        b = counter
        flag = torch.isfinite(x).all().reshape(1).to(torch.uint8)
        finite = bool(to_host(flag, b)[0])
        if not finite:
            x = torch.zeros_like(x)
        if full:
            if isinstance(m, DGCMemory):
                x = self._momentum(x, key).clone()
            return SparseVector.dense(to_host(x, b)), finite
        if isinstance(m, DGCMemory):
            x = self._momentum(x, key)
        if isinstance(m, ResidualMemory):
            r = self._state(self.residual, m._residuals, key, x, False)
            g = x.clone() if r is None else x + r
        else:
            g = x
        n = g.shape[0]
        values = host_idx = None
        if type(c) is TopKCompressor:
            if c.per_tensor:
                idx = _per_tensor(g.abs(), shapes, c._topk.num_kept)
            else:
                idx = _topk(g.abs(), c.num_sent(n))
                if n <= 2 ** 31:
                    idx = idx.to(torch.int32)
        elif type(c) is DGCCompressor:
            topk = TopK(density=c.density_at(c._next_step(key)), error_feedback=False)
            idx = _per_tensor(g.abs(), shapes, topk.num_kept)
        elif type(c) is ThresholdCompressor:
            idx = torch.nonzero(g.abs() >= c.threshold).flatten()
        else:  # random-k: the compressor's positions, drawn on the host
            step = c._next_step(key)
            host_idx = c.indices(n, key, step, self.rank)
            idx = to_device(host_idx, g.device, b)
            values = g[idx]
            if c.rescale and idx.numel():
                values = values * torch.tensor(n / idx.numel(), dtype=g.dtype,
                                               device=g.device)
        if values is None:
            values = g[idx]
        if host_idx is None:
            host_idx = to_host(idx, b)
        vec = SparseVector.unchecked(n, host_idx, to_host(values, b))
        if isinstance(m, ResidualMemory):  # the residual: g - sent; DGC: u = 0 where sent
            g[idx.long()] -= values
            self.residual[key] = g
            if isinstance(m, DGCMemory):
                self.velocity[key][idx.long()] = 0
        return vec, finite

    def exchange(self, ctx, b, vec: SparseVector, *, full: bool, check: bool):
        """On the communication thread: the compression's allreduce of ``vec`` (what the host
        path's :meth:`~sparcml.compression.Compression.allreduce_in` does after compressing)."""
        comp = self.compression
        c = comp.compressor
        if full:
            return allreduce_in(ctx, vec, algorithm=DENSE_BASELINE, stats=b.traffic,
                                check=check, options=comp.options)
        if type(c) is RandomKCompressor and c.shared:
            total = allreduce_in(ctx, SparseVector.dense(vec.values.copy()),
                                 algorithm=DENSE_BASELINE, stats=b.traffic, check=check)
            return SparseVector.unchecked(vec.dim, vec.indices,
                                          np.asarray(total.values, vec.values.dtype))
        if comp.algorithm != AUTO:
            return comp._planned(ctx, b.index, vec, None, b.traffic, check)
        return allreduce_in(ctx, vec, algorithm=AUTO, quantizer=None, quantize_sparse=False,
                            stats=b.traffic, check=check, sent=None, options=comp.options)

    def apply(self, b: Bucket, result: SparseVector, nonfinite: bool) -> int:
        """Write the averaged ``result`` (NaN when ``nonfinite``) into the gradients of ``b``
        on their device; returns the result's nonzero count."""
        out, count = self.averaged(result, b.numel, b.host.dtype, b.params[0].device, b,
                                   nonfinite)
        with torch.no_grad():
            for p, off in zip(b.params, b.offsets):
                src = out[off:off + p.numel()].view_as(p)
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                p.grad.copy_(src)
        return count

    def averaged(self, result: SparseVector, n: int, wire, device, b, nonfinite: bool):
        """``result`` divided by P (NaN when ``nonfinite``) as a flat tensor of ``n`` on
        ``device``, and its nonzero count; ``b`` counts the copies."""
        if result.is_dense:
            out = to_device(np.asarray(result.values), device, b)
            count = int(np.count_nonzero(result.values))
        else:
            out = torch.zeros(n, dtype=wire, device=device)
            if result.nnz:
                out[to_device(np.asarray(result.indices, np.int64), device, b)] = to_device(
                    np.asarray(result.values), device, b)
            count = result.nnz
        if nonfinite:
            out.fill_(float("nan"))
        elif self.size > 1:
            out.div_(self.size)
        return out, count
