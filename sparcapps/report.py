"""``sparc-report RESULTS... -o DIR``: a reproducibility report from result records.

Reads records (files or directories of ``*.jsonl``; see :mod:`sparcapps.records`), and writes
``DIR/report.md``, ``DIR/report.html``, PNG plots (matplotlib, Agg) and ``DIR/collectives.csv``:

- skipped lines (corrupt or partial, by file:line) and failed runs, listed, never averaged in;
- collectives (records with an ``allreduce`` timing, e.g. ``sparc-bench``): a table per record
  (median and quartiles, speedup over dense, bytes, model and reference times when present);
  plots of speedup over dense vs P per algorithm, time vs density, and measured vs cost model vs
  lower bound where the records carry ``metrics["model_seconds"]`` / ``["floor_seconds"]``;
- apps with per-epoch metrics (``metrics["epochs"]``): accuracy (or loss) vs wall time;
- the environments the records were measured in, and the exact commands to rerun each figure.

Speedup over dense is taken from ``metrics["speedup_over_dense"]`` when the record has it, else
computed from the ``dense`` record of the same (P, N, density, pattern, dtype) in the same file.
Numbers in the tables are the records' own values to six significant digits.
"""

from __future__ import annotations

import argparse
import csv
import html
import math
import re
import shlex
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from sparcapps.records import RecordError, RecordProblem, read_records

__all__ = ["build_report", "collective_rows", "rerun_command", "main"]

_TIMING_KEYS = ("allreduce", "total", "communication")
_REFERENCES = (("model_seconds", "model", "--"), ("rsag_seconds", "RS+AG volume", "-."),
               ("floor_seconds", "lower bound", ":"))


def _fmt(x: Any) -> str:
    """Six significant digits for floats, as-is otherwise; '' for missing values."""
    if x is None:
        return ""
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.6g}"
    return str(x)


def _field(rec: dict, name: str) -> Any:
    """A record's value for ``name``: top level, then metrics, then a scalar in config."""
    for where in (rec, rec.get("metrics") or {}, rec.get("config") or {}):
        value = where.get(name)
        if value is not None and not isinstance(value, (list, dict)):
            return value
    return None


def _timing(rec: dict) -> tuple[str, dict] | None:
    timings = rec.get("timings") or {}
    for key in _TIMING_KEYS:
        if key in timings:
            return key, timings[key]
    return None


# flat metrics key -> key inside metrics["model"], the form sparc-bench writes
_MODEL_KEYS = {"model_seconds": "predicted_s", "rsag_seconds": "rs_ag_s",
               "floor_seconds": "floor_s"}


def _reference(rec: dict, key: str) -> Any:
    """A model/reference time: ``metrics["model"][...]`` (sparc-bench) or ``metrics[key]``."""
    metrics = rec.get("metrics") or {}
    model = metrics.get("model")
    if isinstance(model, dict) and model.get(_MODEL_KEYS[key]) is not None:
        return model[_MODEL_KEYS[key]]
    return metrics.get(key)


def _sent(rec: dict) -> Any:
    """Bytes sent per rank: ``sent_per_rank``, else the slowest rank's ``sent_per_rank_max``."""
    b = rec.get("bytes") or {}
    return b.get("sent_per_rank", b.get("sent_per_rank_max"))


def rerun_command(rec: dict) -> str:
    """The command line that reproduces ``rec``: ``mpiexec -n P`` + the recorded argv, or
    ``jobs/emulate.sh SPEC --`` + argv for a run on the emulated network."""
    env = rec.get("environment") or {}
    argv = list(env.get("command") or [])
    if not argv:
        return "(command not recorded)"
    if argv[0] == "sparc-jobs":  # a failure record: the command sparc-jobs ran
        argv = list((rec.get("config") or {}).get("command") or argv)
        return shlex.join(argv)
    emulated = env.get("emulated_network")  # "4x1gbit,ppn=1", set by jobs/emulate.sh
    if emulated:
        spec, _, ppn = emulated.partition(",ppn=")
        opt = f"--ranks-per-node {ppn} " if ppn and ppn != "1" else ""
        return f"bash jobs/emulate.sh {opt}{spec} -- {shlex.join(argv)}"
    return f"mpiexec -n {rec.get('P', 1)} {shlex.join(argv)}"


