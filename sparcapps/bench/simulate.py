"""``sparc-bench --simulate P [P ...] --network SPEC``: the sweep on simulated ranks.

Runs in one process (no mpiexec): for each P, ``sparcml.sim.run`` executes the same cells as
a real sweep -- the same inputs (:func:`make_input`), every algorithm interleaved, ``dense``
first -- on P virtual ranks of the network SPEC. Times are the simulator's virtual clocks
(compute + modeled communication; the slowest rank per repetition); bytes, results
and fill-in are exact. Records carry ``"simulated": true`` and ``"network": SPEC``.

The ``dense`` baseline holds every rank's full vector (P N values, nothing can be shared):
when that exceeds ``--sim-dense-memory`` it is *modeled only* (the simulated call's charges
without data: Rabenseifner's bytes and time, the agreement check, the local additions and sparcml's
Python, times ``--compute-scale``; records say ``"modeled_only": true``), and the speedups refer to the modeled time: the
output says so once, and a ratio of a simulated row to a modeled dense one is marked ``~``
(records: ``"speedup_mixed": true``, ``"dense_modeled_only": true``).
``--model-only ALGORITHM ... --model-only-from P0`` does the same for algorithms too slow to
simulate at P >= P0 (the split algorithms send P^2 messages, each ~0.2 ms of simulator
Python): their time and bytes are what the simulator would charge, replayed without running
(:func:`sparcml.sim.predict`: the same kernel rates, index coding, message sizes and
collective formulas) at the cell's exact input and result sizes (taken from an algorithm that
was simulated); within 1.3x of the simulated time and 8% of its bytes on the
reference grid of ``scripts/model_vs_sim_grid.py`` (BENCHMARKS.md).

Compute is charged by ``--sim-compute`` (:func:`sparcml.sim.run`'s ``compute``): ``model``
(default) calibrated kernel rates times exact work, so two runs agree whatever the machine's
load; ``measured`` the thread CPU time. Records carry ``"compute"``. With ``model`` a call is
deterministic: repetitions would repeat the same figure, so each case runs one untimed first
call (as in a real sweep: it sets up the communicator and the balanced partitions) and **one**
timed call, whatever ``--reps`` and ``--warmup`` say (records: ``"reps": 1``, ``"warmup": 0``,
the requested values and the reason under ``"reps_requested"``, ``"warmup_requested"``,
``"reps_note"``). (The one call can differ from a median of many by a periodic step: the
split algorithms' partition check, one small ``Allgather`` every few calls, a few
percent.) ``measured`` keeps
the repetitions: its figures vary from call to call. ``--progress`` (default:
when stderr is a terminal) prints a line per cell: cell, P, elapsed wall time, estimate
(:mod:`sparcapps.sim_estimate`).

``--bits B`` adds each algorithm's quantized row (QSGD, seeded per rank as in a real sweep) and
``--nonblocking`` times ``iallreduce`` + ``wait`` (sparcml's communication thread runs on the
simulated rank's communicator): the same calls as under ``mpiexec``, the same bytes.

Before the first cell, every algorithm runs once on 2 ranks and a small input (not timed), so
that no cell's first algorithm is charged for loading the compiled kernels.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NamedTuple

import numpy as np
import sparcml.sim as sim

import sparcml
from sparcml import AUTO, DENSE_BASELINE, CostModel, get_algorithm, index_dtype_for
from sparcapps.cli_args import (add_deprecated_alias, add_list_argument, algorithm_name,
                                positive_float, positive_int)
from sparcapps.records import append_record, capture_environment, make_record, summarize
from sparcapps.sim_estimate import estimate

from .cases import cell_cases, row_name
from .inputs import REPLAY, SHARED_FRACTION, make_input
from .runner import BenchCase, case_call, settle_auto
from .text import auto_note
from .text import fmt_bytes as _fmt_bytes

__all__ = ["run_simulated_sweep", "add_arguments"]


def add_arguments(p) -> None:
    """The ``--simulate`` options of ``sparc-bench``'s parser ``p``."""
    add_list_argument(p, "--simulate", item_type=positive_int, metavar="P",
                      help="instead of timing real ranks: run the sweep on P simulated ranks "
                           "(sparcml.sim, one process, no mpiexec) for each P given; records "
                           "carry \"simulated\": true and the network spec")
    p.add_argument("--network", default=None, metavar="SPEC",
                   help="with --simulate: NODESxRATE[,ppn=R][,intra=RATE][,latency=TIME]"
                        "[,intra-latency=TIME], e.g. 128x10gbit,ppn=8,latency=2us; without "
                        "NODESx (e.g. 1gbit), the nodes the largest P needs "
                        "(default: one node per rank on 10 Gbit/s links)")
    add_list_argument(p, "--model-only", item_type=algorithm_name, default=[],
                      metavar="ALGORITHM",
                      help="with --simulate: do not run these algorithms at P >= "
                           "--model-only-from; record the cost model's prediction for the "
                           "simulated network instead (rows '~', \"modeled_only\": true), for "
                           "cells too slow to simulate (the split algorithms send P^2 messages)")
    p.add_argument("--model-only-from", type=positive_int, default=1, metavar="P",
                   help="with --model-only: the smallest P modeled only (default 1: every P)")
    dense_memory = p.add_argument(
        "--sim-dense-memory", dest="sim_memory", type=positive_float, default=8.0, metavar="GIB",
        help="with --simulate: run the dense baseline only while P x N values fit in this many "
             "GiB (three copies counted); beyond, it is modeled (a P whose estimate exceeds "
             "this machine's memory is refused whatever this says)")
    # its name until issue 36: the training apps' --sim-memory is the limit that refuses a P
    add_deprecated_alias(p, "--sim-memory", dense_memory)
    p.add_argument("--compute-scale", type=positive_float, default=1.0, metavar="FACTOR",
                   help="with --simulate: multiply the compute charged here by FACTOR (the "
                        "target's cores are FACTOR times slower; or ranks share cores): every "
                        "compute term, the dense baseline's local additions included, simulated "
                        "or modeled")
    p.add_argument("--sim-compute", choices=("model", "measured"), default="model",
                   help="with --simulate: how a simulated rank's compute is charged: 'model' "
                        "(default) calibrated kernel rates x exact work, the same on a quiet "
                        "or a loaded machine (rates cached in ~/.cache/sparcml/), so one timed "
                        "call per case whatever --reps/--warmup say (repetitions would repeat "
                        "the same figure; records say reps 1); 'measured' the thread CPU time "
                        "it takes here (follows the machine's load; --reps repetitions)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="with --simulate: a line per cell on stderr (cell, P, elapsed, "
                        "estimate); default: on when stderr is a terminal")
    p.add_argument("--probe-network", action="store_true",
                   help="instead of the sweep: measure this job's network (latency and rate "
                        "between two nodes, and within a node) and print it as a --network "
                        "SPEC for --simulate; run it on 2 nodes, e.g. sparc-mpiexec -n 4 "
                        "--ranks-per-node 2 sparc-bench --probe-network")


def _cell(comm, cases, reps, warmup, seed, model):
    """Time ``cases`` (:class:`~.runner.BenchCase` of one input) on the simulated ``comm``."""
    first = cases[0]
    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(first.N, first.density, first.pattern, rank, size,
                     dtype=np.dtype(first.dtype), seed=seed, replay=first.replay)
    if model is not None:
        sim.use_model(comm, model)
    # the real sweep's order (sparcapps.bench.runner.run_cell) and its calls (case_call: the
    # same keywords, options included): one untimed first call per case, then the
    # repetitions interleaved case by case, so state kept between calls (the balanced
    # partitions' estimate) evolves the same way and bytes match a real run's
    calls = [case_call(case, vec, comm, None if case.bits is None
                       else sparcml.QSGD(bits=case.bits, seed=[seed, rank]))
             for case in cases]
    for call in calls:
        call(sparcml.TrafficStats())
    settle_auto([lambda call=call: call(sparcml.TrafficStats())
                 for case, call in zip(cases, calls)
                 if case.topk is None and case.algorithm == sparcml.AUTO])
    stats = [sparcml.TrafficStats() for _ in cases]
    elapsed = [[] for _ in cases]
    results = [None] * len(cases)
    for rep in range(warmup + reps):
        for i, call in enumerate(calls):
            stats[i].reset()
            results[i] = None
            comm.Barrier()
            t0 = comm.clock()
            results[i] = call(stats[i])
            t1 = comm.clock()
            if rep >= warmup:
                elapsed[i].append(t1 - t0)
    out = []
    for i in range(len(cases)):
        result, st = results[i], stats[i]
        nnz = result.count_nonzero() if result.is_dense else result.nnz
        out.append({"elapsed": elapsed[i], "bytes": st.bytes_sent, "messages": st.messages,
                    "dense_messages": st.dense_messages, "ran": st.algorithm,
                    "hierarchical": st.hierarchical, "nnz": int(nnz),
                    "dense": bool(result.is_dense), "k": int(vec.nnz)})
        results[i] = None
    return out


def _cells(comm, cells, reps, warmup, seed, model, progress=None):
    """:func:`_cell` for each list of cases, in order; ``progress(i)`` on rank 0 after cell i
    (rank 0 is done with it: the others are at most in its last collective)."""
    out = []
    for i, cases in enumerate(cells):
        out.append(_cell(comm, cases, reps, warmup, seed, model))
        if progress is not None and comm.Get_rank() == 0:
            progress(i)
    return out


def _progress_printer(P, labels, estimates, stream=None):
    """``progress(i)``: one line on ``stream`` (stderr) per finished cell: which cell of how
    many, P, the wall time since the simulation of P started and the estimate for it."""
    stream = sys.stderr if stream is None else stream
    start = time.monotonic()
    total = sum(estimates)

    def progress(i):
        elapsed = time.monotonic() - start
        print(f"sparc-bench --simulate: P = {P}: cell {i + 1}/{len(labels)} ({labels[i]}) done, "
              f"{_clock(elapsed)} elapsed, estimate {_clock(sum(estimates[:i + 1]))} of "
              f"{_clock(total)}", file=stream, flush=True)

    return progress


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}" if s < 3600 else f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _progress_on(args) -> bool:
    if args.progress is not None:
        return bool(args.progress)
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _dense_fits(P, dim, itemsize, budget) -> bool:
    return P * dim * itemsize * 3 <= budget


