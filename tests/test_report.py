"""sparc-report: tables whose numbers are the records', figures people can read, commands that
reproduce the figures into new records."""

import csv
import json
import re

import pytest

from sparcapps.records import RecordError, append_record, make_record, summarize
from sparcapps.report import build_report, main, rerun_command
from sparcapps.records import read_records

PNG = b"\x89PNG\r\n\x1a\n"
ENV = {"hosts": ["n0", "n1"], "python": "3.11", "git_commit": "abc123",
       "command": ["sparc-bench", "--N", "1000", "--output", "res/sweep.jsonl"],
       "mpi_library": "MPICH Version: 5\nmore", "slurm": {"SLURM_JOB_ID": "77"}}


def _bench(P, density, alg, median, N=1000, env=None, **metrics):
    samples = [median * 0.9, median, median * 1.3]
    return make_record("sparc-bench", config={"pattern": "random", "dtype": "float32"},
                       environment={**ENV, "hosts": [f"n{i}" for i in range(P)], **(env or {})},
                       P=P, N=N, density=density, algorithm=alg,
                       timings={"allreduce": summarize(samples)}, metrics=metrics,
                       bytes={"sent_per_rank": 8 * P})


def make_sweep(path):
    """A small sweep: P x density x algorithm, plus an app, a failure, and two bad lines."""
    expected = {}
    for P in (2, 4, 8):
        for d in (0.001, 0.01):
            dense_t = 0.01 * P
            append_record(path, _bench(P, d, "dense", dense_t, model_seconds=dense_t * 0.7))
            t = 0.001 * P * (1 + 100 * d)
            # the model as sparc-bench writes it, for one algorithm; flat keys for dense
            append_record(path, _bench(P, d, "ssar_split_allgather", t,
                                       model={"predicted_s": t * 0.8, "floor_s": t * 0.3,
                                              "rs_ag_s": t * 0.5}))
            expected[(P, d, "ssar_split_allgather")] = (t, dense_t / t)
            expected[(P, d, "dense")] = (dense_t, 1.0)
            # allgather carries its own speedup, which the report must show as recorded
            append_record(path, _bench(P, d, "allgather", 2 * t, speedup_over_dense=1.2345))
            expected[(P, d, "allgather")] = (2 * t, 1.2345)
    epochs = [{"epoch": e, "wall_seconds": 1.5 * e, "loss": 1 / e, "test_accuracy": 0.5 + e / 10}
              for e in (1, 2, 3)]
    append_record(path, make_record("sparc-linear", config={"bits": 4, "synth": "url",
                                                            "no_error_feedback": True},
                                    environment=ENV, P=2,
                                    algorithm="ssar_split_allgather", density=0.00271406,
                                    metrics={"epochs": epochs}))
    append_record(path, make_record("sparc-bench", config={"command": ["mpiexec", "sparc-bench"]},
                                    environment=ENV, P=4, status="failed",
                                    error="mpiexec exited with status 9\nkilled"))
    with open(path, "a") as fh:
        fh.write('{"schema": 1, "app": "sparc-bench", "status": "ok", "timings": {"allreduce": \n')
        fh.write(json.dumps(_bench(2, 0.5, "dense", 1e9))[:-40])  # partial: writer died
    return path, expected


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sweep's report, built once for the tests that read it: (path, expected, out, md,
    problems, figures)."""
    from sparcapps.report.build import build

    tmp = tmp_path_factory.mktemp("sweep")
    path, expected = make_sweep(tmp / "sweep.jsonl")
    md_path, problems, figs = build([path], tmp / "out")
    return path, expected, tmp / "out", md_path.read_text(), problems, figs


@pytest.fixture
def sweep(tmp_path):
    return make_sweep(tmp_path / "sweep.jsonl")


def _table(md, heading):
    """Rows (dicts) of the first Markdown table after ``heading``."""
    section = md.split(heading + "\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("|"))
    lines = []
    for line in section[start:]:
        if not line.startswith("|"):
            break
        lines.append([c.strip() for c in line.strip("|").split("|")])
    return [dict(zip(lines[0], cells)) for cells in lines[2:]]


def _num(text):
    return float(text.replace(",", "").split()[0].rstrip("%"))


def test_report_tables_match_records(built):
    path, expected, out, md, problems, _ = built
    # the two bad lines are skipped and named by file:line
    assert [p.line for p in problems] == [21, 22]  # 18 bench + app + failure, then 2
    assert f"{path}:21" in md and f"{path}:22" in md
    assert "1e+09" not in md
    rows = _table(md, "## Collectives")
    assert len(rows) == len(expected) == 18
    for row in rows:
        assert row["density"].endswith("%")
        t, speedup = expected[(int(row["P"]), _num(row["density"]) / 100,
                               row["configuration"])]
        assert _num(row["median ms"]) == pytest.approx(t * 1e3, rel=5e-3)
        q25, q75 = row["q25\u2013q75 ms"].split("\u2013")
        assert _num(q75) == pytest.approx(t * 1.15e3, rel=5e-3)
        assert _num(row["speedup vs dense"]) == pytest.approx(speedup, rel=5e-3)
        assert _num(row["KiB sent / rank"]) == pytest.approx(8 * int(row["P"]) / 1024, rel=5e-3)
        model = {"ssar_split_allgather": (0.8, 0.3, 0.5), "dense": (0.7, None, None)}.get(
            row["configuration"], (None, None, None))
        for col, factor in zip(("model ms", "floor ms", "RS+AG ms"), model):
            if factor is None:
                assert row[col] == ""
            else:
                assert _num(row[col]) == pytest.approx(t * factor * 1e3, rel=5e-3)
    # the speedup's range from the quartiles: dense q25 / q75 .. dense q75 / q25
    row = next(r for r in rows if r["configuration"] == "ssar_split_allgather"
               and r["P"] == "2" and r["density"] == "0.1%")
    lo, hi = re.search(r"\(([\d.]+)\u2013([\d.]+)\)", row["speedup vs dense"]).groups()
    t, s = expected[(2, 0.001, "ssar_split_allgather")]
    assert float(lo) == pytest.approx(s * 0.95 / 1.15, rel=0.02)
    assert float(hi) == pytest.approx(s * 1.15 / 0.95, rel=0.02)
    # columns with one value (and nodes = P) are said once above the table
    assert "One rank per node in every row." in md
    assert "In every row: N 1,000, pattern random, dtype float32, source measured, reps 3." in md
    # the full precision is in the CSV
    csv_text = (out / "collectives.csv").read_text()
    assert csv_text.count("\n") == 19 and "0.0011" in csv_text
    # the failure is shown, with its error
    assert "## Failed runs" in md and "mpiexec exited with status 9" in md
    # training run table: final epoch values, the data set and the configuration in words
    train = _table(md, "## Training runs")[0]
    assert (train["app"], train["epochs"], float(train["test accuracy"]),
            float(train["wall s"])) == ("sparc-linear", "3", 0.8, 4.5)
    assert train["configuration"] == ("ssar_split_allgather, density 0.271%, 4-bit QSGD, "
                                      "no error feedback")
    assert train["data set"] == "synthetic url"
    # environment and rerun commands
    assert "MPICH Version: 5" in md and "abc123" in md and "77" in md


def test_rerun_commands_at_the_users_level():
    """Defect 11: the command at the level the user ran it, writing a new records file."""
    old = {"P": 8, "environment": {"command": ["sparc-bench", "--N", "1 2", "--output",
                                               "r/x.jsonl"]}}
    # a record from before 'launcher' was kept: mpiexec, with a new output file
    assert rerun_command(old) == "mpiexec -n 8 sparc-bench --N '1 2' --output r/x.rerun.jsonl"
    assert rerun_command(old, "new.jsonl").endswith("--output new.jsonl")
    emulated = {**old, "environment": {**old["environment"],
                                       "emulated_network": "4x1gbit,ppn=2"}}
    assert rerun_command(emulated) == ("bash jobs/emulate.sh --ranks-per-node 2 4x1gbit -- "
                                       "sparc-bench --N '1 2' --output r/x.rerun.jsonl")
    plain = {"P": 1, "environment": {"command": ["sparc-bench", "--output=a.jsonl"],
                                     "launcher": None}}
    assert rerun_command(plain) == "sparc-bench --output=a.rerun.jsonl"
    simulated = {"P": 64, "simulated": True, "network": "10gbit",
                 "environment": {"command": ["sparc-bench", "--simulate", "64"]}}
    assert rerun_command(simulated) == "sparc-bench --simulate 64"  # one process, no output
    sbatch = ("SPARC_N_PER_RANK=1024 SPARC_RESULTS=res sbatch --nodes=4 --ntasks-per-node=2 "
              "jobs/bench-weak.sbatch --density 0.01")
    job = {"P": 8, "environment": {**old["environment"], "launcher": "mpiexec",
                                   "submitted": {"sbatch": sbatch}}}
    # the results root is the template's business: a new job writes a new directory
    assert rerun_command(job) == ("SPARC_N_PER_RANK=1024 sbatch --nodes=4 --ntasks-per-node=2 "
                                  "jobs/bench-weak.sbatch --density 0.01")
    sweep = ("sparc-jobs sweep jobs/bench-strong.sbatch --nodes 1 2 "
             "--sbatch-arg=--ntasks-per-node=2 --results res -- --N 2048")
    job["environment"]["submitted"]["sweep"] = sweep
    assert rerun_command(job) == sweep
    from sparcapps.report import command_of

    assert command_of(job).with_output(results="new").line() == sweep.replace("res ", "new ")


def test_a_rerun_writes_no_file_of_the_run_it_reproduces():
    """A rerun of a run that saved a model or a checkpoint writes them anew, beside the new
    records (or with .rerun in their names), instead of overwriting the original's."""
    rec = {"P": 2, "environment": {"command": [
        "sparc-linear", "--save-model", "out/m.h5", "--checkpoint=out/c.h5", "--output",
        "out/r.jsonl"], "launcher": "mpiexec"}}
    assert rerun_command(rec) == ("mpiexec -n 2 sparc-linear --save-model out/m.rerun.h5 "
                                  "--checkpoint=out/c.rerun.h5 --output out/r.rerun.jsonl")
    short = {"P": 1, "environment": {"command": ["sparc-svm", "-o", "r.jsonl"],
                                     "launcher": None}}
    assert rerun_command(short) == "sparc-svm --output r.rerun.jsonl"
    assert rerun_command(rec, "new/rerun-records.jsonl") == (
        "mpiexec -n 2 sparc-linear --save-model new/rerun-m.h5 --checkpoint=new/rerun-c.h5 "
        "--output new/rerun-records.jsonl")
    # a Slurm job's line too (issue 36's walk: its rerun overwrote the checkpoint a scancel left)
    sbatch = "sbatch --nodes=1 jobs/app.sbatch sparc-linear --checkpoint c.h5 --save-model m.h5"
    sweep = "sparc-jobs sweep jobs/app.sbatch --nodes 1 -- sparc-cnn --checkpoint=c.ckpt"
    job = {**rec, "environment": {**rec["environment"], "submitted": {"sbatch": sbatch}}}
    assert rerun_command(job) == sbatch.replace("c.h5", "c.rerun.h5").replace("m.h5",
                                                                              "m.rerun.h5")
    job["environment"]["submitted"]["sweep"] = sweep
    assert rerun_command(job) == sweep.replace("c.ckpt", "c.rerun.ckpt")
    # a resumed run checkpoints into its --resume file: the rerun names another
    resumed = {"P": 2, "environment": {"command": [
        "sparc-linear", "--resume", "c.h5", "-o", "r.jsonl"], "launcher": "mpiexec"}}
    assert rerun_command(resumed) == ("mpiexec -n 2 sparc-linear --resume c.h5 --output "
                                      "r.rerun.jsonl --checkpoint c.rerun.h5")
    resumed["environment"]["command"][1:3] = ["--resume=c.h5", "--checkpoint=k.h5"]
    assert rerun_command(resumed) == ("mpiexec -n 2 sparc-linear --resume=c.h5 "
                                      "--checkpoint=k.rerun.h5 --output r.rerun.jsonl")


