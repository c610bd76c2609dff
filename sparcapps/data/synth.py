"""Synthetic twins of the sparse data sets: same feature count, nnz-per-row distribution and
power-law feature frequencies, labels from a sparse linear model with noise.

Generation is by blocks of :data:`BLOCK_ROWS` rows, each drawn from random streams keyed by
``(seed, block)``; so the data are deterministic for a seed, and the first ``n`` rows of a
larger data set equal the ``n``-row data set of the same seed (the row count is a pure scale
factor). Per row:

1. nnz ~ LogNormal with the spec's mean and sigma, clipped to ``[1, nnz_max]``;
2. the ``dense_features`` first features are always present, with real values (LogNormal);
3. the other nonzeros are distinct features drawn from a power law: feature ``n_dense + i``
   has frequency about ``(i + 1) ** -zipf_exponent`` (the most frequent have low indices);
4. values: 1.0 (``value_kind="binary"``, as in url) or Exp(1) scaled to a unit-norm row
   (``"normalized"``, as in webspam's normalized trigram counts); all values are rounded to
   ``decimals`` digits, so a LIBSVM text written by :func:`write_libsvm` holds them exactly;
5. label = sign(x.w + noise - t): ``w`` has N(0, 1) weights on the dense features and on a
   random ``informative_fraction`` of the others, the threshold ``t`` gives about
   ``positive_fraction`` positives, and ``label_noise`` of the labels are flipped.

Example::

    X, y = make_url_like(100_000, seed=1)                 # in memory: (csr float32, float32)
    make_url_like(100_000, seed=1, out="url-100k.h5")     # sparcml-csr HDF5 file
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.sparse as sp

from sparcapps.atomicfile import atomic_write

from . import _synthkern as K
from .csrfile import CsrWriter
from .errors import OutputExistsError

__all__ = ["SynthSpec", "URL_LIKE", "WEBSPAM_LIKE", "PRESETS", "BLOCK_ROWS", "make_like",
           "make_url_like", "make_webspam_like", "iter_blocks", "write_libsvm",
           "write_libsvm_blocks"]

BLOCK_ROWS = 8192
_CALIBRATION_ROWS = 2048


@dataclass(frozen=True)
class SynthSpec:
    """Statistics a synthetic data set reproduces (see the module docstring)."""

    name: str
    n_features: int
    nnz_mean: float
    nnz_sigma: float
    nnz_max: int
    zipf_exponent: float
    dense_features: int = 0
    value_kind: str = "binary"
    positive_fraction: float = 0.5
    informative_fraction: float = 0.05
    label_noise: float = 0.02
    margin_noise: float = 0.25
    decimals: int = 6

    def __post_init__(self):
        if self.value_kind not in ("binary", "normalized"):
            raise ValueError(f"value_kind must be 'binary' or 'normalized', "
                             f"got {self.value_kind!r}")
        if self.n_features < 2 or self.dense_features >= self.n_features:
            raise ValueError(f"need n_features >= 2 and dense_features < n_features, got "
                             f"{self.n_features} and {self.dense_features}")
        if not (self.nnz_mean >= 1 and self.nnz_max >= 1):
            raise ValueError("nnz_mean and nnz_max must be >= 1")
        for name in ("positive_fraction", "informative_fraction", "label_noise"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")


#: url (Ma et al. 2009): 2,396,130 rows, 3,231,961 features, 277,058,644 nonzeros
#: (115.6 per row); about a third malicious. Host and lexical counts are the dense part.
URL_LIKE = SynthSpec(name="url_like", n_features=3_231_961, nnz_mean=115.6, nnz_sigma=0.15,
                     nnz_max=500, zipf_exponent=1.1, dense_features=16,
                     value_kind="binary", positive_fraction=0.33, decimals=4)

#: webspam, normalized trigrams: 350,000 rows, 16,609,143 features, about 3,700 nonzeros per
#: row (approximate), about 61% spam; rows are unit-norm.
WEBSPAM_LIKE = SynthSpec(name="webspam_like", n_features=16_609_143, nnz_mean=3700.0,
                         nnz_sigma=0.8, nnz_max=40_000, zipf_exponent=1.05,
                         dense_features=0, value_kind="normalized", positive_fraction=0.61,
                         decimals=6)

PRESETS = {"url_like": URL_LIKE, "webspam_like": WEBSPAM_LIKE}


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), *key])


def _weights(spec: SynthSpec, seed: int) -> np.ndarray:
    rng = _rng(seed, 2**31 - 1)
    n = spec.n_features
    w = np.zeros(n, dtype=np.float64)
    informative = rng.random(n) < spec.informative_fraction
    informative[:spec.dense_features] = True
    w[informative] = rng.standard_normal(int(informative.sum()))
    return w


def _raw_block(spec: SynthSpec, seed: int, block: int, m: int, stamp: np.ndarray):
    """Rows of one block before labelling: (indptr, indices, values)."""
    n_sparse = spec.n_features - spec.dense_features
    k_cap = max(1, min(spec.nnz_max, n_sparse // 2 + spec.dense_features))
    mu = np.log(spec.nnz_mean) - spec.nnz_sigma**2 / 2
    nnz = np.rint(_rng(seed, block, 0).lognormal(mu, spec.nnz_sigma, size=m))
    nnz = np.clip(nnz, 1, k_cap).astype(np.int64)
    nnz = np.maximum(nnz, spec.dense_features)
    k_sparse = np.minimum(nnz - spec.dense_features, max(n_sparse // 2, 1))
    row_len = k_sparse + spec.dense_features
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(row_len, out=indptr[1:])
    dense_vals = _rng(seed, block, 4).lognormal(0.0, 1.0, size=m * spec.dense_features)
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    values = np.empty(int(indptr[-1]), dtype=np.float64)
    kseed = int(_rng(seed, block, 2).integers(0, 2**31 - 1))
    K.sample_block(k_sparse, spec.dense_features, dense_vals, n_sparse,
                   float(spec.zipf_exponent), spec.value_kind == "normalized", kseed,
                   indptr, indices, values, stamp)
    scale = 10.0 ** spec.decimals
    values = np.maximum(np.rint(values * scale), 1.0) / scale
    return indptr, indices, values


def _margins(spec, indptr, indices, values, w, seed, block, noise_scale):
    m = len(indptr) - 1
    X = sp.csr_matrix((values, indices, indptr), shape=(m, spec.n_features))
    z = X @ w
    return z + spec.margin_noise * noise_scale * _rng(seed, block, 1).standard_normal(m)


def _calibrate(spec: SynthSpec, seed: int, w: np.ndarray, stamp: np.ndarray):
    """(threshold, noise scale) from a fixed calibration block: independent of ``rows``."""
    cal = 2**31 - 2
    indptr, indices, values = _raw_block(spec, seed, cal, _CALIBRATION_ROWS, stamp)
    z = _margins(spec, indptr, indices, values, w, seed, cal, 0.0)
    scale = float(np.std(z)) or 1.0
    z = _margins(spec, indptr, indices, values, w, seed, cal, scale)
    return float(np.quantile(z, 1.0 - spec.positive_fraction)), scale


def iter_blocks(spec: SynthSpec, rows: int, seed: int = 0
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(indptr, indices, values, labels)`` per block of up to :data:`BLOCK_ROWS` rows.

    ``indptr`` starts at 0 in every block; indices are 0-based int64, values float32,
    labels float32 in {-1, +1}.
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    w = _weights(spec, seed)
    stamp = np.full(spec.n_features - spec.dense_features, -1, dtype=np.int64)
    t, noise_scale = _calibrate(spec, seed, w, stamp)
    for block, start in enumerate(range(0, rows, BLOCK_ROWS)):
        m = min(BLOCK_ROWS, rows - start)
        indptr, indices, values = _raw_block(spec, seed, block, m, stamp)
        z = _margins(spec, indptr, indices, values, w, seed, block, noise_scale)
        y = np.where(z > t, 1.0, -1.0)
        flip = _rng(seed, block, 3).random(m) < spec.label_noise
        y[flip] = -y[flip]
        yield indptr, indices, values.astype(np.float32), y.astype(np.float32)


def _progress(blocks: Iterator, rows: int, name: str, progress: bool | None) -> Iterator:
    """``blocks`` with a tqdm bar of rows on stderr: ``progress`` None draws it only on a
    terminal, True always, False never."""
    if progress is False:
        yield from blocks
        return

    from tqdm import tqdm  # tqdm (the [apps] extra): only when a bar is drawn

    with tqdm(total=rows, unit="row", unit_scale=True, desc=f"synth {name}", file=sys.stderr,
              disable=None if progress is None else False, dynamic_ncols=True) as bar:
        for block in blocks:
            yield block
            bar.update(len(block[3]))


def make_like(spec: SynthSpec, rows: int, seed: int = 0, *, out: str | Path | None = None,
              overwrite: bool = False, compression: str = "gzip",
              progress: bool | None = False):
    """Generate ``rows`` rows like ``spec``.

    With ``out=None`` returns ``(X, y)``: ``X`` a float32 ``csr_matrix`` of shape
    ``(rows, spec.n_features)``, ``y`` float32 -1/+1. With ``out`` a path ending in ``.h5`` /
    ``.hdf5`` writes a sparcml-csr file; any other suffix writes LIBSVM text (compressed for
    ``.gz``, ``.bz2``, ``.xz``). Returns the path then. ``progress``: a bar of rows on stderr,
    None: only on a terminal (the CLIs), False: none.
    """
    blocks = _progress(iter_blocks(spec, rows, seed), rows, spec.name, progress)
    if out is None:
        parts = list(blocks)
        if not parts:
            return (sp.csr_matrix((0, spec.n_features), dtype=np.float32),
                    np.zeros(0, np.float32))
        X = sp.vstack([sp.csr_matrix((v, i, p), shape=(len(p) - 1, spec.n_features))
                       for p, i, v, _ in parts], format="csr")
        return X.astype(np.float32), np.concatenate([y for *_, y in parts])
    out = Path(out)
    attrs = {"generator": spec.name, "seed": int(seed),
             "generator_spec": repr(asdict(spec))}
    if out.suffix in (".h5", ".hdf5"):
        with CsrWriter(out, n_features=spec.n_features, compression=compression,
                       overwrite=overwrite) as w:
            for indptr, indices, values, y in blocks:
                w.append(np.diff(indptr), indices, values, y)
            return w.commit(task="binary", index_base=0, source=f"synth:{spec.name}",
                            **attrs)
    write_libsvm_blocks(out, blocks, decimals=spec.decimals, overwrite=overwrite)
    return out


def make_url_like(rows: int, seed: int = 0, *, features: int = URL_LIKE.n_features,
                  out: str | Path | None = None, overwrite: bool = False, **overrides):
    """url-like data (see :data:`URL_LIKE`); ``overrides`` replace other spec fields."""
    return make_like(replace(URL_LIKE, n_features=features, **overrides), rows, seed,
                     out=out, overwrite=overwrite)


def make_webspam_like(rows: int, seed: int = 0, *, features: int = WEBSPAM_LIKE.n_features,
                      out: str | Path | None = None, overwrite: bool = False, **overrides):
    """webspam-like data (see :data:`WEBSPAM_LIKE`); ``overrides`` replace other spec fields."""
    return make_like(replace(WEBSPAM_LIKE, n_features=features, **overrides), rows, seed,
                     out=out, overwrite=overwrite)


def _open_out(path: Path, suffix: str, mode: str = "wb"):
    """Open ``path`` for writing, compressed as the file name suffix ``suffix`` says (the
    target's suffix: ``path`` itself may be a temporary name)."""
    if suffix == ".gz":
        return gzip.open(path, mode, compresslevel=6)
    if suffix == ".bz2":
        return bz2.open(path, mode)
    if suffix in (".xz", ".lzma"):
        return lzma.open(path, mode)
    return open(path, mode)


def write_libsvm_blocks(path: str | Path, blocks, *, decimals: int = 6, zero_based: bool = False,
                        overwrite: bool = False) -> Path:
    """Write ``(indptr, indices, values, labels)`` blocks as LIBSVM text (1-based by default).

    Values and labels are written rounded to ``decimals`` digits. The file appears only when
    complete (temporary name, then rename).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; pass overwrite=True (CLI: --force)")
    base = 0 if zero_based else 1
    with atomic_write(path) as tmp:
        with _open_out(tmp, path.suffix) as fh:
            for indptr, indices, values, labels in blocks:
                indptr = np.asarray(indptr, dtype=np.int64)
                m = len(indptr) - 1
                r0 = 0
                while r0 < m:  # slices of at most ~2M entries keep the buffer small
                    r1 = int(np.searchsorted(indptr, indptr[r0] + (2 << 20), side="right")) - 1
                    r1 = min(max(r1, r0 + 1), m)
                    a, b = int(indptr[r0]), int(indptr[r1])
                    buf = np.empty((b - a) * (22 + decimals) + (r1 - r0) * (24 + decimals),
                                   dtype=np.uint8)
                    n = K.format_libsvm(indptr[r0:r1 + 1] - a,
                                        np.asarray(indices[a:b], dtype=np.int64),
                                        np.asarray(values[a:b], dtype=np.float64),
                                        np.asarray(labels[r0:r1], dtype=np.float64),
                                        base, decimals, buf)
                    fh.write(buf[:n].tobytes())
                    r0 = r1
    return path


def write_libsvm(path: str | Path, X, y, *, decimals: int = 6, zero_based: bool = False,
                 overwrite: bool = False) -> Path:
    """Write a CSR matrix and labels as LIBSVM text (see :func:`write_libsvm_blocks`)."""
    X = sp.csr_matrix(X)
    X.sort_indices()
    return write_libsvm_blocks(path, [(X.indptr, X.indices, X.data, np.asarray(y))],
                               decimals=decimals, zero_based=zero_based, overwrite=overwrite)
