"""SparseLinearClassifier under MPI: identical weights on every rank after every step, the same
weights as one process up to float summation order (bitwise at P = 1), every algorithm, and bad
input raising the same error on every rank.

Run under mpiexec (P in 1..4; the global batch 48 divides by each) with ``python -m mpi4py``.
Rank 0 prints the cases planned and passed (``LINEAR-CASES-REPORT``: _mpi_checks.py).
"""

import hashlib
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import h5py
import numpy as np
from mpi4py import MPI

import sparcml
from _mpi_checks import done, plan, report
from outcomes import outcome_everywhere
from sparcapps.data import make_url_like, shard_range
from sparcapps.linear import (CheckpointError, CheckpointMismatchError, InputDataError,
                              NotBinaryError, SparseLinearClassifier)

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
GLOBAL_BATCH = 48
ERRORS = ["exactly two values", *(["differ in feature count"] if P > 1 else []), "NaN",
          "inconsistent numbers of samples", "algorithm 'dense' cannot add quantized values",
          "not a sparcml-csr file", "no such file", "needs a binary task", "need finite values",
          "n_features: checkpoint 5000, data 4000", "loss: checkpoint 'log', now 'hinge'",
          "resume state", "not a sparcml-linear-checkpoint file"]
plan(*[f"{loss} {what}" for loss in ("log", "hinge")
       for what in ["same everywhere", "vs one process", *sparcml.ALGORITHMS, "partial_fit"]],
     "QSGD", "weights balanced", "warm_start", *ERRORS)

X_all, y_all = make_url_like(1200, seed=3, features=5000)
lo, hi = shard_range(X_all.shape[0], rank, P)
X, y = X_all[lo:hi], y_all[lo:hi]


def digest(est_or_state) -> str:
    s = est_or_state
    h = hashlib.sha256(np.ascontiguousarray(s.v).tobytes())
    h.update(np.array([s.scale, s.intercept], np.float64).tobytes())
    return h.hexdigest()


class SameEverywhere:
    """Checks after every step that every rank holds the same weights."""

    def __init__(self):
        self.steps = 0

    def on_step(self, est, engine, state):
        every = comm.allgather(digest(state))
        assert len(set(every)) == 1, f"weights differ across ranks at step {self.steps}"
        self.steps += 1
        return False


def make(loss, algorithm="ssar_recursive_double", **kw):
    return SparseLinearClassifier(loss, alpha=1e-4, max_iter=2, tol=None,
                                  batch_size=GLOBAL_BATCH // P,
                                  algorithm=algorithm, comm=comm, seed=5, **kw)