def _modeled_dense(P, dim, dtype, net, *, compute="model", compute_scale=1.0):
    """The dense row's modeled seconds and bytes, charged as a simulated dense call would be
    (``compute``, times ``compute_scale``): with modeled compute the whole call
    (:func:`sparcml.sim.predict`: the agreement check, sparcml's Python per call,
    the ``Allreduce`` and its local additions), else the ``Allreduce`` alone
    (:func:`sparcml.sim.dense_allreduce_model`, its additions at the measured rate)."""
    if compute == "model":
        p = sim.predict(DENSE_BASELINE, P=P, N=dim, k=dim, K=dim, network=net,
                        compute_scale=compute_scale, s_val=np.dtype(dtype).itemsize)
        return p.seconds, p.bytes
    return sim.dense_allreduce_model(net, P, dim * np.dtype(dtype).itemsize, compute=compute,
                                     compute_scale=compute_scale)


def _model_bytes(algorithm, P, dim, k, K, s_idx, s_val, coded=True) -> int:
    """(What ``--model-only`` rows recorded before issue 33, kept for
    ``scripts/scaling_tables.py``'s older records; now :func:`sparcml.sim.predict`.)
    Bytes sent per rank by the cost model's volumes: for the split algorithms phase 1 (a
    1/P block of the input to each other rank) and the allgather (all blocks but one's own);
    for ``allgather``, every other rank's input (what its allgather counts); for recursive
    doubling the expected union so far in each of its rounds (powers of two). ``coded``:
    the indices in their code (else raw)."""
    index_bytes, stream_bytes = CostModel.index_bytes, CostModel.stream_bytes
    union_size = CostModel.union_size
    if get_algorithm(algorithm).baseline:  # allgather of the inputs
        return int((P - 1) * stream_bytes(k, dim, s_idx, s_val, coded))
    if "split" not in algorithm:  # recursive doubling: the union so far, once per round
        q = CostModel.overlap_from_result(k, K, P, dim)
        rounds = max(1, (P - 1).bit_length()) if P > 1 else 0
        return int(sum(stream_bytes(union_size(k, 1 << r, dim, q), dim, s_idx, s_val, coded)
                       for r in range(rounds)))
    phase1 = (P - 1) / P * stream_bytes(k, dim, s_idx, s_val, coded)
    if get_algorithm(algorithm).writes_out:  # dsar: dense blocks
        gathered = dim * s_val
    else:
        block_K = K / P if K is not None else union_size(k / P, P, dim / P)
        dense = block_K * (s_idx + s_val) >= dim / P * s_val
        gathered = dim * s_val if dense else K * (index_bytes(block_K, dim / P, s_idx, coded)
                                                  + s_val)
    return int(phase1 + (P - 1) / P * gathered)


