"""Integration: the sbatch templates under a real single-node Slurm (jobs/slurm-local-up.sh).

Brings up slurmctld + slurmd + munge (installing them with apt when missing), submits each
microbenchmark template through ``sparc-jobs sweep`` at tiny sizes, one job that must fail, waits,
and checks the records. Needs root; skipped with the reason otherwise.
"""

import os
import shutil
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparcapps.jobs import plan_sweep, run_recorded
from sparcapps.records import read_records
from sparcapps.report import build_report

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TINY = ["--N", "2048", "--density", "0.01", "--reps", "2", "--warmup", "1"]


def test_plan_sweep_quotes_and_grid(tmp_path):
    jobs = plan_sweep(REPO / "jobs" / "bench-strong.sbatch", [1, 4],
                      algorithms=["dense,allgather", "ssar_split_allgather"],
                      app_args=["--density", "0.001 0.01"], sbatch_args=["--partition=x y"],
                      results=tmp_path)
    assert [(j.nodes, j.algorithms) for j in jobs] == [
        (1, "dense,allgather"), (1, "ssar_split_allgather"),
        (4, "dense,allgather"), (4, "ssar_split_allgather")]
    argv = jobs[2].argv
    assert argv[:4] == ["sbatch", "--parsable", "--nodes=4",
                        "--job-name=bench-strong-n4-dense+allgather"]
    assert sum(a.startswith("--nodes") for a in argv) == 1  # the node count appears once
    assert argv[-3:] == ["--algorithms", "dense", "allgather"]  # a space-separated group
    assert "'--partition=x y'" in jobs[2].command() and "'0.001 0.01'" in jobs[2].command()
    with pytest.raises(ValueError, match="positive node counts"):
        plan_sweep(REPO / "jobs" / "bench-strong.sbatch", [0])
    with pytest.raises(ValueError, match="no such sbatch template"):
        plan_sweep(tmp_path / "nope.sbatch", [1])


