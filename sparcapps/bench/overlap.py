"""Overlap of a non-blocking sparse allreduce with compute (NumPy or PyTorch) on the calling
thread.

For one input, three timings side by side (median over repetitions, slowest rank): the
collective alone (``iallreduce`` + ``wait``), the compute alone, and both: ``iallreduce``
started, the compute run, then ``wait``. Perfect overlap gives ``both == max(alone)``; the ratio
``both / max(comm, compute)`` is what the benchmark reports (sequential execution would give
``(comm + compute) / max``).
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.records import summarize

from .inputs import make_input

__all__ = ["COMPUTE_KINDS", "numpy_compute", "torch_compute", "calibrate_compute",
           "bench_overlap"]

COMPUTE_KINDS = ("numpy", "torch")


def numpy_compute(work: np.ndarray, rounds: int) -> float:
    """Single-threaded NumPy work (element-wise ufuncs, which release the GIL)."""
    acc = 0.0
    for _ in range(rounds):
        np.sin(work, out=work)
        np.multiply(work, 1.0001, out=work)
        acc += float(work[0])
    return acc


def torch_compute(work, rounds: int) -> float:
    """PyTorch work on one intra-op thread: a 256 x 256 matmul chain and a tanh (a small MLP's
    forward; PyTorch releases the GIL inside each op). ``work``: a (256, 256) float32 tensor."""
    import torch  # the [torch] extra: only for --compute torch

    acc = 0.0
    x = work
    for _ in range(rounds):
        x = torch.tanh(x @ work) * 0.5
        acc += float(x[0, 0])
    return acc


def _make_work(kind: str, size: int):
    if kind == "numpy":
        return np.random.default_rng(0).random(size), numpy_compute
    if kind == "torch":
        import torch  # the [torch] extra: only for --compute torch

        # one thread, like the NumPy work: the compute occupies one core per rank, and the
        # intra-op pool would otherwise claim every core for each rank
        torch.set_num_threads(1)
        generator = torch.Generator().manual_seed(0)
        return torch.rand(256, 256, generator=generator) / 16, torch_compute
    raise ValueError(f"compute must be one of {', '.join(COMPUTE_KINDS)}, got {kind!r}")


def calibrate_compute(target_s: float, comm: MPI.Comm, size: int = 1 << 20,
                      kind: str = "numpy") -> tuple:
    """Work and rounds of ``kind`` compute taking about ``target_s`` (agreed over ranks: the
    max). Returns ``(work, rounds, fn)``; ``fn(work, rounds)`` runs it."""
    work, fn = _make_work(kind, size)
    fn(work, 1)  # first-call costs (thread pools, page faults) out of the timing
    trial = 1
    while True:  # until a trial is long enough to time (at least 20 ms, or a fifth of the target)
        t0 = time.perf_counter()
        fn(work, trial)
        elapsed = time.perf_counter() - t0
        if elapsed >= min(0.02, target_s / 5) or trial >= 1 << 20:
            break
        trial *= 2
    rounds = max(1, int(round(target_s * trial / elapsed)))
    return work, comm.allreduce(rounds, op=MPI.MAX), fn


def _timed(comm, fn) -> float:
    """One run of ``fn`` after a barrier: the slowest rank's seconds."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def bench_overlap(comm: MPI.Comm, *, N: int, density: float, algorithm: str, compute_s: float,
                  reps: int = 7, seed: int = 0, compute=None, kind: str = "numpy") -> dict:
    """Time comm alone, compute alone, and overlapped. Collective over ``comm``.

    ``compute`` is a zero-argument callable (default: ``kind`` work, NumPy or PyTorch, of
    about ``compute_s``).
    """
    vec = make_input(N, density, "random", comm.Get_rank(), comm.Get_size(), seed=seed)
    if compute is None:
        work, rounds, fn = calibrate_compute(compute_s, comm, kind=kind)

        def compute():
            fn(work, rounds)

    def comm_only():
        sparcml.iallreduce(vec, comm, algorithm=algorithm).wait()

    def both():
        req = sparcml.iallreduce(vec, comm, algorithm=algorithm)
        compute()
        req.wait()

    comm_only()  # the thread, the Dup, Numba's cache, auto's calibration
    # the three are interleaved repetition by repetition, so that load on the machine hits
    # them alike
    samples = {"comm": [], "compute": [], "overlapped": []}
    for _ in range(reps):
        samples["comm"].append(_timed(comm, comm_only))
        samples["compute"].append(_timed(comm, compute))
        samples["overlapped"].append(_timed(comm, both))
    comm_alone, compute_alone, overlapped = (summarize(samples[k]) for k in
                                             ("comm", "compute", "overlapped"))
    larger = max(comm_alone["median"], compute_alone["median"])
    return {"comm": comm_alone, "compute": compute_alone, "overlapped": overlapped,
            "ratio_to_max": overlapped["median"] / larger,
            "sequential_ratio": (comm_alone["median"] + compute_alone["median"]) / larger}
