"""sparcapps.linear in one process: kernels against NumPy references, the schedules and a
batch of one against scikit-learn's SGDClassifier, P-independent sampling, the estimator's
scikit-learn contract, model and checkpoint files, and accuracy on small data."""

import warnings

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier

from sparcapps.data import make_url_like
from sparcapps.linear import (CheckpointError, ModelFileError, NotBinaryError, Schedule,
                              SparseLinearClassifier)
from sparcapps.linear import _kernels as K
from sparcapps.linear.io import load_checkpoint, load_model, save_checkpoint, save_model
from sparcapps.linear.sampling import BatchPlan


@pytest.fixture(scope="module")
def small():
    X, y = make_url_like(1500, seed=7, features=4000)
    return X[:1200], y[:1200], X[1200:], y[1200:]


# -- kernels -----------------------------------------------------------------------------------

def _ref_gradient(X, y, rows, v, scale, b, kind, sw=None):
    p = scale * (X[rows] @ v) + b
    z = y[rows] * p
    if kind == K.LOG:
        d = -y[rows] / (np.exp(z) + 1.0)
        loss = np.logaddexp(0, -z)
    else:
        d = np.where(z <= 1.0, -y[rows], 0.0)
        loss = np.maximum(0, 1 - z)
    if sw is not None:  # sample weights scale the gradient, not the reported loss
        d = d * sw[rows]
    g = np.asarray(X[rows].T @ d).ravel()
    touched = np.unique(X[rows][d != 0].indices)
    return g, touched, loss.sum(), d.sum(), np.count_nonzero((p > 0) == (y[rows] > 0))


