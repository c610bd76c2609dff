"""Step time of data-parallel training, dense allreduce vs quantized top-k, side by side.

``mpiexec -n 4 sparc-deep-bench [--width 100] [--reps 10] [--bits 4]`` trains the digits CNN
(``--width 100``: 5.4M parameters) with one :class:`sparcml.torch.DistributedOptimizer` per
configuration (``dense_baseline``: full gradients, MPI allreduce, ``Compression.none()``;
``topk``: ``--density`` 1% with error feedback over the default algorithm, recursive
doubling, its values QSGD-quantized with ``--bits B``, full precision by default as in every
tool), the configurations interleaved repetition by repetition so that both see
the same machine load. Per repetition (slowest rank; columns in seconds):

- ``step``: forward + backward (the hooks compress and launch the buckets) + ``synchronize()``
  + optimizer step: the real training step;
- ``compute``: the same forward + backward + step on a copy of the model without hooks;
- ``comm``: the reduction alone: the bucket gradients set by hand, then ``synchronize()``
  (compression + communication, nothing to overlap with), on a second optimizer of the same
  configuration;
- ``wait``: the time ``step`` spent blocked in ``synchronize()`` (communication not hidden);
- ``compress``: top-k and QSGD of the buckets, on the communication thread (it overlaps the
  backward pass and is part of the reduction: included in ``comm``).

``hidden share = (compute + comm - step) / comm`` (clipped to [0, 1]) is the share of the
reduction
that the backward pass hid, net of any slowdown of the compute by the communication
thread (ranks that outnumber the cores slow each other down); ``unwaited share = 1 - wait /
comm`` is the share of the reduction (compression included) that did not show up as waiting in
``synchronize()``. Prints medians, the ratios dense / top-k, bytes per step; with
``--output`` appends one record per configuration (app ``sparc-deep-bench``).
"""

from __future__ import annotations

import copy
import sys
import time

import numpy as np

from sparcapps.cli_args import (add_bits_argument, add_records_output_argument, algorithm_name,
                                density_help, fraction, make_parser, nonnegative_int,
                                positive_int)
from sparcapps.records import append_record, capture_environment, make_record, summarize

from .data import load_digits_split

__all__ = ["main", "build_parser"]


def build_parser():
    p = make_parser("sparc-deep-bench", __doc__)
    p.add_argument("--width", type=positive_int, default=100,
                   help="DigitsCNN width (100: 5.4M params)")
    p.add_argument("--depth", type=positive_int, default=2, help="conv layers")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="examples per rank per step")
    p.add_argument("--reps", type=positive_int, default=10,
                   help="timed repetitions per configuration")
    p.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed repetitions first")
    p.add_argument("--density", type=fraction, default=0.01,
                   help=density_help("what top-k keeps of each gradient bucket in the "
                                     "compressed configuration"))
    # 0 as in every tool; the README's line times top-k + 4-bit QSGD with --bits 4
    add_bits_argument(p, what="the compressed configuration's values")
    p.add_argument("--algorithm", default=None, type=algorithm_name,
                   help="allreduce algorithm of the top-k configuration (default: sparcml's)")
    p.add_argument("--bucket-mb", type=float, default=4.0, help="gradient MiB per bucket")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per rank")
    add_records_output_argument(p, per="configuration")
    return p


def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI  # initializes MPI: not at --help

    return comm.allreduce(seconds, op=MPI.MAX)


def main(argv=None) -> int:
    from sparcml import abort_on_error  # numba and MPI: after parsing, not at --help

    args = build_parser().parse_args(argv)
    with abort_on_error():
        return _run(args)


def _run(args) -> int:
    # torch (the [torch] extra), sparcml and MPI, and the modules that import torch: not at
    # --help
    import torch
    from mpi4py import MPI

    import sparcml.torch as st
    from sparcml import DEFAULT_ALGORITHM, QSGD
    from sparcml.compression import Compression, ResidualMemory, TopKCompressor

    from .models import DigitsCNN

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    X, y, _, _ = load_digits_split()
    rng = np.random.default_rng([1, rank])
    base = DigitsCNN(args.width, args.depth)
    st.broadcast_parameters(base, comm=comm)
    n_params = sum(p.numel() for p in base.parameters())
    configs = {
        "dense_baseline": Compression.none(),
        "topk": Compression(TopKCompressor(density=args.density),
                            QSGD(args.bits) if args.bits else None, ResidualMemory(),
                            args.algorithm or DEFAULT_ALGORITHM),
    }
    runs = {name: _config_run(args, comm, base, compression)
            for name, compression in configs.items()}

    def batch():
        idx = rng.integers(0, len(y), args.batch_size)
        return torch.from_numpy(X[idx]), torch.from_numpy(y[idx])

    if rank == 0:
        print(f"DigitsCNN width {args.width}: {n_params:,} parameters, P={size}, batch "
              f"{args.batch_size}/rank, buckets of {args.bucket_mb} MiB, {args.reps} reps",
              flush=True)
    load_before = _loadavg()
    for rep in range(args.warmup + args.reps):
        for r in runs.values():
            times = _time_step(comm, r, *batch(), rep)
            if rep >= args.warmup:
                for k, v in times.items():
                    r["t"][k].append(v)
                r["bytes"].append(r["opt"].last_step.bytes_sent)
    load = {"before": load_before, "after": _loadavg()}
    env = capture_environment(comm)
    summary = _report(args, comm, runs, configs, env, load, n_params)
    if rank == 0:
        d, t = summary["dense_baseline"], summary["topk"]
        print(f"dense / top-k: step time {d['step'] / t['step']:.2f}x, communication alone "
              f"{d['comm'] / t['comm']:.2f}x, exposed wait {d['wait'] / max(t['wait'], 1e-9):.2f}x,"
              f" bytes " + (f"{d['bytes'] / t['bytes']:.1f}x" if t["bytes"] else "- (P = 1: none "
                            "sent)"), flush=True)
    return 0


