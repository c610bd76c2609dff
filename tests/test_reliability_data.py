"""Reliability of the data tools (issue 11, items 8-14): nothing unverified is trusted.

- corrupt sparcml-csr files are refused on load, naming the file, the row and the bad value;
- fetch never locks a download it cannot tell complete (unknown size) or spliced (the file
  changed on the server between two parts); the lock file survives odd file names; no name
  escapes the data home;
- ``convert`` never overwrites its own input; ``sparc-data`` prints one line, no traceback,
  for every kind of bad input;
- temporary files of killed writers are cleaned by the next run, and a writer killed with
  SIGKILL mid-write never leaves a file that reads as valid (fault injection).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h5py
import numpy as np
import pytest

from sparcapps.atomicfile import atomic_write, clean_stale_temps, temp_path_for
from sparcapps.data import (CatalogError, ChecksumError, CsrWriter, DataError,
                            DataFormatError, DownloadError, convert_libsvm, fetch, load_catalog,
                            load_shard, read_rows)
from sparcapps.data.cli import main
from sparcapps.data.fetch import LOCK_NAME, read_lock

ROOT = Path(__file__).resolve().parents[1]


# -- helpers -----------------------------------------------------------------------------------

def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _write_csr(path, n_features=50, rows=((1, 4, 9), (), (0, 49), (7,)), compression="gzip"):
    """A small valid sparcml-csr file with the given rows (feature indices per row)."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    idx = np.array([i for r in rows for i in r], dtype=np.int64)
    data = np.arange(1, len(idx) + 1, dtype=np.float32)
    labels = np.where(np.arange(len(rows)) % 2 == 0, 1.0, -1.0).astype(np.float32)
    with CsrWriter(path, n_features=n_features, compression=compression) as w:
        w.append(lengths, idx, data, labels)
        w.commit(task="binary", index_base=0)
    return path


def _assert_valid(X, y, n_features):
    """The contract of load_shard: a well-formed float32 CSR matrix of canonical format."""
    X.check_format(full_check=True)
    assert X.shape[1] == n_features and X.shape[0] == len(y) and X.dtype == np.float32
    assert X.has_canonical_format
    if X.nnz:
        assert 0 <= X.indices.min() and X.indices.max() < n_features


# -- item 8: a corrupt sparcml-csr file is refused on load ----------------------------------

def _corrupt(path, dataset, pos, value):
    with h5py.File(path, "r+") as f:
        f[dataset][pos] = value


@pytest.mark.parametrize("value,fragment", [(50, "feature index 50"), (10**6, "feature index"),
                                            (-1, "feature index -1")])
def test_load_shard_refuses_index_out_of_range(tmp_path, value, fragment):
    path = _write_csr(tmp_path / "c.h5")
    _corrupt(path, "indices", 4, value)          # row 2's first entry
    with pytest.raises(DataFormatError) as info:
        load_shard(path, 0, 1)
    msg = str(info.value)
    assert str(path) in msg and "row 2" in msg and fragment in msg and "[0, 50)" in msg
    X, y = load_shard(path, 0, 2)          # rank 0's rows (0 and 1) are intact
    _assert_valid(X, y, 50)
    with pytest.raises(DataFormatError, match="row 2"):
        load_shard(path, 1, 2)
    with pytest.raises(DataFormatError):
        read_rows(path, 0, 4)


def test_sparc_linear_loader_refuses_corrupt_file(tmp_path):
    """The reported crash: sparc-linear trained on such a file (segfault, or silently with a
    negative index). Its loader now raises the same InputDataError on every rank."""
    from mpi4py import MPI
    from sparcapps.linear.data import load_split
    from sparcapps.linear.errors import InputDataError
    path = _write_csr(tmp_path / "c.h5")
    _corrupt(path, "indices", 4, -3)
    with pytest.raises(InputDataError, match="row 2: feature index -3 out of range"):
        load_split(path, MPI.COMM_SELF, test_fraction=0.25, split_seed=0)


def test_load_shard_refuses_unsorted_or_duplicate_indices(tmp_path):
    path = _write_csr(tmp_path / "c.h5")
    _corrupt(path, "indices", 1, 1)          # row 0: 1, 1, 9
    with pytest.raises(DataFormatError, match=r"row 0: feature indices must be strictly"):
        load_shard(path)


