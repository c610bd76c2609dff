"""The table of compressors (issue 24) from the deep apps' records: per app and compressor,
the final test accuracy (mean and sample standard deviation over the seeds found) against the
dense baseline's mean over the same seeds, the bytes sent per step and rank, the median step
time as measured on shared memory and, from the records of runs on an emulated network
(``jobs/emulate.sh``: ``environment.emulated_network``, timing runs that do not enter the
accuracy columns), there, and the predicted communication time of one step at P = 64 and 256
ranks of a 10 Gbit network (:func:`sparcml.compression.predicted_seconds` on
:func:`sparcml.sim.network_cost_model`'s analytic model, one rank per node, the run's buckets
(their parameter shapes where the record has them) and measured sent density; the local merge
and dense rates at the CostModel's defaults, so that the table does not depend on the load of
the host drawing it). Records whose compression is not what their options build with this code
(an older default) are left out.

With ``--simulate P [P ...]`` the communication columns are instead simulated: the event-level
simulator (:func:`sparcml.sim.run` on ``{P}x10gbit``) runs one step's reductions of the row's
first record on P ranks (:mod:`sparcapps.deep._simstep`: seeded random gradients, communication
alone; its docstring states the assumptions).

``sparc-compressor-table RECORDS.jsonl ... [--figure FILE.png] [--simulate 64 256]`` prints
the Markdown table; ``--figure`` draws accuracy vs bytes per step (one panel per app; an SVG
copy beside the PNG).

``--accuracy-only`` (issue 35) prints the table that judges the compressors instead: per row
the learning rate and SGD momentum that ran, the final test accuracy, against dense, the
training steps until the test accuracy first reached dense's final accuracy (mean over its
seeds) less one point (:func:`steps_to`, in whole epochs) and the bytes per step;
``--min-seeds N`` leaves out rows of fewer seeds. A row whose learning rate is not the one the
app gives its compressor by default (the recommended one) says so (``lr X``). ``--sweep``
prints the learning-rate sweep: per app and compressor the seed-0 runs at each learning rate
and the one :func:`best_of_sweep` chooses (``benchmarks/compressors/judge/runs.sh`` runs it);
dense's seed-0 runs at other rates, where there are some, make a row for context that chooses
none (the dense baseline stays at the app's default rate).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import sys
from collections import defaultdict

import numpy as np

from sparcml import DENSE_BASELINE, CostModel
from sparcml.compression import (COMPRESSORS, compressor_params, get_compressor,
                                 predicted_seconds, recommended_hyperparameters)
from sparcml.sim import network_cost_model
from sparcapps.cli_args import add_list_argument, make_parser, positive_int
from sparcapps.records import read_records

from ._simstep import simulate_step
from .comm_options import error_feedback_of
from .train import compression_from_args

__all__ = ["main", "rows_of", "sweep_rows", "steps_to", "best_of_sweep"]

DENSE = DENSE_BASELINE  # the dense baseline's row (the registry's name)

NETWORK = "256x10gbit"


def _default_lr(app: str):
    """The app's default ``--lr`` (None for another app)."""
    try:
        module = importlib.import_module(f"sparcapps.deep.{app.removeprefix('sparc-')}")
        return module.build_parser().app_defaults["lr"]
    except (ImportError, AttributeError, KeyError):
        return None


def _name(rec, *, lr: bool = True) -> str:
    """The row's label: the compressor and the phrases of its options (its registry's
    ``labels``), and ``lr X`` where the run's learning rate is not the one the app gives it by
    default (the compressor's recommended one; some compressors always name it). ``lr=False``:
    the label without the learning rate (the rows of one lr sweep share it)."""
    cfg = rec["config"]
    if cfg.get("dense"):
        default_lr = _default_lr(rec["app"])
        return DENSE if not lr or default_lr is None or cfg["lr"] == default_lr else \
            f"{DENSE} (lr {cfg['lr']:g})"
    name = cfg.get("compressor") or ("global-topk" if cfg.get("global_topk") else "topk")
    # the phrases the compressor's registry record names a run with (sparcml.compression)
    extra = [phrase for key, label in _spec(name).labels
             if (lr or key != "lr") and (phrase := label(cfg.get(key))) is not None] \
        if _spec(name) else []
    default_ef = _spec(name).error_feedback if _spec(name) else True
    ef = error_feedback_of(argparse.Namespace(**cfg))
    if ef is not None and ef != default_ef:  # what ran, where it is not the compressor's own
        extra.append("with EF" if ef else "no EF")
    if lr and "lr" in cfg and not (_spec(name) and any(k == "lr" for k, _ in _spec(name).labels)):
        wanted = _recommended_lr(rec)
        if wanted is not None and not math.isclose(cfg["lr"], wanted, rel_tol=1e-9):
            extra.append(f"lr {cfg['lr']:g}")
    return name + (f" ({', '.join(extra)})" if extra else "")


