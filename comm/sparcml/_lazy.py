"""Kernel modules imported on their first use.

The Numba kernels (``_kernels``, ``_wire/*_kernels``, ``_quant/kernels``, ``_topk/*_kernels``)
import Numba and compile or load their functions when their module runs; that is most of
``import sparcml``'s time (0.4 s of 0.7 s here), which every tool's ``--help`` would pay for
nothing. The modules that call them hold a :class:`LazyModule` instead: the kernel module is
imported at the first attribute read (under a lock: simulated ranks are threads), and each
attribute is then kept on the stand-in, so later reads are plain attribute lookups.
"""

from __future__ import annotations

import importlib
import threading
import types

__all__ = ["LazyModule", "lazy_module"]

_LOCK = threading.Lock()


class LazyModule(types.ModuleType):
    """A stand-in for the module ``name``, imported on the first attribute read."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # (copy, pickle, inspect probe these: not the module's)
            raise AttributeError(attr)
        with _LOCK:
            module = importlib.import_module(self.__name__)
        value = getattr(module, attr)
        setattr(self, attr, value)
        return value


def lazy_module(name: str) -> LazyModule:
    """A :class:`LazyModule` for the absolute module ``name`` (``"sparcml._kernels"``)."""
    return LazyModule(name)
