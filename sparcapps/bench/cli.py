"""``sparc-bench``: time every sparse allreduce algorithm against ``dense``, side by side.

Launch with ``mpiexec -n P sparc-bench ...``. The algorithms of one input are timed
interleaved, repetition by repetition. Prints, on rank 0, one row per (N, density,
pattern, algorithm): median and spread (q25-q75) of the slowest rank's time, bytes sent per
rank, the result's density and the speedup over ``dense`` measured in the same run; appends one
JSON record per row to ``--output``. (The merge-add kernel benchmark, ``--kernels`` before, is
the developer's tool ``python scripts/kernel_bench.py``: it times sparcml's private kernels.)
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

import sparcml
import sparcml.sim as sim
from sparcml import DENSE_BASELINE, TOPK_ALLREDUCE
from sparcapps.cli_args import (add_bits_argument, add_list_argument,
                                add_records_output_argument, algorithm_help, algorithm_name,
                                density_help, deprecation_note, fraction, make_parser,
                                nonnegative_float, nonnegative_int, positive_int,
                                registered_algorithms)
from sparcapps.records import append_record, capture_environment, make_record
from sparcapps.sim_estimate import estimate
from sparcapps.simapp import normalize_network

from .cases import cell_cases, row_name
from .inputs import PATTERNS, REPLAY, bench_cells
from .latency import run_latency
from .overlap import bench_overlap
from .runner import run_cell, time_local_selection
from .simulate import add_arguments as add_simulate_arguments
from .simulate import run_simulated_sweep
from .text import auto_note
from .text import fmt_bytes as _fmt_bytes


PRESETS = {
    # the main job: a quick sweep that shows the switch from sparse to dense
    "small": {"N": [1 << 20], "density": [1e-3, 1e-2, 0.1, 0.5], "pattern": ["random"],
              "reps": 5, "warmup": 1},
    # the acceptance sweep of BENCHMARKS.md (called "default" before, but never the default)
    "acceptance": {"N": [16 * 2**20], "density": [1e-3, 1e-2], "pattern": ["random"],
                "reps": 10, "warmup": 2},
}


def _preset_name(text: str) -> str:
    """argparse type of ``--preset``: the old name ``default`` reads as ``acceptance``, with a
    deprecation note."""
    if text == "default":
        deprecation_note("sparc-bench", "--preset default is now --preset acceptance")
        return "acceptance"
    return text


def build_parser() -> argparse.ArgumentParser:
    def preset(key):
        return "default from --preset: " + "; ".join(
            f"{name} {' '.join(map(str, v[key])) if isinstance(v[key], list) else v[key]}"
            for name, v in sorted(PRESETS.items(), key=lambda kv: kv[0] != "small"))

    p = make_parser("sparc-bench", __doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--preset", type=_preset_name, choices=sorted(PRESETS), default="small",
                   help="starting values for N, density, pattern, reps and warmup; "
                        "the flags below override them")
    add_list_argument(p, "--N", item_type=positive_int, metavar="N",
                      help=f"vector dimensions ({preset('N')})")
    add_list_argument(p, "--density", item_type=fraction, metavar="D",
                      help=density_help(f"the random inputs' ({preset('density')})"))
    add_list_argument(p, "--pattern", choices=PATTERNS, metavar="PATTERN",
                      help=f"overlap of the ranks' supports: {', '.join(PATTERNS)} "
                           f"({preset('pattern')})")
    p.add_argument("--replay", metavar="FILE",
                   help="with --pattern replay: the recorded vectors to replay, rank r taking "
                        "vector r mod count (sparc-record-gradients makes "
                        "them); the cell's N and density are the file's")
    add_list_argument(p, "--algorithms", item_type=algorithm_name,
                      default=list(registered_algorithms()), metavar="ALGORITHM",
                      help=algorithm_help(f"{DENSE_BASELINE} is always timed as the reference "
                                          f"(default: all). Choices:"))
    add_bits_argument(p, what="dense messages, timed as rows '+qB' beside each algorithm's "
                              "full-precision row,")
    p.add_argument("--quantize-sparse", action="store_true",
                   help="with --bits, quantize the values of sparse messages too")
    p.add_argument("--topk", type=nonnegative_int, metavar="K",
                   help="also time sparcml.topk_allreduce keeping K entries of the sum (row "
                        "'topk_allreduce'), and the local top-k selection every row's input "
                        "stands for (a dense vector of N values down to the input's nnz)")
    p.add_argument("--hierarchical", action="store_true",
                   help="also time each algorithm node-aware (rows '+h': reduce in the node, "
                        "the algorithm among one leader per node, broadcast in the node) beside "
                        "its flat row, and print the flat / node-aware time ratio")
    p.add_argument("--nonblocking", action="store_true",
                   help="time iallreduce + wait instead of the blocking call")
    p.add_argument("--reuse-output", action="store_true",
                   help="pass the same out= buffer to every call, as iterative training does "
                        "(default: a newly allocated result each call)")
    p.add_argument("--no-model", action="store_true",
                   help="skip calibrating the cost model (no predicted / lower-bound columns)")
    add_list_argument(p, "--index-coding", choices=["auto", "coded", "raw"], default=None,
                      metavar="CODING",
                      help="indices on the wire: auto (a code where the link time it saves "
                           "exceeds its CPU time), coded (the smallest code, suffix +coded) "
                           "and/or raw (indices as they are: what the code saves, suffix +raw); "
                           "each sparse algorithm once per value, side by side (default: "
                           "$SPARCML_INDEX_CODING if set, else auto; the flag wins)")
    add_list_argument(p, "--partitions", choices=["balanced", "equal"], default=None,
                      metavar="POLICY",
                      help="blocks of the split algorithms: balanced and/or equal (blocks of "
                           "N / P coordinates: what balancing saves, suffix +eq) (default: "
                           "$SPARCML_PARTITIONS if set, else balanced; the flag wins)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="value type of the vectors")
    p.add_argument("--reps", type=positive_int,
                   help=f"timed repetitions per case ({preset('reps')}; --overlap: 7; "
                        f"--simulate with modeled compute: 1, see --sim-compute)")
    p.add_argument("--warmup", type=nonnegative_int,
                   help=f"untimed repetitions per case ({preset('warmup')})")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and of QSGD")
    add_records_output_argument(p, per="row")
    _add_mode_arguments(p)
    add_simulate_arguments(p)
    return p


def _add_mode_arguments(p) -> None:
    """The modes that replace the sweep: ``--overlap``, ``--latency``."""
    p.add_argument("--kernels", action="store_true", help=argparse.SUPPRESS)  # moved: main()
    add_list_argument(p, "--overlap", item_type=nonnegative_float, metavar="COMPUTE_MS",
                   help="instead of the sweep: time iallreduce overlapped with this much compute "
                        "(milliseconds; several values allowed), against each alone")
    p.add_argument("--compute", choices=["numpy", "torch"], default="numpy",
                   help="with --overlap: NumPy ufuncs or PyTorch matmuls, one thread per rank")
    # issue 21: per-call latency against MPI_Allreduce (sparcapps/bench/latency.py)
    p.add_argument("--latency", action="store_true",
                   help="instead of the sweep: per-call median seconds (printed in us) of "
                        "MPI_Allreduce of the dense "
                        "N floats, a persistent plan (sparcml.plan, recursive doubling), the "
                        "plain allreduce, sparcml.topk_plan and the plain topk_allreduce, "
                        "interleaved in one run, each with its ratio to MPI_Allreduce (N "
                        "from --N, default 1000; reps default 2000, warmup 100)")
    p.add_argument("--latency-nnz", type=positive_int, default=10, metavar="K",
                   help="with --latency: nonzeros per rank, and the k of the top-k rows "
                        "(default 10)")


def run_probe(args) -> int:
    """``--probe-network``: the spec of the network this job runs on (collective)."""
    comm = MPI.COMM_WORLD
    if args.simulate:
        raise SystemExit("sparc-bench: --probe-network measures real ranks; it takes no "
                         "--simulate")
    if comm.Get_size() < 2:
        raise SystemExit("sparc-bench: --probe-network needs 2 ranks or more, on 2 nodes for "
                         "the link between nodes (e.g. sparc-mpiexec -n 2 --ranks-per-node 1 "
                         "sparc-bench --probe-network)")
    spec = sim.probe_network(comm)
    if comm.Get_rank() == 0:
        print(f"sparc-bench --probe-network: {spec.nodes} node(s) x {spec.ppn} rank(s); "
              f"latency = half an 8-byte round trip (median), rate = an 8 MiB exchange per "
              f"direction (fastest of 5"
              + ("; the lower of one pair alone and every pair of nodes at once)"
                 if spec.nodes >= 4 else ")"))
        print(f"--network {spec.text}")
        print(f"(predict N nodes: replace the leading '{spec.nodes}x' with 'Nx')")
    return 0


def run_sweep(args) -> int:
    """The sweep (collective): every cell of the grid, its algorithms timed interleaved, one
    printed row and one record per case; ``--simulate`` hands the same cells to
    :func:`.simulate.run_simulated_sweep`."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.simulate and size > 1:
        raise SystemExit("sparc-bench: --simulate runs in one process; start it without "
                         "mpiexec")
    grid = _grid(args)
    algorithms = [DENSE_BASELINE] + [a for a in args.algorithms if a != DENSE_BASELINE]
    try:
        cells = bench_cells(grid["N"], grid["density"], grid["pattern"], args.replay)
    except ValueError as exc:  # the same on every rank
        raise SystemExit(f"sparc-bench: {exc}") from None
    if args.model_only and not args.simulate:
        raise SystemExit("sparc-bench: --model-only is an option of --simulate")
    if args.simulate:
        return _run_simulated(args, cells, grid, algorithms)
    environment = capture_environment(comm)
    model = None if args.no_model else sparcml.calibrate(comm)
    if model is not None and args.topk is not None:  # topk_allreduce's own fixed cost, growth
        sparcml.calibrate_topk(model, comm)
    config = {**vars(args), **grid, "algorithms": algorithms,
              "cost_model": None if model is None else model.to_dict()}
    layout_text = _node_layout(comm) if args.hierarchical else ""  # collective
    if rank == 0:
        _print_sweep_header(args, size, grid["reps"], grid["warmup"], algorithms, layout_text)
    for cell in cells:
        _sweep_cell(args, comm, cell, algorithms, model, config, environment)
    return 0


