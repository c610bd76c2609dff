"""Result records: one JSON object per line, appended atomically, with the environment captured.

Schema (every app and ``sparc-bench`` writes the same top-level keys):

``schema`` (int, currently 1), ``app`` (str), ``status`` ("ok" or "failed"), ``time`` (ISO 8601
UTC), ``algorithm`` (str or None), ``P`` (ranks), ``nodes``, ``ranks_per_node``, ``N``
(dimension, or None), ``density`` (float or None), ``timings`` (dict of name -> {"median",
"min", "max", "q25", "q75", "n"} in seconds), ``metrics`` (dict), ``bytes`` (dict), ``config``
(the full configuration, JSON-able), ``environment`` (see :func:`capture_environment`),
``error`` (str, only when ``status == "failed"``).

Conventions the report (:mod:`sparcapps.report`) understands, all optional:

- ``config["pattern"]``: the microbenchmark's overlap pattern; ``config["dtype"]``.
- ``metrics["speedup_over_dense"]``: dense median time / this record's median time.
- ``metrics["model"]``: ``{"predicted_s", "floor_s", "rs_ag_s", ...}``, the cost model's
  prediction and the two reference times of DESIGN 3.7 (lower bound; reduce-scatter + allgather
  volume) at the calibrated bandwidth, as ``sparc-bench`` writes them; flat
  ``metrics["model_seconds"]``, ``["floor_seconds"]``, ``["rsag_seconds"]`` are read too.
- ``metrics["epochs"]``: the apps' per-epoch list of dicts with ``epoch``, ``wall_seconds``
  (since the start of training) and any of ``loss``, ``train_accuracy``, ``test_accuracy``.

- ``simulated`` (True) and ``network`` (the network spec): a record of ``sparc-bench
  --simulate``, computed from the cost model instead of measured; the report draws it beside
  the measured records with its own marker. ``compute`` says how a simulated rank's compute
  was charged (``"model"``: calibrated rates, ``"measured"``: thread time, ``"given"``: a
  fixed step time); with ``"model"``, ``sim_rates`` holds the rates charged and when they
  were measured (:func:`sparcml.sim.rates_in_use`).
- ``environment["submitted"]`` (``{"sweep": line, "sbatch": line}``) and
  ``environment["launcher"]`` (``"mpiexec"``, ``"srun"`` or None): the command that made the
  record at the level the user ran it; the report's rerun commands come from them.

A failed run leaves a record too: ``status == "failed"`` and ``error`` saying what went wrong
(``sparc-jobs run`` writes one when the launched command exits non-zero or is killed).

Reading: :func:`read_records` parses files of records, reporting every corrupt or partial line
with its file and line number and skipping it, never averaging it in.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import numpy as np

from sparcapps.output_paths import write_with_fallback

__all__ = ["SCHEMA_VERSION", "STATUSES", "RecordError", "RecordProblem", "summarize",
           "make_record", "append_record", "capture_environment", "read_records",
           "read_records_or_exit", "iter_record_files", "modeled_compute"]

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed")
_REQUIRED = ("schema", "app", "status")


class RecordError(ValueError):
    """A record that does not follow the schema, or a records file that cannot be read."""


class RecordProblem(NamedTuple):
    """One line of a records file that was skipped: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"

_PACKAGES = ("sparcml", "numpy", "numba", "mpi4py", "mpich", "scipy", "h5py", "scikit-learn",
             "torch")


