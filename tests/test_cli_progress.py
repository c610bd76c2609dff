"""Progress (issue 15, defect 8): bars are drawn only on a terminal, reach exactly their total,
and the long silent steps (``sparc-data synth``, ``sparc-linear --synth``) show progress.

Each command runs twice: with its output on a pseudo-terminal (a bar must appear) and into
pipes, as under Slurm (no carriage-return frames; one line per epoch instead).
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
LINEAR = [str(BIN / "sparc-linear"), "--synth", "url", "--rows", "3000", "--features", "4000",
          "--epochs", "2", "--batch-size", "500"]  # 2400 training rows: 5 steps per epoch


def _on_a_terminal(cmd, cwd) -> str:
    """Run ``cmd`` with stdin/stdout/stderr on a new pseudo-terminal; everything it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # rows, cols
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def _in_pipes(cmd, cwd) -> subprocess.CompletedProcess:
    # bytes, decoded here: text=True would turn a bar's bare \r into \n (universal newlines)
    proc = subprocess.run(cmd, capture_output=True, cwd=cwd, timeout=300,
                          stdin=subprocess.DEVNULL)
    proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def cache(tmp_path):
    return ["--synth-cache", str(tmp_path / "synth")]


def test_linear_bar_ends_at_its_total_on_a_terminal(tmp_path, cache):
    out = _on_a_terminal(LINEAR + cache, tmp_path)
    counts = [(int(a), int(b)) for a, b in re.findall(r"\b(\d+)/(\d+) \[", out)]
    assert counts, out
    assert counts[-1] == (10, 10), counts          # 2 epochs x 5 steps, not 11/10
    assert all(a <= b for a, b in counts), counts
    assert "synth url" in out and "row" in out      # the --synth generation had a bar too


def test_linear_in_pipes_prints_lines_not_frames(tmp_path, cache):
    proc = _in_pipes(LINEAR + cache, tmp_path)
    assert "\r" not in proc.stderr and "\r" not in proc.stdout
    assert not re.search(r"\d+/\d+ \[", proc.stderr), proc.stderr  # no bar at all
    assert [line.split(":")[0] for line in proc.stdout.splitlines()
            if line.startswith("epoch ")] == ["epoch 1", "epoch 2"]
    assert "writing the synthetic twin url (3,000 rows" in proc.stdout  # not 16 s of silence


def test_data_synth_shows_progress_only_on_a_terminal(tmp_path):
    cmd = [str(BIN / "sparc-data"), "synth", "url", "--rows", "20000", "-o"]
    out = _on_a_terminal(cmd + [str(tmp_path / "a.h5")], tmp_path)
    assert re.search(r"synth url_like: 100%.*20\.0k/20\.0k", out), out
    proc = _in_pipes(cmd + [str(tmp_path / "b.h5")], tmp_path)
    assert "\r" not in proc.stderr and proc.stderr == ""
    assert proc.stdout.startswith(f"{tmp_path / 'b.h5'}: 20,000 rows")


def test_linear_no_progress_silences_every_bar_on_a_terminal(tmp_path, cache):
    out = _on_a_terminal(LINEAR + cache + ["--no-progress"], tmp_path)
    # no frame of any bar (a terminal ends lines with \r\n; a bar redraws with a bare \r)
    assert not re.search(r"\r(?!\n)", out) and not re.search(r"\d+/\d+ \[", out), out
    assert "writing the synthetic twin url" in out   # what it does is still said, once