# -- identical on every rank, equal to one process, every algorithm ----------------------------
for loss in ("log", "hinge"):
    watch = SameEverywhere()
    base = make(loss).fit(X, y, monitor=watch)
    assert watch.steps == 2 * -(-1200 // GLOBAL_BATCH), watch.steps
    done(f"{loss} same everywhere")
    ref = None
    if rank == 0:
        one = SparseLinearClassifier(loss, alpha=1e-4, max_iter=2, tol=None,
                                     batch_size=GLOBAL_BATCH,
                                     comm=MPI.COMM_SELF, seed=5).fit(X_all, y_all)
        ref = (one.coef_, one.intercept_, one.predict(X_all))
    ref = comm.bcast(ref)
    if P == 1:
        assert np.array_equal(base.coef_, ref[0]) and np.array_equal(base.intercept_, ref[1]), \
            "P=1 under mpiexec differs from one process"
    else:
        # each rank's partial sum is rounded to float32 before the allreduce adds them: after
        # 50 steps the weights differ by a few 1e-6 of their largest magnitude
        np.testing.assert_allclose(base.coef_, ref[0], rtol=1e-4, atol=1e-5 * np.abs(
            ref[0]).max(), err_msg=f"{loss}: P={P} differs from one process")
        np.testing.assert_allclose(base.intercept_, ref[1], rtol=1e-4, atol=1e-9)
    agree = np.mean(base.predict(X_all) == ref[2])
    assert agree > 0.99, agree
    done(f"{loss} vs one process")
    for algorithm in sparcml.ALGORITHMS:
        other = make(loss, algorithm).fit(X, y)
        assert len(set(comm.allgather(digest(other._state)))) == 1, algorithm
        np.testing.assert_allclose(other.coef_, base.coef_, rtol=1e-4,
                                   atol=1e-5 * np.abs(base.coef_).max(), err_msg=algorithm)
        hist = other.history_[-1]
        assert hist["steps"] == -(-1200 // GLOBAL_BATCH) and hist["bytes_sent"] >= 0
        assert 0 < hist["gradient_density"] <= 1
        if P > 1:
            assert hist["bytes_sent"] > 0
        done(f"{loss} {algorithm}")
    # two partial_fit calls are the same as fit with max_iter=2, bit for bit
    inc = make(loss)
    inc.partial_fit(X, y, classes=[-1.0, 1.0])
    inc.partial_fit(X, y)
    assert np.array_equal(inc.coef_, base.coef_) and np.array_equal(inc.intercept_,
                                                                   base.intercept_)
    done(f"{loss} partial_fit")

# quantized gradient (QSGD on the dense rounds and sparse values): still identical everywhere
watch = SameEverywhere()
q = make("log", "dsar_split_allgather", quantizer=sparcml.QSGD(bits=4, seed=1),
         quantize_sparse=True).fit(X, y, monitor=watch)
assert watch.steps > 0 and np.isfinite(q.coef_).all()
done("QSGD")

# sample_weight x class_weight="balanced" (the class counts of every rank's rows): the same
# weights on every rank, and those of one process on all the rows up to float order (a
# constant rate: "optimal"'s large first steps amplify the float32 rounding of the sums)
sw_all = np.random.default_rng(9).choice([0.0, 0.5, 2.0], X_all.shape[0])
watch = SameEverywhere()
rate = {"learning_rate": "constant", "eta0": 0.05, "class_weight": "balanced"}
weighted = make("log", **rate).fit(X, y, sample_weight=sw_all[lo:hi], monitor=watch)
ref = None
if rank == 0:
    ref = SparseLinearClassifier("log", alpha=1e-4, max_iter=2, tol=None, batch_size=GLOBAL_BATCH,
                                 comm=MPI.COMM_SELF, seed=5, **rate).fit(
        X_all, y_all, sample_weight=sw_all).coef_
ref = comm.bcast(ref)
np.testing.assert_allclose(weighted.coef_, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
unweighted = make("log", learning_rate="constant", eta0=0.05).fit(X, y)
assert watch.steps > 0 and not np.allclose(weighted.coef_, unweighted.coef_, rtol=1e-2)
done("weights balanced")
# warm_start: the second fit starts from the first's weights, on every rank alike
warm = make("hinge", warm_start=True).fit(X, y)
first = warm.coef_.copy()
warm.fit(X, y, monitor=SameEverywhere())
assert not np.allclose(warm.coef_, first)
assert len(set(comm.allgather(digest(warm._state)))) == 1
done("warm_start")

# -- bad input: the same error on every rank, and the communicator still works -----------------
def expect(exc_type, needle, fn):
    every = outcome_everywhere(comm, exc_type, fn)
    for r, (cls, msg) in enumerate(every):
        assert cls == exc_type.__name__, f"{needle}: rank {r} raised {cls}: {msg}"
        assert needle in msg, f"rank {r}: {msg!r} lacks {needle!r}"
    assert len({m for _, m in every}) == 1, f"ranks report different messages: {every}"
    assert comm.allreduce(1) == P
    done(needle)


bad_y = y.copy()
if rank == P - 1:
    bad_y[0] = 2.0
expect(NotBinaryError, "exactly two values", lambda: make("log").fit(X, bad_y))
if P > 1:
    expect(InputDataError, "differ in feature count",
           lambda: make("log").fit(X[:, :4000] if rank == P - 1 else X, y))
bad_X = X.copy()
if rank == P - 1:
    bad_X.data[0] = np.nan
expect(InputDataError, "NaN", lambda: make("log").fit(bad_X, y))
expect(InputDataError, "inconsistent numbers of samples",
       lambda: make("log").fit(X, y[:-1] if rank == 0 else y))
expect(ValueError, "algorithm 'dense' cannot add quantized values",
       lambda: make("log", "dense", quantizer=sparcml.QSGD()).fit(X, y))

from sparcapps.linear.cli import _resume_state  # noqa: E402
from sparcapps.linear.data import load_split  # noqa: E402
from sparcapps.linear.io import save_checkpoint  # noqa: E402

tmp = Path(comm.bcast(tempfile.mkdtemp(prefix="sparc-linear-") if rank == 0 else None))
foreign = tmp / "foreign.h5"
if rank == 0:
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
comm.Barrier()
expect(InputDataError, "not a sparcml-csr file",
       lambda: load_split(foreign, comm, test_fraction=0.2, split_seed=0))
expect(InputDataError, "no such file",
       lambda: load_split(tmp / "missing.h5", comm, test_fraction=0.2, split_seed=0))
if rank == 0:
    from sparcapps.data import CsrWriter

    with CsrWriter(tmp / "multi.h5", n_features=10) as w:
        w.append(np.array([1, 1, 1]), np.array([0, 1, 2]), np.ones(3, np.float32),
                 np.array([0.0, 1.0, 2.0]))
        w.commit(task="multiclass", index_base=0)
comm.Barrier()
expect(NotBinaryError, "needs a binary task",
       lambda: load_split(tmp / "multi.h5", comm, test_fraction=0.0, split_seed=0))
# an infinity in one row (as `sparc-data convert` stores "1e39"): it lands in one rank's
# training or test rows, and every rank raises, as fit() does for such an X
if rank == 0:
    values = np.ones(40, np.float32)
    values[27] = np.inf
    with CsrWriter(tmp / "inf.h5", n_features=10) as w:
        w.append(np.full(20, 2), np.tile([1, 4], 20), values, np.tile([-1.0, 1.0], 10))
        w.commit(task="binary", index_base=0)
comm.Barrier()
expect(InputDataError, "need finite values",
       lambda: load_split(tmp / "inf.h5", comm, test_fraction=0.25, split_seed=0))

ckpt_est = make("log").fit(X, y)
if rank == 0:
    save_checkpoint(tmp / "ck.h5", ckpt_est, ckpt_est._state, partials=[{}] * P,
                    global_batch=GLOBAL_BATCH, train_rows=1200, P=P)
comm.Barrier()
args = Namespace(resume=str(tmp / "ck.h5"))
expect(CheckpointMismatchError, "n_features: checkpoint 5000, data 4000",
       lambda: _resume_state(args, make("log"), comm, 4000, GLOBAL_BATCH, 1200))
expect(CheckpointMismatchError, "loss: checkpoint 'log', now 'hinge'",
       lambda: _resume_state(args, make("hinge"), comm, 5000, GLOBAL_BATCH, 1200))
state = _resume_state(args, make("log"), comm, 5000, GLOBAL_BATCH, 1200)
assert np.array_equal(state.v, ckpt_est._state.v)
done("resume state")
expect(CheckpointError, "not a sparcml-linear-checkpoint file",
       lambda: _resume_state(Namespace(resume=str(foreign)), make("log"), comm, 5000,
                             GLOBAL_BATCH, 1200))

report("LINEAR-CASES")
sys.exit(0)