def _recommended_lr(rec) -> float | None:
    """The learning rate the record's app runs its compressor with by default (its recommended
    one: the app's dense default times the compressor's scale); None for an unknown app."""
    if not rec.get("app"):
        return None
    default_lr = _default_lr(rec["app"])
    cfg = rec["config"]
    name = cfg.get("compressor")
    if default_lr is None or cfg.get("dense") or not name or not _spec(name):
        return default_lr
    return recommended_hyperparameters(name, lr=default_lr, momentum=0.0)["lr"]


def _lr_scale(rec) -> float | None:
    """The run's learning rate over its recommended one (1 at the paper's defaults)."""
    wanted = _recommended_lr(rec)
    return None if wanted is None else rec["config"]["lr"] / wanted


def steps_to(rec, target: float) -> int | None:
    """The training steps after which the run's test accuracy first reached ``target``:
    the steps of the epochs up to the first whose end-of-epoch ``test_accuracy`` is at least
    ``target`` (so counted in whole epochs); None when no epoch reached it or the record has
    no per-epoch accuracy."""
    steps = 0
    for epoch in rec.get("metrics", {}).get("epochs", []):
        if "test_accuracy" not in epoch or "steps" not in epoch:
            return None
        steps += int(epoch["steps"])
        if epoch["test_accuracy"] >= target:
            return steps
    return None


def best_of_sweep(runs):
    """The run of a learning-rate sweep (records of one app, compressor and seed) with the best
    final test accuracy; ties go to the recommended learning rate, then to the smaller one."""
    def key(rec):
        scale = _lr_scale(rec)
        return (-rec["metrics"]["test_accuracy"],
                scale is None or not math.isclose(scale, 1.0, rel_tol=1e-6),
                rec["config"]["lr"])

    return min(runs, key=key)


def _spec(name: str):
    """The registry record of compressor ``name`` (None when this code has none)."""
    return get_compressor(name) if name in COMPRESSORS else None


def _compression(rec):
    """The Compression the record's options build with this code."""
    cfg = argparse.Namespace(**rec["config"])
    # flags a record of an older version lacks: their defaults (the compressors' registry)
    for key, value in [("compressor", None)] + [(p.dest, p.default)
                                                for p in compressor_params()]:
        if not hasattr(cfg, key):
            setattr(cfg, key, value)
    return compression_from_args(cfg)


def current(rec) -> bool:
    """Whether the record's run is what its options build now (records that name their
    compression: an older default, such as EF-signSGD's scale per bucket, is left out; a
    PowerSGD record without ``bucket_shapes`` ran before PowerSGD went per parameter)."""
    metrics = rec.get("metrics", {})
    made = metrics.get("compression")
    name = rec.get("config", {}).get("compressor")
    if name and made is not None and "bucket_shapes" not in metrics and _spec(name) \
            and _compression(rec).compressor.takes_shapes:
        return False  # a per-tensor compressor's run from before it went per parameter
    return made is None or made == _compression(rec).describe()


def _predicted(rec, P: int) -> float:
    """Predicted seconds of one step's reductions at P ranks (all buckets)."""
    cfg = argparse.Namespace(**rec["config"])
    compression = _compression(rec)
    # the local merge / dense rates at the CostModel's defaults: measured ones vary with load
    model = dataclasses.replace(network_cost_model(NETWORK, P, overhead=0.0, part_overhead=0.0,
                                                   factors=False),
                                gamma_merge=CostModel.gamma_merge,
                                gamma_dense=CostModel.gamma_dense)
    density = rec["metrics"]["epochs"][-1].get("sent_density", 1.0)
    layout = rec["metrics"].get("bucket_shapes")
    if layout:  # the run's buckets, each with its parameters' shapes
        total = 0.0
        for shapes in layout:
            n = sum(math.prod(s) for s in shapes)
            total += predicted_seconds(compression, model, P=P, n=n, sent=density * n,
                                       shapes=shapes)
        return total
    N = int(rec["N"])
    buckets = max(1, math.ceil(N * 4 / max(1, int(cfg.bucket_mb * 2**20))))
    n = math.ceil(N / buckets)
    return buckets * predicted_seconds(compression, model, P=P, n=n, sent=density * n)


