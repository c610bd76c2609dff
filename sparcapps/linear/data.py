"""Where the linear models' rows come from: a sparcml-csr HDF5 file, or a synthetic twin
generated once into a cache file and then read like any other file.

Every function here that takes ``comm`` is collective; failures raise the same
:class:`~.errors.InputDataError` on every rank (:func:`.collective.collective_errors`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from .collective import agree_or_raise, collective_errors
from .errors import InputDataError, NotBinaryError

__all__ = ["SYNTH_PRESETS", "synth_path", "ensure_synth", "load_split"]

#: ``--synth`` names -> :mod:`sparcapps.data.synth` presets
SYNTH_PRESETS = {"url": "url_like", "webspam": "webspam_like"}


def synth_path(name: str, rows: int, seed: int, features: int | None, cache_dir) -> Path:
    """The cache file of a synthetic twin (deterministic in its arguments)."""
    feat = "" if features is None else f"-f{features}"
    return Path(cache_dir) / f"{SYNTH_PRESETS[name]}-{rows}r-s{seed}{feat}.h5"


def ensure_synth(name: str, rows: int, seed: int, features: int | None, cache_dir,
                 comm, *, progress: bool | None = None) -> Path:
    """Collective: rank 0 writes the synthetic twin unless its cache file exists (atomically,
    by :class:`sparcapps.data.CsrWriter`); then every rank gets the path. ``progress``: the
    writer's bar (None: only on a terminal; False: never)."""
    from sparcapps.data import PRESETS, make_like  # scipy, h5py (the [apps] extra): not at --help

    path = synth_path(name, rows, seed, features, cache_dir)
    error = None
    if comm.Get_rank() == 0 and not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            spec = PRESETS[SYNTH_PRESETS[name]]
            if features is not None:
                spec = replace(spec, n_features=int(features))
            print(f"writing the synthetic twin {name} ({rows:,} rows, seed {seed}) to {path}",
                  flush=True)
            make_like(spec, rows, seed, out=path, progress=progress)
        except (OSError, ValueError) as exc:
            error = InputDataError(f"cannot write the synthetic data set {path}: {exc}; "
                                   f"give --synth-cache DIR (or --data-home DIR, or "
                                   f"SPARCML_DATA_HOME) a writable directory")
    agree_or_raise(comm, error)
    return path


def _check_binary_file(path) -> None:
    """Raise unless ``path`` is a sparcml-csr file (the reader's own message) with a binary
    task."""
    from sparcapps.data import read_attrs  # h5py (the [apps] extra): not at --help

    attrs = read_attrs(path)
    task = attrs.get("task")
    if task not in (None, "binary"):
        raise NotBinaryError(f"{path}: task is {task!r}, sparc-linear needs a binary task "
                             f"(labels -1/+1); convert with `sparc-data convert --task binary`")


def _check_finite(path, X, where: str) -> None:
    """InputDataError naming the first row of ``X`` (CSR) that holds a NaN or an infinity."""
    if X.data.size == 0:
        return
    finite = np.isfinite(X.data)
    if finite.all():
        return
    pos = int(np.argmin(finite))
    row = int(np.searchsorted(X.indptr, pos, side="right")) - 1
    raise InputDataError(
        f"{path}: row {row} of {where} holds the value {X.data[pos]} (feature "
        f"{int(X.indices[pos])}); the linear apps need finite values, as scikit-learn's fit "
        f"does: fix or drop that row in the source (NaN and inf are stored as written by "
        f"`sparc-data convert`)")


def load_split(path, comm, *, test_fraction: float, split_seed: int):
    """Collective: this rank's ``(X_train, y_train, X_test, y_test)`` of ``path``.

    ``test_fraction == 0`` gives empty test parts. Labels are returned as stored; an
    unreadable or foreign file, a non-binary task, labels other than -1/+1 or a NaN or
    infinite feature value raise the same error on every rank.
    """
    from sparcapps.data import load_shard  # scipy, h5py (the [apps] extra): not at --help

    rank, size = comm.Get_rank(), comm.Get_size()
    with collective_errors(comm, wrap=(ValueError, OSError, KeyError)):
        if not Path(path).is_file():
            raise InputDataError(f"{path}: no such file")
        try:
            _check_binary_file(path)
        except OSError as exc:
            raise InputDataError(f"{path}: cannot be read as HDF5 ({exc}); give a sparcml-csr "
                                 f"file made by `sparc-data convert` or `sparc-data synth`")
        if test_fraction > 0:
            Xtr, ytr = load_shard(path, rank, size, split="train", test_fraction=test_fraction,
                                  seed=split_seed)
            Xte, yte = load_shard(path, rank, size, split="test", test_fraction=test_fraction,
                                  seed=split_seed)
        else:
            Xtr, ytr = load_shard(path, rank, size)
            Xte, yte = Xtr[:0], ytr[:0]
        bad = np.setdiff1d(np.unique(np.concatenate([ytr, yte])), [-1.0, 1.0])
        if bad.size:
            raise NotBinaryError(f"{path}: labels must be -1/+1, found {bad[:5].tolist()} in "
                                 f"rank {rank}'s rows")
        for split, X in (("training", Xtr), ("test", Xte)):
            _check_finite(path, X, f"rank {rank}'s {split} rows")
    return Xtr, ytr, Xte, yte