def _key(rec: dict) -> tuple:
    return (rec.get("P"), rec.get("N"), rec.get("density"), _field(rec, "pattern"),
            _field(rec, "dtype"))


def collective_rows(records: Iterable[dict]) -> list[dict[str, Any]]:
    """One row per ok record with an ``allreduce`` timing: the values the tables and plots show.

    Keys: source, P, nodes, N, density, pattern, dtype, algorithm, median, q25, q75, n, speedup,
    sent_per_rank (bytes sent per rank, the maximum over ranks when recorded so), model_seconds, rsag_seconds, floor_seconds, command.
    """
    recs = [r for r in records if r.get("status") == "ok"
            and "allreduce" in (r.get("timings") or {})]
    from sparcml import DENSE_BASELINE

    dense = {}
    for r in recs:
        if r.get("algorithm") == DENSE_BASELINE:
            dense[(r["_source"].rsplit(":", 1)[0], *_key(r))] = r["timings"]["allreduce"]["median"]
    rows = []
    for r in recs:
        t = r["timings"]["allreduce"]
        speedup = (r.get("metrics") or {}).get("speedup_over_dense")
        if speedup is None:
            d = dense.get((r["_source"].rsplit(":", 1)[0], *_key(r)))
            speedup = d / t["median"] if d is not None and t["median"] > 0 else None
        rows.append({
            "source": r.get("_source"), "P": r.get("P"), "nodes": r.get("nodes"), "N": r.get("N"),
            "density": r.get("density"), "pattern": _field(r, "pattern"),
            "dtype": _field(r, "dtype"), "algorithm": r.get("algorithm"),
            "median": t["median"], "q25": t.get("q25"), "q75": t.get("q75"), "n": t.get("n"),
            "speedup": speedup, "sent_per_rank": _sent(r),
            **{k: _reference(r, k) for k, _, _ in _REFERENCES},
            "command": rerun_command(r)})
    rows.sort(key=lambda x: tuple((v is None, v if v is not None else 0) for v in
                                  (x["N"], x["pattern"], x["density"], x["P"], x["algorithm"])))
    return rows


# ---------------------------------------------------------------- document: blocks -> md / html

