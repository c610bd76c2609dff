"""scripts/deep_step_profile.py summary: the split of a step from the ranks' timestamps (the
debugging profiler behind BENCHMARKS' measurements of the deep validation), on synthetic events:
no MPI job."""

import json
import subprocess
import sys

from mpirun import REPO


def _write(path, rank: int, steps: int = 6) -> None:
    """Rank 1 enters synchronize() 2 ms after rank 0 each step; one wait per step, complete
    0.5 ms after the later rank posted it; both leave 1 ms after the later entry."""
    events = []
    for k in range(steps):
        base = 1.0 + 0.01 * k
        enter = base + 0.002 * rank
        latest = base + 0.002
        events.append(["sync", enter, latest + 0.001, {"cpu_enter": 0.1 * k + 0.004,
                                                          "cpu": 0.0007, "nvcsw": 0,
                                                          "nivcsw": 0}])
        events.insert(-1, ["wait", enter + 0.0001, latest + 0.0006,
                           {"kind": "wait", "who": "agree", "pauses": 3, "pause_s": 0.0,
                            "cpu": 0.0002}])
        events.append(["step_end", latest + 0.0012, latest + 0.0012, {"cpu": 0.1 * k + 0.005}])
    path.mkdir(exist_ok=True)
    with open(path / f"rank{rank}.jsonl", "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def test_summary_splits_the_wait_for_the_slowest_rank_from_the_message():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "two"
        for rank in (0, 1):
            _write(run, rank)
        out = subprocess.run([sys.executable, str(REPO / "scripts" / "deep_step_profile.py"),
                              "summary", str(run)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    header, _, row = out.stdout.splitlines()
    cells = dict(zip(header.strip("|").split(" | "), row.strip("|").split(" | ")))
    cells = {k.strip(): v.strip() for k, v in cells.items()}
    assert cells["P"] == "2"
    # rank 0 waits 2 ms for rank 1, rank 1 none: 1 ms on average; then 1 ms each
    assert float(cells["wait_slowest"]) == 1.0 and float(cells["after_slowest"]) == 1.0
    assert float(cells["sync"]) == 2.0 and float(cells["step"]) == 10.0
    # the message completes 0.5 ms after the later post, on both ranks
    assert float(cells["first_msg"]) == float(cells["last_msg"]) == 0.5
    assert float(cells["local_cpu_p10"]) == 0.5 and float(cells["pauses"]) == 3.0
    assert float(cells["compute_cpu"]) == 99.0  # 0.1 s of CPU a step, less 1 ms


def test_run_refuses_another_app():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "deep_step_profile.py"),
                          "run", "out", "--", "sparc-linear"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "must be one of sparc-cnn, sparc-lstm" in out.stderr
