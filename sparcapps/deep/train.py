"""The training loop shared by ``sparc-cnn`` and ``sparc-lstm``: options, steps, records.

An app supplies a *task* (:class:`ClassifyTask`, :class:`LanguageModelTask`, or anything with
the same methods: :mod:`sparcapps.deep.tasks`) through a factory ``make_task(args, comm) ->
task``, and calls :func:`run_app`, which *builds* the run (model, optimizer, a resumed state;
:func:`_build`), trains *epoch* by epoch (:func:`_train_epoch`) and *records* each epoch and
the run (:func:`_record_epoch`, :func:`_record_run`). Per step, on every rank: forward and
backward on this rank's minibatch (the gradient hooks of
:class:`sparcml.torch.DistributedOptimizer` hand each bucket to the communication thread, which
compresses and reduces it during backward), ``synchronize()`` (the exposed communication),
optional gradient clipping, the optimizer step.

Options common to both apps are built by :func:`build_parser`; ``--batch-size`` is per rank
(the global batch is P times it). Every run appends one record (``sparcapps.records``) to
``--output`` on rank 0, with ``metrics["epochs"]`` a list of per-epoch dicts (``epoch``,
``wall_seconds``, ``loss``, ``train_accuracy``, ``test_accuracy`` or ``test_perplexity``,
``compute_seconds``, ``comm_seconds``, ``flatten_seconds``, ``compress_seconds``,
``bytes_per_step``, ``sent_density``, ``result_density``). Seconds are the slowest rank's:
``comm_seconds`` is the time blocked in ``synchronize()`` (communication not hidden),
``flatten_seconds`` copying gradients into the reduction buffers, ``compute_seconds`` the rest
of the epoch; ``compress_seconds`` (top-k, QSGD) ran on the communication thread, overlapping
``backward()``, except the last bucket's, which ``synchronize()`` compresses and reduces itself
(so that part is in ``comm_seconds``). A simulated record's ``comm_seconds`` likewise holds the
modeled work of ``synchronize()`` itself (its calibrated rate and the last bucket's share of the
selection, charged before backward; ``StepCharge.inside_synchronize`` in :mod:`.simranks`)
besides the virtual time spent in it, so that the two split a step alike.

The communication options build a :class:`sparcml.compression.Compression`
(:func:`compression_from_args`): ``--density`` (top-k per bucket, or per ``--topk-bucket-size``
chunk), ``--global-topk`` (the top-k of the sum over ranks, :func:`sparcml.topk_allreduce`),
``--bits`` (QSGD), ``--no-error-feedback``, ``--algorithm``; ``--dense`` is
``Compression.none()``, the dense baseline. ``--compressor NAME`` picks one of
:data:`sparcml.compression.COMPRESSORS` instead of top-k (its parameters:
:func:`sparcapps.cli_args.add_compressor_arguments`; the record's ``metrics.compression``
names the configuration). ``--lr`` and ``--momentum`` (the SGD's, after the reduction) left
unset take the app's defaults or, with ``--compressor``, its recommended ones
(:func:`~sparcapps.deep.comm_options.resolve_hyperparameters`, at parsing); DGC's warm-up and
clipping defaults follow the run (:func:`~sparcapps.deep.comm_options.resolve_compressor_defaults`,
once the task is built). The record's config holds the values that ran.

Checkpoints (:mod:`sparcapps.deep.checkpoint`; ``--checkpoint-every-epochs E`` into
``--checkpoint FILE``; ``--resume FILE``): the model, every rank's optimizer state (momentum,
error-feedback residuals, quantizer RNG), the epoch and the history so far; written by rank 0,
atomically, loadable with ``torch.load(weights_only=True)``. A resumed run continues bitwise as
the uninterrupted one (same P, same options; the data order depends only on ``--seed`` and the
epoch).

SIGTERM or SIGUSR1 (Slurm's warning before the time limit, forwarded by mpiexec or srun) stops
every rank after the same step, about a second later at most (:mod:`sparcapps.interrupt`),
writes a checkpoint inside the epoch (the step reached, each rank's running sums and the
task's carried state, such as an LSTM's hidden state) and exits with status 128 + the signal's
number; ``--resume`` continues from that step, bitwise as well. The resumed epoch's
communication figures (bytes, seconds per step) cover the steps after the resume.

``--simulate P [P ...] --network SPEC`` runs this same loop on P simulated ranks in one
process (:mod:`sparcapps.deep.simranks`): one shared model and SGD state, each step charged its
modeled compute (``run_app(..., comm=, charge=)``), every second recorded virtual.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from sparcml import (DEFAULT_ALGORITHM, DENSE_BASELINE, QSGD, CompressionError,
                     IncompatibleOptionsError, UnknownAlgorithmError, abort_on_error,
                     check_algorithm_options, sim)
from sparcml.compression import COMPRESSORS, Memory, get_compressor
from sparcapps.cli_args import (Parser, add_bits_argument, add_checkpoint_every_argument,
                                add_compressor_arguments, add_data_home_argument,
                                add_options_arguments, add_records_output_argument,
                                algorithm_help, algorithm_name, density_help, fraction,
                                make_parser, nonnegative_float, nonnegative_int, output_file,
                                positive_float, positive_int)
from sparcapps.interrupt import StopOnSignal
from sparcapps.records import append_record, capture_environment, make_record, summarize
from sparcapps.simapp import add_simulate_arguments, mark_simulated, run_simulated

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .comm_options import (compression_from_args, compressor_has_own_momentum,
                           resolve_compressor_defaults, resolve_hyperparameters)
from .data import DeepDataError
from .tasks import ClassifyTask, LanguageModelTask, reduce_numbers
from .usage import ModelOptionsError
from .usage import UsageError as _UserError
from .usage import collectively as _collectively
from .usage import finished as _finished
from .simranks import (SharedStep, StepCharge, build_model_once, estimate, step_rates,
                       train_examples)

__all__ = ["build_parser", "run_app", "compression_from_args", "ClassifyTask",
           "LanguageModelTask", "CheckpointError", "params_digest", "simulated_main"]


def build_parser(prog: str, description: str, *, datasets: tuple[str, ...], width: int,
                 depth: int, lr: float, epochs: int, batch_size: int,
                 momentum: float = 0.9) -> argparse.ArgumentParser:
    p = make_parser(prog, description, parser_class=_DeepParser)
    p.app_defaults = {"lr": lr, "momentum": momentum}
    g = p.add_argument_group("data and model")
    g.add_argument("--dataset", choices=datasets, default=datasets[0],
                   help="digits is bundled with scikit-learn (offline); the others are read "
                        "from the data home (sparc-data fetch NAME)")
    add_data_home_argument(g)
    g.add_argument("--width", type=int, default=width, help="model width (channels / hidden "
                   "units); raise it for a model of millions of parameters")
    g.add_argument("--depth", type=int, default=depth, help="layers (conv layers / LSTM "
                   "layers / residual blocks per stage)")
    _add_training_arguments(p.add_argument_group("training"), lr=lr, epochs=epochs,
                            batch_size=batch_size, momentum=momentum)
    _add_communication_arguments(p.add_argument_group("communication"))
    g = p.add_argument_group("output")
    add_records_output_argument(g)
    g.add_argument("--checkpoint", default=None, metavar="FILE", type=output_file,
                   help=f"checkpoint file (default: {prog}.ckpt)")
    add_checkpoint_every_argument(g, "epochs", help="write a checkpoint every EPOCHS epochs")
    g.add_argument("--resume", default=None, metavar="CKPT",
                   help="continue from this checkpoint file")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is drawn only on a terminal; elsewhere one line "
                        "per epoch)")
    g.add_argument("--run-id", default=None, metavar="ID",
                   help="a label kept in the record's config (sparc-deep-accuracy gives each "
                        "run its own, to find that run's record in a shared file)")
    add_simulate_arguments(p, step_unit="step (forward, backward, selection, update)")
    return p


def _add_training_arguments(g, *, lr: float, epochs: int, batch_size: int,
                            momentum: float) -> None:
    """The "training" group: epochs, batch, the optimizer (its defaults with each compressor's
    recommendations), seed, threads."""
    g.add_argument("--epochs", type=positive_int, default=epochs, help="passes over the data")
    g.add_argument("--batch-size", type=positive_int, default=batch_size,
                   help="examples per rank per step")
    scaled = ", ".join(f"{n} x{get_compressor(n).recommended['lr_scale']:.3g}"
                       for n in COMPRESSORS if "lr_scale" in get_compressor(n).recommended)
    own = [n for n in COMPRESSORS if get_compressor(n).own_momentum]
    none = [n for n in COMPRESSORS if n not in own
            and get_compressor(n).recommended.get("momentum", momentum) != momentum]
    g.add_argument("--lr", type=positive_float, default=None,
                   help=f"SGD learning rate (default: {lr:g}; with --compressor NAME, {lr:g} "
                        f"times NAME's recommended scale: {scaled}; a --lr given wins)")
    g.add_argument("--momentum", type=_momentum, default=None,
                   help=f"SGD momentum, applied after the reduction (default: {momentum:g}; "
                        f"with --compressor NAME, NAME's recommended one: 0 for "
                        f"{', '.join(own)} (their own: --compressor-momentum) and "
                        f"{', '.join(none)} (none in their papers); a --momentum given wins "
                        f"and adds to a compressor's own)")
    g.add_argument("--weight-decay", type=nonnegative_float, default=0.0,
                   help="SGD weight decay (L2)")
    g.add_argument("--seed", type=int, default=0, help="model init, data order, rounding")
    g.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads per rank (ranks usually share the cores)")


def _add_communication_arguments(g) -> None:
    """The "communication" group: compression (top-k, bits, a compressor), the algorithm and
    options, buckets, the dense baseline."""
    g.add_argument("--density", type=fraction, default=0.01,
                   help=density_help("what top-k keeps of each gradient bucket"))
    add_bits_argument(g, what="the values sent")
    add_options_arguments(g)
    g.add_argument("--algorithm", default=DEFAULT_ALGORITHM, type=algorithm_name,
                   help=algorithm_help("sparcml allreduce algorithm:"))
    feedback = g.add_mutually_exclusive_group()
    feedback.add_argument("--no-error-feedback", action="store_true",
                          help="drop what top-k and quantization do not send (default: keep "
                               "it, except where the --compressor's paper has none: qsgd)")
    feedback.add_argument("--error-feedback", action="store_const", const=True, default=None,
                          help="keep it where the --compressor's default drops it (qsgd)")
    g.add_argument("--dense", action="store_true",
                   help="baseline: full gradients, dense allreduce (ignores --density/--bits)")
    g.add_argument("--warmup-steps", type=nonnegative_int, default=0,
                   help="dense steps before the compression starts (with --compressor dgc: "
                        "momentum SGD steps with its --compressor-momentum; refused for signum)")
    g.add_argument("--bucket-mb", type=positive_float, default=4.0, help="gradient MiB per bucket")
    g.add_argument("--topk-bucket-size", type=int, default=None,
                   help="top-k per chunk of this many values (CNTK used 512); default per bucket")
    g.add_argument("--global-topk", action="store_true",
                   help="keep the top --density of the gradients' sum over ranks "
                        "(sparcml.topk_allreduce: bytes per rank independent of P; what is "
                        "not kept stays in the error feedback); needs --bits 0; --algorithm "
                        "auto lets the cost model choose it or an allreduce per bucket")
    add_compressor_arguments(g)


def _momentum(text: str) -> float:
    """An argparse type: a momentum in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {value:g}")
    return value


