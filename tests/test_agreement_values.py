"""Issue 25 item 1 under mpiexec (no ``-m mpi4py``): a value one rank cannot pack into the
agreement (``k = 2**70``, ``SPARCML_RANKS_PER_NODE=10**23``), a bad option or a differing one
raises the same error on every rank, and the next call works (tests/mpi_cases/
bad_agreed_values.py). The in-process fuzz of the packing is in tests/test_options.py."""

import re
import sys

import pytest

from mpirun import REPO, run_mpi

CASES = REPO / "tests" / "mpi_cases"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_unpackable_or_bad_agreed_values_on_one_rank(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, str(CASES / "bad_agreed_values.py")],
                   timeout=300)
    done = re.search(r"BAD-AGREED-VALUES (\d+) OF (\d+) OK", proc.stdout)
    assert done and done.group(1) == done.group(2) and int(done.group(1)) > 0, proc.stdout