@pytest.mark.parametrize("pos,value,fragment", [
    (2, 5, ""),                                   # [0, 3, 5, 5, 6]: still a valid layout
    (2, 1, "indptr must be non-decreasing"),      # [0, 3, 1, 5, 6]
    (1, 7, "indptr must be non-decreasing"),      # [0, 7, 3, 5, 6]: past nnz, then back
    (0, 1, "indptr[0] must be 0"),
    (4, 5, "indptr[-1] must equal nnz"),
    (4, 99, "indptr[-1] must equal nnz"),
])
def test_load_shard_refuses_bad_indptr(tmp_path, pos, value, fragment):
    path = _write_csr(tmp_path / "c.h5")
    with h5py.File(path, "r+") as f:
        ptr = f["indptr"][:]
        ptr[pos] = value
        f["indptr"][:] = ptr
        bad = not (ptr[0] == 0 and ptr[-1] == 6 and np.all(np.diff(ptr) >= 0))
    if not bad:                              # this corruption happens to be a valid layout
        X, y = load_shard(path)
        _assert_valid(X, y, 50)
        return
    with pytest.raises(DataFormatError, match=re.escape(fragment)) as info:
        load_shard(path)
    assert str(path) in str(info.value)


def test_load_shard_refuses_inconsistent_lengths(tmp_path):
    path = _write_csr(tmp_path / "c.h5")
    with h5py.File(path, "r+") as f:
        f["labels"].resize((3,))
    with pytest.raises(DataFormatError, match="'labels' has 3 entries, expected 4"):
        load_shard(path)
    path = _write_csr(tmp_path / "d.h5")
    with h5py.File(path, "r+") as f:
        f.attrs["nnz"] = np.int64(7)
    with pytest.raises(DataFormatError, match="nnz"):
        load_shard(path)


def test_load_shard_refuses_foreign_hdf5_and_non_hdf5(tmp_path):
    text = tmp_path / "t.h5"
    text.write_text("1 1:1\n")
    empty = tmp_path / "e.h5"
    empty.write_bytes(b"")
    for p in (text, empty):
        with pytest.raises(DataFormatError, match="not an HDF5 file"):
            load_shard(p)
    with pytest.raises(FileNotFoundError):
        load_shard(tmp_path / "missing.h5")


# -- items 9 and 10: fetch against a local server ------------------------------------------

PAYLOAD = bytes(range(256)) * 2000          # 512 kB
NEW_PAYLOAD = bytes(reversed(range(256))) * 2000