class _DeepParser(Parser):
    """The apps' parser: after parsing, ``--lr`` and ``--momentum`` left unset take the app's
    defaults or, with ``--compressor NAME``, NAME's recommended ones
    (:func:`~sparcapps.deep.comm_options.resolve_hyperparameters`), so that a run's record
    holds the values that ran."""

    app_defaults: dict = {}

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        if self.app_defaults:
            resolve_hyperparameters(ns, **self.app_defaults)
        return ns, rest


def params_digest(model) -> str:
    """sha256 of all parameters' bytes, in ``named_parameters`` order."""
    h = hashlib.sha256()
    for _, p in model.named_parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def run_app(app: str, args, make_task, *, comm=None, charge=None) -> int:
    """Train ``make_task(args, comm)``'s model data-parallel over ``comm`` (default
    ``COMM_WORLD``); see the module docstring. Collective: every rank calls. Returns 0, 2 for
    bad options, or 128 + the signal's number when a stop signal interrupted training (after a
    checkpoint). On a simulated rank (:mod:`sparcapps.deep.simranks`) ``charge`` is the
    :class:`~sparcapps.deep.simranks.StepCharge` of each step's modeled compute."""
    if comm is not None:
        return _run(app, args, make_task, comm, charge)

    with abort_on_error():
        return _run(app, args, make_task, None, None)