def _grid(args) -> dict:
    """N, density, pattern, reps and warmup of the sweep: the flags, else the preset's."""
    preset = PRESETS[args.preset]
    grid = {"N": args.N or preset["N"], "density": args.density or preset["density"],
            "pattern": args.pattern or preset["pattern"],
            "reps": args.reps if args.reps is not None else preset["reps"],
            "warmup": args.warmup if args.warmup is not None else preset["warmup"]}
    if grid["reps"] < 1:
        raise SystemExit("sparc-bench: --reps must be >= 1")
    return grid


def _run_simulated(args, cells, grid, algorithms) -> int:
    """``--simulate``: its options checked, the network defaulted, the memory estimated, then
    the simulated sweep."""
    if args.network is None:
        args.network = f"{max(args.simulate)}x10gbit"
    if args.reuse_output:
        raise SystemExit("sparc-bench: --simulate gives each call a new result (no "
                         "--reuse-output: P reused buffers of N values would not be shared)")
    _check_simulation_size(args, grid["N"], grid["density"], algorithms)
    return run_simulated_sweep(args, cells, grid["reps"], grid["warmup"], algorithms,
                               config={key: grid[key] for key in ("N", "density", "pattern")})


def _print_sweep_header(args, size, reps, warmup, algorithms, layout_text) -> None:
    """Rank 0: what is timed, and the table's column names."""
    mode = "iallreduce+wait" if args.nonblocking else "allreduce"
    if args.reuse_output:
        mode += " into a reused out= buffer"
    if args.hierarchical:
        mode += f", +h: node-aware ({layout_text})"
    if args.bits:
        mode += f", +q{args.bits}: QSGD {args.bits}-bit" + (" (sparse values too)"
                                                           if args.quantize_sparse else "")
    print(f"sparc-bench: {mode}, P={size}, dtype={args.dtype}, reps={reps} "
          f"(+{warmup} warm-up{auto_note(algorithms)}); time = median over reps of the "
          f"slowest rank [q25-q75], each call after the other algorithms' (cold caches); "
          f"warm = median of the same call repeated back to back; "
          f"model = cost-model prediction, floor = (K-k)c bytes at the calibrated "
          f"bandwidth")
    print(f"{'N':>10} {'density':>8} {'pattern':>8} {'algorithm':>22} {'median ms':>10} "
          f"{'q25-q75 ms':>15} {'warm ms':>9} {'model ms':>9} {'floor ms':>9} {'sent/rank':>10} "
          f"{'recv max/mean':>13} {'result density':>14} {'vs dense (x)':>12}")
    print("recv max/mean = max / mean over ranks of the bytes received (split algorithms: "
          "in the reduce-scatter phase, what each block's owner receives)")


