"""``sparc-report RESULTS --rerun FIGURE -o DIR``: run one figure's commands again, into NEW
records, and put the old and the new figure side by side with the ratios point by point.

The commands are those the records keep (:mod:`sparcapps.report.commands`): an ``mpiexec`` or
plain line writes ``DIR/rerun-records.jsonl``; an ``sbatch`` line runs with ``--wait`` and
``SPARC_RESULTS=DIR/rerun-results``; a ``sparc-jobs sweep`` line with ``--wait`` and
``--results DIR/rerun-results``. The records read are never written to.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from sparcapps import launcher
from sparcapps.records import RecordError, iter_record_files, read_records

from . import plotting as pl
from .build import all_figures, load
from .doc import Doc
from .fmt import count, ms, percent, sig
from .plotting import source_label

__all__ = ["ReportError", "rerun_figure", "compare_rows", "shared_ranges"]


class ReportError(RecordError):
    """A report cannot be made as asked: an unknown figure, a rerun command that failed."""


def _find(figs, figure_id: str):
    ids = [f.id for f in figs]
    name = figure_id.removesuffix(".png")
    matches = [f for f in figs if f.id == name] or [f for f in figs if f.id.startswith(name)]
    if len(matches) != 1:
        how = "matches several" if matches else "is not"
        raise ReportError(f"figure {figure_id!r} {how} a figure of these records; figures: "
                          + ", ".join(ids))
    return matches[0]


def _executable(cmd, new_records: Path, results: Path) -> tuple[list[str], dict]:
    """argv and environment of ``cmd`` writing new records, waiting for Slurm jobs."""
    c = cmd.with_output(new_records, results=results)
    argv = list(c.argv)
    if c.level == "sweep":
        at = argv.index("--") if "--" in argv else len(argv)
        argv[at:at] = ["--wait"]
    elif c.level == "sbatch":
        argv[1:1] = ["--wait"]
    env = {**os.environ, **dict(c.env)}
    # the apps and mpiexec of the environment sparc-report runs in come first
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if c.level == "mpiexec" and argv and argv[0] == "mpiexec":
        # what this MPI needs to start the ranks here (Open MPI: root, more ranks than cores)
        exe = shutil.which("mpiexec", path=env["PATH"])
        if exe is not None:
            flavor = launcher.mpi_flavor(exe)
            argv[1:1] = launcher.launch_flags(flavor)
            env = launcher.launch_env(flavor, env)
    return argv, env


def _ranges(meta) -> list[tuple]:
    return [tuple(p["ylim"]) for p in meta["panels"]]


def shared_ranges(old_meta, new_meta) -> tuple[list[tuple], list[tuple]]:
    """The y range of each panel of the before and the after figure (:func:`plotting.describe`
    metadata), widened to cover both: panels of one source (title) get one range, so that
    the two figures compare point by point at a glance."""
    span: dict = {}
    for meta in (old_meta, new_meta):
        for p in meta["panels"]:
            lo, hi = p["ylim"]
            have = span.get(p["title"])
            span[p["title"]] = (lo, hi) if have is None else (min(have[0], lo), max(have[1], hi))
    return ([span[p["title"]] for p in old_meta["panels"]],
            [span[p["title"]] for p in new_meta["panels"]])


def _point(r) -> tuple:
    return (r["series"], r["simulated"], r["network"], r["P"], r["N"], r["density"],
            r["pattern"], r["dtype"])


def compare_rows(old_rows, new_rows) -> list[dict]:
    """Per point of the old figure: old and new median, new/old time ratio, old and new
    speedup over dense and their ratio (None where the rerun lacks the point). A point that
    several rows hold (jobs of a sweep that each time dense at P = 1, say) pairs them in
    record order, the i-th old row with the i-th new one."""
    new: dict[tuple, list] = {}
    for r in new_rows:
        new.setdefault(_point(r), []).append(r)
    seen: dict[tuple, int] = {}
    out = []
    # sorted() is stable: the rows of one point keep their record order
    for r in sorted(old_rows, key=lambda r: tuple(str(v) for v in _point(r))):
        point = _point(r)
        i = seen[point] = seen.get(point, -1) + 1
        n = new[point][i] if i < len(new.get(point, ())) else None
        out.append({"point": _point(r), "old": r, "new": n,
                    "time_ratio": n["median"] / r["median"] if n and r["median"] else None,
                    "speedup_ratio": n["speedup"] / r["speedup"]
                    if n and n["speedup"] and r["speedup"] else None})
    return out


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def rerun_figure(paths: Sequence[str | Path], figure_id: str, out_dir: str | Path, *,
                 timeout: float = 3600) -> tuple[Path, list[dict]]:
    """Rerun the commands of figure ``figure_id`` of the records in ``paths`` and write
    ``out_dir/report.{md,html}``: the figures before and after, side by side, and the ratios.

    Returns the path of report.md and :func:`compare_rows`. Raises ReportError for an unknown
    figure, a command that fails or that wrote no record of the figure.
    """
    records, _ = load(paths)
    _, _, figs = all_figures(records)
    fig = _find(figs, figure_id)
    if fig.section == "Training runs":
        raise ReportError("--rerun compares collective figures; rerun a training run with the "
                          "commands under 'Commands to rerun'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    new_records, results = out / "rerun-records.jsonl", out / "rerun-results"
    inputs = {p.resolve() for p in iter_record_files(paths)}
    if new_records.resolve() in inputs or any(results.resolve() in p.parents for p in inputs):
        raise ReportError(f"{out} holds records being reproduced; give another -o directory")
    new_records.unlink(missing_ok=True)  # a previous rerun into this directory
    ran = []
    for cmd in fig.commands:
        if cmd.level in ("failed", "unknown"):
            continue
        argv, env = _executable(cmd, new_records, results)
        print(f"sparc-report: running {cmd.with_output(new_records, results=results).line()}",
              file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(argv, env=env, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReportError(f"rerun command failed: {exc}") from exc
        if proc.returncode != 0:
            raise ReportError(f"rerun command exited with status {proc.returncode}: "
                              + shlex.join(argv))
        ran.append(cmd.with_output(new_records, results=results).line())
    sources = [p for p in (new_records, results) if p.exists()]
    new_recs, _ = read_records(sources) if sources else ([], [])
    _, _, new_figs = all_figures(new_recs)
    matching = [f for f in new_figs if f.id == fig.id]
    if not matching:
        raise ReportError(f"the rerun wrote no records that make figure {fig.id} "
                          f"(records: {', '.join(map(str, sources)) or 'none'})")
    new_fig = matching[0]
    old_ranges, new_ranges = shared_ranges(fig.meta, new_fig.meta)
    if old_ranges != _ranges(fig.meta):  # drawn again on the y range they share
        with pl.shared_y_ranges({fig.id: old_ranges}):
            fig = _find(all_figures(records)[2], fig.id)
    if new_ranges != _ranges(new_fig.meta):
        with pl.shared_y_ranges({fig.id: new_ranges}):
            new_fig = next(f for f in all_figures(new_recs)[2] if f.id == fig.id)
    cmp = compare_rows(fig.rows, new_fig.rows)
    _write(out, fig, new_fig, cmp, ran)
    return out / "report.md", cmp


def _write(out: Path, fig, new_fig, cmp, ran) -> None:
    doc = Doc()
    doc.h(1, f"Rerun of figure {fig.id}")
    doc.p("Commands run (new records; the originals untouched):")
    doc.code("\n".join(ran))
    doc.side_by_side([(fig.id + "-before", fig.png, fig.svg, "before: " + fig.caption),
                      (fig.id + "-rerun", new_fig.png, new_fig.svg, "rerun: " + new_fig.caption)])
    t = _geomean(c["time_ratio"] for c in cmp)
    s = _geomean(c["speedup_ratio"] for c in cmp)
    missing = sum(c["new"] is None for c in cmp)
    doc.p(f"{len(cmp)} points; geometric mean of new/old median time {sig(t)}, of new/old "
          f"speedup over dense {sig(s)}; {missing} point(s) missing from the rerun. Ratios near "
          "1 reproduce the figure; timings on a shared or busy machine vary by tens of percent. "
          "Before and after are drawn on one y range per panel.")
    doc.table(["configuration", "source", "P", "N", "density", "old median ms",
               "new median ms", "new/old time", "old speedup", "new speedup", "new/old speedup"],
              [[c["old"]["series"], source_label(c["old"]["simulated"], c["old"]["network"]),
                c["old"]["P"], count(c["old"]["N"]), percent(c["old"]["density"]),
                ms(c["old"]["median"]),
                ms(c["new"]["median"]) if c["new"] else "missing", sig(c["time_ratio"]),
                sig(c["old"]["speedup"]), sig(c["new"]["speedup"]) if c["new"] else "",
                sig(c["speedup_ratio"])] for c in cmp],
              numeric={2, 3, 4, 5, 6, 7, 8, 9, 10})
    doc.write(out, f"Rerun of {fig.id}")
