"""The cost model ``auto`` uses inside a simulation: the network spec's own parameters.

``sparcml.calibrate`` times ping-pongs and allreduces with the wall clock, which inside a
simulation measures this machine, not the simulated network. A simulated ``auto`` instead gets
a :class:`~sparcml.CostModel` whose alpha and beta are the spec's inter-node link, whose
collective terms follow :mod:`sparcml.sim.collective_cost`, and whose merge and add rates are
measured on this machine once (as ``calibrate`` does).
"""

from __future__ import annotations

import functools
import math

from ..costmodel import CostModel
from .network import NetworkSpec, parse_network

__all__ = ["network_cost_model", "use_model"]


@functools.lru_cache(maxsize=1)
def _local_rates() -> tuple[float, float]:
    from ..auto import _local_rates as measure

    model = CostModel()
    measure(model, 0, 5)
    return model.gamma_merge, model.gamma_dense


def network_cost_model(network: str | NetworkSpec, P: int) -> CostModel:
    """A :class:`~sparcml.CostModel` for P ranks on ``network`` (see the module docstring)."""
    net = parse_network(network)
    alpha, beta = net.collective_link(range(P))
    logp = max(1, math.ceil(math.log2(max(P, 2))))
    gamma_merge, gamma_dense = _local_rates()
    return CostModel(alpha=alpha, beta=beta, gamma_merge=gamma_merge, gamma_dense=gamma_dense,
                     allreduce_alpha=2 * logp * alpha, allreduce_beta=2 * (P - 1) / P * beta,
                     allgather_alpha=logp * alpha, allgather_beta=(P - 1) / P * beta)


def use_model(comm, model: CostModel) -> None:
    """Make ``algorithm="auto"`` on ``comm`` use ``model`` (collective on first use of
    ``comm`` by sparcml, like every sparcml call)."""
    from ..context import context_for

    context_for(comm).history["model"] = model
