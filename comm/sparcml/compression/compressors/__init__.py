"""The built-in compressors, one module per ``--compressor`` name, found and registered on import.

Each module here builds one :class:`~sparcml.compression.CompressorSpec` (its CLI name, one
line, its parameters, how it is built, its table label, its paper's recommended
hyperparameters) and registers it; this package imports every module in it (:mod:`pkgutil`;
names starting with ``_`` are skipped), so a new compressor is a new module here and nothing
else changes (or a module of another package that calls
:func:`~sparcml.compression.register_compressor` on import). The class a module names is where
its cost is (:meth:`~sparcml.compression.Compressor.predicted_seconds`).
"""

from __future__ import annotations

import importlib
import pkgutil

__all__: list[str] = []

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
