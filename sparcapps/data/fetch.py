"""Verified, resumable downloads of catalog files.

For each file of a data set (see :mod:`.catalog`), :func:`fetch` downloads to
``DATA_HOME/NAME/FILENAME.part`` beside the target, resuming an earlier partial download with
an HTTP ``Range`` request (and retrying a dropped connection ``retries`` times within one
call), verifies the size and hash, then renames it to ``FILENAME``. A hash mismatch deletes the
download and raises :class:`~sparcapps.data.errors.ChecksumError` naming both hashes.

Expected hash: the catalog's (``sha256:`` or ``md5:``), else the sha256 recorded in
``DATA_HOME/registry.lock`` by an earlier download. With neither, the first complete download
(its size checked against the server's and the catalog's) records its sha256 in the lock file,
and :func:`fetch` reports that; later fetches verify against it. Lock file lines:
``NAME/FILENAME SHA256 SIZE``.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from .catalog import DatasetInfo, FileEntry, data_home as _data_home, get_dataset
from .errors import ChecksumError, DownloadError

__all__ = ["fetch", "fetch_file", "file_hashes", "read_lock", "LOCK_NAME"]

LOCK_NAME = "registry.lock"
_BLOCK = 1 << 20
_USER_AGENT = "sparcml-data/0.1 (+https://github.com/)"


def file_hashes(path: str | Path, algorithms=("sha256",)) -> dict[str, str]:
    """Hex digests of the file at ``path`` for each algorithm."""
    hs = {a: hashlib.new(a) for a in algorithms}
    with open(path, "rb") as fh:
        while chunk := fh.read(_BLOCK * 4):
            for h in hs.values():
                h.update(chunk)
    return {a: h.hexdigest() for a, h in hs.items()}


def read_lock(home: Path) -> dict[str, tuple[str, int]]:
    """``{"NAME/FILENAME": (sha256, size)}`` from the lock file (empty if absent)."""
    p = home / LOCK_NAME
    out: dict[str, tuple[str, int]] = {}
    if p.is_file():
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and not line.startswith("#"):
                out[parts[0]] = (parts[1].lower(), int(parts[2]))
    return out


def _record_lock(home: Path, key: str, sha256: str, size: int) -> Path:
    p = home / LOCK_NAME
    entries = read_lock(home)
    entries[key] = (sha256, size)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text("# sha256 of first verified downloads, written by sparc-data fetch\n"
                   + "".join(f"{k} {h} {s}\n" for k, (h, s) in sorted(entries.items())))
    os.replace(tmp, p)
    return p


def _expected(entry: FileEntry, locked: tuple[str, int] | None) -> tuple[str, str] | None:
    if entry.hash:
        return entry.hash_algorithm, entry.hash_value
    if locked:
        return "sha256", locked[0]
    return None


def _open(url: str, offset: int, timeout: float):
    headers = {"User-Agent": _USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


def _download(url: str, part: Path, *, retries: int, timeout: float, progress: bool,
              label: str, log: Callable[[str], None]) -> int:
    """Download ``url`` into ``part`` (resuming); returns the final size."""
    attempt = 0
    total: int | None = None
    while True:
        offset = part.stat().st_size if part.exists() else 0
        try:
            try:
                resp = _open(url, offset, timeout)
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and offset:   # nothing left to send: maybe complete
                    m = re.search(r"/(\d+)", exc.headers.get("Content-Range", ""))
                    if m and int(m.group(1)) == offset:
                        return offset
                    part.unlink()
                    continue
                raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            with resp:
                status = getattr(resp, "status", 200)
                length = resp.headers.get("Content-Length")
                if offset and status == 206:
                    m = re.match(r"bytes (\d+)-\d+/(\d+|\*)",
                                 resp.headers.get("Content-Range", ""))
                    if not m or int(m.group(1)) != offset:
                        raise DownloadError(f"{url}: bad Content-Range "
                                            f"{resp.headers.get('Content-Range')!r}")
                    total = int(m.group(2)) if m.group(2) != "*" else None
                    mode = "ab"
                    log(f"{label}: resuming at byte {offset}")
                else:
                    if offset:
                        log(f"{label}: server ignored the range request; restarting")
                    offset = 0
                    total = int(length) if length is not None else None
                    mode = "wb"
                bar = None
                if progress:
                    from tqdm.auto import tqdm
                    bar = tqdm(total=total, initial=offset, unit="B", unit_scale=True,
                               unit_divisor=1024, desc=label, leave=False)
                try:
                    with open(part, mode) as fh:
                        while chunk := resp.read(_BLOCK):
                            fh.write(chunk)
                            if bar is not None:
                                bar.update(len(chunk))
                finally:
                    if bar is not None:
                        bar.close()
            size = part.stat().st_size
            if total is not None and size != total:
                raise ConnectionError(f"connection closed at byte {size} of {total}")
            return size
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, DownloadError):
                raise
            attempt += 1
            if attempt > retries:
                have = part.stat().st_size if part.exists() else 0
                raise DownloadError(f"{url}: download interrupted ({exc}); {have} bytes kept "
                                    f"in {part}, run the fetch again to resume") from None
            log(f"{label}: interrupted ({exc}); retry {attempt}/{retries}")
            time.sleep(min(0.2 * 2**attempt, 5.0))


def fetch_file(entry: FileEntry, dest_dir: Path, *, home: Path, key: str,
               retries: int = 3, timeout: float = 60.0, progress: bool = True,
               log: Callable[[str], None] = print) -> Path:
    """Fetch one catalog file into ``dest_dir`` (see the module docstring); returns its path."""
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
    size = _download(entry.url, part, retries=retries, timeout=timeout, progress=progress,
                     label=key, log=log)
    if entry.size is not None and size != entry.size:
        part.unlink(missing_ok=True)
        raise DownloadError(f"{entry.url}: got {size} bytes, the catalog says {entry.size}; "
                            "download removed")
    hashes = file_hashes(part, algos)
    if expected is not None and hashes[expected[0]] != expected[1]:
        part.unlink(missing_ok=True)
        raise ChecksumError(target, expected[0], expected[1], hashes[expected[0]],
                            hint=f"download from {entry.url} removed")
    os.replace(part, target)
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
    home = _data_home(data_home)
    if progress is None:
        progress = sys.stderr.isatty()
    files = [f for f in info.files if splits is None or f.split in splits]
    if not files:
        raise DownloadError(f"data set {name!r} has no files"
                            + (f" for splits {splits}" if splits else ""))
    return [fetch_file(f, home / name, home=home, key=f"{name}/{f.filename}", retries=retries,
                       timeout=timeout, progress=progress, log=log) for f in files]