def test_figures_readable(built):
    """Defect 10: log2 rank axis with integer ticks, error bars, units, legends in words."""
    figs = built[5]
    by_kind = {f.id.split("-")[0]: f for f in figs}
    assert {"strong", "speedup", "density", "model", "test_accuracy"} <= set(by_kind)
    for f in figs:
        assert f.png[:8] == PNG
        width, height = int.from_bytes(f.png[16:20], "big"), int.from_bytes(f.png[20:24], "big")
        assert width > 600 and height > 400
        assert "_" not in f.meta["xlabel"] + f.meta["ylabel"], f.meta  # no raw keys
        for text in f.meta["legend"]:
            assert not re.search(r"d=|P=\d+ d|\s-$|^-$|\d\.\d{5,}", text), (f.id, text)
    for kind in ("strong", "speedup"):
        m = by_kind[kind].meta
        assert m["xscale"] == "log" and m["xticklabels"] == ["2", "4", "8"], m
        assert m["yscale"] == "log", m  # a speedup of 60x must not squash one of 2x
        # three repetitions per point: no quartile bars, and the caption says why
        assert m["errorbars"] == 0, m
        assert "no bars: fewer than 5 repetitions per point" in by_kind[kind].caption
    assert "ms" in by_kind["strong"].meta["ylabel"]
    assert "dense" in by_kind["strong"].meta["legend"]
    assert "%" in "".join(by_kind["density"].meta["xticklabels"])
    assert by_kind["test_accuracy"].meta["legend"] == [
        "ssar_split_allgather, density 0.271%, 4-bit QSGD, no error feedback, P = 2",
        "time-to-accuracy target (99% of the runs' lowest best)"]


