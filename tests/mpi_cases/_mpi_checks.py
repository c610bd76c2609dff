"""The check helper of the mpi_cases scripts (imported from the script's own directory).

``ok(cond, what)`` raises an AssertionError naming this rank when ``cond`` is false and counts
the checks that held; ``passed()`` is that count, which a script sums over its ranks and
prints, so that a script that checked nothing cannot pass.
"""

from mpi4py import MPI

_rank = MPI.COMM_WORLD.Get_rank()
_passed = 0


def ok(cond, what) -> None:
    global _passed
    if not cond:
        raise AssertionError(f"rank {_rank}: {what}")
    _passed += 1


def passed() -> int:
    return _passed