def _link_costs(net, P, model, index_coding):
    """``(coded, link_costs)`` of a simulated call's index coding
    (:func:`sparcml.sim.index_coding_link_costs`)."""
    return sim.index_coding_link_costs(net, P, index_coding, model=model)


def _modeled_row(algorithm, P, dim, dtype, net, some, rows, *, index_coding="auto",
                 model=None, compute_scale=1.0):
    """A modeled-only row from a simulated row ``some`` of the cell (its input and result
    sizes): :func:`sparcml.sim.predict`, the simulator's own charges replayed without
    running (the calibrated kernel rates, the call's index coding, the collectives' and the
    links' formulas), times ``compute_scale`` for the compute. Bytes: the exact encoding of
    the expected message sizes (``"estimated": true`` in the bytes; equal to a simulation's within
    8%, BENCHMARKS "Model-only against the simulation").

    ``auto``: what its measured refinement would keep, with the rows standing in for its
    measurements: the contenders of the run's cost model ``model``
    (:meth:`sparcml.CostModel.contenders`, with the overlap the result teaches; every
    candidate without a model), and of those the one whose row in ``rows`` (modeled too when
    absent) is fastest; that row's time and bytes."""
    s_idx, s_val = index_dtype_for(dim).itemsize, np.dtype(dtype).itemsize
    k, K = some["bytes"]["input_nnz_max"], some["result"]["nnz"]
    if algorithm == AUTO:
        contenders = [a for a in sparcml.ALGORITHMS if sparcml.get_algorithm(a).in_auto]
        if model is not None:
            q = model.overlap_from_result(k, K, P, dim)
            contenders = model.contenders(P=P, N=dim, k=k, q=q, s_idx=s_idx, s_val=s_val)
        candidates = {a: rows.get(a) or _modeled_row(a, P, dim, dtype, net, some, rows,
                                                     index_coding=index_coding, model=model,
                                                     compute_scale=compute_scale)
                      for a in contenders}
        choice = min(contenders,
                     key=lambda a: candidates[a]["timings"]["allreduce"]["median"])
        return {**candidates[choice], "ran": choice, "modeled_only": True}
    coded, link_costs = _link_costs(net, P, model, index_coding)
    p = sim.predict(algorithm, P=P, N=dim, k=k, K=K, network=net,
                    compute_scale=compute_scale, s_idx=s_idx, s_val=s_val, coded=coded,
                    link_costs=link_costs)
    return {"timings": {"allreduce": summarize([p.seconds])},
            "bytes": {"sent_per_rank_max": p.bytes, "sent_per_rank_mean": float(p.bytes),
                      "estimated": True},
            "result": dict(some["result"]), "ran": algorithm, "modeled_only": True}


