"""The modeled compute of a simulated deep-app step: its calibration on this machine
(:func:`step_rates`) and what each step charges its rank (:class:`StepCharge`).

``sparc-cnn`` / ``sparc-lstm --simulate`` (:mod:`sparcapps.deep.simranks`) charge every rank,
before each step's backward, the step's local compute: forward and backward of its minibatch,
the copies into and out of the bucket buffers (``flatten``), the top-k selection and error
feedback (``select``), and the rest of ``synchronize()``'s own work (its finiteness checks, the
result's copy to dense and density count, the statistics, the Python around the kernels:
``synchronize``); before its update, the ``update`` (clipping, the optimizer's step,
``zero_grad``). The rates are measured once per machine and configuration and cached
(:func:`sparcml.sim.cached_rates`), so the same run gives the same modeled seconds on a quiet and
on a loaded machine.

The calibration is a short training run of the run's own model, batch and compression on this
rank alone (``COMM_SELF``): a real :class:`sparcml.torch.DistributedOptimizer` with its hooks
and ``synchronize()``, the SGD at the run's learning rate and momentum, the task's clipping, the
epoch's batches in order (an LSTM's hidden state carried). After ``_WARMUP_STEPS`` steps (Numba's
compilation, first allocations, the allocator and caches in their steady state) each part of
``_TIMED_STEPS`` consecutive steps is timed on the thread's CPU clock, and each rate is a median
over those steps: what a step of a training loop costs here, not what a part costs repeated
alone. Inside each step the parts charged apart are timed on that step's gradient: its copy into
a buffer (``gather``) and the selection of every bucket (in a copy of the run's compression:
its own residuals) before ``synchronize()``; after it the copy of the averaged gradient back
(``scatter``) and the division by P. Then ``forward_backward`` is forward and backward less the
gather (the hooks copy the gradients during backward), ``flatten`` the gather, division and
scatter, ``synchronize`` the call less the last bucket's share of the selection (that bucket is
compressed inside it) and the scatter. The selection runs on the optimizer's own buckets (its
parameters in launch order, cut at its sizes). Version 2 of the rates took the best of 5 timings
of each part repeated alone (the selection on random gradients); on this machine that was below a
training step's cost. Version 3 cut the selection with a copy of the optimizer's bucketing rule,
which had drifted from it (the CNN at ``--bucket-mb 0.01``: six buckets of 2,570, 256, 131,072,
32, 4,608 and 160 values against the optimizer's four of 2,826, 131,072, 4,640 and 160; at the
default 4 MiB both make one), on a gradient in forward order. Versions 2 and 3 moved by up to
about 1.5-2x between calibrations a second apart on this VM, whose speed changes over spells of
about a second (BENCHMARKS.md, "The calibration, version 3"): a user who recalibrates moves
modeled step times by as much.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from sparcml import sim

from .comm_options import compression_from_args

__all__ = ["RATES_VERSION", "RATE_NAMES", "step_rates", "StepCharge"]

RATES_VERSION = 4
RATE_NAMES = ("forward_backward", "flatten", "select", "synchronize", "update")
_WARMUP_STEPS = 20
_TIMED_STEPS = 100
_PARTS = ("forward_backward", "gather", "select", "synchronize", "scatter", "divide", "update")


def _config_key(app: str, args) -> dict:
    """What the step's rates depend on (the calibration's cache key)."""
    keys = ("dataset", "width", "depth", "batch_size", "bptt", "threads", "density",
            "bits", "no_error_feedback", "bucket_mb", "topk_bucket_size", "global_topk",
            "compressor", "momentum", "weight_decay", "clip", "algorithm")
    if getattr(args, "compressor", None):
        keys += ("threshold", "powersgd_rank", "shared_indices", "clip_norm",
                 "compressor_momentum", "qsgd_norm", "topk_per_tensor", "error_feedback")
    return {"app": app, "dense_baseline": bool(args.dense),
            **{k: getattr(args, k, None) for k in keys}}


class _Selection:
    """The run's selection (top-k and error feedback) in its own copy of the compression, on a
    flat gradient laid out in the optimizer's bucket order and cut at its buckets' sizes
    (``sizes``, in launch order); nothing for the dense baseline or a compressor that
    compresses inside its reduction (charged there, by the simulator)."""

    def __init__(self, args, sizes):
        self.compression = compression_from_args(args).fresh(seed=args.seed)
        comp = self.compression.compressor
        self.active = (self.compression.lossy and not args.dense
                       and callable(getattr(comp, "compress", None))
                       and not any(hasattr(comp, a) for a in ("compress_in", "reduce_in")))
        self.sizes = sizes

    def __call__(self, flat) -> None:
        if not self.active:
            return
        memory, comp, o = self.compression.memory, self.compression.compressor, 0
        for key, m in enumerate(self.sizes):
            g = memory.compensate(flat[o:o + m].copy(), key)
            memory.update(g, key, comp.compress(g))
            o += m


def _copy(params, host, *, into_buffer: bool) -> None:
    """The gradients into the flat buffer ``host`` (gather), or back from it (scatter)."""
    o = 0
    for p in params:
        part = host[o:o + p.numel()]
        if into_buffer:
            part.copy_(p.grad.reshape(-1))
        else:
            p.grad.copy_(part.view_as(p.grad))
        o += p.numel()


def _train_and_time(args, task, dist, params, selection) -> dict:
    """``_WARMUP_STEPS`` then ``_TIMED_STEPS`` real steps of ``task`` through ``dist``; each
    part's thread-CPU seconds per timed step (see the module docstring)."""
    import torch  # the [torch] extra: not at --help

    timer = time.thread_time if args.threads == 1 else time.process_time
    flat = np.zeros(sum(p.numel() for p in params), np.float32)
    host = torch.from_numpy(flat)
    clip = getattr(task, "clip", None)
    times = {k: [] for k in _PARTS}
    epoch, batches, i = 0, task.start_epoch(0), 0
    if not batches:  # no step to time (nor, with fewer examples per rank, to charge)
        return {k: [0.0] for k in _PARTS}
    for step in range(_WARMUP_STEPS + _TIMED_STEPS):
        if i == len(batches):
            epoch, i = epoch + 1, 0
            batches = task.start_epoch(epoch)
        took = {}
        t0 = timer()
        loss, _, _ = task.loss(batches[i])
        loss.backward()
        t1 = timer()
        _copy(params, host, into_buffer=True)  # gather: as the hooks copy the gradients
        t2 = timer()
        selection(flat)  # on this step's gradient
        t3 = timer()
        dist.synchronize()
        t4 = timer()
        took.update(forward_backward=t1 - t0, gather=t2 - t1, select=t3 - t2,
                    synchronize=t4 - t3)
        _copy(params, host, into_buffer=True)  # the averaged gradient, not timed, ...
        t0 = timer()
        _copy(params, host, into_buffer=False)  # ... written back: the scatter (same values)
        t1 = timer()
        np.divide(flat, 2, out=flat)
        t2 = timer()
        if clip:
            torch.nn.utils.clip_grad_norm_(task.model.parameters(), clip)
        dist.step()
        dist.zero_grad()
        float(loss.detach())
        t3 = timer()
        took.update(scatter=t1 - t0, divide=t2 - t1, update=t3 - t2)
        i += 1
        if step >= _WARMUP_STEPS:
            for k in _PARTS:
                times[k].append(took[k])
    return times