@pytest.mark.parametrize("kind", [K.LOG, K.HINGE])
@pytest.mark.parametrize("n_features", [200, 100_000])  # bitmap scan and sort paths
def test_batch_gradient_matches_numpy(kind, n_features):
    rng = np.random.default_rng(kind)
    X = sp.random(300, n_features, density=min(0.05, 20 / n_features), format="csr",
                  random_state=1, dtype=np.float32)
    X.data[:] = rng.choice([-1.0, 1.0, 0.5], X.nnz)  # exact cancellations happen
    y = rng.choice([-1.0, 1.0], 300).astype(np.float32)
    v = rng.standard_normal(n_features) * 0.3
    W = np.zeros((n_features, 2))
    W[:, 0] = v
    bits = np.zeros((n_features + 63) // 64, np.uint64)
    touched = np.empty(n_features, np.int64)
    # sample weights: ones, and mixed ones with zeros (a zero-weight row touches nothing)
    weights = (np.ones(300), rng.choice([0.0, 0.5, 2.0], 300))
    for sw, rows in [(sw, rows) for sw in weights for rows in (
            np.arange(300), rng.permutation(300)[:37], np.array([], np.int64))]:
        n, loss, dsum, correct = K.batch_gradient(X.indptr, X.indices, X.data, y, rows, W, 0.7,
                                                  0.1, kind, bits, touched, sw)
        idx, val = np.empty(n, np.int32), np.empty(n, np.float64)
        K.gather_clear(W, bits, touched, n, idx, val)
        g, ref_touched, ref_loss, ref_dsum, ref_correct = _ref_gradient(X, y, rows, v, 0.7,
                                                                        0.1, kind, sw)
        np.testing.assert_array_equal(idx, ref_touched)
        np.testing.assert_allclose(val, g[ref_touched], rtol=1e-10, atol=1e-12)
        assert loss == pytest.approx(ref_loss) and dsum == pytest.approx(ref_dsum)
        assert correct == ref_correct
        assert not W[:, 1].any() and not bits.any(), "scratch not cleared"
        assert np.array_equal(W[:, 0], v)


@pytest.mark.parametrize("kind", [K.LOG, K.HINGE])
def test_direct_kernels_match_numpy(kind):
    """row_margins + add_rows: the rows' update applied straight into v, and the support
    count of the summed gradient (exact cancellations included, as batch_gradient finds it)."""
    rng = np.random.default_rng(5 + kind)
    n_features = 500
    X = sp.random(300, n_features, density=0.03, format="csr", random_state=3, dtype=np.float32)
    X.data[:] = rng.choice([-1.0, 1.0, 0.5], X.nnz)
    y = rng.choice([-1.0, 1.0], 300).astype(np.float32)
    v0 = rng.standard_normal(n_features) * 0.5
    stamp = np.zeros(n_features, np.uint8)
    active, dloss = np.empty(300, np.int64), np.empty(300)
    sw = np.where(np.arange(300) % 7 == 0, 0.0, 1.5)  # every 7th row weighs nothing
    for mark, rows in enumerate((rng.permutation(300)[:120], np.arange(300),
                                 np.array([], np.int64)), start=1):
        v = v0.copy()
        loss, dsum, correct, m = K.row_margins(X.indptr, X.indices, X.data, y, rows, v, 0.7, 0.1,
                                               kind, active, dloss, sw)
        g, touched, ref_loss, ref_dsum, ref_correct = _ref_gradient(
            X.astype(np.float64), y, rows, v0, 0.7, 0.1, kind, sw)
        assert loss == pytest.approx(ref_loss) and dsum == pytest.approx(ref_dsum)
        assert correct == ref_correct and np.array_equal(v, v0)
        z = y[rows] * (0.7 * (X[rows] @ v0) + 0.1)
        live = (rows % 7 != 0) & ((z <= 1.0) if kind == K.HINGE else True)
        assert m == np.count_nonzero(live)
        n = K.add_rows(X.indptr, X.indices, X.data, active[:m], dloss[:m], v, -0.3, stamp,
                       np.uint8(mark))
        assert n == touched.shape[0]
        np.testing.assert_allclose(v, v0 - 0.3 * g, rtol=1e-12, atol=1e-12)


def test_update_kernels_and_margins():
    rng = np.random.default_rng(0)
    W = np.zeros((50, 2))
    W[:, 0] = rng.standard_normal(50)
    v0 = W[:, 0].copy()
    K.add_scaled(W, np.array([1, 7, 49]), np.array([1.0, 2.0, 3.0], np.float32), -0.5)
    assert np.allclose(W[[1, 7, 49], 0], v0[[1, 7, 49]] - [0.5, 1.0, 1.5])
    K.add_dense(W, np.ones(51, np.float32), 2.0)  # one extra trailing (intercept) entry
    assert np.allclose(W[0, 0], v0[0] + 2.0)
    X = sp.random(20, 50, density=0.2, format="csr", random_state=2, dtype=np.float32)
    out = np.empty(20)
    K.margins(X.indptr, X.indices, X.data, W[:, 0], 2.0, 0.5, out)
    np.testing.assert_allclose(out, 2.0 * (X @ W[:, 0]) + 0.5)


# -- schedule and a batch of one against SGDClassifier ------------------------------------------

def test_schedules_per_sample_and_batch():
    s = Schedule("optimal", alpha=1e-4, eta0=0.0, power_t=0.5)
    typw = np.sqrt(1.0 / np.sqrt(1e-4))
    assert s.etas(1, 1)[0] == pytest.approx(typw)  # eta at the first sample is typw
    step, decay = s.batch(10, 4)
    etas = s.etas(10, 4)
    assert step == pytest.approx(etas.mean()) and decay == pytest.approx(np.prod(1 - etas * 1e-4))
    inv = Schedule("invscaling", alpha=1e-4, eta0=0.1, power_t=0.5)
    assert inv.etas(4, 1)[0] == pytest.approx(0.05)
    assert Schedule("constant", alpha=1, eta0=2.0, power_t=0).batch(1, 3) == (2.0, 0.0)
    with pytest.raises(ValueError, match="learning_rate must be one of"):
        Schedule("adaptive", alpha=1, eta0=1, power_t=1)


@pytest.mark.parametrize("loss", ["log", "hinge"])
@pytest.mark.parametrize("learning_rate", ["optimal", "invscaling"])
def test_batch_of_one_is_sgdclassifier(small, loss, learning_rate):
    """batch_size=1, no shuffling: scikit-learn's per-sample update (float32 gradient aside)."""
    X, y = small[0][:300], small[1][:300]
    ours = SparseLinearClassifier(loss, alpha=1e-4, batch_size=1, max_iter=2, tol=None,
                                  shuffle=False,
                                  learning_rate=learning_rate, eta0=0.05).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = SGDClassifier(loss={"log": "log_loss"}.get(loss, loss), alpha=1e-4, max_iter=2,
                            tol=None, shuffle=False, learning_rate=learning_rate,
                            eta0=0.05).fit(X.astype(np.float64), y)  # float64: no float32 fit
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-4, atol=1e-6 * scale)
    assert ours.t_ == ref.t_


