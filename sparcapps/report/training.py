"""Training runs (records with ``metrics["epochs"]``): accuracy (or loss) vs wall time per
data set, and time to accuracy against the dense baseline.

Time to accuracy: the target is 99% of the best accuracy the dense baseline of the same app,
data set and P reached (101% of its lowest loss when only the loss is recorded); a run's time
is the wall time of its first epoch at or past the target; the ratio is the dense baseline's
time over the run's (> 1: faster to the same accuracy). Without a dense baseline the target is
99% of the lowest best accuracy of the runs, so that every run reaches it.
"""

from __future__ import annotations

from .commands import command_of
from .figures import Fig, group_rows, render
from . import plotting as pl
from .fmt import compressor_label, config_label, dataset_label, sig, slug

__all__ = ["training_runs", "training_figures", "time_to_accuracy", "scaling_figures",
           "scaling_points", "app_label"]

_METRICS = ("test_accuracy", "train_accuracy", "loss")


def training_runs(records) -> list[dict]:
    """One row per ok record with a non-empty ``metrics["epochs"]`` list."""
    runs = []
    for r in records:
        epochs = (r.get("metrics") or {}).get("epochs")
        if r.get("status") == "ok" and isinstance(epochs, list) and epochs:
            runs.append({"app": app_label(r), "dataset": dataset_label(r), "P": r.get("P"),
                         "config": config_label(r), "series": series_label(r),
                         "simulated": bool(r.get("simulated")),
                         "network": network_of_run(r.get("network")),
                         "epochs": epochs, "record": r, "command": command_of(r)})
    return runs


def network_of_run(spec):
    """A simulated run's network without its node count (``64x10gbit,ppn=1,...`` ->
    ``10gbit,ppn=1,...``): an app sizes the network to the largest ``--simulate`` P of its
    command, and with full bisection and no contention the nodes a P-rank run does not use
    change nothing, so runs of ``--simulate 4 16`` and ``--simulate 4 16 64`` share a line."""
    if not isinstance(spec, str):
        return spec
    head, _, rest = spec.partition(",")
    count, x, rate = head.partition("x")
    if x and count.isdigit():
        head = rate
    return ",".join(p for p in (head, rest) if p)


_LINEAR = ("sparc-linear", "sparc-logreg", "sparc-svm")


def app_label(rec: dict) -> str | None:
    """The model a training run trained, as the figures group runs: ``sparc-logreg`` and
    ``sparc-svm`` are ``sparc-linear`` with a loss, so their runs (a dense baseline among
    them) share the figures of ``sparc-linear`` runs of that loss: ``sparc-linear`` (log
    loss, its default) or ``sparc-linear --loss hinge``."""
    app = rec.get("app")
    if app not in _LINEAR:
        return app
    loss = (rec.get("config") or {}).get("loss") or ("hinge" if app == "sparc-svm" else "log")
    return "sparc-linear" if loss == "log" else f"sparc-linear --loss {loss}"


def _metric(runs) -> str | None:
    return next((m for m in _METRICS if any(m in e for run in runs for e in run["epochs"])),
                None)


def _reached(run, metric, target):
    higher = metric != "loss"
    for e in run["epochs"]:
        v = e.get(metric)
        if v is not None and e.get("wall_seconds") is not None and (
                v >= target if higher else v <= target):
            return e["wall_seconds"]
    return None


def time_to_accuracy(runs) -> list[dict]:
    """Per run: metric, target, baseline ('dense baseline' or 'slowest run'), seconds to the
    target (None: never reached), ratio dense seconds / seconds (None without both)."""
    out = []
    for (app, dataset, P), grp in group_rows(runs, lambda r: (r["app"], r["dataset"], r["P"])):
        metric = _metric(grp)
        if metric is None:
            continue
        higher = metric != "loss"

        def best(run):
            vals = [e[metric] for e in run["epochs"] if e.get(metric) is not None]
            return (max(vals) if higher else min(vals)) if vals else None

        dense = [g for g in grp if g["config"] == "dense baseline" and best(g) is not None]
        if dense:
            ref = best(dense[0])
            basis = "dense baseline"
        else:
            bests = [b for b in map(best, grp) if b is not None]
            if not bests:
                continue
            ref = min(bests) if higher else max(bests)
            basis = "every run"
        target = ref * (0.99 if higher else 1.01)
        dense_s = _reached(dense[0], metric, target) if dense else None
        for g in grp:
            secs = _reached(g, metric, target)
            out.append({"run": g, "metric": metric, "target": target, "basis": basis,
                        "seconds": secs,
                        "ratio": dense_s / secs if dense_s and secs else None})
    return out