def _estimated_sizes(P, dim, density, pattern) -> dict:
    """Input and result sizes of a cell no algorithm was simulated in (every sparse one
    ``--model-only``): k as :func:`.inputs.make_input` draws it, K the model's expected union
    (:meth:`sparcml.CostModel.union_size`) of independent supports (``random``) or of 90%
    shared ones (``overlap``); other patterns need one simulated algorithm."""
    share = {"random": 1.0, "overlap": 1.0 - SHARED_FRACTION}.get(pattern)
    if share is None:
        raise SystemExit(f"sparc-bench: --model-only of every sparse algorithm needs pattern "
                         f"random or overlap (the {pattern} cell's sizes are not modeled); "
                         f"simulate one algorithm")
    k = int(round(density * dim))
    K = int(round(CostModel.union_size(k, P, dim, share)))
    return {"bytes": {"input_nnz_max": k},
            "result": {"nnz": K, "dense": K * 8 >= dim * 4, "density": K / dim if dim else 0.0,
                       "estimated": True}}


def _warm_up(algorithms, dtype, compute="model") -> None:
    """Every algorithm once on 2 ranks and a small input (loads the compiled kernels)."""
    cases = [BenchCase(1 << 16, 0.01, "random", a, dtype) for a in algorithms]
    sim.run(2, _cell, network="2x10gbit", args=(cases, 1, 0, 0, None), compute=compute)


MODELED_REPS_NOTE = ("--sim-compute model: a simulated call is deterministic, so repetitions would "
                     "repeat the same figure; one timed call per case (after the untimed first "
                     "call a real sweep makes too)")


