"""Sparse logistic regression and linear SVM, data-parallel over ``sparcml`` (DESIGN section 4).

- :class:`SparseLinearClassifier`: the scikit-learn estimator (``fit``, ``partial_fit``,
  ``predict``, ``decision_function``, ``score``); collective under MPI.
- :func:`save_model` / :func:`load_model`: the fitted model as HDF5;
  :func:`save_checkpoint` / :func:`load_checkpoint`: training state for ``--resume``.
- Command lines ``sparc-linear``, ``sparc-logreg``, ``sparc-svm`` (:mod:`.cli`); the benchmark
  ``python -m sparcapps.linear.bench``; the accuracy comparison with scikit-learn
  ``python -m sparcapps.linear.compare``.
"""

from .errors import (CheckpointError, CheckpointMismatchError, InputDataError, LinearModelError,
                     ModelFileError, NotBinaryError)
from .estimator import LOSSES, SparseLinearClassifier
from .io import load_checkpoint, load_model, save_checkpoint, save_model
from .schedule import SCHEDULES, Schedule
from .state import TrainState

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