def _check_args(args) -> list[str]:
    problems = []
    if args.epochs < 1:
        problems.append(f"--epochs must be >= 1, got {args.epochs}")
    if args.batch_size < 1:
        problems.append(f"--batch-size must be >= 1, got {args.batch_size}")
    if not 0 < args.density <= 1:
        problems.append(f"--density must be in (0, 1], got {args.density}")
    if args.threads < 1:
        problems.append(f"--threads must be >= 1, got {args.threads}")
    if args.width < 1 or args.depth < 1:
        problems.append(f"--width and --depth must be >= 1, got {args.width}, {args.depth}")
    if args.global_topk and not args.dense and (args.bits or args.topk_bucket_size):
        problems.append("--global-topk sends exact values of the whole bucket: pass --bits 0 "
                        "and no --topk-bucket-size")
    elif getattr(args, "compressor", None) and args.global_topk:
        problems.append("give --compressor or --global-topk, not both "
                        "(--compressor global-topk is the same)")
    elif getattr(args, "compressor", None) and not args.dense:
        try:
            made = compression_from_args(args)
        except (CompressionError, IncompatibleOptionsError, UnknownAlgorithmError) as exc:
            problems.append(f"--compressor {args.compressor}: {exc}")
        else:
            if args.warmup_steps and compressor_has_own_momentum(args) \
                    and type(made.memory).full_input is Memory.full_input:
                problems.append(f"--warmup-steps: the dense warm-up steps would run without "
                                f"{args.compressor}'s own momentum (plain SGD); drop it")
    elif not args.dense:
        try:
            check_algorithm_options(args.algorithm, quantizer=QSGD(args.bits) if args.bits
                                    else None)
        except UnknownAlgorithmError as exc:
            problems.append(f"--algorithm: {exc}")
        except IncompatibleOptionsError as exc:
            problems.append(f"--bits needs a sparse algorithm: {exc}; pass --bits 0 or "
                            f"another --algorithm")
    return problems


