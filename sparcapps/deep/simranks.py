"""``sparc-cnn`` / ``sparc-lstm`` on simulated ranks (``--simulate P [P ...] --network SPEC``).

The training loop of :mod:`sparcapps.deep.train` runs unchanged on P ranks of
:func:`sparcml.sim.run` (threads of this process): each rank its real shard of every epoch,
its own :class:`sparcml.torch.DistributedOptimizer` (its communication thread, its
error-feedback residuals and quantizer RNG), sparcml's real reductions; so the weights, every
loss and accuracy are those of ``mpiexec -n P`` with the same seeds, bit for bit.

One model for all ranks (:class:`sparcml.sim.Replicas`). Synchronous data-parallel replicas are
bitwise equal, so the ranks keep one copy of the weights and one optimizer state (momentum):

- each rank builds its model as the real app does (the seed set, under a lock: torch's random
  generator is global), then its parameters are made to *alias* the first rank's storage
  (``p.data = shared.data``: no copy), after checking they are bitwise equal to it. A rank
  keeps its own ``Parameter`` objects, so its ``.grad``, its gradient hooks and its
  DistributedOptimizer are its own: ranks run forward and backward at the same time, without
  a lock, and a rank's gradient lives only during its step (``zero_grad`` frees it).
- the wrapped SGD of every rank is a :class:`SharedStep`: ``step()`` applies one shared
  ``torch.optim.SGD`` (the one momentum buffer) to the shared weights once per step, from the
  first rank's averaged gradient, after checking that every rank's averaged gradient is
  bitwise equal to it (:meth:`sparcml.sim.Replicas.once`; a difference raises
  :class:`sparcml.sim.ReplicaDivergedError`). No rank reads the weights of step k after the
  step's reduction has begun on every rank, so updating them in place is safe.
- the data are loaded once (:func:`shared_data`); each rank's task slices its own shard.

What stays per rank, as it differs: the gradient of the step, the bucket buffers, the
error-feedback residuals, the quantizer's RNG, a compressor's memory, an LSTM's hidden state.

Modeled time (each rank's virtual clock). Before each step's backward, the rank is charged the
step's local compute: forward and backward of its minibatch, the copies into and out of the
bucket buffers, the top-k selection and error feedback, and the rest of ``synchronize()``'s own
work (its finiteness checks, the result's copy to dense and density count, the statistics, the
Python around the kernels: the ``synchronize`` rate); before its update, the update. These are
calibrated once per machine and configuration (:func:`step_rates` in :mod:`.steprates`: the
median step of a short training run of the run's own model, batch and compression on one rank,
timed part by part on the thread's CPU clock, cached by :func:`sparcml.sim.cached_rates`),
so the same run gives the same modeled seconds on a quiet and on a loaded machine; or
``--step-seconds S`` charges S per step instead (a GPU's measured step). ``--compute-scale``
multiplies every compute figure. Communication is the simulator's: sparcml's real reductions on
the network model, with their kernels charged at calibrated rates. The reduction starts after
the step's whole modeled backward (no overlap of backward with communication is modeled: with
one bucket, as the digits models have, there is none in a real run either). Evaluation is not
charged (epoch seconds are the training steps'). Records carry ``"simulated": true``, the
network, the compute mode and virtual seconds; ``metrics.params_sha256`` is the digest of the
weights, compared with a real run's.
"""

from __future__ import annotations

import os

from mpi4py import MPI

from sparcml import sim
from sparcml.sim import ReplicaDivergedError
from sparcapps.simapp import SimPlan

from .steprates import RATES_VERSION, RATE_NAMES, StepCharge, step_rates

# the modeled compute (:mod:`.steprates`), here too: what a simulated run charges
__all__ = ["SharedStep", "shared_data", "build_model_once", "share_model", "step_rates",
           "StepCharge", "estimate", "train_examples", "RATES_VERSION", "RATE_NAMES"]


def shared_data(comm, key, load):
    """``load()`` once for all simulated ranks of ``comm`` (the arrays are read only), else
    ``load()`` on this rank."""
    return sim.Replicas(comm).shared(("deep.data", key), load)


def build_model_once(comm, seed: int, build):
    """``build()`` after ``torch.manual_seed(seed)``, as every real rank does; on simulated ranks
    one rank at a time (torch's generator is global to the process) and its parameters then made
    aliases of one shared copy (:func:`share_model`), so that no more than two copies of the
    weights exist at once."""
    import torch  # the [torch] extra: not at --help

    replicas = sim.Replicas(comm)
    with replicas.exclusive("deep.build"):
        torch.manual_seed(seed)
        task = build()
        if replicas.sharing:
            share_model(replicas, task.model)
    return task


def share_model(replicas, model) -> list:
    """Make ``model``'s parameters alias the storage of the first simulated rank's (checked
    bitwise equal to them first); returns the shared ``Parameter`` objects, which the shared
    update steps. Not collective: ``replicas`` (:class:`sparcml.sim.Replicas`) matches the
    n-th call of every rank."""
    import torch  # the [torch] extra: not at --help

    params = list(model.parameters())
    mine = [p.detach().numpy() for p in params]
    shared = replicas.shared("deep.params", lambda: _shared_params(params), check=mine)
    with torch.no_grad():
        for p, s in zip(params, shared):
            p.data = s.data
    return shared


