"""Calibrated kernel rates: the compute a simulated rank is charged under ``compute="model"``.

Package-internal. Under the default ``compute="model"`` of :func:`sparcml.sim.run` a rank's
compute is not its measured thread time (which follows the machine's load: the same 8 MiB dense
allreduce at P = 256 came out at 5.2-22.2 ms on a loaded machine) but the sum over the kernels
it runs of *rate x exact work*:

==============  ===================================================  =========================
kernel          work                                                  via
==============  ===================================================  =========================
``add``         entries read (both operands) + entries written       ``Ops.add``
``fold``        entries of the parts + entries written                ``Ops.fold_parts``
``assemble``    entries of the blocks + entries written               ``Ops.assemble``
``encode``      bytes of the message                                  ``Ops.encode``
``decode``      bytes of the message                                  ``Ops.decode``
``dense_add``   bytes of a dense float32 sum (a simulated Allreduce)  ``World.gamma_add``
``encode_part`` one message of a packed encode (header, index code)  ``Ops.encode_split``
``decode_part`` one message of a packed read (header, stream)         ``Ops.fold_packed``,
                                                                      ``Ops.assemble_packed``
``op``          one kernel call's fixed cost (Python, allocation)     each of the above
``call``        Python between two communicator calls of sparcml      ``World.enter``
==============  ===================================================  =========================

Each rate is measured once per process on first use, as the best of several timings of the
plain kernel (thread CPU time, so a loaded machine lengthens the wall time of calibration but
not the rates), and cached as JSON at :func:`sparcml._options.sim_rates_cache_path` with the
machine, versions and kernels' source it was measured on; a file that does not parse, lacks a
rate or was made on another machine or version or with other kernels is ignored and rewritten
(atomically: a temporary file renamed).
``call`` is calibrated from a small simulation under ``compute="measured"`` (tiny vectors at
P = 4, so its compute is the Python per communicator call).

What is not a kernel here and so is not charged: top-k's selection kernels, input validation,
the conversion of a caller's input, and the user's own code and communicator calls between
sparcml's calls (a ``Barrier``, a ``Send``: no ``call`` cost either). Those are O(k) or O(N / P) passes; the measured mode
(``compute="measured"``) charges everything a rank does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

__all__ = ["KERNELS", "kernel_rates", "kernels_digest", "rates_key", "load_rates", "save_rates",
           "calibrate", "rates_in_use", "cached_or_measured", "forget_in_use"]

KERNELS = ("add", "fold", "assemble", "encode", "decode", "encode_part", "decode_part",
           "coded_index", "dense_add", "op", "call")
FORMAT = 2
FOLD_STREAMS = 64  # the streams of the calibration's fold (its work: entries x log2 streams)
LARGE = 1 << 22  # entries of the calibration's large size

_lock = threading.Lock()
_rates: dict | None = None
_in_use: dict = {}  # name -> {"rates", "measured", "source"}: what this process charged from


def kernels_digest(package_dir: str | None = None) -> str:
    """A digest of the source of sparcml's Numba kernels (every ``*kernels.py`` under
    ``package_dir``, default the installed package, whose digest is read once per process): a
    cached rate was measured on the kernels of one digest. The package's version does not move
    with a kernel's edit (``merge_add_into`` became 2.5x faster at version 0.1.0, and caches
    kept the old ``add`` rate)."""
    if package_dir is None:
        return _installed_kernels_digest()
    root = Path(package_dir)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*kernels.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _installed_kernels_digest() -> str:
    return kernels_digest(str(Path(__file__).resolve().parent.parent))


def rates_key() -> dict:
    """What cached rates are valid for: this machine, the versions of what runs the kernels,
    and the kernels themselves (:func:`kernels_digest`)."""
    import numba

    import sparcml

    return {"format": FORMAT, "machine": platform.node(), "arch": platform.machine(),
            "processor": platform.processor(), "cores": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": np.__version__,
            "numba": numba.__version__, "sparcml": sparcml.__version__,
            "kernels": kernels_digest()}


def load_rates(path) -> dict | None:
    """The rates cached at ``path`` if the file parses, holds every kernel as a positive finite
    number and was made under :func:`rates_key`; else None."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != rates_key():
        return None
    rates = data.get("rates")
    if not isinstance(rates, dict):
        return None
    out = {}
    for name in KERNELS:
        v = rates.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            return None
        out[name] = float(v)
    return out


