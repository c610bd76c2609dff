"""``SparseLinearClassifier``: logistic regression or a linear SVM trained by data-parallel
minibatch SGD over ``sparcml`` -- a scikit-learn estimator.

Under MPI every rank of ``comm`` calls ``fit`` with *its own shard* of the training rows (rank r's
rows come before rank r+1's in the global row order) and gets the same model. In one process
(``comm`` of size 1) it is an ordinary scikit-learn estimator. ``predict``,
``decision_function`` and ``score`` are local: each rank scores the rows it is given.

Example (``mpiexec -n 4 python script.py``)::

    from mpi4py import MPI
    from sparcapps.data import load_shard
    from sparcapps.linear import SparseLinearClassifier

    comm = MPI.COMM_WORLD
    X, y = load_shard("url.h5", comm.rank, comm.size, split="train")
    clf = SparseLinearClassifier(loss="log", batch_size=128, max_iter=5, tol=None).fit(X, y)
    clf.coef_    # (1, n_features), identical on every rank

Relation to ``SGDClassifier(loss="log_loss"|"hinge", penalty="l2")``: the same losses, L2 term
and per-sample learning-rate schedules (a minibatch uses the mean rate of its samples on their
summed gradient and the product of their decays), the same intercept damping for sparse input
(updates x 0.01; none for dense input, as there), the same ``sample_weight``, ``class_weight``
and ``warm_start`` and gradient clipping; with ``batch_size=1`` and ``shuffle=False`` in one
process the weights match SGDClassifier's up to float rounding (tested). Differences: the
gradient is summed over a minibatch at the weights of its start, the epoch permutation comes
from ``numpy.random.default_rng([seed, epoch])``, and the sum crosses the network in float32.
With ``learning_rate="optimal"`` the first steps are large (eta = 1/sqrt(sqrt(alpha)) per
sample, times the rows of a global batch): a small ``alpha`` and a large global batch give large
early weights and a noisy last iterate (see BENCHMARKS.md, Linear models).
"""

from __future__ import annotations

import numbers
import os
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from mpi4py import MPI

import sparcml
from sparcml import sim

from .collective import collective_errors
from .errors import CheckpointMismatchError, InputDataError, NotBinaryError
from .schedule import SCHEDULES, Schedule
from .state import TrainState
from .trainer import INTERCEPT_DECAY, DataParallelSGD

__all__ = ["SparseLinearClassifier", "LOSSES"]

LOSSES = ("log", "hinge")
_LOSS_ALIASES = {"log_loss": "log"}
_DEFAULT_TOL = 1e-3


