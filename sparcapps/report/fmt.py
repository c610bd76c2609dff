"""Numbers and names as a reader wants them: ms, KiB, percentages, data-set and configuration
labels. Pure functions of record values; no plotting, no I/O."""

from __future__ import annotations

import math
import os
import re
from typing import Any

__all__ = ["fmt", "sig", "ms", "kib", "percent", "count", "slug", "field", "dataset_label",
           "config_label", "compressor_label", "network_label"]


def fmt(x: Any) -> str:
    """Six significant digits for floats, as-is otherwise; '' for missing values (CSV, code)."""
    if x is None:
        return ""
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.6g}"
    return str(x)


def sig(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, without exponent for everyday magnitudes."""
    if x is None:
        return ""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if -4 <= mag < 9:
        decimals = max(digits - 1 - mag, 0)
        return f"{round(x, decimals):,.{decimals}f}"
    return f"{x:.{digits - 1}e}"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, 3 significant digits."""
    return "" if seconds is None else sig(seconds * 1e3)


def kib(nbytes: float | None) -> str:
    """Bytes as KiB, 3 significant digits."""
    return "" if nbytes is None else sig(nbytes / 1024)


def percent(fraction: float | None) -> str:
    """A density as a percentage: 0.001 -> '0.1%', 0.00271406 -> '0.271%'."""
    if fraction is None:
        return ""
    return f"{fraction * 100:.3g}%"


def count(n: Any) -> str:
    """An integer with thousands separators and the power of two when it is one (2^20)."""
    if n is None:
        return ""
    n = int(n)
    if n >= 1024 and n & (n - 1) == 0:
        return f"{n:,} (2^{n.bit_length() - 1})"
    return f"{n:,}"


def slug(*parts: Any) -> str:
    """A file-name-safe id from parts: 'strong', 1048576, 0.01 -> 'strong-1048576-0.01'."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(fmt(p) for p in parts if p is not None))


def field(rec: dict, name: str) -> Any:
    """A record's value for ``name``: top level, then metrics, then a scalar in config."""
    for where in (rec, rec.get("metrics") or {}, rec.get("config") or {}):
        value = where.get(name)
        if value is not None and not isinstance(value, (list, dict)):
            return value
    return None


def network_label(rec: dict) -> str | None:
    """The network a record was measured (or simulated) on: a simulated record's ``network``
    (``"...; modeled only"`` for a row that ``sparc-bench --simulate`` predicted by its cost
    model instead of simulating: its own marker), else the emulated network of
    ``jobs/emulate.sh``; None for the machine's own."""
    if rec.get("simulated"):
        net = str(rec.get("network") or "model")
        return f"{net}; modeled only" if (rec.get("metrics") or {}).get("modeled_only") else net
    return (rec.get("environment") or {}).get("emulated_network")


def dataset_label(rec: dict) -> str:
    """What a training run learned from: a data file's name, a synthetic preset with its size,
    or the deep apps' ``--dataset``; '' when the record does not say."""
    cfg = rec.get("config") or {}
    if cfg.get("synth"):
        size = ", ".join(f"{count(cfg[k])} {k}" for k in ("rows", "features") if cfg.get(k))
        return f"synthetic {cfg['synth']}" + (f" ({size})" if size else "")
    for key in ("data_path", "data"):
        if cfg.get(key):
            return os.path.basename(str(cfg[key]))
    return str(cfg.get("dataset") or "")


def compressor_label(cfg: dict) -> str | None:
    """The compressor of a deep app's run config when it is not the default top-k per bucket:
    'global top-k' (``--global-topk`` or ``--compressor global-topk``), else the
    ``--compressor`` name; None for top-k (and for the linear apps, which have none)."""
    name = cfg.get("compressor")
    if cfg.get("global_topk") or name == "global-topk":
        return "global top-k"
    return str(name) if name and name != "topk" else None


def config_label(rec: dict) -> str:
    """How a training run communicated, in words: 'dense baseline' or 'ALGORITHM, density 1%,
    4-bit QSGD, no error feedback' (with the compressor when it is not top-k: 'ALGORITHM, global
    top-k, density 1%'). Never a bare '-' or a raw float."""
    from sparcml import DENSE_BASELINE  # sparcml (numba, MPI): sparc-report runs without it

    cfg = rec.get("config") or {}
    alg = rec.get("algorithm")
    if cfg.get("dense") or alg == DENSE_BASELINE and not cfg.get("bits"):
        return "dense baseline"
    parts = [str(alg or "unknown algorithm")]
    if compressor_label(cfg):
        parts.append(compressor_label(cfg))
    if rec.get("density") is not None:
        parts.append(f"density {percent(rec['density'])}")
    if cfg.get("bits"):
        parts.append(f"{cfg['bits']}-bit QSGD")
    if cfg.get("no_error_feedback") or cfg.get("error_feedback") is False:
        parts.append("no error feedback")
    return ", ".join(parts)
