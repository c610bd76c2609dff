"""``sparcml.sim.run``: P virtual ranks, one thread each, running a function on a SimComm."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from .._errors import InvalidArgumentError, SparcmlError
from ._comm import SimComm
from ._credit import gc_pauses_discounted, rank_scope
from ._network import NetworkSpec, parse_network
from ._sharing import SharingOps
from ._world import SimAborted, SimDeadlock, World

__all__ = ["run", "SimResult", "SimulationError", "DEFAULT_RATE", "COMPUTE_MODES"]

DEFAULT_RATE = "10gbit"
# how a rank's compute is charged: "model" = calibrated kernel rates x exact work
# (sparcml.sim._rates; deterministic), "measured" = its thread CPU time (follows the load)
COMPUTE_MODES = ("model", "measured")


class SimulationError(SparcmlError):
    """A rank of a simulation raised; the first rank's exception is chained."""


@dataclass
class SimResult:
    """What :func:`run` returns; lists are indexed by world rank.

    ``results``: each rank's return value. ``times``: each rank's virtual clock at its end
    (seconds: compute + modeled communication). ``compute``: the compute part (modeled from
    kernel rates, or measured: ``extra["compute"]`` says which; ``extra["calls"]``: each rank's
    calls into the communicator; ``extra["rates"]``: the kernel rates of a modeled run).
    ``wire_bytes``: bytes each rank put on the wire (point-to-point exact; collectives the
    volume of the modeled algorithm). ``messages``: point-to-point messages sent.
    """

    results: list
    times: list[float]
    compute: list[float]
    wire_bytes: list[int]
    messages: list[int]
    network: NetworkSpec
    extra: dict = field(default_factory=dict)

    @property
    def time(self) -> float:
        """The slowest rank's virtual time."""
        return max(self.times)


# the state every simulated rank holds however small its program (its thread, clocks, queues,
# communicator): measured 3.6 KiB per rank at P = 20,000 with an empty function (issue 36);
# a floor, so that an estimate above the memory this machine has refuses before any is built
RANK_STATE_BYTES = 4 << 10


def _available_bytes() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**50 else f"{n / 2**50:,.3g} PiB"


def check_memory(P: int, available: int | None = None) -> None:
    """Refuse (:class:`~sparcml.InvalidArgumentError`, with the estimate) a simulation of P
    ranks whose per-rank state alone (:data:`RANK_STATE_BYTES` each, before the program's own
    buffers) exceeds the memory available here."""
    available = _available_bytes() if available is None else available
    need = P * RANK_STATE_BYTES
    if available is not None and need > available:
        raise InvalidArgumentError(
            f"simulating P = {P:,} ranks needs at least {_gib(need)} for the ranks' own state "
            f"({RANK_STATE_BYTES // 1024} KiB each, before their buffers), more than the "
            f"{_gib(available)} available here; simulate fewer ranks, or model the call "
            f"without data (sparcml.sim.network_cost_model, sparc-bench --model-only)")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _close_engines(comm) -> None:
    """End the non-blocking engine threads of the rank's contexts (a DistributedOptimizer's
    communication thread): a real rank's end with the process, a simulated one's would
    otherwise wait forever, holding its context's workspaces into the next simulation."""
    for value in list(comm._attrs.values()):
        engine = getattr(value, "engine", None)
        if engine is not None:
            engine.close()
            value.engine = None


