"""Training apps on simulated ranks: ``--simulate P [P ...] --network SPEC`` of every app.

The app's unchanged training runs on P ranks of :func:`sparcml.sim.run` (threads in one
process, no mpiexec): each rank reads its real shard and sums its real gradients with sparcml's
real reductions, so weights, losses and accuracies are those of a real ``mpiexec -n P`` run
with the same seeds. Times are modeled: each rank's virtual clock is charged its step's local
compute (calibrated rates on this machine times the step's exact work, or ``--step-seconds``
given per step for the target hardware) times ``--compute-scale``, and the network model of
``--network`` for its messages (see :mod:`sparcml.sim`). The ranks keep one copy of the model
(:class:`sparcml.sim.Replicas`). Records carry ``"simulated": true``, the network spec and
the compute mode; printed and recorded seconds are virtual.

What differs from a real run, by design: no signals are handled (a simulation is not a Slurm
job), rank 0 alone prints, and a bad option or data problem is reported once.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from mpi4py import MPI

import sparcml.sim as sim
from sparcml import InvalidArgumentError
from sparcapps.cli_args import add_list_argument, positive_float, positive_int

__all__ = ["add_simulate_arguments", "check_simulate_arguments", "run_simulated",
           "normalize_network", "SimPlan", "mark_simulated"]


def add_simulate_arguments(p: argparse.ArgumentParser, *, step_unit: str = "step") -> None:
    """The simulation options of an app's parser ``p`` (group "simulated ranks")."""
    g = p.add_argument_group("simulated ranks (no mpiexec: predict a cluster)")
    add_list_argument(g, "--simulate", item_type=positive_int, metavar="P",
                      help="run the training on P simulated ranks in this process "
                           "(sparcml.sim) for each P given: exact weights, losses, accuracies "
                           "and bytes, modeled times; records carry \"simulated\": true")
    g.add_argument("--network", default=None, metavar="SPEC",
                   help="with --simulate: NODESxRATE[,ppn=R][,intra=RATE][,latency=TIME]"
                        "[,intra-latency=TIME], e.g. 64x10gbit,latency=2us; without NODESx "
                        "(e.g. 100gbit), the nodes the largest P needs (default: one node "
                        "per rank on 10 Gbit/s links)")
    g.add_argument("--compute-scale", type=positive_float, default=1.0, metavar="FACTOR",
                   help="with --simulate: multiply every compute figure charged by FACTOR "
                        "(the target's cores are FACTOR times slower than this machine's)")
    g.add_argument("--step-seconds", type=positive_float, default=None, metavar="SECONDS",
                   help=f"with --simulate: charge each {step_unit} this many seconds of local "
                        "compute (your hardware's measured figure, e.g. a GPU's) instead of "
                        "this machine's calibrated rates; sparcml's own work is still charged")
    g.add_argument("--sim-memory", type=positive_float, default=None, metavar="GIB",
                   help="with --simulate: refuse a P whose estimate exceeds this many GiB "
                        "(default: 80%% of this machine's memory)")
    g.add_argument("--sim-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="with --simulate: give up a P after this much real time (default: no "
                        "limit)")


def normalize_network(parser, spec: str, P: int) -> str:
    """``--network`` checked now: a spec without its node count gets as many nodes as ``P``
    needs (one rank per node, or ``ppn=R``); a bad spec is a usage error (exit 2)."""
    spec = spec.strip()
    if spec and not re.match(r"^[1-9][0-9]*x", spec, re.IGNORECASE):
        ppn = re.search(r",\s*ppn\s*=\s*([1-9][0-9]*)\s*(?:,|$)", spec)
        spec = f"{-(-P // int(ppn.group(1) if ppn else 1))}x{spec}"
    try:
        net = sim.parse_network(spec)
    except InvalidArgumentError as exc:
        parser.error(f"--network: {exc}")
    if P > net.nodes * net.ppn:
        parser.error(f"--network {net.text} has {net.nodes} nodes x {net.ppn} ranks = "
                     f"{net.nodes * net.ppn} ranks, fewer than --simulate {P}; give more "
                     f"nodes (or leave the node count out: one rank per node)")
    return spec


def check_simulate_arguments(parser, args) -> None:
    """Usage errors of the simulation options (exit 2, before any work): the options that
    need ``--simulate``, the network spec, and a launch under mpiexec."""
    if not args.simulate:
        for flag, value, default in (("--network", args.network, None),
                                     ("--compute-scale", args.compute_scale, 1.0),
                                     ("--step-seconds", args.step_seconds, None),
                                     ("--sim-memory", args.sim_memory, None),
                                     ("--sim-timeout", args.sim_timeout, None)):
            if value != default:
                parser.error(f"{flag} needs --simulate P [P ...]")
        return

    if MPI.COMM_WORLD.Get_size() > 1:
        parser.error("--simulate runs every rank in this one process; start it without "
                     "mpiexec")
    args.network = normalize_network(parser, args.network or "10gbit", max(args.simulate))


def mark_simulated(record: dict, comm, args) -> None:
    """Say in ``record`` that its run was simulated, on which network (its nodes and ranks
    per node), how compute was charged (``"given"``: ``--step-seconds``, ``"model"``:
    calibrated rates, then listed with when they were measured in ``record["sim_rates"]``),
    and that its seconds are virtual."""
    net, P = comm.network, int(comm.Get_size())
    record["simulated"] = True
    record["network"] = net.text
    record["nodes"] = net.node_of(P - 1) + 1
    record["ranks_per_node"] = P // record["nodes"] if P % record["nodes"] == 0 else None
    record["compute"] = "given" if args.step_seconds is not None else "model"
    if record["compute"] == "model":  # the calibration the modeled seconds rest on
        record["sim_rates"] = sim.rates_in_use()
    record["config"]["simulate"] = P
    record["metrics"]["time_kind"] = "modeled"


class SimPlan:
    """What one P of a simulation is expected to take: ``bytes`` (peak memory) and
    ``seconds`` (real time), and the lines that say so."""

    def __init__(self, P: int, nbytes: int, seconds: float, what: str = ""):
        self.P = P
        self.bytes = int(nbytes)
        self.seconds = float(seconds)
        self.what = what

    def line(self) -> str:
        s = self.seconds
        t = f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else
                                           f"{s / 3600:.3g} h")
        return (f"P = {self.P}: about {self.bytes / 2**30:.3g} GiB and {t} of real time"
                + (f" ({self.what})" if self.what else ""))


