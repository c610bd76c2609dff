"""What the real and the simulated sweep of ``sparc-bench`` print alike: auto's header note and
byte counts with units."""

from __future__ import annotations

from sparcml import AUTO, AUTO_EXPLORING_CALLS

__all__ = ["auto_note", "fmt_bytes"]


def auto_note(algorithms) -> str:
    """The header's note on auto's untimed exploring calls, if auto is in the sweep."""
    if AUTO not in algorithms:
        return ""
    return (f"; auto: +{AUTO_EXPLORING_CALLS} untimed calls that settle its measured "
            f"choice, sparcml.AUTO_EXPLORING_CALLS")


def fmt_bytes(n: float) -> str:
    """``n`` bytes as B (whole), KiB, MiB or GiB (one decimal)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
