"""The toy algorithm (tests/toy_algorithm.py) through sparcml.allreduce and sparc-bench."""

import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, sys.argv[1])  # tests/
import toy_algorithm  # noqa: E402  registers it

import sparcml  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
assert toy_algorithm.NAME in sparcml.ALGORITHMS
rng = np.random.default_rng(rank)
N = 1000
idx = np.sort(rng.choice(N, 40, replace=False))
vec = sparcml.SparseVector(N, idx, np.ones(40, np.float32))
expected = sum(np.bincount(np.sort(np.random.default_rng(r).choice(N, 40, replace=False)),
                           minlength=N) for r in range(P)).astype(np.float32)
stats = sparcml.TrafficStats()
got = sparcml.allreduce(vec, algorithm=toy_algorithm.NAME, stats=stats)
assert np.array_equal(got.to_dense(), expected)
assert stats.algorithm == toy_algorithm.NAME
assert np.array_equal(sparcml.iallreduce(vec, algorithm=toy_algorithm.NAME).wait().to_dense(),
                      expected)
# blocking and on the communication thread, run() received the public, narrow context
assert toy_algorithm.SEEN and set(toy_algorithm.SEEN) == {sparcml.CallContext}, \
    set(toy_algorithm.SEEN)
# the registry's option check applies to it like to the built-ins, on every rank
try:
    sparcml.allreduce(vec, algorithm=toy_algorithm.NAME, quantizer=sparcml.QSGD(4))
except sparcml.IncompatibleOptionsError as exc:
    assert "cannot add quantized values" in str(exc)
else:
    raise AssertionError("a quantizer with the toy algorithm was accepted")
from sparcapps.bench.cli import main  # noqa: E402

rc = main(["--N", "4096", "--density", "0.01", "--reps", "2", "--warmup", "0", "--no-model",
           "--algorithms", toy_algorithm.NAME])
assert rc == 0
if rank == 0:
    print("TOY OK", flush=True)