def test_html_is_self_contained_and_commands_once_per_group(built):
    _, _, out, md, _, figs = built
    html = (out / "report.html").read_text()
    assert "src=" not in html and "<?xml" not in html
    svgs = re.findall(r"<svg role='img'[^>]*>", html)
    assert len(svgs) == len(figs)
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(images) == len(figs)
    for name in images:  # the PNG at 150 dpi and the SVG beside report.md
        assert (out / name).read_bytes()[:8] == PNG
        svg = (out / name).with_suffix(".svg").read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and f"({name[:-4]}.svg)" in md
    # ids are unique in the page: several inline SVGs must not share a glyph or clip path
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)) and ids
    # the bench records share one command: one block for every figure made from it
    line = "mpiexec -n 4 sparc-bench --N 1000 --output res/sweep.rerun.jsonl"
    assert md.count(line) == 1 and "res/sweep.jsonl" not in md.split("## Commands")[1]


def test_data_sizes_and_simulated_records(tmp_path):
    """Runs on two data sizes get figures of their own; simulated records (helper 'sim':
    ``simulated``, ``network``) join the measured ones with their own markers up to P=1,024."""
    path = tmp_path / "r.jsonl"
    sim_env = {"command": ["sparc-bench", "--simulate", "2", "1024", "--network", "10gbit"],
               "launcher": None, "mpi_library": None}  # a simulated run records no MPI
    for N in (1000, 4000):
        for P in (2, 4):
            append_record(path, _bench(P, 0.01, "dense", 1e-3 * P, N=N))
            append_record(path, _bench(P, 0.01, "allgather", 5e-4 * P, N=N))
    for alg, t in (("dense", 4e-3), ("allgather", 2e-3)):  # weak scaling: N/P = 1,000
        append_record(path, _bench(2, 0.01, alg, t, N=2000))
    calibrated = {"kernels": {"rates": {"add": 1.8e-9}, "measured": "2026-12-07T10:55:43Z",
                              "source": "cache"}}
    for P in (1, 2, 4, 16, 256, 1024):
        for alg, t in (("dense", 1e-3 * P), ("allgather", 4e-4 * P)):
            rec = _bench(P, 0.01, alg, t, N=1000, env=sim_env)
            rec.update(simulated=True, network="10gbit", compute="model")
            if P >= 256:  # the calibration its modeled seconds rest on
                rec["sim_rates"] = calibrated
            append_record(path, rec)
    from sparcapps.report.build import build

    md_path, _, figs = build([path], tmp_path / "out")
    strong = {f.id: f for f in figs if f.id.startswith("strong")}
    assert sorted(strong) == ["strong-N-1000-d-0.01-random-float32",
                              "strong-N-4000-d-0.01-random-float32"]
    fig = strong["strong-N-1000-d-0.01-random-float32"]
    m = fig.meta
    assert "1,000" in m["title"]
    # measured and simulated never share an axis: one panel each, and the caption says why
    assert m["panel_titles"] == ["measured", "simulated (10gbit)"]
    assert [p["xticklabels"] for p in m["panels"]] == [["2", "4"],
                                                       ["1", "2", "4", "16", "256", "1,024"]]
    assert "their times do not compare" in fig.caption
    assert max(m["xdata"]) == 1024
    # the speedup at P = 1 (no communication) is left out
    speedup = next(f for f in figs if f.id == "speedup-N-1000-d-0.01-random-float32").meta
    assert min(speedup["xdata"]) == 2 and speedup["panels"][1]["xticklabels"][0] == "2"
    weak = next(f for f in figs if f.id == "weak-NperP-1000-d-0.01-random-float32")
    assert "N/P = 1,000" in weak.meta["title"] and weak.meta["xdata"] == [2, 4]
    # simulated: one point at N/P = 1,000 (P = 1), no line to draw; the caption says so
    assert weak.meta["panel_titles"] == [""]
    assert "Left out (a single point each, in the table): simulated (10gbit)." in weak.caption
    assert set(m["legend"]) == {"dense", "allgather"}
    alone = strong["strong-N-4000-d-0.01-random-float32"]
    assert alone.meta["panel_titles"] == [""] and "do not compare" not in alone.caption
    md = md_path.read_text()
    rows = _table(md, "## Collectives")
    assert {r["source"] for r in rows} == {"measured", "simulated (10gbit)"}
    assert md.count("sparc-bench --simulate 2 1024 --network 10gbit") == 1
    # the environment of simulated runs says why it names no MPI library, not an empty cell
    assert "| mpi | none (simulated ranks in one process) |" in md
    # and which calibration its modeled compute rests on: two calibrations, two environments
    assert "| modeled compute | calibrated rates: kernels measured 2026-12-07T10:55:43Z |" in md
    assert "| modeled compute | calibrated rates (when measured: not recorded) |" in md
    assert md.count("| modeled compute |") == 2


