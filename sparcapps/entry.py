"""The console scripts: each checks the optional dependencies its app needs, then runs it.

``pyproject.toml`` points every ``sparc-*`` script here. The comm layer needs only numpy,
numba and mpi4py; the applications' dependencies are extras (``[apps]``, ``[torch]``). When
one is missing, the script prints one line naming the package and the extra that brings it
(once per job, on rank 0 when launched by an MPI launcher or Slurm) and exits with status 1,
before any MPI work; a missing MPI library (the ``ImportError`` ``MPILibraryNotFound`` that
``import sparcml`` raises) is reported the same way. ``python -m`` still runs each module directly.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Callable

from sparcapps.cli_args import first_rank

__all__ = ["EXTRA_OF", "SCRIPTS", "missing_modules", "extra_message"]

# top-level module -> (distribution to install, the extra of sparcml that brings it)
EXTRA_OF = {
    "scipy": ("scipy", "apps"),
    "sklearn": ("scikit-learn", "apps"),
    "h5py": ("h5py", "apps"),
    "tqdm": ("tqdm", "apps"),
    "matplotlib": ("matplotlib", "apps"),
    "threadpoolctl": ("threadpoolctl", "apps"),
    "torch": ("torch", "torch"),
}
_APPS = ("scipy", "sklearn", "h5py", "tqdm")
SCRIPTS: dict[str, str] = {}  # console script -> "module:function" it runs (filled below)


def missing_modules(modules) -> list[str]:
    """The top-level modules of ``modules`` that cannot be imported here (nothing imported)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def extra_message(prog: str, modules) -> str:
    """One line: what ``prog`` lacks and which ``pip install`` brings it."""
    dists = sorted({EXTRA_OF.get(m, (m, None))[0] for m in modules})
    extras = sorted({EXTRA_OF[m][1] for m in modules if m in EXTRA_OF})
    how = (f"pip install 'sparcml[{','.join(extras)}]'" if extras
           else f"pip install {' '.join(dists)}")
    return f"{prog}: error: needs {', '.join(dists)}, not installed; {how}"


def _fail(message: str) -> int:
    if first_rank():
        print(message, file=sys.stderr, flush=True)
    return 1


def _script(target: str, prog: str, needs: tuple[str, ...] = ()) -> Callable[[], int]:
    """A console script: check ``needs``, import ``target`` ("module:function"), run it."""
    module_name, func_name = target.split(":")
    SCRIPTS[prog] = target

    def script() -> int:
        missing = missing_modules(needs)
        if missing:
            return _fail(extra_message(prog, missing))
        try:
            status = getattr(importlib.import_module(module_name), func_name)()
        except ImportError as exc:
            if type(exc).__name__ == "MPILibraryNotFound":  # raised by import sparcml itself
                return _fail(f"{prog}: error: {exc}")
            top = (exc.name or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
            if top not in EXTRA_OF:
                raise
            return _fail(extra_message(prog, [top]))
        return 0 if status is None else status

    script.__name__ = script.__qualname__ = prog.replace("-", "_")
    script.__doc__ = f"``{prog}``: runs ``{target}``."
    return script


sparc_bench = _script("sparcapps.bench.cli:main", "sparc-bench")
sparc_bench_auto = _script("sparcapps.bench.auto_report:main", "sparc-bench-auto")
sparc_bench_overlap = _script("sparcapps.bench.overlap_report:main", "sparc-bench-overlap")
sparc_bench_compress = _script("sparcapps.bench.compress_bench:main", "sparc-bench-compress")
sparc_record_gradients = _script("sparcapps.bench.record_gradients:main",
                                 "sparc-record-gradients", _APPS)
sparc_jobs = _script("sparcapps.jobs:main", "sparc-jobs")
sparc_mpiexec = _script("sparcapps.launcher:main", "sparc-mpiexec")
sparc_report = _script("sparcapps.report:main", "sparc-report", ("matplotlib",))
sparc_data = _script("sparcapps.data.cli:main", "sparc-data")
sparc_data_bench = _script("sparcapps.data.bench_convert:main", "sparc-data-bench",
                           ("scipy", "h5py", "sklearn"))
sparc_linear = _script("sparcapps.linear.cli:main", "sparc-linear", _APPS)
sparc_logreg = _script("sparcapps.linear.cli:logreg_main", "sparc-logreg", _APPS)
sparc_svm = _script("sparcapps.linear.cli:svm_main", "sparc-svm", _APPS)
sparc_linear_bench = _script("sparcapps.linear.bench:main", "sparc-linear-bench",
                             _APPS + ("threadpoolctl",))
sparc_linear_compare = _script("sparcapps.linear.compare:main", "sparc-linear-compare", _APPS)
sparc_cnn = _script("sparcapps.deep.cnn:main", "sparc-cnn", ("torch",) + _APPS)
sparc_lstm = _script("sparcapps.deep.lstm:main", "sparc-lstm", ("torch",) + _APPS)
sparc_deep_bench = _script("sparcapps.deep.bench:main", "sparc-deep-bench", ("torch",) + _APPS)
sparc_deep_accuracy = _script("sparcapps.deep.accuracy:main", "sparc-deep-accuracy",
                              ("torch",) + _APPS)
sparc_compressor_table = _script("sparcapps.deep.compressor_table:main",
                                 "sparc-compressor-table", _APPS)
