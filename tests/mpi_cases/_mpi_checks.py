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


# ---- named cases: a script plans its cases by name, marks each done, and reports both ---------
_planned: list[str] = []
_done: list[str] = []


def plan(*labels: str) -> None:
    """Declare cases this script will run (before running them)."""
    _planned.extend(labels)


def done(label: str) -> None:
    """Mark one case as passed (its checks held on this rank)."""
    _done.append(label)


def report(tag: str) -> None:
    """Rank 0 prints ``TAG-REPORT {"planned": [...], "done": [...]}`` (one line of JSON); the
    wrapper test asserts that the two lists are equal, so a case that silently did not run, or
    ran twice, fails it (tests/mpirun.py: ``case_report``)."""
    import json

    if _rank == 0:
        print(f"{tag}-REPORT " + json.dumps({"planned": _planned, "done": _done}), flush=True)
