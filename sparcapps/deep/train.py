"""The training loop shared by ``sparc-cnn`` and ``sparc-lstm``: options, steps, records,
checkpoints.

An app supplies a *task* (:class:`ClassifyTask`, :class:`LanguageModelTask`, or anything with
the same methods) through a factory ``make_task(args, comm) -> task``, and calls
:func:`run_app`. Per step, on every rank: forward and backward on this rank's minibatch (the
gradient hooks of :class:`sparcml.torch.DistributedOptimizer` hand each bucket to the
communication thread, which compresses and reduces it during backward), ``synchronize()`` (the
exposed communication), optional gradient clipping, the optimizer step.

Options common to both apps are built by :func:`build_parser`; ``--batch-size`` is per rank
(the global batch is P times it). Every run appends one record (``sparcapps.records``) to
``--output`` on rank 0, with ``metrics["epochs"]`` a list of per-epoch dicts (``epoch``,
``wall_seconds``, ``loss``, ``train_accuracy``, ``test_accuracy`` or ``test_perplexity``,
``compute_seconds``, ``comm_seconds``, ``flatten_seconds``, ``compress_seconds``,
``bytes_per_step``, ``sent_density``, ``result_density``). Seconds are the slowest rank's:
``comm_seconds`` is the time blocked in ``synchronize()`` (communication not hidden),
``flatten_seconds`` copying gradients into the reduction buffers, ``compute_seconds`` the rest
of the epoch; ``compress_seconds`` (top-k, QSGD) ran on the communication thread, overlapping.

Checkpoints (``--checkpoint-every E`` epochs into ``--checkpoint FILE``; ``--resume FILE``):
the model, every rank's optimizer state (momentum, error-feedback residuals, quantizer RNG),
the epoch and the history so far; written by rank 0, atomically, loadable with
``torch.load(weights_only=True)``. A resumed run continues bitwise as the uninterrupted one
(same P, same options; the data order depends only on ``--seed`` and the epoch).

SIGTERM or SIGUSR1 (Slurm's warning before the time limit, forwarded by mpiexec or srun) stops
every rank after the same step, about a second later at most (:mod:`sparcapps.interrupt`),
writes a checkpoint inside the epoch (the step reached, each rank's running sums and the
task's carried state, such as an LSTM's hidden state) and exits with status 128 + the signal's
number; ``--resume`` continues from that step, bitwise as well. The resumed epoch's
communication figures (bytes, seconds per step) cover the steps after the resume.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["build_parser", "run_app", "ClassifyTask", "LanguageModelTask", "CheckpointError",
           "params_digest"]

# options that may change between a checkpointed run and its resumption
_RESUMABLE = {"epochs", "output", "checkpoint", "checkpoint_every", "resume", "threads",
              "no_progress", "data_home"}


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed here (other options, other P, unreadable file)."""


def build_parser(prog: str, description: str, *, datasets: tuple[str, ...], width: int,
                 depth: int, lr: float, epochs: int, batch_size: int,
                 momentum: float = 0.9) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data and model")
    g.add_argument("--dataset", choices=datasets, default=datasets[0],
                   help="digits is bundled with scikit-learn (offline); the others are read "
                        "from the data home (sparc-data fetch NAME)")
    g.add_argument("--data-home", default=None, help="where fetched data sets live (default: "
                   "$SPARCML_DATA_HOME or the checkout's datasets/)")
    g.add_argument("--width", type=int, default=width, help="model width (channels / hidden "
                   "units); raise it for a model of millions of parameters")
    g.add_argument("--depth", type=int, default=depth, help="layers (conv layers / LSTM "
                   "layers / residual blocks per stage)")
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=int, default=epochs)
    g.add_argument("--batch-size", type=int, default=batch_size, help="per rank")
    g.add_argument("--lr", type=float, default=lr)
    g.add_argument("--momentum", type=float, default=momentum)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=0, help="model init, data order, rounding")
    g.add_argument("--threads", type=int, default=1,
                   help="torch threads per rank (ranks usually share the cores)")
    g = p.add_argument_group("communication")
    g.add_argument("--density", type=float, default=0.01,
                   help="fraction of each gradient bucket sent (top-k)")
    g.add_argument("--bits", type=int, choices=(0, 2, 4, 8), default=4,
                   help="QSGD bits per value sent; 0: full precision")
    g.add_argument("--algorithm", default="ssar_recursive_double",
                   help="sparcml allreduce algorithm (ssar_recursive_double, "
                        "ssar_split_allgather, dsar_split_allgather, allgather, dense, auto)")
    g.add_argument("--no-error-feedback", action="store_true",
                   help="drop what top-k and quantization do not send")
    g.add_argument("--dense", action="store_true",
                   help="baseline: full gradients, dense allreduce (ignores --density/--bits)")
    g.add_argument("--warmup-steps", type=int, default=0,
                   help="dense steps before top-k starts")
    g.add_argument("--bucket-mb", type=float, default=4.0, help="gradient MiB per bucket")
    g.add_argument("--topk-bucket-size", type=int, default=None,
                   help="top-k per chunk of this many values (CNTK used 512); default per bucket")
    g = p.add_argument_group("output")
    g.add_argument("--output", default=None, help="append the result record to this JSONL file")
    g.add_argument("--checkpoint", default=None, help="checkpoint file (default: PROG.ckpt)")
    g.add_argument("--checkpoint-every", type=int, default=0, help="epochs between "
                   "checkpoints; 0: none")
    g.add_argument("--resume", default=None, help="continue from this checkpoint file")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def params_digest(model) -> str:
    """sha256 of all parameters' bytes, in ``named_parameters`` order."""
    h = hashlib.sha256()
    for _, p in model.named_parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# -- tasks ------------------------------------------------------------------------------------

