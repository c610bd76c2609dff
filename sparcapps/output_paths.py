"""Output paths checked before the work starts, and results that survive a failed write.

A run of an hour that ends in ``IsADirectoryError`` has lost its result. Two defences, used by
every CLI that writes:

1. :func:`check_output_file` / :func:`check_output_dir` (and the argparse types
   :func:`sparcapps.cli_args.output_file` / :func:`~sparcapps.cli_args.output_dir` built on
   them) refuse, at parse time, a path that cannot be written: a file where a directory is
   needed (``-o FILE`` for a report directory, ``--output FILE/x.jsonl``), a directory where
   a file is needed, a missing directory under a file, no write permission or a read-only
   file system, each said as such (the permission bits, then a probe: an empty file made and
   removed in the directory, an existing file opened for appending, since root is told yes by
   the bits where the kernel refuses). They leave nothing: ``--help`` and a refused command
   leave no trace.
2. :func:`write_with_fallback`: when writing still fails at the end (the disk filled, the
   directory was removed or made read-only during the run), the result goes to a fallback
   file in the temporary directory and one line on stderr says where, instead of a traceback
   and nothing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["OutputPathError", "check_output_file", "check_output_dir", "fallback_path",
           "write_with_fallback"]


class OutputPathError(ValueError):
    """An output path that cannot be written; the message names the path and why."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")  # pragma: no cover - '/' always exists


def _probe_dir(directory: Path) -> OSError | None:
    """Create and remove one empty file in ``directory``: the error if that fails.
    ``os.access`` answers for the permission bits only; root is told yes where the kernel
    still refuses (``/sys``, a read-only bind mount of some kinds, a capability dropped from
    the effective set), and the run then found out at its end (issue 36)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".sparc-probe-", dir=directory)
    except OSError as exc:
        return exc
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:  # pragma: no cover - made but not removable: still writable
        pass
    return None


def _refusal(path: Path, permission: str) -> str:
    """Why ``path`` refuses writes that ``os.access`` denied: its file system mounted
    read-only (where the permission bits may well allow it), else ``permission``."""
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:  # pragma: no cover - vanished meanwhile: the bits' answer stands
        read_only = False
    return f"{path} is on a read-only file system" if read_only else permission


def _check_creatable_under(path: Path, target: Path, what: str) -> None:
    """``target`` (missing) would be created under ``path``'s nearest existing ancestor."""
    anchor = _nearest_existing(target.parent if target.parent != target else target)
    if not anchor.is_dir():
        raise OutputPathError(f"cannot write {what} {path}: {anchor} is a file, not a "
                              f"directory")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise OutputPathError(f"cannot write {what} {path}: " + _refusal(
            anchor, f"no permission to create files in {anchor}"))
    failed = _probe_dir(anchor)
    if failed is not None:
        raise OutputPathError(f"cannot write {what} {path}: cannot create files in {anchor} "
                              f"({failed.strerror or failed})")


def check_output_file(path: str | os.PathLike, what: str = "output file") -> Path:
    """``path`` as a Path, if a file can be written (or appended to) there; else
    :class:`OutputPathError` naming the problem. Creates nothing."""
    p = Path(path)
    if str(path) == "":
        raise OutputPathError(f"the {what} path is empty")
    if p.is_dir():
        raise OutputPathError(f"cannot write {what} {p}: it is a directory (give a file name)")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise OutputPathError(f"cannot write {what} {p}: "
                                  + _refusal(p, "no write permission"))
        if p.is_file():  # opened for appending and closed: its content is untouched
            try:
                os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
            except OSError as exc:
                raise OutputPathError(f"cannot write {what} {p}: {exc.strerror or exc}") \
                    from None
        return p
    _check_creatable_under(p, p, what)
    return p


def check_output_dir(path: str | os.PathLike, what: str = "output directory") -> Path:
    """``path`` as a Path, if it is a directory that can be written or can be created; else
    :class:`OutputPathError`. Creates nothing."""
    p = Path(path)
    if str(path) == "":
        raise OutputPathError(f"the {what} path is empty")
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"cannot write {what} {p}: it is a file, not a directory")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise OutputPathError(f"cannot write {what} {p}: "
                                  + _refusal(p, "no write permission"))
        failed = _probe_dir(p)
        if failed is not None:
            raise OutputPathError(f"cannot write {what} {p}: {failed.strerror or failed}")
        return p
    _check_creatable_under(p, p / "x", what)
    return p


def fallback_path(path: str | os.PathLike, prog: str) -> Path:
    """Where a result that could not be written to ``path`` goes instead: the temporary
    directory, named after the program, this process and the original name."""
    name = Path(path).name or "output"
    return Path(tempfile.gettempdir()) / f"{prog}-{os.getpid()}-{name}"


def write_with_fallback(path: str | os.PathLike, write: Callable[[Path], object], *,
                        prog: str, what: str = "result") -> Path:
    """``write(path)`` (creating ``path``'s missing parent directories first); if that raises
    :class:`OSError`, ``write(fallback_path(...))`` and one line on stderr naming both paths and
    the error. Returns the path written. An error of the fallback too propagates (with the
    first one as its context)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write(target)
        return target
    except OSError as exc:
        spare = fallback_path(target, prog)
        write(spare)
        print(f"{prog}: could not write the {what} to {target} ({exc.strerror or exc}); "
              f"wrote it to {spare} instead", file=sys.stderr, flush=True)
        return spare