class SharedStep:
    """Factory of the wrapped optimizer of a simulated rank (see the module docstring): an
    ``torch.optim.Optimizer`` over this rank's parameters whose ``step()`` runs one shared
    ``optimizer_class(shared parameters, **defaults)`` once for all ranks. ``make(comm, model,
    cls, **defaults)`` returns it on simulated ranks that share memory, else ``cls(model
    .parameters(), **defaults)`` (what a real rank builds)."""

    @staticmethod
    def make(comm, model, cls, **defaults):
        replicas = sim.Replicas(comm)
        if not replicas.sharing:
            return cls(model.parameters(), **defaults)
        return _shared_step_class()(model, replicas, cls, defaults)


_CLASS = None


def _shared_step_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import torch  # the [torch] extra: not at --help

    class _SharedStep(torch.optim.Optimizer):
        """This rank's parameters (their own ``.grad``); ``step()`` updates the shared weights
        once for all ranks from gradients checked bitwise equal on every rank."""

        def __init__(self, model, replicas, cls, defaults):
            params = list(model.parameters())
            super().__init__(params, dict(defaults))
            self._replicas = replicas
            self._keys = tuple(defaults)
            self._inner = replicas.shared("deep.optimizer",
                                          lambda: cls(_shared_params(params), **defaults))
            self._shared = [p for g in self._inner.param_groups for p in g["params"]]
            self._params = params
            if [p.data_ptr() for p in params] != [s.data_ptr() for s in self._shared]:
                raise _diverged()(
                    "a simulated rank's parameters are not the shared weights (build the "
                    "model with build_model_once before its optimizer)")

        def step(self, closure=None):
            if closure is not None:
                raise ValueError("the shared simulated step takes no closure")
            grads = [p.grad for p in self._params]
            hyper = [tuple(g[k] for k in self._keys) for g in self.param_groups]

            def update():
                for mine, inner in zip(self.param_groups, self._inner.param_groups):
                    inner.update({k: mine[k] for k in self._keys})
                for s, g in zip(self._shared, grads):
                    s.grad = g
                try:
                    self._inner.step()
                finally:
                    for s in self._shared:
                        s.grad = None

            check = [None if g is None else g.detach().numpy() for g in grads] + [hyper]
            self._replicas.once("deep.step", update, check=check)

    _CLASS = _SharedStep
    return _CLASS


def _diverged():
    return ReplicaDivergedError


def _shared_params(params):
    """New ``Parameter`` objects aliasing the storage of ``params`` (no copy)."""
    import torch  # the [torch] extra: not at --help

    return [torch.nn.Parameter(p.detach(), requires_grad=p.requires_grad) for p in params]


# -- the CLI side ------------------------------------------------------------------------------

def estimate(app: str, args, P: int, *, n_params: int, train_examples: int, rates: dict):
    """What ``--simulate P`` takes (:class:`sparcapps.simapp.SimPlan`): memory (the process,
    the data, one model with its momentum, then per rank its gradient, bucket buffer and what
    its reduction holds: residual, compensated gradient, result, workspaces) and real time
    (every rank's calibrated step shared by this machine's cores, and the reduction's passes
    over the gradient per rank). Fitted on this machine: BENCHMARKS.md, "The deep apps on
    simulated ranks"."""
    N = int(n_params)
    sparse_ef = not (args.dense or args.no_error_feedback)
    per_rank = 4 * N * (_VECTORS_SPARSE if sparse_ef else _VECTORS_OTHER) + _RANK_BYTES
    data = int(1.25 * train_examples * _DATA_BYTES.get(args.dataset, 256))
    nbytes = _BASE_BYTES + 8 * N + data + P * per_rank
    if args.dataset != "ptb":
        steps = (train_examples // P) // args.batch_size
    else:
        steps = (train_examples // P // args.batch_size - 1) // args.bptt
    steps = max(0, steps)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    cores = max(1, min(P, cores))
    per_step = (P * (rates["forward_backward"] + rates["flatten"] + rates["select"]
                     + rates["synchronize"]) / cores
                + rates["update"] + P * (_SIM_STEP_SECONDS + _SIM_VALUE_SECONDS * N))
    seconds = steps * args.epochs * per_step + P * _SIM_RANK_SECONDS
    return SimPlan(P, nbytes, seconds, f"{steps} steps per epoch, {N:,} parameters")


# fitted on this machine from peak RSS at P = 16 and 64, widths 16 and 64 (BENCHMARKS.md)
_BASE_BYTES = 640 << 20     # the interpreter, torch, sparcml, Numba's compiled kernels
_RANK_BYTES = 1 << 20       # a rank's threads, its communicator contexts
_VECTORS_SPARSE = 6         # gradient-sized float32 vectors per rank, top-k with residuals
_VECTORS_OTHER = 5          # dense (the simulated Allreduce holds every rank's copy), no EF
_DATA_BYTES = {"digits": 256, "cifar10": 12288, "ptb": 24}  # per example (ptb: per token)
_SIM_STEP_SECONDS = 0.01    # the simulator's and the optimizer's Python per rank and step
_SIM_VALUE_SECONDS = 8e-8   # the reduction's passes over each gradient value, per rank
_SIM_RANK_SECONDS = 0.3     # building a rank: its model, optimizer, agreement


def train_examples(app: str, args, make_task) -> tuple[int, int]:
    """(parameters, training examples or tokens) of the run, from one rank-0 task."""
    import torch  # the [torch] extra: not at --help

    torch.manual_seed(args.seed)
    task = make_task(args, MPI.COMM_SELF)
    n = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
    if hasattr(task, "y"):
        return n, len(task.y)
    return n, sum(x.size for x in task.xs)