def _as_csr(X) -> sp.csr_matrix:
    """``X`` as a CSR matrix of float32 with finite values (raises ValueError otherwise)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if X.dtype != np.float32:
            X = X.astype(np.float32)
    else:
        arr = np.asarray(X, dtype=np.float32)
        if arr.ndim != 2:
            raise InputDataError(f"X must be 2-d, got shape {arr.shape}")
        X = sp.csr_matrix(arr)
    if X.data.size and not np.isfinite(X.data).all():
        raise InputDataError("X holds NaN or infinite values")
    return X


class SparseLinearClassifier(ClassifierMixin, BaseEstimator):
    """Binary linear classifier (``loss="log"``: logistic regression; ``"hinge"``: linear SVM)
    with L2 regularization, trained by data-parallel minibatch SGD.

    Parameters
    ----------
    loss : {"log", "hinge"}
    alpha : float > 0
        L2 strength: the objective is ``mean(loss) + alpha / 2 * ||w||^2`` (as SGDClassifier).
    learning_rate : {"optimal", "constant", "invscaling"}
        SGDClassifier's per-sample schedules; a minibatch uses the mean rate of its samples and
        the product of their decays (see :mod:`sparcapps.linear.schedule`).
    eta0, power_t : float
        Initial rate for "constant" and "invscaling"; exponent of "invscaling".
    batch_size : int
        Rows per rank per step: the global batch is ``batch_size * P``. For the same global
        sequence of batches at another P, keep ``batch_size * P`` fixed.
    max_iter : int
        The most passes over the data (epochs), as SGDClassifier's.
    tol : float or None
        As SGDClassifier's (default 1e-3): stop when the epoch's mean training loss has not
        fallen below the best so far minus ``tol`` for ``n_iter_no_change`` epochs in a row,
        and warn (``ConvergenceWarning``) when ``max_iter`` epochs run out first. None:
        exactly ``max_iter`` epochs, no warning (what ``sparc-linear --epochs E`` runs:
        ``max_iter=E, tol=None`` unless ``--tol`` is given).
    n_iter_no_change : int
        Epochs without improvement before stopping (with ``tol``).
    algorithm : str
        ``sparcml.allreduce`` algorithm for the gradient sum; ``"dense"`` is the baseline.
    quantizer : sparcml.QSGD or None
        Quantize the gradient's dense messages (and with ``quantize_sparse`` its sparse values).
    quantize_sparse : bool
    seed : int
        Seeds the permutation of every epoch (the same on all ranks).
    comm : mpi4py communicator or None
        None: ``MPI.COMM_WORLD`` (size 1 outside ``mpiexec``).
    fit_intercept, shuffle : bool
    class_weight : dict, "balanced" or None
        As SGDClassifier: a row's gradient is multiplied by its class's weight (a dict label
        -> weight, 1 for a label it does not name; "balanced": ``n_samples / (2 * rows of the
        class)``, counted over every rank's rows), times its ``sample_weight`` in ``fit``.
    warm_start : bool
        As SGDClassifier: ``fit`` starts from the weights of the previous ``fit`` (the sample
        counter ``t_`` and the epochs start again).
    epochs : int or None
        Deprecated (``FutureWarning`` in ``fit``): ``epochs=E`` is ``max_iter=E`` with the
        stopping rule it had, ``tol=None`` (exactly E epochs) unless ``tol`` is set to another
        value than the default; write ``max_iter=E, tol=None``.
    options : sparcml.Options or None
        The options of every allreduce (None: the process defaults, ``SPARCML_*``).

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features), float64
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,); ``classes_[1]`` is the positive class
    n_features_in_ : int
    n_iter_ : int, epochs run
    train_state_ : TrainState, the training state to checkpoint or resume (a property)
    t_ : int, samples seen plus one (SGDClassifier's ``t_``)
    history_ : list of dict, one per epoch: ``loss`` (the objective: running mean loss +
        ``alpha/2 ||w||^2``), ``data_loss`` and ``train_accuracy`` (running: each row scored
        just before its step, as SGDClassifier's "Avg. loss"), ``compute_seconds`` and
        ``comm_seconds`` (slowest rank), ``bytes_sent`` (largest rank), ``gradient_density``
        (mean nnz / dim of the summed gradient), ``wall_seconds`` since training began
    """

    def __init__(self, loss="log", *, alpha=1e-4, learning_rate="optimal", eta0=0.01,
                 power_t=0.5, batch_size=256, max_iter=1000, tol=1e-3, n_iter_no_change=5,
                 algorithm=sparcml.DEFAULT_ALGORITHM, quantizer=None, quantize_sparse=False,
                 seed=0, comm=None, fit_intercept=True, shuffle=True, class_weight=None,
                 warm_start=False, epochs=None, options=None):
        self.loss = loss
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.eta0 = eta0
        self.power_t = power_t
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.algorithm = algorithm
        self.quantizer = quantizer
        self.quantize_sparse = quantize_sparse
        self.seed = seed
        self.comm = comm
        self.fit_intercept = fit_intercept
        self.shuffle = shuffle
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.epochs = epochs
        self.options = options

    # -- parameters ---------------------------------------------------------------------------

    def _stopping(self) -> tuple[int, float | None]:
        """``(max_iter, tol)`` in force: the deprecated ``epochs`` maps to ``max_iter`` with
        its old default ``tol=None`` (unless another ``tol`` than the default is set)."""
        if self.epochs is None:
            return self.max_iter, self.tol
        tol = None if self.tol == _DEFAULT_TOL else self.tol
        warnings.warn(f"epochs is deprecated: write max_iter={self.epochs!r}, tol={tol!r} "
                      f"(epochs=E ran exactly E epochs unless tol was set)", FutureWarning,
                      stacklevel=3)
        return self.epochs, tol

    def _loss_name(self) -> str:
        return _LOSS_ALIASES.get(self.loss, self.loss)

    def check_params(self) -> None:
        """Raise ValueError naming the first bad parameter; return None when all are valid.

        Local and cheap (no data, no communication): ``fit`` and ``partial_fit`` call it
        first, and a caller that builds the estimator before reading its data (the
        ``sparc-linear`` CLI) may call it earlier to fail fast. Parameters are the same on
        every rank, so every rank raises alike; under MPI, wrap the call in
        :func:`sparcapps.linear.collective.collective_errors` to be sure."""
        if self._loss_name() not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if not (isinstance(self.alpha, numbers.Real) and self.alpha > 0):
            raise ValueError(f"alpha must be a float > 0, got {self.alpha!r}")
        if self.learning_rate not in SCHEDULES:
            raise ValueError(f"learning_rate must be one of {SCHEDULES}, "
                             f"got {self.learning_rate!r}")
        if self.learning_rate != "optimal" and not self.eta0 > 0:
            raise ValueError(f"eta0 must be > 0 with learning_rate={self.learning_rate!r}, "
                             f"got {self.eta0!r}")
        for name in ("batch_size", "max_iter", "n_iter_no_change", "epochs"):
            value = getattr(self, name)
            if name == "epochs" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.tol is not None and not isinstance(self.tol, numbers.Real):
            raise ValueError(f"tol must be a float or None, got {self.tol!r}")
        cw = self.class_weight
        if not (cw is None or isinstance(cw, dict) or (isinstance(cw, str)
                                                        and cw == "balanced")):
            raise ValueError(f"class_weight must be None, 'balanced' or a dict label -> "
                             f"weight, got {cw!r}")
        if self.quantizer is not None and not isinstance(self.quantizer, sparcml.QSGD):
            raise ValueError(f"quantizer must be a sparcml.QSGD or None, "
                             f"got {self.quantizer!r}")
        # the registry's own check (UnknownAlgorithmError / IncompatibleOptionsError are
        # ValueErrors, as scikit-learn's parameter validation raises)
        try:
            sparcml.check_algorithm_options(self.algorithm, quantizer=self.quantizer)
        except sparcml.SparcmlError as exc:  # scikit-learn raises plain ValueError for params
            raise ValueError(str(exc)) from exc

    def _get_comm(self):
        if self.comm is not None:
            return self.comm

        return MPI.COMM_WORLD

    # -- data ---------------------------------------------------------------------------------

    def _prepare(self, X, y, comm, *, classes=None, reset=True, sample_weight=None):
        """Collective validation of this rank's ``(X, y)``: the same error on every rank, or
        ``(X csr float32, y float32 -1/+1, row weights float64)`` with ``classes_`` and
        ``n_features_in_`` set. The row weights are ``sample_weight`` times the class weight
        of the row's label (ones without either)."""
        size = comm.Get_size()
        with collective_errors(comm):
            # scikit-learn's own checks and messages (complex, empty, 2-d y, continuous y,
            # y=None); a rank's shard may be empty under MPI, the whole data set may not
            sparse = sp.issparse(X)
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float32,
                                 ensure_min_samples=1 if size == 1 else 0, reset=reset)
            check_classification_targets(y)
            X = _as_csr(X)
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                                 ensure_non_negative=True)
            local_classes, local_counts = np.unique(y, return_counts=True)
        info = (int(X.shape[1]), int(X.shape[0]), local_classes, local_counts, sparse)
        every = comm.allgather(info) if size > 1 else [info]
        features = sorted({e[0] for e in every})
        if len(features) > 1:
            raise InputDataError(f"the ranks' shards differ in feature count: "
                                 f"{[e[0] for e in every]} (rank order); give every rank the "
                                 f"same n_features (load_shard does)")
        if sum(e[1] for e in every) == 0:
            raise InputDataError("no training rows on any rank")
        # scikit-learn damps the intercept's updates for sparse input only; the ranks agree
        self._intercept_decay = (INTERCEPT_DECAY if any(e[4] for e in every if e[1])
                                 else 1.0)
        found = np.unique(np.concatenate([e[2] for e in every]))
        if classes is not None:
            classes = np.unique(np.asarray(classes))
            extra = np.setdiff1d(found, classes)
            if extra.size:
                raise NotBinaryError(f"labels {extra.tolist()} are not in classes "
                                     f"{classes.tolist()}")
        else:
            classes = found
        if classes.shape[0] != 2:
            n = classes.shape[0]
            raise NotBinaryError(
                f"Only binary classification is supported: labels must take exactly two "
                f"values across all ranks; found {n} class{'' if n == 1 else 'es'}: "
                f"{classes[:10].tolist()}{' ...' if n > 10 else ''}; for more classes wrap "
                f"it in sklearn.multiclass.OneVsRestClassifier (one process)")
        n_features = features[0]
        _check_width_fits(n_features)
        if reset:
            self.classes_ = classes
            self.n_features_in_ = n_features
        else:
            if not np.array_equal(classes, self.classes_):
                raise NotBinaryError(f"labels {classes.tolist()} differ from the classes of "
                                     f"the earlier fit {self.classes_.tolist()}")
            if n_features != self.n_features_in_:
                raise InputDataError(f"X has {n_features} features, but this "
                                     f"SparseLinearClassifier was fitted with "
                                     f"{self.n_features_in_}")
        positive = y == self.classes_[1]
        y_pm = np.where(positive, 1.0, -1.0).astype(np.float32)
        counts = np.zeros(2, dtype=np.int64)  # global rows per class, for "balanced"
        for e in every:
            for label, c in zip(e[2], e[3]):
                counts[int(label == self.classes_[1])] += int(c)
        cw = self._class_weights(counts)
        if cw[0] != 1.0 or cw[1] != 1.0:
            sample_weight = sample_weight * np.where(positive, cw[1], cw[0])
        return X, y_pm, sample_weight

    def _class_weights(self, counts) -> tuple[float, float]:
        """The weights of ``classes_[0]`` and ``classes_[1]`` from ``class_weight`` and the
        global row counts of the two classes (the same on every rank)."""
        cw = self.class_weight
        if cw is None:
            return 1.0, 1.0
        if isinstance(cw, str) and cw == "balanced":
            total = counts.sum()
            # scikit-learn's n_samples / (n_classes * bincount(y)), over every rank's rows
            return tuple(float(total / (2 * c)) if c else 1.0 for c in counts)
        if isinstance(cw, dict):
            unknown = [k for k in cw if not np.isin(k, self.classes_)]
            if unknown:
                raise ValueError(f"class_weight names labels {unknown} that are not in "
                                 f"classes_ {self.classes_.tolist()}")
            lookup = {k.item() if hasattr(k, "item") else k: float(w) for k, w in cw.items()}
            return tuple(lookup.get(c.item() if hasattr(c, "item") else c, 1.0)
                         for c in self.classes_)
        raise ValueError(f"class_weight must be None, 'balanced' or a dict label -> weight, "
                         f"got {cw!r}")

    def encode_labels(self, y) -> np.ndarray:
        """``y`` as float32 +1 (``classes_[1]``) / -1 (``classes_[0]``); ValueError on a label
        outside ``classes_``."""
        check_is_fitted(self, "classes_")
        y = np.asarray(y).ravel()
        known = np.isin(y, self.classes_)
        if not known.all():
            raise NotBinaryError(f"label {y[~known][0]!r} is not one of the classes "
                                 f"{self.classes_.tolist()}")
        return np.where(y == self.classes_[1], 1.0, -1.0).astype(np.float32)

    # -- training -----------------------------------------------------------------------------

    def _engine(self, X, y_pm, weights, comm) -> DataParallelSGD:
        schedule = Schedule(self.learning_rate, alpha=self.alpha, eta0=self.eta0,
                            power_t=self.power_t)
        return DataParallelSGD(
            X, y_pm, comm, sample_weight=weights, loss=self._loss_name(), schedule=schedule,
            alpha=self.alpha,
            fit_intercept=self.fit_intercept, global_batch=self.batch_size * comm.Get_size(),
            seed=self.seed, shuffle=self.shuffle, algorithm=self.algorithm,
            quantizer=self.quantizer, quantize_sparse=self.quantize_sparse,
            intercept_decay=self._intercept_decay, options=self.options)

    def fit(self, X, y, sample_weight=None, *, monitor=None, resume=None):
        """Train from zero weights (from the previous fit's with ``warm_start``; from
        ``resume``, a :class:`TrainState` of a checkpoint) for at most ``max_iter`` epochs
        (fewer when ``tol`` stops it). Collective:
        every rank of ``comm`` calls with its shard (and its rows' ``sample_weight``, array of
        shape (n_rows,) >= 0, or None for ones).

        ``monitor`` (optional, duck-typed): ``on_step(est, engine, state) -> bool`` after every
        step and ``on_epoch(est, engine, state, record) -> bool`` after every epoch (it may add
        keys to ``record``, e.g. a test accuracy); True stops training (all ranks must agree).
        Returns ``self``.
        """
        self.check_params()
        max_iter, tol = self._stopping()
        comm = self._get_comm()
        previous = None
        if self.warm_start and hasattr(self, "coef_"):
            previous = (self.coef_[0], float(self.intercept_[0]), self.classes_)
        X, y_pm, weights = self._prepare(X, y, comm, sample_weight=sample_weight)
        if resume is not None:
            if resume.n_features != self.n_features_in_:
                raise CheckpointMismatchError(
                    f"the checkpoint has {resume.n_features} features, the data "
                    f"{self.n_features_in_}; resume with the data set it was trained on")
            state = resume
        elif previous is not None:
            coef, intercept, classes = previous
            if coef.shape[0] != self.n_features_in_ or not np.array_equal(classes,
                                                                           self.classes_):
                raise ValueError(f"warm_start: the previous fit had {coef.shape[0]} features "
                                 f"and classes {classes.tolist()}, this data "
                                 f"{self.n_features_in_} and {self.classes_.tolist()}; "
                                 f"set warm_start=False to start from zero")
            state = TrainState(v=np.array(coef, dtype=np.float64), intercept=intercept)
        else:
            state = _zero_state(comm, self.n_features_in_)
        self._state = state
        self._train(X, y_pm, weights, comm, max_iter, tol, monitor)
        return self

    def partial_fit(self, X, y, classes=None, sample_weight=None, *, monitor=None):
        """One more epoch over ``(X, y)`` (collective). ``classes`` is needed on the first call
        unless every label occurs in the data of some rank. ``class_weight="balanced"`` is
        not supported here (as in SGDClassifier: the counts of one call are not the data's)."""
        self.check_params()
        if isinstance(self.class_weight, str):
            raise ValueError("class_weight='balanced' is not supported by partial_fit: pass "
                             "a dict computed over the whole data (e.g. with "
                             "sklearn.utils.class_weight.compute_class_weight)")
        comm = self._get_comm()
        first = not hasattr(self, "_state")
        X, y_pm, weights = self._prepare(X, y, comm, classes=classes, reset=first,
                                         sample_weight=sample_weight)
        if first:
            self._state = _zero_state(comm, self.n_features_in_)
        # one epoch, no stopping rule (as SGDClassifier.partial_fit)
        self._train(X, y_pm, weights, comm, self._state.epoch + 1, None, monitor)
        return self

    def _train(self, X, y_pm, weights, comm, until_epoch, tol, monitor) -> None:
        state = self._state
        engine = self._engine(X, y_pm, weights, comm)  # holds the data: not kept on the estimator
        if self.quantizer is not None and state.quantizer_state is not None:
            self.quantizer.load_state_dict(state.quantizer_state)
        # the run's clock: real seconds, or a simulated rank's modeled ones (sparcml.sim)
        start = sim.clock(comm)
        base_wall = state.wall_seconds
        on_step = None
        if monitor is not None and hasattr(monitor, "on_step"):
            def on_step(s):
                s.wall_seconds = base_wall + sim.clock(comm) - start
                if self.quantizer is not None:
                    s.quantizer_state = self.quantizer.state_dict()
                return bool(monitor.on_step(self, engine, s))
        converged = False
        stopped = False
        while state.epoch < until_epoch and not stopped:
            stopped = engine.run_epoch(state, on_step)
            if state.step < engine.plan.steps_per_epoch:
                break  # stopped inside the epoch
            totals = engine.gather_totals(state.partial)
            state.wall_seconds = base_wall + sim.clock(comm) - start
            data_loss = totals.pop("running_loss")
            record = {"epoch": state.epoch + 1, "wall_seconds": state.wall_seconds,
                      "loss": data_loss + 0.5 * self.alpha * state.squared_norm(),
                      "data_loss": data_loss, "train_accuracy": totals.pop("running_accuracy"),
                      "samples_seen": state.t - 1, **totals}
            if monitor is not None and hasattr(monitor, "on_epoch"):
                stopped = bool(monitor.on_epoch(self, engine, state, record)) or stopped
            state.history.append(record)
            state.epoch += 1
            state.step = 0
            state.partial = {}
            if self.quantizer is not None:
                state.quantizer_state = self.quantizer.state_dict()
            if tol is not None:
                if record["loss"] > state.best_loss - tol:
                    state.no_improvement += 1
                else:
                    state.no_improvement = 0
                state.best_loss = min(state.best_loss, record["loss"])
                if state.no_improvement >= self.n_iter_no_change:
                    converged = True
                    break
        self._publish()
        if tol is not None and not converged and not stopped and state.epoch >= until_epoch:
            warnings.warn(f"Maximum number of epochs (max_iter={until_epoch}) reached before "
                          f"convergence. Consider increasing max_iter to improve the fit.",
                          ConvergenceWarning)

    @property
    def train_state_(self) -> TrainState:
        """The :class:`~sparcapps.linear.TrainState` the last ``fit`` / ``partial_fit`` left
        (weights as ``scale * v``, intercept, counters, history; live, not a copy): what
        :func:`~sparcapps.linear.save_checkpoint` writes and ``fit(..., resume=)`` continues
        from. Raises ``NotFittedError`` before the first fit."""
        check_is_fitted(self, "_state")
        return self._state

    def _publish(self) -> None:
        state = self._state
        # simulated ranks (sparcml.sim) share one coef_ as they share the weights
        replicas = sim.Replicas(self._get_comm())
        self.coef_ = replicas.shared("linear.coef", lambda: state.coef()[np.newaxis, :],
                                     check=(state.scale, state.intercept)
                                     if replicas.sharing else None)
        self.intercept_ = np.array([state.intercept if self.fit_intercept else 0.0])
        self.n_iter_ = state.epoch
        self.t_ = state.t
        self.history_ = state.history

    # -- prediction (local) -------------------------------------------------------------------

    def decision_function(self, X) -> np.ndarray:
        """``X @ coef_[0] + intercept_[0]``: shape (n_samples,), float64; > 0 means
        ``classes_[1]``."""
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", reset=False,
                          dtype=[np.float64, np.float32])
        return np.asarray(X @ self.coef_[0]).ravel() + self.intercept_[0]

    def predict(self, X) -> np.ndarray:
        """The class of each row: ``classes_[1]`` where the decision is > 0."""
        positive = self.decision_function(X) > 0  # NotFittedError before fit
        return self.classes_[positive.astype(np.intp)]

    @available_if(lambda self: self._loss_name() == "log")
    def predict_proba(self, X) -> np.ndarray:
        """Probabilities of ``classes_`` (log loss only), shape (n_samples, 2)."""
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # binary only: a K-class one-vs-rest would run K collective trainings over the
        # network, and the applications (URL, webspam) are binary; in one process
        # sklearn.multiclass.OneVsRestClassifier wraps it (tested)
        tags.classifier_tags.multi_class = False
        return tags


