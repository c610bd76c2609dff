"""Every command of README.md, jobs/README.md and datasets/README.md, in the order given
(issue 23).

Each line of the docs' fenced ``bash`` blocks is accounted for in :data:`PLAN` below, matched by
its first words:

- ``RUN``: run here, in the README's order, in one temporary directory (the venv's ``bin/``
  first on PATH, a data home of its own), at a reduced size: the README's own line with some
  values replaced (``--N 16777216`` -> ``16384``, ``mpiexec -n 4`` -> ``-n 2``) and size flags
  added, never a flag removed. Each must exit 0 and leave what the next one reads.
- ``DRY``: a ``sparc-jobs sweep``, run as written plus ``--dry-run`` (needs no Slurm): the grid
  is planned and every job's app command line parses.
- ``CANNOT``: cannot run here; the doc itself must say why (the needle is checked in it).
- ``ELSEWHERE``: run by another test (named; checked to exist), at its own size.
- ``SHORTHAND``: a sweep above plus ``--dry-run`` or ``--wait`` (planned there).

A doc line matching no entry fails :func:`test_every_documented_command_is_accounted_for`; every
``sparc-*`` line also parses against its console script's parser (nothing runs).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_cli_vocabulary import _app_words, parser_of

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = ("README.md", "jobs/README.md", "datasets/README.md")
SLURM = "CANNOT", "need a Slurm cluster"
SLURM_JOBS = "CANNOT", "These need a Slurm cluster"


def _mpiexec_n(n):
    return {"-n": [str(max(1, int(n) // 2))]}  # half the ranks: 2 cores here


# (doc, first words, kind, details). RUN details: values to replace (flag -> new values) and
# words to add; CANNOT: the needle the doc must contain; ELSEWHERE: "tests/file.py::test".
PLAN = [
    ("README.md", "bash scripts/main.sh", "ELSEWHERE",
     "tests/test_wheel_install.py::test_main_job_runs_from_the_wheel"),
    ("README.md", "bash scripts/test.sh", "CANNOT", "runs the whole test suite"),  # this suite
    ("README.md", "mpiexec -n 4 sparc-bench --N", "RUN",
     ({**_mpiexec_n(4), "--N": ["16384"], "--reps": ["2"]}, [])),
    ("README.md", "python scripts/kernel_bench.py", "ELSEWHERE",
     "tests/test_bench.py::test_kernel_benchmark_times_each_variant_in_each_history"),
    ("README.md", "mpiexec -n 4 sparc-bench --algorithms", "RUN",
     (_mpiexec_n(4), ["--N", "16384", "--density", "0.01", "--reps", "2"])),
    ("README.md", "sparc-bench-auto", "RUN", ({}, [])),
    ("README.md", "mpiexec -n 2 sparc-bench --overlap", "RUN",
     ({**_mpiexec_n(2), "--overlap": ["5", "10"]},
      ["--N", "16384", "--reps", "2", "--algorithms", "ssar_recursive_double"])),
    ("README.md", "mpiexec -n 4 sparc-bench --overlap", "RUN",
     ({**_mpiexec_n(4), "--overlap": ["5", "10"]},
      ["--N", "16384", "--reps", "2", "--algorithms", "ssar_recursive_double"])),
    ("README.md", "sparc-bench-overlap", "RUN", ({}, [])),
    ("README.md", "sparc-bench-compress", "ELSEWHERE",
     "tests/test_bench.py::test_compress_bench_times_every_variant_on_a_small_input"),
    ("README.md", "mpiexec -n 4 sparc-linear-bench", "ELSEWHERE",
     "tests/test_linear.py::test_bench_script_runs"),
    ("README.md", "mpiexec -n 4 sparc-linear-compare", "RUN",
     (_mpiexec_n(4), ["--rows", "2000", "--features", "5000", "--losses", "log", "--epochs",
                      "1"])),
    ("README.md", "mpiexec -n 4 sparc-deep-bench", "ELSEWHERE",
     "tests/test_deep_apps.py::test_apps_end_to_end_on_two_ranks"),
    ("README.md", "sparc-deep-accuracy", "ELSEWHERE",
     "tests/test_deep_cli.py::test_accuracy_records_default_to_results_and_say_where"),
    ("README.md", "sparc-data-bench", "ELSEWHERE",
     "tests/test_data_cli.py::test_data_bench_leaves_nothing_in_the_temp_dir"),
    ("README.md", "mpiexec -n 4 -ppn 2 sparc-bench --probe-network", "CANNOT",
     "measure your interconnect once, on 2 nodes of the cluster"),
    ("README.md", "sparc-bench --simulate", "RUN",
     ({"--simulate": ["4", "8"], "--N": ["16384"], "--reps": ["1"]}, [])),
    ("README.md", "sparc-report results/sim.jsonl", "RUN", ({}, [])),
    ("README.md", "sparc-linear --synth url --epochs 1 --simulate", "RUN",
     ({"--simulate": ["2", "3"]}, ["--rows", "3000", "--features", "20000", "--batch-size", "32"])),
    ("README.md", "sparc-linear --synth url --epochs 1 --algorithm dense --simulate", "RUN",
     ({"--simulate": ["2", "3"]}, ["--rows", "3000", "--features", "20000", "--batch-size", "32"])),
    ("README.md", "sparc-report sim-lr.jsonl", "ELSEWHERE",  # simulated + dense, one axes
     "tests/test_apps_simulated.py::test_linear_apps_simulated_equal_mpiexec_bitwise"),
    ("README.md", "mpiexec -n 4 sparc-linear --synth url --loss log", "RUN",
     (_mpiexec_n(4), ["--rows", "3000", "--features", "20000", "--batch-size", "32"])),
    ("README.md", "mpiexec -n 4 sparc-svm", "ELSEWHERE",
     "tests/test_linear_mpi.py::test_console_scripts"),
    ("README.md", "mpiexec -n 4 sparc-linear --synth url --checkpoint-every-steps", "RUN",
     ({**_mpiexec_n(4), "--checkpoint-every-steps": ["10"], "--stop-after": ["40"]},
      ["--rows", "3000", "--features", "20000", "--batch-size", "32"])),
    ("README.md", "mpiexec -n 4 sparc-linear --synth url --resume", "RUN",
     (_mpiexec_n(4), ["--rows", "3000", "--features", "20000", "--batch-size", "32"])),
    ("README.md", "mpiexec -n 4 sparc-cnn", "ELSEWHERE",
     "tests/test_deep_apps.py::test_apps_end_to_end_on_two_ranks"),
    ("README.md", "mpiexec -n 4 sparc-lstm", "ELSEWHERE",
     "tests/test_deep_apps.py::test_apps_end_to_end_on_two_ranks"),
    ("README.md", "sparc-report r.jsonl", "RUN", ({}, [])),
    ("README.md", "sparc-cnn --density 0.01 --bits 4 --batch-size 8 --epochs 1 --simulate",
     "ELSEWHERE", "tests/test_deep_simulate.py::test_simulated_deep_apps_equal_mpiexec_bitwise"),
    ("README.md", "sparc-data list", "RUN", ({}, [])),
    ("README.md", "sparc-data fetch url", "CANNOT", "`fetch` and `convert` need the network"),
    ("README.md", "sparc-data convert url", "CANNOT", "`fetch` and `convert` need the network"),
    ("README.md", "sparc-data synth url", "RUN", ({"--scale": ["0.001"]}, [])),
    ("README.md", "sparc-data info url-like.h5", "RUN", ({}, [])),
    ("README.md", "sbatch", *SLURM),
    ("README.md", "sparc-jobs sweep", "DRY", None),
    ("README.md", "sparc-report results/strong", *SLURM),
    ("README.md", "bash jobs/emulate.sh", "ELSEWHERE",
     "tests/test_emulated_net.py::test_sparc_bench_on_emulated_nodes"),
    ("jobs/README.md", "sbatch", *SLURM_JOBS),
    ("jobs/README.md", "sparc-data synth url", "ELSEWHERE",  # README.md's line, another -o
     "tests/test_readme_commands.py::test_the_readme_chain_runs"),
    # the sweep above plus --dry-run / --wait (its app options planned there)
    ("jobs/README.md", "sparc-jobs sweep jobs/bench-strong.sbatch --nodes 1 2 4 8 --results "
                       "results/strong --", "SHORTHAND", None),
    ("jobs/README.md", "sparc-jobs sweep", "DRY", None),
    ("jobs/README.md", "SPARC_N_PER_RANK=", "DRY", None),
    ("jobs/README.md", "SPARC_GLOBAL_BATCH=", "DRY", None),
    ("jobs/README.md", "sparc-report results/strong", *SLURM_JOBS),
    ("jobs/README.md", "module load", "CANNOT", "put them in a file and point `SPARC_SETUP`"),
    ("jobs/README.md", "source $HOME/sparcml/.venv/bin/activate", "CANNOT",
     "put them in a file and point `SPARC_SETUP`"),
    ("jobs/README.md", "bash jobs/slurm-local-", "ELSEWHERE",
     "tests/test_slurm.py::test_templates_under_slurm"),
    ("jobs/README.md", "export SLURM_CONF=", "ELSEWHERE",
     "tests/test_slurm.py::test_templates_under_slurm"),
    ("jobs/README.md", "bash jobs/emulate.sh", "ELSEWHERE",
     "tests/test_emulated_net.py::test_sparc_bench_on_emulated_nodes"),
    # datasets/README.md: run by test_the_datasets_readme_lines_run below
    ("datasets/README.md", "sparc-data list", "RUN", ({}, [])),
    ("datasets/README.md", "sparc-data fetch url", "CANNOT", "`fetch` needs the network"),
    ("datasets/README.md", "sparc-data convert url", "CANNOT", "and so does `convert url`"),
    ("datasets/README.md", "sparc-data convert my.svm.xz", "RUN", ({}, [])),
    ("datasets/README.md", "sparc-data synth url", "RUN", ({"--scale": ["0.001"]}, [])),
    ("datasets/README.md", "sparc-data info datasets/url/url_combined.h5", "CANNOT",
     "and so does `convert url`"),
]


def _documented(doc: str) -> list[list[str]]:
    """The words of each command line of ``doc``'s bash blocks, in order (continuations
    joined, comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", (REPO / doc).read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def _plan_of(doc: str, words: list[str]):
    line = " ".join(words)
    for entry in PLAN:
        if entry[0] == doc and line.startswith(entry[1]):
            return entry
    return None


