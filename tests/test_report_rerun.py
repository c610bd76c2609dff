"""Reproducibility: records keep the command the user ran (sparc-jobs sweep, sbatch, mpiexec,
plain), and ``sparc-report --rerun FIGURE`` runs a figure's commands again into new records."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from mpirun import run_mpi

from sparcapps import jobs
from sparcapps.records import capture_environment, read_records
from sparcapps.report import main as report_main

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_capture_environment_keeps_the_launch(monkeypatch):
    for var in ("SPARC_SUBMIT_SBATCH", "SPARC_SUBMIT_SWEEP", "PMI_SIZE", "PMIX_RANK",
                "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)
    env = capture_environment()
    assert env["launcher"] is None and "submitted" not in env
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("SPARC_SUBMIT_SBATCH", "sbatch --nodes=2 jobs/app.sbatch sparc-cnn")
    monkeypatch.setenv("SPARC_SUBMIT_SWEEP", "sparc-jobs sweep jobs/app.sbatch --nodes 2")
    env = capture_environment()
    assert env["launcher"] == "mpiexec"
    assert env["submitted"] == {"sbatch": "sbatch --nodes=2 jobs/app.sbatch sparc-cnn",
                                "sweep": "sparc-jobs sweep jobs/app.sbatch --nodes 2"}


def test_sweep_passes_its_line_and_each_jobs_sbatch_line(tmp_path, monkeypatch, capsys):
    """Defect 11: what a sweep's jobs record is the sweep and the job's sbatch line (node
    count, tasks per node), not the mpiexec line the template ran."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    seen = tmp_path / "seen.jsonl"
    fake.write_text("#!/bin/sh\n"
                    f"{sys.executable} -c \"import json, os; print(json.dumps({{k: v for k, v in "
                    f"os.environ.items() if k.startswith('SPARC_')}}), file=open('{seen}', 'a'))"
                    "\"\necho 42\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPARC_N_PER_RANK", "1024")
    for var in ("SPARC_RESULTS", "SPARC_GLOBAL_BATCH", "SPARC_LAUNCH", "SPARC_SETUP"):
        monkeypatch.delenv(var, raising=False)
    res = tmp_path / "res"
    argv = ["sweep", str(REPO / "jobs" / "bench-weak.sbatch"), "--nodes", "1", "4",
            "--sbatch-arg=--ntasks-per-node=2", "--algorithms", "allgather", "--results",
            str(res), "--", "--density", "0.01"]
    assert jobs.main(argv) == 0
    envs = [json.loads(line) for line in seen.read_text().splitlines()]
    sweep = (f"SPARC_N_PER_RANK=1024 sparc-jobs sweep {REPO}/jobs/bench-weak.sbatch --nodes 1 4 "
             f"--sbatch-arg=--ntasks-per-node=2 --algorithms allgather --results {res} -- "
             "--density 0.01")
    assert [e["SPARC_SUBMIT_SWEEP"] for e in envs] == [sweep, sweep]
    for nodes, e in zip((1, 4), envs):
        line = e["SPARC_SUBMIT_SBATCH"]
        assert line.startswith(f"SPARC_N_PER_RANK=1024 SPARC_RESULTS={res} sbatch ")
        assert f"--nodes={nodes}" in line and "--ntasks-per-node=2" in line
        assert line.endswith("bench-weak.sbatch --density 0.01 --algorithms allgather")


def test_sbatch_line_rebuilt_inside_a_job(monkeypatch):
    """A plain ``sbatch`` of a template: the job rebuilds its line from Slurm's variables."""
    env = {"SLURM_JOB_ID": "999999999", "SLURM_JOB_NUM_NODES": "4",
           "SLURM_NTASKS_PER_NODE": "2", "SPARC_GLOBAL_BATCH": "64"}
    line = jobs.submission_command("sparc-linear '--data' 'a b.h5'", env)  # bash's ${*@Q}
    assert line.startswith("SPARC_GLOBAL_BATCH=64 sbatch --nodes=4 --ntasks-per-node=2 ")
    assert line.endswith(" sparc-linear --data 'a b.h5'")  # re-quoted by shlex.join
    assert jobs.submission_command("", {}) is None  # outside Slurm: the mpiexec level


