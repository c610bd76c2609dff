"""Issue 36, item 3: inputs checked before any work (the simulator's P, network and timeout)."""

import math
import time

import pytest

import sparcml
import sparcml.sim as sim
from sparcml.sim._network import NetworkSpec
from sparcml.sim._runner import RANK_STATE_BYTES, check_memory


def _noop(comm):
    return comm.Get_rank()


def test_huge_P_is_refused_at_once_with_an_estimate():
    t0 = time.perf_counter()
    with pytest.raises(sparcml.InvalidArgumentError, match=r"P = 1,000,000,000,000 .*PiB"):
        sim.run(10**12, _noop, network="1000000000000x10gbit")
    assert time.perf_counter() - t0 < 5  # no rank was built


def test_check_memory_compares_the_estimate_with_what_is_available():
    check_memory(1000, available=1000 * RANK_STATE_BYTES)
    with pytest.raises(sparcml.InvalidArgumentError, match="GiB available"):
        check_memory(1001, available=1000 * RANK_STATE_BYTES)


@pytest.mark.parametrize("field,value", [("bandwidth", -1.0), ("bandwidth", math.nan),
                                         ("bandwidth", 0.0), ("intra_bandwidth", math.inf),
                                         ("latency", -1e-6), ("intra_latency", math.nan),
                                         ("nodes", 0), ("ppn", 1.5), ("bandwidth", "10gbit")])
def test_network_spec_built_directly_is_checked(field, value):
    good = sim.parse_network("4x10gbit")
    fields = {f: getattr(good, f) for f in ("nodes", "ppn", "bandwidth", "latency",
                                            "intra_bandwidth", "intra_latency", "text")}
    NetworkSpec(**fields)  # the parsed values pass
    fields[field] = value
    with pytest.raises(sparcml.InvalidArgumentError, match=f"NetworkSpec.{field}"):
        NetworkSpec(**fields)


@pytest.mark.parametrize("timeout", [math.nan, "10", -1, 0, math.inf, True])
def test_bad_timeout_is_an_invalid_argument(timeout):
    with pytest.raises(sparcml.InvalidArgumentError, match="timeout"):
        sim.run(2, _noop, timeout=timeout)


def test_good_timeout_runs():
    assert sim.run(2, _noop, timeout=60, compute="measured").results == [0, 1]


# ---- CLIs (item 3 of the issue: bad input found before any work, records read line by line)
def test_a_records_line_nested_too_deeply_is_skipped_with_its_line_number(tmp_path):
    from sparcapps.records import append_record, make_record, read_records

    path = tmp_path / "r.jsonl"
    good = make_record("sparc-bench", config={}, environment={}, algorithm="dense", P=2)
    append_record(path, good)
    with open(path, "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    append_record(path, good)
    records, problems = read_records([path])
    assert [(p.line, "nested too deeply" in p.reason) for p in problems] == [(2, True)]
    assert [r["_source"].rsplit(":", 1)[1] for r in records] == ["1", "3"]


@pytest.mark.parametrize("job_id", ["notanumber", "12a", "", "-3"])
def test_sparc_jobs_wait_refuses_a_bad_job_id_with_exit_2(job_id, capsys):
    from sparcapps import jobs

    with pytest.raises(SystemExit) as exc:
        jobs.main(["wait", job_id])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not a Slurm job id" in err and "Traceback" not in err


def test_sparc_jobs_wait_without_squeue_is_one_line_exit_2(monkeypatch, capsys):
    from sparcapps import jobs

    monkeypatch.setenv("PATH", "/nonexistent")
    assert jobs.main(["wait", "1234", "1234_5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparc-jobs: cannot run squeue") and err.count("\n") == 1


@pytest.mark.parametrize("app,flags", [("lstm", ["--lr", "nan"]), ("lstm", ["--bptt", "-3"]),
                                       ("lstm", ["--lr", "-0.1"]), ("cnn", ["--lr", "inf"]),
                                       ("lstm", ["--clip-grad-norm", "nan"]),
                                       ("cnn", ["--warmup-steps", "-1"]),
                                       ("cnn", ["--bucket-mb", "0"])])
def test_deep_apps_refuse_bad_numbers_at_parse_time(app, flags, capsys):
    import importlib

    module = importlib.import_module(f"sparcapps.deep.{app}")
    with pytest.raises(SystemExit) as exc:
        module.build_parser().parse_args(flags)
    assert exc.value.code == 2
    assert flags[0] in capsys.readouterr().err


@pytest.mark.parametrize("flags,needle", [(["--pattern", "replay"], "needs --replay FILE"),
                                          (["--replay", "x.npz"], "add it to --pattern")])
def test_sparc_bench_replay_without_its_file_is_a_usage_error(flags, needle, capsys):
    from sparcapps.bench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(flags)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def _refused_dir(tmp_path):
    """A directory where creating a file fails: ``/sys`` for root (whose permission bits say
    yes: ``os.access`` alone passed it, and the run found out at its end), else one made
    read-only here."""
    import os

    if os.geteuid() == 0:
        return "/sys"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return str(ro)


@pytest.mark.parametrize("module,argv,flag", [
    ("sparcapps.bench.cli", ["--N", "100", "--output", "{ro}/x.jsonl"], "-o/--output"),
    ("sparcapps.linear.cli", ["-o", "{ro}/x.jsonl"], "-o/--output"),
    ("sparcapps.report", ["x.jsonl", "-o", "{ro}/report"], "-o/--output-dir"),
    ("sparcapps.deep.lstm", ["--output", "{ro}/x.jsonl"], "-o/--output"),
    ("sparcapps.deep.cnn", ["--output", "{ro}/x.jsonl"], "-o/--output"),
])
def test_an_output_the_kernel_refuses_is_found_at_parse_time(module, argv, flag, tmp_path,
                                                             capsys):
    import importlib

    ro = _refused_dir(tmp_path)
    argv = [a.format(ro=ro) for a in argv]
    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as exc:
        if hasattr(mod, "build_parser") and module.startswith("sparcapps.deep"):
            mod.build_parser().parse_args(argv)  # the deep apps' main would import torch
        else:
            mod.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: cannot write" in err, err


def test_the_probe_leaves_nothing_behind(tmp_path):
    from sparcapps.output_paths import check_output_dir, check_output_file

    check_output_file(tmp_path / "new" / "x.jsonl")
    check_output_dir(tmp_path / "reports")
    (tmp_path / "old.jsonl").write_text("kept\n")
    check_output_file(tmp_path / "old.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.jsonl"]
    assert (tmp_path / "old.jsonl").read_text() == "kept\n"