_ONE_VALUE = {"-n", "--reps", "--scale", "--stop-after", "--checkpoint-every-steps"}


def _reduced(words: list[str], replace: dict, add: list[str]) -> list[str]:
    """``words`` with the values of each flag in ``replace`` swapped, then ``add`` appended
    (before ``--`` when there is one)."""
    out, i = [], 0
    while i < len(words):
        out.append(words[i])
        if words[i] in replace:
            out += replace[words[i]]
            i += 1
            if words[i - 1] in _ONE_VALUE:
                i += 1
                continue
            while i < len(words) and not words[i].startswith("-"):  # a list's values
                i += 1
            continue
        i += 1
    return out + add


def _commands():
    return [(doc, words, _plan_of(doc, words)) for doc in DOCS for words in _documented(doc)]


def test_every_documented_command_is_accounted_for():
    missing = [f"{doc}: {' '.join(w)}" for doc, w, entry in _commands() if entry is None]
    assert not missing, "commands the test does not know (add them to PLAN):\n" + \
        "\n".join(missing)
    used = {(e[0], e[1]) for _, _, e in _commands()}
    stale = [f"{e[0]}: {e[1]}" for e in PLAN if (e[0], e[1]) not in used]
    assert not stale, "PLAN entries no doc line matches any more:\n" + "\n".join(stale)


