"""Non-blocking collectives: one communication thread per communicator, requests in order.

Each user communicator gets (on its first non-blocking call, collectively) a second private
duplicate and a thread that runs the submitted collectives on it one after the other, in
submission order, so every rank must submit its non-blocking calls in the same order (as with
MPI's own non-blocking collectives). The Numba kernels release the GIL and the thread waits on
MPI with short sleeps, so merging and waiting overlap with Python or PyTorch compute on the
calling thread; ``Request.wait`` blocks on an event and takes no CPU.

A call with nothing to overlap (the caller would wait for it at once) can instead run on the
calling thread, in its place in the order (:func:`call`): it waits for the calls submitted
before it, then runs on the thread's context while the thread is idle, so every rank runs the
same operations on the same communicator in the same order as through the thread, without
handing the call to the thread and its result back (two thread wake-ups, and the interpreter
lock passed back and forth). Its waits test non-blocking requests, as the thread's do; between
tests they only yield the core where the communicator's blocking calls would spin (no node runs
more ranks than it has cores: :func:`~sparcml._runtime.progress.wait_policy`), and sleep 20 us
where they would yield: a sleep ends about 90 us later on Linux, a delay added to each message
that the caller waits for while its core has nothing else to run.

Needs MPI initialized with ``MPI_THREAD_MULTIPLE`` (mpi4py's default).
"""

from __future__ import annotations

import atexit
import queue
from contextlib import nullcontext
import threading
import weakref
from typing import Any, Callable

from mpi4py import MPI

from .agreement_request import release
from .context import CommContext, context_for, new_context
from .._errors import SparcmlError
from .progress import BACKGROUND_MAX_SLEEP_SECONDS, Waiter

__all__ = ["Request", "Engine", "submit", "call"]


class Request:
    """Handle of one non-blocking call: ``test()`` polls, ``wait()`` returns the result.

    An error raised by the collective is re-raised by ``wait()`` (collective errors, such as
    ranks that disagree, are raised on every rank's request alike).
    """

    __slots__ = ("_done", "_result", "_error", "label")

    def __init__(self, label: str = ""):
        self._done = threading.Event()
        self._result = None
        self._error: BaseException | None = None
        self.label = label

    def test(self) -> bool:
        """True once the call has completed (successfully or not); never blocks."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        """Block until completion and return the result (or raise the call's error).

        ``timeout`` (seconds) raises ``TimeoutError`` if the call has not completed by then;
        the call itself goes on and can be waited for again.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"non-blocking {self.label or 'call'} not complete after "
                               f"{timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def _finish(self, result=None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()

    def __repr__(self) -> str:
        state = "done" if self.test() else "pending"
        return f"<sparcml.Request {self.label} {state}>"


class Engine:
    """The communication thread of one communicator (see module docstring)."""

    def __init__(self, ctx: CommContext, *, inline_sleeps: bool = True):
        """``inline_sleeps=False``: :meth:`call`'s waits test without sleeping (the ranks of
        the communicator have a core each: see :func:`_engine`)."""
        self.ctx = ctx
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._running = threading.Lock()  # held while a call runs on ctx (thread or caller)
        self._last: Request | None = None  # the latest submitted call's (they end in order)
        # the caller of call() waits for MPI alike on every rank (non-blocking requests
        # tested, as the thread's), without the thread's back-off: it has nothing else to do
        # meanwhile; where the ranks have a core each, without sleeping either
        self._inline_waiter = Waiter(yield_cpu=True, sleeps=inline_sleeps)
        # on a simulated rank, the thread's compute is the rank's: its communicator says how
        # (sparcml.sim's sparcml_helper_scope); a real one has nothing to account
        scope = getattr(ctx.comm, "sparcml_helper_scope", None)
        self._thread = threading.Thread(target=self._run,
                                        args=(nullcontext() if scope is None else scope(),),
                                        name="sparcml-comm", daemon=True)
        self._thread.start()

    def _run(self, scope) -> None:
        with scope:
            self._loop()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                if not MPI.Is_finalized():
                    self.ctx.free_subcomms()
                    release(self.ctx.comm)  # its agreements' persistent request
                    # the thread's own duplicate (new_context in _engine): MPI has a few
                    # thousand communicators, and a program that makes and frees communicators
                    # with non-blocking calls on each would run out
                    self.ctx.comm.Free()
                return
            request, fn, args = item
            with self._running:
                try:
                    result = fn(self.ctx, *args)
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                    request._finish(error=exc)
                else:
                    request._finish(result=result)

    def submit(self, label: str, fn: Callable[..., Any], *args) -> Request:
        request = Request(label)
        self._last = request
        self._queue.put((request, fn, args))
        return request

    def call(self, fn: Callable[..., Any], *args):
        """``fn(ctx, *args)`` on the calling thread, after every call submitted before it has
        completed (see the module docstring); its result, or its error raised here."""
        last = self._last
        if last is not None:
            last._done.wait()  # the thread runs in order: the latest done, all done
        with self._running:
            waiter, self.ctx.waiter = self.ctx.waiter, self._inline_waiter
            try:
                return fn(self.ctx, *args)
            finally:
                self.ctx.waiter = waiter

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread after the calls already submitted (waiting up to ``timeout``)."""
        self._queue.put(None)
        if timeout is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)


_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()
_atexit_registered = False


def _close_all() -> None:
    # registered after mpi4py's own exit hook, so it runs before MPI_Finalize: a thread still
    # inside MPI at finalize would crash or hang the process
    for engine in list(_engines):
        engine.close(timeout=30)


def submit(comm: MPI.Comm | None, label: str, fn: Callable[..., Any], *args) -> Request:
    """Queue ``fn(ctx, *args)`` on ``comm``'s communication thread (created on first use)."""
    return _engine(comm).submit(label, fn, *args)


def call(comm: MPI.Comm | None, fn: Callable[..., Any], *args):
    """``fn(ctx, *args)`` on the calling thread, on the context of ``comm``'s communication
    thread, after every call submitted to it before (see the module docstring); returns its
    result. ``submit(comm, label, fn, *args).wait()`` without the hand-off: the same
    operations in the same order on the same communicator, waited for alike (yielding), so the
    ranks need not agree on which of the two each takes."""
    return _engine(comm).call(fn, *args)


def _engine(comm: MPI.Comm | None) -> Engine:
    """``comm``'s engine (collective on first use: the thread's context duplicates ``comm``)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise SparcmlError(
            "non-blocking sparcml calls need MPI_THREAD_MULTIPLE; do not lower "
            "mpi4py.rc.thread_level before importing mpi4py.MPI")
    ctx = context_for(comm)
    if ctx.engine is None:
        # the thread always waits with sleeps, backing off on long waits: spinning or frequent
        # wake-ups would steal the core of the compute that the call is meant to overlap with
        global _atexit_registered
        waiter = Waiter(yield_cpu=True, max_sleep=BACKGROUND_MAX_SLEEP_SECONDS)
        # the caller of call() sleeps between its tests only where the blocking calls of the
        # communicator would yield too (wait_policy: more ranks than cores on some node), or on
        # a simulated communicator (its ranks are threads of one process)
        simulated = getattr(ctx.comm, "sparcml_ops", None) is not None
        sleeps = ctx.waiter.auto is not False or simulated
        ctx.engine = Engine(new_context(ctx.comm, waiter), inline_sleeps=sleeps)
        _engines.add(ctx.engine)
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True
    return ctx.engine
