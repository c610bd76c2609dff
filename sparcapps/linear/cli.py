"""``sparc-linear`` (and the shortcuts ``sparc-logreg``, ``sparc-svm``): train a sparse logistic
regression or linear SVM data-parallel over sparcml.

Launch with ``mpiexec -n P sparc-linear --data url.h5 --loss log ...`` (or under ``srun``).
Each rank reads its shard of the training rows; every epoch prints (rank 0) and records the
loss (the objective: the epoch's mean data loss plus ``alpha / 2 * |w|^2``, printed with the
data loss beside it), train and test accuracy, compute and communication seconds, bytes sent
and the density of the summed gradient. ``--algorithm dense`` is the dense-communication
baseline.

Checkpoints: ``--checkpoint-every-steps N`` writes the training state every N *steps* (global
minibatch updates) to ``--checkpoint`` (atomically); ``--resume CKPT`` continues from one and
ends with the same weights, bit for bit, as an uninterrupted run with the same options; a
checkpoint that has all ``--epochs`` already is a finished run: rank 0 says so (its epochs,
loss and accuracies), nothing is trained or recorded, exit status 0.
``--stop-after N`` stops after N steps in all (checkpointing first): a planned interruption.
``--simulate P [P ...] --network SPEC`` runs the same training on P simulated ranks in this
process (no mpiexec; :mod:`sparcapps.simapp`): the weights, losses and accuracies of a real
P-rank run, bit for bit, with modeled seconds (one record per P).
SIGTERM or SIGUSR1 (Slurm's warning before the time limit, forwarded by mpiexec or srun) stops
every rank after the same step, about a second later at most, with a checkpoint and exit status
128 + the signal's number (see :mod:`sparcapps.interrupt`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import time

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.cli_args import (add_bits_argument, add_checkpoint_every_argument,
                                add_data_home_argument, add_options_arguments,
                                add_records_output_argument, algorithm_help, algorithm_name,
                                make_parser, options_from_args, output_file, positive_int)
from sparcapps.data import data_home
from sparcapps.interrupt import StopOnSignal
from sparcapps.output_paths import write_with_fallback
from sparcapps.records import append_record, capture_environment, make_record, summarize
from sparcapps.sim_estimate import estimate
from sparcapps.simapp import (SimPlan, add_simulate_arguments, check_simulate_arguments,
                              mark_simulated, run_simulated)

from .collective import agree_or_raise, collective_errors
from .data import SYNTH_PRESETS, ensure_synth, load_split
from .errors import CheckpointError, CheckpointMismatchError, LinearModelError
from .schedule import SCHEDULES
from .dense_model import dense_model, dense_model_epochs
from .stepcost import fixed_step_seconds

__all__ = ["main", "logreg_main", "svm_main", "build_parser", "build_estimator"]


def build_parser(prog: str = "sparc-linear", loss: str | None = None) -> argparse.ArgumentParser:
    desc = __doc__.split("\n\n")[0].replace("``", "")
    if loss is not None:
        desc = {"log": "sparc-logreg: sparse logistic regression (sparc-linear --loss log)",
                "hinge": "sparc-svm: sparse linear SVM (sparc-linear --loss hinge)"}[loss]
    p = make_parser(prog, desc)
    src = p.add_argument_group("data")
    one = src.add_mutually_exclusive_group(required=True)
    one.add_argument("--data", metavar="FILE.h5",
                     help="sparcml-csr HDF5 file (sparc-data convert / sparc-data synth)")
    one.add_argument("--synth", choices=sorted(SYNTH_PRESETS),
                     help="a synthetic twin (generator seed 0), generated once into "
                          "--synth-cache")
    src.add_argument("--rows", type=int, default=130_000, help="rows of the --synth data set")
    src.add_argument("--features", type=int,
                     help="override the --synth feature count (default: the real data set's)")
    src.add_argument("--synth-cache", metavar="DIR",
                     help="where --synth files are kept (default: DATA_HOME/synth)")
    add_data_home_argument(src)
    src.add_argument("--test-fraction", type=float, default=0.2,
                     help="rows held out for testing (by a hash of the row number)")
    src.add_argument("--split-seed", type=int, default=0, help="seed of the train/test split")
    m = p.add_argument_group("model and training")
    if loss is None:
        m.add_argument("--loss", choices=["log", "hinge"], default="log",
                       help="log: logistic regression; hinge: linear SVM")
    m.add_argument("--alpha", type=float, default=1e-4, help="L2 regularization strength")
    m.add_argument("--learning-rate", choices=SCHEDULES, default="optimal",
                   help="SGDClassifier's schedules")
    m.add_argument("--eta0", type=float, default=0.01,
                   help="initial rate of constant / invscaling")
    m.add_argument("--power-t", type=float, default=0.5, help="exponent of invscaling")
    m.add_argument("--epochs", type=positive_int, default=5, help="passes over the data")
    m.add_argument("--batch-size", type=positive_int, default=256,
                   help="rows per rank per step (global batch = batch size x P)")
    m.add_argument("--tol", type=float,
                   help="stop when the printed loss (the objective) has not fallen by this "
                        "much for 5 epochs, at most --epochs epochs (SGDClassifier's tol); "
                        "default: exactly --epochs epochs")
    m.add_argument("--no-intercept", action="store_true", help="fit no intercept")
    m.add_argument("--no-shuffle", action="store_true", help="keep the row order")
    m.add_argument("--seed", type=int, default=0, help="seed of the per-epoch permutation")
    c = p.add_argument_group("communication")
    c.add_argument("--algorithm", default=sparcml.DEFAULT_ALGORITHM, type=algorithm_name,
                   help=algorithm_help("sparcml.allreduce algorithm:"))
    add_bits_argument(c)
    c.add_argument("--quantize-sparse", action="store_true",
                   help="with --bits, quantize the values of sparse messages too")
    add_options_arguments(c)
    o = p.add_argument_group("output")
    add_records_output_argument(o)
    o.add_argument("--save-model", metavar="FILE.h5", type=output_file,
                   help="write the final model here")
    o.add_argument("--checkpoint", metavar="FILE.h5", type=output_file,
                   help="checkpoint file (default: the --resume file, else MODEL.ckpt.h5 "
                        "beside --save-model, else sparc-linear.ckpt.h5)")
    add_checkpoint_every_argument(o, "steps", help="write a checkpoint every STEPS global "
                                                   "steps (and at the end)")
    o.add_argument("--resume", metavar="CKPT", help="continue from this checkpoint")
    o.add_argument("--stop-after", type=int, metavar="STEPS",
                   help="checkpoint and stop after STEPS steps in all (a planned interruption)")
    o.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is drawn only on a terminal; elsewhere one line "
                        "per epoch)")
    add_simulate_arguments(p, step_unit="step (gradient and update)")
    p.add_argument("--dense-model", action="store_true",
                   help="with --simulate and a lossless sparse --algorithm: also record the "
                        "dense baseline (--algorithm dense), modeled from this run instead of "
                        "run (its P dense vectors need about 14 bytes a feature and rank): "
                        "each step the slowest rank's gradient, MPI_Allreduce of the dense "
                        "gradient as the simulator charges it, the dense update; its "
                        "accuracies are this run's (the same sums, up to rounding); the record "
                        "says 'modeled_only'")
    return p


def _checkpoint_path(args) -> str:
    if args.checkpoint:
        return args.checkpoint
    if args.resume:  # a resumed run goes on checkpointing into the file it resumed from
        return args.resume
    if args.save_model:
        return args.save_model.removesuffix(".h5") + ".ckpt.h5"
    return "sparc-linear.ckpt.h5"


class _Monitor:
    """Progress bar, test evaluation, checkpoints and planned stops (the CLI's side of fit)."""

    def __init__(self, args, comm, Xte, yte, total_steps_done, ckpt_path, stopper=None):
        self.args = args
        self.stopper = stopper  # a StopOnSignal: Slurm's warning before the time limit
        self.comm = comm
        self.rank = comm.Get_rank()
        self.Xte = Xte
        self.yte = yte
        self.ckpt_path = ckpt_path
        self.bar = None
        self.done = total_steps_done
        self.stopped = False
        self.engine = None  # the estimator's engine, seen at each step

    def _bar(self, engine):
        """The progress bar (rank 0), created at the first step with the steps done before it
        (a resumed run's); tqdm draws it only on a terminal (``disable=None``)."""
        if self.bar is None and self.rank == 0 and not self.args.no_progress:
            from tqdm import tqdm  # the [apps] extra: not at --help

            self.bar = tqdm(total=self.args.epochs * engine.plan.steps_per_epoch,
                            initial=self.done, unit="step", file=sys.stderr, dynamic_ncols=True,
                            disable=None)
        return self.bar

    def on_step(self, est, engine, state) -> bool:
        self.engine = engine
        bar = self._bar(engine)  # before counting this step: it is the bar's first update
        self.done += 1
        if bar is not None:
            bar.update(1)
        every = self.args.checkpoint_every_steps
        signalled = self.stopper is not None and self.stopper.poll()  # collective: every step
        stop = signalled or (self.args.stop_after is not None
                             and self.done >= self.args.stop_after)
        if stop or (every and self.done % every == 0):
            self.checkpoint(est, engine, state)
        if stop:
            self.stopped = True
        return stop

    def on_epoch(self, est, engine, state, record) -> bool:
        t0 = time.perf_counter()
        if self.yte is not None:
            test = engine.evaluate(state, self.Xte, self.yte)
            if test["n"]:
                record["test_accuracy"] = test["accuracy"]
                record["test_loss"] = test["loss"]
            record["test_rows"] = test["n"]
        record["eval_seconds"] = time.perf_counter() - t0
        bar = self._bar(engine)
        if self.rank == 0:
            # "loss" is the objective (as SGDClassifier's tol watches it): the mean data loss
            # plus alpha/2 |w|^2, both named
            line = (f"epoch {record['epoch']}: loss {record['loss']:.4f} (data "
                    f"{record['data_loss']:.4f} + L2)  train acc "
                    f"{record['train_accuracy']:.4f}  test acc "
                    f"{record.get('test_accuracy', float('nan')):.4f}  compute "
                    f"{record['compute_seconds']:.2f}s  comm {record['comm_seconds']:.2f}s  "
                    f"sent {record['bytes_sent'] / 2**20:.1f} MiB/rank  density "
                    f"{record['gradient_density']:.2e}")
            if bar is not None and not bar.disable:
                bar.write(line, file=sys.stdout)
            else:
                print(line, flush=True)
        return False

    def checkpoint(self, est, engine, state) -> None:
        from .io import save_checkpoint  # h5py: not at --help

        partials = self.comm.allgather(dict(state.partial))
        error = None
        if self.rank == 0:
            try:
                save_checkpoint(self.ckpt_path, est, state, partials=partials,
                                global_batch=engine.plan.global_batch,
                                train_rows=engine.plan.n_total, P=self.comm.Get_size())
            except OSError as exc:
                error = CheckpointError(f"cannot write the checkpoint {self.ckpt_path}: {exc}")
        agree_or_raise(self.comm, error)

    def close(self):
        if self.bar is not None:
            self.bar.close()


_RESUME_MUST_MATCH = ("loss", "alpha", "learning_rate", "eta0", "power_t", "fit_intercept",
                      "shuffle", "seed")


def _resume_state(args, est, comm, n_features, global_batch, train_rows):
    """Collective: the checkpoint's TrainState, after checking it belongs to this problem."""
    from .io import load_checkpoint, model_params  # h5py: not at --help

    with collective_errors(comm):
        ck = load_checkpoint(args.resume)
        problems = []
        if ck["n_features"] != n_features:
            problems.append(f"n_features: checkpoint {ck['n_features']}, data {n_features}")
        if ck["global_batch"] != global_batch:
            problems.append(f"global batch: checkpoint {ck['global_batch']}, now "
                            f"{global_batch} (batch size x P)")
        if ck["train_rows"] != train_rows:
            problems.append(f"training rows: checkpoint {ck['train_rows']}, data {train_rows}")
        now = model_params(est)
        for key in _RESUME_MUST_MATCH:
            if ck["params"].get(key) != now[key]:
                problems.append(f"{key}: checkpoint {ck['params'].get(key)!r}, now {now[key]!r}")
        if problems:
            raise CheckpointMismatchError(
                f"{args.resume} is a checkpoint of another run: " + "; ".join(problems)
                + ". Resume with the options and data of the checkpointed run.")
    state = ck["state"]
    rank = comm.Get_rank()
    partials = ck["partials"]
    state.partial = dict(partials[rank]) if len(partials) == comm.Get_size() else {}
    est.classes_ = ck["classes"]
    return state


def _finished(args, prog: str, state, rank: int) -> int:
    """``--resume`` of a checkpoint that has all ``--epochs`` already: say so and what it
    holds, train nothing, append no record (the finished run wrote its own), exit 0."""
    if rank == 0:
        last = state.history[-1] if state.history else {}
        held = ", ".join(f"{key.replace('_', ' ')} {last[key]:.4f}"
                         for key in ("loss", "train_accuracy", "test_accuracy") if key in last)
        print(f"{prog}: {args.resume} is a finished run ({state.epoch} epochs"
              + (f"; after the last: {held}" if held else "") + f"), --epochs {args.epochs}: "
              f"nothing to train, no record appended (raise --epochs to train further)",
              flush=True)
    return 0


def run(args, prog: str, comm=None, argv=None) -> int:
    """The whole run on one rank of ``comm`` (default ``COMM_WORLD``; a simulated rank's
    communicator under ``--simulate``); returns the exit status (the same on every rank).
    ``argv``: the arguments :func:`main` was given (recorded as the command; default: the
    process's own)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    simulated = sparcml.sim.Replicas(comm).simulated
    environment = _environment(args, prog, comm, simulated, argv)
    try:
        path = _data_path(args, comm)
        Xtr, ytr, Xte, yte = load_split(path, comm, test_fraction=args.test_fraction,
                                        split_seed=args.split_seed)
        est = build_estimator(args, comm)
        train_rows = comm.allreduce(int(Xtr.shape[0]))
        global_batch = args.batch_size * size
        state = None
        done = 0
        if args.resume:
            state = _resume_state(args, est, comm, int(Xtr.shape[1]), global_batch, train_rows)
            if state.epoch >= args.epochs:  # the same on every rank (the checkpoint's)
                return _finished(args, prog, state, rank)
            done = state.epoch * (-(-train_rows // global_batch)) + state.step
        monitor, wall = _fit(args, est, comm, (Xtr, ytr), (Xte, yte), state, done, simulated)
    except LinearModelError as exc:  # raised alike on every rank
        if rank == 0:
            print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if monitor.stopped:
        return _stopped(prog, monitor, rank)
    if args.checkpoint_every_steps and monitor.engine is not None:
        monitor.checkpoint(est, monitor.engine, est.train_state_)  # the final state
    if rank == 0:
        if args.save_model:
            _save_model(args, prog, est, size, simulated)
        if args.dense_model:
            _print_dense_model(prog, est.history_)
        if args.output and est.history_:
            # the modeled dense baseline's figures move from this run's epochs to its own
            dense = dense_model_epochs(est.history_, size) if args.dense_model else None
            for history in (est.history_, dense):
                if history is None:
                    continue
                record = _record(args, prog, est, P=size, environment=environment,
                                 data_path=path, N=int(Xtr.shape[1]), train_rows=train_rows,
                                 global_batch=global_batch, wall=wall, history=history,
                                 modeled_dense=history is dense)
                if simulated:
                    mark_simulated(record, comm, args)
                append_record(args.output, record)
    return 0


def _print_dense_model(prog: str, history) -> None:
    """The modeled dense baseline's epochs beside this run's (``--dense-model``)."""
    for h in history:
        dense = h.get("dense_train_seconds", h["train_seconds"])
        print(f"{prog}: epoch {h['epoch']}: {h['train_seconds']:.4g} s; the dense baseline "
              f"(modeled from this run) {dense:.4g} s; speedup over it "
              f"{dense / max(h['train_seconds'], 1e-12):.3g}x", flush=True)


def _environment(args, prog: str, comm, simulated: bool, argv):
    """Where the run happens, for its record (collective on real ranks), or None without
    ``--output``."""
    if simulated:  # one process: rank 0 alone says where it ran (no P git subprocesses)
        environment = capture_environment() if args.output and comm.Get_rank() == 0 else None
    else:
        environment = capture_environment(comm) if args.output else None
    if environment is not None and argv is not None:  # called from Python: its own arguments
        environment["command"] = [prog, *argv]
    return environment


def _data_path(args, comm) -> str:
    """The training file: ``--data``, or the ``--synth`` twin, generated once into its cache
    (collective)."""
    if not args.synth:
        return args.data
    cache = args.synth_cache or (data_home(args.data_home) / "synth")
    return ensure_synth(args.synth, args.rows, 0, args.features, cache, comm,
                        progress=False if args.no_progress else None)


def build_estimator(args, comm):
    """The :class:`~sparcapps.linear.SparseLinearClassifier` the options describe, its
    parameters checked (collective: a bad one is a :class:`LinearModelError` on every rank)."""
    from .estimator import SparseLinearClassifier  # scikit-learn: not at --help

    quantizer = sparcml.QSGD(bits=args.bits, seed=args.seed) if args.bits else None
    est = SparseLinearClassifier(
        loss=args.loss, alpha=args.alpha, learning_rate=args.learning_rate, eta0=args.eta0,
        power_t=args.power_t, batch_size=args.batch_size, max_iter=args.epochs,
        tol=args.tol,
        algorithm=args.algorithm, quantizer=quantizer, quantize_sparse=args.quantize_sparse,
        options=options_from_args(args),
        seed=args.seed, comm=comm, fit_intercept=not args.no_intercept,
        shuffle=not args.no_shuffle)
    with collective_errors(comm):
        est.check_params()
    return est


def _fit(args, est, comm, train, test, state, done: int, simulated: bool):
    """Train ``est`` on ``train`` (from ``state`` when resuming, ``done`` steps in), with the
    monitor that evaluates ``test``, checkpoints and stops on a signal; returns the monitor
    and the wall seconds of the fit."""
    # a simulation is not a Slurm job: it handles no signals (and threads cannot)
    stopper = None if simulated else StopOnSignal(comm)
    monitor = _Monitor(args, comm, *test, done, _checkpoint_path(args), stopper)
    start = time.perf_counter()
    try:
        with stopper or contextlib.nullcontext():
            est.fit(*train, monitor=monitor, resume=state)
    finally:
        monitor.close()
    return monitor, time.perf_counter() - start


def _stopped(prog: str, monitor, rank: int) -> int:
    """A run stopped by ``--stop-after`` or a signal: say where its checkpoint is; the exit
    status a shell reports for the signal (128 + number), or 0 for a planned stop."""
    stopper = monitor.stopper
    signum = stopper.signum if stopper is not None else None
    why = f"interrupted by {stopper.signal_name}" if signum else "stopped"
    if rank == 0:
        print(f"{prog}: {why} after {monitor.done} steps; checkpoint in "
              f"{monitor.ckpt_path} (continue with --resume {monitor.ckpt_path})",
              flush=True)
    # a signalled run did not finish: exit as a shell reports the signal (128 + number)
    return 128 + signum if signum else 0


def _save_model(args, prog: str, est, size: int, simulated: bool) -> None:
    """``--save-model`` (one file per P when simulated); rank 0."""
    from .io import save_model  # h5py: not at --help

    target = _per_P(args.save_model, size) if simulated else args.save_model
    written = write_with_fallback(target, lambda path: save_model(est, path),
                                  prog=prog, what="model")
    print(f"{prog}: model written to {written}")


def _record(args, prog: str, est, *, P: int, environment, data_path, N: int, train_rows: int,
            global_batch: int, wall: float, history, modeled_dense: bool = False) -> dict:
    """The run's result record: its configuration, per-epoch ``history`` and totals; with
    ``modeled_dense``, the record of the dense baseline modeled beside it (``history`` its
    epochs, :func:`~.dense_model.dense_model_epochs`): algorithm dense, ``modeled_only``, its
    accuracies the sparse run's (``accuracy_from``), no weights digest (none were computed)."""
    last = history[-1]
    train_s = [h["train_seconds"] for h in history]
    config = {key: value for key, value in vars(args).items() if key not in ("simulate",)}
    algorithm = args.algorithm
    if modeled_dense:
        algorithm = config["algorithm"] = sparcml.DENSE_BASELINE
        config.update(dense_model=False, modeled_from=args.algorithm)
    record = make_record(
        prog, config={**config, "P": P, "global_batch": global_batch,
                      "train_rows": train_rows, "data_path": str(data_path)},
        environment=environment, algorithm=algorithm, P=P, N=N,
        density=1.0 if modeled_dense else float(np.mean([h["gradient_density"]
                                                         for h in history])),
        timings={"epoch": summarize(train_s),
                 "compute": summarize([h["compute_seconds"] for h in history]),
                 "comm": summarize([h["comm_seconds"] for h in history])},
        metrics={"epochs": history, "loss": last["loss"],
                 "train_accuracy": last["train_accuracy"],
                 "test_accuracy": last.get("test_accuracy"),
                 "comm_share": sum(h["comm_seconds"] for h in history) / max(
                     sum(train_s), 1e-12),
                 "rows_per_second": train_rows * len(history) / max(sum(train_s), 1e-12),
                 "fit_wall_seconds": wall,
                 "weights_digest": weights_digest(est)},
        bytes={"sent_per_rank_max": int(sum(h["bytes_sent"] for h in history)),
               "sent_total": int(sum(h["bytes_sent_total"] for h in history))})
    if modeled_dense:
        record["metrics"].update(modeled_only=True, accuracy_from=args.algorithm,
                                 weights_digest=None)
    return record


def weights_digest(est) -> str:
    """SHA-256 of the fitted weights and intercept (float64 bytes): equal digests, equal
    models, bit for bit (a real run and its simulation are compared by it)."""
    h = hashlib.sha256(np.ascontiguousarray(est.coef_, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(est.intercept_, dtype=np.float64).tobytes())
    return h.hexdigest()


def _per_P(path: str, P: int) -> str:
    """``model.h5`` -> ``model.P16.h5``: one file per simulated P."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.P{P}.{ext}" if dot and "/" not in ext else f"{path}.P{P}"


def _estimate(args, P: int):
    """What ``--simulate P`` takes (:class:`sparcapps.simapp.SimPlan`): the data once, one
    shared copy of the weights (and coef_), each rank's marks and support scratch, and one
    reduction of the step's gradient (sparc-bench's estimate of one allreduce cell)."""
    rows, features, nnz_row = _data_shape(args)
    N = features + 1
    density = min(1.0, args.batch_size * nnz_row / N)
    cell = estimate(P, [N], [density], [args.algorithm])
    data = rows * (nnz_row * 8 + 24)
    nbytes = cell.bytes + data + 32 * N + P * (N // 8 + 16 * min(N, args.batch_size * nnz_row))
    steps = -(-rows * (1 - args.test_fraction) // (args.batch_size * P))
    # real time, fitted on url-like runs at P = 64 and 256 under load 14-17 (2 cores shared
    # by other jobs): about 0.3 s per rank (its shard, engine, plan, evaluation) and 15 ms
    # per rank and step; a quiet machine takes several times less
    seconds = P * (0.3 + 0.015 * steps * args.epochs) + rows * nnz_row * 2e-7
    if args.algorithm == sparcml.DENSE_BASELINE:  # every rank's N-vector summed each step:
        nbytes += 14 * P * N  # 14 bytes a value and rank (fitted: webspam-like at P = 64
        # peaked at 16.9 GiB where 12 bytes estimated 15 GiB)
        seconds += steps * args.epochs * P * N * 2e-9
    return SimPlan(P, nbytes, seconds, f"{int(steps)} steps per epoch")


def _data_shape(args) -> tuple[int, int, int]:
    """(rows, features, stored entries per row) of the run's data, from the file's header or
    the synthetic preset."""
    if args.synth:
        from sparcapps.data import PRESETS  # scipy (the generators): not at --help

        preset = PRESETS[SYNTH_PRESETS[args.synth]]
        features = args.features or preset.n_features
        return int(args.rows), int(features), int(preset.nnz_mean)
    from sparcapps.data.csrfile import open_csr  # h5py: not at --help

    try:
        with open_csr(args.data) as (_, shape):
            return shape.n_rows, shape.n_features, max(1, shape.nnz // max(shape.n_rows, 1))
    except Exception:  # noqa: BLE001 - the run itself reports a bad file, on every rank
        return 0, 1, 1


def _simulated_main(args, prog: str, argv=None) -> int:
    def body(comm):
        with fixed_step_seconds(args.step_seconds), \
                dense_model(args.compute_scale if args.dense_model else None):
            return run(args, prog, comm, argv)

    return run_simulated(prog, args, body, lambda P: _estimate(args, P))


def main(argv=None, *, prog: str = "sparc-linear", loss: str | None = None) -> int:
    parser = build_parser(prog, loss)
    args = parser.parse_args(argv)
    if loss is not None:
        args.loss = loss
    options_from_args(args, parser)  # a bad SPARCML_* variable: exit 2; records what runs
    check_simulate_arguments(parser, args)
    if args.dense_model and not args.simulate:
        parser.error("--dense-model needs --simulate P [P ...]")
    beside = "--dense-model models the dense baseline beside a lossless sparse run: not with"
    if args.dense_model and args.bits:
        parser.error(f"{beside} --bits (the quantized sums are not the dense baseline's)")
    if args.dense_model and args.algorithm == sparcml.DENSE_BASELINE:
        parser.error(f"{beside} --algorithm {args.algorithm}")
    if args.simulate:
        if args.resume or args.stop_after is not None or args.checkpoint_every_steps:
            parser.error("--simulate does not checkpoint, stop or resume (a simulated run is "
                         "short and deterministic: run it again)")
        return _simulated_main(args, prog, argv)
    # an unexpected error on one rank ends the job instead of a hang
    with sparcml.abort_on_error():
        return run(args, prog, argv=argv)


def logreg_main(argv=None) -> int:
    """``sparc-logreg``: ``sparc-linear --loss log``."""
    return main(argv, prog="sparc-logreg", loss="log")


def svm_main(argv=None) -> int:
    """``sparc-svm``: ``sparc-linear --loss hinge``."""
    return main(argv, prog="sparc-svm", loss="hinge")


if __name__ == "__main__":
    sys.exit(main())
