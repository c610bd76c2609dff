"""The dense baseline's ``MPI_Allreduce`` as the simulator charges it, without running it.

For a P N too large to hold (nothing of a dense allreduce can be shared between the simulated
ranks): ``sparc-bench --simulate`` records such rows as modeled only.
"""

from __future__ import annotations

import numpy as np

from .._errors import InvalidArgumentError
from ._collective_cost import allreduce_time
from ._network import parse_network
from ._world import add_rate

__all__ = ["dense_allreduce_model"]


def dense_allreduce_model(network, P: int, nbytes: int, *, compute: str = "model",
                          compute_scale: float = 1.0) -> tuple[float, int]:
    """Modeled seconds and bytes sent per rank of an ``MPI_Allreduce`` of ``nbytes`` on ``P``
    simulated ranks of ``network`` (a :class:`NetworkSpec` or its text), as
    :func:`sparcml.sim.run` charges one with the same ``compute`` and ``compute_scale``:
    MPICH's algorithm for that size on the slowest link the ranks span, its local additions
    at the calibrated ``dense_add`` rate (``compute="model"``, :mod:`sparcml.sim._rates`) or
    this machine's measured one (``"measured"``: ``np.add`` of float32), times
    ``compute_scale``; bytes ``2 (P - 1) nbytes / P`` (Rabenseifner's reduce-scatter and
    allgather)."""
    net = parse_network(network)
    for name, value, low in (("P", P, 1), ("nbytes", nbytes, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
    if compute not in ("model", "measured"):
        raise InvalidArgumentError(f"compute must be 'model' or 'measured', got {compute!r}")
    if (isinstance(compute_scale, bool) or not isinstance(compute_scale, (int, float))
            or not 0 < compute_scale < float("inf")):
        raise InvalidArgumentError(f"compute_scale must be a positive number, got "
                                   f"{compute_scale!r}")
    alpha, beta = net.collective_link(range(P))
    gamma = _model_add_rate() if compute == "model" else add_rate()
    return (allreduce_time(P, nbytes, alpha, beta, gamma * compute_scale),
            2 * (P - 1) * nbytes // P)


def _model_add_rate() -> float:
    """The calibrated ``dense_add`` rate a modeled run charges (:mod:`sparcml.sim._rates`)."""
    from ._rates import kernel_rates
    from ._runner import run

    return kernel_rates(run)["dense_add"]