class _Handler(BaseHTTPRequestHandler):
    """Serves ``server.body`` at /d/data.bin with options: Content-Length or not, an ETag /
    Last-Modified, honouring ``If-Range`` or not, cutting the next response short."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        s = self.server
        s.requests.append(dict(self.headers))
        body = s.body
        start = 0
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        fresh = if_range is None or not s.honour_if_range or if_range in (s.etag, s.modified)
        if rng and fresh:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        if s.send_length:
            claim = getattr(s, "claim_length", None)
            self.send_header("Content-Length", str(claim or len(body) - start))
        if s.etag:
            self.send_header("ETag", s.etag)
        if s.modified:
            self.send_header("Last-Modified", s.modified)
        self.end_headers()
        chunk = body[start:]
        if s.cut is not None:
            chunk, s.cut = chunk[: s.cut], None
        self.wfile.write(chunk)
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.body, srv.requests, srv.cut = PAYLOAD, [], None
    srv.send_length, srv.etag, srv.modified, srv.honour_if_range = True, None, None, True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _catalog(tmp_path, srv, *, name="toy", filename="data.bin", hash_="", size=None):
    url = f"http://127.0.0.1:{srv.server_address[1]}/d/data.bin"
    q = json.dumps(name)                    # a TOML basic string (escapes as in JSON)
    text = (f'[datasets.{q}]\ntitle = "toy"\ntask = "binary"\n'
            f'[[datasets.{q}.files]]\nurl = "{url}"\nfilename = {json.dumps(filename)}\n'
            f'hash = "{hash_}"\n' + (f"size = {size}\n" if size else ""))
    p = tmp_path / "catalog.toml"
    p.write_text(text)
    return p


def _fetch(tmp_path, cat, name="toy", **kw):
    msgs: list[str] = []
    paths = fetch(name, data_home=tmp_path / "home", catalog=cat, progress=False,
                  log=msgs.append, **kw)
    return paths, msgs


def test_unknown_size_download_is_not_locked(tmp_path, server):
    """No catalog hash or size, no Content-Length, the server closes at half: refused."""
    server.send_length = False
    server.cut = len(PAYLOAD) // 2
    cat = _catalog(tmp_path, server)
    with pytest.raises(DownloadError, match="size unknown") as info:
        _fetch(tmp_path, cat)
    assert "size =" in str(info.value) or "hash" in str(info.value)
    home = tmp_path / "home"
    assert read_lock(home) == {} and not (home / "toy" / "data.bin").exists()
    assert (home / "toy" / "data.bin.part").stat().st_size == len(PAYLOAD) // 2


def test_catalog_size_catches_early_close_without_length(tmp_path, server):
    server.send_length = False
    server.cut = len(PAYLOAD) // 2
    cat = _catalog(tmp_path, server, size=len(PAYLOAD))
    (path,), _ = _fetch(tmp_path, cat, retries=2)
    assert path.read_bytes() == PAYLOAD
    assert read_lock(tmp_path / "home")["toy/data.bin"] == (hashlib.sha256(PAYLOAD).hexdigest(),
                                                            len(PAYLOAD))


def test_part_without_recorded_validator_is_not_resumed(tmp_path, server):
    """A .part of unknown origin (no validator recorded) is restarted, never spliced."""
    part = tmp_path / "home" / "toy" / "data.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"X" * 1000)
    (path,), _ = _fetch(tmp_path, _catalog(tmp_path, server))
    assert path.read_bytes() == PAYLOAD
    assert "Range" not in server.requests[-1]


@pytest.mark.parametrize("validator", ["etag", "last-modified"])
@pytest.mark.parametrize("honour_if_range", [True, False])
def test_resume_after_server_change_restarts(tmp_path, server, validator, honour_if_range):
    if validator == "etag":
        server.etag = '"v1"'
    else:
        server.modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    server.honour_if_range = honour_if_range
    server.cut = 300_000
    cat = _catalog(tmp_path, server)
    with pytest.raises(DownloadError, match="resume"):
        _fetch(tmp_path, cat, retries=0)
    # the file changes on the server (same length), its validator with it
    server.body = NEW_PAYLOAD
    if validator == "etag":
        server.etag = '"v2"'
    else:
        server.modified = "Tue, 02 Jan 2024 00:00:00 GMT"
    (path,), msgs = _fetch(tmp_path, cat)
    assert path.read_bytes() == NEW_PAYLOAD, "spliced file accepted"
    assert read_lock(tmp_path / "home")["toy/data.bin"][0] == \
        hashlib.sha256(NEW_PAYLOAD).hexdigest()
    resumed = [r for r in server.requests if "Range" in r]
    assert resumed and resumed[0]["If-Range"] in ('"v1"', "Mon, 01 Jan 2024 00:00:00 GMT")
    assert any("changed on the server" in m for m in msgs)


def test_resume_with_same_validator_continues(tmp_path, server):
    server.etag = '"v1"'
    server.cut = 300_000
    cat = _catalog(tmp_path, server)
    with pytest.raises(DownloadError):
        _fetch(tmp_path, cat, retries=0)
    (path,), msgs = _fetch(tmp_path, cat)
    assert path.read_bytes() == PAYLOAD
    assert server.requests[-1]["Range"] == "bytes=300000-"
    assert server.requests[-1]["If-Range"] == '"v1"'
    assert any("resuming at byte 300000" in m for m in msgs)


# -- item 11: lock file robust to odd names; no name escapes the data home -------------------

def test_lock_entry_with_space_in_file_name_is_enforced(tmp_path, server):
    cat = _catalog(tmp_path, server, filename="my data.bin")
    (path,), _ = _fetch(tmp_path, cat)
    assert read_lock(tmp_path / "home") == {
        "toy/my data.bin": (hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD))}
    path.unlink()
    server.body = NEW_PAYLOAD                     # tampered upstream
    with pytest.raises(ChecksumError):
        _fetch(tmp_path, cat)
    assert not path.exists()


def test_old_lock_format_is_read(tmp_path):
    sha = "ab" * 32
    (tmp_path / LOCK_NAME).write_text(f"# old\ntoy/a.bin {sha} 12\ntoy/my data.bin {sha} 7\n")
    assert read_lock(tmp_path) == {"toy/a.bin": (sha, 12), "toy/my data.bin": (sha, 7)}


def test_malformed_lock_line_is_an_error(tmp_path):
    (tmp_path / LOCK_NAME).write_text('{"key": "toy/a.bin", "sha256": "zz", "size": 1}\n')
    with pytest.raises(DataFormatError) as info:
        read_lock(tmp_path)
    assert info.value.line == 1 and "sha256" in str(info.value)


@pytest.mark.parametrize("name,filename", [("../../escape", "data.bin"),
                                           ("/abs/escape", "data.bin"),
                                           ("..", "data.bin"),
                                           ("toy", "../data.bin"),
                                           ("toy", "/tmp/data.bin"),
                                           ("toy", ".."),
                                           ("toy", "a\\..\\b")])
def test_names_cannot_escape_the_data_home(tmp_path, server, name, filename):
    cat = _catalog(tmp_path, server, name=name, filename=filename)
    with pytest.raises(CatalogError, match="plain name"):
        load_catalog(cat)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(CatalogError):
        _fetch(tmp_path, cat, name=name)
    assert sorted(p for p in tmp_path.rglob("*")) == before and server.requests == []


def test_dict_catalog_name_cannot_escape(tmp_path):
    from sparcapps.data import DatasetInfo, FileEntry
    info = DatasetInfo(name="../out", title="x", task="binary",
                       files=(FileEntry(url="http://127.0.0.1:9/x", filename="x.bin"),))
    with pytest.raises(CatalogError, match="plain name"):
        fetch("../out", data_home=tmp_path / "home", catalog={"../out": info}, log=print)
    assert not (tmp_path / "out").exists() and not (tmp_path / "home").exists()


# -- item 12: convert never replaces its own input -------------------------------------------

def test_convert_refuses_output_that_is_the_input(tmp_path, capsys):
    src = tmp_path / "s.svm"
    src.write_text("1 1:1\n-1 2:1\n")
    original = src.read_bytes()
    os.link(src, tmp_path / "hard.h5")
    (tmp_path / "sym.h5").symlink_to(src)
    for out in (src, tmp_path / "hard.h5", tmp_path / "sym.h5", tmp_path / "." / "s.svm"):
        with pytest.raises(DataError, match="is the input"):
            convert_libsvm(src, out, overwrite=True)
        assert src.read_bytes() == original
    assert main(["convert", str(src), "-o", str(src), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the input" in err
    assert src.read_bytes() == original


# -- item 13: every sparc-data subcommand: one line on stderr, no traceback ------------------

def _bad_inputs(tmp_path):
    text = tmp_path / "text.h5"
    text.write_text("1 1:1\n")
    (tmp_path / "empty.h5").write_bytes(b"")
    (tmp_path / "empty.svm").write_bytes(b"")
    (tmp_path / "dir").mkdir()
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1]
    good = _write_csr(tmp_path / "good.h5")
    blob = good.read_bytes()
    (tmp_path / "trunc.h5").write_bytes(blob[: len(blob) // 2])
    corrupt = _write_csr(tmp_path / "corrupt.h5")
    _corrupt(corrupt, "indices", 0, 999)
    t = str(tmp_path)
    return [
        (["info", f"{t}/text.h5"], 2), (["info", f"{t}/empty.h5"], 2),
        (["info", f"{t}/dir"], 2), (["info", f"{t}/missing.h5"], 2),
        (["info", f"{t}/other.h5"], 2), (["info", f"{t}/trunc.h5"], 1),
        (["info", f"{t}/corrupt.h5"], 1),
        (["convert", f"{t}/missing.svm", "-o", f"{t}/o.h5"], 2),
        (["convert", f"{t}/dir", "-o", f"{t}/o.h5"], 2),
        (["convert", f"{t}/empty.svm", "-o", f"{t}/o.h5"], 1),
        (["convert", f"{t}/good.h5", "-o", f"{t}/o.h5"], 1),
        (["convert", f"{t}/text.h5"], 2),
        (["convert", f"{t}/text.h5", "-o", f"{t}/dir", "--force"], 2),
        (["convert", f"{t}/text.h5", "-o", f"{t}/nodir/o.h5"], 2),
        (["convert", "no-such-dataset"], 2),
        (["convert", f"{t}/text.h5", "-o", f"{t}/o2.h5", "--features", "0"], 2),
        (["synth", "url", "--rows", "5", "--features", "100", "-o", f"{t}/nodir/x.h5"], 2),
        (["synth", "url", "--rows", "5", "--features", "100", "-o", f"{t}/dir", "--force"], 2),
        (["synth", "-o", f"{t}/x.h5"], 2),
        (["synth", "nosuch", "-o", f"{t}/x.h5"], 2),
        (["fetch", "no-such-dataset"], 2),
        (["fetch", "url", "--catalog", f"{t}/missing.toml"], 2),
        (["fetch", "url", "--catalog", f"{t}/text.h5"], 1),
        (["list", "--catalog", f"{t}/dir"], 2),
    ]


def test_cli_bad_input_is_one_line_without_traceback(tmp_path, capsys):
    for argv, status in _bad_inputs(tmp_path):
        code = main(argv)
        err = capsys.readouterr().err
        assert (code, err.count("\n")) == (status, 1), (argv, code, err)
        assert err.startswith("sparc-data: error: ") and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "o.h5").exists() and not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("argv", [[], ["convert"], ["synth", "url", "--rows", "x", "-o", "a.h5"],
                                  ["synth", "url", "--rows", "-5", "-o", "a.h5"],
                                  ["info", "a", "b"]])
def test_cli_option_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and ": error: " in err
    assert "--help" in err


def test_cli_info_on_text_file_in_a_subprocess(tmp_path):
    """The original report: an h5py traceback from `sparc-data info` on a text file."""
    (tmp_path / "a.svm").write_text("1 1:1\n")
    r = subprocess.run([sys.executable, "-m", "sparcapps.data.cli", "info",
                        str(tmp_path / "a.svm")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "not an HDF5 file" in r.stderr


# -- item 14: temporary files of dead writers are cleaned ------------------------------------

def test_atomicfile_api(tmp_path):
    target = tmp_path / "a b.txt"
    assert temp_path_for(target) == tmp_path / f".a b.txt.tmp-{os.getpid()}"
    dead = tmp_path / f".a b.txt.tmp-{_dead_pid()}"
    live = tmp_path / f".a b.txt.tmp-{os.getppid()}"
    other = tmp_path / ".a b.txt.tmp-12x"
    for p in (dead, live, other):
        p.write_text("x")
    assert clean_stale_temps(target) == [dead]
    assert live.exists() and other.exists() and not dead.exists()
    with atomic_write(target) as tmp:
        assert tmp == temp_path_for(target)
        tmp.write_text("new")
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError):
        with atomic_write(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "new" and not temp_path_for(target).exists()
    with pytest.raises(FileNotFoundError):
        with atomic_write(tmp_path / "nodir" / "x") as tmp:
            pass
    assert clean_stale_temps(tmp_path / "nodir" / "x") == []


def _stale_and_live(target: Path) -> tuple[Path, Path, subprocess.Popen]:
    """A temp file of ``target`` owned by a dead PID, and one owned by a live process."""
    stale = target.with_name(f".{target.name}.tmp-{_dead_pid()}")
    stale.write_bytes(b"half")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    live = target.with_name(f".{target.name}.tmp-{proc.pid}")
    live.write_bytes(b"writing")
    return stale, live, proc


@pytest.mark.parametrize("writer", ["convert", "synth_h5", "synth_text", "checkpoint",
                                    "lock"])
def test_next_write_cleans_stale_temps_of_dead_pids(tmp_path, writer, server):
    target = {"convert": "o.h5", "synth_h5": "o.h5", "synth_text": "o.svm",
              "checkpoint": "c.h5", "lock": LOCK_NAME}[writer]
    target = tmp_path / "home" / target if writer == "lock" else tmp_path / target
    target.parent.mkdir(exist_ok=True)
    stale, live, proc = _stale_and_live(target)
    try:
        if writer == "convert":
            (tmp_path / "s.svm").write_text("1 1:1\n")
            convert_libsvm(tmp_path / "s.svm", target)
        elif writer.startswith("synth"):
            from sparcapps.data import make_url_like
            make_url_like(20, seed=0, features=200, out=target)
        elif writer == "checkpoint":
            from sparcapps.linear.io import load_checkpoint, save_checkpoint
            save_checkpoint(target, *_checkpoint_args(), partials=[{}], global_batch=8,
                            train_rows=10, P=1)
            assert load_checkpoint(target)["P"] == 1
        else:
            _fetch(tmp_path, _catalog(tmp_path, server))
        assert target.exists() and not stale.exists() and live.exists()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("suffix,magic", [(".gz", b"\x1f\x8b"), (".bz2", b"BZh"),
                                          (".xz", b"\xfd7zXZ")])
def test_synth_text_is_compressed_as_its_suffix_says(tmp_path, suffix, magic):
    """Found on the way: the temporary name hid the suffix, so .xz output was plain text."""
    from sparcapps.data import make_url_like
    out = make_url_like(20, seed=0, features=200, out=tmp_path / f"s.svm{suffix}")
    assert out.read_bytes()[: len(magic)] == magic
    convert_libsvm(out, tmp_path / "s.h5", n_features=200)
    assert load_shard(tmp_path / "s.h5")[0].shape == (20, 200)


# -- fault injection: SIGKILL mid-write ------------------------------------------------------

class _FakeEstimator:
    """Enough of SparseLinearClassifier for save_checkpoint."""

    classes_ = np.array([-1.0, 1.0])

    def get_params(self):
        return {"loss": "log"}


def _checkpoint_args(t=1):
    from sparcapps.linear.state import TrainState
    return _FakeEstimator(), TrainState(v=np.arange(1000, dtype=np.float64), t=t)


def _kill_when(marker: Path, code: str, cwd: Path) -> subprocess.Popen:
    """Run ``code`` in a child; SIGKILL it once ``marker`` exists (it is blocked mid-write)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited with {proc.returncode} before the marker")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("child never reached the write")
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc


def test_convert_killed_mid_write_leaves_nothing_valid(tmp_path):
    src = tmp_path / "s.svm"
    src.write_text("".join(f"{1 if i % 2 else -1} {i % 90 + 1}:1 {i % 90 + 95}:2\n"
                           for i in range(5000)))
    out = tmp_path / "o.h5"
    marker = tmp_path / "in-write"
    code = f"""
        import pathlib, time
        import sparcapps.data.convert as c
        orig = c._Parser.feed
        def feed(self, buf, stop):
            orig(self, buf, stop)
            if self.lines_done > 2000:          # some rows are in the temp file
                self.writer._f.flush()
                pathlib.Path({str(marker)!r}).touch()
                time.sleep(600)
        c._Parser.feed = feed
        from sparcapps.data.cli import main
        main(["convert", {str(src)!r}, "-o", {str(out)!r}, "--chunk-mb", "0.01"])
    """
    proc = _kill_when(marker, code, tmp_path)
    stale = out.with_name(f".o.h5.tmp-{proc.pid}")
    assert proc.returncode == -signal.SIGKILL and stale.stat().st_size > 0
    assert not out.exists()
    with pytest.raises(FileNotFoundError):
        load_shard(out)
    with pytest.raises(DataFormatError):       # the temp itself never reads as valid
        load_shard(stale)
    assert main(["convert", str(src), "-o", str(out)]) == 0
    assert not stale.exists()
    X, y = load_shard(out)
    _assert_valid(X, y, X.shape[1])
    assert X.shape[0] == 5000


