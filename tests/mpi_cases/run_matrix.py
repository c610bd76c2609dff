"""Run cases of the test matrix (``tests/matrix``) under mpiexec: one job, many cases.

``python -m mpi4py tests/mpi_cases/run_matrix.py MODULE PROFILE``: rank 0 prints
``MATRIX-START <name>`` before each case (the last one names a case that hung) and, at the
end, ``MATRIX-REPORT <json>`` with the names run and the failures
(:func:`matrix.run_cases`). Failed checks do not end the job; an exception does (``-m mpi4py``
aborts every rank), after printing the case that raised.
"""

import json
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the matrix package

from matrix import run_cases  # noqa: E402

comm = MPI.COMM_WORLD
module, profile = sys.argv[1:3]


def started(name):
    if comm.Get_rank() == 0:
        print(f"MATRIX-START {name}", flush=True)


report = run_cases(comm, module, profile, on_start=started)
if comm.Get_rank() == 0:
    print("MATRIX-REPORT " + json.dumps(report), flush=True)
