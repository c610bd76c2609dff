"""Numba's on-disk cache shared by processes compiling at once (sparcml.guard_numba_cache).

Numba saves a new signature of a ``cache=True`` kernel by reading the cache index, picking the
first free data file number, writing the index, then the data file, with no lock between
processes. Two saves that interleave pick the same number, and the index can name one
signature's entry with the other's machine code (``can't unbox array`` when loaded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

pytest.importorskip("numba")


def _interleaved_saves(tmp_path, save):
    """Two threads save keys "a" and "b" into one fresh index with ``save``, driven into the
    crossing order where nothing stops them: both read the index, a writes its entry, b its
    entry, b its data, a its data. Returns what the index then loads for each key."""
    from numba.core import caching

    cache = caching.IndexDataCacheFile(str(tmp_path), "kern", ("stamp", 1))
    read = {k: threading.Event() for k in "ab"}
    entry = {k: threading.Event() for k in "ab"}
    data = {k: threading.Event() for k in "ab"}
    role = threading.local()
    wait = 1.0  # a step waits this long for the other thread, then goes on (as under a lock)

    class Timed(caching.IndexDataCacheFile):
        def _load_index(self):
            index = super()._load_index()
            if getattr(role, "key", None) is None:  # the final loads: untimed
                return index
            read[role.key].set()
            read["b" if role.key == "a" else "a"].wait(wait)
            return index

        def _save_index(self, overloads):
            if role.key == "b":
                entry["a"].wait(wait)
            super()._save_index(overloads)
            entry[role.key].set()

        def _save_data(self, name, payload):
            if role.key == "a":
                data["b"].wait(wait)
            super()._save_data(name, payload)
            data[role.key].set()

    cache.__class__ = Timed

    def run(key):
        role.key = key
        save(cache, key, f"code of {key}")

    threads = [threading.Thread(target=run, args=(k,)) for k in "ab"]
    threads[0].start()
    read["a"].wait(wait)  # a reads first
    threads[1].start()
    for t in threads:
        t.join(30)
    return {k: cache.load(k) for k in "ab"}


def test_interleaved_saves_cross_entries_without_the_guard_and_never_with_it(tmp_path):
    import sparcml
    from numba.core import caching

    sparcml.guard_numba_cache()
    guarded = caching.IndexDataCacheFile.save
    assert guarded.sparcml_guarded
    (tmp_path / "numba").mkdir()
    (tmp_path / "guarded").mkdir()
    # Numba's own save, the order forced: b's entry names the data file a wrote last
    assert _interleaved_saves(tmp_path / "numba", guarded.__wrapped__) == {
        "a": None, "b": "code of a"}
    # the guarded save: the second save reads the index only after the first wrote it
    assert _interleaved_saves(tmp_path / "guarded", guarded) == {
        "a": "code of a", "b": "code of b"}


KERNEL = textwrap.dedent("""
    from numba import njit

    @njit(cache=True)
    def running_sum(x):
        out = x.copy()
        for i in range(1, x.size):
            out[i] += out[i - 1]
        return out
""")

COMPILE = textwrap.dedent("""
    import sys
    import numpy as np
    import sparcml
    sparcml.guard_numba_cache()
    import kern
    print(kern.running_sum(np.arange(4, dtype=sys.argv[1])))
""")

LOAD = textwrap.dedent("""
    import numpy as np
    import kern
    for dtype in ("float32", "float64"):
        out = kern.running_sum(np.arange(4, dtype=dtype))
        assert out.dtype == dtype and out.tolist() == [0, 1, 3, 6], (dtype, out)
    print(len(kern.running_sum.stats.cache_hits), "cache hits")
""")


def test_processes_compiling_two_signatures_at_once_leave_a_cache_both_load(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE, dtype], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for dtype in ("float32", "float64")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    loaded = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True,
                            text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert "2 cache hits" in loaded.stdout


def test_the_guard_is_installed_by_importing_a_kernel_module_and_only_once():
    code = ("import sys, sparcml\nassert 'numba' not in sys.modules\n"
            "import sparcml._kernels\nfrom numba.core import caching\n"
            "save = caching.IndexDataCacheFile.save\nassert save.sparcml_guarded\n"
            "sparcml.guard_numba_cache()\nassert caching.IndexDataCacheFile.save is save\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
