"""Where a deep app's step goes, per rank: a debugging profiler of ``sparc-cnn`` / ``sparc-lstm``
(issue 33, the deep validation's measurements; not part of the apps).

    # each rank writes OUT/rank<r>.jsonl (wrapped functions' timestamps; nothing else changes)
    bash jobs/emulate.sh 2x1gbit -- python scripts/deep_step_profile.py run OUT -- \\
        sparc-cnn --epochs 2 --batch-size 8 --seed 0 --no-progress --density 0.01 --bits 4
    python scripts/deep_step_profile.py summary OUT [OUT ...]     # one line per run

``run`` wraps, in this process only, ``DistributedOptimizer.synchronize`` and ``zero_grad``
(each step's backward end, ``synchronize()``'s entry and exit, the calling thread's CPU time
and context switches), every wait of :class:`sparcml._runtime.progress.Waiter` made on the
calling thread inside ``synchronize()`` (the request's post and completion, the pauses between
its tests and their seconds, its CPU time, the function that waited) and the communication
thread's submissions; then runs the app. ``--inline-sleeps 0|1`` sets whether
``synchronize()``'s waits sleep between tests (the engine's ``_inline_waiter``), for an A/B of
that choice. The clocks are ``time.perf_counter`` (CLOCK_MONOTONIC: one clock for the ranks of
one machine, emulated nodes included), so the ranks' timestamps compare.

``summary`` prints, per run, means over the second epoch of a 2-epoch run (the steps of the last
half, less the first, which holds the first epoch's evaluation; the first epoch compiles
kernels) of every rank-step, in ms: the step (step end to step end), the compute before
``synchronize()`` (wall, its tenth percentile and its thread CPU), the time in
``synchronize()`` split into the wait for the slowest rank (the latest rank's entry less this
rank's) and what follows it, the waits' total and the rest (local work: wall and, tenth
percentile, CPU), each message's completion less the latest rank's post of it (the first, the
second, the last wait of the step: for top-k + QSGD the agreement, the exchange, the flag
agreement), and the pauses per step.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

__all__ = ["load", "summarize", "main"]

FIELDS = ("step", "compute", "compute_p10", "compute_cpu", "sync", "wait_slowest",
          "after_slowest", "waits", "local", "local_cpu_p10", "first_msg", "second_msg",
          "last_msg", "pauses")


def _install(out_dir: str, inline_sleeps: str | None) -> None:
    """Wrap the functions (see the module docstring); the events go to OUT/rank<r>.jsonl at
    exit."""
    import atexit
    import resource
    import threading
    import time

    from mpi4py import MPI

    from sparcml._runtime import nonblocking, progress
    from sparcml.torch import DistributedOptimizer

    pc, events, state = time.perf_counter, [], {"pauses": 0, "pause_s": 0.0, "in": False}
    main_thread = threading.main_thread()

    pause = progress.Waiter._pause

    def counted_pause(self, spins, started):
        t = pc()
        pause(self, spins, started)
        state["pauses"] += 1
        state["pause_s"] += pc() - t

    progress.Waiter._pause = counted_pause

    def caller() -> str:
        f, names = sys._getframe(2), []
        while f is not None and len(names) < 2:
            if f.f_code.co_name not in ("wait", "waitall", "mprobe", "collective", "timed"):
                names.append(f.f_code.co_name)
            f = f.f_back
        return "/".join(names)

    def wrap_wait(name):
        orig = getattr(progress.Waiter, name)

        def timed(self, *args, **kwargs):
            p0, s0, t0, c0 = state["pauses"], state["pause_s"], pc(), time.thread_time()
            try:
                return orig(self, *args, **kwargs)
            finally:
                t1, c1 = pc(), time.thread_time()
                if state["in"] and threading.current_thread() is main_thread:
                    events.append(("wait", t0, t1, {
                        "kind": name, "who": caller(), "pauses": state["pauses"] - p0,
                        "pause_s": state["pause_s"] - s0, "cpu": c1 - c0}))
        setattr(progress.Waiter, name, timed)

    for name in ("wait", "waitall", "mprobe"):
        wrap_wait(name)

    submits = [0]
    submit = nonblocking.Engine.submit

    def counted_submit(self, *args, **kwargs):
        submits[0] += 1
        return submit(self, *args, **kwargs)

    nonblocking.Engine.submit = counted_submit
    engine_init = nonblocking.Engine.__init__

    def init(self, ctx, **kwargs):
        engine_init(self, ctx, **kwargs)
        if inline_sleeps is not None:
            self._inline_waiter.sleeps = inline_sleeps == "1"
        events.append(("inline_sleeps", 0.0, 0.0, {"sleeps": self._inline_waiter.sleeps}))

    nonblocking.Engine.__init__ = init
    sync = DistributedOptimizer.synchronize

    def timed_sync(self):
        if self._synchronized:
            return sync(self)
        r0, c0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
        state["in"], t0 = True, pc()
        try:
            return sync(self)
        finally:
            t1, state["in"] = pc(), False
            r1 = resource.getrusage(resource.RUSAGE_THREAD)
            events.append(("sync", t0, t1, {
                "cpu_enter": c0, "cpu": time.thread_time() - c0,
                "nvcsw": r1.ru_nvcsw - r0.ru_nvcsw, "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw}))

    DistributedOptimizer.synchronize = timed_sync
    zero_grad = DistributedOptimizer.zero_grad

    def timed_zero_grad(self, *args, **kwargs):
        out = zero_grad(self, *args, **kwargs)
        events.append(("step_end", pc(), pc(), {"cpu": time.thread_time()}))
        return out

    DistributedOptimizer.zero_grad = timed_zero_grad

    def dump():
        os.makedirs(out_dir, exist_ok=True)
        events.append(("submits", 0.0, 0.0, {"n": submits[0]}))
        with open(os.path.join(out_dir, f"rank{MPI.COMM_WORLD.Get_rank()}.jsonl"), "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
        events.clear()

    atexit.register(dump)


def load(out_dir: str) -> list[list[dict]]:
    """Per rank, its steps: ``enter``, ``exit``, ``end`` (perf_counter seconds), ``prev`` (the
    previous step's end, or None), ``cpu``, ``cpu_enter``, ``prev_cpu`` (thread CPU seconds)
    and ``waits`` (``(post, completion, extra)`` of each wait inside ``synchronize()``)."""
    ranks = []
    r = 0
    while os.path.exists(path := os.path.join(out_dir, f"rank{r}.jsonl")):
        steps, waits, prev, prev_cpu = [], [], None, None
        with open(path) as f:
            for line in f:
                kind, t0, t1, extra = json.loads(line)
                if kind == "wait":
                    waits.append((t0, t1, extra))
                elif kind == "sync":
                    steps.append({"enter": t0, "exit": t1, "cpu": extra["cpu"],
                                  "cpu_enter": extra["cpu_enter"], "prev": prev,
                                  "prev_cpu": prev_cpu, "end": None,
                                  "waits": [w for w in waits if t0 <= w[0] <= t1]})
                    waits = []
                elif kind == "step_end":
                    if steps and steps[-1]["end"] is None:
                        steps[-1]["end"] = t0
                    prev, prev_cpu = t0, extra["cpu"]
        ranks.append(steps)
        r += 1
    return ranks


def summarize(ranks: list[list[dict]]) -> dict:
    """The means of :data:`FIELDS` in ms over the rank-steps of the last half (see the module
    docstring); a field that no step has (messages at P = 1) is None."""
    P = len(ranks)
    n = min(len(s) for s in ranks) if ranks else 0
    if n < 4:
        raise ValueError(f"fewer than 4 steps profiled on some rank ({n})")
    got = {k: [] for k in FIELDS}
    for k in range(n // 2 + 1, n):  # (step n // 2 of a 2-epoch run holds an evaluation)
        steps = [ranks[r][k] for r in range(P)]
        latest = max(s["enter"] for s in steps)
        for s in steps:
            if s["prev"] is None or s["end"] is None:
                continue
            waited = sum(w[1] - w[0] for w in s["waits"])
            got["step"].append(s["end"] - s["prev"])
            got["compute"].append(s["enter"] - s["prev"])
            got["compute_cpu"].append(s["cpu_enter"] - s["prev_cpu"])
            got["sync"].append(s["exit"] - s["enter"])
            got["wait_slowest"].append(latest - s["enter"])
            got["after_slowest"].append(s["exit"] - latest)
            got["waits"].append(waited)
            got["local"].append(s["exit"] - s["enter"] - waited)
            got["local_cpu_p10"].append(s["cpu"] - sum(w[2]["cpu"] for w in s["waits"]))
            got["pauses"].append(sum(w[2]["pauses"] for w in s["waits"]) / 1e3)
        m = min(len(s["waits"]) for s in steps)
        if P > 1 and m:
            for key, i in (("first_msg", 0), ("second_msg", min(1, m - 1)), ("last_msg", m - 1)):
                posted = max(s["waits"][i][0] for s in steps)
                got[key] += [s["waits"][i][1] - posted for s in steps]
    got["compute_p10"] = list(got["compute"])
    out = {}
    for key, values in got.items():
        if not values:
            out[key] = None
        elif key.endswith("_p10"):
            out[key] = 1e3 * sorted(values)[len(values) // 10]
        else:
            out[key] = 1e3 * statistics.fmean(values)
    out["P"] = P
    return out


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "run" and "--" in argv:
        sep = argv.index("--")
        out_dir, opts, app = argv[1], argv[2:sep], argv[sep + 1:]
        sleeps = None
        if opts[:1] == ["--inline-sleeps"] and len(opts) == 2 and opts[1] in ("0", "1"):
            sleeps = opts[1]
        elif opts:
            raise SystemExit(f"deep_step_profile: unknown options {opts} (--inline-sleeps 0|1)")
        apps = {"sparc-cnn": "sparcapps.deep.cnn", "sparc-lstm": "sparcapps.deep.lstm"}
        if not app or app[0] not in apps:
            raise SystemExit(f"deep_step_profile: the app must be one of {', '.join(apps)}")
        _install(out_dir, sleeps)
        import importlib

        sys.argv = app
        return importlib.import_module(apps[app[0]]).main() or 0
    if len(argv) >= 2 and argv[0] == "summary":
        print("| run | P | " + " | ".join(FIELDS) + " |")
        print("|" + "---|" * (len(FIELDS) + 2))
        for d in argv[1:]:
            s = summarize(load(d))
            cells = ["-" if s[k] is None else f"{s[k]:.3f}" for k in FIELDS]
            print(f"| {os.path.basename(os.path.normpath(d))} | {s['P']} | "
                  + " | ".join(cells) + " |")
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