class _Doc:
    """A tiny document model rendered to both Markdown and HTML."""

    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, level, text): self.blocks.append(("h", level, text))
    def p(self, text): self.blocks.append(("p", text))
    def table(self, headers, rows): self.blocks.append(("table", headers, rows))
    def img(self, name, alt): self.blocks.append(("img", name, alt))
    def code(self, text): self.blocks.append(("code", text))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                cell = lambda v: _fmt(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
                out.append("\n".join(["| " + " | ".join(b[1]) + " |",
                                      "|" + "---|" * len(b[1]),
                                      *("| " + " | ".join(cell(v) for v in row) + " |"
                                        for row in b[2])]))
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})")
            elif b[0] == "code":
                out.append("```\n" + b[1] + "\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        e = html.escape
        out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
               "<style>body{font-family:sans-serif;max-width:70em;margin:auto}"
               "table{border-collapse:collapse}td,th{border:1px solid #aaa;padding:2px 6px}"
               "pre{background:#f4f4f4;padding:6px;overflow-x:auto}</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in b[1]) + "</tr>")
                out.extend("<tr>" + "".join(f"<td>{e(_fmt(v))}</td>" for v in row) + "</tr>"
                           for row in b[2])
                out.append("</table>")
            elif b[0] == "img":
                out.append(f"<p><img src='{e(b[1])}' alt='{e(b[2])}'></p>")
            elif b[0] == "code":
                out.append(f"<pre>{e(b[1])}</pre>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------- plots

def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(_fmt(p) for p in parts if p is not None))


def _save(fig, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")


def _figure(title: str, xlabel: str, ylabel: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _group(rows, keys):
    groups = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in keys)].append(row)
    return sorted(groups.items(), key=lambda kv: tuple(str(v) for v in kv[0]))


def _rerun_block(doc: _Doc, rows) -> None:
    cmds = sorted({r["command"] for r in rows})
    doc.p("Commands to rerun this figure:")
    doc.code("\n".join(cmds))


def _collective_section(doc: _Doc, rows, out: Path) -> None:
    doc.h(2, "Collectives")
    doc.p("Median time of the slowest rank per repetition (seconds), quartiles, speedup over "
          "dense, bytes sent per rank, and the cost model and reference times where recorded.")
    headers = ["P", "nodes", "N", "density", "pattern", "dtype", "algorithm", "median s",
               "q25 s", "q75 s", "reps", "speedup vs dense", "sent bytes/rank", "model s",
               "RS+AG s", "floor s"]
    cols = ["P", "nodes", "N", "density", "pattern", "dtype", "algorithm", "median", "q25", "q75",
            "n", "speedup", "sent_per_rank", "model_seconds", "rsag_seconds", "floor_seconds"]
    doc.table(headers, [[r[c] for c in cols] for r in rows])
    with open(out / "collectives.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols + ["source", "command"])
        writer.writeheader()
        writer.writerows({c: r[c] for c in cols + ["source", "command"]} for r in rows)
    doc.p("The same rows at full precision: collectives.csv.")

    from sparcml import DENSE_BASELINE

    sparse = [r for r in rows if r["algorithm"] != DENSE_BASELINE and r["speedup"] is not None]
    if sparse:
        doc.h(3, "Speedup over dense vs P")
        for (n, dens, pat), grp in _group(sparse, ("N", "density", "pattern")):
            fig, ax = _figure(f"N={_fmt(n)} density={_fmt(dens)} pattern={_fmt(pat)}",
                              "P (ranks)", "speedup over dense")
            for (alg,), g in _group(grp, ("algorithm",)):
                g = sorted(g, key=lambda r: r["P"])
                ax.plot([r["P"] for r in g], [r["speedup"] for r in g], "o-", label=alg)
            ax.axhline(1.0, color="gray", lw=1, ls="--")
            ax.legend(fontsize=8)
            name = f"speedup-vs-P-{_slug('N', n, 'd', dens, pat)}.png"
            _save(fig, out / name)
            doc.img(name, f"speedup over dense vs P, N={_fmt(n)}, density={_fmt(dens)}")
            _rerun_block(doc, grp)

    timed = [r for r in rows if r["density"] is not None]
    if timed:
        doc.h(3, "Time vs density")
        for (p, n, pat), grp in _group(timed, ("P", "N", "pattern")):
            fig, ax = _figure(f"P={_fmt(p)} N={_fmt(n)} pattern={_fmt(pat)}", "density",
                              "median time (s)")
            for (alg,), g in _group(grp, ("algorithm",)):
                g = sorted(g, key=lambda r: r["density"])
                ax.plot([r["density"] for r in g], [r["median"] for r in g], "o-", label=alg)
            if all(r["density"] > 0 for r in grp):
                ax.set_xscale("log")
            if all(r["median"] > 0 for r in grp):
                ax.set_yscale("log")
            ax.legend(fontsize=8)
            name = f"time-vs-density-{_slug('P', p, 'N', n, pat)}.png"
            _save(fig, out / name)
            doc.img(name, f"time vs density, P={_fmt(p)}, N={_fmt(n)}")
            _rerun_block(doc, grp)

    modelled = [r for r in timed if any(r[k] is not None for k, _, _ in _REFERENCES)]
    if modelled:
        doc.h(3, "Measured vs cost model vs lower bound")
        for (p, n, pat), grp in _group(modelled, ("P", "N", "pattern")):
            fig, ax = _figure(f"P={_fmt(p)} N={_fmt(n)} pattern={_fmt(pat)}: measured (solid), "
                              "model (dashed)", "density", "time (s)")
            fig.set_size_inches(8.4, 4.6)
            for i, ((alg,), g) in enumerate(_group(grp, ("algorithm",))):
                g = sorted(g, key=lambda r: r["density"])
                color = f"C{i % 10}"
                ax.plot([r["density"] for r in g], [r["median"] for r in g], "o-", color=color,
                        label=alg)
                pts = [(r["density"], r["model_seconds"]) for r in g
                       if r["model_seconds"] is not None]
                if pts:
                    ax.plot(*zip(*pts), "--", color=color)
            # the references depend on the inputs, not the algorithm: one black line each
            for key, label, style in _REFERENCES[1:]:
                by_density = {r["density"]: r[key] for r in grp if r[key] is not None}
                if by_density:
                    xs = sorted(by_density)
                    ax.plot(xs, [by_density[x] for x in xs], style, color="black", label=label)
            if all(r["density"] > 0 for r in grp):
                ax.set_xscale("log")
            if all(r["median"] > 0 for r in grp):
                ax.set_yscale("log")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            name = f"model-vs-measured-{_slug('P', p, 'N', n, pat)}.png"
            _save(fig, out / name)
            doc.img(name, f"measured vs model, P={_fmt(p)}, N={_fmt(n)}")
            _rerun_block(doc, grp)


def _epochs_section(doc: _Doc, records, out: Path) -> None:
    runs = [r for r in records if r.get("status") == "ok"
            and isinstance((r.get("metrics") or {}).get("epochs"), list)
            and r["metrics"]["epochs"]]
    if not runs:
        return
    doc.h(2, "Training runs")
    rows = []
    for r in runs:
        last = r["metrics"]["epochs"][-1]
        rows.append([r["app"], r.get("algorithm"), _compression(r), r.get("P"),
                     r.get("density"), len(r["metrics"]["epochs"]), last.get("loss"),
                     last.get("train_accuracy"), last.get("test_accuracy"),
                     last.get("wall_seconds")])
    doc.table(["app", "algorithm", "compression", "P", "density", "epochs", "final loss",
               "train accuracy", "test accuracy", "wall s"], rows)
    for (app,), grp in _group([{"app": r["app"], "rec": r} for r in runs], ("app",)):
        metric = next((m for m in ("test_accuracy", "train_accuracy", "loss")
                       if any(m in e for g in grp for e in g["rec"]["metrics"]["epochs"])), None)
        if metric is None:
            continue
        fig, ax = _figure(f"{app}: {metric} vs wall time", "wall time (s)", metric)
        for g in grp:
            r = g["rec"]
            pts = [(e["wall_seconds"], e[metric]) for e in r["metrics"]["epochs"]
                   if e.get("wall_seconds") is not None and e.get(metric) is not None]
            if pts:
                ax.plot(*zip(*pts), "o-", label=f"{r.get('algorithm')} P={r.get('P')} "
                                                f"d={_fmt(r.get('density'))} {_compression(r)}")
        ax.legend(fontsize=8)
        name = f"{metric}-vs-time-{_slug(app)}.png"
        _save(fig, out / name)
        doc.img(name, f"{app} {metric} vs wall time")
        _rerun_block(doc, [{"command": rerun_command(g["rec"])} for g in grp])


def _compression(record) -> str:
    """How a training run compressed: the dense baseline, QSGD bits, error feedback off."""
    cfg = record.get("config") or {}
    if cfg.get("dense"):  # the --dense flag of the training apps
        return "dense baseline"
    parts = []
    if cfg.get("bits"):
        parts.append(f"q{cfg['bits']}")
    if cfg.get("no_error_feedback") or cfg.get("error_feedback") is False:
        parts.append("no EF")
    return " ".join(parts) or "-"


def _environment_section(doc: _Doc, records) -> None:
    """One table per distinct software/hardware environment, then one row per run in it
    (records file, Slurm job, hosts, emulated network), so a sweep does not repeat itself."""
    doc.h(2, "Environment")
    seen: dict[str, list] = {}
    for r in records:
        env = r.get("environment") or {}
        mpi = (env.get("mpi_library") or "").splitlines()
        desc = {"python": env.get("python"), "platform": env.get("platform"),
                "cpu": f"{env.get('cpu')} ({env.get('cpus')} cpus)",
                "mpi": mpi[0] if mpi else None, "git commit": (env.get("git_commit") or "")
                + (" (with uncommitted changes)" if env.get("git_dirty") else ""),
                "packages": " ".join(f"{k}=={v}" for k, v in
                                     sorted((env.get("packages") or {}).items()))}
        run = (r["_source"].rsplit(":", 1)[0], (env.get("slurm") or {}).get("SLURM_JOB_ID"),
               ",".join(sorted(set(env.get("hosts") or []))), env.get("emulated_network"))
        seen.setdefault(repr(sorted(desc.items())), [desc, set()])[1].add(run)
    for i, (desc, runs) in enumerate(seen.values(), 1):
        doc.h(3, f"Environment {i}")
        doc.table(["item", "value"], [[k, v] for k, v in desc.items()])
        doc.table(["records file", "slurm job", "hosts", "emulated network"],
                  sorted(runs, key=lambda x: tuple(str(v) for v in x)))


def build_report(paths: Sequence[str | Path], out_dir: str | Path, *,
                 title: str = "SparCML results") -> tuple[Path, list[RecordProblem]]:
    """Write the report for the records in ``paths`` into ``out_dir``.

    Returns the path of ``report.md`` and the skipped lines. Raises RecordError when a path is
    missing or no valid record was found (the problems are in the message).
    """
    records, problems = read_records(paths)
    if not records:
        detail = "".join(f"\n  {p}" for p in problems[:20])
        raise RecordError(f"no valid records in {', '.join(map(str, paths))}{detail}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = _Doc()
    doc.h(1, title)
    ok = sum(r["status"] == "ok" for r in records)
    doc.p(f"{len(records)} records ({ok} ok, {len(records) - ok} failed) from "
          f"{', '.join(map(str, paths))}; {len(problems)} lines skipped.")
    if problems:
        doc.h(2, "Skipped lines")
        doc.p("These lines are corrupt or partial and were left out of every table and plot.")
        doc.code("\n".join(map(str, problems)))
    failed = [r for r in records if r["status"] == "failed"]
    if failed:
        doc.h(2, "Failed runs")
        doc.table(["app", "P", "source", "error"],
                  [[r["app"], r.get("P"), r["_source"], r["error"].splitlines()[0]]
                   for r in failed])
        for r in failed:
            doc.p(f"{r['_source']} ({rerun_command(r)}):")
            doc.code(r["error"])
    rows = collective_rows(records)
    if rows:
        _collective_section(doc, rows, out)
    _epochs_section(doc, records, out)
    _environment_section(doc, records)
    doc.h(2, "Commands to rerun")
    commits = sorted({(r.get("environment") or {}).get("git_commit") or "" for r in records} - {""})
    if commits:
        doc.p("At git commit(s) " + ", ".join(commits) + ":")
    doc.code("\n".join(sorted({rerun_command(r) for r in records})))
    md = out / "report.md"
    md.write_text(doc.markdown())
    (out / "report.html").write_text(doc.html(title))
    return md, problems


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sparc-report", description="Turn result records into a "
                                "Markdown + HTML report with tables, plots, environment and the "
                                "commands to rerun.")
    p.add_argument("results", nargs="+", help="records files (.jsonl) or directories of them")
    p.add_argument("-o", "--output", required=True, help="report directory (created)")
    p.add_argument("--title", default="SparCML results")
    p.add_argument("--strict", action="store_true",
                   help="exit non-zero when any line had to be skipped")
    args = p.parse_args(argv)
    try:
        md, problems = build_report(args.results, args.output, title=args.title)
    except RecordError as exc:
        print(f"sparc-report: {exc}", file=sys.stderr)
        return 2
    for prob in problems:
        print(f"sparc-report: skipped {prob}", file=sys.stderr)
    print(md)
    return 1 if problems and args.strict else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
