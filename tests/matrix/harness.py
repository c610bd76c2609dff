"""The pytest side of the test matrix: run a case module's list under mpiexec or the
simulator and assert that every expected case ran, in order, and none failed."""

from __future__ import annotations

import json
import sys

import sparcml.sim as sim

from mpirun import REPO, run_mpi

from . import case_list, run_cases

RUNNER = REPO / "tests" / "mpi_cases" / "run_matrix.py"


def expect_report(report: dict, module: str, profile: str, P: int, simulated: bool,
                  where: str) -> None:
    """Every case of ``module``/``profile`` at P ran, in order, and none failed."""
    expected = [c.name for c in case_list(module, profile, P, simulated)]
    assert expected, f"{module}/{profile} at P={P}: no cases"
    missing = [n for n in expected if n not in report["ran"]]
    unexpected = [n for n in report["ran"] if n not in expected]
    assert report["ran"] == expected, (f"{where}: cases not run: {missing}; not expected: "
                                       f"{unexpected}")
    failed = "\n".join(f"{name}:\n  " + "\n  ".join(why)
                       for name, why in report["failed"].items())
    assert not report["failed"], f"{where}: {len(report['failed'])} cases failed\n{failed}"


def run_in_mpiexec(P: int, module: str, profile: str = "full", *, timeout: float = 300,
                   env: dict | None = None) -> dict:
    """One mpiexec job of P ranks running the list; its report, checked."""
    proc = run_mpi(P, args=[sys.executable, "-m", "mpi4py", str(RUNNER), module, profile],
                   timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MATRIX-REPORT ")]
    assert len(lines) == 1, f"no report\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    report = json.loads(lines[0].split(" ", 1)[1])
    expect_report(report, module, profile, P, False, f"mpiexec -n {P} {module}/{profile}")
    return report


def run_in_sim(P: int, module: str, profile: str = "full", *, timeout: float = 300,
               network: str | None = None) -> dict:
    """The list on P simulated ranks (``sparcml.sim.run``, under a wall ``timeout``); its
    report, checked (every rank's report is the same: the runner agrees collectively)."""
    res = sim.run(P, run_cases, args=(module, profile), network=network, timeout=timeout)
    report = res.results[0]
    assert all(r == report for r in res.results), "ranks' reports differ"
    expect_report(report, module, profile, P, True, f"sim P={P} {module}/{profile}")
    return report
