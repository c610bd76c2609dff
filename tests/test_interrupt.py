"""StopOnSignal on one process: a signal becomes a stop at the next agreement, the handlers go
away afterwards, and a second signal ends the process the usual way."""

import os
import signal
import subprocess
import sys
import textwrap

from mpi4py import MPI

from sparcapps.interrupt import StopOnSignal


def test_a_signal_is_a_stop_at_the_next_agreement_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with StopOnSignal(MPI.COMM_SELF, check_every_s=3600) as stopper:
        assert stopper.poll() is False  # step 1: the first agreement, nothing received
        os.kill(os.getpid(), signal.SIGUSR1)
        # the next agreement is an hour of steps away: the flag waits for it
        assert not any(stopper.poll() for _ in range(100))
        stopper._next_check = stopper._steps + 1
        assert stopper.poll() is True and stopper.signal_name == "SIGUSR1"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_ends_the_process_but_not_the_same_one_delivered_twice_at_once():
    """A plain scancel signals every process of the step and mpiexec forwards its copy: the
    rank gets one SIGTERM twice within milliseconds. That is one request (the rank stops at
    the next agreement and checkpoints); the same signal again later, or another, ends it."""
    code = textwrap.dedent("""
        import os, signal, time
        from mpi4py import MPI
        from sparcapps.interrupt import StopOnSignal
        with StopOnSignal(MPI.COMM_SELF, duplicate_window_s=0.5):
            os.kill(os.getpid(), signal.SIGTERM)
            print("first signal: still running", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            print("its copy at once: still running", flush=True)
            time.sleep(0.6)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("not reached", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "first signal: still running" in proc.stdout
    assert "its copy at once: still running" in proc.stdout
    assert "not reached" not in proc.stdout
    other = code.replace("time.sleep(0.6)\n    os.kill(os.getpid(), signal.SIGTERM)",
                         "os.kill(os.getpid(), signal.SIGUSR1)")
    assert other != code
    proc = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGUSR1, proc.stderr
    assert "its copy at once: still running" in proc.stdout and "not reached" not in proc.stdout
