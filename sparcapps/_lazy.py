"""Names of a package imported at their first use (PEP 562), so that a command's ``--help``
or a light subcommand does not pay for the heavy modules behind them."""

from __future__ import annotations

import importlib


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