def _measured_time(path=None) -> str:
    """When the rates cached at ``path`` were measured (the file's ``"measured"``, ISO 8601
    UTC), or now when ``path`` is None (rates measured in this process); "" when unreadable."""
    if path is None:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with open(path, encoding="utf-8") as f:
            stamp = json.load(f).get("measured", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return stamp if isinstance(stamp, str) else ""


def _note_in_use(name: str, rates: dict, measured: str, source: str) -> None:
    """Record that this process charges modeled compute from ``rates`` (``source``: "cache",
    "calibrated" or "calibrated, not cached"), for :func:`rates_in_use`."""
    _in_use[name] = {"rates": dict(rates), "measured": measured, "source": source}


def cached_or_measured(name: str, path, cached: dict | None, measure, key: dict | None = None
                       ) -> dict:
    """``cached`` (the rates read from ``path``) when not None, else ``measure()``'s, written
    to ``path`` under ``key`` (no file when ``path`` is None); either way noted under ``name``
    for :func:`rates_in_use`, with when they were measured and where they came from."""
    if cached is not None:
        _note_in_use(name, cached, _measured_time(path), "cache")
        return cached
    rates = measure()
    stamp = _measured_time()
    if path is not None:
        save_rates(path, rates, key=key, measured=stamp)
    _note_in_use(name, rates, stamp, "calibrated" if path is not None else "calibrated, not cached")
    return rates


def rates_in_use() -> dict:
    """The calibrated rates this process has charged modeled compute from so far, by name
    (``"kernels"``: the simulator's kernel rates; others: :func:`sparcml.sim.cached_rates`'
    names): ``{"rates": {name: seconds per unit}, "measured": ISO 8601 UTC, "source": "cache"
    | "calibrated" | "calibrated, not cached"}``. A simulated run's record carries it, so that
    a modeled time says which calibration it rests on (a recalibration on the same machine
    can move a memory-bound rate by a quarter)."""
    return {name: {**entry, "rates": dict(entry["rates"])}
            for name, entry in list(_in_use.items())}  # a snapshot: rank threads may add


def save_rates(path, rates: dict, key: dict | None = None, measured: str | None = None) -> None:
    """Write ``rates`` to ``path`` atomically (a temporary file in its folder, renamed), under
    ``key`` (default :func:`rates_key`) and the time they were ``measured`` (default now); an
    unwritable place is not an error (the rates are measured again next process)."""
    try:
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".sim-kernel-rates.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": rates_key() if key is None else key, "rates": rates,
                           "measured": measured or _measured_time()}, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def kernel_rates(run) -> dict:
    """The rates of this process: the cache's when valid, else calibrated (and cached);
    ``run``: :func:`sparcml.sim.run` (passed in: this module does not import the runner)."""
    global _rates
    with _lock:
        if _rates is not None:
            return _rates
        from .._options import sim_rates_cache_path

        path = sim_rates_cache_path()
        _rates = cached_or_measured("kernels", path,
                                    load_rates(path) if path is not None else None,
                                    lambda: calibrate(run))
        return _rates


def _best(fn, reps: int = 7) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time_ns()
        fn()
        best = min(best, (time.thread_time_ns() - t0) * 1e-9)
    return best


def _slope(make, work, sizes=(64, 1 << 17)) -> tuple[float, float]:
    """(seconds per unit of work, seconds at the small size) of ``make(n)()``'s kernel."""
    small, large = (make(n) for n in sizes)
    t_small, t_large = _best(small), _best(large)
    w_small, w_large = work(sizes[0]), work(sizes[1])
    rate = max(t_large - t_small, 1e-9) / max(w_large - w_small, 1)
    return rate, t_small


