"""Sparse logistic regression and linear SVM, data-parallel over ``sparcml`` (DESIGN section 4).

- :class:`SparseLinearClassifier`: the scikit-learn estimator (``fit``, ``partial_fit``,
  ``predict``, ``decision_function``, ``score``); collective under MPI.
- :func:`save_model` / :func:`load_model`: the fitted model as HDF5;
  :func:`save_checkpoint` / :func:`load_checkpoint`: training state for ``--resume``.
- Command lines ``sparc-linear``, ``sparc-logreg``, ``sparc-svm`` (:mod:`.cli`); the benchmark
  ``python -m sparcapps.linear.bench``; the accuracy comparison with scikit-learn
  ``python -m sparcapps.linear.compare``.
"""

from sparcapps._lazy import lazy_exports

# names imported at their first use (PEP 562): ``sparc-linear --help`` reads only the parser's
# modules, not scikit-learn (the estimator) or h5py (the model files)
_WHERE = {
    "SparseLinearClassifier": "estimator", "LOSSES": "estimator",
    "save_model": "io", "load_model": "io", "save_checkpoint": "io", "load_checkpoint": "io",
    "SCHEDULES": "schedule", "Schedule": "schedule", "TrainState": "state",
    **{name: "errors" for name in (
        "LinearModelError", "InputDataError", "NotBinaryError", "CheckpointError",
        "CheckpointMismatchError", "ModelFileError")},
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())


__all__ = [
    "SparseLinearClassifier",
    "LOSSES",
    "save_model",
    "load_model",
    "save_checkpoint",
    "load_checkpoint",
    "SCHEDULES",
    "Schedule",
    "TrainState",
    "LinearModelError",
    "InputDataError",
    "NotBinaryError",
    "CheckpointError",
    "CheckpointMismatchError",
    "ModelFileError",
]