@pytest.mark.mpi
def test_rerun_figure_into_new_records(tmp_path, capsys):
    """``sparc-report RESULTS --rerun FIGURE -o DIR`` reruns a small figure's command and puts
    the figures side by side.

    Noise, honestly: on this shared 2-core machine (seven sessions' tests and benchmarks) the
    same ms-scale P = 2 allreduce has quartiles up to 5x apart within one run, and a point's
    median moved 3.5x between two runs a minute apart. So "within noise" is judged with each
    run's own spread: for every point the two runs' quartile ranges, each widened by 2x, must
    overlap, and the medians must agree within 4x on (geometric) average. A figure from
    another size, algorithm or code path fails that or misses points; a quiet machine passes
    with ratios near 1 (see the rerun report's table).
    """
    bench = [str(BIN / "sparc-bench"), "--N", "65536", "--density", "0.01", "0.1",
             "--algorithms", "ssar_split_allgather", "--reps", "9", "--warmup", "2",
             "--no-model", "--output", "orig.jsonl"]
    path = "PATH=" + f"{BIN}{os.pathsep}{os.environ['PATH']}"
    run_mpi(2, args=bench, cwd=tmp_path, timeout=180, env=dict([path.split("=", 1)]))
    orig = tmp_path / "orig.jsonl"
    before = orig.read_bytes()
    rec = read_records([orig])[0][0]
    assert rec["environment"]["launcher"] == "mpiexec"
    out = tmp_path / "rerun"
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the recorded command is relative to where it ran
    try:
        assert report_main([str(orig), "--rerun", "density-P-2", "-o", str(out)]) == 0
    finally:
        os.chdir(cwd)
    assert orig.read_bytes() == before  # the reproduced records are untouched
    new, problems = read_records([out / "rerun-records.jsonl"])
    assert problems == [] and len(new) == 4
    md = (out / "report.md").read_text()
    assert "density-P-2-N-65536-random-float32-before.png" in md
    assert "density-P-2-N-65536-random-float32-rerun.png" in md
    html = (out / "report.html").read_text()
    assert html.count("<svg role='img'") == 2  # both figures inline, their ids apart
    assert 'id="density-P-2-N-65536-random-float32-before-' in html
    assert 'id="density-P-2-N-65536-random-float32-rerun-' in html
    assert f"--output {out / 'rerun-records.jsonl'}" in md
    from sparcapps.report.build import all_figures
    from sparcapps.report.rerun import _geomean, compare_rows

    old_fig = next(f for f in all_figures(read_records([orig])[0])[2]
                   if f.id.startswith("density-P-2"))
    new_fig = next(f for f in all_figures(new)[2] if f.id == old_fig.id)
    cmp = compare_rows(old_fig.rows, new_fig.rows)
    assert len(cmp) == 4 and all(c["new"] is not None for c in cmp)
    for c in cmp:
        o, n = c["old"], c["new"]
        assert o["q25"] / 2 <= n["q75"] * 2 and n["q25"] / 2 <= o["q75"] * 2, (o, n)
    assert 0.25 < _geomean(c["time_ratio"] for c in cmp) < 4, [c["time_ratio"] for c in cmp]
    # a second rerun into a directory of the records it reproduces is refused
    with pytest.raises(Exception, match="another -o"):
        from sparcapps.report import rerun_figure

        rerun_figure([out / "rerun-records.jsonl"], old_fig.id, out)


def test_rerun_of_slurm_levels_waits_and_writes_elsewhere(tmp_path):
    """What ``--rerun`` executes for a sweep or an sbatch line: the same submission, waiting
    for the jobs, with the results root moved to the rerun's directory."""
    from sparcapps.report.commands import command_of
    from sparcapps.report.rerun import _executable

    sweep = ("SPARC_N_PER_RANK=1024 sparc-jobs sweep jobs/bench-weak.sbatch --nodes 1 2 "
             "--results res -- --density 0.01")
    rec = {"P": 2, "environment": {"command": ["sparc-bench"], "launcher": "mpiexec",
                                   "submitted": {"sweep": sweep,
                                                 "sbatch": "sbatch --nodes=2 x.sbatch"}}}
    new, results = tmp_path / "new.jsonl", tmp_path / "rerun-results"
    argv, env = _executable(command_of(rec), new, results)
    assert argv == ["sparc-jobs", "sweep", "jobs/bench-weak.sbatch", "--nodes", "1", "2",
                    "--results", str(results), "--wait", "--", "--density", "0.01"]
    assert env["SPARC_N_PER_RANK"] == "1024"
    del rec["environment"]["submitted"]["sweep"]
    argv, env = _executable(command_of(rec), new, results)
    assert argv == ["sbatch", "--wait", "--nodes=2", "x.sbatch"]
    assert env["SPARC_RESULTS"] == str(results)
    del rec["environment"]["submitted"]
    argv, env = _executable(command_of(rec), new, results)
    # the venv's MPI with the flags it needs here (none for MPICH; root, slots for Open MPI)
    from mpirun import MPI_FLAVOR
    from sparcapps.launcher import launch_flags

    assert argv == ["mpiexec", *launch_flags(MPI_FLAVOR), "-n", "2", "sparc-bench", "--output",
                    str(new)]
    assert env["PATH"].startswith(str(BIN))


