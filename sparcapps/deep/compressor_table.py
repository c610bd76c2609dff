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
from sparcml.compression import COMPRESSORS, compressor_params, get_compressor, predicted_seconds
from sparcml.sim import network_cost_model
from sparcapps.cli_args import add_list_argument, make_parser, positive_int
from sparcapps.records import read_records

from ._simstep import simulate_step
from .train import compression_from_args

__all__ = ["main", "rows_of"]

DENSE = DENSE_BASELINE  # the dense baseline's row (the registry's name)

NETWORK = "256x10gbit"


def _default_lr(app: str):
    """The app's default ``--lr`` (None for another app)."""
    try:
        module = importlib.import_module(f"sparcapps.deep.{app.removeprefix('sparc-')}")
        return module.build_parser().app_defaults["lr"]
    except (ImportError, AttributeError, KeyError):
        return None


def _name(rec) -> str:
    cfg = rec["config"]
    if cfg.get("dense"):
        default_lr = _default_lr(rec["app"])
        return DENSE if default_lr is None or cfg["lr"] == default_lr else \
            f"{DENSE} (lr {cfg['lr']:g})"
    name = cfg.get("compressor") or ("global-topk" if cfg.get("global_topk") else "topk")
    # the phrases the compressor's registry record names a run with (sparcml.compression)
    extra = [phrase for key, label in _spec(name).labels
             if (phrase := label(cfg.get(key))) is not None] if _spec(name) else []
    if cfg.get("no_error_feedback"):
        extra.append("no EF")
    return name + (f" ({', '.join(extra)})" if extra else "")


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


def rows_of(records, simulate=()) -> list[dict]:
    """One dict per (app, compressor): the table's columns. ``simulate``: the P at which the
    communication columns are simulated (``comm_ms``: P -> ms, ``simulated``: True) instead of
    predicted by the analytic model (P = 64 and 256)."""
    groups = defaultdict(list)
    on_net = defaultdict(list)
    by_run = {}  # a run recorded twice (a resumed script) counts once: its last record
    for rec in records:
        by_run[rec.get("config", {}).get("run_id") or id(rec)] = rec
    for rec in by_run.values():
        if rec.get("status", "ok") != "ok" or "test_accuracy" not in rec.get("metrics", {}) \
                or not current(rec):
            continue
        if emulated(rec):
            on_net[(rec["app"], _name(rec))].append(rec)
        else:
            groups[(rec["app"], _name(rec))].append(rec)
    dense = {(app, r["config"]["seed"]): r["metrics"]["test_accuracy"]
             for (app, name), recs in groups.items() if name == DENSE for r in recs}
    rows = []
    for (app, name), recs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != DENSE,
                                                                  kv[0][1])):
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
            "step_ms": float(np.median([r["timings"]["step"]["median"] for r in recs])) * 1e3,
            "net": sorted({f"{emulated(r)} P={r['P']}" for r in net}),
            "net_step_ms": float(np.median([r["timings"]["step"]["median"] for r in net])) * 1e3
            if net else None,
            "simulated": bool(simulate),
            "comm_ms": {P: _simulated(recs[0], P) * 1e3 for P in simulate} if simulate
            else {P: _predicted(recs[0], P) * 1e3 for P in (64, 256)},
        })
    return rows


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
    args = p.parse_args(argv)
    if args.simulate and any(P < 1 for P in args.simulate):
        p.error(f"--simulate: P must be positive, got {args.simulate}")
    records = read_records(args.records)[0]
    rows = rows_of(records, simulate=tuple(args.simulate or ()))
    if not rows:
        print("sparc-compressor-table: no finished deep-app records", file=sys.stderr)
        return 1
    print(markdown(rows))
    if args.figure:
        figure(rows, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