@pytest.mark.parametrize("doc", DOCS)
def test_what_cannot_run_here_says_why(doc):
    text = " ".join((REPO / doc).read_text().split())
    for entry in PLAN:
        if entry[0] == doc and entry[2] == "CANNOT":
            assert " ".join(entry[3].split()) in text, f"{doc} does not say {entry[3]!r}"
        if entry[0] == doc and entry[2] == "ELSEWHERE":
            path, name = entry[3].split("::")
            assert f"def {name}(" in (REPO / path).read_text(), entry[3]


@pytest.mark.parametrize("doc,words", [(d, w) for d, w, _ in _commands()],
                         ids=[f"{d}: {' '.join(w)[:60]}" for d, w, _ in _commands()])
def test_documented_sparc_line_parses(doc, words):
    """Every sparc-* line against its parser: a flag that does not exist fails (sweeps are
    checked by their dry run below)."""
    prog, argv = _app_words(words)
    if prog is None or prog == "sparc-jobs" or "..." in argv:
        return
    parser_of(prog).parse_args(argv)


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "SPARCML_DATA_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}


def _run(words, tmp_path, env, what):
    proc = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (f"{what}\nran: {shlex.join(words)}\nexit {proc.returncode}\n"
                                  f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n"
                                  f"{proc.stderr[-3000:]}")
    return proc


