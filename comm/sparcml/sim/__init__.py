"""``sparcml.sim``: sparcml's unchanged algorithms on P simulated ranks in one process.

Predict a cluster before spending allocation hours::

    import sparcml, sparcml.sim
    def body(comm):
        vec = my_input(comm.Get_rank(), comm.Get_size())
        return sparcml.allreduce(vec, comm, algorithm="ssar_split_allgather")
    r = sparcml.sim.run(1024, body, network="128x10gbit,ppn=8,intra=100gbit,latency=2us")
    r.results[0], r.time, r.wire_bytes    # exact result, modeled seconds, bytes per rank

or ``sparc-bench --simulate 64 256 1024 --network 128x10gbit,ppn=8``.

Execution: threads, one per virtual rank
----------------------------------------
Each rank is a Python thread running the user's function on its own
:class:`~sparcml.sim.SimComm`, an object with the subset of mpi4py's ``Comm`` interface that
sparcml calls (``sparcml.sim._comm`` lists it). Blocking calls block the thread on a condition
variable. Threads run sparcml's blocking code unchanged -- an ``Mprobe`` in the middle of a
loop, a collective inside a helper -- where a stepping scheduler or coroutines would need every
blocking call rewritten as a yield point. The GIL is no obstacle: ranks mostly wait, and
the Numba kernels release it. A few *run tokens* (default: the usable cores) let only that
many rank threads execute at once, which bounds the memory of transient buffers and keeps the
measured compute of a rank close to that of a rank alone on a core.

What is exact, what is modeled
------------------------------
Exact: every message is produced by sparcml's own encoding and delivered byte for byte, so
results, bytes per rank, message counts and fill-in are those of a real run (tested bitwise
against ``mpiexec`` at P = 2, 4, 8). MPI collectives (``Allreduce``, ``Allgather(v)``,
``Bcast``) are computed directly from the ranks' buffers: data exact, their internal messages
not enacted but charged by the model below. A predefined ``Allreduce`` combines the ranks'
arrays in the order of MPICH's recursive doubling / halving (pairs at distance 1 first, the
ranks beyond the power of two folded in before), so the ``dense`` baseline's float sums equal
MPICH's bit for bit (tested through the apps at P = 2-4, and seen at 5, 6, 8); another MPI
library may associate differently.

Modeled time: each rank has a virtual clock.

- Compute, ``compute="model"`` (the default): each kernel a rank runs (``add``, ``fold_parts``,
  ``assemble``, ``encode``, ``decode``, the local sums of a simulated ``Allreduce``) is charged
  a calibrated rate times its exact work (entries, bytes), and each call into the communicator
  a calibrated Python cost (:mod:`sparcml.sim._rates`: measured once per process, cached in
  ``~/.cache/sparcml/sim-kernel-rates.json`` for this machine, these versions and this source
  of the Numba kernels), times ``compute_scale``. The same run gives the
  same time on a quiet and on a loaded machine. Not charged: top-k's selection kernels and
  input validation.
- Compute, ``compute="measured"``: the thread CPU time (``time.thread_time``) a rank spends
  between two calls into the communicator, measured on this machine, times ``compute_scale``
  (everything a rank does, but it follows the machine's load). Memoized computations (see
  :mod:`sparcml.sim._sharing`) charge every rank the CPU time of the one real computation.
- A point-to-point message of n bytes from rank s to rank d (LogGP-style, alpha + n beta): it
  starts when s posts it and s's link is free, occupies s's link for n beta, and arrives
  ``alpha`` after it has also streamed through d's link (d's link serializes the messages it
  receives, in the order d matches them). Links are per node for inter-node messages (the
  ranks of a node share its NIC) and per rank within a node (shared memory, ``intra`` rate and
  latency). A receive completes at ``max(receiver's clock, arrival)``; a rank ends no earlier
  than its last send has left it.
- Collectives: synchronizing; from the last rank's entry, the time of MPICH's algorithm for
  that size (:mod:`sparcml.sim._collective_cost`), on the slowest link they span; an
  ``Allreduce``'s local sums are compute (``dense_add`` rate, times ``compute_scale``).

Without running: ``sparc-bench --simulate --model-only`` replays these charges for the built-in
algorithms from the input and result sizes alone (:mod:`sparcml.sim._predict`), within 1.3x of
the simulated time on the reference grid of ``scripts/model_vs_sim_grid.py``.

Assumptions kept from LogP/LogGP: a per-message latency (L + o folded into alpha), a per-byte
gap on each endpoint (G = beta), endpoint serialization (one message at a time per link
direction), full-duplex links. Dropped: contention inside the switches and the network core
(full bisection bandwidth is assumed; fat trees with oversubscription and dragonflies under
adversarial traffic are slower), the CPU overhead o of sending and receiving as a separate
term (it is in alpha, and the Python-side costs of sparcml are measured as compute), eager vs
rendezvous protocols (a sender never waits for the receiver to post), overlap of compute with
a rank's own transfers, the dependence of compute speed on the target's cores and memory
(scale with ``compute_scale``), and noise. ``tests/test_sim_validation.py`` and BENCHMARKS.md
compare the modeled times with measured ones on an emulated 1 Gbit network.

Training loops: a synchronous data-parallel loop runs unchanged on simulated ranks when it
keeps its model in a :class:`Replicas` (one copy for all ranks, each update applied once and
checked to have the same inputs on every rank), charges its local compute with
:func:`charge` (seconds, e.g. from rates it measured once with :func:`cached_rates`, or a
GPU's step time) and reads durations from :func:`clock`; under ``mpiexec`` the same calls do
what each rank does alone. ``sparc-linear --simulate`` and the deep apps are built so.

Memory: ranks share identical buffers instead of copying them P times
(:mod:`sparcml.sim._sharing`), so P = 1,024 ranks at N = 16M fit a few GiB. The ``dense``
baseline cannot share: its ``MPI_Allreduce`` needs every rank's full vector, P N values;
``sparc-bench --simulate`` models it (bytes and time of Rabenseifner's algorithm, no data)
when P N values do not fit, and says so in its records.
"""

