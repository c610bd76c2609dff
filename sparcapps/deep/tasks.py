"""What the training loop of :mod:`sparcapps.deep.train` trains: a *task* per app.

A task holds the model and this rank's data and answers ``start_epoch(epoch) -> batches``,
``loss(batch) -> (mean loss tensor, correct, count)``, ``evaluate(comm) -> dict`` (collective),
``carry()`` / ``restore(carry)`` (what one step hands the next, for a checkpoint inside an
epoch) and the attribute ``clip`` (a gradient norm to clip to, or None). Importing this module
imports neither torch nor MPI.
"""

from __future__ import annotations

import numpy as np

from .data import lm_batches, shard_permutation

__all__ = ["ClassifyTask", "LanguageModelTask", "reduce_numbers"]


class ClassifyTask:
    """Minibatch classification of in-memory arrays; each rank its slice of every epoch."""

    metric = "accuracy"
    clip = None

    def __init__(self, model, X, y, Xte, yte, *, rank, size, batch_size, seed):
        import torch  # the [torch] extra: not at --help

        self.torch = torch
        self.model, self.X, self.y, self.Xte, self.yte = model, X, y, Xte, yte
        self.rank, self.size, self.batch_size, self.seed = rank, size, batch_size, seed

    def start_epoch(self, epoch: int) -> list:
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
        loss_sum, correct = reduce_numbers(comm, [loss_sum, correct])
        n = len(self.yte)
        return {"test_loss": loss_sum / n, "test_accuracy": correct / n}


class LanguageModelTask:
    """Truncated-BPTT language modelling; each rank a contiguous share of the training text,
    the hidden state carried from window to window (and reset every epoch)."""

    metric = "perplexity"

    def __init__(self, model, corpus, *, rank, size, batch_size, bptt, clip=0.25):
        import torch  # the [torch] extra: not at --help

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
        loss_sum, count = reduce_numbers(comm, [loss_sum, count])
        mean = loss_sum / count
        return {"test_loss": mean, "test_perplexity": float(np.exp(min(mean, 50.0)))}


def reduce_numbers(comm, values, op: str = "sum") -> np.ndarray:
    """Element-wise sum (or max) over ranks of a few numbers, as float64. Collective."""
    from mpi4py import MPI  # here: importing this module imports no MPI (see above)

    buf = np.array(values, np.float64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM if op == "sum" else MPI.MAX)
    return buf