def _flat_key(case):
    return case.algorithm, case.bits, case.index_coding, case.partitions


def _sweep_cell(args, comm, cell, algorithms, model, config, environment) -> None:
    """One cell (N, density, pattern): its cases timed interleaved (collective); rank 0 prints
    and records a row per case, then the top-k selection and node-aware lines."""
    dim, density, pattern, label = cell
    rank = comm.Get_rank()
    replay = args.replay if pattern == REPLAY else None
    cases = cell_cases(args, algorithms, dim, density, pattern, replay)
    outs = run_cell(cases, comm, reps=config["reps"], warmup=config["warmup"], seed=args.seed,
                    model=model)
    dense_median = outs[0]["timings"]["allreduce"]["median"]  # dense comes first
    flat_median = {_flat_key(c): o["timings"]["allreduce"]["median"]
                   for c, o in zip(cases, outs) if not c.hierarchical}
    ratios = []
    for case, out in zip(cases, outs):
        t = out["timings"]["allreduce"]
        speedup = dense_median / t["median"]
        over_flat = (flat_median[_flat_key(case)] / t["median"]
                     if case.hierarchical else None)
        if over_flat is not None:
            ratios.append(f"{case.algorithm} {over_flat:.2f}x")
        if rank != 0:
            continue
        print(_row_line(cell, case, out, speedup), flush=True)
        if args.output:
            append_record(args.output, make_record(
                "sparc-bench", config=config, environment=environment,
                algorithm=case.algorithm, P=comm.Get_size(), N=dim, density=density,
                timings=out["timings"], bytes=out["bytes"],
                metrics=_row_metrics(args, case, out, label=label, replay=replay,
                                     speedup=speedup, over_flat=over_flat)))
    if args.topk is not None:
        _print_topk_selection(args, comm, dim, density, config["reps"], model)
    if ratios and rank == 0:
        print(f"{'':>10} node-aware speedup over flat (flat / +h median): "
              + ", ".join(ratios), flush=True)


