"""``sparc-jobs``: submit scaling sweeps of the ``jobs/*.sbatch`` templates, and run one job step
so that a failure leaves a record.

Subcommands:

``sparc-jobs sweep TEMPLATE --nodes 1 2 4 [--algorithms A B ...] [-- APP ARGS...]``
    One ``sbatch`` per (node count, algorithm group): ``--nodes`` is given to sbatch only (the
    template reads ``SLURM_NNODES`` / ``SLURM_NTASKS``), each ``--algorithms`` flag is one group
    (its space-separated names) passed on as the app's ``--algorithms`` (or ``--algorithm-flag
    FLAG``, e.g. ``--algorithm-flag --algorithm`` for the training apps). Prints ``JOBID<TAB>NODES<TAB>ALGORITHMS`` per job
    (``--dry-run`` prints the shell-quoted commands instead, each creating the log directory
    first, so that a line runs as pasted); ``--wait`` then waits for them all.
    Both are sparc-jobs' own flags, before ``--`` (after it they are refused: they would reach
    the app). Node counts above what ``sinfo`` lists are refused before anything is submitted
    (with ``--dry-run``, a warning). Slurm's logs go to ``RESULTS/%x-%j.out`` (``--results``,
    else ``$SPARC_RESULTS``, else ``./results``). The sweep hands its jobs ``SPARC_RESULTS``, the
    template variables and its own line through the environment; an ``--export`` that does not
    pass the whole environment (``--sbatch-arg=--export=NONE,SPARC_SETUP=FILE``, or
    ``SBATCH_EXPORT``) gets their names added (:func:`with_exports`).

``sparc-jobs run --output FILE [--script-args='ARGS'] -- COMMAND...``
    What a template executes: runs COMMAND (usually ``mpiexec ... sparc-bench ...``), passes its
    output through, forwards SIGTERM/SIGINT/SIGUSR1 (Slurm's warning before the time limit), and
    when COMMAND exits non-zero, is killed, cannot start, or exits 0 without appending a record to
    FILE, appends a ``status: "failed"`` record with the error (the last lines of its stderr).
    Exits with COMMAND's status. Open MPI's ``mpiexec`` ends the job on SIGTERM instead of
    forwarding it, so SIGTERM reaches it as SIGUSR1 (the apps stop with a checkpoint on either);
    the exit status is then still 143 (128 + SIGTERM), as under MPICH or ``srun``. Inside a job
    that ``sparc-jobs sweep`` did not submit, ``--script-args`` (the template's own arguments)
    rebuilds the job's ``sbatch`` line for the records (``SPARC_SUBMIT_SBATCH``); a sweep passes
    its own line and the job's.

``sparc-jobs wait JOBID...``
    Polls ``squeue`` until the jobs have left the queue (``sbatch --wait`` polls slowly), then
    prints each job's final state from ``scontrol``; non-zero exit when one did not complete.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from sparcapps.cli_args import (HelpFormatter, add_list_argument, add_timeout_argument,
                                deprecation_note, make_parser, positive_int)
from sparcapps.launcher import stop_signal_for
from sparcapps.records import append_record, capture_environment, make_record

__all__ = ["SweepJob", "SlurmError", "TEMPLATE_VARS", "env_prefix", "with_exports", "plan_sweep",
           "submit", "wait_jobs", "job_states", "cluster_nodes", "run_recorded", "main"]

_JOBID = re.compile(r"^(\d+)(?:;\S+)?$")


class SlurmError(RuntimeError):
    """A Slurm command failed or answered something unexpected."""


class SweepJob:
    """One job of a sweep: the sbatch argument list, and what it varies."""

    __slots__ = ("nodes", "algorithms", "argv", "job_id")

    def __init__(self, nodes: int, algorithms: str | None, argv: list[str]):
        # algorithms: the group for display, comma-joined (one column of the sweep's output)
        self.nodes, self.algorithms, self.argv = nodes, algorithms, argv
        self.job_id: str | None = None

    def command(self) -> str:
        """The job's submission as one shell-quoted line."""
        return shlex.join(self.argv)

    def __repr__(self) -> str:
        return f"SweepJob(nodes={self.nodes}, algorithms={self.algorithms!r}, job_id={self.job_id})"


