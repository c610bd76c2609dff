"""Benchmark: ``convert_libsvm`` beside ``sklearn.datasets.load_svmlight_file``.

    sparc-data-bench --rows 1000000 --reps 3

Generates (once, kept in ``--synth-cache``: the data home's ``synth/``) a url-like LIBSVM text
file of ``--rows`` rows, then runs each loader in a
fresh subprocess ``--reps`` times, alternating, and reports per tool the median wall time, the
throughput in MB of text per second and the peak RSS of the process (``ru_maxrss``), and the
ratios side by side; the converted file goes to a temporary directory, removed at the
end. Each subprocess first imports its libraries and (for convert) loads the
cached Numba kernels on a tiny file, so the timing covers the parse of the big file only.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sparcapps.cli_args import (add_data_home_argument, add_deprecated_alias, make_parser,
                                positive_int)

__all__ = ["main"]

_CHILD = r"""
import json, sys, time, os
tool, src, out, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if tool == "convert":
    from sparcapps.data.convert import convert_libsvm
    warm = out + ".warm.svm"
    open(warm, "w").write("1 1:1\n")
    convert_libsvm(warm, out + ".warm.h5", overwrite=True)
    os.unlink(warm); os.unlink(out + ".warm.h5")
    t = time.perf_counter()
    r = convert_libsvm(src, out, n_features=3231961, overwrite=True, chunk_bytes=chunk)
    dt = time.perf_counter() - t
    rows, nnz = r.n_rows, r.nnz
else:
    import numpy as np
    from sklearn.datasets import load_svmlight_file
    t = time.perf_counter()
    X, y = load_svmlight_file(src, n_features=3231961, dtype=np.float32)
    dt = time.perf_counter() - t
    rows, nnz = X.shape[0], X.nnz
# VmHWM: peak RSS of this process image (ru_maxrss would carry the parent's over fork/exec)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"seconds": dt, "maxrss_kb": hwm, "rows": rows, "nnz": nnz}))
"""


def _run(tool: str, src: Path, out: Path, chunk: int) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, tool, str(src), str(out), str(chunk)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{tool} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("sparc-data-bench", __doc__)
    ap.add_argument("--rows", type=positive_int, default=1_000_000, help="rows of the url twin")
    ap.add_argument("--seed", type=int, default=0, help="seed of the twin's generator")
    cache = ap.add_argument("--synth-cache", metavar="DIR",
                            help="where the twin's text file is kept (default: DATA_HOME/synth)")
    add_deprecated_alias(ap, "--workdir", cache)
    add_data_home_argument(ap)
    ap.add_argument("--reps", type=positive_int, default=3, help="timed repetitions per tool")
    ap.add_argument("--chunk-mb", type=float, default=16.0, help="MiB of text parsed at a time")
    ap.add_argument("--skip-sklearn", action="store_true",
                    help="skip scikit-learn's load_svmlight_file")
    args = ap.parse_args(argv)
    if args.synth_cache:
        work = Path(args.synth_cache)
    else:
        from sparcapps.data import data_home  # scipy, h5py (the [apps] extra): not at --help

        work = data_home(args.data_home) / "synth"
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"url-like-{args.rows}-s{args.seed}.svm"
    if not src.exists():
        from .synth import make_url_like
        print(f"generating {src} ...", flush=True)
        make_url_like(args.rows, args.seed, out=src)
    mb = src.stat().st_size / 1e6
    chunk = int(args.chunk_mb * (1 << 20))
    tools = ["convert"] + ([] if args.skip_sklearn else ["sklearn"])
    res: dict[str, list[dict]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(prefix="sparc-data-bench-") as scratch:
        for rep in range(args.reps):
            for t in tools:
                r = _run(t, src, Path(scratch) / "out.h5", chunk)
                res[t].append(r)
                print(f"rep {rep} {t:<8} {r['seconds']:7.2f} s  {mb / r['seconds']:7.1f} MB/s"
                      f"  peak RSS {r['maxrss_kb'] / 1024:8.1f} MiB", flush=True)
    print(f"\nfile: {src} ({mb:.0f} MB text, {res['convert'][0]['rows']:,} rows, "
          f"{res['convert'][0]['nnz']:,} nonzeros); median of {args.reps}, cpu "
          f"{os.cpu_count()} cores")
    summary = {}
    for t in tools:
        sec = statistics.median(r["seconds"] for r in res[t])
        rss = statistics.median(r["maxrss_kb"] for r in res[t]) / 1024
        summary[t] = (sec, rss)
        print(f"  {t:<8} {sec:7.2f} s  {mb / sec:7.1f} MB/s  peak RSS {rss:8.1f} MiB")
    if "sklearn" in summary:
        (cs, cr), (ss, sr) = summary["convert"], summary["sklearn"]
        print(f"  ratio    convert is {ss / cs:.2f}x the throughput of load_svmlight_file, "
              f"with {cr / sr:.3f}x its peak memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
