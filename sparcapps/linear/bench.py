"""Benchmark of the linear models: epoch time per allreduce algorithm against ``dense``, side by
side in one run, and single-rank throughput against scikit-learn's ``SGDClassifier``.

::

    mpiexec -n 4 python -m sparcapps.linear.bench --synth url            # algorithms, P = 4
    python -m sparcapps.linear.bench --synth url --throughput            # one rank vs sklearn

Algorithms: one estimator per algorithm, trained epoch by epoch in turn (``partial_fit``), so
that a change of machine load hits every algorithm alike. Epoch time is the slowest rank's time
in the training steps (gradient, allreduce, update; evaluation excluded); ``comm share`` is the
slowest rank's allreduce time over its step time. Prints the ratio of ``dense``'s median epoch
time to each algorithm's. ``--output`` appends one record per algorithm.

Throughput: ``fit`` of ours (P = 1, everything included) and of ``SGDClassifier`` (same loss,
alpha, epochs, ``tol=None``) on the same training rows, alternating, ``--reps`` times; rows per
second per core is training rows x epochs / median CPU time of the process (``process_time``:
on a shared machine, wall time also counts the time other jobs hold the core; both are
printed).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from contextlib import nullcontext

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.cli_args import (add_data_home_argument, add_list_argument,
                                add_records_output_argument, algorithm_help, algorithm_name,
                                make_parser, positive_int, registered_algorithms)
from sparcapps.data import data_home
from sparcapps.records import append_record, capture_environment, make_record, summarize

from .data import ensure_synth, load_split

__all__ = ["main", "build_parser", "bench_algorithms", "bench_throughput"]


def _load(args, comm):
    if args.synth:
        path = ensure_synth(args.synth, args.rows, 0, args.features,
                            args.synth_cache or data_home(args.data_home) / "synth", comm)
    else:
        path = args.data
    Xtr, ytr, _, _ = load_split(path, comm, test_fraction=args.test_fraction, split_seed=0)
    return path, Xtr, ytr


def bench_algorithms(Xtr, ytr, comm, *, algorithms, epochs: int, batch_size: int, loss: str,
                     alpha: float) -> dict:
    """Collective: per algorithm, the per-epoch history (slowest-rank times) of one estimator
    trained ``epochs`` epochs, algorithms taking turns epoch by epoch."""
    from .estimator import SparseLinearClassifier  # scikit-learn: not at --help

    ests = {a: SparseLinearClassifier(loss, alpha=alpha, batch_size=batch_size, algorithm=a,
                                      comm=comm, seed=0) for a in algorithms}
    for _ in range(epochs):
        for a, est in ests.items():
            est.partial_fit(Xtr, ytr, classes=[-1.0, 1.0])
    return {a: est.history_ for a, est in ests.items()}


def bench_throughput(Xtr, ytr, *, epochs: int, batch_size: int, loss: str, alpha: float,
                     reps: int) -> dict:
    """One process: ``fit`` CPU and wall seconds of ours and of SGDClassifier, alternating,
    with BLAS/OpenMP pools limited to one thread."""
    try:  # installed with scikit-learn; not at --help
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        def threadpool_limits(_):
            return nullcontext()

    out = {"ours": [], "sklearn": [], "ours_wall": [], "sklearn_wall": []}
    with threadpool_limits(1):  # one core each: idle BLAS threads would spin on CPU time
        _alternate(out, Xtr, ytr, epochs=epochs, batch_size=batch_size, loss=loss,
                   alpha=alpha, reps=reps)
    return out


def _alternate(out, Xtr, ytr, *, epochs, batch_size, loss, alpha, reps) -> None:
    # scikit-learn (the [apps] extra): not at --help
    from sklearn.linear_model import SGDClassifier

    from .estimator import SparseLinearClassifier

    for rep in range(reps):
        for name in ("ours", "sklearn"):
            if name == "ours":
                est = SparseLinearClassifier(loss, alpha=alpha, batch_size=batch_size,
                                             max_iter=epochs, tol=None, comm=MPI.COMM_SELF,
                                             seed=rep)
            else:
                est = SGDClassifier(loss={"log": "log_loss"}.get(loss, loss), alpha=alpha,
                                    max_iter=epochs, tol=None, random_state=rep)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c0, w0 = time.process_time(), time.perf_counter()
                est.fit(Xtr, ytr)
                out[name].append(time.process_time() - c0)
                out[name + "_wall"].append(time.perf_counter() - w0)


def build_parser():
    p = make_parser("sparc-linear-bench", __doc__.split("\n\n")[0])
    one = p.add_mutually_exclusive_group(required=True)
    one.add_argument("--data", metavar="FILE.h5", help="sparcml-csr HDF5 file")
    one.add_argument("--synth", choices=["url", "webspam"], help="a synthetic twin")
    p.add_argument("--rows", type=positive_int, default=130_000, help="rows of --synth")
    p.add_argument("--features", type=positive_int,
                   help="override the --synth feature count (default: the real data set's)")
    p.add_argument("--synth-cache", metavar="DIR",
                   help="where --synth files are kept (default: DATA_HOME/synth)")
    add_data_home_argument(p)
    p.add_argument("--test-fraction", type=float, default=0.2, help="rows held out")
    p.add_argument("--loss", choices=["log", "hinge"], default="log", help="the model")
    p.add_argument("--alpha", type=float, default=1e-4, help="L2 regularization strength")
    p.add_argument("--epochs", type=positive_int, default=3, help="passes over the data")
    p.add_argument("--batch-size", type=positive_int, default=256, help="rows per rank per step")
    add_list_argument(p, "--algorithms", item_type=algorithm_name,
                      default=list(registered_algorithms()), metavar="ALGORITHM",
                      help=algorithm_help(f"{sparcml.DENSE_BASELINE} is always included as the "
                                          f"reference (default: all). Choices:"))
    p.add_argument("--throughput", action="store_true",
                   help="one process: ours against SGDClassifier instead")
    p.add_argument("--reps", type=positive_int, default=3, help="repetitions of --throughput")
    add_records_output_argument(p, per="algorithm (or --throughput run)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with sparcml.abort_on_error():
        t0 = time.perf_counter()
        path, Xtr, ytr = _load(args, comm)
        n_train = comm.allreduce(int(Xtr.shape[0]))
        environment = capture_environment(comm) if args.output else None
        if rank == 0:
            print(f"data: {path}, {n_train:,} training rows x {Xtr.shape[1]:,} features "
                  f"(loaded in {time.perf_counter() - t0:.1f} s); load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", flush=True)
        if args.throughput:
            if size != 1:
                raise SystemExit("--throughput runs on one rank: python -m ... --throughput")
            _report_throughput(args, Xtr, ytr, n_train, environment)
            return 0
        _report_algorithms(args, comm, Xtr, ytr, environment)
    return 0


def _report_throughput(args, Xtr, ytr, n_train, environment) -> None:
    """``--throughput``: ours against SGDClassifier on one rank, printed and recorded."""
    r = bench_throughput(Xtr, ytr, epochs=args.epochs, batch_size=args.batch_size,
                         loss=args.loss, alpha=args.alpha, reps=args.reps)
    ours, theirs = np.median(r["ours"]), np.median(r["sklearn"])
    rows = n_train * args.epochs
    print(f"single rank, {args.loss} loss, {args.epochs} epochs, batch "
          f"{args.batch_size}, median of {args.reps} fits (CPU seconds of the process; "
          f"wall in brackets):")
    for name, label in (("ours", "sparc-linear "), ("sklearn", "SGDClassifier")):
        cpu, wall = np.median(r[name]), np.median(r[name + "_wall"])
        print(f"  {label}  {cpu:6.2f} s CPU  {rows / cpu:10,.0f} rows/s per core  "
              f"[{wall:.2f} s wall]  runs {[round(x, 2) for x in r[name]]}")
    print(f"  ratio (ours / sklearn rows/s per core): {theirs / ours:.2f}x; load "
          f"average now {os.getloadavg()[0]:.1f}")
    if args.output:
        append_record(args.output, make_record(
            "sparc-linear-bench-throughput", config=vars(args), environment=environment,
            P=1, N=int(Xtr.shape[1]),
            timings={"ours": summarize(r["ours"]), "sklearn": summarize(r["sklearn"])},
            metrics={"rows_per_second": rows / ours,
                     "sklearn_rows_per_second": rows / theirs,
                     "ratio": theirs / ours}))


def _report_algorithms(args, comm, Xtr, ytr, environment) -> None:
    """The algorithms taking turns (collective); rank 0 prints a row per algorithm and
    records it."""
    size = comm.Get_size()
    dense = sparcml.DENSE_BASELINE
    algorithms = [dense] + [a for a in args.algorithms if a != dense]
    hist = bench_algorithms(Xtr, ytr, comm, algorithms=algorithms, epochs=args.epochs,
                            batch_size=args.batch_size, loss=args.loss, alpha=args.alpha)
    if comm.Get_rank() != 0:
        return
    med = {a: float(np.median([h["train_seconds"] for h in hist[a]])) for a in algorithms}
    print(f"P={size}, {args.loss} loss, global batch {args.batch_size * size}, "
          f"{hist[dense][0]['steps']} steps/epoch, {args.epochs} epochs each, taking "
          f"turns; epoch time = slowest rank's step time (median over epochs)")
    print(f"{'algorithm':>22} {'epoch s':>8} {'compute s':>9} {'comm s':>8} "
          f"{'comm share':>10} {'MiB/rank':>9} {'density':>8} {'speedup vs dense (x)':>20}")
    for a in algorithms:
        h = hist[a]
        comp = float(np.median([e["compute_seconds"] for e in h]))
        com = float(np.median([e["comm_seconds"] for e in h]))
        share = com / max(comp + com, 1e-12)
        mib = float(np.median([e["bytes_sent"] for e in h])) / 2**20
        dens = float(np.median([e["gradient_density"] for e in h]))
        speedup = med[dense] / med[a]
        print(f"{a:>22} {med[a]:8.2f} {comp:9.2f} {com:8.2f} {share:10.1%} {mib:9.1f} "
              f"{dens:8.4f} {speedup:19.1f}x", flush=True)
        if args.output:
            append_record(args.output, make_record(
                "sparc-linear-bench", config=vars(args), environment=environment,
                algorithm=a, P=size, N=int(Xtr.shape[1]), density=dens,
                timings={"epoch": summarize([e["train_seconds"] for e in h])},
                metrics={"speedup_over_dense": speedup, "comm_share": share,
                         "epochs": h},
                bytes={"sent_per_rank_max": int(np.median([e["bytes_sent"] for e in h]))}))
    best = min((a for a in algorithms if a != dense), key=lambda a: med[a], default=None)
    if best:
        print(f"best sparse: {best}, {med[dense] / med[best]:.1f}x faster per epoch than "
              f"dense; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")


if __name__ == "__main__":
    sys.exit(main())
