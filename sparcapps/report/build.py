"""Assemble the report: summary, skipped lines, failed runs, the collective table and figures,
training runs, environments, and the commands to rerun, one block per group of figures made by
the same commands."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from sparcapps.records import RecordError, RecordProblem, modeled_compute, read_records

from .commands import command_of
from .doc import Doc
from .figures import Fig, collective_figures, speedup_text
from .fmt import count, fmt, kib, ms, percent
from .plotting import source_label
from .rows import REFERENCES, collective_rows
from .training import scaling_figures, training_figures, training_runs, training_table

__all__ = ["build_report", "build", "all_figures", "command_groups", "load"]

_CSV_COLS = ["P", "nodes", "N", "density", "pattern", "dtype", "algorithm", "series",
             "simulated", "network", "median", "q25", "q75", "n", "speedup", "speedup_lo",
             "speedup_hi", "sent_per_rank", "model_seconds", "rsag_seconds", "floor_seconds",
             "source"]


def load(paths: Sequence[str | Path]) -> tuple[list[dict], list[RecordProblem]]:
    """The records of ``paths``; RecordError when a path is missing or none is valid."""
    records, problems = read_records(paths)
    if not records:
        detail = "".join(f"\n  {p}" for p in problems[:20])
        raise RecordError(f"no valid records in {', '.join(map(str, paths))}{detail}")
    return records, problems


def all_figures(records) -> tuple[list[dict], list[dict], list[Fig]]:
    """Collective rows, training runs, and every figure they make, in report order."""
    rows = collective_rows(records)
    runs = training_runs(records)
    return rows, runs, collective_figures(rows) + training_figures(runs) + scaling_figures(runs)


def command_groups(figs: list[Fig]) -> dict[str, tuple]:
    """Figure id -> (group number, the group's commands): figures that share a command are in
    one group (connected components), so each command is listed once in the report."""
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for f in figs:
        for c in f.commands:
            parent[root(c)] = root(f.commands[0])
    numbers: dict = {}
    out = {}
    for f in figs:
        k = numbers.setdefault(root(f.commands[0]), len(numbers) + 1) if f.commands else 0
        out[f.id] = k
    cmds: dict[int, set] = {}
    for f in figs:
        cmds.setdefault(out[f.id], set()).update(f.commands)
    return {fid: (k, tuple(sorted(cmds[k], key=lambda c: c.line()))) for fid, k in out.items()}


def drop_constant(headers, table, candidates):
    """Columns among ``candidates`` with one value in every row, moved out of the table:
    returns the narrower headers and rows and the (header, value) pairs dropped."""
    keep, same = [], []
    for i, h in enumerate(headers):
        values = {str(row[i]) for row in table}
        if h in candidates and len(values) == 1 and table:
            same.append((h, table[0][i]))
        else:
            keep.append(i)
    return ([headers[i] for i in keep], [[row[i] for i in keep] for row in table], same)


def _collective_table(doc: Doc, rows, out: Path) -> None:
    doc.h(2, "Collectives")
    doc.p("Median time of the slowest rank per repetition and its quartiles (ms), the speedup "
          "over dense with its range from the quartiles, KiB sent per rank, and the cost model "
          "and reference times where recorded. Full precision: collectives.csv.")
    headers = ["P", "nodes", "N", "density", "pattern", "dtype", "configuration", "source",
               "median ms", "q25\u2013q75 ms", "reps", "speedup vs dense", "KiB sent / rank",
               "model ms", "RS+AG ms", "floor ms"]
    table = []
    for r in rows:
        table.append([r["P"], r["nodes"], count(r["N"]), percent(r["density"]), r["pattern"],
                      r["dtype"], r["series"], source_label(r["simulated"], r["network"]),
                      ms(r["median"]),
                      "" if r["q25"] is None else f"{ms(r['q25'])}\u2013{ms(r['q75'])}", r["n"],
                      "none (P = 1)" if r["P"] == 1 else speedup_text(r),
                      kib(r["sent_per_rank"]),
                      *(ms(r[k]) for k, _, _ in REFERENCES)])
    numeric = {"P", "nodes", "N", "density", "median ms", "q25\u2013q75 ms", "reps",
               "speedup vs dense", "KiB sent / rank", "model ms", "RS+AG ms", "floor ms"}
    if all(r["P"] == 1 for r in rows):
        doc.p("Every collective record here is at P = 1 (one rank): nothing is communicated, so "
              "no speedup over dense is meaningful (dense at P = 1 is a copy, a sparse "
              "algorithm a conversion) and this report claims none. Measure at P >= 2 for one.")
    elif any(r["P"] == 1 for r in rows):
        doc.p("At P = 1 nothing is communicated: no speedup over dense is given there.")
    if all(r["nodes"] == r["P"] for r in rows):  # one rank per node: nodes says nothing new
        headers, table = headers[:1] + headers[2:], [t[:1] + t[2:] for t in table]
        doc.p("One rank per node in every row.")
    headers, table, same = drop_constant(headers, table, {"nodes", "N", "pattern", "dtype",
                                                          "source", "reps", "model ms",
                                                          "RS+AG ms", "floor ms",
                                                          "speedup vs dense"})
    if same:
        doc.p("In every row: " + ", ".join(f"{h} {v}" if v != "" else f"no {h}"
                                           for h, v in same) + ".")
    doc.table(headers, table, numeric={i for i, h in enumerate(headers) if h in numeric})
    with open(out / "collectives.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(_CSV_COLS + ["command"])
        writer.writerows([fmt(r[c]) for c in _CSV_COLS] + [r["command"].line()] for r in rows)


def _figures(doc: Doc, figs: list[Fig], groups: dict, section: str) -> None:
    shown = [f for f in figs if f.section == section]
    if not shown:
        return
    doc.h(3, section)
    for f in shown:
        doc.img(f.id, f.png, f.svg, f.caption)
        # --rerun draws collective figures again; a training run is rerun by its commands
        how = (f"rerun with sparc-report RESULTS --rerun {f.id} -o DIR"
               if f.section != "Training runs" else
               "rerun its training runs with that group's commands (sparc-report --rerun "
               "redraws collective figures only)")
        doc.p(f"Figure {f.id} ({f.id}.png, {f.id}.svg): made by command group "
              f"{groups[f.id][0]} (below); {how}.")


def _environment_section(doc: Doc, records) -> None:
    """One table per distinct software/hardware environment, then one row per run in it
    (records file, Slurm job, hosts, emulated network), so a sweep does not repeat itself."""
    doc.h(2, "Environment")
    seen: dict[str, list] = {}
    for r in records:
        env = r.get("environment") or {}
        # older records may keep the NUL byte that ends Open MPI's library version
        mpi = (env.get("mpi_library") or "").replace("\0", "").splitlines()
        desc = {"python": env.get("python"), "platform": env.get("platform"),
                "cpu": f"{env.get('cpu')} ({env.get('cpus')} cpus)",
                "mpi": mpi[0] if mpi else ("none (simulated ranks in one process)"
                                            if r.get("simulated") else "not recorded"),
                "git commit": (env.get("git_commit") or "")
                + (" (with uncommitted changes)" if env.get("git_dirty") else ""),
                "packages": " ".join(f"{k}=={v}" for k, v in
                                     sorted((env.get("packages") or {}).items()))}
        if r.get("simulated"):  # modeled seconds compare only on one calibration
            desc["modeled compute"] = modeled_compute(r)
        run = (r["_source"].rsplit(":", 1)[0], (env.get("slurm") or {}).get("SLURM_JOB_ID"),
               ",".join(sorted(set(env.get("hosts") or []))),
               env.get("emulated_network") or (f"simulated: {r.get('network')}"
                                               if r.get("simulated") else None))
        seen.setdefault(repr(sorted(desc.items())), [desc, set()])[1].add(run)
    for i, (desc, runs) in enumerate(seen.values(), 1):
        doc.h(3, f"Environment {i}")
        doc.table(["item", "value"], [[k, v] for k, v in desc.items()])
        doc.table(["records file", "slurm job", "hosts", "network"],
                  sorted(runs, key=lambda x: tuple(str(v) for v in x)))


def build_report(paths: Sequence[str | Path], out_dir: str | Path, *,
                 title: str = "SparCML results") -> tuple[Path, list[RecordProblem]]:
    """Write ``report.md`` (with the PNG files it names), ``report.html`` (self-contained:
    images inline) and ``collectives.csv`` for the records in ``paths`` into ``out_dir``.

    Returns the path of ``report.md`` and the skipped lines. Raises RecordError when a path is
    missing or no valid record was found (the problems are in the message).
    """
    md, problems, _ = build(paths, out_dir, title=title)
    return md, problems


def build(paths: Sequence[str | Path], out_dir: str | Path, *, title: str = "SparCML results"
          ) -> tuple[Path, list[RecordProblem], list[Fig]]:
    """:func:`build_report`, also returning the figures (their ids, captions, descriptions)."""
    records, problems = load(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = Doc()
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
            doc.p(f"{r['_source']} ({command_of(r).line()}):")
            doc.code(r["error"])
    rows, runs, figs = all_figures(records)
    groups = command_groups(figs)
    if rows:
        _collective_table(doc, rows, out)
        for section in dict.fromkeys(f.section for f in figs if f.section != "Training runs"):
            _figures(doc, figs, groups, section)
    if runs:
        doc.h(2, "Training runs")
        doc.p("Final values and time to accuracy: the target is 99% of the dense baseline's "
              "best accuracy (same app, data set and P); dense time / time > 1 means faster "
              "to the same accuracy.")
        headers, table = training_table(runs)
        doc.table(headers, table, numeric={3, 4, 5, 6, 7, 8, 10, 11})
        _figures(doc, figs, groups, "Training runs")
    _environment_section(doc, records)
    _commands_section(doc, records, figs, groups)
    return doc.write(out, title), problems, figs


def _commands_section(doc: Doc, records, figs, groups) -> None:
    doc.h(2, "Commands to rerun")
    commits = sorted({(r.get("environment") or {}).get("git_commit") or "" for r in records}
                     - {""})
    doc.p(("At git commit(s) " + ", ".join(commits) + ". " if commits else "")
          + "Each command writes new records (a new --output file, or a new Slurm job "
          "directory), never into the records it reproduces.")
    for k, cmds in sorted(set(groups.values()), key=lambda kc: kc[0]):
        ids = [f.id for f in figs if groups[f.id][0] == k]
        doc.p(f"Group {k}: figure{'s' if len(ids) > 1 else ''} {', '.join(ids)}")
        doc.code("\n".join(c.with_output().line() for c in cmds))
    covered = {c for _, cmds in groups.values() for c in cmds}
    rest = sorted({command_of(r) for r in records} - covered, key=lambda c: c.line())
    if rest:
        doc.p("Records in no figure (tables, failed runs):")
        doc.code("\n".join(c.with_output().line() for c in rest))
