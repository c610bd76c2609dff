"""One training step's reductions of a compressor-table row, run on the event-level simulator.

Package-internal (:mod:`sparcapps.deep.compressor_table` ``--simulate``). For a record, P
simulated ranks (:func:`sparcml.sim.run`, one rank per node of ``{P}x10gbit``) each build the
record's :class:`~sparcml.compression.Compression` (its own copy: memory and compressor state
are per rank), draw a seeded float32 gradient per bucket of the run (``bucket_shapes``) and
call ``Compression.allreduce(x, key=bucket, comm=comm, shapes=...)``: the reduction
``DistributedOptimizer`` makes per bucket, with the parameters' shapes (PowerSGD's matrices).

Assumptions, each stated in BENCHMARKS.md beside the figures:

- the gradients are independent standard normal draws per rank (seed: the record's seed, the
  rank and the bucket). For the sparse sums this is the worst case of fill-in: the ranks'
  selected indices overlap only by chance, so a sum of P top-k vectors is close to P times
  as dense as one, whereas real gradients select overlapping coordinates.
- the first step of a fresh compressor (residuals and velocities zero). A variable-k
  compressor (threshold) is made to send the run's measured density: each rank's gradient is
  scaled so that the ``1 - d`` quantile of ``|x|`` is the threshold (d: the record's final
  ``sent_density``). DGC runs with its warm-up skipped (the density after warm-up, what the
  run sent at its end).
- the figure is communication alone: the simulation runs with ``compute_scale`` 1e-9, so the
  compute charged to the ranks (the simulator's default ``compute="model"``: calibrated kernel
  rates times their work, and a cost per communicator call; drawing the gradient, compressing,
  merging) is about zero and the slowest rank's virtual time is the modeled latency and
  bandwidth of the messages and collectives, waits for other ranks included; it does not
  depend on this host or its load.
"""

from __future__ import annotations

import math

import numpy as np

from sparcml import TrafficStats, sim

__all__: list[str] = []

COMPUTE_SCALE = 1e-9  # measured compute x this: about zero (communication alone)


def _layout(rec) -> list[list[tuple]]:
    """The run's buckets, each a list of parameter shapes (one flat bucket per
    ``bucket_mb`` when the record has no ``bucket_shapes``)."""
    layout = rec["metrics"].get("bucket_shapes")
    if layout:
        return [[tuple(s) for s in shapes] for shapes in layout]
    N = int(rec["N"])
    buckets = max(1, math.ceil(N * 4 / max(1, int(rec["config"]["bucket_mb"] * 2**20))))
    n = math.ceil(N / buckets)
    return [[(min(n, N - b * n),)] for b in range(buckets)]


def _fresh_compression(rec, make_compression):
    """The record's Compression (``make_compression(rec)``), DGC's warm-up skipped."""
    compression = make_compression(rec)
    if getattr(compression.compressor, "warmup_steps", 0):
        compression.compressor.warmup_steps = 0
    return compression


def _gradient(rec, rank: int, bucket: int, n: int) -> np.ndarray:
    """The seeded float32 gradient of one rank and bucket (threshold: scaled to send the
    run's measured density)."""
    rng = np.random.default_rng([int(rec["config"].get("seed", 0)), rank, bucket])
    x = rng.standard_normal(n).astype(np.float32)
    threshold = rec["config"].get("threshold")
    if rec["config"].get("compressor") == "threshold" and threshold:
        d = float(rec["metrics"]["epochs"][-1].get("sent_density", 1.0))
        q = float(np.quantile(np.abs(x), 1.0 - d))
        x *= np.float32(threshold / q)
    return x


def simulate_step(rec, P: int, make_compression, *, network: str | None = None,
                  timeout: float | None = None):
    """One step's reductions of ``rec`` on P simulated ranks: ``(seconds, result)``, seconds
    the slowest rank's virtual time (communication alone, see the module docstring) and
    ``result`` the :class:`sparcml.sim.SimResult` (its ``results``: per rank, ``(values,
    stats)``: the values its compressed vectors carried, summed over the buckets, and the
    :class:`~sparcml.TrafficStats` of its calls). ``make_compression(rec)``: the record's
    :class:`~sparcml.compression.Compression` (``compressor_table``'s)."""
    layout = _layout(rec)

    def body(comm):
        compression = _fresh_compression(rec, make_compression)
        stats = TrafficStats()
        sent = 0
        for b, shapes in enumerate(layout):
            n = sum(math.prod(s) for s in shapes)
            x = _gradient(rec, comm.Get_rank(), b, n)
            out = compression.reduce(x, b, comm, shapes=shapes, stats=stats)
            sent += int(out.values_sent)
        return sent, stats

    result = sim.run(P, body, network=network or f"{P}x10gbit", compute_scale=COMPUTE_SCALE,
                     timeout=timeout)
    return result.time, result

