"""Verified, resumable downloads of catalog files.

For each file of a data set (see :mod:`.catalog`), :func:`fetch` downloads to
``DATA_HOME/NAME/FILENAME.part`` beside the target, resuming an earlier partial download with
an HTTP ``Range`` request (and retrying a dropped connection ``retries`` times within one
call), verifies the size and hash, then renames it to ``FILENAME``. A hash mismatch deletes the
download and raises :class:`~sparcapps.data.errors.ChecksumError` naming both hashes.

Resuming never splices two versions of a file: when a download starts, the server's
validators (ETag, Last-Modified, size) are kept in ``FILENAME.part.json``; a resumed request
sends ``If-Range``, and an answer that shows another version (a full 200 instead of 206, or a
different ETag, Last-Modified or total size) restarts from byte 0. A ``.part`` without a
recorded validator is restarted, never resumed.

Expected hash: the catalog's (``sha256:`` or ``md5:``), else the sha256 recorded in
``DATA_HOME/registry.lock`` by an earlier download. With neither, the first complete download
records its sha256 in the lock file, and :func:`fetch` reports that; later fetches verify
against it. "Complete" means its size matched one the server announced (Content-Length or
Content-Range total) or the catalog's ``size``: a download whose size nobody stated is refused
(a connection closed early looks like the end of the file), kept as a resumable ``.part``.
Lock file: one JSON object per line, ``{"key": "NAME/FILENAME", "sha256": ..., "size": ...}``
(lines of the older ``NAME/FILENAME SHA256 SIZE`` form are read too). Names are checked to be
plain file names, so nothing is written outside the data home.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from sparcapps.atomicfile import atomic_write

from .catalog import (DatasetInfo, FileEntry, check_plain_name, data_home as _data_home,
                      get_dataset)
from .errors import ChecksumError, DataFormatError, DownloadError

__all__ = ["fetch", "fetch_file", "file_hashes", "read_lock", "LOCK_NAME"]

LOCK_NAME = "registry.lock"
_BLOCK = 1 << 20
_USER_AGENT = "sparcml-data/0.1 (+https://github.com/)"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_META_SUFFIX = ".json"        # FILENAME.part.json: the validator of FILENAME.part
_LOCK_HEADER = ("# sha256 of first verified downloads, written by sparc-data fetch; one JSON "
                "object per line: key (NAME/FILENAME), sha256, size\n")


def file_hashes(path: str | Path, algorithms=("sha256",)) -> dict[str, str]:
    """Hex digests of the file at ``path`` for each algorithm."""
    hs = {a: hashlib.new(a) for a in algorithms}
    with open(path, "rb") as fh:
        while chunk := fh.read(_BLOCK * 4):
            for h in hs.values():
                h.update(chunk)
    return {a: h.hexdigest() for a, h in hs.items()}


def _lock_problem(path: Path, lineno: int, line: str) -> DataFormatError:
    return DataFormatError(path, lineno, "expected a JSON object {\"key\": \"NAME/FILENAME\", "
                           "\"sha256\": 64 hex digits, \"size\": bytes} (or the old "
                           f"'NAME/FILENAME SHA256 SIZE'), got {line[:120]!r}; fix or delete "
                           "the line (the file is then fetched and recorded again)")


def _parse_lock_line(line: str, path: Path, lineno: int) -> tuple[str, str, int]:
    """One entry of the lock file: ``(key, sha256, size)``, or DataFormatError."""
    if line.startswith("{"):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise _lock_problem(path, lineno, line) from None
        if not isinstance(rec, dict):
            raise _lock_problem(path, lineno, line)
        key, sha, size = rec.get("key"), rec.get("sha256"), rec.get("size")
    else:   # format 1; names may hold spaces, so split from the right
        parts = line.rsplit(None, 2)
        if len(parts) != 3 or not parts[2].isdigit():
            raise _lock_problem(path, lineno, line)
        key, sha, size = parts[0], parts[1].lower(), int(parts[2])
    ok = (isinstance(key, str) and key.count("/") == 1 and isinstance(sha, str)
          and _SHA256.fullmatch(sha) is not None and isinstance(size, int)
          and not isinstance(size, bool) and size >= 0)
    if not ok:
        raise _lock_problem(path, lineno, line)
    return key, sha, size


def read_lock(home: Path) -> dict[str, tuple[str, int]]:
    """``{"NAME/FILENAME": (sha256, size)}`` from the lock file (empty if absent).

    Reads both formats (JSON lines, and the old ``NAME/FILENAME SHA256 SIZE`` lines); a line
    that is neither raises :class:`DataFormatError` with its line number, never skipped (a
    skipped entry would let a tampered file through).
    """
    p = Path(home) / LOCK_NAME
    out: dict[str, tuple[str, int]] = {}
    if p.is_file():
        for lineno, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.strip()
            if line and not line.startswith("#"):
                key, sha, size = _parse_lock_line(line, p, lineno)
                out[key] = (sha, size)
    return out


def _record_lock(home: Path, key: str, sha256: str, size: int) -> Path:
    """Add or replace ``key`` in the lock file (atomically); returns its path."""
    p = home / LOCK_NAME
    entries = read_lock(home)
    entries[key] = (sha256, size)
    with atomic_write(p) as tmp:
        tmp.write_text(_LOCK_HEADER + "".join(
            json.dumps({"key": k, "sha256": h, "size": n}, ensure_ascii=False) + "\n"
            for k, (h, n) in sorted(entries.items())), encoding="utf-8")
    return p


def _expected(entry: FileEntry, locked: tuple[str, int] | None) -> tuple[str, str] | None:
    if entry.hash:
        return entry.hash_algorithm, entry.hash_value
    if locked:
        return "sha256", locked[0]
    return None


@dataclass(frozen=True)
class _Validator:
    """What the server said about the file when a download began (kept beside the .part)."""

    url: str
    etag: str | None = None
    last_modified: str | None = None
    total: int | None = None

    def if_range(self) -> str | None:
        """The ``If-Range`` value: a strong ETag, else the Last-Modified date, else None."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified

    def usable(self) -> bool:
        """Whether a resumed download can be tied to the same file (RFC 9110 validators, or
        at least its announced size)."""
        return bool(self.etag or self.last_modified or self.total is not None)

    def differs(self, etag: str | None, last_modified: str | None, total: int | None) -> bool:
        """Whether a response's validators show another version of the file."""
        return ((etag is not None and self.etag is not None and etag != self.etag)
                or (last_modified is not None and self.last_modified is not None
                    and last_modified != self.last_modified)
                or (total is not None and self.total is not None and total != self.total))