from __future__ import annotations

from ._comm import SimComm
from ._dense_model import dense_allreduce_model
from ._model import network_cost_model, use_model
from ._network import NetworkSpec, parse_network
from ._probe import probe_network
from ._app_rates import cached_rates
from ._rates import rates_in_use
from ._replicas import ReplicaDivergedError, Replicas, charge, clock
from ._predict import Prediction, predicted_algorithms
from ._runner import SimResult, SimulationError, run


def predict(algorithm: str, **kwargs) -> Prediction:
    """What simulating one call of a built-in ``algorithm`` would charge, without running it
    (``sparc-bench --simulate --model-only``): :class:`Prediction` (``seconds``, ``bytes`` per
    rank, ``compute``) from this machine's calibrated kernel rates, the call's index coding,
    the message encodings at the expected sizes and the network model. Keywords: ``P``, ``N``,
    ``k`` (nonzeros per rank), ``K`` (of the result), ``network`` (a spec or
    :class:`NetworkSpec`), ``compute_scale``, ``s_idx``, ``s_val``, ``coded``,
    ``link_costs`` (see ``sparcml.sim._predict``), ``native_min_ranks`` (None or left out:
    the process default, ``SPARCML_NATIVE_MIN_RANKS``), ``plan`` (True: the call of a
    persistent plan, :func:`sparcml.plan`, with its identity check). ``predicted_algorithms()`` lists the
    algorithms it knows."""
    from .._options import default_options
    from ._predict import predict as _predict
    from ._rates import kernel_rates

    if kwargs.get("native_min_ranks") is None:  # resolved here, once
        kwargs["native_min_ranks"] = default_options().native_min_ranks
    return _predict(algorithm, rates=kernel_rates(run), **kwargs)


def index_coding_link_costs(network, P: int, index_coding: str = "auto", *, model=None):
    """``(coded, link_costs)`` that a call with option ``index_coding`` uses on P simulated
    ranks of ``network`` (a :class:`NetworkSpec`): ``"raw"`` never codes, ``"coded"`` (or one
    rank) always, ``"auto"`` weighs link seconds per byte against coding seconds: the calibrated
    ``model``'s ``(beta, gamma_code)`` when given, else shared memory's or a network's
    (whether the P ranks fit one node), as :mod:`sparcml._model.link_costs` assumes."""
    from .._model.costmodel import CostModel
    from .._model.link_costs import NETWORK_BYTE_SECONDS, SHARED_MEMORY_BYTE_SECONDS

    if index_coding == "raw":
        return False, None
    if index_coding == "coded" or P == 1:
        return True, None
    if model is not None:
        return True, (float(model.beta), float(model.gamma_code))
    one_node = P <= network.ppn
    return True, (SHARED_MEMORY_BYTE_SECONDS if one_node else NETWORK_BYTE_SECONDS,
                  CostModel.gamma_code)

__all__ = ["run", "SimResult", "SimulationError", "SimComm", "NetworkSpec", "parse_network",
           "network_cost_model", "use_model", "probe_network", "dense_allreduce_model",
           "Replicas", "ReplicaDivergedError", "charge", "clock", "cached_rates", "rates_in_use",
           "predict",
           "Prediction", "predicted_algorithms", "index_coding_link_costs"]