@pytest.mark.parametrize("loss", ["log", "hinge"])
def test_direct_path_matches_sparse_gradient_path(small, loss):
    """One rank: the direct path (rows applied straight into the weights) and the general path
    (sparse gradient, allreduce, update) give the same weights up to float order and the
    float32 rounding of the gradient; 300 steps wrap the direct path's column marks around.
    (A constant, moderate rate: with "optimal" at this alpha and batch the early steps are so
    large that any rounding difference grows ~10x every 20 steps.)"""
    from mpi4py import MPI

    from sparcapps.linear.state import TrainState
    from sparcapps.linear.trainer import DataParallelSGD

    X, y = small[0], small[1]
    y_pm = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    runs = {}
    for direct in (True, False):
        engine = DataParallelSGD(
            X, y_pm, MPI.COMM_SELF, loss=loss, alpha=1e-3, fit_intercept=True,
            schedule=Schedule("constant", alpha=1e-3, eta0=0.002, power_t=0.5), global_batch=64,
            seed=3, shuffle=True, algorithm="ssar_recursive_double", direct=direct)
        assert engine.direct is direct
        state = TrainState.zeros(X.shape[1])
        records = []
        for epoch in range(16):  # 19 steps each
            engine.run_epoch(state)
            records.append(engine.gather_totals(state.partial))
            state.epoch, state.step, state.partial = epoch + 1, 0, {}
        runs[direct] = (state, records)
    (fast, fast_rec), (ref, ref_rec) = runs[True], runs[False]
    assert fast.t == ref.t == 16 * 1200 + 1
    np.testing.assert_allclose(fast.coef(), ref.coef(), rtol=1e-5,
                               atol=1e-6 * np.abs(ref.coef()).max())
    assert fast.intercept == pytest.approx(ref.intercept, rel=1e-4, abs=1e-9)
    for a, b in zip(fast_rec, ref_rec):
        assert a["comm_seconds"] == 0 and a["bytes_sent"] == 0 and a["steps"] == 19
        assert 0 < a["gradient_density"] <= 1
        assert a["gradient_density"] == pytest.approx(b["gradient_density"], rel=1e-3)
        assert a["running_loss"] == pytest.approx(b["running_loss"], rel=1e-3)
    with pytest.raises(ValueError, match="one rank"):
        DataParallelSGD(X, y_pm, _FakeComm(2), loss=loss, alpha=1e-3, fit_intercept=True,
                        schedule=Schedule("constant", alpha=1e-3, eta0=0.1, power_t=0.5),
                        global_batch=64, seed=0, shuffle=True, algorithm="dense", direct=True)


def test_direct_path_step_by_step_is_bitwise_the_whole_epoch(small):
    """With an on_step monitor the direct path runs one step per call, without one a whole
    epoch per call: the same weights and records, bit for bit."""

    class Watch:
        steps = 0

        def on_step(self, est, engine, state):
            Watch.steps += 1
            return False

    X, y = small[0], small[1]
    kw = dict(alpha=1e-4, batch_size=100, max_iter=3, tol=None, seed=1)
    whole = SparseLinearClassifier("hinge", **kw).fit(X, y)
    stepped = SparseLinearClassifier("hinge", **kw).fit(X, y, monitor=Watch())
    assert Watch.steps == 3 * 12
    assert np.array_equal(whole.coef_, stepped.coef_)
    assert np.array_equal(whole.intercept_, stepped.intercept_) and whole.t_ == stepped.t_
    for a, b in zip(whole.history_, stepped.history_):
        for key in ("loss", "train_accuracy", "gradient_density", "bytes_sent", "comm_seconds"):
            assert a[key] == b[key], key