class ClassifyTask:
    """Minibatch classification of in-memory arrays; each rank its slice of every epoch."""

    metric = "accuracy"
    clip = None

    def __init__(self, model, X, y, Xte, yte, *, rank, size, batch_size, seed):
        import torch

        self.torch = torch
        self.model, self.X, self.y, self.Xte, self.yte = model, X, y, Xte, yte
        self.rank, self.size, self.batch_size, self.seed = rank, size, batch_size, seed

    def start_epoch(self, epoch: int) -> list:
        from .data import shard_permutation

        return shard_permutation(len(self.y), self.rank, self.size, self.seed, epoch,
                                 self.batch_size)

    def carry(self):
        """What one step hands the next inside an epoch (for a mid-epoch checkpoint): nothing."""
        return None

    def restore(self, carry) -> None:
        pass

    def loss(self, idx):
        """``(mean loss tensor, correct, count)`` of one minibatch."""
        torch = self.torch
        x = torch.from_numpy(self.X[idx])
        y = torch.from_numpy(self.y[idx])
        out = self.model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        return loss, int((out.argmax(1) == y).sum()), len(idx)

    def evaluate(self, comm) -> dict:
        """Test loss and accuracy, each rank scoring every P-th test example."""
        torch = self.torch
        self.model.eval()
        loss_sum, correct = 0.0, 0
        mine = np.arange(self.rank, len(self.yte), self.size)
        with torch.no_grad():
            for s in range(0, len(mine), 512):
                idx = mine[s:s + 512]
                out = self.model(torch.from_numpy(self.Xte[idx]))
                y = torch.from_numpy(self.yte[idx])
                loss_sum += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
                correct += int((out.argmax(1) == y).sum())
        self.model.train()
        loss_sum, correct = _reduce(comm, [loss_sum, correct])
        n = len(self.yte)
        return {"test_loss": loss_sum / n, "test_accuracy": correct / n}