def test_failed_rerun_names_its_command_shell_quoted(tmp_path, monkeypatch):
    """The error of a rerun command that failed prints it as a shell would need it: an argument
    ``$(...)`` stays quoted, so pasting the line runs the same command (issue 25 item 7)."""
    from sparcapps.records import make_record
    from sparcapps.report import rerun_figure
    from sparcapps.report.build import all_figures

    env = {"hosts": ["h"], "launcher": None,
           "command": [sys.executable, "-c", "import sys; sys.exit(3)", "$(touch pwned)"]}
    recs = [make_record("sparc-bench", config={"N": 1000, "pattern": "random",
                                               "dtype": "float32"},
                        environment=env, algorithm=alg, P=2, N=1000, density=d,
                        timings={"allreduce": {"median": 0.01, "q25": 0.01, "q75": 0.01}})
            for d in (0.01, 0.1) for alg in ("dense", "allgather")]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (fig,) = all_figures(read_records([path])[0])[2]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match=r"exited with status 3: .* '\$\(touch pwned\)'"):
        rerun_figure([path], fig.id, tmp_path / "out")
    assert not (tmp_path / "pwned").exists()


_FAKE_BENCH = """#!{python}
import sys
from sparcapps.records import append_record, capture_environment, make_record, summarize
out = sys.argv[sys.argv.index("--output") + 1]
append_record(out, make_record("sparc-bench", config={{}}, environment=capture_environment(),
                               P=1, N=1024, density=0.01, algorithm="allgather",
                               timings={{"allreduce": summarize([1e-3])}}))
"""


def test_template_path_with_spaces_recorded_whole_through_the_template(tmp_path):
    """Issue 36 (round 3's leftover): a template whose path has spaces, submitted with plain
    sbatch, runs its real ``sparc-jobs run`` line; the record's sbatch line and the report's
    rerun command hold the path whole, as one word, with arguments that have spaces, quotes,
    a tab and a newline (which breaks scontrol's Command= over two lines: the suffix of
    arguments was not found and the path took in the arguments' first line). No Slurm: a stand-in scontrol prints the job as Slurm does (the path, then the
    arguments joined by spaces), a stand-in sparc-bench writes the record."""
    import shlex
    import subprocess

    from sparcapps.report.commands import command_of, rerun_command
    from sparcapps.report.rerun import _executable

    jobs_dir = tmp_path / "my jobs"
    jobs_dir.mkdir()
    template = jobs_dir / "bench strong.sbatch"
    template.write_text((REPO / "jobs" / "bench-strong.sbatch").read_text())
    fake = tmp_path / "bin"
    fake.mkdir()
    args = ["--N", "1024", "--title", "it's a b", "tab\there", "two\nlines"]
    (fake / "scontrol").write_text(
        "#!/bin/sh\ncat <<'EOF'\nJobId=7 JobName=x\n   Command=" + str(template) + " "
        + " ".join(args) + f"\n   WorkDir={tmp_path}\nEOF\n")
    (fake / "sparc-bench").write_text(_FAKE_BENCH.format(python=sys.executable))
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
           "SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "1",
           "SLURM_NTASKS": "2", "SLURM_SUBMIT_DIR": str(tmp_path), "SPARC_LAUNCH": "env",
           "SPARC_RESULTS": str(tmp_path / "results")}
    for var in ("SPARC_SUBMIT_SBATCH", "SPARC_SUBMIT_SWEEP"):
        env.pop(var, None)
    proc = subprocess.run(["bash", "my jobs/bench strong.sbatch", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,), problems = read_records([tmp_path / "results" / "sparc-bench-strong-7" /
                                     "records.jsonl"])
    assert problems == []
    line = rec["environment"]["submitted"]["sbatch"]
    assert shlex.split(line) == ["SPARC_LAUNCH=env", f"SPARC_RESULTS={tmp_path / 'results'}",
                                 "sbatch", "--nodes=2", "--ntasks-per-node=1",
                                 "my jobs/bench strong.sbatch", *args], line
    cmd = command_of(rec)
    assert cmd.level == "sbatch" and "my jobs/bench strong.sbatch" in cmd.argv
    again = shlex.split(rerun_command(rec))
    assert again[again.index("sbatch") + 3] == "my jobs/bench strong.sbatch", again
    argv, _ = _executable(cmd, tmp_path / "new.jsonl", tmp_path / "new-results")
    assert argv[:2] == ["sbatch", "--wait"] and argv[4:] == ["my jobs/bench strong.sbatch",
                                                             *args], argv


def test_rows_of_one_point_pair_in_record_order():
    """Several jobs of a sweep time dense at the same point: each old row is compared with its
    own rerun, not every old row with the last new one (helper slurm's walk)."""
    from sparcapps.report.rerun import compare_rows

    def row(median, speedup=1.0, P=1):
        return {"series": "dense", "simulated": False, "network": None, "P": P, "N": 1024,
                "density": 0.01, "pattern": "random", "dtype": "float32", "median": median,
                "speedup": speedup}

    old = [row(1.0), row(2.0), row(5.0, P=2)]
    cmp = compare_rows(old, [row(1.5), row(4.0)])
    assert [(c["old"]["median"], c["new"] and c["new"]["median"]) for c in cmp] == [
        (1.0, 1.5), (2.0, 4.0), (5.0, None)]
    assert [c["time_ratio"] for c in cmp] == [1.5, 2.0, None]