def _meta_path(part: Path) -> Path:
    return part.with_name(part.name + _META_SUFFIX)


def _read_meta(part: Path, url: str) -> _Validator | None:
    """The validator recorded for ``part`` (None if absent, unreadable, or of another URL)."""
    try:
        raw = json.loads(_meta_path(part).read_text(encoding="utf-8"))
        meta = _Validator(url=raw["url"], etag=raw.get("etag"),
                          last_modified=raw.get("last_modified"), total=raw.get("total"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok_types = (all(isinstance(v, (str, type(None))) for v in (meta.etag, meta.last_modified))
                and (meta.total is None or (isinstance(meta.total, int)
                                            and not isinstance(meta.total, bool))))
    return meta if meta.url == url and ok_types else None


def _write_meta(part: Path, meta: _Validator) -> None:
    with atomic_write(_meta_path(part)) as tmp:
        tmp.write_text(json.dumps(asdict(meta)), encoding="utf-8")


def _discard_part(part: Path) -> None:
    part.unlink(missing_ok=True)
    _meta_path(part).unlink(missing_ok=True)


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _open(url: str, offset: int, timeout: float, if_range: str | None):
    headers = {"User-Agent": _USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if if_range:
            headers["If-Range"] = if_range
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


class _Restart(Exception):
    """The partial download belongs to another version of the file: start again."""


def _start(url: str, part: Path, resp, offset: int, meta: _Validator | None, label: str,
           log: Callable[[str], None]) -> tuple[str, int, int | None]:
    """Decide how to use ``resp``: ``(file mode, offset, total size or None)``.

    Raises :class:`_Restart` when a resumed download turns out to be of a changed file.
    """
    status = getattr(resp, "status", 200)
    etag, modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
    if offset and status == 206:
        m = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", resp.headers.get("Content-Range", ""))
        if not m or int(m.group(1)) != offset:
            raise DownloadError(f"{url}: bad Content-Range {resp.headers.get('Content-Range')!r}"
                                f" for a request from byte {offset}")
        total = int(m.group(2)) if m.group(2) != "*" else meta.total
        if meta.differs(etag, modified, total):
            raise _Restart("changed")
        log(f"{label}: resuming at byte {offset}")
        return "ab", offset, total
    if offset:
        log(f"{label}: the server sent the whole file instead of the rest (the file changed on "
            "the server, or the server ignores ranges); restarting from byte 0")
    total = _int_or_none(resp.headers.get("Content-Length")) if status == 200 else None
    _write_meta(part, _Validator(url=url, etag=etag, last_modified=modified, total=total))
    return "wb", 0, total


def _download(url: str, part: Path, *, expected_size: int | None, retries: int, timeout: float,
              progress: bool, label: str, log: Callable[[str], None]) -> tuple[int, bool]:
    """Download ``url`` into ``part``, resuming only a part whose validator was recorded.

    Returns ``(size, checked)``: ``checked`` when the size matched one announced by the
    server (Content-Length, Content-Range total) or ``expected_size`` (the catalog's). A
    resumed request carries ``If-Range``; a server answer showing another version of the file
    (200 instead of 206, or a different ETag / Last-Modified / total) restarts from byte 0, so
    the bytes of two versions are never spliced. Each interruption or restart counts against
    ``retries``; past them :class:`DownloadError` says how many bytes are kept for next time.
    """
    attempt = 0
    while True:
        meta = _read_meta(part, url) if part.exists() else None
        if part.exists() and (meta is None or not meta.usable()):
            log(f"{label}: no validator recorded for the partial download {part.name}; "
                "restarting from byte 0")
            _discard_part(part)
        offset = part.stat().st_size if part.exists() else 0
        try:
            try:
                resp = _open(url, offset, timeout, meta.if_range() if meta and offset else None)
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and offset:   # nothing left to send: maybe complete
                    total = _int_or_none((re.search(r"/(\d+)$", exc.headers.get(
                        "Content-Range", "")) or [None, None])[1])
                    if total == offset and not meta.differs(exc.headers.get("ETag"),
                                                            exc.headers.get("Last-Modified"),
                                                            total):
                        return offset, True
                    raise _Restart("416") from None
                raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            with resp:
                mode, offset, total = _start(url, part, resp, offset, meta, label, log)
                if expected_size is not None and total is not None and total != expected_size:
                    _discard_part(part)
                    raise DownloadError(
                        f"{url}: the server announces {total} bytes, the catalog says "
                        f"{expected_size}; not downloading (the catalog entry or the URL is "
                        f"out of date, or the server is not the one the catalog means)")
                _copy(resp, part, mode, offset, total, progress, label, limit=expected_size)
            size = part.stat().st_size
            bound = total if total is not None else expected_size
            if bound is not None and size < bound or total is not None and size != total:
                raise ConnectionError(f"connection closed at byte {size} of {bound}")
            return size, bound is not None and size == bound
        except _Restart as why:
            attempt += 1
            if why.args[0] == "changed":
                log(f"{label}: the file changed on the server since the partial download "
                    "began (ETag, Last-Modified or size differ); restarting from byte 0")
            _discard_part(part)
            if attempt > retries:
                raise DownloadError(f"{url}: the file kept changing during the download; "
                                    "try again later") from None
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, DownloadError):
                raise
            attempt += 1
            what = _failure(url, exc)
            if attempt > retries:
                have = part.stat().st_size if part.exists() else 0
                if not have:
                    raise DownloadError(f"{url}: {what}; nothing downloaded") from None
                raise DownloadError(f"{url}: {what}; {have} bytes kept in {part}, run the "
                                    f"fetch again to resume") from None
            log(f"{label}: {what}; retry {attempt}/{retries}")
            time.sleep(min(0.2 * 2**attempt, 5.0))


def _failure(url: str, exc: BaseException) -> str:
    """What went wrong, in the user's words: a host that cannot be resolved (no network, or a
    wrong name), a refused or unreachable connection, a timeout, else an interruption."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    host = urllib.parse.urlsplit(url).hostname
    if isinstance(reason, socket.gaierror):
        return (f"cannot resolve the host {host} ({reason.strerror or reason}): no network "
                f"here, or a wrong host name")
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused by {host} (no server on that port)"
    if isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"cannot reach {host} ({reason.strerror}): no network route there"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer from {host} in time ({reason or 'timed out'})"
    return f"download interrupted ({exc})"


def _copy(resp, part: Path, mode: str, offset: int, total: int | None, progress: bool,
          label: str, *, limit: int | None = None) -> None:
    """Append (``mode="ab"``) or write the response body to ``part``, with a progress bar.

    ``limit`` (the catalog's size): a body that runs past it is stopped there, the part
    discarded and :class:`DownloadError` raised, instead of filling the disk."""
    bar = None
    if progress:
        from tqdm.auto import tqdm  # tqdm (the [apps] extra): only when a bar is drawn
        bar = tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=label, leave=False)
    try:
        with open(part, mode) as fh:
            have = offset
            while chunk := resp.read(_BLOCK):
                have += len(chunk)
                if limit is not None and have > limit:
                    break
                fh.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        if limit is not None and have > limit:
            _discard_part(part)
            raise DownloadError(f"{resp.geturl()}: the server sent more than the catalog's "
                                f"{limit} bytes; stopped there and discarded the download")
    finally:
        if bar is not None:
            bar.close()


def fetch_file(entry: FileEntry, dest_dir: Path, *, home: Path, key: str,
               retries: int = 3, timeout: float = 60.0, progress: bool = True,
               log: Callable[[str], None] = print) -> Path:
    """Fetch one catalog file into ``dest_dir`` (see the module docstring); returns its path.

    Raises :class:`DownloadError` when the download fails or cannot be verified (no hash
    known and its size neither announced by the server nor given in the catalog: the partial
    file stays as ``FILENAME.part``), :class:`ChecksumError` on a hash mismatch.
    """
    check_plain_name("file name", entry.filename)
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / entry.filename
    expected = _expected(entry, read_lock(home).get(key))
    algos = tuple(sorted({"sha256"} | ({expected[0]} if expected else set())))
    if target.exists():
        if expected is None:
            log(f"{key}: present, no hash known to check it against")
            return target
        got = file_hashes(target, (expected[0],))[expected[0]]
        if got != expected[1]:
            raise ChecksumError(target, expected[0], expected[1], got,
                                hint="delete the file and fetch again")
        log(f"{key}: present, {expected[0]} verified")
        return target
    part = target.with_name(target.name + ".part")
    size, checked = _download(entry.url, part, expected_size=entry.size, retries=retries,
                              timeout=timeout, progress=progress, label=key, log=log)
    if entry.size is not None and size != entry.size:
        _discard_part(part)
        raise DownloadError(f"{entry.url}: got {size} bytes, the catalog says {entry.size}; "
                            "download removed")
    hashes = file_hashes(part, algos)
    if expected is not None and hashes[expected[0]] != expected[1]:
        _discard_part(part)
        raise ChecksumError(target, expected[0], expected[1], hashes[expected[0]],
                            hint=f"download from {entry.url} removed")
    if expected is None and not checked:
        raise DownloadError(
            f"{entry.url}: size unknown: the server sent no Content-Length and the catalog "
            f"has neither `size =` nor `hash =` for {key}, so a connection closed early cannot "
            f"be told from a complete file; not recorded in {LOCK_NAME}. {size} bytes kept in "
            f"{part}; add the publisher's size or sha256 to the catalog and fetch again")
    os.replace(part, target)
    _meta_path(part).unlink(missing_ok=True)
    if expected is None:
        lock = _record_lock(home, key, hashes["sha256"], size)
        log(f"{key}: no hash in the catalog; recorded sha256 {hashes['sha256']} in {lock} "
            "(first verified download); later fetches are checked against it")
    else:
        log(f"{key}: downloaded {size} bytes, {expected[0]} verified")
    return target


def fetch(name: str, *, data_home: str | Path | None = None,
          catalog: str | Path | dict | None = None, splits: tuple[str, ...] | None = None,
          retries: int = 3, timeout: float = 60.0, progress: bool | None = None,
          log: Callable[[str], None] = print) -> list[Path]:
    """Download the files of catalog data set ``name`` into ``DATA_HOME/name/``.

    ``splits`` limits the files (e.g. ``("train",)``). ``progress=None`` shows a bar when
    stderr is a terminal. Returns the local paths. Raises
    :class:`~sparcapps.data.errors.DownloadError` or :class:`ChecksumError`.
    """
    info: DatasetInfo = get_dataset(name, catalog)
    check_plain_name("data set name", info.name)
    home = _data_home(data_home)
    if progress is None:
        progress = sys.stderr.isatty()
    files = [f for f in info.files if splits is None or f.split in splits]
    if not files:
        raise DownloadError(f"data set {name!r} has no files"
                            + (f" for splits {splits}" if splits else ""))
    return [fetch_file(f, home / info.name, home=home, key=f"{info.name}/{f.filename}",
                       retries=retries, timeout=timeout, progress=progress, log=log)
            for f in files]
