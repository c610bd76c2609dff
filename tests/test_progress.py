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