def _row_line(cell, case, out, speedup) -> str:
    """The printed row of one case."""
    dim, density, pattern, _ = cell
    t = out["timings"]["allreduce"]
    name = row_name(case, out["ran"], out["hierarchical"])
    b = out["bytes"]
    imb = b["phase1_received_max_over_mean"] or b["received_max_over_mean"]
    m = out.get("model")
    model_cols = (f"{m['predicted_s'] * 1e3:>9.3f} {m['floor_s'] * 1e3:>9.3f}"
                  if m else f"{'-':>9} {'-':>9}")
    warm = out["timings"].get("warm")
    warm_col = f"{warm['median'] * 1e3:>9.3f}" if warm else f"{'-':>9}"
    return (f"{dim:>10} {density:>8.2g} {pattern:>8} {name:>22} "
            f"{t['median'] * 1e3:>10.3f} "
            f"{t['q25'] * 1e3:>7.2f}-{t['q75'] * 1e3:<7.2f} {warm_col} {model_cols} "
            f"{_fmt_bytes(out['bytes']['sent_per_rank_max']):>10} "
            f"{'-' if imb is None else f'{imb:.2f}':>13} "
            f"{out['result']['density']:>14.3f} {speedup:>11.1f}x")


def _row_metrics(args, case, out, *, label, replay, speedup, over_flat) -> dict:
    """The ``metrics`` of one case's record."""
    return {"speedup_over_dense": speedup, "pattern": label,
            "replay": replay, "dtype": args.dtype, "ran": out["ran"],
            "bits": case.bits,
            "quantize_sparse": case.quantize_sparse,
            "nonblocking": args.nonblocking,
            "reuse_output": args.reuse_output,
            "hierarchical": out["hierarchical"],
            "speedup_over_flat": over_flat,
            "index_coding": case.index_coding,
            "partitions": case.partitions,
            "model": out.get("model"),
            "result_density": out["result"]["density"],
            "topk": case.topk,
            "result_dense": out["result"]["dense"]}