def calibrate(run) -> dict:
    """Measure every rate of :data:`KERNELS` on this machine (about 12 s on the 2-core
    development machine: the large sizes run past the caches)."""
    from .._collectives import arith
    from .._vector import SparseVector
    from .._wire.codec import RAW_INDICES, Codec, Part, decode

    rng = np.random.default_rng(0)
    codec = Codec(np.int32, np.float32, options=RAW_INDICES)
    dim = 1 << 24

    def vec(n, seed):
        idx = np.sort(np.random.default_rng(seed).choice(dim, n, replace=False)).astype(np.int32)
        return SparseVector.unchecked(dim, idx, np.ones(n, np.float32))

    def mk_add(n):
        a, b = vec(n, 1), vec(n, 2)
        return lambda: arith.add(a, b, codec)

    def mk_fold(n):  # a heap fold of FOLD_STREAMS streams, as a split's owner sums P parts
        parts = [Part(0, dim, v.indices, v.values)
                 for v in (vec(max(1, n // FOLD_STREAMS), 3 + s) for s in range(FOLD_STREAMS))]
        return lambda: arith.fold_parts(parts, 0, dim, codec)

    def mk_assemble(n):
        step = dim // 4
        blocks = []
        for j in range(4):
            idx = np.sort(rng.choice(step, n // 4, replace=False)).astype(np.int32) + j * step
            blocks.append(Part(j * step, step, idx, np.ones(len(idx), np.float32)))
        return lambda: arith.assemble(blocks, dim, codec)

    def mk_encode(n):
        v = vec(n, 5)
        part = Part(0, dim, v.indices, v.values)
        return lambda: codec.encode(part)

    def mk_decode(n):
        v = vec(n, 6)
        buf, _ = codec.encode(Part(0, dim, v.indices, v.values))
        return lambda: decode(buf)

    item = 8  # bytes of an int32 index and a float32 value
    rates = {}
    fixed = []
    levels = math.log2(FOLD_STREAMS)
    for name, make, work in (("add", mk_add, lambda n: 4 * n),
                             ("fold", mk_fold, lambda n: n * levels + n),
                             ("assemble", mk_assemble, lambda n: 2 * n),
                             ("encode", mk_encode, lambda n: item * n),
                             ("decode", mk_decode, lambda n: item * n)):
        make(64)()  # compile / warm up
        # the large size past the caches, its output fresh memory (first-touch page faults),
        # as the kernels meet vectors of millions of entries in a call at scale
        rates[name], t0 = _slope(make, work, (64, LARGE))
        fixed.append(t0)
    rates["coded_index"] = _coded_index_rate(dim)
    rates["op"] = float(np.median(fixed))
    rates["encode_part"], rates["decode_part"] = _per_message_rates(codec)
    a = np.ones(1 << 20, np.float32)
    b = np.ones(1 << 20, np.float32)
    rates["dense_add"] = _best(lambda: np.add(a, b, out=a)) / a.nbytes
    rates["call"] = _calibrate_call(run)
    return rates


def _coded_index_rate(dim: int) -> float:
    """Seconds per index to encode and decode an Elias-Fano or bitmap index section (the
    larger of the two codes' slopes; raw indices cost nothing of the kind)."""
    from .._wire.codec import Codec, Part, decode

    codec = Codec(np.int32, np.float32)  # indices coded whenever smaller
    worst = 0.0
    for density in (0.25, 0.002):  # a bitmap, then Elias-Fano
        def make(n, density=density):
            length = max(1, int(n / density))
            idx = np.sort(np.random.default_rng(9).choice(length, n, replace=False)) \
                .astype(np.int32)
            part = Part(0, length, idx, np.ones(n, np.float32))
            return lambda: decode(codec.encode(part)[0])

        make(64)()
        worst = max(worst, _slope(make, lambda n: n, (64, 1 << 18))[0])
    return worst


def _per_message_rates(codec) -> tuple[float, float]:
    """Seconds per message of the packed kernels: the slope of encoding (and of folding, and
    of assembling: the larger) P one-item messages in one call, over P."""
    from .._collectives import arith
    from .._vector import SparseVector
    from .._wire import packed_kernels as pk
    from .._wire.packed import encode_split

    def packed(n):
        bounds = np.arange(0, 16 * n + 1, 16, dtype=np.int64)
        vec = SparseVector.unchecked(16 * n, bounds[:-1].astype(np.int32),
                                     np.ones(n, np.float32))
        return vec, bounds, encode_split(codec, vec, bounds)

    def mk_encode(n):
        vec, bounds, _ = packed(n)
        return lambda: encode_split(codec, vec, bounds)

    def mk_read(kind):
        def make(n):
            vec, _, p = packed(n)
            displs, sizes = p.table[:, pk.START].copy(), p.table[:, pk.NBYTES].copy()
            if kind == "fold":
                return lambda: arith.fold_packed(p.buf, displs, sizes, 0, vec.dim, codec)
            return lambda: arith.assemble_packed(p.buf, displs, sizes, vec.dim, codec)
        return make

    sizes = (64, 1 << 14)
    for make in (mk_encode, mk_read("fold"), mk_read("assemble")):
        make(64)()  # compile / warm up
    encode, _ = _slope(mk_encode, lambda n: n, sizes)
    decode = max(_slope(mk_read("fold"), lambda n: n, sizes)[0],
                 _slope(mk_read("assemble"), lambda n: n, sizes)[0])
    return encode, decode


def _calibrate_call(run) -> float:
    """Seconds of Python per communicator call: the measured compute per call of tiny
    allreduces on 4 simulated ranks (best of 3 runs, median rank); ``run``: sim.run."""
    import sparcml
    from .._collectives.algorithms import DEFAULT_ALGORITHM
    from .._collectives.algorithms.split_sparse import ALGORITHM as SPLIT

    def body(comm):
        v = sparcml.SparseVector.unchecked(
            64, np.array([comm.Get_rank()], np.int32), np.ones(1, np.float32))
        for algorithm in (DEFAULT_ALGORITHM, SPLIT.name):
            for _ in range(5):
                sparcml.allreduce(v, comm, algorithm=algorithm)

    best = float("inf")
    for _ in range(3):
        r = run(4, body, compute="measured", network="4x10gbit")
        calls = r.extra["calls"]
        per = sorted(c / max(n, 1) for c, n in zip(r.compute, calls))
        best = min(best, per[len(per) // 2])
    return max(best, 1e-7)


def forget_in_use(names) -> None:
    """Drop ``names`` from :func:`rates_in_use` (their processes' caches were reset)."""
    for name in names:
        _in_use.pop(name, None)


def _reset_for_tests() -> None:
    global _rates
    with _lock:
        _rates = None
        forget_in_use(["kernels"])