def _simulated(rec, P: int) -> float:
    """Simulated seconds of one step's reductions at P ranks (communication alone)."""
    return simulate_step(rec, P, _compression)[0]


def _vs_dense(recs, dense) -> float | None:
    """Mean accuracy less the dense runs' mean over the same seeds (None without them)."""
    pairs = [(r["metrics"]["test_accuracy"], dense.get((r["app"], r["config"]["seed"])))
             for r in recs]
    pairs = [(a, d) for a, d in pairs if d is not None]
    return float(np.mean([a - d for a, d in pairs])) if pairs else None


def emulated(rec) -> str | None:
    """The emulated network a record's run ran on (``"4x1gbit,ppn=1"``), or None."""
    return rec.get("environment", {}).get("emulated_network")


def _usable(records) -> list[dict]:
    """The finished, current records with a final test accuracy; a run recorded twice (a
    resumed script) counts once: its last record."""
    by_run = {}
    for rec in records:
        by_run[rec.get("config", {}).get("run_id") or id(rec)] = rec
    return [rec for rec in by_run.values()
            if rec.get("status", "ok") == "ok" and "test_accuracy" in rec.get("metrics", {})
            and current(rec)]


def rows_of(records, simulate=(), *, comm: bool = True) -> list[dict]:
    """One dict per (app, compressor): the table's columns. ``simulate``: the P at which the
    communication columns are simulated (``comm_ms``: P -> ms, ``simulated``: True) instead of
    predicted by the analytic model (P = 64 and 256); ``comm=False``: neither (``comm_ms``
    empty). ``steps``: per run (in ``seeds`` order), the steps to the app's dense final
    accuracy (mean over its seeds) less one point, ``target`` (:func:`steps_to`; None where
    not reached or without a dense row)."""
    groups = defaultdict(list)
    on_net = defaultdict(list)
    for rec in _usable(records):
        if emulated(rec):
            on_net[(rec["app"], _name(rec))].append(rec)
        else:
            groups[(rec["app"], _name(rec))].append(rec)
    dense = {(app, r["config"]["seed"]): r["metrics"]["test_accuracy"]
             for (app, name), recs in groups.items() if name == DENSE for r in recs}
    # the steps column's target: dense's final accuracy (mean over its seeds) less one point
    target = {app: float(np.mean([acc for (a, _), acc in dense.items() if a == app])) - 0.01
              for app in {a for a, _ in dense}}
    rows = []
    for (app, name), recs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != DENSE,
                                                                  kv[0][1])):
        recs = sorted(recs, key=lambda r: r["config"]["seed"])
        accs = [r["metrics"]["test_accuracy"] for r in recs]
        net = on_net.get((app, name), [])
        rows.append({
            "app": app, "compressor": name, "seeds": sorted(r["config"]["seed"] for r in recs),
            "P": sorted({r["P"] for r in recs}), "epochs": sorted({r["config"]["epochs"]
                                                                    for r in recs}),
            "accuracy": float(np.mean(accs)),
            "spread": float(np.std(accs, ddof=1)) if len(accs) > 1 else None,
            "vs_dense": _vs_dense(recs, dense),
            "bytes": float(np.mean([r["bytes"]["sent_per_step"] for r in recs])),
            "lr": sorted({r["config"]["lr"] for r in recs}),
            "momentum": sorted({r["config"].get("momentum") for r in recs},
                               key=lambda m: (m is None, m)),
            "target": target.get(app),
            "steps": [None if app not in target else steps_to(r, target[app]) for r in recs],
            "total_steps": [sum(int(e.get("steps", 0)) for e in r["metrics"].get("epochs", []))
                            for r in recs],
            "step_ms": float(np.median([r["timings"]["step"]["median"] for r in recs])) * 1e3,
            "net": sorted({f"{emulated(r)} P={r['P']}" for r in net}),
            "net_step_ms": float(np.median([r["timings"]["step"]["median"] for r in net])) * 1e3
            if net else None,
            "simulated": bool(simulate),
            "comm_ms": {} if not comm else {P: _simulated(recs[0], P) * 1e3 for P in simulate}
            if simulate else {P: _predicted(recs[0], P) * 1e3 for P in (64, 256)},
        })
    return rows


