"""Calibrated rates of an application's own compute, cached as sparcml.sim's kernel rates are.

A simulated training step charges its local compute (gradient, update, selection) from rates
measured once on this machine, so that the same run gives the same modeled time on a quiet and
on a loaded machine (:func:`sparcml.sim.charge`). :func:`cached_rates` measures them at the
first use in a process and keeps them beside the kernel rates
(``$XDG_CACHE_HOME/sparcml/NAME-rates.json``; ``SPARCML_SIM_RATES=off``: measured once per
process, never written), valid for this machine and the versions of what runs them.
"""

from __future__ import annotations

import json
import os
import threading

from .._errors import InvalidArgumentError
from ._rates import cached_or_measured, forget_in_use, rates_key

__all__ = ["cached_rates"]

_lock = threading.Lock()
_memo: dict = {}


def _path(name: str):
    from .._options import sim_rates_cache_path

    kernels = sim_rates_cache_path()
    return None if kernels is None else os.path.join(os.path.dirname(kernels),
                                                     f"{name}-rates.json")


def _load(path, version, names) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != {**rates_key(), "app_version": version}:
        return None
    rates = data.get("rates")
    if not isinstance(rates, dict) or (names is not None and set(rates) != set(names)):
        return None
    for v in rates.values():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            return None
    return {k: float(v) for k, v in rates.items()}


def cached_rates(name: str, measure, *, version: int = 1, names=None) -> dict:
    """``measure()``'s dict of rates (name -> non-negative seconds per unit), measured once per
    process and machine: read from the cache when a file made here under the same ``version``
    (bump it when ``measure`` changes) holds them (``names``: the keys it must hold), else
    measured and written. ``name``: the cache file's stem, letters, digits, ``-`` and ``_``."""
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise InvalidArgumentError(f"cached_rates: name must be letters, digits, - or _, "
                                   f"got {name!r}")
    with _lock:
        if name in _memo:
            return _memo[name]
        path = _path(name)
        rates = cached_or_measured(
            name, path, _load(path, version, names) if path is not None else None,
            lambda: {k: float(v) for k, v in measure().items()},
            key={**rates_key(), "app_version": version})
        _memo[name] = rates
        return rates


def _reset_for_tests() -> None:
    with _lock:
        forget_in_use(list(_memo))
        _memo.clear()