def test_time_to_accuracy_against_dense(tmp_path):
    from sparcapps.report.training import time_to_accuracy, training_runs

    path = tmp_path / "t.jsonl"
    for dense, speed in ((True, 1.0), (False, 2.0)):
        epochs = [{"epoch": e, "wall_seconds": e * 10 / speed, "test_accuracy": 0.6 + 0.1 * e}
                  for e in (1, 2, 3)]
        append_record(path, make_record("sparc-cnn", config={"dense": dense, "dataset": "cifar10"},
                                        environment=ENV, P=2, algorithm="ssar_split_allgather",
                                        density=None if dense else 0.01,
                                        metrics={"epochs": epochs}))
    records, _ = read_records([path])
    res = time_to_accuracy(training_runs(records))
    assert [r["run"]["config"] for r in res] == ["dense baseline",
                                                 "ssar_split_allgather, density 1%"]
    assert all(r["target"] == pytest.approx(0.9 * 0.99) for r in res)
    assert [r["seconds"] for r in res] == [30, 15] and res[1]["ratio"] == pytest.approx(2.0)
    md = build_report([path], tmp_path / "out")[0].read_text()
    assert _table(md, "## Training runs")[1]["dense time / time"] == "2.00"
    # under a training figure: no --rerun of it, which sparc-report refuses (issue 36's walk)
    (fig_id,) = re.findall(r"Figure (test_accuracy-\S+) \(", md)
    assert f"--rerun {fig_id}" not in md and "rerun its training runs with that group" in md


