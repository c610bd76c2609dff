"""Starting ranks on this machine with the MPI library's own ``mpiexec``, MPICH or Open MPI.

The two launchers differ where local runs meet them:

- **MPICH** (Hydra; also Intel MPI): runs as root and runs more ranks than cores as they are;
  ``-ppn R`` puts R ranks on each host; forwards SIGTERM and SIGUSR1 to the ranks.
- **Open MPI** (5.x ``prterun``, 4.x ``orterun``): refuses root without
  ``--allow-run-as-root`` and more ranks than cores without ``--oversubscribe``;
  ``--map-by ppr:R:node`` puts R ranks on each node; forwards SIGUSR1 but not SIGTERM (it ends
  the job at once, so a time-limit warning would be lost: :func:`stop_signal_for` says what to
  send instead). Each shared-memory window prints a harmless ``osc_ucx`` error line per rank
  where UCX finds no device; :func:`launch_env` sets ``OMPI_MCA_osc=^ucx`` unless it is set.

Which one a given ``mpiexec`` is comes from ``mpiexec --version`` (:func:`mpi_flavor`). The
tests (``tests/mpirun.py``), ``sparc-report --rerun``, ``sparc-jobs run`` and the scripts go
through this module; ``sparc-mpiexec -n P [--ranks-per-node R] COMMAND...`` runs COMMAND the
same way from a shell (``--print`` prints the line instead).
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from sparcapps.cli_args import make_parser, positive_int

__all__ = ["MPICH", "OPENMPI", "UNKNOWN", "LauncherError", "mpiexec_path", "mpi_flavor",
           "launch_flags", "per_node_flags", "launch_env", "mpiexec_command", "stop_signal_for",
           "main"]

MPICH, OPENMPI, UNKNOWN = "mpich", "openmpi", "unknown"
_MPIEXEC_NAMES = ("mpiexec", "mpirun", "mpiexec.hydra", "prterun", "orterun")


class LauncherError(RuntimeError):
    """No ``mpiexec`` was found, or it could not be run."""


def mpiexec_path(python: str | os.PathLike | None = None) -> str:
    """The ``mpiexec`` beside ``python`` (default: this interpreter; the venv's MPI wheel),
    else the one on PATH. Raises LauncherError when there is none."""
    here = Path(python or sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise LauncherError("no mpiexec found: install the [mpich] or [openmpi] extra, or an "
                            "MPI library")
    return found


@functools.lru_cache(maxsize=None)
def _version_text(mpiexec: str) -> str:
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LauncherError(f"cannot run {mpiexec} --version: {exc}") from exc
    return (proc.stdout + proc.stderr).replace("\0", "")


def mpi_flavor(mpiexec: str | None = None) -> str:
    """``"openmpi"``, ``"mpich"`` (Hydra: MPICH, Intel MPI, MVAPICH) or ``"unknown"``, from
    ``mpiexec --version`` (default: :func:`mpiexec_path`); cached per path."""
    text = _version_text(mpiexec or mpiexec_path())
    if any(word in text for word in ("Open MPI", "OpenRTE", "PRRTE")):
        return OPENMPI
    if "HYDRA" in text or "Hydra" in text:
        return MPICH
    return UNKNOWN


def launch_flags(flavor: str, *, oversubscribe: bool = True) -> list[str]:
    """Flags that make ``mpiexec`` of ``flavor`` start ranks here as Hydra does by default:
    as root, and (with ``oversubscribe``) more ranks than cores. Empty for MPICH."""
    if flavor != OPENMPI:
        return []
    flags = ["--oversubscribe"] if oversubscribe else []
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return flags


def per_node_flags(flavor: str, ranks_per_node: int) -> list[str]:
    """R ranks on each node: ``-ppn R`` (Hydra), ``--map-by ppr:R:node`` (Open MPI)."""
    if ranks_per_node < 1:
        raise ValueError(f"ranks per node must be positive, got {ranks_per_node}")
    if flavor == OPENMPI:
        return ["--map-by", f"ppr:{ranks_per_node}:node"]
    return ["-ppn", str(ranks_per_node)]


def launch_env(flavor: str, env: dict | None = None) -> dict:
    """``env`` (default ``os.environ``) plus what ``flavor`` needs here: for Open MPI,
    ``OMPI_MCA_osc=^ucx`` unless ``OMPI_MCA_osc`` is set (silences osc_ucx's error line per
    rank and shared-memory window where UCX finds no device; the windows use osc/sm)."""
    out = dict(os.environ if env is None else env)
    if flavor == OPENMPI:
        out.setdefault("OMPI_MCA_osc", "^ucx")
    return out


def mpiexec_command(nprocs: int, command: Sequence[str], *, per_node: int | None = None,
                    mpiexec: str | None = None, oversubscribe: bool = True) -> list[str]:
    """``mpiexec`` + the flavor's flags + ``-n nprocs`` (+ ranks per node) + ``command``."""
    if nprocs < 1:
        raise ValueError(f"the number of ranks must be positive, got {nprocs}")
    exe = mpiexec or mpiexec_path()
    flavor = mpi_flavor(exe)
    cmd = [exe, *launch_flags(flavor, oversubscribe=oversubscribe), "-n", str(nprocs)]
    if per_node is not None:
        cmd += per_node_flags(flavor, per_node)
    return cmd + list(command)


def stop_signal_for(command: Sequence[str], signum: int) -> int:
    """The signal to send to ``command`` so that its ranks get ``signum``'s meaning.

    Open MPI's ``mpiexec`` ends the job on SIGTERM instead of forwarding it; the apps stop
    with a checkpoint on SIGUSR1 as on SIGTERM, and every launcher forwards SIGUSR1. So SIGTERM
    to an Open MPI ``mpiexec`` becomes SIGUSR1; every other signal and command is unchanged.
    """
    if signum != signal.SIGTERM or not command:
        return signum
    exe = command[0]
    path = shutil.which(exe) if os.sep not in exe else exe
    if os.path.basename(exe) == "sparc-mpiexec":  # it becomes the mpiexec beside it
        beside = Path(path).parent / "mpiexec" if path else None
        path = str(beside) if beside and beside.exists() else shutil.which("mpiexec")
    elif os.path.basename(exe) not in _MPIEXEC_NAMES:
        return signum
    try:
        flavor = mpi_flavor(path) if path else UNKNOWN
    except LauncherError:
        flavor = UNKNOWN
    return signal.SIGUSR1 if flavor == OPENMPI else signum


def _parser() -> argparse.ArgumentParser:
    p = make_parser(
        "sparc-mpiexec", "Run COMMAND on P ranks with this environment's mpiexec (MPICH or Open "
        "MPI) and the flags it needs on this machine: as root, more ranks than cores "
        "(Open MPI: --allow-run-as-root, --oversubscribe; MPICH needs none).")
    p.add_argument("-n", type=positive_int, metavar="P", dest="ranks",
                   help="number of ranks (required unless --flavor)")
    p.add_argument("--ranks-per-node", type=positive_int, metavar="R",
                   help="ranks per node: -ppn R under MPICH, --map-by ppr:R:node under Open MPI "
                        "(which refuses more than R x nodes ranks)")
    p.add_argument("--no-oversubscribe", action="store_true",
                   help="under Open MPI, refuse more ranks than cores (its own default)")
    p.add_argument("--print", action="store_true", help="print the command line, run nothing")
    p.add_argument("--flavor", action="store_true",
                   help="print which MPI the mpiexec is (mpich, openmpi, unknown), run nothing")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                   help="the program and its arguments (a leading -- is dropped)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``sparc-mpiexec``: see :func:`_parser`. Replaces itself with ``mpiexec`` (its exit
    status is the job's); 2 for usage errors or no ``mpiexec``."""
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if args.flavor:
            print(mpi_flavor())
            return 0
        if args.ranks is None or not command:
            parser.error("needs -n P and a COMMAND")
        cmd = mpiexec_command(args.ranks, command, per_node=args.ranks_per_node,
                              oversubscribe=not args.no_oversubscribe)
        if args.print:
            print(shlex.join(cmd))
            return 0
        env = launch_env(mpi_flavor(cmd[0]))
    except LauncherError as exc:
        print(f"sparc-mpiexec: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)
    return 0  # pragma: no cover  (exec does not return)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