def _fake_slurm(tmp_path, monkeypatch, nodes):
    """``sinfo`` listing ``nodes`` nodes (each twice: two partitions) and an ``sbatch`` that
    logs its arguments to ``calls`` and answers a job id."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    names = " ".join(f"n{i} n{i}" for i in range(nodes))
    (bindir / "sinfo").write_text(f'#!/bin/sh\necho "$*" >> {calls}.sinfo\n'
                                  f'for n in {names}; do echo $n; done\n')
    (bindir / "sbatch").write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho 42\n')
    for f in bindir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    return calls


def test_sweep_refuses_what_would_never_run(tmp_path, monkeypatch, capsys):
    """Issue 23: ``--dry-run`` after ``--`` submitted real jobs; node counts beyond the cluster
    queued jobs that never start (and ``--wait`` hung). Both refused, nothing submitted."""
    from sparcapps import jobs

    calls = _fake_slurm(tmp_path, monkeypatch, nodes=2)
    tmpl = str(REPO / "jobs" / "bench-strong.sbatch")
    for flag in ("--dry-run", "--wait"):
        assert jobs.main(["sweep", tmpl, "--nodes", "1", "--", "--N", "1024", flag]) == 2
        err = capsys.readouterr().err
        assert f"{flag} after '--' would go to the app, not to sparc-jobs" in err, err
    assert jobs.main(["sweep", tmpl, "--nodes", "1", "2", "4", "8", "--wait"]) == 2
    err = capsys.readouterr().err
    assert "the cluster has 2 nodes (sinfo), fewer than --nodes 4 8" in err, err
    assert "nothing submitted" in err and not calls.exists()
    assert jobs.main(["sweep", tmpl, "--nodes", "2", "4", "--sbatch-arg=--partition=p1",
                      "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "warning: the cluster has 2 nodes (sinfo), fewer than --nodes 4" in out.err
    assert len(out.out.splitlines()) == 2 and not calls.exists()
    assert "-p p1" in (tmp_path / "calls.sinfo").read_text()  # the partition's nodes
    # within the cluster: submitted, the Slurm log under ./results, not the submission dir
    assert jobs.main(["sweep", tmpl, "--nodes", "1", "2", "--", "--N", "1024"]) == 0
    submitted = calls.read_text().splitlines()
    assert len(submitted) == 2 and all("--output=results/%x-%j.out" in c for c in submitted)
    assert (tmp_path / "results").is_dir()


def test_sweep_under_export_none_and_dry_run_lines(tmp_path, monkeypatch, capsys):
    """The newcomer's walk (issue 36): under a site's ``--export=NONE`` a sweep's jobs lost
    ``--results``, the template variables and the sweep's line (they travel in the
    environment); a ``--dry-run`` line pasted into a shell failed in Slurm (exit 0:53, no log)
    because the log directory did not exist."""
    from sparcapps import jobs

    calls = _fake_slurm(tmp_path, monkeypatch, nodes=1)
    tmpl = str(REPO / "jobs" / "bench-weak.sbatch")
    monkeypatch.setenv("SPARC_N_PER_RANK", "65536")
    monkeypatch.delenv("SBATCH_EXPORT", raising=False)
    names = "SPARC_N_PER_RANK,SPARC_RESULTS,SPARC_SUBMIT_SBATCH,SPARC_SUBMIT_SWEEP"
    for export, expected in (
            ("--export=NONE,SPARC_SETUP=/s.sh", f"--export=NONE,SPARC_SETUP=/s.sh,{names}"),
            ("--export=SPARC_RESULTS", "--export=SPARC_RESULTS,SPARC_N_PER_RANK,"
                                       "SPARC_SUBMIT_SBATCH,SPARC_SUBMIT_SWEEP"),
            ("--export=ALL,X=1", "--export=ALL,X=1")):
        calls.unlink(missing_ok=True)
        assert jobs.main(["sweep", tmpl, "--nodes", "1", f"--sbatch-arg={export}",
                          "--results", "res"]) == 0
        (call,) = calls.read_text().splitlines()
        assert call.split().count(expected) == 1 and call.count("--export") == 1, call
    # SBATCH_EXPORT (the site's default) counts as given; the whole environment adds nothing
    for value, expected in (("NONE", f"--export=NONE,{names}"), ("ALL", None)):
        monkeypatch.setenv("SBATCH_EXPORT", value)
        calls.unlink(missing_ok=True)
        assert jobs.main(["sweep", tmpl, "--nodes", "1", "--results", "res"]) == 0
        call = calls.read_text()
        assert (expected in call.split()) if expected else "--export" not in call, call
    monkeypatch.delenv("SBATCH_EXPORT")
    assert jobs.with_exports(["--export", "NONE", "--time=5"], ["A"], {}) == [
        "--export", "NONE,A", "--time=5"]
    assert jobs.with_exports(["--time=5"], ["A"], {}) == ["--time=5"]

    capsys.readouterr()
    calls.unlink()
    assert jobs.main(["sweep", tmpl, "--nodes", "1", "--results", "new logs", "--dry-run"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("mkdir -p 'new logs' && SPARC_N_PER_RANK=65536 "), line
    assert not (tmp_path / "new logs").exists()
    subprocess.run(["bash", "-c", line], check=True, timeout=30)  # runs as pasted
    assert (tmp_path / "new logs").is_dir() and "--output=new logs/%x-%j.out" in calls.read_text()


def test_app_template_checkpoints_into_the_jobs_directory(tmp_path):
    """The newcomer's walk (issue 36): a training app's default checkpoint was one file in the
    submission directory for every job of a sweep; app.sbatch now names one in the job's
    directory unless the options give --checkpoint. No Slurm: bash runs the template with a
    stand-in sparc-jobs that prints the command it was given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sparc-jobs").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bindir / "sparc-jobs").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NAME": "app", "SLURM_NTASKS": "2", "SPARC_RESULTS": str(tmp_path / "r")}

    def command(*args):
        proc = subprocess.run(["bash", str(REPO / "jobs" / "app.sbatch"), *args], env=env,
                              capture_output=True, text=True, timeout=30, check=True)
        words = proc.stdout.splitlines()
        return words[words.index("--") + 1:]

    job = tmp_path / "r" / "app-7"
    argv = command("sparc-linear", "--epochs", "5")
    assert argv[argv.index("--checkpoint") + 1] == str(job / "sparc-linear.ckpt.h5"), argv
    argv = command("sparc-lstm", "--resume", "old.ckpt")
    assert argv[argv.index("--checkpoint") + 1] == str(job / "sparc-lstm.ckpt"), argv
    for args in (["sparc-cnn", "--checkpoint=mine.ckpt"], ["sparc-svm", "--checkpoint", "m.h5"],
                 ["sparc-bench", "--N", "1024"]):
        assert command(*args).count("--checkpoint") == (args[0] == "sparc-svm"), args