def _zero_state(comm, n_features: int) -> TrainState:
    """A fresh state; simulated ranks (sparcml.sim) start from one shared zero vector instead
    of P of them (the engine then moves it into the one shared ``W``)."""
    replicas = sim.Replicas(comm)
    if not replicas.sharing:
        return TrainState.zeros(n_features)
    v0 = replicas.shared("linear.v0", lambda: np.zeros(int(n_features), dtype=np.float64))
    return TrainState(v=v0)


# dense float64 arrays of n_features values a fit holds at once: the weights, coef_, the
# gradient's dense scatter and the reduced sum (a bound, not an exact count)
_DENSE_ARRAYS = 4


def _check_width_fits(n_features: int) -> None:
    """An :class:`InputDataError` (raised alike on every rank: the width is agreed) when the
    dense weights of ``n_features`` cannot fit in this machine's memory, instead of a
    ``MemoryError`` traceback from deep inside the first allocation."""
    need = int(n_features) * 8 * _DENSE_ARRAYS
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return
    if need > have:
        raise InputDataError(
            f"X has {n_features} features: training keeps about {_DENSE_ARRAYS} dense float64 "
            f"vectors of that length ({need / 2**30:.3g} GiB), more than this machine's "
            f"{have / 2**30:.3g} GiB of memory; hash the features into a smaller space")
