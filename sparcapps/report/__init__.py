"""``sparc-report RESULTS... -o DIR``: a reproducibility report from result records.

Reads records (files or directories of ``*.jsonl``; see :mod:`sparcapps.records`), and writes
``DIR/report.md`` with its figures (PNG at 150 dpi and SVG), ``DIR/report.html`` (one
self-contained file: the figures inline as SVG) and ``DIR/collectives.csv``:

- skipped lines (corrupt or partial, by file:line) and failed runs, listed, never averaged in;
- collectives (records with an ``allreduce`` timing: ``sparc-bench``, measured or simulated):
  a table in ms and KiB; strong and weak scaling (time vs P, log2 axis, the dense line),
  speedup over dense vs P (log axis; none at P = 1, where nothing is communicated), time vs
  density, measured vs cost model; error bars from the quartiles only where a point has at
  least 5 repetitions; simulated records (``"simulated": true, "network": SPEC``) in a panel
  of their own beside the measured ones, never on one axis;
- training runs (``metrics["epochs"]``): accuracy vs wall time and time to accuracy against
  the dense baseline;
- the environments, and the commands that made each group of figures, at the level the user
  ran them (``sparc-jobs sweep``, ``sbatch``, ``mpiexec``), writing new records.

``sparc-report RESULTS --rerun FIGURE -o DIR`` runs one figure's commands again and puts the
old and new figure side by side (:mod:`sparcapps.report.rerun`).
"""

from __future__ import annotations

import sys
from typing import Sequence

from sparcapps.cli_args import add_deprecated_alias, add_timeout_argument, make_parser, output_dir
from sparcapps.output_paths import write_with_fallback
from sparcapps.records import RecordError

from .build import build_report
from .commands import command_of, rerun_command
from .rerun import ReportError, rerun_figure
from .rows import collective_rows

__all__ = ["build_report", "collective_rows", "command_of", "rerun_command", "rerun_figure",
           "ReportError", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    p = make_parser("sparc-report", "Turn result records into a Markdown + HTML report with "
                    "tables, figures, environment and the commands to rerun each group of "
                    "figures.")
    p.add_argument("results", nargs="+", help="records files (.jsonl) or directories of them")
    # --output is a file in every other tool: here the directory is --output-dir
    out = p.add_argument("-o", "--output-dir", dest="output", metavar="DIR", type=output_dir,
                         help="report directory (created; required)")
    add_deprecated_alias(p, "--output", out)
    p.add_argument("--title", default="SparCML results", help="the report's title")
    p.add_argument("--strict", action="store_true",
                   help="exit non-zero when any line had to be skipped")
    p.add_argument("--rerun", metavar="FIGURE",
                   help="run the commands of this figure (its id, as the report names it) "
                        "again into new records under the output directory, and report the "
                        "old and new figure side by side")
    add_timeout_argument(p, default=3600, what="each command of --rerun")
    args = p.parse_args(argv)
    if args.output is None:  # not argparse's required=: the deprecated --output counts too
        p.error("the following arguments are required: -o/--output-dir")
    try:
        if args.rerun:
            md, cmp = rerun_figure(args.results, args.rerun, args.output,
                                   timeout=args.timeout_seconds)
            print(md)
            return 0
        built = {}

        def build(out):
            built["md"], built["problems"] = build_report(args.results, out, title=args.title)

        write_with_fallback(args.output, build, prog="sparc-report", what="report")
        md, problems = built["md"], built["problems"]
    except RecordError as exc:
        print(f"sparc-report: {exc}", file=sys.stderr)
        return 2
    for prob in problems:
        print(f"sparc-report: skipped {prob}", file=sys.stderr)
    print(md)
    return 1 if problems and args.strict else 0

