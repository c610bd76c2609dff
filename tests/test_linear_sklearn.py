"""SparseLinearClassifier against scikit-learn's own estimator checks (one process), and its
``sample_weight``, ``class_weight`` and ``warm_start`` against SGDClassifier's.

The multi-rank side of the same options (global class counts for "balanced", identical weights
on every rank) is in ``tests/mpi_cases/linear_cases.py``.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier
from sklearn.multiclass import OneVsRestClassifier
from sklearn.utils.estimator_checks import parametrize_with_checks

from sparcapps.data import make_url_like
from sparcapps.linear import NotBinaryError, SparseLinearClassifier


# the two checks that SGDClassifier fails too (test_sgdclassifier_fails_the_same_checks): a
# minibatch SGD whose sample counter drives the learning rate takes other steps when rows are
# repeated instead of weighted (equal in expectation, not in value)
_SGD_ALSO_FAILS = ("check_sample_weight_equivalence_on_dense_data",
                   "check_sample_weight_equivalence_on_sparse_data")


def _expected_failed_checks(estimator):
    reason = "sample_weight is not equivalent to removing/repeating samples (as SGDClassifier)"
    return dict.fromkeys(_SGD_ALSO_FAILS, reason)


# The defaults, as scikit-learn's checks see them: SGDClassifier's stopping rule (max_iter=1000,
# tol=1e-3 on the objective, n_iter_no_change) lets check_class_weight_classifiers' 50-row fit
# converge; with the old fixed 5 epochs it was 5 steps and failed
@parametrize_with_checks([SparseLinearClassifier(), SparseLinearClassifier("hinge")],
                         expected_failed_checks=_expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_sgdclassifier_fails_the_same_checks():
    """What is expected to fail here fails for SGDClassifier at its defaults too."""
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(SGDClassifier(), on_fail=None)
    failed = {r["check_name"] for r in results if r["status"] == "failed"}
    assert set(_SGD_ALSO_FAILS) <= failed, failed


def test_class_weight_check_needs_the_stopping_rule():
    """check_class_weight_classifiers at the defaults passes by the stopping rule: the same
    fit limited to 5 epochs (the old default) does not."""
    from sklearn.utils.estimator_checks import check_class_weight_classifiers

    check_class_weight_classifiers("SparseLinearClassifier", SparseLinearClassifier())
    with pytest.raises(AssertionError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            check_class_weight_classifiers("SparseLinearClassifier",
                                           SparseLinearClassifier(epochs=5))


def test_deprecated_epochs_is_max_iter_without_tol(data):
    """``epochs=E`` (deprecated) runs exactly E epochs as it did, with a FutureWarning."""
    X, y, _ = data
    with pytest.warns(FutureWarning, match="epochs is deprecated: write max_iter=3, tol=None"):
        old = SparseLinearClassifier(batch_size=64, epochs=3).fit(X, y)
    new = SparseLinearClassifier(batch_size=64, max_iter=3, tol=None).fit(X, y)
    assert old.n_iter_ == 3 and np.array_equal(old.coef_, new.coef_)
    with pytest.warns(FutureWarning, match="max_iter=50, tol=1000000000.0"):
        stopped = SparseLinearClassifier(batch_size=64, epochs=50, tol=1e9,
                                         n_iter_no_change=2).fit(X, y)
    assert stopped.n_iter_ == 3


def test_multiclass_is_refused_by_name_and_works_one_vs_rest():
    X, y = make_url_like(600, seed=2, features=500)
    y3 = np.arange(600) % 3
    with pytest.raises(NotBinaryError, match="Only binary classification is supported"):
        SparseLinearClassifier().fit(X, y3)
    ovr = OneVsRestClassifier(SparseLinearClassifier(max_iter=2, tol=None)).fit(X, y3)
    assert ovr.predict(X).shape == (600,) and set(ovr.classes_) == {0, 1, 2}


@pytest.fixture(scope="module")
def data():
    X, y = make_url_like(400, seed=11, features=2000)
    rng = np.random.default_rng(3)
    return X, y, rng.choice([0.0, 0.5, 1.0, 3.0], X.shape[0])


def _sgd(**kw):
    return SGDClassifier(loss="log_loss", alpha=1e-4, max_iter=2, tol=None, shuffle=False,
                         learning_rate="invscaling", eta0=0.05, **kw)


def _ours(**kw):
    return SparseLinearClassifier("log", alpha=1e-4, batch_size=1, max_iter=2, tol=None,
                                  shuffle=False,
                                  learning_rate="invscaling", eta0=0.05, **kw)


def _close(ours, ref):
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-4, atol=1e-6 * scale)


@pytest.mark.parametrize("class_weight", [None, {-1.0: 3.0}, "balanced"])
def test_weights_are_sgdclassifiers(data, class_weight):
    """batch_size=1, no shuffling: sample_weight x class_weight scale each row's update as in
    SGDClassifier (float32 gradient aside)."""
    X, y, sw = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = _sgd(class_weight=class_weight).fit(X.astype(np.float64), y, sample_weight=sw)
    ours = _ours(class_weight=class_weight).fit(X, y, sample_weight=sw)
    _close(ours, ref)
    plain = _ours(class_weight=class_weight).fit(X, y)
    assert not np.allclose(plain.coef_, ours.coef_), "sample_weight changed nothing"


def test_unit_weights_are_bitwise_no_weights(data):
    X, y, _ = data
    a = SparseLinearClassifier(batch_size=32, max_iter=2, tol=None).fit(X, y)
    b = SparseLinearClassifier(batch_size=32, max_iter=2, tol=None, class_weight={1.0: 1.0}).fit(
        X, y, sample_weight=np.ones(X.shape[0]))
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)


def test_warm_start_is_sgdclassifiers(data):
    X, y, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = _sgd(warm_start=True).fit(X.astype(np.float64), y)
        ref.fit(X.astype(np.float64), y)
    ours = _ours(warm_start=True).fit(X, y)
    first = ours.coef_.copy()
    ours.fit(X, y)
    _close(ours, ref)
    cold = _ours().fit(X, y)
    assert np.array_equal(cold.coef_, first) and not np.allclose(ours.coef_, first)
    with pytest.raises(ValueError, match="warm_start: the previous fit had 2000 features"):
        ours.fit(X[:, :100], y)


def test_weight_errors(data):
    X, y, sw = data
    with pytest.raises(ValueError, match="class_weight must be None, 'balanced' or a dict"):
        SparseLinearClassifier(class_weight="even").fit(X, y)
    with pytest.raises(ValueError, match=r"class_weight names labels \[7\]"):
        SparseLinearClassifier(class_weight={7: 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="Negative values in data passed to `sample_weight`"):
        SparseLinearClassifier().fit(X, y, sample_weight=-sw)
    with pytest.raises(ValueError, match="'balanced' is not supported by partial_fit"):
        SparseLinearClassifier(class_weight="balanced").partial_fit(X, y)


def test_readme_says_the_defaults_pass():
    """README's check_estimator claim names the defaults and the expected failures."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "passes `check_estimator` at its defaults" in text
    assert "sample-weight equivalence checks" in text and "expected failures" in text
    assert len(_expected_failed_checks(None)) == 2  # the two README names