def simulated_reps(compute: str, reps: int, warmup: int) -> tuple[int, int]:
    """The repetitions and warm-ups a simulated sweep runs: ``(1, 0)`` with modeled compute
    (:data:`MODELED_REPS_NOTE`), else the requested ones."""
    return (1, 0) if compute == "model" else (reps, warmup)


def run_simulated_sweep(args, cells, reps, warmup, algorithms, *, config) -> int:
    """The sweep of ``cells`` (:func:`.inputs.bench_cells`) for each P of ``args.simulate``:
    the real sweep's cases (:func:`.cases.cell_cases`: the same index coding, partition,
    node-aware and top-k rows, each call with the same keywords). ``reps`` and ``warmup``
    as asked; with modeled compute one timed call (:func:`simulated_reps`)."""
    net = sim.parse_network(args.network)
    environment = capture_environment()
    asked = {"reps_requested": reps, "warmup_requested": warmup}
    reps, warmup = simulated_reps(args.sim_compute, reps, warmup)
    reps_note = MODELED_REPS_NOTE if args.sim_compute == "model" else None
    _print_header(args, net, algorithms, reps_note)
    _warm_up([a for a in algorithms if a != AUTO], args.dtype, args.sim_compute)
    sweep = _SimulatedSweep(
        args, net, cells, reps, warmup, environment,
        config={**vars(args), **config, "reps": reps, "warmup": warmup, **asked,
                "reps_note": reps_note, "algorithms": algorithms},
        algorithms=algorithms)
    for P in args.simulate:
        sweep.run(P)
    return 0


def _print_header(args, net, algorithms, reps_note) -> None:
    """What the simulated sweep times, and the table's column names."""
    what = ("compute modeled from calibrated kernel rates" if args.sim_compute == "model"
            else "compute measured here")
    timed = ("one timed call per case (modeled compute is deterministic: repetitions would "
             "repeat the same figure)" if reps_note else "median over reps")
    if args.nonblocking:
        timed += " of iallreduce + wait"
    if args.bits:
        timed += (f"; +q{args.bits}: QSGD {args.bits}-bit"
                  + (" (sparse values too)" if args.quantize_sparse else ""))
    print(f"sparc-bench --simulate: network {net.text}; time = {timed} of the "
          f"slowest rank's virtual time ({what} + modeled communication; --sim-compute); bytes "
          f"and results exact; '~' = modeled only (no data){auto_note(algorithms)}")
    print(f"{'P':>5} {'N':>10} {'density':>8} {'pattern':>8} {'algorithm':>22} "
          f"{'median ms':>10} {'sent/rank':>10} {'result density':>14} {'vs dense (x)':>12}")


class _CellPlan(NamedTuple):
    """One cell at one P: its cases, and those simulated (the others are modeled)."""
    dim: int
    density: float
    pattern: str
    label: str
    dense_fits: bool
    cases: list
    run_cases: list
    replay: str | None


