"""The cost model ``auto`` uses inside a simulation: the network spec's own parameters, plus
sparcml's software cost per message measured in the simulator.

``sparcml.calibrate`` times ping-pongs and allreduces with the wall clock, which inside a
simulation measures this machine, not the simulated network. A simulated ``auto`` instead gets
a :class:`~sparcml.CostModel` whose collective terms follow :mod:`sparcml.sim._collective_cost`
on the spec's inter-node link, whose merge and add rates are measured on this machine once
(as ``calibrate`` does), and whose point-to-point ``alpha`` is the link latency **plus** the
software overhead ``o`` of one of sparcml's messages (LogGP's o, send and receive side):
encoding a block, the send, the probe, the receive and the decode, in Python, as the
simulator charges them (measured compute). ``calibrate`` on real ranks measures the same
through its tiny-input calibration (``overhead[name]``); without it the model charged the
split algorithms' P - 1 messages 5 us each where the simulator (like sparcml on real ranks)
spends ~50-100 us of Python per message on the 2-core development machine, and ``auto`` chose
them at P >= 8 wherever their bytes were a little smaller (BENCHMARKS.md, "Scaling studies").

``o`` is measured once per process (:func:`message_overhead`): ``ssar_split_allgather`` on a
tiny input (dimension :data:`~sparcml._model.costmodel.TINY_N`, one nonzero per rank) on
:data:`OVERHEAD_P` simulated ranks of the network, its phase 1 forced to point-to-point
messages, 1 warm-up and 5 timed calls (the slowest
rank's virtual time, the fastest call: noise on a shared machine only slows); ``o`` = (that
time - the model's prediction with ``o = 0``) / (P - 1), at least 0. A few seconds of wall time.
The phases that run as one MPI vector collective (from ``Options.native_min_ranks`` ranks)
cost no ``o`` per message but sparcml's Python per part (encode and decode),
``part_overhead``, measured the same way with the collective path forced
(:func:`vector_part_overhead`; over P parts), and MPI's rounds at the link latency
(``collective_alpha``) plus MPI's own per-message cost
(:mod:`sparcml._model.mpi_collectives`).

Per algorithm, as ``calibrate`` does on real ranks (:func:`sparcml._model.auto.calibrate_context`),
but on the virtual clock and at :data:`CALIBRATION_P` simulated ranks (at most P) whatever P
is predicted (:func:`algorithm_factors`): the time on the tiny input less the model's gives a
fixed cost the model lacks (the *residual*, at least 0), and the time on calibrate's medium
input (dimension 2^20, 2% random per rank) over the model's growth gives ``scale[name]``
(clamped to [0.25, 8]). :func:`network_cost_model` then predicts ``residual + scale x`` the
model's growth beyond the tiny input, at the requested P (``overhead[name]`` holds the
residual plus the tiny input's analytic time at that P).
"""

from __future__ import annotations

import functools
import math

from .._model.costmodel import TINY_N, CostModel
from ._network import NetworkSpec, parse_network

__all__ = ["network_cost_model", "use_model", "message_overhead", "vector_part_overhead",
           "algorithm_factors", "OVERHEAD_P", "CALIBRATION_P"]

OVERHEAD_P = 64  # simulated ranks of the measurement of o
CALIBRATION_P = 16  # simulated ranks of the per-algorithm calibration


@functools.lru_cache(maxsize=1)
def _local_rates() -> tuple[float, float]:
    from .._model.auto import _local_rates as measure

    model = CostModel()
    measure(model, 0, 5)
    return model.gamma_merge, model.gamma_dense


def _tiny_calls(comm, name: str, reps: int, options=None) -> list[float]:
    import numpy as np

    from .._collectives.entry import allreduce
    from .._vector import SparseVector

    rank = comm.Get_rank()
    vec = SparseVector(TINY_N, np.array([rank % TINY_N]), np.ones(1, np.float32))
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = comm.clock()
        allreduce(vec, comm, algorithm=name, options=options)
        times.append(comm.clock() - t0)
    return times


def _measured_overhead(network: str, native: bool) -> float:
    """Seconds per message (``native`` False: P - 1 of them) or per part (True: P) of
    ``ssar_split_allgather``'s phase 1 beyond the model's, on ``network`` (module
    docstring)."""
    import dataclasses

    import numpy as np

    from .._collectives.algorithms.split_sparse import ALGORITHM as SPLIT
    from .._options import MAX_RANKS_PER_NODE, default_options
    from ._runner import run

    net = parse_network(network)
    P = min(OVERHEAD_P, net.nodes * net.ppn)
    if P < 2:
        return 0.0
    opts = dataclasses.replace(default_options(),
                               native_min_ranks=1 if native else MAX_RANKS_PER_NODE)
    res = run(P, _tiny_calls, network=net, args=(SPLIT.name, 6, opts))
    measured = float(np.min(np.max([r[1:] for r in res.results], axis=0)))
    base = network_cost_model(net, P, overhead=0.0, part_overhead=0.0,
                              factors=False).predict(SPLIT.name, P=P, N=TINY_N, k=1,
                                                     K=min(P, TINY_N), options=opts)
    return max(0.0, (measured - base) / (P if native else P - 1))