class LanguageModelTask:
    """Truncated-BPTT language modelling; each rank a contiguous share of the training text,
    the hidden state carried from window to window (and reset every epoch)."""

    metric = "perplexity"

    def __init__(self, model, corpus, *, rank, size, batch_size, bptt, clip=0.25):
        import torch

        from .data import lm_batches

        self.torch, self.model, self.clip = torch, model, clip
        self.rank, self.size = rank, size
        self.xs, self.ys = lm_batches(corpus.train, rank, size, batch_size, bptt)
        self.test_xs, self.test_ys = lm_batches(corpus.test, rank, size, 10, bptt)
        self.vocab = len(corpus.vocab)
        self.state = None

    def start_epoch(self, epoch: int) -> list:
        self.state = None
        return list(range(len(self.xs)))

    def carry(self):
        """The hidden state carried to the next window (for a mid-epoch checkpoint)."""
        return self.state

    def restore(self, carry) -> None:
        self.state = None if carry is None else tuple(carry)

    def loss(self, i):
        torch = self.torch
        x, y = torch.from_numpy(self.xs[i]), torch.from_numpy(self.ys[i])
        out, state = self.model(x, self.state)
        self.state = tuple(s.detach() for s in state)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, self.vocab), y.reshape(-1))
        return loss, int((out.argmax(-1) == y).sum()), y.numel()

    def evaluate(self, comm) -> dict:
        torch = self.torch
        self.model.eval()
        loss_sum, count, state = 0.0, 0, None
        with torch.no_grad():
            for x, y in zip(self.test_xs, self.test_ys):
                out, state = self.model(torch.from_numpy(x), state)
                loss_sum += float(torch.nn.functional.cross_entropy(
                    out.reshape(-1, self.vocab), torch.from_numpy(y).reshape(-1),
                    reduction="sum"))
                count += y.size
        self.model.train()
        loss_sum, count = _reduce(comm, [loss_sum, count])
        mean = loss_sum / count
        return {"test_loss": mean, "test_perplexity": float(np.exp(min(mean, 50.0)))}


def _reduce(comm, values, op: str = "sum") -> np.ndarray:
    """Element-wise sum (or max) over ranks of a few numbers, as float64. Collective."""
    from mpi4py import MPI

    buf = np.array(values, np.float64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM if op == "sum" else MPI.MAX)
    return buf


# -- checkpoints ------------------------------------------------------------------------------

def _numpy_to_torch(obj):
    import torch

    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: _numpy_to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numpy_to_torch(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_numpy_to_torch(v) for v in obj)
    return obj


def _fingerprint(args) -> dict:
    return {k: v for k, v in sorted(vars(args).items()) if k not in _RESUMABLE}


def _save_checkpoint(path, comm, *, app, args, epoch, model, opt, history, wall, step=0,
                     partial=None):
    """Collective. ``epoch`` epochs done, and ``step`` batches of the next one; ``partial``
    (with ``step``): this rank's ``{"sums": [loss_sum, correct, count, seconds], "carry":
    task.carry()}`` of that epoch so far."""
    import torch

    states = comm.gather(_numpy_to_torch(opt.state_dict()), root=0)
    partials = comm.gather(partial, root=0)
    if comm.Get_rank() == 0:
        ckpt = {"app": app, "format": 1, "epoch": epoch, "P": comm.Get_size(),
                "config": _fingerprint(args), "model": model.state_dict(),
                "optimizers": states, "history": history, "wall_seconds": wall,
                "step": step, "partials": partials if step else None}
        path = Path(path)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        torch.save(ckpt, tmp)
        os.replace(tmp, path)
    comm.Barrier()


def _load_checkpoint(path, comm, *, app, args):
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if ckpt.get("app") != app:
        raise CheckpointError(f"{path} is a checkpoint of {ckpt.get('app')!r}, not {app}")
    if ckpt["P"] != comm.Get_size():
        raise CheckpointError(f"{path} was written by {ckpt['P']} ranks; resume with mpiexec "
                              f"-n {ckpt['P']} (the error-feedback residuals are per rank)")
    mine = _fingerprint(args)
    diff = {k: (ckpt["config"].get(k), v) for k, v in mine.items() if ckpt["config"].get(k) != v}
    if diff:
        raise CheckpointError(f"{path} was written with other options: "
                              + ", ".join(f"--{k.replace('_', '-')} {a!r} (now {b!r})"
                                          for k, (a, b) in diff.items()))
    return ckpt


# -- the loop ---------------------------------------------------------------------------------

def run_app(app: str, args, make_task) -> int:
    """Train ``make_task(args, comm)``'s model data-parallel over ``COMM_WORLD``; see the
    module docstring. Collective: every rank calls. Returns 0, 2 for bad options, or 128 + the
    signal's number when a stop signal interrupted training (after a checkpoint)."""
    from sparcml import abort_on_error

    with abort_on_error():
        return _run(app, args, make_task)