def training_figures(runs) -> list[Fig]:
    """Metric vs wall time, one figure per (app, data set), one line per run."""
    figs = []
    for (app, dataset), grp in group_rows(runs, lambda r: (r["app"], r["dataset"])):
        metric = _metric(grp)
        if metric is None:
            continue
        name = metric.replace("_", " ")
        title = f"{app}{' on ' + dataset if dataset else ''}: {name} vs wall time"
        fig, ax = pl.new_axes(title, "wall time since the start of training (s)", name)
        handles = []
        runs = sorted(grp, key=lambda g: (g["config"] != "dense baseline", g["config"],
                                          g["P"] or 0))
        pts = [[(e["wall_seconds"], e[metric]) for e in g["epochs"]
                if e.get("wall_seconds") is not None and e.get(metric) is not None]
               for g in runs]
        offsets = pl.dodge({i: dict(p) for i, p in enumerate(pts) if p})
        labels = pl.unique_labels(
            [f"{g['config']}, P = {g['P']}"
             + (f", {pl.source_label(True, g['network'])}" if g["simulated"] else "")
             for g in runs], [_run_detail(g) for g in runs])
        for i, (g, p) in enumerate(zip(runs, pts)):
            if p:
                dense = g["config"] == "dense baseline"
                line = pl.plot_line(
                    ax, [q[0] for q in p], [q[1] for q in p], offsets[i], ls="-",
                    marker="o" if dense else pl.MARKERS[(i + 1) % len(pl.MARKERS)],
                    color="black" if dense else f"C{i % 10}", lw=2 if dense else 1.5,
                    markersize=4, gid=f"series-{i}", label=labels[i])
                handles.append(line)
        targets = {(t["target"], t["basis"]) for t in time_to_accuracy(grp)}
        if len(targets) == 1:  # one P: the time-to-accuracy target as a line
            (target, basis), = targets
            handles.append(ax.axhline(
                target, color="gray", ls=":", lw=1, label="time-to-accuracy target ("
                + ("99% of the dense baseline's best)" if basis == "dense baseline"
                   else "99% of the runs' lowest best)")))
        pl.outside_legend(fig, handles)
        fid = slug(metric, app, dataset)
        caption = (f"{app}{', ' + dataset if dataset else ''}: {name} vs wall time, one line "
                   "per run (its configuration, P and, when simulated, the network: modeled "
                   "seconds)")
        if any(g["config"] == "dense baseline" for g in runs):
            caption += "; dense baseline: full gradients, dense allreduce (black)"
        if len(targets) == 1:
            caption += ("; time-to-accuracy target (gray, dotted): the accuracy the time to "
                        "accuracy is measured to")
        figs.append(Fig(fid, "Training runs", caption + ".", *render(fig, fid), grp))
    return figs


def _run_detail(run) -> str:
    """What tells two runs of one configuration and P apart: the seed, else the record's
    place (file:line)."""
    cfg = run["record"].get("config") or {}
    if cfg.get("seed") is not None:
        return f"seed {cfg['seed']}"
    return str(run["record"].get("_source") or "")


def training_table(runs) -> tuple[list[str], list[list]]:
    """Headers and rows of the training table: final values and time to accuracy."""
    tta = {id(t["run"]): t for t in time_to_accuracy(runs)}
    rows = []
    for g in runs:
        last = g["epochs"][-1]
        t = tta.get(id(g))
        rows.append([g["app"], g["dataset"], g["config"], g["P"], len(g["epochs"]),
                     sig(last.get("loss")), sig(last.get("train_accuracy")),
                     sig(last.get("test_accuracy")), sig(last.get("wall_seconds")),
                     "" if t is None else f"{t['metric'].replace('_', ' ')} "
                                          f">= {sig(t['target'])} ({t['basis']})",
                     "" if t is None else ("not reached" if t["seconds"] is None
                                           else sig(t["seconds"])),
                     "" if t is None or t["ratio"] is None else sig(t["ratio"])])
    headers = ["app", "data set", "configuration", "P", "epochs", "final loss",
               "train accuracy", "test accuracy", "wall s", "target", "time to target s",
               "dense time / time"]
    return headers, rows


