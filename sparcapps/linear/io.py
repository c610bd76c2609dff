"""Model and checkpoint files (HDF5), written atomically: a temporary file beside the target,
then ``os.replace`` (:mod:`sparcapps.atomicfile`), so the target holds either the old complete
file or the new one; the temporary files of a writer killed mid-write are removed by the next
write of the same file.

Model file (``format = "sparcml-linear-model"``, version 1): datasets ``coef`` (float64,
``n_features``, gzip) and ``classes``; attributes ``intercept``, ``n_features``, ``params``
(JSON of the estimator's parameters, without ``comm`` and ``quantizer``), ``history`` (JSON).

Checkpoint file (``format = "sparcml-linear-checkpoint"``, version 1): the model's content plus
the training state of :class:`~.state.TrainState` (``v`` instead of ``coef``, ``scale``, ``t``,
``epoch``, ``step``, ...), ``partials`` (JSON list, one per rank, of the epoch in progress),
``quantizer_state`` (JSON), ``global_batch``, ``train_rows`` and ``P``.

Only one rank writes (the weights are identical on every rank); every rank may read.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np

from sparcml import Options
from sparcapps.atomicfile import atomic_write

from .errors import CheckpointError, ModelFileError
from .estimator import SparseLinearClassifier
from .state import TrainState

__all__ = ["MODEL_FORMAT", "CHECKPOINT_FORMAT", "save_model", "load_model", "save_checkpoint",
           "load_checkpoint", "model_params"]

MODEL_FORMAT = "sparcml-linear-model"
CHECKPOINT_FORMAT = "sparcml-linear-checkpoint"
VERSION = 1
_NOT_SAVED = ("comm", "quantizer")


def model_params(est) -> dict:
    """The estimator's parameters that a file records (no comm, no quantizer)."""
    return {k: v for k, v in est.get_params().items() if k not in _NOT_SAVED}


def _scalar(x):
    """A class label or weight as JSON keeps it: NumPy scalars become Python ones."""
    return x.item() if isinstance(x, np.generic) else x


def params_to_json(params: dict) -> str:
    """JSON of :func:`model_params`. A ``class_weight`` dict is stored as ``[label, weight]``
    pairs: JSON object keys are strings, and ``{1: 2.0}`` would come back as ``{"1": 2.0}``,
    matching no class."""
    out = dict(params)
    cw = out.get("class_weight")
    if isinstance(cw, dict):
        out["class_weight"] = {"pairs": [[_scalar(k), float(v)] for k, v in cw.items()]}
    if out.get("options") is not None:  # sparcml.Options: its fields
        out["options"] = {"sparcml.Options": dataclasses.asdict(out["options"])}
    return json.dumps(out)


def params_from_json(text: str) -> dict:
    """The inverse of :func:`params_to_json`. A file written before ``max_iter`` holds
    ``epochs`` (and its ``tol``, None by default then): read as ``max_iter``."""
    params = json.loads(text)
    if "max_iter" not in params and "epochs" in params:
        params["max_iter"] = params.pop("epochs")
    cw = params.get("class_weight")
    if isinstance(cw, dict) and set(cw) == {"pairs"}:
        params["class_weight"] = {k: v for k, v in cw["pairs"]}
    opts = params.get("options")
    if isinstance(opts, dict) and set(opts) == {"sparcml.Options"}:
        params["options"] = Options(**opts["sparcml.Options"])
    return params


def _atomic_h5(path: Path, fill) -> Path:
    """Write an HDF5 file at ``path`` by ``fill(h5py.File)`` through
    :func:`sparcapps.atomicfile.atomic_write`: the old file or the new one, never half of one;
    temporary files of writers that were killed are removed first."""
    path = Path(path)
    with atomic_write(path) as tmp:
        with h5py.File(tmp, "w") as f:
            fill(f)
    return path


def _attr(f, name, default=None):
    value = f.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _check_format(f, path, expected, error):
    fmt = _attr(f, "format")
    if fmt != expected:
        raise error(f"{path}: not a {expected} file (format attribute is {fmt!r})")
    version = int(_attr(f, "format_version", -1))
    if version != VERSION:
        raise error(f"{path}: unsupported format_version {version}, this reader knows "
                    f"{VERSION}")


def _classes_dataset(f, classes):
    classes = np.asarray(classes)
    if classes.dtype.kind in "US":
        f.create_dataset("classes", data=classes.astype("S"))
        f.attrs["classes_kind"] = "str"
    else:
        f.create_dataset("classes", data=classes)
        f.attrs["classes_kind"] = "number"


def _read_classes(f):
    classes = f["classes"][()]
    if _attr(f, "classes_kind") == "str":
        classes = classes.astype(str)
    return classes