def test_convert_force_killed_keeps_old_output(tmp_path):
    src = tmp_path / "s.svm"
    src.write_text("".join(f"1 {i % 50 + 1}:1\n" for i in range(3000)))
    out = tmp_path / "o.h5"
    _write_csr(out)
    before = out.read_bytes()
    marker = tmp_path / "in-write"
    code = f"""
        import pathlib, time
        import sparcapps.data.csrfile as c
        orig = c.CsrWriter.append
        def append(self, *a):
            orig(self, *a)
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(600)
        c.CsrWriter.append = append
        from sparcapps.data import convert_libsvm
        convert_libsvm({str(src)!r}, {str(out)!r}, overwrite=True)
    """
    proc = _kill_when(marker, code, tmp_path)
    assert out.read_bytes() == before
    X, y = load_shard(out)
    _assert_valid(X, y, 50)
    assert out.with_name(f".o.h5.tmp-{proc.pid}").exists()
    convert_libsvm(src, out, overwrite=True)
    assert not list(tmp_path.glob(".o.h5.tmp-*")) and load_shard(out)[0].shape[0] == 3000


def test_checkpoint_killed_mid_write_keeps_previous(tmp_path):
    from sparcapps.linear.errors import CheckpointError
    from sparcapps.linear.io import load_checkpoint, save_checkpoint
    ckpt = tmp_path / "c.ckpt.h5"
    est, state = _checkpoint_args(t=7)
    save_checkpoint(ckpt, est, state, partials=[{}], global_batch=8, train_rows=10, P=1)
    marker = tmp_path / "in-write"
    code = f"""
        import pathlib, time
        import numpy as np
        from sparcapps.linear.io import save_checkpoint
        from sparcapps.linear.state import TrainState
        class Est:                      # get_params runs inside the write: block there
            classes_ = np.array([-1.0, 1.0])
            def get_params(self):
                pathlib.Path({str(marker)!r}).touch()
                time.sleep(600)
        save_checkpoint({str(ckpt)!r}, Est(), TrainState(v=np.zeros(1000), t=8),
                        partials=[{{}}], global_batch=8, train_rows=10, P=1)
    """
    proc = _kill_when(marker, code, tmp_path)
    stale = ckpt.with_name(f".c.ckpt.h5.tmp-{proc.pid}")
    assert stale.exists()
    assert load_checkpoint(ckpt)["state"].t == 7        # the previous one, complete
    with pytest.raises(CheckpointError):
        load_checkpoint(stale)
    save_checkpoint(ckpt, *_checkpoint_args(t=9), partials=[{}], global_batch=8,
                    train_rows=10, P=1)
    assert load_checkpoint(ckpt)["state"].t == 9 and not stale.exists()