def _measure(app: str, args, make_task) -> dict:
    """The rates of one step's parts, in seconds, on this machine (see the module docstring)."""
    import torch  # the [torch] extra: not at --help

    import sparcml.torch as st

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    task = make_task(args, MPI.COMM_SELF)
    model = task.model
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                          momentum=args.momentum, weight_decay=args.weight_decay)
    dist = st.DistributedOptimizer(
        opt, model.named_parameters(), compression=compression_from_args(args),
        bucket_bytes=max(1, int(args.bucket_mb * 2**20)), comm=MPI.COMM_SELF, seed=args.seed)
    # the selection on the optimizer's own buckets: the parameters in its launch order, cut
    # at its sizes (a copy of its cutting rule drifted from it)
    by_name = dict(model.named_parameters())
    buckets = dist.buckets
    params = [by_name[name] for b in buckets for name in b["names"]]
    sizes = [b["numel"] for b in buckets]
    selection = _Selection(args, sizes)
    try:
        times = _train_and_time(args, task, dist, params, selection)
    finally:
        dist.remove_hooks()
    med = {k: float(np.median(v)) for k, v in times.items()}
    if not selection.active:  # the dense baseline: no selection (the timer's call alone)
        med["select"] = 0.0
    last_share = sizes[-1] / max(1, sum(sizes)) if sizes else 0.0
    return {"forward_backward": max(0.0, med["forward_backward"] - med["gather"]),
            "flatten": med["gather"] + med["divide"] + med["scatter"],
            "select": med["select"],
            "synchronize": max(0.0, med["synchronize"] - med["select"] * last_share
                               - med["scatter"]),
            "update": med["update"]}