def save_model(est, path) -> Path:
    """Write a fitted :class:`SparseLinearClassifier` to ``path`` (atomically). Call on one
    rank."""
    def fill(f):
        f.attrs["format"] = MODEL_FORMAT
        f.attrs["format_version"] = VERSION
        f.attrs["n_features"] = np.int64(est.n_features_in_)
        f.attrs["intercept"] = float(est.intercept_[0])
        f.attrs["params"] = params_to_json(model_params(est))
        f.attrs["history"] = json.dumps(getattr(est, "history_", []))
        f.create_dataset("coef", data=est.coef_[0], compression="gzip", compression_opts=1,
                         shuffle=True)
        _classes_dataset(f, est.classes_)
    return _atomic_h5(path, fill)


def load_model(path, **overrides):
    """A fitted :class:`SparseLinearClassifier` from a model file (``overrides`` set
    parameters such as ``comm``). Raises :class:`ModelFileError` for a foreign file."""
    try:
        with h5py.File(path, "r") as f:
            _check_format(f, path, MODEL_FORMAT, ModelFileError)
            params = params_from_json(_attr(f, "params"))
            est = SparseLinearClassifier(**{**params, **overrides})
            est.coef_ = f["coef"][()][np.newaxis, :]
            est.intercept_ = np.array([float(_attr(f, "intercept"))])
            est.classes_ = _read_classes(f)
            est.n_features_in_ = int(_attr(f, "n_features"))
            est.history_ = json.loads(_attr(f, "history", "[]"))
            est.n_iter_ = len(est.history_)
    except ModelFileError:
        raise
    except (OSError, KeyError) as exc:
        raise ModelFileError(f"{path}: cannot read the model file: {exc}") from exc
    return est


def save_checkpoint(path, est, state: TrainState, *, partials, global_batch: int,
                    train_rows: int, P: int) -> Path:
    """Write the training state (atomically). Call on one rank; ``partials`` is every rank's
    ``state.partial`` in rank order (gather them first)."""
    def fill(f):
        f.attrs["format"] = CHECKPOINT_FORMAT
        f.attrs["format_version"] = VERSION
        f.attrs["n_features"] = np.int64(state.n_features)
        f.attrs["params"] = params_to_json(model_params(est))
        f.attrs["history"] = json.dumps(state.history)
        f.attrs["partials"] = json.dumps(list(partials))
        f.attrs["quantizer_state"] = json.dumps(state.quantizer_state)
        for name in ("scale", "intercept", "best_loss", "wall_seconds"):
            f.attrs[name] = float(getattr(state, name))
        for name in ("t", "epoch", "step", "no_improvement"):
            f.attrs[name] = np.int64(getattr(state, name))
        f.attrs["global_batch"] = np.int64(global_batch)
        f.attrs["train_rows"] = np.int64(train_rows)
        f.attrs["P"] = np.int64(P)
        f.create_dataset("v", data=np.ascontiguousarray(state.v), compression="gzip",
                         compression_opts=1, shuffle=True)
        _classes_dataset(f, est.classes_)
    return _atomic_h5(path, fill)


def load_checkpoint(path) -> dict:
    """Read a checkpoint: a dict with ``state`` (:class:`TrainState`, ``partial`` empty),
    ``partials``, ``params``, ``classes``, ``n_features``, ``global_batch``, ``train_rows``,
    ``P``. Raises :class:`CheckpointError` for a missing or foreign file."""
    if not Path(path).is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with h5py.File(path, "r") as f:
            _check_format(f, path, CHECKPOINT_FORMAT, CheckpointError)
            state = TrainState(
                v=f["v"][()], scale=float(_attr(f, "scale")),
                intercept=float(_attr(f, "intercept")), t=int(_attr(f, "t")),
                epoch=int(_attr(f, "epoch")), step=int(_attr(f, "step")),
                history=json.loads(_attr(f, "history")),
                best_loss=float(_attr(f, "best_loss")),
                no_improvement=int(_attr(f, "no_improvement")),
                wall_seconds=float(_attr(f, "wall_seconds")),
                quantizer_state=json.loads(_attr(f, "quantizer_state")))
            return {"state": state, "partials": json.loads(_attr(f, "partials")),
                    "params": params_from_json(_attr(f, "params")), "classes": _read_classes(f),
                    "n_features": int(_attr(f, "n_features")),
                    "global_batch": int(_attr(f, "global_batch")),
                    "train_rows": int(_attr(f, "train_rows")), "P": int(_attr(f, "P"))}
    except CheckpointError:
        raise
    except (OSError, KeyError) as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint: {exc}") from exc