def test_run_recorded_writes_failure_records(tmp_path):
    out = tmp_path / "r.jsonl"
    py = sys.executable
    # success that appends a record: nothing added
    ok = (f"from sparcapps.records import *; append_record({str(out)!r}, make_record("
          "'sparc-x', config={}, environment={}))")
    assert run_recorded([py, "-c", ok], out) == 0
    # non-zero exit: the error names the command and carries the stderr tail
    assert run_recorded([py, "-c", "import sys; sys.exit('bad input on rank 0')"], out,
                        app="sparc-bench") == 1
    # exit 0 without a record, and a command that cannot start
    assert run_recorded([py, "-c", "pass"], out) == 1
    assert run_recorded([str(tmp_path / "no-such-app")], out) == 127
    recs, problems = read_records([out])
    assert problems == []
    assert [r["status"] for r in recs] == ["ok", "failed", "failed", "failed"]
    assert recs[1]["app"] == "sparc-bench" and "bad input on rank 0" in recs[1]["error"]
    assert "exited with status 1" in recs[1]["error"]
    assert "appended no record" in recs[2]["error"]
    assert "cannot start" in recs[3]["error"]
    assert recs[1]["config"]["command"][0] == py


def test_run_forwards_sigterm_and_records_it(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen([str(BIN / "sparc-jobs"), "run", "--app", "sparc-bench", "--output",
                             str(out), "--", sys.executable, "-c",
                             "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    (rec,), _ = read_records([out])
    assert rec["status"] == "failed" and "after SIGTERM" in rec["error"]


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root to install and start Slurm daemons"
    if not (shutil.which("slurmctld") or shutil.which("apt-get")):
        return "no Slurm and no apt-get to install it"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SPARC_SLURM_DIR": str(state), "SPARC_SLURM_CTLD_PORT": "16817",
           "SPARC_SLURM_SLURMD_PORT": "16818", "SLURM_CONF": str(state / "slurm.conf"),
           "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    up = subprocess.run(["bash", str(REPO / "jobs" / "slurm-local-up.sh")], env=env,
                        capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, f"slurm-local-up.sh failed:\n{up.stdout}\n{up.stderr}"
        yield env
    finally:
        subprocess.run(["bash", str(REPO / "jobs" / "slurm-local-down.sh")], env=env,
                       timeout=120)


def _sweep(env, template, *args, app_args=()):
    cmd = [str(BIN / "sparc-jobs"), "sweep", str(REPO / "jobs" / template), "--nodes", "1",
           "--sbatch-arg=--ntasks-per-node=2", "--sbatch-arg=--time=5", *args, "--", *app_args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


@pytest.mark.mpi  # the templates launch MPI ranks inside the Slurm jobs
@pytest.mark.slow
def test_templates_under_slurm(slurm, tmp_path):
    res = tmp_path / "results"
    env = {**slurm, "SPARC_N_PER_RANK": "1024"}
    strong = _sweep(env, "bench-strong.sbatch", "--results", str(res),
                    "--algorithms", "allgather", "--algorithms", "ssar_split_allgather",
                    app_args=TINY)
    weak = _sweep(env, "bench-weak.sbatch", "--results", str(res), "--algorithms",
                  "dsar_split_allgather", app_args=TINY[2:])
    # a site's --export=NONE: the venv from SPARC_SETUP, the sweep's variables still arrive
    setup = tmp_path / "site-setup.sh"
    setup.write_text(f"export PATH={shlex.quote(str(BIN))}:$PATH\n")
    none = _sweep(env, "bench-weak.sbatch", "--results", str(res), "--algorithms", "allgather",
                  f"--sbatch-arg=--export=NONE,SPARC_SETUP={setup}", app_args=TINY[2:])
    app = _sweep(env, "app.sbatch", "--results", str(res), app_args=["sparc-bench", *TINY,
                                                                     "--algorithms", "dense"])
    # the applications through the generic template, at tiny sizes
    linear = _sweep({**env, "SPARC_GLOBAL_BATCH": "64"}, "app.sbatch", "--results", str(res),
                    app_args=["sparc-linear", "--synth", "url", "--rows", "3000", "--features",
                              "20000", "--epochs", "1", "--no-progress"])
    cnn = _sweep(env, "app.sbatch", "--results", str(res),
                 app_args=["sparc-cnn", "--epochs", "1", "--no-progress"])
    bad = _sweep(env, "app.sbatch", "--results", str(res),
                 app_args=["sparc-bench", *TINY, "--algorithms", "no_such_algorithm"])
    # a plain sbatch of a template, not a sweep: the job rebuilds its own sbatch line
    plain = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2",
                            "--time=5", f"--output={res}/%x-%j.out", "jobs/bench-strong.sbatch",
                            *TINY, "--algorithms", "allgather"],
                           env={**env, "SPARC_RESULTS": str(res)}, cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    plain_id = plain.stdout.strip().split(";")[0]
    spaced = tmp_path / "my jobs" / "bench strong.sbatch"
    spaced.parent.mkdir()
    spaced.write_text((REPO / "jobs" / "bench-strong.sbatch").read_text())
    proc = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2",
                           "--time=5", f"--output={res}/%x-%j.out", str(spaced),
                           *TINY, "--algorithms", "allgather"],
                          env={**env, "SPARC_RESULTS": str(res)}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    spaced_id = proc.stdout.strip().split(";")[0]
    assert [row[1:] for row in strong] == [["1", "allgather"], ["1", "ssar_split_allgather"]]
    ids = [row[0] for row in strong + weak + none + app + linear + cnn]
    ids += [plain_id, spaced_id, bad[0][0]]
    wait = subprocess.run([str(BIN / "sparc-jobs"), "wait", "--timeout-seconds", "240", *ids],
                          env=env,
                          capture_output=True, text=True, timeout=300)
    states = dict(line.split("\t") for line in wait.stdout.splitlines())
    logs = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in res.glob("*.out"))
    assert states == {**{i: "COMPLETED" for i in ids[:-1]}, ids[-1]: "FAILED"}, logs

    def records(job_id):
        (path,) = res.glob(f"*-{job_id}/records.jsonl")
        recs, problems = read_records([path])
        assert problems == [], problems
        for r in recs:
            assert r["environment"]["slurm"]["SLURM_JOB_ID"] == job_id
        return recs

    for (jid, _, alg) in strong:
        recs = records(jid)
        assert [(r["status"], r["algorithm"], r["P"], r["N"]) for r in recs] == [
            ("ok", "dense", 2, 2048), ("ok", alg, 2, 2048)]
        assert recs[1]["timings"]["allreduce"]["median"] > 0
    weak_recs = records(weak[0][0])
    assert {(r["algorithm"], r["N"]) for r in weak_recs} == {("dense", 2048),
                                                              ("dsar_split_allgather", 2048)}
    none_recs = records(none[0][0])  # under --results, at SPARC_N_PER_RANK x P, its sweep kept
    assert {(r["algorithm"], r["N"]) for r in none_recs} == {("dense", 2048), ("allgather", 2048)}
    assert "--export=NONE" in none_recs[0]["environment"]["submitted"]["sweep"]
    assert [r["algorithm"] for r in records(app[0][0])] == ["dense"]
    for rows, app_name in ((linear, "sparc-linear"), (cnn, "sparc-cnn")):
        (rec,) = records(rows[0][0])
        assert rec["status"] == "ok" and rec["app"] == app_name and rec["P"] == 2, rec
        assert len(rec["metrics"]["epochs"]) == 1
    # strong scaling: the global batch of 64 split over the job's 2 ranks
    assert records(linear[0][0])[0]["config"]["batch_size"] == 32
    (failed,) = records(bad[0][0])
    assert failed["status"] == "failed" and failed["P"] == 2
    assert "no_such_algorithm" in failed["error"] and "exited with status" in failed["error"]

    # each record keeps the command the user ran: the sweep, and its job's sbatch line
    for rec in records(strong[0][0]):
        sub = rec["environment"]["submitted"]
        assert sub["sweep"].startswith("SPARC_N_PER_RANK=1024 sparc-jobs sweep "), sub
        assert "--nodes 1 --sbatch-arg=--ntasks-per-node=2" in sub["sweep"], sub
        assert "--nodes=1" in sub["sbatch"] and "--ntasks-per-node=2" in sub["sbatch"], sub
    (rec, _) = records(plain_id)
    assert rec["environment"]["submitted"] == {"sbatch": (
        f"SPARC_N_PER_RANK=1024 SPARC_RESULTS={res} " + shlex.join(
            ["sbatch", "--nodes=1", "--ntasks-per-node=2", "jobs/bench-strong.sbatch", *TINY,
             "--algorithms", "allgather"]))}, rec["environment"]
    (rec, _) = records(spaced_id)  # a template whose path has a space: recorded whole
    line = rec["environment"]["submitted"]["sbatch"]
    assert shlex.split(line)[-len(TINY) - 3:] == [str(spaced), *TINY, "--algorithms",
                                                   "allgather"], line

    md, problems = build_report([res], tmp_path / "report")
    text = md.read_text()
    assert problems == [] and "## Failed runs" in text and text.count(".png)") >= 2
    assert "sparc-jobs sweep" in text.split("## Commands to rerun")[1]
    assert f"--output {res}" not in text.split("## Commands to rerun")[1]


@pytest.mark.mpi
@pytest.mark.slow
def test_time_limit_warning_checkpoints_under_slurm(slurm, tmp_path):
    """The signal app.sbatch asks for before the time limit, sent by Slurm to the batch shell
    (``scancel --batch --signal=TERM``, what ``--signal=B:TERM@120`` does): the training stops
    with a checkpoint, the job fails with a record saying why, and the checkpoint resumes."""
    import re
    import time

    from mpirun import run_mpi

    res, ck = tmp_path / "results", tmp_path / "limit.ckpt.h5"
    train = ["sparc-linear", "--synth", "url", "--rows", "2000", "--features", "8000",
             "--synth-cache", str(tmp_path), "--batch-size", "30", "--no-progress",
             "--checkpoint", str(ck), "--epochs", "500"]
    (row,) = _sweep(slurm, "app.sbatch", "--results", str(res),
                    app_args=[*train, "--checkpoint-every", "10"])
    job = row[0]
    deadline = time.monotonic() + 180
    while not ck.exists():  # training has started
        assert time.monotonic() < deadline, "no checkpoint after 180 s"
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=TERM", job], env=slurm, check=True,
                   timeout=30)
    wait = subprocess.run([str(BIN / "sparc-jobs"), "wait", "--timeout-seconds", "120", job],
                          env=slurm, capture_output=True, text=True, timeout=180)
    (log,) = res.glob(f"*-{job}.out")
    assert wait.stdout.split() == [job, "FAILED"], log.read_text()
    match = re.search(r"interrupted by SIGTERM after (\d+) steps", log.read_text())
    assert match, log.read_text()
    (path,) = res.glob(f"*-{job}/records.jsonl")
    (failed,), _ = read_records([path])
    assert failed["status"] == "failed" and "143 after SIGTERM" in failed["error"]
    steps = int(match.group(1))
    resumed = run_mpi(2, args=[str(BIN / train[0]), *train[1:], "--resume", str(ck),
                               "--stop-after", str(steps + 2)], timeout=120)
    assert f"stopped after {steps + 2} steps" in resumed.stdout, resumed.stdout + resumed.stderr


