"""Waiter: yielding waits complete, and background waits back off instead of waking every 20 us."""

import time

import pytest

from sparcml._runtime.progress import BACKGROUND_MAX_SLEEP_SECONDS, Waiter


class _DoneAfter:
    """A stand-in for an MPI request that completes ``seconds`` after creation."""

    def __init__(self, seconds: float):
        self.due = time.perf_counter() + seconds
        self.tests = 0

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        self.tests += 1
        return time.perf_counter() >= self.due


def _wait(waiter: Waiter, seconds: float) -> tuple[float, int]:
    request = _DoneAfter(seconds)
    t0 = time.perf_counter()
    waiter.wait(request)
    return time.perf_counter() - t0, request.tests


def test_background_waiter_backs_off_and_stays_prompt():
    elapsed, tests = _wait(Waiter(yield_cpu=True, max_sleep=BACKGROUND_MAX_SLEEP_SECONDS), 0.2)
    # sleeps grow to 1 ms: about 20 spins + a few hundred tests, not one per 20 us (10,000)
    assert tests < 600, tests
    # and the wait ends within the back-off's bound (1/16 of the time waited, at most 1 ms),
    # with room for a loaded machine's scheduler
    assert elapsed < 0.2 + 0.05, elapsed


def test_blocking_waiter_keeps_short_sleeps():
    _, short = _wait(Waiter(yield_cpu=True), 0.1)
    _, backed_off = _wait(Waiter(yield_cpu=True, max_sleep=BACKGROUND_MAX_SLEEP_SECONDS), 0.1)
    assert short > 2 * backed_off, (short, backed_off)


def test_spinning_waiter_calls_wait():
    class Blocking:
        waited = False

        def Wait(self):  # noqa: N802 - mpi4py's name
            self.waited = True

    request = Blocking()
    Waiter(yield_cpu=False).wait(request)
    assert request.waited


def test_max_sleep_is_at_least_the_minimum():
    assert Waiter(yield_cpu=True, max_sleep=0).max_sleep > 0
    with pytest.raises((TypeError, ValueError)):
        Waiter(yield_cpu=True, max_sleep="long")


def test_waiter_without_sleeps_tests_between_yields_only(monkeypatch):
    import sparcml._runtime.progress as progress

    slept = []
    monkeypatch.setattr(progress.time, "sleep", lambda s: slept.append(s))
    elapsed, tests = _wait(Waiter(yield_cpu=True, sleeps=False), 0.02)
    assert elapsed >= 0.02 and not slept
    assert tests > 20  # every pause a sched_yield: many more tests than the spins before sleeps
    _wait(Waiter(yield_cpu=True), 0.02)
    assert slept  # the default still sleeps once its spins are over


def test_inline_waits_sleep_only_where_the_ranks_outnumber_the_cores(monkeypatch):
    from mpi4py import MPI

    from sparcml._runtime import context, nonblocking

    comm = MPI.COMM_SELF.Dup()
    try:
        ctx = context.context_for(comm)
        assert ctx.waiter.auto is False  # one rank on this machine's cores
        engine = nonblocking._engine(comm)
        assert engine._inline_waiter.yield_cpu and not engine._inline_waiter.sleeps
        assert engine.ctx.waiter.sleeps  # the thread's own waits keep their back-off
        assert nonblocking.call(comm, lambda c, x: x + 1, 41) == 42
    finally:
        comm.Free()
    monkeypatch.setattr(context, "wait_policy", lambda c: True)  # oversubscribed
    comm = MPI.COMM_SELF.Dup()
    try:
        assert nonblocking._engine(comm)._inline_waiter.sleeps
    finally:
        comm.Free()
