"""Overlap of a non-blocking sparse allreduce with compute on the calling thread.

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

__all__ = ["numpy_compute", "calibrate_compute", "bench_overlap"]


def numpy_compute(work: np.ndarray, rounds: int) -> float:
    """Single-threaded NumPy work (element-wise ufuncs, which release the GIL)."""
    acc = 0.0
    for _ in range(rounds):
        np.sin(work, out=work)
        np.multiply(work, 1.0001, out=work)
        acc += float(work[0])
    return acc


def calibrate_compute(target_s: float, comm: MPI.Comm, size: int = 1 << 20) -> tuple:
    """Rounds of :func:`numpy_compute` taking ``target_s`` (agreed over ranks: the max)."""
    work = np.random.default_rng(0).random(size)
    t0 = time.perf_counter()
    numpy_compute(work, 3)
    per_round = (time.perf_counter() - t0) / 3
    rounds = max(1, int(round(target_s / per_round)))
    return work, comm.allreduce(rounds, op=MPI.MAX)


def _timed(comm, fn) -> float:
    """One run of ``fn`` after a barrier: the slowest rank's seconds."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def bench_overlap(comm: MPI.Comm, *, N: int, density: float, algorithm: str, compute_s: float,
                  reps: int = 7, seed: int = 0, compute=None) -> dict:
    """Time comm alone, compute alone, and overlapped. Collective over ``comm``.

    ``compute`` is a zero-argument callable (default: NumPy work of about ``compute_s``).
    """
    vec = make_input(N, density, "random", comm.Get_rank(), comm.Get_size(), seed=seed)
    if compute is None:
        work, rounds = calibrate_compute(compute_s, comm)

        def compute():
            numpy_compute(work, rounds)

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
