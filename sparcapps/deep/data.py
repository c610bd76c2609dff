"""Data for the deep-learning apps: digits (offline), CIFAR-10 binary and Penn Treebank readers.

All loaders return NumPy arrays (no torch needed here) and never unpickle anything:

- :func:`load_digits_split` -> ``(X_train, y_train, X_test, y_test)``: scikit-learn's bundled
  8x8 digits, float32 in [0, 1] of shape (n, 8, 8), int64 labels; a fixed split (seed 0, 20%
  test) so that every run, whatever its ``--seed``, is scored on the same test images.
- :func:`load_cifar10` ``(root)`` -> same layout with images float32 (n, 3, 32, 32), normalized
  per channel. ``root`` holds the catalog's ``cifar-10-binary.tar.gz`` (read in place) or the
  extracted ``cifar-10-batches-bin/`` directory. Records are 1 label byte + 3072 pixel bytes
  (1024 red, 1024 green, 1024 blue, row-major).
- :func:`load_ptb` ``(root)`` -> :class:`Corpus` of int64 token ids (train, valid, test) and the
  vocabulary; each line's words then ``<eos>``, the vocabulary from the training file.
- :func:`shard_permutation`, :func:`lm_batches`: the per-rank slice of an epoch.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["DeepDataError", "load_digits_split", "load_cifar10", "load_ptb", "Corpus",
           "shard_permutation", "lm_batches", "CIFAR_RECORD_BYTES", "CIFAR_MEAN", "CIFAR_STD"]

CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)
_CIFAR_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]
_CIFAR_TEST = ["test_batch.bin"]
_CIFAR_DIR = "cifar-10-batches-bin"
_CIFAR_ARCHIVE = "cifar-10-binary.tar.gz"


class DeepDataError(ValueError):
    """A data set that is missing or not in the expected format (the message says which file)."""


def load_digits_split(test_fraction: float = 0.2):
    """scikit-learn's digits as 8x8 float32 images in [0, 1], split with a fixed seed."""
    from sklearn.datasets import load_digits  # scikit-learn (the [apps] extra): not at --help

    d = load_digits()
    X = (d.data.astype(np.float32) / 16.0).reshape(-1, 8, 8)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return X[train], y[train], X[test], y[test]