def _print_topk_selection(args, comm, dim, density, reps, model) -> None:
    """``--topk``: the local top-k selection's time (collective), and the cost model's
    choice for a top-k step, on rank 0."""
    k_local = int(round(density * dim))
    select_s = time_local_selection(comm, dim, k_local, dtype=args.dtype,
                                    reps=reps, seed=args.seed)
    choice = "" if model is None else (
        "; the cost model's choice for this step: " + model.choose_topk_step(
            P=comm.Get_size(), N=dim, k=k_local, s_idx=sparcml.index_dtype_for(dim).itemsize,
            s_val=np.dtype(args.dtype).itemsize))
    if comm.Get_rank() == 0:
        print(f"{'':>10} local top-k selection, {dim} -> {k_local} values "
              f"(every row's input): {select_s * 1e3:.3f} ms; a top-k step "
              f"is that plus the row's median{choice}", flush=True)


def _node_layout(comm) -> str:
    """'N nodes x R ranks' as the node-aware allreduce groups ``comm`` (collective)."""
    sizes = sparcml.node_sizes(comm)
    forced = sparcml.default_options().ranks_per_node or 0
    how = f"{forced} per node forced" if forced else "MPI's COMM_TYPE_SHARED"
    return f"{len(sizes)} node(s) of {'/'.join(map(str, sizes))} ranks, {how}"




def run_overlap(args) -> int:
    comm = MPI.COMM_WORLD
    preset = PRESETS[args.preset]
    algorithms = args.algorithms
    environment = capture_environment(comm) if args.output else None
    if comm.Get_rank() == 0:
        print(f"sparc-bench --overlap: P={comm.Get_size()}, {args.compute} compute; medians of "
              f"the slowest rank; both/max = overlapped / max(comm alone, compute alone) (1.0 "
              f"= fully hidden); sum/max: the same, run one after the other")
        print(f"{'N':>10} {'density':>8} {'algorithm':>22} {'compute ms':>10} {'comm ms':>9} "
              f"{'both ms':>9} {'both/max':>8} {'sum/max':>7}")
    for dim in args.N or preset["N"]:
        for density in args.density or preset["density"]:
            for algorithm in algorithms:
                for compute_ms in args.overlap:
                    r = bench_overlap(comm, N=dim, density=density, algorithm=algorithm,
                                      compute_s=compute_ms / 1e3, kind=args.compute,
                                      reps=args.reps or 7, seed=args.seed)
                    if comm.Get_rank() != 0:
                        continue
                    print(f"{dim:>10} {density:>8.2g} {algorithm:>22} "
                          f"{r['compute']['median'] * 1e3:>10.1f} "
                          f"{r['comm']['median'] * 1e3:>9.1f} "
                          f"{r['overlapped']['median'] * 1e3:>9.1f} {r['ratio_to_max']:>8.2f} "
                          f"{r['sequential_ratio']:>7.2f}", flush=True)
                    if args.output:
                        append_record(args.output, make_record(
                            "sparc-bench-overlap", config={**vars(args), "compute_ms": compute_ms},
                            environment=environment, algorithm=algorithm,
                            P=comm.Get_size(), N=dim, density=density,
                            timings={k: r[k] for k in ("comm", "compute", "overlapped")},
                            metrics={"ratio_to_max": r["ratio_to_max"],
                                     "sequential_ratio": r["sequential_ratio"],
                                     "compute": args.compute, "compute_ms": compute_ms}))
    return 0


