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


# Where Numba has no writable place for its cache (a read-only installation, HOME not
# writable), it refuses to define a cache=True function at all. The subprocess empties Numba's
# own list of places first: what a read-only installation without a writable HOME leaves.
NOWHERE = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    from numba.core import caching
    caching.CacheImpl._locator_classes[:] = []   # no place of Numba's own is writable
    mode = sys.argv[1]
    if mode == "sparc-data":                      # the data tool alone: no sparcml
        from sparcapps.data.cli import main
        print("exit", main(["synth", "url", "--rows", "10", "-o", sys.argv[2]]))
        raise SystemExit(0)
    if mode != "numba":
        import sparcml
        if mode == "guarded":
            sparcml.guard_numba_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if mode == "apps-data":               # an app's process: sparcml imported first
                import sparcapps.data._csrkern
                print("data kernels defined")
                raise SystemExit(0)
            import kern
        except RuntimeError as exc:
            print("refused:", exc)
            raise SystemExit(0)
        print(kern.running_sum(np.arange(4.0)).tolist(),
              len(kern.running_sum.stats.cache_hits), "cache hits")
    print(len([w for w in caught if "NUMBA_CACHE_DIR" in str(w.message)]), "warnings")
    import sparcml._numba_cache as guard
    print("root:", guard._fallback_root)
""")


def _nowhere(tmp_path, *args):
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", NOWHERE, *args], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr


def test_with_no_writable_cache_place_kernels_cache_in_a_private_directory(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "tmp").mkdir()
    assert "refused: cannot cache function 'running_sum'" in _nowhere(tmp_path, "numba")[0]
    first, _ = _nowhere(tmp_path, "guarded")
    root = tmp_path / "tmp" / f"sparcml-numba-{os.getuid()}"
    assert "[0.0, 1.0, 3.0, 6.0] 0 cache hits" in first
    assert "1 warnings" in first and f"root: {root}" in first
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    assert list(root.rglob("*.nbi")), "no cache index written"
    assert "[0.0, 1.0, 3.0, 6.0] 1 cache hits" in _nowhere(tmp_path, "guarded")[0]
    # the apps' data kernels, under sparcml's guard; the data tool alone, one line and exit 2
    assert "data kernels defined" in _nowhere(tmp_path, "apps-data")[0]
    out, err = _nowhere(tmp_path, "sparc-data", str(tmp_path / "s.h5"))
    assert "exit 2" in out and not (tmp_path / "s.h5").exists()
    assert err.count("\n") == 1 and "set NUMBA_CACHE_DIR to a writable directory" in err


def test_a_fallback_directory_others_can_write_is_never_used(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "tmp").mkdir()
    planted = tmp_path / "tmp" / f"sparcml-numba-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # anyone could have put code there
    out, _ = _nowhere(tmp_path, "guarded")
    assert "[0.0, 1.0, 3.0, 6.0] 0 cache hits" in out
    root = out.split("root: ", 1)[1].strip()
    assert root != str(planted) and os.path.basename(root).startswith("sparcml-numba-")
    assert not list(planted.iterdir())
    assert not os.path.exists(root), "the process's own directory outlives it"
