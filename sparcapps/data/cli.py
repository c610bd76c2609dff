"""``sparc-data``: list, fetch, convert, synthesize and inspect data sets.

    sparc-data list
    sparc-data fetch url
    sparc-data convert url                          # fetched files -> DATA_HOME/url/*.h5
    sparc-data convert data.svm.bz2 -o data.h5 [--features N] [--index-base auto|0|1]
    sparc-data synth url --scale 0.01 -o url-1pct.h5
    sparc-data synth --rows 10000 --features 100000 --nnz-per-row 50 -o small.svm
    sparc-data info data.h5

Every error prints one line ``sparc-data: error: ...`` on stderr, never a traceback. Exit
status 2 for usage errors (a bad option value, a missing path, a directory or a file of the
wrong kind where a file is expected, an unknown data set name, an output that is an input);
status 1 for errors of the data itself (malformed or damaged input, hash mismatch, failed or
unverifiable download) and of the system (permissions, disk full).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from sparcapps.cli_args import (HelpFormatter, add_data_home_argument, add_list_argument,
                                add_timeout_argument, positive_float, positive_int)

from .catalog import data_home, load_catalog
from .errors import DataError, UnknownDatasetError, UsageError

__all__ = ["main", "build_parser"]

_COMPRESSED = (".bz2", ".xz", ".gz", ".lzma")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (``PROG: error: MESSAGE (see PROG --help)``), no
    abbreviated options and defaults shown once (the project's CLI vocabulary)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_common(p: argparse.ArgumentParser) -> None:
    add_data_home_argument(p)
    p.add_argument("--catalog", metavar="TOML",
                   help="catalog file (default: $SPARCML_CATALOG, else the catalog shipped "
                        "with sparcapps)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparc-data", description="Data sets for SparCML: catalog, verified fetch, "
        "LIBSVM to HDF5 conversion, synthetic twins.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    no_progress = "no progress bar (it is drawn only on a terminal)"

    p = sub.add_parser("list", help="list the catalog and what is present locally")
    _add_common(p)

    p = sub.add_parser("fetch", help="download a data set (resumes, verifies the hash)")
    p.add_argument("name", help="a catalog name (sparc-data list)")
    add_list_argument(p, "--split", metavar="SPLIT", help="only files of these splits")
    p.add_argument("--retries", type=int, default=3,
                   help="reconnect this often after a dropped connection")
    add_timeout_argument(p, default=60.0, what="each wait for the server (socket timeout)",
                         old="--timeout")
    p.add_argument("--no-progress", action="store_true", help=no_progress)
    _add_common(p)

    p = sub.add_parser("convert", help="LIBSVM text (plain/.gz/.bz2/.xz) to HDF5 CSR")
    p.add_argument("src", help="a LIBSVM file, or a catalog name (converts its fetched files)")
    p.add_argument("-o", "--output", metavar="FILE.h5",
                   help="the HDF5 file to write (required for a file source)")
    p.add_argument("--features", type=int, help="declared feature count; larger index = error")
    p.add_argument("--index-base", choices=("auto", "0", "1"), default="auto",
                   help="the first feature's index in the text (auto: guessed from the file)")
    p.add_argument("--task", choices=("auto", "binary", "multiclass", "regression"),
                   default="auto", help="what the labels are (auto: guessed from them)")
    p.add_argument("--chunk-mb", type=float, default=16.0,
                   help="MiB of text parsed at a time (bounds memory)")
    p.add_argument("--compression", choices=("gzip", "lzf", "none"), default="gzip",
                   help="HDF5 compression of the arrays")
    p.add_argument("--compression-level", type=int, default=1, help="gzip level, 0-9")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output")
    p.add_argument("--no-progress", action="store_true", help=no_progress)
    _add_common(p)

    p = sub.add_parser("synth", help="write a synthetic twin (HDF5, or LIBSVM by suffix)")
    p.add_argument("name", nargs="?",
                   help="catalog name (url, webspam) or preset (url_like, webspam_like); "
                        "omit for a custom set given by --rows/--features/--nnz-per-row")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output: .h5/.hdf5 for HDF5, else LIBSVM text (.bz2/.xz/.gz compress)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--rows", type=positive_int, help="number of rows")
    size.add_argument("--scale", type=positive_float,
                      help="fraction of the catalog's row count (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator")
    p.add_argument("--features", type=positive_int,
                   help="override the feature count (default: the preset's; needed for "
                        "a custom twin)")
    p.add_argument("--nnz-per-row", type=positive_float,
                   help="mean nonzeros per row (default: the preset's; needed for a "
                        "custom twin)")
    p.add_argument("--zipf", type=float, help="power-law exponent of feature frequencies "
                                              "(default: the preset's; 1.1 for a custom twin)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output")
    p.add_argument("--no-progress", action="store_true", help=no_progress)
    _add_common(p)

    p = sub.add_parser("info", help="statistics of an HDF5 file, every row and value checked "
                                    "(or a catalog entry)")
    p.add_argument("target", help="an .h5 file or a catalog name")
    _add_common(p)
    return parser


def _fmt(n) -> str:
    return "?" if n is None else f"{n:,}"


def _cmd_list(args) -> int:
    cat = load_catalog(args.catalog)
    home = data_home(args.data_home)
    print(f"{'name':<15}{'task':<22}{'rows':>12}{'features':>13}{'nnz':>15}  local")
    for name, d in cat.items():
        have = [f.filename for f in d.files if (home / name / f.filename).exists()]
        h5 = sorted(p.name for p in (home / name).glob("*.h5")) if (home / name).is_dir() else []
        state = ("fetched" if len(have) == len(d.files) else
                 f"{len(have)}/{len(d.files)} files" if have else "-")
        if h5:
            state += ", converted: " + " ".join(h5)
        print(f"{name:<15}{d.task:<22}{_fmt(d.rows):>12}{_fmt(d.features):>13}"
              f"{_fmt(d.nnz):>15}  {state}")
    print(f"data home: {home}")
    return 0


def _cmd_fetch(args) -> int:
    from .fetch import fetch  # urllib, http.client: not at --help

    paths = fetch(args.name, data_home=args.data_home, catalog=args.catalog,
                  splits=tuple(args.split) if args.split else None, retries=args.retries,
                  timeout=args.timeout_seconds,
                  progress=None if not args.no_progress else False)
    for p in paths:
        print(p)
    return 0


def _strip_compression(name: str) -> str:
    for ext in _COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def _cmd_convert(args) -> int:
    # numba kernels and h5py: sparc-data list and fetch run without them
    from .convert import convert_libsvm
    progress = not args.no_progress and sys.stderr.isatty()
    kw = dict(index_base=args.index_base if args.index_base == "auto" else int(args.index_base),
              task=args.task, chunk_bytes=max(1, int(args.chunk_mb * (1 << 20))),
              compression=args.compression, compression_level=args.compression_level,
              overwrite=args.force, progress=progress)
    src = Path(args.src)
    jobs: list[tuple[Path, Path, int | None]] = []
    if src.is_dir():
        raise UsageError(f"{src} is a directory, expected a LIBSVM file or a catalog name")
    if src.is_file():
        if not args.output:
            raise UsageError(f"-o/--output is required for a file source ({src})")
        jobs.append((src, Path(args.output), args.features))
    else:
        cat = load_catalog(args.catalog)
        if args.src not in cat:
            raise UsageError(f"{args.src}: no such file, and not a catalog name (known: "
                             f"{', '.join(cat)})")
        d = cat[args.src]
        home = data_home(args.data_home) / d.name
        for f in d.files:
            if f.format != "libsvm":
                continue
            path = home / f.filename
            if not path.exists():
                raise UsageError(f"{path} missing; run `sparc-data fetch {d.name}` first")
            out = home / (_strip_compression(f.filename) + ".h5")
            jobs.append((path, out, args.features or d.features))
        if not jobs:
            raise UsageError(f"{d.name} has no LIBSVM files to convert")
    for path, out, nf in jobs:
        r = convert_libsvm(path, out, n_features=nf, **kw)
        mb = r.text_bytes / 1e6
        print(f"{out}: {r.n_rows:,} rows, {r.n_features:,} features, {r.nnz:,} nonzeros, "
              f"task {r.task}, {r.index_base}-based source; {mb:.1f} MB of text in "
              f"{r.seconds:.1f} s ({mb / max(r.seconds, 1e-9):.1f} MB/s)")
    return 0


def _cmd_synth(args) -> int:
    # scipy and h5py (the [apps] extra): not for list or fetch
    from .synth import PRESETS, URL_LIKE, SynthSpec, make_like
    rows_full = None
    if args.name is None:
        if args.rows is None or args.features is None or args.nnz_per_row is None:
            raise UsageError("synth without a NAME needs --rows, --features and --nnz-per-row")
        spec = SynthSpec(name="custom", n_features=args.features, nnz_mean=args.nnz_per_row,
                         nnz_sigma=0.3, nnz_max=max(1, int(args.nnz_per_row * 8)),
                         zipf_exponent=args.zipf if args.zipf is not None else 1.1,
                         decimals=URL_LIKE.decimals)
        rows = args.rows
    else:
        if args.name in PRESETS:
            spec = PRESETS[args.name]
        else:
            cat = load_catalog(args.catalog)
            d = cat.get(args.name)
            if d is None or not d.synth:
                names = [n for n, e in cat.items() if e.synth] + list(PRESETS)
                raise UsageError(f"no synthetic twin for {args.name!r}; choose one of "
                                 f"{', '.join(names)}")
            spec = PRESETS[d.synth]
            rows_full = d.rows
        over = {}
        if args.features:
            over["n_features"] = args.features
        if args.nnz_per_row:
            over["nnz_mean"] = args.nnz_per_row
        if args.zipf is not None:
            over["zipf_exponent"] = args.zipf
        spec = replace(spec, **over)
        if args.rows is not None:
            rows = args.rows
        else:
            scale = args.scale if args.scale is not None else 0.01
            base = rows_full or {"url_like": 2_396_130, "webspam_like": 350_000}.get(
                spec.name, 100_000)
            rows = max(1, round(base * scale))
    path = make_like(spec, rows, args.seed, out=args.output, overwrite=args.force,
                     progress=False if args.no_progress else None)
    print(f"{path}: {rows:,} rows like {spec.name}, {spec.n_features:,} features, "
          f"seed {args.seed}")
    return 0


def _cmd_info(args) -> int:
    target = Path(args.target)
    if target.is_dir():
        raise UsageError(f"{target} is a directory, expected a sparcml-csr .h5 file or a "
                         "catalog name")
    if not target.is_file():
        cat = load_catalog(args.catalog)
        d = cat.get(args.target)
        if d is None:
            raise UsageError(f"{args.target}: no such file, and not a catalog name (known: "
                             f"{', '.join(cat)})")
        print(f"{d.name}: {d.title}\n  task {d.task}; rows {_fmt(d.rows)}, features "
              f"{_fmt(d.features)}, nnz {_fmt(d.nnz)} {('(' + d.nnz_note + ')') if d.nnz_note else ''}"
              f"\n  licence: {d.license}")
        for f in d.files:
            print(f"  [{f.split}] {f.url}\n      size {_fmt(f.size)}, hash {f.hash or '(none)'}")
        return 0
    _print_file_info(target)
    return 0


def _scan_rows(f, target: Path, shape) -> tuple:
    """Validate every row (blocks of rows, bounded memory) and count its NaN and infinite
    values: (nnz per row, labels, largest index or -1, non-finite values, the first row
    holding one or -1)."""
    # numpy, and h5py (the [apps] extra): sparc-data --help, list and fetch run without them
    import numpy as np

    from .csrfile import check_rows

    counts = np.empty(shape.n_rows, dtype=np.int64)
    max_index = -1
    nonfinite, first_row = 0, -1
    step = 1 << 16
    for a in range(0, shape.n_rows, step):
        b = min(a + step, shape.n_rows)
        ptr, indices = check_rows(f, target, shape, a, b)
        counts[a:b] = np.diff(ptr)
        if len(indices):
            max_index = max(max_index, int(indices.max()))
        finite = np.isfinite(f["data"][int(ptr[0]):int(ptr[-1])])
        bad = finite.size - int(np.count_nonzero(finite))
        if bad and first_row < 0:
            pos = int(ptr[0]) + int(np.argmin(finite))
            first_row = a + int(np.searchsorted(ptr, pos, side="right")) - 1
        nonfinite += bad
    return counts, f["labels"][:], max_index, nonfinite, first_row


def _print_file_info(target: Path) -> None:
    """Print the statistics of a sparcml-csr file after checking every row of it (the file
    is read and closed first, so an output error is never taken for a damaged file)."""
    # numpy, and h5py (the [apps] extra): sparc-data --help, list and fetch run without them
    import numpy as np

    from .csrfile import open_csr

    with open_csr(target) as (f, shape):
        attrs = {k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
                 for k, v in f.attrs.items()}
        counts, y, max_index, nonfinite, first_row = _scan_rows(f, target, shape)
        layout = (f"{f['indices'].dtype}, data {f['data'].dtype}, "
                  f"compression {f['indices'].compression}")
    print(f"{target}: {attrs['format']} v{attrs['format_version']}, "
          f"{target.stat().st_size / 1e6:.1f} MB on disk, every row and value checked")
    for k in ("n_rows", "n_features", "nnz", "task", "index_base", "source",
              "source_sha256", "generator", "seed"):
        if k in attrs:
            v = attrs[k]
            print(f"  {k:<14}{v:,}" if isinstance(v, (int, np.integer)) else f"  {k:<14}{v}")
    print(f"  {'indices':<14}{layout}")
    n = shape.n_rows
    if n:
        print(f"  {'nnz per row':<14}min {counts.min():,}  mean {counts.mean():,.1f}  "
              f"median {int(np.median(counts)):,}  max {counts.max():,}")
        print(f"  {'max index':<14}{max_index:,} (0-based)")
        print(f"  {'density':<14}{shape.nnz / (n * max(shape.n_features, 1)):.3g}")
        print(f"  {'values':<14}" + ("all finite" if not nonfinite else
                                      f"{nonfinite:,} NaN or infinite (the first in row "
                                      f"{first_row:,}): sparc-linear and sparc-svm refuse "
                                      f"such a file"))
        vals, cnt = np.unique(y, return_counts=True)
        if len(vals) <= 10:
            print("  labels        " + ", ".join(f"{v:g}: {c:,}" for v, c in zip(vals, cnt)))
        else:
            print(f"  labels        {len(vals)} distinct, min {vals[0]:g}, max {vals[-1]:g}")


_COMMANDS = {"list": _cmd_list, "fetch": _cmd_fetch, "convert": _cmd_convert,
             "synth": _cmd_synth, "info": _cmd_info}


def _exit_status(exc: BaseException) -> int:
    """2 for usage errors (see the module docstring), 1 for the others."""
    if isinstance(exc, (UsageError, UnknownDatasetError, FileNotFoundError, IsADirectoryError,
                        NotADirectoryError)):
        return 2
    if isinstance(exc, ValueError) and not isinstance(exc, DataError):
        return 2       # argument validation of the library (a bad option value)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``sparc-data``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (DataError, OSError, ValueError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        print(f"sparc-data: error: {msg}", file=sys.stderr)
        return _exit_status(exc)
    except RuntimeError as exc:
        if "no locator available" not in str(exc):  # Numba's, when it has nowhere to cache
            raise
        print("sparc-data: error: Numba can write its kernel cache neither beside the "
              "installed package nor in the user's cache directory (read-only installation, "
              "or HOME not writable); set NUMBA_CACHE_DIR to a writable directory",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sparc-data: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