def run(P: int, fn, *, network: str | NetworkSpec | None = None, args: tuple = (),
        tokens: int | None = None, compute_scale: float = 1.0,
        timeout: float | None = None, share: bool = True,
        compute: str = "model") -> SimResult:
    """Run ``fn(comm, *args)`` on P simulated ranks; returns a :class:`SimResult`.

    ``comm`` is each rank's :class:`~sparcml.sim.SimComm` (the world communicator): pass it to
    sparcml's calls as you would ``MPI.COMM_WORLD``. ``network``: a spec string
    (:func:`parse_network`) or a :class:`NetworkSpec`; its ``nodes x ppn`` must cover P
    (default: P nodes of one rank, 10 Gbit/s links).
    ``tokens``: how many rank threads run at once (default: the usable cores).
    ``compute``: ``"model"`` (default) charges each rank the calibrated rate of every kernel
    it runs times its exact work (items, bytes) plus a calibrated cost per communicator call
    (:mod:`sparcml.sim._rates`: measured once per process, cached in
    ``~/.cache/sparcml/sim-kernel-rates.json``, not read with ``SPARCML_SIM_RATES=off``), so
    that the same run gives the same time on a quiet or a loaded machine; ``"measured"`` charges
    the thread CPU time a rank spends between calls (everything it does, but it follows the
    machine's load).
    ``compute_scale`` multiplies compute (e.g. the ratio of the target cluster's core
    speed to this machine's, < 1 for faster cores). ``share``: ranks share identical buffers
    (:mod:`sparcml.sim._sharing`). Raises :class:`SimulationError` if any rank raised (after
    every thread has ended), or if ``timeout`` seconds of real time pass. Raises
    :class:`~sparcml.InvalidArgumentError` for a bad argument (``timeout`` must be None or a
    positive number) and, with the estimate, for a P whose ranks' state alone would not fit in
    the memory available here (:func:`check_memory`), before any rank is built.
    """
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise InvalidArgumentError(f"P must be a positive integer, got {P!r}")
    if not (isinstance(compute_scale, (int, float)) and compute_scale > 0
            and compute_scale != float("inf")):
        raise InvalidArgumentError(f"compute_scale must be a positive number, got "
                                   f"{compute_scale!r}")
    if compute not in COMPUTE_MODES:
        raise InvalidArgumentError(f"compute must be one of {', '.join(COMPUTE_MODES)}, got "
                                   f"{compute!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, (int, float)) or not 0 < timeout < float("inf")):
        raise InvalidArgumentError(f"timeout must be None or a positive number of seconds, "
                                   f"got {timeout!r}")
    check_memory(P)
    net = parse_network(f"{P}x{DEFAULT_RATE}" if network is None else network)
    if P > net.nodes * net.ppn:
        raise InvalidArgumentError(
            f"network {net.text} has {net.nodes} nodes x {net.ppn} ranks = "
            f"{net.nodes * net.ppn} ranks, fewer than P = {P}; give more nodes")
    ops = SharingOps() if share else None
    rates = None
    if compute == "model":
        from .._collectives.ops import PLAIN
        from ._model_ops import ModelOps
        from ._rates import kernel_rates

        rates = kernel_rates(run)
    world = World(P, net, tokens=tokens or _cores(), compute_scale=compute_scale,
                  ops=ops if rates is None else ModelOps(PLAIN if ops is None else ops, rates),
                  rates=rates)
    world.share = bool(share)  # sparcml.sim.Replicas: ranks may hold one shared replica
    results = [None] * P
    errors: list = [None] * P

    def body(rank: int) -> None:
        comm = SimComm(world, 0, list(range(P)), rank)
        st = world.ranks[rank]
        world.tokens.acquire()
        try:
            with rank_scope(share, model=rates is not None):
                with world.lock:
                    world.leave(st)
                try:
                    out = fn(comm, *args)
                finally:
                    _close_engines(comm)
                with world.lock:
                    world.enter(st)
                    st.clock = max(st.clock, st.send_done)
                results[rank] = ops.intern_result(out) if share else out
            world.returned_from(st)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            errors[rank] = exc
            world.fail(exc)
        finally:
            world.tokens.release()

    threads = [threading.Thread(target=body, args=(r,), name=f"sim-rank-{r}", daemon=True)
               for r in range(P)]
    try:
        with gc_pauses_discounted():
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout)
                if t.is_alive():
                    world.fail(TimeoutError(f"simulation of P={P} exceeded {timeout} s"))
                    raise SimulationError(f"simulation of P={P} did not finish in {timeout} s "
                                          f"(deadlock in the simulated program?)")
    finally:
        if ops is not None:
            ops.clear()
    if isinstance(world.error, SimDeadlock):
        raise SimulationError(str(world.error)) from world.error
    first = next((r for r, e in enumerate(errors)
                  if e is not None and not isinstance(e, SimAborted)), None)
    if first is None:
        first = next((r for r, e in enumerate(errors) if e is not None), None)
    if first is not None:
        exc = errors[first]
        raise SimulationError(f"rank {first} of {P} raised {type(exc).__name__}: {exc}") \
            from exc
    return SimResult(results, [st.clock for st in world.ranks],
                     [st.compute for st in world.ranks],
                     [st.wire_bytes for st in world.ranks],
                     [st.messages for st in world.ranks], net,
                     extra={"compute": compute, "calls": [st.calls for st in world.ranks],
                            **({} if rates is None else {"rates": dict(rates)})})
