"""The command that made a record, at the level the user ran it, rewritten to write NEW records.

Levels, most specific first (:func:`sparcapps.records.capture_environment` keeps them):

- ``sweep``: the ``sparc-jobs sweep`` line (node counts, tasks per node, algorithm groups);
- ``sbatch``: the job's ``sbatch`` line (``--nodes``, ``--ntasks-per-node``, the template);
- ``emulate``: ``bash jobs/emulate.sh SPEC -- APP ...`` for a run on the emulated network;
- ``mpiexec``: ``mpiexec -n P APP ...``;
- ``plain``: the app's own command line (one process; ``sparc-bench --simulate`` too).

A rerun never appends to the records it reproduces: ``--output FILE`` becomes another file
(``FILE`` with ``.rerun`` before the suffix, or the file given), and the Slurm levels write a
new job directory anyway (under ``--results`` / ``SPARC_RESULTS`` when given). Nor does it
overwrite the other files the run wrote: a model (``--save-model``) or a checkpoint
(``--checkpoint``) named on the command line goes beside the new records (``rerun-NAME``), or
gets ``.rerun`` before its suffix when no new records file is given (always at the Slurm
levels: the path is the app's, relative to the submission directory, not the job's); a
resumed run, which checkpoints into its ``--resume`` file, gets a ``--checkpoint`` so named.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field as dc_field
from pathlib import Path

__all__ = ["Command", "command_of", "rerun_command"]

_ENV_WORD = r"^[A-Z_][A-Z0-9_]*="


@dataclass(frozen=True)
class Command:
    """A command line as argv plus the environment words in front of it."""

    level: str                      # sweep, sbatch, emulate, mpiexec, plain, failed, unknown
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = dc_field(default=())

    def line(self) -> str:
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in self.env)
        return prefix + shlex.join(self.argv) if self.argv else "(command not recorded)"

    def with_output(self, output: str | Path | None = None, *,
                    results: str | Path | None = None) -> "Command":
        """The same command writing new records: ``--output`` replaced (default: the old file
        with ``.rerun`` before its suffix); for the Slurm levels ``results`` as the results
        root (``--results`` of a sweep, ``SPARC_RESULTS`` of an sbatch line)."""
        argv = list(self.argv)
        env = dict(self.env)
        _name_resumed_checkpoint(argv)
        if self.level in ("sweep", "sbatch"):
            if results is not None and self.level == "sweep":
                _set_option(argv, "--results", str(results), before="--")
            elif results is not None:
                env["SPARC_RESULTS"] = str(results)
            for flag in _FILES_WRITTEN:  # the app's options: in the job, not in its directory
                _rename_option(argv, flag, None)
        elif argv:
            argv = [_OUTPUT if word == "-o" else word for word in argv]  # the same flag
            _set_option(argv, _OUTPUT, None if output is None else str(output))
            for flag in _FILES_WRITTEN:
                _rename_option(argv, flag, None if output is None else Path(output).parent)
        return Command(self.level, tuple(argv), tuple(env.items()))


def _set_option(argv: list[str], flag: str, value: str | None, *, before: str | None = None,
                rename=None) -> None:
    """Replace ``flag VALUE`` / ``flag=VALUE`` in ``argv`` (value None: ``rename`` of the old
    path, by default it with ``.rerun`` before its suffix); append it (before ``before`` when
    present) if missing and ``value`` is given."""
    rename = rename or _rerun_name
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            argv[i + 1] = value or rename(argv[i + 1])
            return
        if word.startswith(flag + "="):
            argv[i] = f"{flag}={value or rename(word.split('=', 1)[1])}"
            return
    if value is None:
        return
    at = argv.index(before) if before in argv else len(argv)
    argv[at:at] = [flag, value]


_OUTPUT = "--output"  # the apps' records file (short form -o)

# files an app writes besides its records, whose paths its command line names
_FILES_WRITTEN = ("--save-model", "--checkpoint")


def _name_resumed_checkpoint(argv: list[str]) -> None:
    """A resumed linear run checkpoints into its ``--resume`` file unless ``--checkpoint``
    names another: name it, so that the rerun's renaming moves it off the original's."""
    if any(w == "--checkpoint" or w.startswith("--checkpoint=") for w in argv):
        return
    resumed: list[str] = []

    def kept(path: str) -> str:  # _set_option finds the flag; its value stays as it is
        resumed.append(path)
        return path

    _set_option(argv, "--resume", None, rename=kept)
    if resumed:
        argv += ["--checkpoint", resumed[0]]


def _rename_option(argv: list[str], flag: str, directory: Path | None) -> None:
    """Point ``flag PATH`` / ``flag=PATH`` in ``argv``, if present, at a new file:
    ``directory/rerun-NAME``, or PATH with ``.rerun`` before its suffix (directory None)."""
    def renamed(path: str) -> str:
        p = Path(path)
        if directory is None:
            return str(p.with_name(p.stem + ".rerun" + p.suffix))
        return str(directory / ("rerun-" + p.name))

    _set_option(argv, flag, None, rename=renamed)


def _rerun_name(path: str) -> str:
    p = Path(path)
    return str(p.with_name(p.stem + ".rerun" + (p.suffix or ".jsonl")))


def _split_env(line: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    words = shlex.split(line)
    env = []
    while words and re.match(_ENV_WORD, words[0]):
        key, _, value = words.pop(0).partition("=")
        env.append((key, value))
    return tuple(words), tuple(env)


def command_of(rec: dict) -> Command:
    """The command that made ``rec``, at the highest level recorded (see the module doc)."""
    env = rec.get("environment") or {}
    submitted = env.get("submitted") or {}
    for level in ("sweep", "sbatch"):
        if submitted.get(level):
            argv, words = _split_env(submitted[level])
            if level == "sbatch":  # the template's results root is not part of the recipe
                words = tuple((k, v) for k, v in words if k != "SPARC_RESULTS")
            return Command(level, argv, words)
    argv = tuple(env.get("command") or ())
    if not argv:
        return Command("unknown", ())
    if argv[0] == "sparc-jobs":  # a failure record: the command sparc-jobs ran
        return Command("failed", tuple((rec.get("config") or {}).get("command") or argv))
    emulated = env.get("emulated_network")  # "4x1gbit,ppn=1", set by jobs/emulate.sh
    if emulated:
        spec, _, ppn = emulated.partition(",ppn=")
        opt = ("--ranks-per-node", ppn) if ppn and ppn != "1" else ()
        return Command("emulate", ("bash", "jobs/emulate.sh", *opt, spec, "--", *argv))
    # records from before "launcher" was kept were all started by mpiexec
    launched = env["launcher"] if "launcher" in env else "mpiexec"
    if rec.get("simulated") or not launched:
        return Command("plain", argv)
    return Command("mpiexec", (launched, "-n", str(rec.get("P", 1)), *argv))


def rerun_command(rec: dict, output: str | Path | None = None) -> str:
    """The line that reproduces ``rec`` into new records (see :meth:`Command.with_output`)."""
    return command_of(rec).with_output(output).line()
