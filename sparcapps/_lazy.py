"""Names of a package, and whole modules, imported at their first use, so that a command's
``--help`` or a light subcommand does not pay for the heavy modules behind them (the apps' own
Numba kernels compile or load from the cache when their module runs)."""

from __future__ import annotations

import importlib
import threading
import types

_LOCK = threading.Lock()


def lazy_exports(package: str, where: dict[str, str], namespace: dict):
    """``(__getattr__, __dir__)`` for ``package``: a name of ``where`` (name -> submodule)
    is imported from ``package.submodule`` the first time it is asked for and kept in
    ``namespace`` (the package's ``globals()``); any other name raises AttributeError."""

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


class LazyModule(types.ModuleType):
    """A stand-in for the module named ``__name__``, imported at the first attribute read
    (under a lock: simulated ranks are threads); each attribute is then kept on the stand-in,
    so later reads are plain attribute lookups."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # (copy, pickle, inspect probe these: not the module's)
            raise AttributeError(attr)
        with _LOCK:
            module = importlib.import_module(self.__name__)
        value = getattr(module, attr)
        setattr(self, attr, value)
        return value


def lazy_module(name: str) -> LazyModule:
    """A :class:`LazyModule` for the absolute module ``name`` (``"sparcapps.linear._kernels"``):
    ``K = lazy_module(...)`` in place of ``from . import _kernels as K``."""
    return LazyModule(name)
