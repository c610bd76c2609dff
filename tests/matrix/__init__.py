"""One test matrix: multi-rank correctness cases written once, run on real and simulated ranks.

A *case* is a function ``fn(comm, check, **params)`` of a communicator: an mpi4py ``Comm``
under ``mpiexec`` (``tests/mpi_cases/run_matrix.py``) or a :class:`sparcml.sim.SimComm` under
``sparcml.sim.run(P)``. It passes ``comm`` to every sparcml call and reports what it checks
through ``check``, a :class:`Checks` that records a failed condition on its rank instead of
raising, so that every rank goes on through the same collectives. At the end of each case
the runner agrees on the failures of every rank (one ``allgather``): a case fails on every
rank or on none, as in mpi4py's own tests, and the runner goes on to the next case. A case
that checked nothing fails. An exception other than a recorded check (a bug, a hang broken by
a timeout) ends the run, naming the case.

Each case module (:data:`MODULES`) has ``cases(profile, P, simulated)``: the list of
:class:`Case` to run at P ranks under a profile (``"full"``; the modules name their profiles
for many ranks), on simulated ranks or real ones.
:func:`run_cases` runs such a list and returns a report: the names it ran, in order, and the
failures by name. The pytest side (``tests/matrix/harness.py``) compares the names with the
list it derives from the same module and asserts no failure.

Still scripts in ``tests/mpi_cases`` (run under mpiexec only): ``one_bad_rank`` sets
``SPARCML_*`` environment variables per rank (one environment for every simulated rank) and
runs without ``-m mpi4py`` on purpose; ``uncaught`` and ``fail_in_exchange`` test that a
failing process ends the job; ``torch_*`` and ``deep_apps`` need torch; ``linear_*`` and
``toy_algorithm_run`` run the applications and CLIs; ``sim_validation`` compares real and
simulated bytes (tests/test_sim.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from sparcml.sim import SimComm

__all__ = ["Case", "Checks", "CaseError", "MODULES", "case_list", "run_cases"]

MODULES = ("allreduce", "collectives", "topk", "bad_input", "compression", "partitions",
           "hierarchical", "plans")
_MAX_REPORTED = 5  # failed checks reported per rank and case


class CaseError(RuntimeError):
    """A case raised (rather than failing a check): names the case; the cause is chained."""


@dataclass(frozen=True)
class Case:
    """One case: ``fn(comm, check, **params)`` under a unique ``name``."""

    name: str
    fn: Callable
    params: dict = field(default_factory=dict)


class Checks:
    """Records this rank's checks; :meth:`agree` makes their outcome collective."""

    def __init__(self, comm):
        self.comm = comm
        self.count = 0
        self.failed: list[str] = []

    def __call__(self, cond, what) -> bool:
        """Record ``cond`` (true: held) with a description; returns ``bool(cond)``."""
        self.count += 1
        if not cond:
            self.failed.append(str(what))
        return bool(cond)

    def same(self, value, what) -> bool:
        """Check (collectively) that ``value`` is equal on every rank."""
        values = self.comm.allgather(value)
        return self(all(v == values[0] for v in values), f"{what}: differs between ranks")

    def agree(self) -> list[str]:
        """Collective: every rank's failed checks (rank-tagged), the same list on every rank.
        A rank that checked nothing is a failure too."""
        mine = self.failed[:_MAX_REPORTED]
        if len(self.failed) > _MAX_REPORTED:
            mine.append(f"... and {len(self.failed) - _MAX_REPORTED} more")
        if self.count == 0:
            mine.append("checked nothing")
        every = self.comm.allgather(mine)
        return [f"rank {r}: {what}" for r, whats in enumerate(every) for what in whats]


def case_list(module: str, profile: str, P: int, simulated: bool) -> list[Case]:
    """The cases of ``tests/matrix/<module>.py`` for ``profile`` at ``P`` ranks, on simulated
    ranks or real ones (a few cases need real ranks: each module says which and why)."""
    if module not in MODULES:
        raise ValueError(f"unknown case module {module!r}; known: {', '.join(MODULES)}")
    cases = importlib.import_module(f"{__name__}.{module}").cases(profile, P, simulated)
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"{module}/{profile}: duplicate case names")
    return cases


def run_cases(comm, module: str, profile: str, on_start: Callable | None = None) -> dict:
    """Run the cases of ``module``/``profile`` on ``comm`` (collective); the report:
    ``{"ran": [names in order], "failed": {name: [rank-tagged failures]}}``, the same on
    every rank. ``on_start(name)`` is called on every rank before each case."""
    report: dict = {"ran": [], "failed": {}}
    simulated = isinstance(comm, SimComm)
    for case in case_list(module, profile, comm.Get_size(), simulated):
        if on_start is not None:
            on_start(case.name)
        check = Checks(comm)
        try:
            case.fn(comm, check, **case.params)
        except Exception as exc:
            raise CaseError(f"case {case.name!r} raised {type(exc).__name__}: {exc}") from exc
        failures = check.agree()
        report["ran"].append(case.name)
        if failures:
            report["failed"][case.name] = failures
    return report