def test_cli(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    for P in (2, 4):
        append_record(path, _bench(P, 0.01, "dense", 1e-3 * P))
    with open(path, "a") as fh:
        fh.write("{partial")
    assert main([str(path), "-o", str(tmp_path / "a")]) == 0
    assert "skipped" in capsys.readouterr().err
    assert main([str(path), "-o", str(tmp_path / "b"), "--strict"]) == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("garbage\n")
    assert main([str(empty), "-o", str(tmp_path / "c")]) == 2
    assert "no valid records" in capsys.readouterr().err
    with pytest.raises(RecordError):
        build_report([tmp_path / "nope"], tmp_path / "d")
    assert main([str(path), "-o", str(tmp_path / "e"), "--rerun", "no-such-figure"]) == 2
    assert "figures: strong-" in capsys.readouterr().err


def _reps(P, alg, median, reps, **kw):
    """A bench record whose timing summarizes ``reps`` repetitions spread +-20%."""
    rec = _bench(P, 0.01, alg, median, **kw)
    rec["timings"]["allreduce"] = summarize(
        [median * (0.8 + 0.4 * i / (reps - 1)) for i in range(reps)])
    return rec


def test_error_bars_only_from_five_repetitions(tmp_path):
    """Quartiles of fewer than 5 repetitions are no spread to draw: those points are the
    median alone, and the caption says how many points have bars."""
    from sparcapps.report.build import build

    path = tmp_path / "r.jsonl"
    for P in (2, 4):
        append_record(path, _reps(P, "dense", 1e-2 * P, 5))
        append_record(path, _reps(P, "ssar_split_allgather", 1e-3 * P, 5))
        append_record(path, _reps(P, "allgather", 5e-3 * P, 4))
    _, _, figs = build([path], tmp_path / "out")
    by_kind = {f.id.split("-")[0]: f for f in figs}
    strong, speedup = by_kind["strong"], by_kind["speedup"]
    # one bar container per line with bars: dense and ssar (5 repetitions), not allgather (4)
    assert strong.meta["errorbars"] == 2
    assert "only where a point has >= 5 repetitions (4 of 6 points" in strong.caption
    # the speedup's range needs 5 repetitions of the algorithm and of dense
    assert speedup.meta["errorbars"] == 1 and "(2 of 4 points" in speedup.caption


def test_p1_only_report_claims_no_speedup(tmp_path):
    """At P = 1 nothing is communicated: a ratio of local copies is no speedup over dense."""
    path = tmp_path / "r.jsonl"
    for alg, t in (("dense", 0.0271), ("ssar_split_allgather", 0.0001)):
        append_record(path, _bench(1, 0.01, alg, t))
    append_record(path, _bench(1, 0.01, "allgather", 0.0002, speedup_over_dense=135.5))
    md = build_report([path], tmp_path / "out")[0].read_text()
    assert "no speedup over dense is meaningful" in md and "claims none" in md
    assert "271" not in md and "135" not in md  # 27.1 / 0.1 and the recorded 135.5
    assert "speedup vs dense none (P = 1)" in md  # said once above the table
    with open(tmp_path / "out" / "collectives.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 and all(r[k] == "" for r in rows
                                  for k in ("speedup", "speedup_lo", "speedup_hi"))
    assert not list((tmp_path / "out").glob("speedup-*"))


def test_coinciding_lines_are_drawn_apart(tmp_path):
    """Two configurations with the same times: the second is not drawn over the first (the
    lines are shifted a few points sideways and differ in marker)."""
    from sparcapps.report.build import build

    path = tmp_path / "r.jsonl"
    for P in (2, 4, 8):
        for alg, t in (("dense", 1e-2), ("ssar_split_allgather", 1e-3),
                       ("dsar_split_allgather", 1e-3), ("allgather", 5e-3)):
            append_record(path, _bench(P, 0.01, alg, t * P))
    _, _, figs = build([path], tmp_path / "out")
    assert {f.id.split("-")[0] for f in figs} == {"strong", "speedup"}
    for f in figs:
        lines = {line["label"]: line for line in f.meta["lines"]}
        a, b = lines["ssar_split_allgather"], lines["dsar_split_allgather"]
        assert a["marker"] != b["marker"]
        gaps = [abs(p[0] - q[0]) for p, q in zip(a["drawn"], b["drawn"])]
        assert len(gaps) == 3 and min(gaps) >= 5, (f.id, gaps)  # pixels at 150 dpi
        # lines that do not coincide stay where their data are
        if "dense" in lines:
            dense, ag = lines["dense"]["drawn"], lines["allgather"]["drawn"]
            assert [p[0] for p in dense] == pytest.approx([p[0] for p in ag], abs=0.01)


def test_modeled_dense_baseline_shares_the_simulated_axes(tmp_path):
    """Issue 33: a simulated report drew the modeled-only dense baseline (P x N values past
    --sim-dense-memory) in a panel of its own with its own y axis, so sparse against dense could not
    be read off it. Now it is a line on the sparse algorithms' axes, marked as modeled: its own
    marker and line style, "(modeled)" in its label; a simulated dense point stays plain."""
    from sparcapps.report import plotting as pl
    from sparcapps.report.build import build

    path = tmp_path / "r.jsonl"
    sim_env = {"command": ["sparc-bench", "--simulate", "16", "64", "256"], "launcher": None}
    for P in (16, 64, 256):
        for alg, t in (("dense", 2e-3 * P ** 0.5), ("allgather", 1e-4 * P)):
            modeled = alg == "dense" and P > 16
            rec = _bench(P, 0.001, alg, t, N=1 << 24, env=sim_env, modeled_only=modeled)
            rec.update(simulated=True, network="256x10gbit")
            append_record(path, rec)
    _, _, figs = build([path], tmp_path / "out")
    strong = next(f for f in figs if f.id.startswith("strong-N-16777216"))
    m = strong.meta
    assert len(m["panels"]) == 1  # one y axis for every line
    assert m["panel_titles"] == ["simulated (256x10gbit)"]
    lines = {line["label"]: line for line in m["lines"]}
    assert set(lines) == {"dense", "dense (modeled)", "allgather"}
    modeled, simulated = lines["dense (modeled)"], lines["dense"]
    assert modeled["marker"] == pl.MODELED_MARKER != simulated["marker"]
    assert modeled["linestyle"] == pl.MODELED_LINESTYLE != simulated["linestyle"]
    assert len(modeled["drawn"]) == 2 and len(simulated["drawn"]) == 1
    assert lines["allgather"]["linestyle"] == simulated["linestyle"]
    assert "dense (modeled)" in m["legend"]
    assert "do not compare" not in strong.caption