class _SimulatedSweep:
    """The sweep's steps at each P: plan the cells, simulate them in one run, complete the
    rows the simulation did not run (modeled), print and record every row."""
    def __init__(self, args, net, cells, reps, warmup, environment, *, config, algorithms):
        self.args, self.net, self.cells, self.reps, self.warmup = args, net, cells, reps, warmup
        self.environment, self.config, self.algorithms = environment, config, algorithms
        self.itemsize = np.dtype(args.dtype).itemsize
        self.show_progress = _progress_on(args)
        self.said_mixed = False  # the note on a modeled dense row is printed once

    def run(self, P: int) -> None:
        args, net = self.args, self.net
        if P > net.nodes * net.ppn:
            raise SystemExit(f"sparc-bench: --network {net.text} has {net.nodes * net.ppn} "
                             f"ranks, fewer than --simulate {P}")
        model = None if args.no_model else sim.network_cost_model(net, P)
        modeled = set(args.model_only) if P >= args.model_only_from else set()
        modeled.discard(DENSE_BASELINE)
        plan = [self._plan_cell(P, cell, modeled) for cell in self.cells]
        # one simulation per P, the cells in the real sweep's order: sparcml keeps state on a
        # communicator from cell to cell (the balanced partitions' estimate), as a real job does
        todo = [cell.run_cases for cell in plan if cell.run_cases]
        progress = self._progress(P, plan) if self.show_progress and todo else None
        all_results = sim.run(P, _cells, network=net, compute_scale=args.compute_scale,
                              args=(todo, self.reps, self.warmup, args.seed, model, progress),
                              compute=args.sim_compute).results if todo else []
        position = 0
        for cell in plan:
            cell_results = []
            if cell.run_cases:
                cell_results = [r[position] for r in all_results]
                position += 1
            rows = self._rows(P, cell, cell_results, model, modeled)
            self._emit(P, cell, rows)

    def _plan_cell(self, P, cell, modeled) -> _CellPlan:
        args = self.args
        dim, density, pattern, label = cell
        replay = args.replay if pattern == REPLAY else None
        dense_fits = _dense_fits(P, dim, self.itemsize, args.sim_memory * 2**30)
        cases = cell_cases(args, self.algorithms, dim, density, pattern, replay)
        run_cases = [c for c in cases if (c.algorithm != DENSE_BASELINE or dense_fits)
                     and c.algorithm not in modeled]
        return _CellPlan(dim, density, pattern, label, dense_fits, cases, run_cases, replay)

    def _progress(self, P, plan):
        """``--progress``: the printer of a line per simulated cell, after the P's estimate."""
        labels, estimates = [], []
        for cell in plan:
            if cell.run_cases:
                labels.append(f"N = {cell.dim}, density {cell.density:g}, {cell.label}")
                estimates.append((self.reps + self.warmup + 1) * estimate(
                    P, [cell.dim], [cell.density], [c.algorithm for c in cell.run_cases],
                    itemsize=self.itemsize).seconds)
        progress = _progress_printer(P, labels, estimates)
        print(f"sparc-bench --simulate: P = {P}: {len(labels)} cell(s), estimate "
              f"{_clock(sum(estimates))}", file=sys.stderr, flush=True)
        return progress

    def _rows(self, P, cell, cell_results, model, modeled) -> dict:
        """Every case's row of ``cell`` (by case): the simulated ones from ``cell_results``,
        the dense baseline modeled when it does not fit, the ``--model-only`` ones modeled."""
        args = self.args
        rows = {case: _simulated_row([r[i] for r in cell_results], cell.dim)
                for i, case in enumerate(cell.run_cases)}
        # the plain row of each algorithm (default coding and partitions, flat): the
        # dense reference and the modeled rows' inputs
        plain = {c.algorithm: rows[c] for c in cell.run_cases if _plain(c)}
        if not cell.dense_fits:
            plain[DENSE_BASELINE] = rows[cell.cases[0]] = self._modeled_dense_row(
                P, cell.dim, next(iter(plain.values()), None))
        simulated = next((r for a, r in plain.items() if a != DENSE_BASELINE), None)
        if simulated is None and modeled:
            simulated = _estimated_sizes(P, cell.dim, cell.density, cell.pattern)
        for case in sorted((c for c in cell.cases if c.algorithm in modeled and _flat(c)),
                           key=lambda c: c.algorithm == AUTO):
            rows[case] = _modeled_row(case.algorithm, P, cell.dim, args.dtype, self.net,
                                      simulated, plain, index_coding=case.index_coding,
                                      model=model, compute_scale=args.compute_scale)
            if _plain(case):
                plain[case.algorithm] = rows[case]
        return rows

    def _modeled_dense_row(self, P, dim, some) -> dict:
        """The dense baseline's row where P x N values exceed ``--sim-dense-memory``: modeled, its
        result sizes those of a simulated row ``some`` of the cell (None: unknown)."""
        args = self.args
        t, nbytes = _modeled_dense(P, dim, args.dtype, self.net, compute=args.sim_compute,
                                   compute_scale=args.compute_scale)
        return {"timings": {"allreduce": summarize([t])},
                "bytes": {"sent_per_rank_max": nbytes, "sent_per_rank_mean": float(nbytes)},
                "result": {"nnz": None if some is None else some["result"]["nnz"],
                           "dense": True,
                           "density": None if some is None else some["result"]["density"]},
                "ran": DENSE_BASELINE, "hierarchical": False, "modeled_only": True}

    def _emit(self, P, cell, rows) -> None:
        """Print (and with ``--output`` record) every row of ``cell``, ``vs dense`` against
        its dense row (a ratio of a simulated row to a modeled one marked ``~``)."""
        dense = rows[cell.cases[0]]
        dense_median = dense["timings"]["allreduce"]["median"]
        dense_modeled = bool(dense["modeled_only"])
        if dense_modeled and not self.said_mixed and any(
                not rows[c]["modeled_only"] for c in cell.cases if c in rows):
            self.said_mixed = True
            print(f"note: dense at P = {P}, N = {cell.dim} is modeled only ('~': P x N values "
                  f"exceed --sim-dense-memory {self.args.sim_memory:g} GiB), the sparse rows "
                  f"simulated; their 'vs dense' compares a simulation with the model and "
                  f"is marked '~'", flush=True)
        for case in cell.cases:
            row = rows.get(case)
            if row is None:  # a node-aware or top-k row of an algorithm modeled only
                continue
            t = row["timings"]["allreduce"]
            speedup = dense_median / t["median"] if t["median"] > 0 else float("nan")
            name = row_name(case, row["ran"], row.get("hierarchical", False))
            mark = "~" if row["modeled_only"] else " "
            # a ratio of a simulated row to a modeled one (or the reverse) is marked
            mixed = case is not cell.cases[0] and dense_modeled != bool(row["modeled_only"])
            rd = row["result"]["density"]
            print(f"{P:>5} {cell.dim:>10} {cell.density:>8.2g} {cell.label:>8} {name:>22} "
                  f"{mark}{t['median'] * 1e3:>9.3f} "
                  f"{_fmt_bytes(row['bytes']['sent_per_rank_max']):>10} "
                  f"{'-' if rd is None else f'{rd:.3f}':>14} "
                  f"{('~' if mixed else '') + f'{speedup:.2f}x':>12}",
                  flush=True)
            if self.args.output:
                append_record(self.args.output, self._record(
                    P, cell, case, row, speedup=speedup, dense_modeled=dense_modeled,
                    mixed=mixed))

    def _record(self, P, cell, case, row, *, speedup, dense_modeled, mixed) -> dict:
        args, net = self.args, self.net
        rec = make_record(
            "sparc-bench", config=self.config,
            environment=self.environment, algorithm=case.algorithm, P=P, N=cell.dim,
            density=cell.density, timings=row["timings"], bytes=row["bytes"],
            metrics={"speedup_over_dense": speedup, "pattern": cell.label,
                     "replay": cell.replay,
                     "dtype": args.dtype, "ran": row["ran"],
                     "hierarchical": bool(row.get("hierarchical", False)),
                     "index_coding": case.index_coding,
                     "partitions": case.partitions, "topk": case.topk,
                     "bits": case.bits,
                     "quantize_sparse": case.quantize_sparse,
                     "nonblocking": args.nonblocking,
                     "result_density": row["result"]["density"],
                     "result_dense": row["result"]["dense"],
                     "modeled_only": row["modeled_only"],
                     "dense_modeled_only": dense_modeled,
                     "speedup_mixed": mixed,
                     "network_model": net.to_dict()})
        rec["simulated"] = True
        rec["compute"] = args.sim_compute
        if args.sim_compute == "model":  # the calibration the modeled seconds rest on
            rec["sim_rates"] = sim.rates_in_use()
        rec["network"] = net.text
        rec["nodes"] = -(-P // net.ppn)
        rec["ranks_per_node"] = min(P, net.ppn)
        return rec


def _flat(case) -> bool:
    return not case.hierarchical and case.topk is None


def _plain(case) -> bool:
    return _flat(case) and case.index_coding == "auto" and case.partitions == "balanced"


def _simulated_row(per_rank, dim) -> dict:
    """A row from each rank's :func:`_cell` entry of one case."""
    times = np.max([p["elapsed"] for p in per_rank], axis=0)
    sent = [p["bytes"] for p in per_rank]
    return {"timings": {"allreduce": summarize(times)},
            "bytes": {"sent_per_rank_max": int(max(sent)),
                      "sent_per_rank_mean": float(np.mean(sent)),
                      "input_nnz_max": max(p["k"] for p in per_rank),
                      "messages": per_rank[0]["messages"],
                      "dense_messages": per_rank[0]["dense_messages"]},
            "result": {"nnz": per_rank[0]["nnz"], "dense": per_rank[0]["dense"],
                       "density": per_rank[0]["nnz"] / dim if dim else 0.0},
            "ran": per_rank[0]["ran"], "hierarchical": any(p["hierarchical"] for p in per_rank),
            "modeled_only": False}