def series_label(rec: dict) -> str:
    """A training run's configuration without what varies with P (the linear apps' measured
    gradient density): 'dense baseline', or the algorithm with the compressor (when not top-k),
    its sent fraction and QSGD bits where the run set them."""
    label = config_label(rec)
    if label == "dense baseline":  # modeled beside a sparse run (sparc-linear --dense-model)
        return label + pl.MODELED if (rec.get("metrics") or {}).get("modeled_only") else label
    cfg = rec.get("config") or {}
    parts = [str(rec.get("algorithm") or "unknown algorithm")]
    if compressor_label(cfg):
        parts.append(compressor_label(cfg))
    if cfg.get("density") is not None:
        parts.append(f"sent {sig(cfg['density'])}")
    if cfg.get("bits"):
        parts.append(f"{cfg['bits']}-bit QSGD")
    return ", ".join(parts)


def _train_seconds(epoch: dict):
    """An epoch's training seconds: the linear apps' ``train_seconds``, the deep apps'
    ``epoch_seconds`` (evaluation excluded in both)."""
    return epoch.get("train_seconds", epoch.get("epoch_seconds"))


def _epoch_seconds(run) -> float | None:
    """The run's typical epoch: the median training seconds of its epochs after the first
    (the first compiles and warms caches in a measured run), of its only epoch else."""
    secs = [_train_seconds(e) for e in run["epochs"]]
    secs = [x for x in (secs[1:] if len(secs) > 1 else secs) if x is not None]
    if not secs:
        return None
    secs.sort()
    mid = len(secs) // 2
    return secs[mid] if len(secs) % 2 else 0.5 * (secs[mid - 1] + secs[mid])


def _seconds_to(run, metric: str, target: float) -> float | None:
    """Training seconds (summed over epochs, evaluation excluded) until ``metric`` first
    reached ``target``; None if it never did."""
    total = 0.0
    for e in run["epochs"]:
        if _train_seconds(e) is None:
            return None
        total += _train_seconds(e)
        v = e.get(metric)
        if v is not None and v >= target:
            return total
    return None


def scaling_points(runs) -> dict:
    """Per (app, data set): the stated target (99% of the lowest best test accuracy the dense
    baseline reached at any P, measured or simulated; of every run's without a dense
    baseline) and one point per run: (series, source, P, epoch seconds, seconds to target)."""
    out = {}
    for (app, dataset), grp in group_rows(runs, lambda r: (r["app"], r["dataset"])):
        if len({g["P"] for g in grp}) < 2:
            continue
        with_acc = [g for g in grp if any(e.get("test_accuracy") is not None
                                          for e in g["epochs"])]
        best = {id(g): max(e["test_accuracy"] for e in g["epochs"]
                           if e.get("test_accuracy") is not None) for g in with_acc}
        dense = [g for g in with_acc if g["series"] == "dense baseline"]
        basis = dense or with_acc
        target = 0.99 * min(best[id(g)] for g in basis) if basis else None
        points = []
        for g in grp:
            source = pl.source_label(g["simulated"], g["network"])
            points.append({"series": g["series"], "source": source, "P": g["P"],
                           "simulated": g["simulated"], "network": g["network"],
                           "epoch_seconds": _epoch_seconds(g),
                           "to_target": None if target is None
                           else _seconds_to(g, "test_accuracy", target), "run": g})
        out[(app, dataset)] = {"target": target,
                               "basis": "dense baseline" if dense else "every run",
                               "points": points}
    return out


_NET_STYLES = ("--", ":", "-.")


def _short_source(point) -> str:
    """'measured', or 'simulated, 10gbit, latency=10us' (the spec's rate and latency: the
    point's network has no node count, :func:`network_of_run`; the caption and the records
    hold the whole spec)."""
    if not point["simulated"]:
        return point["source"]
    parts = (point["network"] or "").split(",")
    rate = parts[0]
    latency = next((q for q in parts[1:] if q.startswith("latency=")), "")
    return ", ".join(x for x in ("simulated", rate, latency) if x)


