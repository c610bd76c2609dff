"""``powersgd``: rank-r PowerSGD of each parameter matrix (Vogels et al. 2019), warm start.

The class: :class:`sparcml.compression.PowerSGDCompressor` (``compression/_powersgd.py``), with
its cost (two small dense allreduces per bucket).
"""

from __future__ import annotations

from .._objects import Compression
from .._powersgd import PowerSGDCompressor
from .._registry import SEED, CompressorSpec, Param, memory_of, positive_int, register_compressor

RANK = Param("rank", "--powersgd-rank", "the rank of the approximation", type=positive_int,
             default=4)


def build(*, rank, seed, algorithm, error_feedback):
    return Compression(PowerSGDCompressor(rank, seed=seed), None, memory_of(error_feedback),
                       algorithm)


SPEC = register_compressor(CompressorSpec(
    name="powersgd", order=130, build=build, params=(RANK, SEED),
    labels=(("powersgd_rank", lambda r: f"rank {r}"),),
    summary="rank --powersgd-rank PowerSGD of each parameter matrix (biases whole), warm "
            "start, error feedback (2 small dense allreduces per bucket)"))
