"""PyTorch adapter: data-parallel SGD with top-k, QSGD and the sparse allreduce (Horovod-style).

Import it as ``import sparcml.torch`` (``import sparcml`` alone never imports torch).

:class:`DistributedOptimizer` wraps any ``torch.optim.Optimizer``; what travels is configured
by a :class:`sparcml.compression.Compression` (GRACE's split: compressor, quantizer, memory,
communicator; NumPy objects shared with non-torch code). Per step, on every rank:

1. the parameters are cut into *buckets* once, at construction: in reverse registration order
   (roughly the order in which ``backward()`` produces their gradients), a new bucket whenever
   ``bucket_bytes`` are full or the dtype changes; the order is checked to be identical on all
   ranks;
2. a gradient hook (``register_post_accumulate_grad_hook``) notes each gradient as it is
   accumulated; when every gradient of a bucket is ready *and* every earlier bucket has been
   launched, the bucket is flattened into a host buffer (pinned when the model lives on an
   accelerator) and handed to sparcml's communication thread (the one of
   :func:`sparcml.iallreduce`), which compresses it and runs the allreduce while ``backward()``
   goes on: the calling thread only copies gradients, so an accelerator is never kept waiting
   for top-k. Buckets are launched in bucket order on every rank, whatever order their
   gradients come in, and the thread takes them in that order;
3. on that thread, per bucket: the memory adds the bucket's residual to the gradient (error
   feedback), the compressor keeps the top-k entries (or all), the allreduce sends them (the
   quantizer's QSGD encodes the values once, on the wire) and reports what the other ranks
   received; the memory keeps ``gradient + residual - received`` as the next residual, so it
   holds what top-k dropped *and* the quantization error;
4. :meth:`DistributedOptimizer.synchronize` (called by :meth:`~DistributedOptimizer.step`)
   launches what is left, waits for every bucket, divides the sum by P and writes it into the
   ``.grad`` of each parameter; then the wrapped optimizer steps.

Every rank ends with the same averaged gradient. With a quantizer, the partial sums that later
rounds of an algorithm send are quantized again: unbiased noise that no residual accounts for
(the ranks hold different partial sums, so none of them could keep it); see
:mod:`sparcml.compression` for where a rank's own values are not quantized on their own.

Example
-------
>>> import sparcml, sparcml.torch as st                                   # doctest: +SKIP
>>> from sparcml.compression import Compression, ResidualMemory, TopKCompressor
>>> st.broadcast_parameters(model)                                        # doctest: +SKIP
>>> opt = st.DistributedOptimizer(
...     torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
...     compression=Compression(TopKCompressor(density=0.01), quantizer=sparcml.QSGD(4),
...                             memory=ResidualMemory()))                  # doctest: +SKIP
>>> loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()         # doctest: +SKIP

``Compression.none()`` gives the dense baseline (``MPI_Allreduce``). Every rank must build the
optimizer, and call ``step()`` (or ``synchronize()``), the same number of times in the same
order. Wrap a script's ``main`` in :func:`sparcml.abort_on_error`: an error in one rank's
``backward()`` (NaN gradients, say) otherwise leaves the others waiting.

``DistributedOptimizer`` is a ``torch.optim.Optimizer`` (LR schedulers, ``GradScaler``) and
takes Horovod's habits (``backward_passes_per_step``, ``no_sync()``, ``root_rank=``).
Under ``DistributedDataParallel`` the same compression runs as a communication hook:
``ddp.register_comm_hook(SparcmlHookState(compression), sparcml_hook)``, after
:func:`init_process_group` (these three are imported from ``sparcml.torch._hooks`` at their
first use, since the hook needs ``torch.distributed``).

``DEFAULT_BUCKET_BYTES``: the bucket size of :class:`DistributedOptimizer` unless given.

Modules (internal): :mod:`._optimizer` (the wrapper), :mod:`._buckets` (parameters into flat
host buffers), :mod:`._reduction` (one bucket's reduction and the agreement on Inf/NaN, shared
with the hook), :mod:`._checkpoint` (state dicts), :mod:`._hooks` (the DDP hook),
:mod:`._device` (device-resident compression: the memory and the selection on the parameters'
device, only the k entries to the host),
:mod:`._stats` (:class:`CompressionStats`), :mod:`._broadcast` (equal starting states),
:mod:`._legacy` (the deprecated keyword arguments).
"""

from ._broadcast import broadcast_optimizer_state, broadcast_parameters
from ._optimizer import DEFAULT_BUCKET_BYTES, DistributedOptimizer
from ._stats import CompressionStats

__all__ = ["DistributedOptimizer", "CompressionStats", "broadcast_parameters",
           "broadcast_optimizer_state", "DEFAULT_BUCKET_BYTES", "SparcmlHookState",
           "sparcml_hook", "init_process_group"]

_HOOK_NAMES = ("SparcmlHookState", "sparcml_hook", "init_process_group")


def __getattr__(name):  # the DDP hook's names, imported at their first use (PEP 562)
    if name in _HOOK_NAMES:
        from . import _hooks

        return getattr(_hooks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
