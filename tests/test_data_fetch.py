"""Fetch against a real HTTP server on 127.0.0.1: verify, hash mismatch, resume, lock file."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparcapps.data import ChecksumError, DownloadError, fetch
from sparcapps.data.fetch import LOCK_NAME, read_lock

PAYLOAD = bytes(range(256)) * 4000          # ~1 MB
SHA = hashlib.sha256(PAYLOAD).hexdigest()
MD5 = hashlib.md5(PAYLOAD).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    """Serves ``server.files``; honours ``Range: bytes=N-``; can drop the first response."""

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        srv = self.server
        body = srv.files.get(self.path)
        rng = self.headers.get("Range")
        srv.requests.append((self.path, rng))
        if body is None:
            self.send_error(404)
            return
        start = 0
        if rng and srv.honour_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        chunk = body[start:]
        if srv.drops > 0:
            srv.drops -= 1
            self.wfile.write(chunk[: srv.drop_after])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(chunk)


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files = {"/d/data.bin": PAYLOAD}
    srv.requests = []
    srv.drops = 0
    srv.drop_after = 0
    srv.honour_range = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _catalog(tmp_path, srv, hash_="", size=None):
    url = f"http://127.0.0.1:{srv.server_address[1]}/d/data.bin"
    text = (f'[datasets.toy]\ntitle = "toy"\ntask = "binary"\n[[datasets.toy.files]]\n'
            f'url = "{url}"\nfilename = "data.bin"\nhash = "{hash_}"\n'
            + (f"size = {size}\n" if size else ""))
    p = tmp_path / "catalog.toml"
    p.write_text(text)
    return p


def _fetch(tmp_path, cat, **kw):
    msgs: list[str] = []
    paths = fetch("toy", data_home=tmp_path / "home", catalog=cat, progress=False,
                  log=msgs.append, **kw)
    return paths, msgs


def _files(tmp_path):
    d = tmp_path / "home" / "toy"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_good_download_verifies(tmp_path, server):
    cat = _catalog(tmp_path, server, f"sha256:{SHA}", size=len(PAYLOAD))
    (path,), msgs = _fetch(tmp_path, cat)
    assert path.read_bytes() == PAYLOAD and _files(tmp_path) == ["data.bin"]
    assert "sha256 verified" in msgs[-1]
    n = len(server.requests)
    _, msgs = _fetch(tmp_path, cat)          # already there: verified, not downloaded
    assert len(server.requests) == n and "present, sha256 verified" in msgs[-1]


def test_md5_hash_verifies(tmp_path, server):
    (path,), msgs = _fetch(tmp_path, _catalog(tmp_path, server, f"md5:{MD5}"))
    assert path.read_bytes() == PAYLOAD and "md5 verified" in msgs[-1]


def test_wrong_hash_errors_and_leaves_no_file(tmp_path, server):
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as info:
        _fetch(tmp_path, _catalog(tmp_path, server, f"sha256:{wrong}"))
    assert wrong in str(info.value) and SHA in str(info.value)
    assert _files(tmp_path) == []


def test_interrupted_download_resumes_next_call(tmp_path, server):
    cat = _catalog(tmp_path, server, f"sha256:{SHA}")
    server.drops, server.drop_after = 1, 300_000
    with pytest.raises(DownloadError, match="run the fetch again to resume"):
        _fetch(tmp_path, cat, retries=0)
    assert _files(tmp_path) == ["data.bin.part", "data.bin.part.json"]   # + its validator
    assert (tmp_path / "home/toy/data.bin.part").stat().st_size == 300_000
    (path,), msgs = _fetch(tmp_path, cat)
    assert path.read_bytes() == PAYLOAD and _files(tmp_path) == ["data.bin"]
    assert server.requests[-1][1] == "bytes=300000-"
    assert any("resuming at byte 300000" in m for m in msgs)


def test_dropped_connection_resumes_within_one_call(tmp_path, server):
    server.drops, server.drop_after = 2, 250_000
    (path,), msgs = _fetch(tmp_path, _catalog(tmp_path, server, f"sha256:{SHA}"), retries=3)
    assert path.read_bytes() == PAYLOAD
    assert [r for _, r in server.requests] == [None, "bytes=250000-", "bytes=500000-"]


def test_server_without_range_support_restarts(tmp_path, server):
    server.honour_range = False
    server.drops, server.drop_after = 1, 100_000
    (path,), msgs = _fetch(tmp_path, _catalog(tmp_path, server, f"sha256:{SHA}"))
    assert path.read_bytes() == PAYLOAD and any("restarting" in m for m in msgs)


def test_unknown_hash_is_recorded_then_enforced(tmp_path, server):
    cat = _catalog(tmp_path, server, "")
    (path,), msgs = _fetch(tmp_path, cat)
    assert "recorded sha256" in msgs[-1] and "first verified download" in msgs[-1]
    assert read_lock(tmp_path / "home") == {"toy/data.bin": (SHA, len(PAYLOAD))}
    assert (tmp_path / "home" / LOCK_NAME).is_file()
    path.unlink()
    server.files["/d/data.bin"] = PAYLOAD[::-1]          # the server now sends other bytes
    with pytest.raises(ChecksumError) as info:
        _fetch(tmp_path, cat)
    assert SHA in str(info.value) and _files(tmp_path) == []


def test_http_error_and_unknown_name(tmp_path, server):
    cat = _catalog(tmp_path, server)
    server.files.clear()
    with pytest.raises(DownloadError, match="HTTP 404"):
        _fetch(tmp_path, cat)
    from sparcapps.data import UnknownDatasetError
    with pytest.raises(UnknownDatasetError, match="known: toy"):
        fetch("nope", data_home=tmp_path, catalog=cat, log=lambda m: None)


def test_no_network_is_called_what_it_is(tmp_path, server, monkeypatch):
    """Issue 23: a DNS failure was "interrupted", with a resume hint for a .part that did not
    exist. Name resolution failing and a refused connection are named; nothing is kept."""
    import socket

    cat = _catalog(tmp_path, server)

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    with monkeypatch.context() as m:
        m.setattr(socket, "getaddrinfo", no_dns)
        with pytest.raises(DownloadError) as info:
            _fetch(tmp_path, cat, retries=0)
    text = str(info.value)
    assert "cannot resolve the host 127.0.0.1 (Temporary failure in name resolution): no " \
           "network here, or a wrong host name; nothing downloaded" in text, text
    assert "interrupted" not in text and "resume" not in text and _files(tmp_path) == []
    port = server.server_address[1]
    server.shutdown()
    server.server_close()  # nothing listens on the port any more
    with pytest.raises(DownloadError) as info:
        _fetch(tmp_path, cat, retries=1)
    assert "connection refused by 127.0.0.1" in str(info.value), str(info.value)
    assert "nothing downloaded" in str(info.value) and _files(tmp_path) == []
    assert str(port) in str(info.value)  # the URL
