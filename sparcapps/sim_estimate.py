"""What ``sparc-bench --simulate P`` will take, said before it starts: memory and time (the
apps' ``--simulate`` use it too: :mod:`sparcapps.simapp`).

A simulation holds every simulated rank in one process. Measured here (peak RSS of
``sparc-bench --simulate P --N 1000 --density 0.01 --reps 1 --warmup 0``, 2026-12-04):

- about 80 KiB per simulated rank (its thread, context and messages), from recursive doubling
  at P = 64 and 512 (183 and 218 MiB);
- about 1.6 KiB per pair of ranks where every rank exchanges with every other one (the split
  algorithms' and ``topk_allreduce``'s P - 1 messages per phase), from
  ``ssar_split_allgather`` at P = 128 and 512 (217 and 613 MiB);
- the data: each rank's input (P k entries together), the shared sums (N), and the messages
  in flight, bounded by 4 (N + P k) entries of index and value.

The wall time grows with the messages too: about 1.6 ms per pair of ranks on a loaded 2-core
machine (416 s for one cell of ``ssar_split_allgather`` at P = 512 under load 60-80), and about
3 ms per rank otherwise. Both are rough figures; the point is to refuse in a second what would
take hours and tens of GiB (``--simulate 100000`` grew to 8 GiB in 41 s before this check).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparcml import ALGORITHMS, AUTO, DENSE_BASELINE, TOPK_ALLREDUCE

__all__ = ["SimEstimate", "estimate", "ALL_PAIRS"]

PER_RANK_BYTES = 80 << 10
PER_PAIR_BYTES = 1600
BASE_BYTES = 200 << 20
PER_PAIR_SECONDS = 1.6e-3
PER_RANK_SECONDS = 3e-3
# algorithms (and topk_allreduce) whose every rank sends a message to every other rank: the
# split ones (their names say so), top-k's reduce-scatter, and auto (it may pick either)
ALL_PAIRS = frozenset({a for a in ALGORITHMS if "split" in a} | {TOPK_ALLREDUCE, AUTO})


@dataclass(frozen=True)
class SimEstimate:
    """The estimate for one P: ``bytes`` at the peak, ``seconds`` per cell and repetition."""

    P: int
    bytes: int
    seconds: float

    def line(self) -> str:
        return (f"P = {self.P}: about {self.bytes / 2**30:.3g} GiB and "
                f"{_duration(self.seconds)} per cell and repetition")


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.3g} h"


def estimate(P: int, dims, densities, algorithms, *, itemsize: int = 4,
             index_size: int = 4) -> SimEstimate:
    """The largest estimate over the cells (``dims`` x ``densities``) and ``algorithms`` (the
    dense baseline excluded: it is modeled only when P x N does not fit, see sparc-bench
    --sim-dense-memory)."""
    names = set(algorithms) - {DENSE_BASELINE}
    pairs = bool(names & ALL_PAIRS)
    worst = 0
    for dim in dims:
        for density in densities:
            k = max(1, int(dim * density))
            data = 4 * (dim + P * k) * (itemsize + index_size)
            worst = max(worst, data)
    ranks = P * PER_RANK_BYTES + (P * P * PER_PAIR_BYTES if pairs else 0)
    seconds = P * PER_RANK_SECONDS + (P * P * PER_PAIR_SECONDS if pairs else 0)
    return SimEstimate(P, BASE_BYTES + ranks + worst, seconds)