def _check_args(args):
    problems = []
    if args.epochs < 1:
        problems.append(f"--epochs must be >= 1, got {args.epochs}")
    if args.batch_size < 1:
        problems.append(f"--batch-size must be >= 1, got {args.batch_size}")
    if not 0 < args.density <= 1:
        problems.append(f"--density must be in (0, 1], got {args.density}")
    if args.threads < 1:
        problems.append(f"--threads must be >= 1, got {args.threads}")
    if args.bits and args.algorithm == "dense" and not args.dense:
        problems.append("--bits needs a sparse algorithm: --algorithm dense (MPI_Allreduce) "
                        "cannot add quantized values; pass --bits 0 or another --algorithm")
    return problems


def _run(app, args, make_task) -> int:
    import torch
    from mpi4py import MPI

    import sparcml.torch as st
    from sparcapps.interrupt import StopOnSignal
    from sparcapps.records import append_record, capture_environment, make_record, summarize

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    problems = _check_args(args)
    if problems:
        if rank == 0:
            print(f"{app}: " + "; ".join(problems), file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    task = make_task(args, comm)
    model = task.model
    st.broadcast_parameters(model, comm=comm)
    inner = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                            weight_decay=args.weight_decay)
    dense = args.dense
    opt = st.DistributedOptimizer(
        inner, model.named_parameters(), density=None if dense else args.density,
        bits=None if dense or not args.bits else args.bits,
        algorithm="dense" if dense else args.algorithm,
        error_feedback=not args.no_error_feedback, warmup_steps=args.warmup_steps,
        bucket_size=max(1, int(args.bucket_mb * 2**20)), topk_bucket_size=args.topk_bucket_size,
        comm=comm, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    history, start_epoch, wall_offset, skip, resumed_partial = [], 0, 0.0, 0, None
    if args.resume:
        ckpt = _load_checkpoint(args.resume, comm, app=app, args=args)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizers"][rank])
        history, start_epoch = list(ckpt["history"]), int(ckpt["epoch"])
        wall_offset = float(ckpt["wall_seconds"])
        skip = int(ckpt.get("step", 0))  # batches of epoch start_epoch already done
        if skip:
            resumed_partial = ckpt["partials"][rank]
    ckpt_path = args.checkpoint or f"{app}.ckpt"
    env = capture_environment(comm)
    if rank == 0:
        what = "dense baseline" if dense else (
            f"top-k density {args.density}" + (f", {args.bits}-bit QSGD" if args.bits else "")
            + ("" if not args.no_error_feedback else ", no error feedback"))
        print(f"{app}: {args.dataset}, {type(model).__name__} {n_params:,} parameters, P={size}, "
              f"{what}, {opt.algorithm}, {len(opt.buckets)} bucket(s)", flush=True)
    progress = None
    if rank == 0 and not args.no_progress:
        from tqdm import tqdm

        progress = tqdm(unit="step", disable=None, dynamic_ncols=True)
    step_times = []
    t_start = time.perf_counter() - wall_offset
    stopper = StopOnSignal(comm)
    with stopper:
        for epoch in range(start_epoch, args.epochs):
            batches = task.start_epoch(epoch)
            if progress is not None and progress.total is None:
                progress.reset(total=len(batches) * (args.epochs - start_epoch) - skip)
            before = st.CompressionStats()
            before._add(opt.stats)
            t_epoch = time.perf_counter()
            loss_sum = correct = count = 0.0
            first = 0
            if skip:  # resuming inside this epoch: its first batches are done
                first, skip = skip, 0
                loss_sum, correct, count, seconds = resumed_partial["sums"]
                t_epoch -= seconds
                task.restore(resumed_partial["carry"])
            for i in range(first, len(batches)):
                t0 = time.perf_counter()
                loss, c, n = task.loss(batches[i])
                loss.backward()
                opt.synchronize()
                if task.clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), task.clip)
                opt.step()
                opt.zero_grad()
                step_times.append(time.perf_counter() - t0)
                loss_sum += float(loss.detach()) * n
                correct += c
                count += n
                if progress is not None:
                    progress.update(1)
                if stopper.poll():  # collective: every rank stops after this same step
                    partial = {"sums": [loss_sum, correct, count,
                                        time.perf_counter() - t_epoch],
                               "carry": task.carry()}
                    _save_checkpoint(ckpt_path, comm, app=app, args=args, epoch=epoch,
                                     model=model, opt=opt, history=history,
                                     wall=time.perf_counter() - t_start, step=i + 1,
                                     partial=partial)
                    if progress is not None:
                        progress.close()
                    if rank == 0:
                        print(f"{app}: interrupted by {stopper.signal_name} in epoch "
                              f"{epoch + 1} after {i + 1} of {len(batches)} steps; checkpoint "
                              f"in {ckpt_path} (continue with --resume {ckpt_path})",
                              flush=True)
                    return 128 + stopper.signum
            epoch_seconds = time.perf_counter() - t_epoch
            ev = task.evaluate(comm)
            s = opt.stats
            comm_s, flatten_s, compress_s = (s.wait_seconds - before.wait_seconds,
                                             s.flatten_seconds - before.flatten_seconds,
                                             s.compress_seconds - before.compress_seconds)
            steps = s.steps - before.steps
            sums = _reduce(comm, [loss_sum, correct, count,
                                  s.bytes_sent - before.bytes_sent,
                                  s.sent_values - before.sent_values,
                                  s.result_values - before.result_values,
                                  s.values - before.values])
            slowest = _reduce(comm, [epoch_seconds, comm_s, flatten_s, compress_s], "max")
            rec = {"epoch": epoch + 1, "wall_seconds": time.perf_counter() - t_start,
                   "loss": sums[0] / sums[2], "train_accuracy": sums[1] / sums[2], **ev,
                   "epoch_seconds": slowest[0], "comm_seconds": slowest[1],
                   "flatten_seconds": slowest[2], "compress_seconds": slowest[3],
                   "compute_seconds": slowest[0] - slowest[1] - slowest[2], "steps": steps,
                   "bytes_per_step": sums[3] / size / max(steps, 1),
                   "sent_density": sums[4] / sums[6], "result_density": sums[5] / sums[6]}
            rec = {k: (float(v) if isinstance(v, (np.floating, np.integer)) else v)
                   for k, v in rec.items()}
            history.append(rec)
            if rank == 0:
                score = (f"test acc {rec['test_accuracy']:.4f}" if "test_accuracy" in rec
                         else f"test ppl {rec['test_perplexity']:.2f}")
                line = (f"epoch {epoch + 1}/{args.epochs}: loss {rec['loss']:.4f}, {score}, "
                        f"{rec['epoch_seconds']:.2f} s (comm {rec['comm_seconds']:.2f} s), "
                        f"{rec['bytes_per_step']:.0f} B/step, sent density "
                        f"{rec['sent_density']:.4f}")
                if progress is not None and not progress.disable:
                    progress.set_postfix(loss=f"{rec['loss']:.4f}", refresh=False)
                    progress.write(line)
                else:
                    print(line, flush=True)
            if args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0:
                _save_checkpoint(ckpt_path, comm, app=app, args=args, epoch=epoch + 1,
                                 model=model, opt=opt, history=history,
                                 wall=time.perf_counter() - t_start)
    if progress is not None:
        progress.close()
    digest = params_digest(model)
    same = len(set(comm.allgather(digest))) == 1
    total = _reduce(comm, [opt.stats.bytes_sent, opt.stats.steps, opt.stats.dense_bytes])
    bytes_per_step = float(total[0] / max(total[1], 1))
    dense_per_step = float(total[2] / max(total[1], 1))
    timings = {}
    if step_times:
        timings["step"] = summarize(step_times)
    if history:
        timings["epoch"] = summarize([h["epoch_seconds"] for h in history])
    final = history[-1] if history else {}
    metrics = {"epochs": history, "params": n_params, "params_sha256": digest,
               "params_identical_across_ranks": same, "model": type(model).__name__,
               **{k: final[k] for k in ("test_accuracy", "test_perplexity", "test_loss")
                  if k in final}}
    if rank == 0:
        print(f"{app}: done; parameters identical on all ranks: {same}; "
              f"{bytes_per_step:,.0f} bytes sent per step and rank "
              f"(dense allreduce: {dense_per_step:,.0f}); sha256 {digest[:16]}", flush=True)
        if args.output:
            record = make_record(
                app, config=vars(args), environment=env,
                algorithm="dense" if dense else args.algorithm, P=size, N=n_params,
                density=None if dense else args.density, timings=timings, metrics=metrics,
                bytes={"sent_per_step": bytes_per_step, "dense_per_step": dense_per_step,
                       "ratio_dense_over_sent": dense_per_step / bytes_per_step
                       if bytes_per_step else None})
            append_record(args.output, record)
    if not same:
        raise RuntimeError("parameters differ across ranks at the end of training")
    return 0