def _config_run(args, comm, base, compression) -> dict:
    """One configuration's three copies of ``base``: the trained model and its optimizer,
    a second one for the communication alone, and a plain one (no hooks) for the compute
    alone; and its lists of times and bytes."""
    import torch  # optional: the [torch] extra

    import sparcml.torch as st  # imports torch

    def wrapped():
        model = copy.deepcopy(base)
        opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                      model.named_parameters(), comm=comm,
                                      compression=compression,
                                      bucket_bytes=int(args.bucket_mb * 2**20))
        return model, opt

    model, opt = wrapped()
    comm_model, comm_opt = wrapped()
    plain = copy.deepcopy(base)
    return {"model": model, "opt": opt, "comm_model": comm_model,
            "comm_opt": comm_opt, "plain": plain,
            "plain_opt": torch.optim.SGD(plain.parameters(), lr=0.01),
            "t": {k: [] for k in ("step", "compute", "comm", "wait", "compress")},
            "bytes": []}


def _time_step(comm, r, xb, yb, rep) -> dict:
    """One repetition of configuration ``r`` on the batch ``(xb, yb)``: the training step, the
    compute alone and the communication alone, slowest rank's seconds (collective)."""
    import torch  # optional: the [torch] extra

    loss_fn = torch.nn.functional.cross_entropy
    # the training step, communication overlapping backward
    comm.Barrier()
    t0 = time.perf_counter()
    loss_fn(r["model"](xb), yb).backward()
    t1 = time.perf_counter()
    r["opt"].synchronize()
    t2 = time.perf_counter()
    r["opt"].step()
    r["opt"].zero_grad()
    step = _slowest(comm, time.perf_counter() - t0)
    wait = _slowest(comm, t2 - t1)
    compress = _slowest(comm, r["opt"].last_step.compress_seconds)
    # compute alone
    comm.Barrier()
    t0 = time.perf_counter()
    loss_fn(r["plain"](xb), yb).backward()
    r["plain_opt"].step()
    r["plain_opt"].zero_grad()
    compute = _slowest(comm, time.perf_counter() - t0)
    # communication alone (compression included), on gradients of the same size
    for p in r["comm_model"].parameters():
        p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(rep)) * 1e-3
    comm.Barrier()
    t0 = time.perf_counter()
    r["comm_opt"].synchronize()
    comm_s = _slowest(comm, time.perf_counter() - t0)
    r["comm_opt"].step()  # ends the step (untimed): the next synchronize() reduces
    r["comm_opt"].zero_grad()
    return {"step": step, "compute": compute, "comm": comm_s, "wait": wait,
            "compress": compress}


def _report(args, comm, runs, configs, env, load, n_params) -> dict:
    """Medians and shares per configuration (collective), printed on rank 0 and recorded
    with ``--output``; returns them by configuration."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        print(f"load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}")
        print(f"{'config':14} {'step s':>8} {'compute s':>9} {'comm s':>8} {'wait s':>8} "
              f"{'compress s':>10} {'hidden share':>12} {'unwaited share':>14} "
              f"{'bytes/step/rank':>16} {'buckets/step':>12} {'comm ms/bucket':>14}")
    summary = {}
    for name, r in runs.items():
        med = {k: float(np.median(v)) for k, v in r["t"].items()}
        hidden = min(1.0, max(0.0, (med["compute"] + med["comm"] - med["step"]) / med["comm"]))
        unwaited = min(1.0, max(0.0, 1.0 - med["wait"] / med["comm"]))
        per_rank = comm.allreduce(float(np.mean(r["bytes"]))) / size
        # the per-call cost a bucket adds: communication alone (compression included) over
        # the buckets it reduced (the same model and bucket size in every config)
        buckets = len(r["comm_opt"].buckets)
        per_bucket = med["comm"] / max(buckets, 1)
        summary[name] = {**med, "hidden": hidden, "bytes": per_rank, "buckets": buckets,
                         "comm_per_bucket": per_bucket}
        if rank == 0:
            print(f"{name:14} {med['step']:8.4f} {med['compute']:9.4f} {med['comm']:8.4f} "
                  f"{med['wait']:8.4f} {med['compress']:10.4f} {hidden:12.2f} "
                  f"{unwaited:14.2f} {per_rank:16,.0f} {buckets:12d} {per_bucket * 1e3:14.3f}")
        if rank == 0 and args.output:
            append_record(args.output, make_record(
                "sparc-deep-bench", config={**vars(args), "config": name}, environment=env,
                algorithm=configs[name].algorithm, P=size, N=n_params,
                density=getattr(configs[name].compressor, "density", None),
                timings={k: summarize(v) for k, v in r["t"].items()},
                metrics={"hidden_share": hidden, "unwaited_share": unwaited,
                         "load_average": load, "buckets": buckets,
                         "comm_seconds_per_bucket": per_bucket},
                bytes={"sent_per_step": per_rank}))
    return summary


def _loadavg():
    try:
        with open("/proc/loadavg") as fh:
            return fh.read().split()[:3]
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