def plan_sweep(template: str | os.PathLike, nodes: Sequence[int], *,
               algorithms: Sequence[str] | None = None, app_args: Sequence[str] = (),
               sbatch_args: Sequence[str] = (), results: str | os.PathLike | None = None,
               algorithm_flag: str = "--algorithms", sbatch: str = "sbatch") -> list[SweepJob]:
    """The ``sbatch`` command of each (node count, algorithm group) of the grid, not submitted.

    ``app_args`` follow the template (for ``jobs/app.sbatch`` they start with the app's CLI); the
    algorithm group comes last as ``algorithm_flag NAME...``. A group is a list of names (or one
    string of comma-separated names, the old form). With ``results`` the job's Slurm log
    goes to ``RESULTS/%x-%j.out``. Raises ValueError for an empty or non-positive grid.
    """
    template = Path(template)
    if not template.is_file():
        raise ValueError(f"no such sbatch template: {template}")
    if not nodes or any(int(n) < 1 for n in nodes):
        raise ValueError(f"--nodes needs positive node counts, got {list(nodes)}")
    groups: list[list[str] | None] = [_group(g) for g in algorithms] if algorithms else [None]
    stem = template.name.removesuffix(".sbatch")
    jobs = []
    for n in nodes:
        for names in groups:
            group = ",".join(names) if names else None
            tag = f"n{int(n)}" + (f"-{re.sub(r'[^A-Za-z0-9_.-]+', '+', group)}" if group else "")
            argv = [sbatch, "--parsable", f"--nodes={int(n)}", f"--job-name={stem}-{tag}"]
            if results is not None:
                argv.append(f"--output={Path(results) / '%x-%j.out'}")
            argv += [*sbatch_args, str(template), *app_args]
            if names:
                argv += [algorithm_flag, *names]
            jobs.append(SweepJob(int(n), group, argv))
    return jobs


def _group(group: str | Sequence[str]) -> list[str]:
    names = group.split(",") if isinstance(group, str) else [
        part for name in group for part in str(name).split(",")]
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError("an algorithm group needs at least one name")
    return names


# the environment the templates read: part of the command that made a job
TEMPLATE_VARS = ("SPARC_N_PER_RANK", "SPARC_GLOBAL_BATCH", "SPARC_LAUNCH", "SPARC_SETUP",
                 "SPARC_RESULTS")


# what a sweep hands each job through the environment: the template variables and the lines
# that made the job (sbatch passes the submitting environment on unless --export says otherwise)
_SWEEP_ENV = (*TEMPLATE_VARS, "SPARC_SUBMIT_SBATCH", "SPARC_SUBMIT_SWEEP")


def with_exports(sbatch_args: Sequence[str], names: Sequence[str], env: dict | None = None
                 ) -> list[str]:
    """``sbatch_args`` with an ``--export`` that does not pass the whole environment (``NONE``,
    ``NIL`` or a list of variables: given in ``sbatch_args``, else ``SBATCH_EXPORT`` of ``env``)
    extended by ``names``, which sbatch then exports with their values in its environment (a
    name that is not set there is skipped). Unchanged when the whole environment passes (no
    ``--export``, or ``ALL`` in it)."""
    env = os.environ if env is None else env
    args = list(sbatch_args)

    def extended(value: str) -> str:
        words = value.split(",")
        if any(w.strip().upper() == "ALL" for w in words):
            return value
        have = {w.split("=", 1)[0] for w in words}
        return ",".join([value, *[n for n in names if n not in have]])

    found = False
    for i, arg in enumerate(args):
        if arg.startswith("--export="):
            args[i] = "--export=" + extended(arg.split("=", 1)[1])
            found = True
        elif arg == "--export" and i + 1 < len(args):
            args[i + 1] = extended(args[i + 1])
            found = True
    if not found and env.get("SBATCH_EXPORT"):
        value = extended(env["SBATCH_EXPORT"])
        if value != env["SBATCH_EXPORT"]:
            args.append("--export=" + value)
    return args