def _check_simulation_size(args, dims, densities, algorithms) -> None:
    """Say what each P will take before simulating; refuse (one line, exit 2) a P whose
    estimated memory exceeds this machine's. (``--sim-dense-memory`` is another limit: the
    dense baseline is simulated only while P x N values fit in it, else modeled.)"""
    names = list(algorithms) + ([TOPK_ALLREDUCE] if args.topk is not None else [])
    itemsize = np.dtype(args.dtype).itemsize
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        have = None
    for P in sorted(set(args.simulate)):
        # what --model-only predicts at this P is not simulated (the dense baseline is
        # estimated apart: see --sim-dense-memory)
        simulated = [a for a in names
                     if not (P >= args.model_only_from and a in args.model_only)]
        if not set(simulated) - {DENSE_BASELINE}:
            continue
        est = estimate(P, dims, densities, simulated, itemsize=itemsize)
        if have is not None and est.bytes > have:
            print(f"sparc-bench: error: --simulate {P} needs {est.line()[len(f'P = {P}: '):]}, "
                  f"more than this machine's {have / 2**30:.3g} GiB of memory (see "
                  f"sparcapps/sim_estimate.py); simulate fewer ranks, or use "
                  f"--model-only for the algorithms that send to every rank",
                  file=sys.stderr)
            raise SystemExit(2)
        if P >= 256:
            print(f"sparc-bench --simulate: {est.line()} (estimate)", file=sys.stderr,
                  flush=True)


def _network_spec(parser, args) -> None:
    """``--network`` of ``--simulate``, checked now (:func:`sparcapps.simapp.normalize_network`:
    a spec without its node count gets as many nodes as the largest P needs; a bad spec is a
    usage error, exit 2)."""
    args.network = normalize_network(parser, args.network, max(args.simulate))


def _process_defaults(parser, args) -> None:
    """``--index-coding`` / ``--partitions`` not given: the library's process defaults (the
    ``SPARCML_*`` environment, as every sparcml call reads it), so the records say what ran."""
    if args.index_coding is not None and args.partitions is not None:
        return
    try:
        defaults = sparcml.default_options()
    except sparcml.InvalidOptionError as exc:
        parser.error(str(exc))
    if args.index_coding is None:
        args.index_coding = [defaults.index_coding]
    if args.partitions is None:
        args.partitions = [defaults.partitions]


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _process_defaults(parser, args)
    if args.kernels:
        parser.error("--kernels is now the developer's tool python scripts/kernel_bench.py "
                     "(same table and record; it times sparcml's private kernels)")
    if args.probe_network:
        return run_probe(args)
    if args.network is not None and not args.simulate:
        parser.error("--network needs --simulate P [P ...]")
    if args.compute_scale != 1.0 and not args.simulate:
        parser.error("--compute-scale needs --simulate P [P ...]")
    if args.network is not None:
        _network_spec(parser, args)
    replaying = "replay" in (args.pattern or ())  # (inputs.REPLAY) a usage error: exit 2
    if replaying and not args.replay:
        parser.error("--pattern replay needs --replay FILE (a recording of "
                     "sparcapps.bench.record_gradients)")
    if args.replay and not replaying:
        parser.error("--replay FILE is used by --pattern replay; add it to --pattern")
    with sparcml.abort_on_error():
        if args.latency:
            return run_latency(args)
        if args.overlap:
            return run_overlap(args)
        return run_sweep(args)


if __name__ == "__main__":
    sys.exit(main())
