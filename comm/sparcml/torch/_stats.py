"""What a :class:`~sparcml.torch.DistributedOptimizer` communicated: :class:`CompressionStats`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["CompressionStats"]


@dataclass
class CompressionStats:
    """What this rank communicated, summed over the steps since the last :meth:`reset`.

    ``values``: gradient values reduced (N per step); ``sent_values``: values this rank sent
    (N when dense, about ``density * N`` with top-k); ``result_values``: nonzeros of the summed
    gradients; ``bytes_sent``: bytes this rank sent (:class:`sparcml.TrafficStats`);
    ``dense_bytes``: what a bandwidth-optimal dense allreduce of the same gradients would send
    per rank, ``2 (P-1)/P * N * itemsize``; ``flatten_seconds``: copying the gradients into the
    host buffers, on the calling thread (inside ``backward()``); ``compress_seconds``: error
    feedback and top-k, on the communication thread (overlapping backward; the quantization
    runs inside the allreduce); ``wait_seconds``: time blocked in
    :meth:`DistributedOptimizer.synchronize` (the communication not hidden behind backward);
    ``to_host_bytes`` / ``to_device_bytes``: bytes copied between the parameters' memory and
    the host for the reduction (the host path stages each bucket's whole gradient both ways;
    the device path of :mod:`sparcml.torch._device`, the k selected entries to the host and
    the exchange's result back).

    The figures of a stretch of training (an epoch, say)::

        before = opt.stats.snapshot()
        ...                                   # steps
        epoch = opt.stats.since(before)       # a CompressionStats of those steps alone
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
    to_host_bytes: int = 0
    to_device_bytes: int = 0

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

    def snapshot(self) -> "CompressionStats":
        """A copy of the figures now (the counters go on; this copy does not)."""
        return replace(self)

    def since(self, earlier: "CompressionStats") -> "CompressionStats":
        """The figures of the steps after ``earlier`` (a :meth:`snapshot` of these stats):
        every counter minus the earlier one; ``sent_density`` and the other ratios of the
        result are those of that stretch alone."""
        if not isinstance(earlier, CompressionStats):
            raise TypeError(f"since() takes a CompressionStats (from snapshot()), got "
                            f"{type(earlier).__name__}")
        return CompressionStats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name)
                                   for f in fields(self)})

    def _add(self, other: "CompressionStats") -> None:
        """Add one step's figures (the optimizer's own bookkeeping)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