def env_prefix(env: dict) -> str:
    """``VAR=value `` words for the template variables set in ``env`` (shell-quoted)."""
    return "".join(f"{k}={shlex.quote(env[k])} " for k in TEMPLATE_VARS if env.get(k))


def submit(jobs: Sequence[SweepJob], *, env: dict | None = None,
           sweep_command: str | None = None) -> list[SweepJob]:
    """Run each job's sbatch command; sets ``job_id``. Raises SlurmError with sbatch's message.

    Each job gets ``SPARC_SUBMIT_SBATCH`` (its own sbatch line, with the template variables of
    ``env`` in front) and, with ``sweep_command``, ``SPARC_SUBMIT_SWEEP`` in its environment:
    the records keep the command that made them (:func:`sparcapps.records.capture_environment`).
    """
    base = dict(os.environ if env is None else env)
    for job in jobs:
        job_env = {**base, "SPARC_SUBMIT_SBATCH": env_prefix(base) + job.command()}
        if sweep_command:
            job_env["SPARC_SUBMIT_SWEEP"] = sweep_command
        proc = subprocess.run(job.argv, capture_output=True, text=True, env=job_env, timeout=60)
        match = _JOBID.match(proc.stdout.strip())
        if proc.returncode != 0 or not match:
            raise SlurmError(f"sbatch failed (exit {proc.returncode}) for: {job.command()}\n"
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
        job.job_id = match.group(1)
    return list(jobs)


def cluster_nodes(sbatch_args: Sequence[str] = ()) -> int | None:
    """The number of nodes ``sinfo`` lists (of the partition given in ``sbatch_args``, if
    any), or None when it cannot tell (no ``sinfo``, an error, no node listed)."""
    partition = None
    for i, arg in enumerate(sbatch_args):
        if arg.startswith(("--partition=", "-p")) and arg not in ("-p", "--partition"):
            partition = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:]
        elif arg in ("-p", "--partition") and i + 1 < len(sbatch_args):
            partition = sbatch_args[i + 1]
    cmd = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = set(proc.stdout.split())
    return len(names) if proc.returncode == 0 and names else None


def job_states(job_ids: Sequence[str]) -> dict[str, str]:
    """Final (or current) state of each job, from ``scontrol show job`` (no accounting needed).

    Jobs Slurm has forgotten (older than MinJobAge) map to ``"UNKNOWN"``.
    """
    states = {}
    for jid in job_ids:
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(jid)], capture_output=True,
                              text=True, timeout=30)
        m = re.search(r"\bJobState=(\S+)", proc.stdout)
        states[str(jid)] = m.group(1) if m else "UNKNOWN"
    return states


def wait_jobs(job_ids: Sequence[str], *, timeout: float = 3600, poll: float = 0.5
              ) -> dict[str, str]:
    """Block until none of ``job_ids`` is pending or running; return :func:`job_states`.

    Raises TimeoutError (naming the jobs still queued) after ``timeout`` seconds.
    """
    ids = [str(j) for j in job_ids]
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SlurmError(f"cannot run squeue ({exc}); is Slurm installed and on PATH?") \
                from exc
        queued = set(proc.stdout.split()) & set(ids) if proc.returncode == 0 else set()
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
            raise SlurmError(f"squeue failed: {proc.stderr.strip()}")
        if not queued:
            return job_states(ids)
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs still queued after {timeout:.0f}s: {sorted(queued)}")
        time.sleep(poll)


def _ntasks_from(command: Sequence[str]) -> int:
    """P for a failure record: SLURM_NTASKS, else mpiexec's ``-n``/``-np``, else 1."""
    if os.environ.get("SLURM_NTASKS", "").isdigit():
        return int(os.environ["SLURM_NTASKS"])
    for flag, value in zip(command, command[1:]):
        if flag in ("-n", "-np") and value.isdigit():
            return int(value)
    return 1