def _memory_limit(args) -> float:
    if args.sim_memory is not None:
        return args.sim_memory * 2**30

    try:
        return 0.8 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return float("inf")


def run_simulated(prog: str, args, body, estimate) -> int:
    """Run ``body(comm)`` (an app's whole run on one rank, returning its exit status) on P
    simulated ranks for each P of ``args.simulate``, in increasing order. ``estimate(P)`` ->
    :class:`SimPlan`, printed before each P; a P over the memory limit is refused (exit 2)
    before any P runs. Returns the worst exit status."""
    Ps = sorted(set(args.simulate))
    limit = _memory_limit(args)
    plans = [estimate(P) for P in Ps]
    for plan in plans:
        if plan.bytes > limit:
            print(f"{prog}: error: --simulate {plan.P} needs {plan.line()[len(f'P = {plan.P}: '):]}"
                  f" (estimate), over the {limit / 2**30:.3g} GiB allowed (--sim-memory); "
                  f"simulate fewer ranks or a smaller data set", file=sys.stderr, flush=True)
            return 2
    status = 0
    for P, plan in zip(Ps, plans):
        print(f"{prog} --simulate: {plan.line()} (estimate)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            result = sim.run(P, body, network=args.network, compute_scale=args.compute_scale,
                             timeout=args.sim_timeout)
        except sim.SimulationError as exc:
            print(f"{prog}: error: the simulation of P = {P} failed: {exc}", file=sys.stderr,
                  flush=True)
            return 1
        codes = [int(r or 0) for r in result.results]
        print(f"{prog} --simulate: P = {P} took {time.perf_counter() - t0:.1f} s of real "
              f"time; modeled {result.time:.4g} s on {result.network.text}", file=sys.stderr,
              flush=True)
        status = max(status, max(codes))
        if status:
            return status
    return status