def _steps_cell(row) -> str:
    """Mean steps to the target over the runs that reached it; how many did when not all."""
    steps = row.get("steps") or []
    reached = [s for s in steps if s is not None]
    if row.get("target") is None or not steps:
        return ""
    if not reached:
        return f"not in {max(row.get('total_steps') or [0]):,}"
    cell = f"{np.mean(reached):,.0f}"
    return cell if len(reached) == len(steps) else f"{cell} ({len(reached)} of {len(steps)})"


def markdown_accuracy(rows) -> str:
    """The table of accuracy alone: per row the learning rate and SGD momentum that ran, the
    final test accuracy, against dense, the steps to dense's final accuracy less one point
    (mean over the seeds that reached it) and the bytes per step and rank."""
    out = ["| app | compressor | lr | SGD momentum | seeds | P | epochs "
           "| test acc. % (mean ± s.d.) | vs dense (points) | steps to dense − 1 point "
           "| bytes/step/rank |",
           "|---" * 11 + "|"]
    for r in rows:
        vs = "" if r["vs_dense"] is None else f"{100 * r['vs_dense']:+.2f}"
        spread = "" if r.get("spread") is None else f" ± {100 * r['spread']:.2f}"
        out.append(f"| {r['app']} | {r['compressor']} | {' '.join(f'{x:g}' for x in r['lr'])} "
                   f"| {' '.join('' if m is None else f'{m:g}' for m in r['momentum'])} "
                   f"| {' '.join(map(str, r['seeds']))} "
                   f"| {' '.join(map(str, r['P']))} | {' '.join(map(str, r['epochs']))} "
                   f"| {100 * r['accuracy']:.2f}{spread} | {vs} | {_steps_cell(r)} "
                   f"| {r['bytes']:,.0f} |")
    return "\n".join(out)


def sweep_rows(records) -> list[dict]:
    """The learning-rate sweep: per app and compressor (its label without the learning rate),
    the seed-0 runs at each learning rate (``runs``: scale of the recommended lr -> (lr, final
    test accuracy)) and the one :func:`best_of_sweep` chooses (``chosen``: its scale). Only
    groups with more than one learning rate. Dense's runs at other rates (``runs.sh``
    ``SWEEP_DENSE=1``) make a row too, for context (``baseline``: True): the table's dense
    baseline stays at the app's default rate whatever its sweep's best."""
    groups = defaultdict(list)
    for rec in _usable(records):
        if rec["config"].get("seed") == 0 and not emulated(rec):
            groups[(rec["app"], _name(rec, lr=False))].append(rec)
    rows = []
    for (app, name), recs in sorted(groups.items()):
        if len({r["config"]["lr"] for r in recs}) < 2:
            continue
        best = best_of_sweep(recs)
        rows.append({"app": app, "compressor": name,
                     "runs": {_lr_scale(r): (r["config"]["lr"], r["metrics"]["test_accuracy"])
                              for r in sorted(recs, key=lambda r: r["config"]["lr"])},
                     "chosen": _lr_scale(best), "chosen_lr": best["config"]["lr"],
                     "baseline": name == DENSE})
    return rows


def _scale_text(scale: float) -> str:
    return f"x1/{1 / scale:.3g}" if scale < 1 else f"x{scale:.3g}"


def markdown_sweep(rows) -> str:
    """The sweep's table: per app and compressor, each learning rate tried (seed 0) with its
    final test accuracy, and the one chosen (dense: none, its best named)."""
    out = ["| app | compressor | lr (scale of the recommended): test acc. % (seed 0) "
           "| chosen lr |", "|---|---|---|---|"]
    for r in rows:
        runs = "; ".join(f"{lr:g} ({_scale_text(scale)}): {100 * acc:.2f}"
                         for scale, (lr, acc) in r["runs"].items())
        chosen = f"{r['chosen_lr']:g} ({_scale_text(r['chosen'])})"
        if r.get("baseline"):
            chosen = f"none: the baseline runs at x1 (best of seed 0: {chosen})"
        out.append(f"| {r['app']} | {r['compressor']} | {runs} | {chosen} |")
    return "\n".join(out)