def _parse_cifar(raw: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    if len(raw) == 0 or len(raw) % CIFAR_RECORD_BYTES:
        raise DeepDataError(f"{name}: {len(raw)} bytes is not a whole number of CIFAR-10 "
                            f"records of {CIFAR_RECORD_BYTES} bytes (1 label + 3072 pixels); "
                            f"is this the binary version?")
    rec = np.frombuffer(raw, np.uint8).reshape(-1, CIFAR_RECORD_BYTES)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise DeepDataError(f"{name}: record {bad} has label {labels[bad]}, expected 0..9")
    images = rec[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    images -= CIFAR_MEAN[None, :, None, None]
    images /= CIFAR_STD[None, :, None, None]
    return images, labels


def _read_cifar_files(root: Path, names: list[str]) -> dict[str, bytes]:
    directory = root / _CIFAR_DIR if (root / _CIFAR_DIR).is_dir() else root
    if all((directory / n).is_file() for n in names):
        return {n: (directory / n).read_bytes() for n in names}
    archive = root / _CIFAR_ARCHIVE
    if not archive.is_file():
        raise DeepDataError(
            f"CIFAR-10 not found under {root}: expected {_CIFAR_ARCHIVE} or {_CIFAR_DIR}/ "
            f"with {', '.join(names)}; run `sparc-data fetch cifar10` (or pass --data-home)")
    out = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            base = member.name.rsplit("/", 1)[-1]
            if member.isfile() and base in names:
                out[base] = tar.extractfile(member).read()
    missing = [n for n in names if n not in out]
    if missing:
        raise DeepDataError(f"{archive}: no member(s) {', '.join(missing)}")
    return out


def load_cifar10(root, *, max_train: int | None = None, max_test: int | None = None):
    """CIFAR-10 binary from ``root`` (see module docstring): ``(Xtr, ytr, Xte, yte)``."""
    root = Path(root)
    files = _read_cifar_files(root, _CIFAR_TRAIN + _CIFAR_TEST)
    parts = [_parse_cifar(files[n], n) for n in _CIFAR_TRAIN]
    Xtr = np.concatenate([p[0] for p in parts])
    ytr = np.concatenate([p[1] for p in parts])
    Xte, yte = _parse_cifar(files[_CIFAR_TEST[0]], _CIFAR_TEST[0])
    if max_train is not None:
        Xtr, ytr = Xtr[:max_train], ytr[:max_train]
    if max_test is not None:
        Xte, yte = Xte[:max_test], yte[:max_test]
    return Xtr, ytr, Xte, yte


@dataclass
class Corpus:
    """Token ids (int64) of the three PTB splits and the vocabulary (index -> word)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: list[str]


def _words(path: Path) -> list[str]:
    if not path.is_file():
        raise DeepDataError(f"Penn Treebank file {path} not found; run `sparc-data fetch ptb` "
                            f"(or pass --data-home)")
    words = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words.extend(line.split())
            words.append("<eos>")
    return words


def load_ptb(root) -> Corpus:
    """``ptb.{train,valid,test}.txt`` from ``root``; words not in the training vocabulary
    become ``<unk>`` (added to the vocabulary when the training file lacks it)."""
    root = Path(root)
    splits = {s: _words(root / f"ptb.{s}.txt") for s in ("train", "valid", "test")}
    counts: dict[str, int] = {}
    for w in splits["train"]:
        counts[w] = counts.get(w, 0) + 1
    counts.setdefault("<unk>", 0)
    vocab = sorted(counts, key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    unk = index["<unk>"]
    ids = {s: np.fromiter((index.get(w, unk) for w in ws), np.int64, len(ws))
           for s, ws in splits.items()}
    return Corpus(ids["train"], ids["valid"], ids["test"], vocab)


def shard_permutation(n: int, rank: int, size: int, seed: int, epoch: int,
                      batch_size: int) -> list[np.ndarray]:
    """This rank's minibatches (index arrays of ``batch_size``) for one epoch.

    One permutation of ``n`` per ``(seed, epoch)``, the same on every rank; rank r takes every
    size-th index from r; every rank gets the same number of full batches (the rest is dropped).
    """
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    steps = (n // size) // batch_size
    if steps == 0:
        raise DeepDataError(f"{n} training examples cannot give each of {size} ranks a batch of "
                            f"{batch_size}; lower --batch-size")
    mine = perm[rank::size]
    return [mine[i * batch_size:(i + 1) * batch_size] for i in range(steps)]


def lm_batches(tokens: np.ndarray, rank: int, size: int, batch_size: int, bptt: int):
    """Rank ``rank``'s contiguous share of ``tokens`` as ``batch_size`` parallel streams.

    Returns ``(inputs, targets)`` lists of int64 arrays of shape ``(bptt, batch_size)``
    (time-major); every rank gets the same number of windows.
    """
    per_rank = len(tokens) // size
    share = tokens[rank * per_rank:(rank + 1) * per_rank]
    cols = per_rank // batch_size
    windows = (cols - 1) // bptt
    if windows < 1:
        raise DeepDataError(f"{len(tokens)} tokens are too few for {size} ranks x batch "
                            f"{batch_size} x bptt {bptt}")
    data = share[:cols * batch_size].reshape(batch_size, cols).T  # (cols, batch)
    xs, ys = [], []
    for w in range(windows):
        s = w * bptt
        xs.append(np.ascontiguousarray(data[s:s + bptt]))
        ys.append(np.ascontiguousarray(data[s + 1:s + 1 + bptt]))
    return xs, ys