def test_job_script_with_spaces_and_script_args_with_tabs(tmp_path, monkeypatch):
    """The sbatch line a job rebuilds for its records: a template path with spaces stays whole
    (scontrol's Command= line), and arguments that bash quotes as $'...' (tabs, newlines)
    come back from shlex.split unchanged (issue 25 item 7). No Slurm needed: a stand-in
    scontrol prints the multi-line form."""
    from sparcapps.jobs import bash_words, submission_command

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = ["--name", "tab\there", "it's", "$(touch pwned)", "", "a b"]
    fake = bin_dir / "scontrol"
    # as Slurm prints it: the path, then the arguments joined by spaces, unquoted
    fake.write_text("#!/bin/sh\ncat <<'EOF'\nJobId=7 JobName=x\n"
                    "   Command=/home/u/my jobs/a b.sbatch " + " ".join(args) + "\n"
                    "   WorkDir=/home/u\nEOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    quoted = subprocess.run(["bash", "-c", 'printf %s "${*@Q}"', "bash", *args],
                            capture_output=True, text=True, check=True).stdout
    assert "$'" in quoted  # bash's ANSI-C form, which shlex.split misreads
    assert bash_words(quoted) == args
    line = submission_command(quoted, {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2",
                                       "SLURM_NTASKS_PER_NODE": "4",
                                       "SLURM_SUBMIT_DIR": "/elsewhere"})
    assert shlex.split(line) == ["sbatch", "--nodes=2", "--ntasks-per-node=4",
                                 "/home/u/my jobs/a b.sbatch", *args], line
    with pytest.raises(ValueError, match="unterminated"):
        bash_words("'open")