def summarize(samples: Iterable[float]) -> dict[str, float]:
    """Median and spread of repeated measurements (seconds)."""
    arr = np.asarray(list(samples), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("summarize: no samples")
    q25, med, q75 = np.percentile(arr, [25, 50, 75])
    return {"median": float(med), "min": float(arr.min()), "max": float(arr.max()),
            "q25": float(q25), "q75": float(q75), "n": int(arr.size)}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git_commit() -> str | None:
    return _git("rev-parse", "HEAD") or None


def _git_dirty() -> bool | None:
    """Whether tracked files differ from the commit (the commit alone does not reproduce it)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


# the command the user ran, when it was not the app itself (jobs/*.sbatch, sparc-jobs sweep)
_SUBMIT_VARS = {"sweep": "SPARC_SUBMIT_SWEEP", "sbatch": "SPARC_SUBMIT_SBATCH"}
# how the ranks were started: a variable each launcher sets in its processes
_LAUNCHER_VARS = (("PMI_SIZE", "mpiexec"), ("PMIX_RANK", "mpiexec"),
                  ("OMPI_COMM_WORLD_SIZE", "mpiexec"), ("SLURM_STEP_ID", "srun"))


def capture_environment(comm=None) -> dict[str, Any]:
    """Package versions, MPI library, hosts, CPU model, git commit, Slurm job id, command line,
    and the emulated network (``jobs/emulate.sh``) when there is one.

    The command that made the run, at the level the user ran it: ``command`` (the app's argv),
    ``launcher`` (``"mpiexec"`` or ``"srun"`` when a launcher started the ranks, None for a
    plain command), and ``submitted`` (``{"sbatch": line, "sweep": line}``, from
    ``SPARC_SUBMIT_SBATCH`` / ``SPARC_SUBMIT_SWEEP``, which ``sparc-jobs sweep`` and the
    ``jobs/*.sbatch`` templates set).

    Collective when ``comm`` is given (every rank must call; host names are gathered).
    """
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "packages": versions,
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
        "command": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "slurm": {k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST",
                                             "SLURM_NNODES", "SLURM_NTASKS", "SLURM_CLUSTER_NAME")
                  if k in os.environ},
    }
    if os.environ.get("SPARC_EMULATED_NET"):  # set by jobs/emulate.sh
        env["emulated_network"] = os.environ["SPARC_EMULATED_NET"]
    submitted = {key: os.environ[var] for key, var in _SUBMIT_VARS.items()
                 if os.environ.get(var)}
    if submitted:
        env["submitted"] = submitted
    env["launcher"] = next((name for var, name in _LAUNCHER_VARS if var in os.environ), None)
    host = socket.gethostname()
    if comm is not None:
        # MPI only for a communicator: sparc-report reads records without it
        from mpi4py import MPI

        # Open MPI's string ends in a NUL byte, which would land in reports
        env["mpi_library"] = MPI.Get_library_version().replace("\0", "").strip()
        env["mpi_vendor"] = list(map(str, MPI.get_vendor()))
        env["hosts"] = comm.allgather(host)
    else:
        env["hosts"] = [host]
    return env


def make_record(app: str, *, config: dict, environment: dict, algorithm: str | None = None,
                P: int = 1, N: int | None = None, density: float | None = None,
                timings: dict | None = None, metrics: dict | None = None,
                bytes: dict | None = None, status: str = "ok", error: str | None = None
                ) -> dict[str, Any]:
    """Build one record of the common schema (see module docstring).

    ``status`` is ``"ok"`` or ``"failed"``; a failed record must say why (``error``), so a
    failure can never be mistaken for a measurement. Raises :class:`RecordError` otherwise.
    """
    if status not in STATUSES:
        raise RecordError(f"status must be one of {STATUSES}, got {status!r}")
    if status == "failed" and not error:
        raise RecordError("a failed record needs error=... saying what went wrong")
    hosts = environment.get("hosts") or []
    nodes = len(set(hosts)) or 1
    rec: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "app": app,
        "status": status,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "algorithm": algorithm,
        "P": int(P),
        "nodes": nodes,
        "ranks_per_node": int(P) // nodes if P % nodes == 0 else None,
        "N": None if N is None else int(N),
        "density": None if density is None else float(density),
        "timings": timings or {},
        "metrics": metrics or {},
        "bytes": bytes or {},
        "config": config,
        "environment": environment,
    }
    if error is not None:
        rec["error"] = error
    return rec


def append_record(path: str | os.PathLike, record: dict) -> Path:
    """Append ``record`` as one JSON line with a single ``write`` on an ``O_APPEND`` descriptor;
    returns the file written.

    One write of one complete line: concurrent writers (several jobs, one file) never interleave
    partial lines, and a crash leaves either the whole line or nothing. When ``path`` cannot be
    written (its directory vanished or became read-only during the run, the disk is full), the
    line goes to :func:`sparcapps.output_paths.fallback_path` instead, with one line on stderr
    saying where: a finished run's record is never lost to a traceback.
    """
    line = (json.dumps(_json_safe(record), sort_keys=True, allow_nan=False) + "\n").encode()
    return write_with_fallback(path, lambda p: _append_line(p, line),
                               prog=Path(sys.argv[0]).name or "sparcapps", what="record")


def _json_safe(obj):
    """``obj`` with every NaN or infinite float replaced by None: records stay valid JSON
    (``NaN`` / ``Infinity`` are not JSON, and other readers refuse them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return _json_safe(obj.item())
    return obj


def _append_line(path: Path, line: bytes) -> None:
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):  # pragma: no cover - only on a full disk
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_record_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expand ``paths``: files as given, directories to their ``*.jsonl`` files (recursively,
    sorted). Raises :class:`RecordError` naming a path that does not exist."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.rglob("*.jsonl")))
        elif p.exists():
            out.append(p)
        else:
            raise RecordError(f"no such records file or directory: {p}")
    return out


def modeled_compute(record: dict) -> str | None:
    """How a simulated record's compute was charged, in words; for calibrated rates, when
    each set of rates was measured (``sim_rates``), so that runs on different calibrations
    stand apart. None for a measured record."""
    if not record.get("simulated"):
        return None
    kind = record.get("compute")
    if kind != "model":
        return {"given": "a given time per step (--step-seconds)",
                "measured": "thread CPU time, measured"}.get(kind, "not recorded")
    rates = record.get("sim_rates")
    if not isinstance(rates, dict) or not rates:
        return "calibrated rates (when measured: not recorded)"
    return "calibrated rates: " + "; ".join(
        f"{name} measured {(entry or {}).get('measured') or '?'}"
        for name, entry in sorted(rates.items()))


def _check_record(obj: Any) -> str | None:
    """Why ``obj`` is not a record of this schema, or None when it is."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        return f"missing key(s) {', '.join(missing)}"
    if obj["schema"] != SCHEMA_VERSION:
        return f"schema version {obj['schema']!r}, this reader knows {SCHEMA_VERSION}"
    if obj["status"] not in STATUSES:
        return f"status {obj['status']!r} not in {STATUSES}"
    if obj["status"] == "failed" and not obj.get("error"):
        return "failed record without an error message"
    timings = obj.get("timings", {})
    if not isinstance(timings, dict) or any(
            not isinstance(t, dict) or "median" not in t for t in timings.values()):
        return "timings must map names to summaries with a median"
    if any(not _is_number(t["median"]) for t in timings.values()):
        return "timings' medians must be numbers"
    for key, ok, what in _FIELD_TYPES:
        if key in obj and not ok(obj[key]):
            return f"{key!r} must be {what}, got {obj[key]!r}"
    return None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or x is None


# the typed fields of a record (a line that parses but has, say, "P": "four" is skipped with
# this reason instead of failing the report of every other record)
_FIELD_TYPES = (
    ("app", lambda x: isinstance(x, str), "a string"),
    ("algorithm", lambda x: x is None or isinstance(x, str), "a string or null"),
    ("P", lambda x: _is_int(x) and x >= 1, "an integer >= 1"),
    ("nodes", lambda x: _is_int(x) and x >= 1, "an integer >= 1"),
    ("ranks_per_node", lambda x: x is None or (_is_int(x) and x >= 1),
     "an integer >= 1 or null"),
    ("N", lambda x: x is None or (_is_int(x) and x >= 0), "an integer >= 0 or null"),
    ("density", _is_number, "a number or null"),
    ("metrics", lambda x: isinstance(x, dict), "an object"),
    ("bytes", lambda x: isinstance(x, dict), "an object"),
    ("config", lambda x: isinstance(x, dict), "an object"),
    ("environment", lambda x: isinstance(x, dict), "an object"),
)


def read_records(paths: Iterable[str | os.PathLike], *, strict: bool = False
                 ) -> tuple[list[dict[str, Any]], list[RecordProblem]]:
    """Read every record of ``paths`` (files or directories of ``*.jsonl``).

    Returns ``(records, problems)``: the records in file order (each gets ``"_source"``,
    ``"path:line"``), and one :class:`RecordProblem` per skipped line -- not JSON, cut short (a
    last line without its newline: the writer died), or not a record of this schema. Blank lines
    are ignored. With ``strict`` the first problem raises :class:`RecordError` instead.
    """
    records: list[dict[str, Any]] = []
    problems: list[RecordProblem] = []
    for path in iter_record_files(paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise RecordError(f"cannot read records file {path}: {exc}") from exc
        lines = data.split(b"\n")
        for lineno, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            partial = lineno == len(lines)  # text after the last newline
            reason = None
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                reason = (f"partial line (no newline at end of file; writer interrupted?): {exc}"
                          if partial else f"not valid JSON: {exc}")
            except RecursionError:  # valid JSON nested deeper than Python's parser goes
                reason = "JSON nested too deeply to read (not a result record)"
            else:
                reason = _check_record(obj)
            if reason is not None:
                problem = RecordProblem(str(path), lineno, reason)
                if strict:
                    raise RecordError(str(problem))
                problems.append(problem)
                continue
            obj["_source"] = f"{path}:{lineno}"
            records.append(obj)
    return records, problems


def read_records_or_exit(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """:func:`read_records` for command-line reports: each skipped line is named on stderr, and
    a missing or unreadable path ends the program with status 2 and the reason."""
    try:
        records, problems = read_records(paths)
    except RecordError as exc:
        raise SystemExit(f"error: {exc}") from None
    for problem in problems:
        print(f"skipped {problem}", file=sys.stderr)
    return records