def step_rates(app: str, args, make_task) -> dict:
    """Seconds of one step's parts on this machine for this run's model, batch and
    compression (``forward_backward``, ``flatten``, ``select``, ``synchronize``, ``update``;
    see the module docstring): measured once (120 training steps: a second or two for the
    digits models) and cached per configuration."""
    digest = hashlib.sha256(json.dumps(_config_key(app, args), sort_keys=True,
                                       default=str).encode()).hexdigest()[:16]

    def measure() -> dict:
        # said before it starts: the first calibration of a process compiles sparcml's
        # kernels (5-35 s on this machine), a pause no estimate has covered yet
        print(f"{app} --simulate: calibrating this machine's step ({_WARMUP_STEPS} + "
              f"{_TIMED_STEPS} training steps on one rank; once per configuration, cached; "
              f"the first in a process also compiles the kernels)", file=sys.stderr, flush=True)
        start = time.perf_counter()
        rates = _measure(app, args, make_task)
        print(f"{app} --simulate: calibrated in {time.perf_counter() - start:.1f} s",
              file=sys.stderr, flush=True)
        return rates

    # the version in the name: checkouts of another version (worktrees share the cache) keep
    # their own file instead of measuring again over each other's
    return sim.cached_rates(f"deep-step-v{RATES_VERSION}-{digest}", measure,
                            version=RATES_VERSION, names=RATE_NAMES)


class StepCharge:
    """What one simulated step charges its rank (seconds): ``before_backward`` (forward,
    backward, the bucket copies, the selection, the rest of ``synchronize()``'s own work)
    and ``before_update`` (the update); with
    ``step_seconds`` (``--step-seconds``) that figure before backward and nothing else."""

    def __init__(self, rates: dict | None, step_seconds: float | None = None):
        if step_seconds is not None:
            self.before_backward, self.before_update = float(step_seconds), 0.0
        else:
            self.before_backward = (rates["forward_backward"] + rates["flatten"]
                                    + rates["select"] + rates["synchronize"])
            self.before_update = rates["update"]
        given = rates is None or step_seconds is not None
        self.flatten = 0.0 if given else rates["flatten"]
        self.select = 0.0 if given else rates["select"]
        self.synchronize = 0.0 if given else rates["synchronize"]

    def inside_synchronize(self, last_share: float) -> float:
        """The part of ``before_backward`` that a real rank spends inside ``synchronize()``:
        its own work and the selection of the step's last bucket (``last_share``: that
        bucket's fraction of the gradient values), which it compresses and reduces there. A
        simulated record counts it as communication time, as a measured one does; charged
        before backward all the same (a charge while the communication thread runs would make
        the clock's readings depend on timing)."""
        return self.synchronize + self.select * last_share
