"""sparc-bench: inputs, the kernel benchmark (``scripts/kernel_bench.py``), and a small
multi-rank sweep whose records parse."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from mpirun import REPO, run_mpi
from sparcapps.bench import make_input


def _kernel_bench():
    """``scripts/kernel_bench.py`` as a module (a developer's script, not in the package)."""
    spec = importlib.util.spec_from_file_location("kernel_bench",
                                                  REPO / "scripts" / "kernel_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("pattern", ["random", "overlap", "disjoint"])
def test_make_input_patterns(pattern):
    dim, density, size = 10_007, 0.05, 3
    vecs = [make_input(dim, density, pattern, r, size, seed=7) for r in range(size)]
    k = round(density * dim)
    for v in vecs:
        assert v.dim == dim and not v.is_dense
        assert abs(v.nnz - k) <= (1 if pattern == "overlap" else 0)
    a, b = (set(v.indices.tolist()) for v in vecs[:2])
    if pattern == "disjoint":
        assert not a & b
        assert all(set((v.indices % size).tolist()) == {r} for r, v in enumerate(vecs))
    elif pattern == "overlap":
        assert len(a & b) >= 0.9 * k
    else:
        assert len(a & b) < 0.2 * k
    again = make_input(dim, density, pattern, 1, size, seed=7)
    np.testing.assert_array_equal(again.indices, vecs[1].indices)


def test_make_input_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown pattern"):
        make_input(10, 0.1, "clustered", 0, 1)
    with pytest.raises(ValueError, match="density must lie in"):
        make_input(10, 1.5, "random", 0, 1)


def test_kernel_benchmark_checks_its_result_and_reports_throughput():
    r = _kernel_bench().bench_merge_add(items=20_000, dim=1 << 20, reps=3)
    assert r["numba"]["n"] == 3 and r["numba_mitems_per_s"] > 0 and r["speedup"] > 0


def test_kernel_benchmark_times_each_variant_in_each_history(tmp_path, capsys):
    from sparcapps.bench import cli

    kernel_bench = _kernel_bench()
    r = kernel_bench.bench_merge_add(items=20_000, dim=1 << 20, reps=2)
    expected = {"warm", "fresh"} if sys.platform.startswith("linux") else {"warm"}
    assert set(r["histories"]) == expected
    for res in r["histories"].values():
        for v in kernel_bench.VARIANTS:
            assert res[v]["n"] == 2 and res["mitems_per_s"][v] > 0
        assert res["speedup"]["scipy"] == 1.0
    assert r["numba"] == r["histories"]["warm"]["alloc"]
    # the script prints one row per history and variant and writes one record with all of them
    out = tmp_path / "k.jsonl"
    assert kernel_bench.main(["--items", "5000", "--dim", str(1 << 16), "--reps", "2",
                              "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("merge_add_into (workspace)") == len(expected)
    assert printed.count("branchy merge (workspace)") == len(expected)
    assert "branch-free / branchy, warm: " in printed  # the kernel's margin, in the same run
    rec = json.loads(out.read_text())
    assert rec["app"] == "sparc-bench-kernels" and "warm/workspace" in rec["timings"]
    assert rec["metrics"]["warm/workspace/speedup"] > 0
    assert rec["timings"]["warm/alloc"]["n"] == 2
    # sparc-bench --kernels, where it lived before, says where it went (usage error, exit 2)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--kernels"])
    assert exit_.value.code == 2
    assert "python scripts/kernel_bench.py" in capsys.readouterr().err


@pytest.mark.mpi
def test_sweep_writes_one_parsable_record_per_row(tmp_path):
    out = tmp_path / "bench.jsonl"
    dim, densities, patterns, P = 100_003, (0.001, 0.3), ("random", "overlap", "disjoint"), 3
    proc = run_mpi(P, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", str(dim),
                            "--density", *map(str, densities), "--pattern", *patterns,
                            "--reps", "2", "--warmup", "0", "--bits", "4",
                            "--algorithms", "dense,ssar_recursive_double,dsar_split_allgather,auto",
                            "--output", str(out)], timeout=240)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # dense, then each other algorithm at full precision and with QSGD 4-bit beside it
    assert len(records) == len(densities) * len(patterns) * (1 + 3 * 2)
    assert "speedup" not in proc.stderr.lower()
    for rec in records:
        assert rec["app"] == "sparc-bench" and rec["status"] == "ok" and rec["P"] == P
        assert rec["N"] == dim and rec["timings"]["allreduce"]["n"] == 2
        assert rec["timings"]["allreduce"]["median"] > 0
        # the warm figure beside the interleaved one: reps // 2 back-to-back calls
        assert rec["timings"]["warm"]["n"] == 1 and rec["timings"]["warm"]["median"] > 0
        assert rec["environment"]["mpi_library"] and "\0" not in rec["environment"]["mpi_library"]
        if rec["algorithm"] == "dense":
            assert rec["metrics"]["speedup_over_dense"] == 1.0
            assert rec["bytes"]["sent_per_rank_max"] == 2 * (P - 1) * dim * 4 // P
        if rec["metrics"]["bits"] == 4 and rec["algorithm"] == "dsar_split_allgather":
            full = next(r for r in records if r["algorithm"] == "dsar_split_allgather"
                        and r["metrics"]["bits"] is None and r["density"] == rec["density"]
                        and r["metrics"]["pattern"] == rec["metrics"]["pattern"])
            assert rec["bytes"]["sent_per_rank_max"] < full["bytes"]["sent_per_rank_max"]
            continue
        if rec["algorithm"] == "auto":
            assert rec["metrics"]["ran"] in ("dense", "ssar_recursive_double",
                                             "ssar_split_allgather", "dsar_split_allgather",
                                             "allgather")
            assert rec["metrics"]["model"]["predicted_s"] > 0
        if rec["metrics"]["pattern"] == "disjoint" and not rec["metrics"]["bits"]:
            k = round(rec["density"] * dim)
            assert rec["metrics"]["result_density"] == pytest.approx(P * k / dim)
    # each row is printed on rank 0's table
    assert proc.stdout.count("random") == len(densities) * 7
    assert "dsar_split_allgather+q4" in proc.stdout and "auto:" in proc.stdout


@pytest.mark.mpi
def test_overlap_mode_times_comm_compute_and_both(tmp_path):
    out = tmp_path / "overlap.jsonl"
    run_mpi(2, args=[sys.executable, "-m", "sparcapps.bench.cli", "--overlap", "5",
                     "--N", "65536", "--density", "0.01", "--algorithms", "ssar_recursive_double",
                     "--reps", "2", "--output", str(out)], timeout=120)
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["app"] == "sparc-bench-overlap" and rec["P"] == 2
    t = rec["timings"]
    assert all(t[k]["n"] == 2 and t[k]["median"] > 0 for k in ("comm", "compute", "overlapped"))
    larger = max(t["comm"]["median"], t["compute"]["median"])
    assert rec["metrics"]["ratio_to_max"] == pytest.approx(t["overlapped"]["median"] / larger)
    assert rec["metrics"]["compute"] == "numpy" and rec["metrics"]["compute_ms"] == 5
    # PyTorch compute at another P, then both side by side in the report
    run_mpi(3, args=[sys.executable, "-m", "sparcapps.bench.cli", "--overlap", "5",
                     "--N", "65536", "--density", "0.01", "--algorithms", "ssar_recursive_double",
                     "--reps", "2", "--compute", "torch", "--output", str(out)], timeout=180)
    report = subprocess.run([sys.executable, "-m", "sparcapps.bench.overlap_report", str(out),
                             "--tolerance", "1e9"], capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert "| P=2:" in lines[1] and "| P=3:" in lines[1]
    rows = [line for line in lines if "ssar_recursive_double" in line]
    assert len(rows) == 2 and any(" numpy " in r for r in rows) and any(" torch " in r for r in rows)
    assert lines[-1].startswith("shared memory: overlapped within") and "2/2 cells" in lines[-1]
    assert "P=2: 1/1, P=3: 1/1" in lines[-1]
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    assert subprocess.run([sys.executable, "-m", "sparcapps.bench.overlap_report", str(empty)],
                          capture_output=True, timeout=60).returncode == 1


@pytest.mark.mpi
def test_reuse_output_rows_record_it(tmp_path):
    out = tmp_path / "reuse.jsonl"
    proc = run_mpi(2, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", "65536",
                            "--density", "0.1", "--algorithms", "dsar_split_allgather", "--bits",
                            "4", "--reps", "2", "--no-model", "--reuse-output", "--output",
                            str(out)], timeout=120)
    assert "into a reused out= buffer" in proc.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3 and all(r["metrics"]["reuse_output"] for r in records)


def test_compress_bench_times_every_variant_on_a_small_input(capsys):
    from sparcapps.bench import compress_bench

    rows = compress_bench.bench_qsgd(n=50_000, reps=1)
    assert [r["bits"] for r in rows] == [2, 4, 8]
    for r in rows:
        assert all(r[k] > 0 for k in ("encode_s", "decode_s", "decode_streaming_s",
                                      "before_encode_mvals_s", "before_decode_mvals_s"))
        assert r["ratio"] == pytest.approx(200_000 / r["bytes"])
    t = compress_bench.bench_topk(n=50_000, density=0.01, reps=1)
    assert t["k"] == 500 and t["kernel_s"] > 0 and t["argpartition_s"] > 0
    compress_bench.main(["--N", "20000", "--reps", "1"])
    out = capsys.readouterr().out
    assert "streaming ms" in out and "TopK, 20000 float32 values, density 0.01, k = 200" in out
    # the "(before -> now)" columns say what "before" is (a newcomer's walk could not tell)
    assert "before -> now: M values/s of the previous kernels" in out


def _bench_record(P, algorithm, median_s, ran=None, predicted_s=None):
    from sparcapps.records import make_record

    metrics = {"pattern": "random", "dtype": "float32", "nonblocking": False,
               "ran": ran or algorithm,
               "model": None if predicted_s is None else {"predicted_s": predicted_s}}
    return make_record("sparc-bench", config={}, environment={}, algorithm=algorithm, P=P,
                       N=1000, density=0.01, timings={"allreduce": {"median": median_s}},
                       metrics=metrics)


def test_auto_report_judges_auto_and_the_model(tmp_path, capsys):
    from sparcapps.bench import auto_report
    from sparcapps.records import append_record

    path = tmp_path / "grid.jsonl"
    for rec in (_bench_record(2, "dense", 0.010, predicted_s=0.012),
                _bench_record(2, "ssar_recursive_double", 0.002, predicted_s=0.005),  # 2.5x off
                _bench_record(2, "auto", 0.0022, ran="ssar_recursive_double"),
                _bench_record(4, "dense", 0.010, predicted_s=0.010),
                _bench_record(4, "ssar_recursive_double", 0.004, predicted_s=0.004),
                _bench_record(4, "auto", 0.010, ran="dense")):  # 2.5x the fastest
        append_record(path, rec)
    with open(path, "a") as fh:
        fh.write("not json\n")
    assert auto_report.main([str(path)]) == 0
    captured = capsys.readouterr()
    assert "skipped" in captured.err and "not valid JSON" in captured.err
    assert "1/2 cells (50%)" in captured.out and "3/4 rows (75%)" in captured.out
    assert captured.out.count("<-- outside") == 1
    with pytest.raises(SystemExit, match="no such records file"):
        auto_report.main([str(tmp_path / "missing.jsonl")])


def test_reports_without_their_runs_name_the_run_they_need(tmp_path, capsys):
    """The README's plain sweep has no auto or --overlap rows: each report says which run
    makes them (space-separated lists, no deprecated comma form), exit 1."""
    from sparcapps.bench import auto_report, overlap_report
    from sparcapps.records import append_record

    path = tmp_path / "bench.jsonl"
    append_record(path, _bench_record(2, "dense", 0.010, predicted_s=0.012))
    append_record(path, _bench_record(2, "ssar_recursive_double", 0.002))
    assert auto_report.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"no cell of {path} has an 'auto' row" in err, err
    assert "sparc-bench --algorithms ssar_recursive_double " in err and " auto --output" in err
    assert "," not in err.split("--algorithms")[1], err
    assert overlap_report.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"no record of {path} is of an --overlap run" in err
    assert "sparc-bench --overlap 50 100 --output" in err, err


@pytest.mark.mpi
def test_topk_rows_time_topk_allreduce_beside_the_algorithms(tmp_path):
    # P = 3: at P = 2 the plain top-k runs its cached plan, one exchange of the whole input
    # (the bytes of recursive doubling's one round, for its latency); from P = 3 it keeps
    # its reduce-scatter and sends less than the sparse allreduce
    out = tmp_path / "topk.jsonl"
    proc = run_mpi(3, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", "65536",
                            "--density", "0.01", "--algorithms", "ssar_recursive_double",
                            "--topk", "100", "--reps", "2", "--no-model", "--output", str(out)],
                   timeout=120)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["algorithm"] for r in records] == ["dense", "ssar_recursive_double",
                                                 "topk_allreduce"]
    topk, ssar = records[2], records[1]
    assert topk["metrics"]["topk"] == 100 and topk["metrics"]["result_density"] == 100 / 65536
    assert topk["bytes"]["sent_per_rank_max"] < ssar["bytes"]["sent_per_rank_max"]
    assert "topk_allreduce(100)" in proc.stdout and "local top-k selection" in proc.stdout


def test_powerlaw_pattern_is_a_minibatch_support():
    vecs = [make_input(60_000, 0.02, "powerlaw", r, 3, seed=1) for r in range(3)]
    assert all(v.nnz == 1200 for v in vecs)
    common = set.intersection(*(set(v.indices.tolist()) for v in vecs))
    assert set(range(16)) <= common  # the dense features are in every row
    assert all(np.mean(v.indices < 6000) > 0.5 for v in vecs)  # most on the first tenth


@pytest.mark.mpi
def test_coding_and_partition_columns_side_by_side(tmp_path):
    out = tmp_path / "wire.jsonl"
    proc = run_mpi(3, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", "60000",
                            "--density", "0.02", "--pattern", "powerlaw", "--reps", "2",
                            "--warmup", "1", "--no-model", "--index-coding", "coded", "raw",
                            "auto",
                            "--partitions", "balanced", "equal", "--algorithms",
                            "ssar_split_allgather,ssar_recursive_double", "--output", str(out)],
                   timeout=180)
    rows = {(r["algorithm"], r["metrics"]["index_coding"], r["metrics"]["partitions"]): r
            for r in map(json.loads, out.read_text().splitlines())}
    split, rd = "ssar_split_allgather", "ssar_recursive_double"
    assert len(rows) == 1 + 6 + 3  # dense; split x coding x partitions; recursive x coding
    for alg, parts in ((split, "balanced"), (split, "equal"), (rd, "balanced")):
        coded, raw = rows[alg, "coded", parts]["bytes"], rows[alg, "raw", parts]["bytes"]
        assert coded["sent_per_rank_max"] < 0.8 * raw["sent_per_rank_max"], alg
        # auto, all ranks on one node: the bytes coding saves are worth less than its CPU
        auto = rows[alg, "auto", parts]["bytes"]
        assert auto["sent_per_rank_max"] == raw["sent_per_rank_max"], alg
    imbalance = {p: rows[split, "coded", p]["bytes"]["phase1_received_max_over_mean"]
                 for p in ("balanced", "equal")}
    assert imbalance["balanced"] <= 1.3 < 1.6 < imbalance["equal"], imbalance
    assert "ssar_split_allgather+raw+eq" in proc.stdout