class _NoSignals:
    """A simulation is not a Slurm job: no signal stops it (and threads cannot take them)."""

    signum = None
    signal_name = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def poll(self) -> bool:
        return False


def _run(app, args, make_task, comm, charge) -> int:
    comm = MPI.COMM_WORLD if comm is None else comm
    problems = _check_args(args)
    if problems:
        if comm.Get_rank() == 0:
            print(f"{app}: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        run = _build(app, args, make_task, comm, charge)
    except _UserError as exc:  # the same on every rank: one line on rank 0, exit status 2
        if comm.Get_rank() == 0:
            print(f"{app}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if run.start_epoch >= args.epochs and not run.skip:
        return _finished(run)
    stopper = _NoSignals() if run.simulated else StopOnSignal(comm)
    with stopper:
        for epoch in range(run.start_epoch, args.epochs):
            before = run.opt.stats.snapshot()
            done = _train_epoch(run, epoch, stopper)
            if done.stopped:
                _stop_inside_epoch(run, epoch, done, stopper)
                return 128 + stopper.signum
            _record_epoch(run, epoch, done, run.opt.stats.since(before))
            every = args.checkpoint_every_epochs
            if every and (epoch + 1) % every == 0:
                save_checkpoint(run.ckpt_path, comm, app=app, args=args, epoch=epoch + 1,
                                model=run.model, opt=run.opt, history=run.history,
                                wall=run.clock() - run.t_start)
    if run.progress is not None:
        run.progress.close()
    return _record_run(run)


# -- build ------------------------------------------------------------------------------------

@dataclass
class _Run:
    """One training run: what :func:`_build` made, and what the epochs add to."""

    app: str
    args: argparse.Namespace
    comm: object
    task: object
    model: object
    opt: object
    n_params: int
    ckpt_path: str
    env: dict
    progress: object = None
    history: list = field(default_factory=list)
    start_epoch: int = 0
    skip: int = 0                 # batches of start_epoch a resumed checkpoint already did
    resumed_partial: dict | None = None
    step_times: list = field(default_factory=list)
    t_start: float = 0.0
    clock: object = time.perf_counter  # the rank's virtual clock on simulated ranks
    charge: object = None         # simranks.StepCharge: modeled compute per step (simulated)
    simulated: bool = False


def _build(app, args, make_task, comm, charge=None) -> _Run:
    """The task, its model (rank 0's parameters everywhere), the DistributedOptimizer, the
    state of a resumed checkpoint, the environment and the progress bar. Collective. On
    simulated ranks the model's weights and the SGD's state are one shared copy
    (:mod:`.simranks`)."""
    import torch  # the [torch] extra, and sparcml's adapter on it: not at --help

    import sparcml.torch as st

    torch.set_num_threads(args.threads)
    task = _collectively(comm, lambda: build_model_once(comm, args.seed,
                                                         lambda: make_task(args, comm)))
    model = task.model
    st.broadcast_parameters(model, comm=comm)
    # DGC's warm-up (four epochs) and clipping (the run's threshold) as its paper sets them
    resolve_compressor_defaults(args, steps_per_epoch=len(task.start_epoch(0)),
                                clip=getattr(task, "clip", None))
    # --momentum is the SGD's, outside the compression (resolved by the parser: 0 by default
    # for DGC and signum, which apply --compressor-momentum themselves)
    inner = SharedStep.make(comm, model, torch.optim.SGD, lr=args.lr, momentum=args.momentum,
                            weight_decay=args.weight_decay)
    opt = st.DistributedOptimizer(
        inner, model.named_parameters(), compression=compression_from_args(args),
        bucket_bytes=max(1, int(args.bucket_mb * 2**20)), warmup_steps=args.warmup_steps,
        comm=comm, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    run = _Run(app, args, comm, task, model, opt, n_params,
               ckpt_path=args.checkpoint or f"{app}.ckpt", env={},
               clock=lambda: sim.clock(comm), charge=charge,
               simulated=sim.Replicas(comm).simulated)
    wall_offset = 0.0
    if args.resume:
        ckpt = _collectively(comm, lambda: load_checkpoint(args.resume, comm, app=app,
                                                           args=args))
        if int(ckpt["epoch"]) > args.epochs:
            raise _UserError(f"{args.resume} has {ckpt['epoch']} epochs, more than --epochs "
                             f"{args.epochs}")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizers"][comm.Get_rank()])
        run.history, run.start_epoch = list(ckpt["history"]), int(ckpt["epoch"])
        wall_offset = float(ckpt["wall_seconds"])
        run.skip = int(ckpt.get("step", 0))
        if run.skip:
            run.resumed_partial = ckpt["partials"][comm.Get_rank()]
    run.env = capture_environment(comm)
    if comm.Get_rank() == 0:
        what = "dense baseline" if args.dense else (
            f"{opt.compression.describe()}") if getattr(args, "compressor", None) else (
            f"top-k density {args.density}" + (f", {args.bits}-bit QSGD" if args.bits else "")
            + ("" if not args.no_error_feedback else ", no error feedback"))
        print(f"{app}: {args.dataset}, {type(model).__name__} {n_params:,} parameters, "
              f"P={comm.Get_size()}, {what}, {opt.algorithm}, {len(opt.buckets)} bucket(s)",
              flush=True)
        if not args.no_progress:
            from tqdm import tqdm  # the [apps] extra: not at --help

            run.progress = tqdm(unit="step", disable=None, dynamic_ncols=True)
    run.t_start = run.clock() - wall_offset
    return run


# -- epoch ------------------------------------------------------------------------------------

@dataclass
class _Epoch:
    """This rank's sums over the steps of one epoch (so far)."""

    loss_sum: float = 0.0
    correct: float = 0.0
    count: float = 0.0
    seconds: float = 0.0
    steps_done: int = 0           # batches of the epoch done (a resumed epoch's included)
    sync_seconds: float = 0.0     # in synchronize() (simulated: virtual; real: as stats)
    batches: int = 0
    stopped: bool = False         # a stop signal ended the epoch after steps_done batches


def _train_epoch(run: _Run, epoch: int, stopper) -> _Epoch:
    """The steps of one epoch on every rank; stops early, on every rank after the same step,
    when ``stopper`` says so. Collective."""
    import torch  # the [torch] extra: not at --help

    args, task, opt, progress = run.args, run.task, run.opt, run.progress
    # a compressor that clips each rank's gradient itself (DGC) replaces the averaged clipping
    clip = task.clip if getattr(opt.compression.memory, "clip_norm", None) is None else None
    clock, charge = run.clock, run.charge
    batches = task.start_epoch(epoch)
    if progress is not None and progress.total is None:
        progress.reset(total=len(batches) * (args.epochs - run.start_epoch) - run.skip)
    done = _Epoch(batches=len(batches))
    t_epoch = clock()
    if run.skip:  # resuming inside this epoch: its first batches are done
        done.steps_done, run.skip = run.skip, 0
        done.loss_sum, done.correct, done.count, seconds = run.resumed_partial["sums"]
        t_epoch -= seconds
        task.restore(run.resumed_partial["carry"])
    for i in range(done.steps_done, len(batches)):
        t0 = clock()
        if charge is not None:  # simulated: the step's modeled compute, on the clock before
            sim.charge(charge.before_backward)  # the comm thread starts the reduction
            t_sync = clock()  # (a reading while that thread runs would depend on timing)
        loss, c, n = task.loss(batches[i])
        loss.backward()
        if charge is None:
            t_sync = clock()
        opt.synchronize()
        done.sync_seconds += clock() - t_sync
        if clip:
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), clip)
        if charge is not None:
            sim.charge(charge.before_update)
        opt.step()
        opt.zero_grad()
        run.step_times.append(clock() - t0)
        done.loss_sum += float(loss.detach()) * n
        done.correct += c
        done.count += n
        done.steps_done = i + 1
        if progress is not None:
            progress.update(1)
        if stopper.poll():  # collective: every rank stops after this same step
            done.stopped = True
            break
    done.seconds = clock() - t_epoch
    return done


def _stop_inside_epoch(run: _Run, epoch: int, done: _Epoch, stopper) -> None:
    """Checkpoint the interrupted epoch (each rank's sums, the task's carried state)."""
    partial = {"sums": [done.loss_sum, done.correct, done.count, done.seconds],
               "carry": run.task.carry()}
    save_checkpoint(run.ckpt_path, run.comm, app=run.app, args=run.args, epoch=epoch,
                    model=run.model, opt=run.opt, history=run.history,
                    wall=run.clock() - run.t_start, step=done.steps_done,
                    partial=partial)
    if run.progress is not None:
        run.progress.close()
    if run.comm.Get_rank() == 0:
        print(f"{run.app}: interrupted by {stopper.signal_name} in epoch {epoch + 1} after "
              f"{done.steps_done} of {done.batches} steps; checkpoint in {run.ckpt_path} "
              f"(continue with --resume {run.ckpt_path})", flush=True)


# -- records ----------------------------------------------------------------------------------

def _record_epoch(run: _Run, epoch: int, done: _Epoch, stats) -> dict:
    """Evaluate, sum the epoch over the ranks (``stats``: its CompressionStats), append the
    epoch's dict to the history and print it on rank 0. Collective."""
    comm, size = run.comm, run.comm.Get_size()
    ev = run.task.evaluate(comm)
    sums = reduce_numbers(comm, [done.loss_sum, done.correct, done.count, stats.bytes_sent,
                                 stats.sent_values, stats.result_values, stats.values])
    if run.charge is not None:  # simulated: virtual seconds (stats' are this host's wall time)
        steps = done.steps_done
        sizes = [b["numel"] for b in run.opt.buckets]
        # synchronize()'s own modeled work (charged before backward) counted as a real run
        # counts it: in comm_seconds
        inside = run.charge.inside_synchronize(sizes[-1] / sum(sizes) if sizes else 0.0)
        timed = [done.seconds, done.sync_seconds + inside * steps, run.charge.flatten * steps,
                 run.charge.select * steps]
    else:
        timed = [done.seconds, stats.wait_seconds, stats.flatten_seconds,
                 stats.compress_seconds]
    slowest = reduce_numbers(comm, timed, "max")
    rec = {"epoch": epoch + 1, "wall_seconds": run.clock() - run.t_start,
           "loss": sums[0] / sums[2], "train_accuracy": sums[1] / sums[2], **ev,
           "epoch_seconds": slowest[0], "comm_seconds": slowest[1],
           "flatten_seconds": slowest[2], "compress_seconds": slowest[3],
           "compute_seconds": slowest[0] - slowest[1] - slowest[2], "steps": stats.steps,
           "bytes_per_step": sums[3] / size / max(stats.steps, 1),
           "sent_density": sums[4] / sums[6], "result_density": sums[5] / sums[6]}
    rec = {k: (float(v) if isinstance(v, (np.floating, np.integer)) else v)
           for k, v in rec.items()}
    run.history.append(rec)
    if comm.Get_rank() == 0:
        score = (f"test acc {rec['test_accuracy']:.4f}" if "test_accuracy" in rec
                 else f"test ppl {rec['test_perplexity']:.2f}")
        line = (f"epoch {epoch + 1}/{run.args.epochs}: loss {rec['loss']:.4f}, {score}, "
                f"{rec['epoch_seconds']:.2f} s (comm {rec['comm_seconds']:.2f} s), "
                f"{rec['bytes_per_step']:.0f} B/step, sent density {rec['sent_density']:.4f}")
        if run.progress is not None and not run.progress.disable:
            run.progress.set_postfix(loss=f"{rec['loss']:.4f}", refresh=False)
            run.progress.write(line)
        else:
            print(line, flush=True)
    return rec


def _record_run(run: _Run) -> int:
    """Check that every rank ends with the same parameters, print the summary and append the
    run's record on rank 0. Collective; returns 0 (raises when the parameters differ)."""
    comm, args, opt = run.comm, run.args, run.opt
    digest = params_digest(run.model)
    same = len(set(comm.allgather(digest))) == 1
    total = reduce_numbers(comm, [opt.stats.bytes_sent, opt.stats.steps, opt.stats.dense_bytes])
    bytes_per_step = float(total[0] / max(total[1], 1))
    dense_per_step = float(total[2] / max(total[1], 1))
    timings = {}
    if run.step_times:
        timings["step"] = summarize(run.step_times)
    if run.history:
        timings["epoch"] = summarize([h["epoch_seconds"] for h in run.history])
    final = run.history[-1] if run.history else {}
    shape_of = {name: list(p.shape) for name, p in run.model.named_parameters()}
    metrics = {"epochs": run.history, "params": run.n_params, "params_sha256": digest,
               "compression": opt.compression.describe(),
               "bucket_shapes": [[shape_of[n] for n in b["names"]] for b in opt.buckets],
               "params_identical_across_ranks": same, "model": type(run.model).__name__,
               **{k: final[k] for k in ("test_accuracy", "test_perplexity", "test_loss")
                  if k in final}}
    if comm.Get_rank() == 0:
        print(f"{run.app}: done; parameters identical on all ranks: {same}; "
              f"{bytes_per_step:,.0f} bytes sent per step and rank "
              f"(dense allreduce: {dense_per_step:,.0f}); sha256 {digest[:16]}", flush=True)
        if args.output:
            record = make_record(
                run.app, config=vars(args), environment=run.env,
                algorithm=DENSE_BASELINE if args.dense else args.algorithm, P=comm.Get_size(),
                N=run.n_params, density=None if args.dense else args.density, timings=timings,
                metrics=metrics,
                bytes={"sent_per_step": bytes_per_step, "dense_per_step": dense_per_step,
                       "ratio_dense_over_sent": dense_per_step / bytes_per_step
                       if bytes_per_step else None})
            if run.simulated:
                mark_simulated(record, comm, args)
                record["metrics"]["virtual_seconds"] = sum(h["epoch_seconds"]
                                                           for h in run.history)
            append_record(args.output, record)
    if not same:
        raise RuntimeError("parameters differ across ranks at the end of training")
    return 0


def simulated_main(app: str, args, parser, make_task) -> int:
    """``--simulate``: check the options, calibrate, estimate and run each P (see the module
    docstring); the worst exit status."""
    if args.resume or args.checkpoint_every_epochs:
        parser.error("--simulate does not checkpoint or resume (a simulated run is short and "
                     "deterministic: run it again)")
    problems = _check_args(args)
    if problems:
        print(f"{app}: " + "; ".join(problems), file=__import__("sys").stderr)
        return 2
    try:
        n_params, examples = train_examples(app, args, make_task)
        rates = step_rates(app, args, make_task)
    except (DeepDataError, ModelOptionsError) as exc:
        print(f"{app}: error: {' '.join(str(exc).split())}", file=__import__("sys").stderr)
        return 2
    charge = StepCharge(rates, args.step_seconds)

    def body(comm):
        return run_app(app, args, make_task, comm=comm, charge=charge)

    return run_simulated(app, args, body, lambda P: estimate(
        app, args, P, n_params=n_params, train_examples=examples, rates=rates))