@functools.lru_cache(maxsize=4)
def message_overhead(network: str) -> float:
    """Seconds of sparcml software per point-to-point message on ``network`` (a spec string),
    measured in the simulator (see the module docstring); cached per network."""
    return _measured_overhead(network, False)


@functools.lru_cache(maxsize=4)
def vector_part_overhead(network: str) -> float:
    """Seconds of sparcml software per part of a phase that runs as one MPI vector collective
    on ``network`` (a spec string), measured in the simulator (module docstring); cached."""
    return _measured_overhead(network, True)


def _calibration_calls(comm, names) -> dict:
    """Each algorithm on calibrate's tiny and medium inputs: per name, the tiny input's times,
    the medium input's times, its nnz and its result's nnz (this rank's)."""
    import numpy as np

    from .._model.costmodel import MEDIUM_N
    from .._collectives.entry import allreduce
    from .._vector import SparseVector

    rank = comm.Get_rank()
    rng = np.random.default_rng([7, rank])
    k = MEDIUM_N // 50
    medium = SparseVector(MEDIUM_N, np.sort(rng.choice(MEDIUM_N, k, replace=False)),
                          np.ones(k, np.float32))
    out = {}
    for name in names:
        tiny = _tiny_calls(comm, name, 6)[1:]
        times = []
        for _ in range(4):
            comm.Barrier()
            t0 = comm.clock()
            result = allreduce(medium, comm, algorithm=name)
            times.append(comm.clock() - t0)
        K = result.count_nonzero() if result.is_dense else result.nnz
        out[name] = (tiny, times[1:], k, int(K))
        del result
    return out


@functools.lru_cache(maxsize=8)
def algorithm_factors(network: str, P: int) -> dict:
    """``{name: (residual seconds, scale)}`` for the algorithms ``auto`` may pick, measured in
    the simulator on ``min(P, CALIBRATION_P)`` ranks of ``network`` (module docstring)."""
    import numpy as np

    from .._model.costmodel import MEDIUM_N
    from .._registry import algorithm_names
    from ._runner import run

    net = parse_network(network)
    P0 = max(2, min(P, CALIBRATION_P, net.nodes * net.ppn))
    names = algorithm_names(in_auto_only=True)
    res = run(P0, _calibration_calls, network=net, args=(names,))
    base = network_cost_model(net, P0, factors=False)
    factors = {}
    for name in names:
        # the fastest repetition: the noise of measured compute (a shared machine) only slows
        tiny = float(np.min(np.max([r[name][0] for r in res.results], axis=0)))
        medium = float(np.min(np.max([r[name][1] for r in res.results], axis=0)))
        k, K = res.results[0][name][2], res.results[0][name][3]
        tiny_model = base.analytic(name, P=P0, N=TINY_N, k=1, K=min(P0, TINY_N))
        growth = base.analytic(name, P=P0, N=MEDIUM_N, k=k, K=K) - tiny_model
        scale = (medium - tiny) / growth if growth > 0 else 1.0
        factors[name] = (max(0.0, tiny - tiny_model), float(min(max(scale, 0.25), 8.0)))
    return factors


def network_cost_model(network: str | NetworkSpec, P: int, *, overhead: float | None = None,
                       part_overhead: float | None = None,
                       factors: bool | dict = True) -> CostModel:
    """A :class:`~sparcml.CostModel` for P ranks on ``network`` (see the module docstring).
    ``overhead``: the software seconds per message added to ``alpha`` (None: measured by
    :func:`message_overhead`); ``part_overhead``: the software seconds per part of a vector
    collective (None: measured by :func:`vector_part_overhead`). ``factors``: True: the
    per-algorithm residuals and scales of
    :func:`algorithm_factors`; a dict of them; False: none (the analytic model alone)."""
    net = parse_network(network)
    alpha, beta = net.collective_link(range(P))
    if overhead is None:
        overhead = message_overhead(net.text)
    if part_overhead is None:
        part_overhead = vector_part_overhead(net.text)
    logp = max(1, math.ceil(math.log2(max(P, 2))))
    gamma_merge, gamma_dense = _local_rates()
    model = CostModel(alpha=alpha + overhead, beta=beta, gamma_merge=gamma_merge,
                      gamma_dense=gamma_dense,
                      allreduce_alpha=2 * logp * alpha, allreduce_beta=2 * (P - 1) / P * beta,
                      allgather_alpha=logp * alpha, allgather_beta=(P - 1) / P * beta,
                      collective_alpha=alpha, part_overhead=part_overhead)
    if factors is True:
        factors = algorithm_factors(net.text, P)
    for name, (residual, scale) in (factors or {}).items():
        if P > 1:
            tiny = model.analytic(name, P=P, N=TINY_N, k=1, K=min(P, TINY_N))
            model.overhead[name] = residual + tiny
            model.scale[name] = scale
    return model


def use_model(comm, model: CostModel) -> None:
    """Make ``algorithm="auto"`` on ``comm`` use ``model`` (collective on first use of
    ``comm`` by sparcml, like every sparcml call)."""
    from .._runtime.context import context_for

    context_for(comm).model = model