@pytest.mark.mpi
@pytest.mark.slow
def test_the_readme_chain_runs(tmp_path):
    """The RUN lines of README.md in its order, each at a reduced size, exit 0; what the
    issue found broken: bench-auto / bench-overlap on the files the README's lines made, a
    resumed checkpoint, a resumed finished run, --simulate, the report."""
    env = _env(tmp_path)
    ran = []
    for doc, words, (_, _, kind, details) in _commands():
        if doc != "README.md" or kind != "RUN":
            continue
        start = time.perf_counter()
        proc = _run(_reduced(words, *details), tmp_path, env, f"README.md: {' '.join(words)}")
        ran.append((words, proc))
        print(f"{time.perf_counter() - start:6.1f} s  {' '.join(words)[:80]}")
    assert len(ran) >= 15, [" ".join(w) for w, _ in ran]
    out = {" ".join(w): p.stdout for w, p in ran}
    auto = next(v for k, v in out.items() if k.startswith("sparc-bench-auto"))
    assert "auto within" in auto, auto
    overlap = next(v for k, v in out.items() if k.startswith("sparc-bench-overlap"))
    assert "| P=1:" in overlap and "| P=2:" in overlap, overlap
    resumed = next(v for k, v in out.items() if "--resume" in k)
    assert "is a finished run" not in resumed and "epoch 5:" in resumed, resumed
    assert (tmp_path / "report" / "sim" / "report.html").is_file()
    # the report of the apps' lines: the sparse run timed against its dense baseline
    assert "dense baseline" in (tmp_path / "report" / "apps" / "report.md").read_text()
    assert (tmp_path / "m.h5").is_file() and (tmp_path / "url-like.h5").is_file()


@pytest.mark.slow
def test_the_datasets_readme_lines_run(tmp_path):
    """datasets/README.md's RUN lines in its order (synth at a smaller scale), on a small
    LIBSVM file of its own for the line that converts ``my.svm.xz``; ``info`` then reads it."""
    import lzma

    with lzma.open(tmp_path / "my.svm.xz", "wt") as f:
        f.write("+1 1:0.5 7:1.25\n-1 3:2\n+1 1:1 999999:3\n")
    env = _env(tmp_path)
    ran = []
    for doc, words, (_, _, kind, details) in _commands():
        if doc == "datasets/README.md" and kind == "RUN":
            ran.append(_run(_reduced(words, *details), tmp_path, env, " ".join(words)))
    assert len(ran) == 3
    info = _run(["sparc-data", "info", "my.h5"], tmp_path, env, "info").stdout
    assert "n_features    1,000,000" in info and "index_base    1" in info, info
    assert (tmp_path / "url-like.h5").is_file()


def test_the_sweeps_plan_as_written(tmp_path):
    """Every documented sweep, as written plus --dry-run: planned without Slurm, each job's
    app command line parses (a misspelled app flag fails here)."""
    from sparcapps import jobs

    (tmp_path / "jobs").symlink_to(REPO / "jobs")
    fake = tmp_path / "bin"  # no cluster here: sinfo fails (a real one may be installed)
    fake.mkdir()
    (fake / "sinfo").write_text("#!/bin/sh\nexit 1\n")
    (fake / "sinfo").chmod(0o755)
    env = {**_env(tmp_path), "PATH": f"{fake}:{BIN}:{os.environ.get('PATH', '')}"}
    n = 0
    for doc, words, (_, _, kind, _) in _commands():
        if kind != "DRY":
            continue
        assign = [w for w in words[:words.index("sparc-jobs")] if "=" in w]
        argv = words[words.index("sparc-jobs"):]
        cut = argv.index("--") if "--" in argv else len(argv)
        run = [str(BIN / "sparc-jobs"), *argv[1:cut], "--dry-run", *argv[cut:]]
        proc = _run(run, tmp_path, {**env, **dict(a.split("=", 1) for a in assign)},
                    f"{doc}: {' '.join(words)}")
        lines = proc.stdout.splitlines()
        args = jobs._parser().parse_args(jobs._join_flag_values(argv[1:cut], "--algorithm-flag"))
        assert len(lines) == len(args.nodes) * len(args.algorithms or [None]), proc.stdout
        rest = argv[cut + 1:]
        for job_line in lines:
            job = shlex.split(job_line)
            job = job[next(i for i, w in enumerate(job) if w.endswith(".sbatch")):]
            assert job[1:len(rest) + 1] == rest, job  # the app's options as written
            app, app_argv = ("sparc-bench", job[1:]) if job[0] != "jobs/app.sbatch" else \
                (job[1], job[2:])
            parser_of(app).parse_args(app_argv)
        n += 1
    assert n >= 6
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