class _FakeComm:
    """Just enough of a communicator for an engine's constructor."""

    def __init__(self, size):
        self.size = size

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.size

    def allgather(self, x):
        return [x] * self.size


# -- sampling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shuffle", [True, False])
def test_global_batches_do_not_depend_on_P(shuffle):
    n, gb = 103, 12
    ref_rows, ref_bounds = BatchPlan([n], 0, gb, seed=4, shuffle=shuffle).epoch(3)
    ref = [set(ref_rows[ref_bounds[k]:ref_bounds[k + 1]]) for k in range(len(ref_bounds) - 1)]
    assert [len(b) for b in ref] == [12] * 8 + [7]
    for P in (2, 3, 4, 7):
        counts = [(r + 1) * n // P - r * n // P for r in range(P)]
        steps = [set() for _ in ref]
        for r in range(P):
            plan = BatchPlan(counts, r, gb, seed=4, shuffle=shuffle)
            rows, bounds = plan.epoch(3)
            for k in range(plan.steps_per_epoch):
                steps[k] |= set(rows[bounds[k]:bounds[k + 1]] + plan.offset)
        assert steps == ref, P
    other = BatchPlan([n], 0, gb, seed=4).epoch(4)[0]
    assert not np.array_equal(other, ref_rows) or not shuffle


# -- the estimator's scikit-learn contract ------------------------------------------------------

def test_sklearn_contract(small):
    Xtr, ytr, Xte, yte = small
    clf = SparseLinearClassifier("hinge", alpha=1e-3, batch_size=32, max_iter=3, tol=None)
    assert clone(clf).get_params() == clf.get_params()
    assert clf.set_params(max_iter=2) is clf and clf.max_iter == 2
    labels = np.where(ytr > 0, "spam", "ham")
    assert clf.fit(Xtr, labels) is clf
    assert list(clf.classes_) == ["ham", "spam"] and clf.coef_.shape == (1, 4000)
    assert clf.intercept_.shape == (1,) and clf.n_features_in_ == 4000 and clf.n_iter_ == 2
    pred = clf.predict(Xte)
    assert pred.dtype.kind == "U" and set(pred) <= {"ham", "spam"}
    assert clf.score(Xte, np.where(yte > 0, "spam", "ham")) > 0.7
    np.testing.assert_allclose(clf.decision_function(Xte.toarray()), clf.decision_function(Xte))
    assert not hasattr(clf, "predict_proba")
    logreg = SparseLinearClassifier("log", batch_size=32, max_iter=1, tol=None).fit(
        Xtr, (ytr > 0) * 1)
    proba = logreg.predict_proba(Xte)
    assert proba.shape == (Xte.shape[0], 2) and np.allclose(proba.sum(axis=1), 1)
    import pickle

    again = pickle.loads(pickle.dumps(clf))
    assert np.array_equal(again.predict(Xte), pred)
    assert len(clf.history_) == 2
    h = clf.history_[-1]
    for key in ("loss", "train_accuracy", "compute_seconds", "comm_seconds", "bytes_sent",
                "gradient_density", "wall_seconds", "epoch"):
        assert key in h, key
    with pytest.raises(ValueError, match="X has 10 features"):
        clf.predict(np.zeros((2, 10)))


def test_bad_parameters_and_labels(small):
    X, y = small[0], small[1]
    with pytest.raises(NotBinaryError, match="exactly two values"):
        SparseLinearClassifier().fit(X, np.arange(X.shape[0]) % 3)
    with pytest.raises(NotBinaryError, match="exactly two values"):
        SparseLinearClassifier().fit(X, np.ones(X.shape[0]))
    for params, needle in [({"loss": "squared"}, "loss must be one of"),
                           ({"alpha": 0}, "alpha must be"),
                           ({"batch_size": 0}, "batch_size must be"),
                           ({"algorithm": "magic"}, "unknown algorithm 'magic'")]:
        with pytest.raises(ValueError, match=needle):
            SparseLinearClassifier(**params).fit(X, y)


def test_tol_and_convergence_warning(small):
    X, y = small[0], small[1]
    with pytest.warns(ConvergenceWarning, match=r"Maximum number of epochs \(max_iter=2\)"):
        SparseLinearClassifier(max_iter=2).fit(X, y)  # tol=1e-3, as SGDClassifier
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        SparseLinearClassifier(max_iter=2, tol=None).fit(X, y)  # tol=None: no warning
        stopped = SparseLinearClassifier(max_iter=50, tol=1e9, n_iter_no_change=2).fit(X, y)
    assert stopped.n_iter_ == 3  # epoch 1 sets the best loss, 2 and 3 do not improve
    # the rule watches the objective (as SGDClassifier's in scikit-learn 1.9: loss + L2 term),
    # the "loss" of history_: stopping happens where it stops improving by tol
    run = SparseLinearClassifier(max_iter=200, n_iter_no_change=3).fit(X, y)
    losses = [h["loss"] for h in run.history_]
    assert run.n_iter_ < 200
    assert min(losses[-3:]) > min(losses[:-3]) - 1e-3


# -- files -------------------------------------------------------------------------------------

@pytest.mark.parametrize("class_weight", [{0: 3.0, 1: 0.5}, {np.int64(0): 2.0, np.int64(1): 1.0}])
def test_class_weight_survives_a_model_file(small, tmp_path, class_weight):
    """Integer class labels as class_weight keys come back as integers (JSON object keys are
    strings: {0: 3.0} came back as {"0": 3.0}, weighing no class); NumPy keys are saved."""
    Xtr, ytr, Xte, _ = small
    labels = (ytr > 0).astype(np.int64)
    clf = SparseLinearClassifier("log", batch_size=64, max_iter=1, tol=None,
                                 class_weight=class_weight).fit(Xtr, labels)
    save_model(clf, tmp_path / "m.h5")
    back = load_model(tmp_path / "m.h5")
    assert back.class_weight == {int(k): v for k, v in class_weight.items()}
    assert all(type(k) is int for k in back.class_weight)
    refit = back.set_params(warm_start=False).fit(Xtr, labels)
    again = SparseLinearClassifier("log", batch_size=64, max_iter=1, tol=None,
                                   class_weight=class_weight).fit(Xtr, labels)
    assert np.array_equal(refit.coef_, again.coef_)
    save_checkpoint(tmp_path / "c.h5", clf, clf._state, partials=[], global_batch=64,
                    train_rows=Xtr.shape[0], P=1)
    assert load_checkpoint(tmp_path / "c.h5")["params"]["class_weight"] == back.class_weight


def test_model_and_checkpoint_roundtrip(small, tmp_path):
    Xtr, ytr, Xte, _ = small
    clf = SparseLinearClassifier("log", batch_size=64, max_iter=1, tol=None).fit(Xtr, ytr)
    save_model(clf, tmp_path / "m.h5")
    back = load_model(tmp_path / "m.h5")
    assert np.array_equal(back.coef_, clf.coef_) and back.get_params() == clf.get_params()
    assert np.array_equal(back.predict(Xte), clf.predict(Xte))
    assert not list(tmp_path.glob(".*tmp*")), "temporary file left behind"
    save_checkpoint(tmp_path / "c.h5", clf, clf._state, partials=[{"rows": 3}], global_batch=64,
                    train_rows=1200, P=1)
    ck = load_checkpoint(tmp_path / "c.h5")
    assert np.array_equal(ck["state"].v, clf._state.v) and ck["state"].t == clf.t_
    assert ck["partials"] == [{"rows": 3}] and ck["n_features"] == 4000
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.attrs["format"] = "something-else"
    with pytest.raises(ModelFileError, match="not a sparcml-linear-model file"):
        load_model(tmp_path / "other.h5")
    with pytest.raises(CheckpointError, match="not a sparcml-linear-checkpoint file"):
        load_checkpoint(tmp_path / "m.h5")
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nothing.h5")


# -- accuracy against SGDClassifier (fast versions; full size in BENCHMARKS.md) -----------------

def test_breast_cancer_accuracy_within_one_point(tmp_path):
    from mpi4py import MPI

    from sparcapps.linear.compare import breast_cancer_h5, compare

    path = breast_cancer_h5(tmp_path)
    for loss in ("log", "hinge"):
        r = compare(path, MPI.COMM_SELF, loss=loss, alpha=1e-4, epochs=5, batch_size=8,
                    seeds=range(10))  # 121 test rows: one seed's accuracy moves in 0.8 steps
        assert abs(r["ours"] - r["sklearn"]) <= 0.01, (loss, r)
        assert r["ours"] > 0.9


def test_url_like_accuracy_close_to_sgdclassifier():
    from sparcapps.linear.compare import sklearn_accuracy

    X, y = make_url_like(6000, seed=2, features=20000)
    Xtr, ytr, Xte, yte = X[:5000], y[:5000], X[5000:], y[5000:]
    for loss in ("log", "hinge"):
        ours = SparseLinearClassifier(loss, alpha=1e-3, batch_size=64, max_iter=5,
                                      tol=None).fit(Xtr, ytr)
        theirs = np.mean([sklearn_accuracy(Xtr, ytr, Xte, yte, loss=loss, alpha=1e-3, epochs=5,
                                           seed=s) for s in range(3)])
        assert ours.score(Xte, yte) >= theirs - 0.02, (loss, ours.score(Xte, yte), theirs)


def test_imports_without_torch_and_public_api():
    import subprocess
    import sys

    import sparcapps.linear as linear

    for name in linear.__all__:
        assert hasattr(linear, name), name
    code = ("import sys, sparcapps.linear, sparcapps.linear.cli, sparcapps.linear.bench; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_bench_script_runs(tmp_path, capsys):
    from sparcapps.linear.bench import main

    common = ["--synth", "url", "--rows", "600", "--features", "3000", "--synth-cache",
              str(tmp_path), "--epochs", "1", "--batch-size", "64"]
    assert main(common + ["--throughput", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "rows/s per core" in out and "ratio (ours / sklearn" in out
    assert main(common + ["--algorithms", "ssar_recursive_double",
                          "--output", str(tmp_path / "b.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "best sparse: ssar_recursive_double" in out and "comm share" in out
    assert (tmp_path / "b.jsonl").read_text().count("\n") == 2  # dense + the sparse one


def test_model_file_params_before_max_iter():
    """A model file written before ``max_iter`` holds ``epochs`` (tol None): read as max_iter,
    so a loaded estimator refits as it was trained (no deprecation)."""
    from sparcapps.linear.io import params_from_json

    assert params_from_json('{"epochs": 5, "tol": null, "alpha": 0.001}') == \
        {"max_iter": 5, "tol": None, "alpha": 0.001}
    assert params_from_json('{"max_iter": 7, "tol": 0.001, "epochs": null}') == \
        {"max_iter": 7, "tol": 0.001, "epochs": None}


def test_an_unwritable_synth_cache_is_one_line_naming_the_remedy(tmp_path, capsys):
    from sparcapps.linear.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory below a file cannot be made, even by root
    assert main(["--synth", "url", "--rows", "200", "--epochs", "1", "--no-progress",
                 "--synth-cache", str(blocker / "synth")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "cannot write the synthetic data set" in err[0]
    assert "--synth-cache DIR" in err[0] and "SPARCML_DATA_HOME" in err[0]