def markdown(rows) -> str:
    nets = sorted({n for r in rows for n in r.get("net", [])})
    net = f" ({'; '.join(nets)})" if nets else ""
    Ps = list(rows[0]["comm_ms"]) if rows else [64, 256]
    how = "simulated" if rows and rows[0].get("simulated") else "predicted"
    comm = "".join(f" comm ms P={P} ({how}) |" for P in Ps)
    out = ["| app | compressor | seeds | P | epochs | test acc. % (mean ± s.d.) "
           "| vs dense (points) | bytes/step/rank | step ms (shm, measured) "
           f"| step ms (emulated net{net}, measured) |{comm}",
           "|---" * (10 + len(Ps)) + "|"]
    for r in rows:
        vs = "" if r["vs_dense"] is None else f"{100 * r['vs_dense']:+.2f}"
        spread = "" if r.get("spread") is None else f" ± {100 * r['spread']:.2f}"
        on_net = "" if r.get("net_step_ms") is None else f"{r['net_step_ms']:.0f}"
        out.append(f"| {r['app']} | {r['compressor']} | {' '.join(map(str, r['seeds']))} "
                   f"| {' '.join(map(str, r['P']))} | {' '.join(map(str, r['epochs']))} "
                   f"| {100 * r['accuracy']:.2f}{spread} | {vs} | {r['bytes']:,.0f} "
                   f"| {r['step_ms']:.0f} | {on_net} |"
                   + "".join(f" {ms:.3f} |" for ms in r["comm_ms"].values()))
    return "\n".join(out)


def figure(rows, path) -> None:
    import matplotlib  # matplotlib (the [apps] extra): only for --figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = sorted({r["app"] for r in rows})
    fig, axes = plt.subplots(1, len(apps), figsize=(6.5 * len(apps), 4.8), squeeze=False)
    for ax, app in zip(axes[0], apps):
        for r in (r for r in rows if r["app"] == app):
            spread = r.get("spread")
            ax.errorbar(r["bytes"], 100 * r["accuracy"], fmt="o", ms=4, capsize=3,
                        yerr=None if spread is None else 100 * spread)
            label = r["compressor"] if r["compressor"].startswith(DENSE) \
                else r["compressor"].split(" (")[0]
            ax.annotate(label, (r["bytes"], 100 * r["accuracy"]),
                        fontsize=7, xytext=(3, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("bytes sent per step and rank")
        ax.set_ylabel("final test accuracy (%, mean ± s.d. over seeds)")
        ax.set_title(f"{app}: compressors vs dense")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    if str(path).endswith(".png"):  # and a vector copy beside it
        fig.savefig(str(path)[:-4] + ".svg")
    plt.close(fig)


def main(argv=None) -> int:
    p = make_parser("sparc-compressor-table", __doc__)
    p.add_argument("records", nargs="+", help="JSONL records of sparc-cnn / sparc-lstm runs")
    p.add_argument("--figure", default=None,
                   help="also draw accuracy vs bytes into this PNG (and an SVG beside it)")
    add_list_argument(p, "--simulate", item_type=positive_int, default=None, metavar="P",
                      help="simulate one step's reductions at these P on a P x 10 Gbit network "
                           "(sparcml.sim, communication alone) instead of the analytic "
                           "prediction at P = 64 and 256 (slower: seconds to minutes per row)")
    p.add_argument("--accuracy-only", action="store_true",
                   help="the accuracy table: lr and SGD momentum per row, test accuracy, steps "
                        "to dense's final accuracy less one point, bytes per step (no step "
                        "times, no communication model)")
    p.add_argument("--min-seeds", type=positive_int, default=1, metavar="N",
                   help="leave out rows of fewer than N seeds (the sweep's single runs)")
    p.add_argument("--sweep", action="store_true",
                   help="print the learning-rate sweep instead: per app and compressor, the "
                        "seed-0 runs at each lr and the one chosen (best final accuracy; ties "
                        "to the recommended lr)")
    args = p.parse_args(argv)
    if args.simulate and any(P < 1 for P in args.simulate):
        p.error(f"--simulate: P must be positive, got {args.simulate}")
    if args.simulate and (args.accuracy_only or args.sweep):
        p.error("--simulate goes with the full table, not --accuracy-only or --sweep")
    records = read_records(args.records)[0]
    if args.sweep:
        sweep = sweep_rows(records)
        if not sweep:
            print("sparc-compressor-table: no learning-rate sweep in these records",
                  file=sys.stderr)
            return 1
        print(markdown_sweep(sweep))
        return 0
    rows = [r for r in rows_of(records, simulate=tuple(args.simulate or ()),
                               comm=not args.accuracy_only)
            if len(r["seeds"]) >= args.min_seeds]
    if not rows:
        print("sparc-compressor-table: no finished deep-app records", file=sys.stderr)
        return 1
    print(markdown_accuracy(rows) if args.accuracy_only else markdown(rows))
    if args.figure:
        figure(rows, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