def test_lock_file_is_json_lines(tmp_path, server):
    _fetch(tmp_path, _catalog(tmp_path, server, filename="a b.bin"))
    lines = (tmp_path / "home" / LOCK_NAME).read_text().splitlines()
    rec = [json.loads(x) for x in lines if not x.startswith("#")]
    assert rec == [{"key": "toy/a b.bin", "sha256": hashlib.sha256(PAYLOAD).hexdigest(),
                    "size": len(PAYLOAD)}]


# -- issue 25 item 6: a download never runs past the catalog's size --------------------------

def test_announced_size_beyond_the_catalog_is_refused_before_downloading(tmp_path, server):
    server.claim_length = 10**15                   # a lying or wrong server
    cat = _catalog(tmp_path, server, size=1000)
    with pytest.raises(DownloadError, match="announces 1000000000000000 bytes, the catalog "
                                            "says 1000"):
        _fetch(tmp_path, cat)
    home = tmp_path / "home" / "toy"
    assert not (home / "data.bin.part").exists() and not (home / "data.bin").exists()


def test_body_past_the_catalog_size_is_stopped_there(tmp_path, server):
    server.send_length = False                     # no Content-Length: only the body tells
    cat = _catalog(tmp_path, server, size=1000)    # the body is 512 kB
    with pytest.raises(DownloadError, match="more than the catalog's 1000 bytes"):
        _fetch(tmp_path, cat)
    home = tmp_path / "home" / "toy"
    assert not (home / "data.bin.part").exists() and not (home / "data.bin").exists()