def _app_from(command: Sequence[str]) -> str:
    for word in command:
        base = os.path.basename(word)
        if base.startswith("sparc-"):
            return base
    return os.path.basename(command[0]) if command else "unknown"


def _job_script(env: dict, words: list[str]) -> str:
    """The batch script of the Slurm job ``env["SLURM_JOB_ID"]`` as submitted (``scontrol``'s
    ``Command=``), relative to the submission directory when under it; ``TEMPLATE`` when Slurm
    cannot say. ``words``: the script's arguments, which ``Command=`` shows after the path,
    joined by spaces and unquoted (so the path is what precedes them, spaces and all)."""
    try:  # the multi-line form: Command= has a line of its own, so a path with spaces is whole
        proc = subprocess.run(["scontrol", "show", "job", env["SLURM_JOB_ID"]],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "TEMPLATE"
    m = re.search(r"^\s*Command=(.+?)\s*$", proc.stdout, re.M)
    if not m:
        return "TEMPLATE"
    command = m.group(1)
    shown = " ".join(words).strip()
    # the longest prefix, cut at a space, that is the script on disk: right whatever Slurm
    # made of the arguments (an argument with a newline breaks Command= over two lines)
    parts = command.split(" ")
    on_disk = next((" ".join(parts[:i]) for i in range(len(parts), 0, -1)
                    if os.path.isfile(" ".join(parts[:i]))), None)
    if on_disk is not None:
        command = on_disk
    elif shown and command.endswith(" " + shown):
        command = command[:-len(shown) - 1]
    script = Path(command.rstrip())
    try:
        return str(script.relative_to(env.get("SLURM_SUBMIT_DIR") or "/nonexistent"))
    except ValueError:
        return str(script)


def submission_command(script_args: str, env: dict | None = None) -> str | None:
    """The ``sbatch`` line that made the current Slurm job, rebuilt inside it: the template
    variables, the node count and tasks per node Slurm gave the job, the batch script and
    ``script_args`` (its arguments, already shell-quoted). None outside a Slurm job."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    argv = ["sbatch", f"--nodes={env.get('SLURM_JOB_NUM_NODES', env.get('SLURM_NNODES', 1))}"]
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    argv.append(f"--ntasks-per-node={per_node}" if per_node
                else f"--ntasks={env.get('SLURM_NTASKS', 1)}")
    words = bash_words(script_args)
    argv.append(_job_script(env, words))
    return env_prefix(env) + shlex.join(argv + words)


_ANSI_C = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def bash_words(text: str) -> list[str]:
    """The words of ``text`` as bash quotes them with ``${*@Q}`` ('...', $'...' with C escapes
    for tabs and newlines, backslash-escaped characters): what the sbatch templates pass as
    ``--script-args``. Re-quoted with :func:`shlex.join` they read back with
    :func:`shlex.split` (which does not know $'...'). Raises ValueError on an unterminated
    quote."""
    words: list[str] = []
    cur: list[str] | None = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n":
            if cur is not None:
                words.append("".join(cur))
                cur = None
            i += 1
            continue
        cur = [] if cur is None else cur
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated quote in {text!r}")
            cur.append(text[i + 1:end])
            i = end + 1
        elif text.startswith("$'", i):
            i += 2
            while i < n and text[i] != "'":
                if text[i] == "\\" and i + 1 < n:
                    esc = text[i + 1]
                    if esc in _ANSI_C:
                        cur.append(_ANSI_C[esc])
                        i += 2
                    elif esc == "x":
                        m = re.match(r"[0-9a-fA-F]{1,2}", text[i + 2:])
                        cur.append(chr(int(m.group(), 16)) if m else "\\x")
                        i += 2 + (len(m.group()) if m else 0)
                    elif esc in "01234567":
                        m = re.match(r"[0-7]{1,3}", text[i + 1:])
                        cur.append(chr(int(m.group(), 8)))
                        i += 1 + len(m.group())
                    else:
                        cur.append("\\" + esc)
                        i += 2
                else:
                    cur.append(text[i])
                    i += 1
            if i >= n:
                raise ValueError(f"unterminated $'...' in {text!r}")
            i += 1
        elif c == "\\" and i + 1 < n:
            cur.append(text[i + 1])
            i += 2
        else:
            cur.append(c)
            i += 1
    if cur is not None:
        words.append("".join(cur))
    return words


def run_recorded(command: Sequence[str], output: str | os.PathLike, *, app: str | None = None,
                 tail_lines: int = 30) -> int:
    """Run ``command``; on failure append a ``status: "failed"`` record to ``output``.

    Failure: a non-zero exit or a signal, a command that cannot be started (exit 127), or an exit
    0 that added nothing to ``output``. The record's ``error`` names the command, the exit status
    and the last ``tail_lines`` lines of its stderr; ``config`` holds the command line. Returns the
    exit status to pass on (negative signal numbers become 128 + signal, as in a shell). SIGTERM
    goes to an Open MPI ``mpiexec`` as SIGUSR1 (:func:`sparcapps.launcher.stop_signal_for`); its
    exit 128 + SIGUSR1 after that is passed on as 128 + SIGTERM.
    """
    command = list(command)
    if not command:
        raise ValueError("sparc-jobs run: no command given after --")
    output = Path(output)
    size_before = output.stat().st_size if output.exists() else 0
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    # decided before starting: the handler must not run mpiexec --version
    term_as = stop_signal_for(command, signal.SIGTERM)
    rc, error, signalled = _run_forwarding_signals(command, term_as, tail)
    if error is None:  # it ran
        if rc < 0:
            rc = 128 - rc
        if rc != 0:
            rc, error = _exit_error(command, rc, signalled, term_as)
        elif (output.stat().st_size if output.exists() else 0) == size_before:
            rc, error = 1, f"{shlex.join(command)} exited 0 but appended no record to {output}"
        else:
            return 0
    if tail:
        error += "\n--- last lines of stderr\n" + "\n".join(tail)
    record = make_record(app or _app_from(command),
                         config={"command": command, "exit_code": rc},
                         environment=capture_environment(None), P=_ntasks_from(command),
                         status="failed", error=error)
    append_record(output, record)
    print(f"sparc-jobs run: failure recorded in {output}", file=sys.stderr)
    return rc


def _run_forwarding_signals(command: list[str], term_as: int, tail) -> tuple[int, str | None,
                                                                             list[int]]:
    """Run ``command``, its stderr copied through and its last lines kept in ``tail``, with
    SIGTERM (sent on as ``term_as``), SIGINT and SIGUSR1 forwarded to it. Returns its exit
    status (negative: the signal that ended it), None or why it could not start (status 127),
    and the signals received."""
    signalled: list[int] = []
    started: list[subprocess.Popen] = []
    sent = [0]  # signals of ``signalled`` passed on so far

    def deliver():
        while started and sent[0] < len(signalled):
            signum = signalled[sent[0]]
            sent[0] += 1
            started[0].send_signal(term_as if signum == signal.SIGTERM else signum)

    def forward(signum, _frame):
        signalled.append(signum)
        deliver()  # nothing yet if the command is still starting: then right after

    # installed before the command starts: a signal in between must not end this process alone
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        try:
            proc = subprocess.Popen(command, stderr=subprocess.PIPE)
        except OSError as exc:
            return 127, f"cannot start {shlex.join(command)}: {exc}", signalled
        started.append(proc)
        deliver()

        def pump():
            for raw in proc.stderr:
                sys.stderr.buffer.write(raw)
                sys.stderr.buffer.flush()
                tail.append(raw.decode(errors="replace").rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            return proc.wait(), None, signalled
        finally:
            reader.join(timeout=10)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _exit_error(command: list[str], rc: int, signalled: list[int], term_as: int
                ) -> tuple[int, str]:
    """The status to pass on and the error of a command that exited ``rc`` != 0, naming the
    first signal forwarded to it (Open MPI's 128 + SIGUSR1 after a SIGTERM sent as SIGUSR1
    is passed on as 128 + SIGTERM)."""
    how = f"exited with status {rc}"
    if signalled:
        name = signal.Signals(signalled[0]).name
        if signalled[0] == signal.SIGTERM and term_as != signal.SIGTERM:
            name += f" (sent as {signal.Signals(term_as).name}: this mpiexec does not " \
                    "forward SIGTERM)"
            if rc == 128 + term_as:
                rc = 128 + signal.SIGTERM
        how += f" after {name} (time limit or scancel?)"
    return rc, f"{shlex.join(command)} {how}"


def _parser() -> argparse.ArgumentParser:
    p = make_parser(
        "sparc-jobs", "Submit sweeps of the jobs/*.sbatch templates; run a job "
        "step so that a failure leaves a record. Arguments after -- go to the template (sweep) "
        "or are the command (run).")
    sub = p.add_subparsers(dest="cmd", required=True)
    common = {"allow_abbrev": False, "formatter_class": HelpFormatter}  # Parser's error()

    s = sub.add_parser("sweep", help="submit a grid of node counts x algorithm groups",
                       description="Submit TEMPLATE once per node count and algorithm group. "
                                   "Arguments after -- go to the template (the app's options).",
                       **common)
    s.add_argument("template", help="an sbatch template, e.g. jobs/bench-strong.sbatch")
    add_list_argument(s, "--nodes", item_type=positive_int, required=True, metavar="N",
                      help="node counts (each given to sbatch --nodes, nowhere else)")
    s.add_argument("--algorithms", action="append", nargs="+", metavar="ALGORITHM",
                   help="one algorithm group per job (space-separated names); repeat the flag "
                        "for more groups (default: the app's own default, one job per node "
                        "count)")
    s.add_argument("--algorithm-flag", default="--algorithms", metavar="FLAG",
                   help="the app's option taking the group, e.g. --algorithm for the "
                        "training apps (sparc-linear, sparc-cnn)")
    s.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="extra sbatch option, e.g. --sbatch-arg=--partition=debug (repeatable)")
    s.add_argument("--results", metavar="DIR",
                   help="results root, exported to the jobs as SPARC_RESULTS (default: the "
                        "template's ./results); Slurm logs go there too")
    s.add_argument("--dry-run", action="store_true", help="print the sbatch commands only")
    s.add_argument("--wait", action="store_true", help="wait for the jobs and print their states")
    add_timeout_argument(s, default=24 * 3600, what="--wait", old="--timeout")

    r = sub.add_parser("run", help="run a command; a failure appends a failed record",
                       **common)
    r.add_argument("--output", required=True, metavar="FILE.jsonl",
                   help="the records file the command appends to (a failure appends one)")
    r.add_argument("--app", default=None, help="app name for the failure record")
    r.add_argument("--script-args", default=None, metavar="'ARGS'",
                   help="inside a template: its own arguments, shell-quoted (--script-args="
                        "\"${*@Q}\"); the records then keep the sbatch line that made the job "
                        "when it was not submitted by sparc-jobs sweep")

    w = sub.add_parser("wait", help="wait for Slurm jobs to leave the queue", **common)
    w.add_argument("job_ids", nargs="+", type=_job_id, help="Slurm job ids")
    add_timeout_argument(w, default=24 * 3600, what="the wait", old="--timeout")
    return p


def _job_id(text: str) -> str:
    """argparse type of a Slurm job id: ``123``, an array task ``123_4``, a het part
    ``123+1``."""
    if not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", text.strip()):
        raise argparse.ArgumentTypeError(f"not a Slurm job id: {text!r} (expected a number "
                                         f"such as 1234, or 1234_5 for an array task)")
    return text.strip()


def _print_states(states: dict[str, str]) -> int:
    for jid, state in states.items():
        print(f"{jid}\t{state}")
    return 0 if all(s == "COMPLETED" for s in states.values()) else 1


def _join_flag_values(argv: list[str], flag: str) -> list[str]:
    """``FLAG VALUE`` -> ``FLAG=VALUE``: the value of ``--algorithm-flag`` is itself an option
    name (``--algorithm``), which argparse would otherwise take for an option of its own."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag and i + 1 < len(argv):
            out.append(f"{flag}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    argv = _join_flag_values(argv, "--algorithm-flag")
    args = _parser().parse_args(argv)
    if args.cmd == "sweep" and args.algorithms and any(
            "," in name for group in args.algorithms for name in group):
        deprecation_note("sparc-jobs", "comma-separated --algorithms groups are read for now; "
                                       "write the names of a group space-separated")
    try:
        if args.cmd == "run":
            if args.script_args is not None and not os.environ.get("SPARC_SUBMIT_SBATCH"):
                line = submission_command(args.script_args)  # a plain sbatch of a template
                if line:
                    os.environ["SPARC_SUBMIT_SBATCH"] = line
                    os.environ.pop("SPARC_SUBMIT_SWEEP", None)
            return run_recorded(rest, args.output, app=args.app)
        if args.cmd == "wait":
            return _print_states(wait_jobs(args.job_ids, timeout=args.timeout_seconds))
        ours = [a for a in rest if a in ("--dry-run", "--wait")]
        if ours:
            raise ValueError(f"{ours[0]} after '--' would go to the app, not to sparc-jobs; "
                             f"put it before '--' (nothing submitted)")
        have = cluster_nodes(args.sbatch_arg)
        too_many = [n for n in args.nodes if have is not None and n > have]
        if too_many:
            problem = (f"the cluster has {have} node{'s' if have > 1 else ''} (sinfo), fewer "
                       f"than --nodes {' '.join(map(str, too_many))}: such jobs would wait in "
                       f"the queue forever")
            if not args.dry_run:
                raise ValueError(f"{problem} (nothing submitted); give --nodes up to {have}")
            print(f"sparc-jobs: warning: {problem}", file=sys.stderr)
        # Slurm's logs beside the records: never the submission directory itself
        logs = args.results or os.environ.get("SPARC_RESULTS") or "results"
        env = dict(os.environ)
        # the sweep as the user ran it (without --wait/--dry-run, which change no result)
        sweep_line = env_prefix(env) + shlex.join(
            ["sparc-jobs", *[a for a in argv if a not in ("--wait", "--dry-run")],
             *(["--", *rest] if rest else [])])
        if args.results is not None:
            env["SPARC_RESULTS"] = str(args.results)
        # under --export=NONE (or a list) the sweep's variables must be named to reach the job
        sbatch_args = with_exports(args.sbatch_arg,
                                   [k for k in _SWEEP_ENV if env.get(k) or "SUBMIT" in k], env)
        jobs = plan_sweep(args.template, args.nodes, algorithms=args.algorithms,
                          app_args=rest, sbatch_args=sbatch_args,
                          results=logs, algorithm_flag=args.algorithm_flag)
        if not args.dry_run:
            Path(logs).mkdir(parents=True, exist_ok=True)
        if args.dry_run:  # each line runs as pasted: Slurm fails a job whose log dir is missing
            for job in jobs:
                print(f"mkdir -p {shlex.quote(str(logs))} && {env_prefix(env)}{job.command()}")
            return 0
        for job in submit(jobs, env=env, sweep_command=sweep_line):
            print(f"{job.job_id}\t{job.nodes}\t{job.algorithms or '-'}", flush=True)
        if args.wait:
            return _print_states(wait_jobs([j.job_id for j in jobs],
                                           timeout=args.timeout_seconds))
        return 0
    except (ValueError, SlurmError, TimeoutError) as exc:
        print(f"sparc-jobs: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
