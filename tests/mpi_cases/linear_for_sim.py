"""The real side of ``tests/test_apps_simulated.py``: sparc-linear / sparc-svm runs under
mpiexec whose records the simulated runs must equal, bit for bit.

Usage: ``mpiexec -n P python -m mpi4py linear_for_sim.py DIR``: runs every configuration of
``CONFIGS`` (the test imports the same list) with ``--output DIR/real-NAME.jsonl``.
"""

import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from linear_sim_configs import CONFIGS, common  # noqa: E402

from sparcapps.linear.cli import main  # noqa: E402

d = Path(sys.argv[1])
for name, prog, extra in CONFIGS:
    loss = {"sparc-svm": "hinge", "sparc-linear": None}[prog]
    code = main([*common(d), *extra, "--output", str(d / f"real-{name}.jsonl")], prog=prog,
                loss=loss)
    assert code == 0, (name, code)
MPI.COMM_WORLD.Barrier()