def scaling_figures(runs) -> list[Fig]:
    """Epoch time and time to a stated test accuracy against P, per (app, data set): one
    line per configuration and source, measured (solid, filled markers) beside simulated
    (dashed, hollow markers, one line per network), the dense baseline in black on the same
    axes as the sparse runs."""
    figs = []
    for (app, dataset), data in scaling_points(runs).items():
        pts = data["points"]
        styles = pl.SeriesStyles([p["series"] for p in pts], "dense baseline")
        for what, key, ylabel in (
                ("epoch time", "epoch_seconds", "seconds per epoch (median, log scale)"),
                ("time to accuracy", "to_target", "training seconds to the target "
                                                  "(log scale)")):
            if not any(p[key] for p in pts):
                continue
            where = f"{app}{' on ' + dataset if dataset else ''}"
            fig, ax = pl.new_axes(f"{where}: {what} vs P", "P", ylabel, wide=True)
            fig.set_figheight(6.4)  # room for the legend below the axes
            handles = []
            lines = group_rows(pts, lambda p: (p["series"] != "dense baseline", p["series"],
                                               p["source"]))
            networks = sorted({p["network"] for p in pts if p["simulated"]})
            missing = []
            drawn = []
            for (_, series, source), grp in lines:
                grp = sorted(grp, key=lambda p: p["P"])
                xs = [p["P"] for p in grp if p[key]]
                ys = [p[key] for p in grp if p[key]]
                missing += [f"{series}, {source}, P = {p['P']}" for p in grp if not p[key]]
                if not xs:
                    continue
                kw = pl.style_for(styles, series, grp[0]["simulated"], grp[0]["network"])
                if grp[0]["simulated"]:  # one line style per network (modeled: x markers)
                    kw["linestyle"] = _NET_STYLES[networks.index(grp[0]["network"])
                                                  % len(_NET_STYLES)]
                drawn.append((series, grp[0]))
                handles.append(pl.plot_line(
                    ax, xs, ys, label=f"{series}, {_short_source(grp[0])}",
                    gid=f"series-{len(handles)}", **kw))
            # two networks of one rate and latency (10gbit,ppn=4 and 10gbit,ppn=8):
            # their whole spec tells them apart
            short = [h.get_label() for h in handles]
            whole = [f"{s}, {p['source']}" for s, p in drawn]
            for h, lb in zip(handles, pl.unique_labels(
                    [w if short.count(lb) > 1 else lb for lb, w in zip(short, whole)],
                    [""] * len(handles))):
                h.set_label(lb)
            pl.rank_axis(ax, [p["P"] for p in pts])
            ax.set_yscale("log")
            pl.outside_legend(fig, handles)
            fid = slug("scaling", what, app, dataset)
            caption = (f"{where}: {what} against P. Measured runs: solid lines, filled "
                       f"markers; simulated runs (sparcml.sim: exact training, modeled "
                       f"seconds): hollow markers, one line style per network (dashed, "
                       f"dotted, dash-dot: "
                       + "; ".join(sorted({p["network"] for p in pts if p["simulated"]}))
                       + "); the dense baseline (black) on the same axes.")
            if any(pl.modeled_series(p["series"]) for p in pts):
                caption += (" The dense baseline (modeled): x markers, its network's line "
                            "style: predicted "
                            "beside the sparse run of the same P (sparc-linear --dense-model: "
                            "its P dense vectors do not fit a simulation), not simulated; "
                            "its accuracies are that sparse run's.")
            if key == "to_target":
                caption += (f" Target: test accuracy >= {sig(data['target'])} (99% of the "
                            f"lowest best accuracy of the {data['basis']} over every P).")
                if missing:
                    caption += " Not reached in the epochs run: " + "; ".join(missing) + "."
            else:
                caption += (" Epoch time: the median of the epochs after the first (the "
                            "first compiles kernels in a measured run).")
            figs.append(Fig(fid, "Training runs", caption, *render(fig, fid),
                            [p["run"] for p in pts]))
    return figs
