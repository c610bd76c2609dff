"""Stopping a multi-rank training run cleanly on a signal: Slurm's warning before the time limit.

Slurm sends SIGTERM (the job templates ask for it before the limit: ``--signal=B:TERM@120``), and
``mpiexec`` or ``srun`` forward it to every rank, at slightly different moments. Each rank's
handler only sets a flag; at step boundaries the ranks agree whether any rank got a signal, so
that all stop after the same step and write one consistent checkpoint. The agreement is a
one-element ``MPI_Allreduce`` about once a second (the interval in steps follows the slowest
rank's step time), not one per step. A second signal to the same rank ends it the usual way,
unless it is the same signal within ``duplicate_window_s`` (2 s) of the first: a plain
``scancel`` signals every process of the job step, and ``mpiexec`` forwards the copy it got, so
a rank gets the one request twice at once (which used to end it without its checkpoint).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
from mpi4py import MPI

__all__ = ["StopOnSignal", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopOnSignal:
    """Context manager: while active, ``STOP_SIGNALS`` request a stop instead of ending the rank.

    Collective use: every rank of ``comm`` enters it, and calls :meth:`poll` once after every
    training step; ``poll`` returns the same answer on every rank. ``signum`` is then the signal
    that asked for the stop (the largest number if ranks got different ones).
    """

    def __init__(self, comm: MPI.Comm, *, check_every_s: float = 1.0,
                 signals=STOP_SIGNALS, duplicate_window_s: float = 2.0):
        self.comm = comm
        self.check_every_s = check_every_s
        self.signals = tuple(signals)
        self.duplicate_window_s = duplicate_window_s
        self.signum: int | None = None
        self._received = 0
        self._received_at = 0.0
        self._old: dict = {}
        self._steps = 0
        self._next_check = 1
        self._since = (time.perf_counter(), 0)

    def _handler(self, signum, frame):
        now = time.monotonic()
        if self._received:
            if signum == self._received and now - self._received_at < self.duplicate_window_s:
                return  # the same request delivered twice (scheduler and launcher)
            signal.signal(signum, signal.SIG_DFL)  # a second request: end the process
            os.kill(os.getpid(), signum)
            return
        self._received, self._received_at = signum, now

    def __enter__(self) -> "StopOnSignal":
        self._old = {s: signal.signal(s, self._handler) for s in self.signals}
        self._since = (time.perf_counter(), self._steps)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}

    @property
    def signal_name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def poll(self) -> bool:
        """After a step: True when some rank got a stop signal. Collective about once a second
        (at the same steps on every rank), local otherwise."""
        self._steps += 1
        if self._steps < self._next_check:
            return False
        now = time.perf_counter()
        t0, steps0 = self._since
        seconds_per_step = (now - t0) / max(1, self._steps - steps0)
        both = np.array([self._received, seconds_per_step], np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
        self._since = (now, self._steps)
        if both[0]:
            self.signum = int(both[0])
            return True
        self._next_check = self._steps + max(1, int(self.check_every_s / max(both[1], 1e-6)))
        return False