def test_a_case_is_predicted_with_its_own_index_coding():
    """sparc-bench's predicted seconds of a case follow the case's ``index_coding`` (they took
    the process default before), as the call itself does."""
    from types import SimpleNamespace

    import numpy as np

    import sparcml
    from sparcapps.bench.runner import BenchCase, _describe, case_options

    class FourRanks:  # what _describe reads of a communicator
        def allgather(self, x):
            return [x] * 4

        def Get_size(self):
            return 4

    model = sparcml.CostModel()
    stats = SimpleNamespace(bytes_sent=8, inter_node_bytes=0, bytes_received=8, messages=1,
                            dense_messages=0, algorithm="ssar_recursive_double",
                            hierarchical=False)
    N, k = 1 << 20, 5000
    result = sparcml.SparseVector(N, np.arange(4 * k, dtype=np.int32),
                                  np.ones(4 * k, np.float32))
    predicted = {}
    for coding in ("raw", "coded"):
        case = BenchCase(N, k / N, "random", "ssar_recursive_double", index_coding=coding)
        out = _describe(case, FourRanks(), [1e-3], stats, result, k, model, 0)
        predicted[coding] = out["model"]["predicted_s"]
        assert predicted[coding] == model.predict(
            "ssar_recursive_double", P=4, N=N, k=k, K=4 * k, s_idx=4, s_val=4,
            options=case_options(case))
    assert predicted["raw"] != predicted["coded"], predicted


@pytest.mark.mpi
def test_cold_call_floor_in_c_builds_and_reports(tmp_path):
    """``scripts/cold_call_floor.c`` (issue 34's cold call with no Python; BENCHMARKS "The cold
    call") compiles with the MPI's own ``mpicc`` beside ``mpiexec`` and prints its line at P = 2;
    it aborts if its merge or its agreement comes out wrong. The figures are not checked."""
    from pathlib import Path

    from mpirun import mpiexec_path

    mpicc = Path(mpiexec_path()).with_name("mpicc")
    binary = tmp_path / "cold_call_floor"
    subprocess.run([str(mpicc), "-O2", "-Wall", "-Werror", "-o", str(binary),
                    str(REPO / "scripts" / "cold_call_floor.c")], check=True, timeout=120)
    out = run_mpi(2, args=[str(binary), "3"], timeout=120).stdout
    assert "C floor, P = 2, N = 16777216, 16777 nonzeros: warm " in out, out
    assert "cold / warm" in out and "(medians of 3)" in out, out
