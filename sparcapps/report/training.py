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
from .fmt import config_label, dataset_label, sig, slug

__all__ = ["training_runs", "training_figures", "time_to_accuracy"]

_METRICS = ("test_accuracy", "train_accuracy", "loss")


def training_runs(records) -> list[dict]:
    """One row per ok record with a non-empty ``metrics["epochs"]`` list."""
    runs = []
    for r in records:
        epochs = (r.get("metrics") or {}).get("epochs")
        if r.get("status") == "ok" and isinstance(epochs, list) and epochs:
            runs.append({"app": r.get("app"), "dataset": dataset_label(r), "P": r.get("P"),
                         "config": config_label(r), "epochs": epochs, "record": r,
                         "command": command_of(r)})
    return runs


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
        for i, (g, p) in enumerate(zip(runs, pts)):
            if p:
                dense = g["config"] == "dense baseline"
                line = pl.plot_line(
                    ax, [q[0] for q in p], [q[1] for q in p], offsets[i], ls="-",
                    marker="o" if dense else pl.MARKERS[(i + 1) % len(pl.MARKERS)],
                    color="black" if dense else f"C{i % 10}", lw=2 if dense else 1.5,
                    markersize=4, gid=f"series-{i}", label=f"{g['config']}, P = {g['P']}")
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
        figs.append(Fig(fid, "Training runs",
                        f"{app}{', ' + dataset if dataset else ''}: {name} vs wall time",
                        *render(fig, fid), grp))
    return figs


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
