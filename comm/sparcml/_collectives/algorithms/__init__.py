"""The built-in sparse-allreduce algorithms, one module each, found and registered on import.

Each module of this package builds one :class:`sparcml._registry.Algorithm` (its
name, its ``run`` function, its cost function, its options, its message tags) and registers
it; this package imports every module in it (:mod:`pkgutil`), so a new algorithm is a new
module here and nothing else changes (or a module of another package that registers on
import or through the entry-point group ``sparcml.algorithms``). The order of
:data:`sparcml.ALGORITHMS` is the records' ``order``.
"""

from __future__ import annotations

import importlib
import pkgutil


__all__ = ["DEFAULT_ALGORITHM", "DENSE_BASELINE", "ALLGATHER_BASELINE"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

from .allgather_sum import ALGORITHM as _ALLGATHER  # noqa: E402 - imported by the loop above
from .dense_allreduce import ALGORITHM as _DENSE  # noqa: E402
from .recursive_doubling import ALGORITHM as _RECURSIVE_DOUBLING  # noqa: E402

DEFAULT_ALGORITHM = _RECURSIVE_DOUBLING.name  # the library's choice when none is named
DENSE_BASELINE = _DENSE.name
ALLGATHER_BASELINE = _ALLGATHER.name
