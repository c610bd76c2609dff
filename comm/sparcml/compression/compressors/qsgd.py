"""``qsgd``: every value, QSGD-quantized to ``--bits`` (Alistarh et al. 2017), sparse allreduce.

The class: :class:`sparcml.compression.NoneCompressor` with a :class:`sparcml.QSGD` quantizer
of ``--bits`` (4 when 0) and buckets of 1,024 values; the bucket's scale is the paper's L2 norm
by default (``--qsgd-norm l2``), the max norm (lower variance, the common practice since) as
``--qsgd-norm max``. No error feedback by default, as in the paper (``--error-feedback`` adds a
residual memory): at 4 bits the L2 scale's quantization error is larger than the value
(E|Q(x) - x|^2 / |x|^2 = 2.64 on a normal vector), so a carried residual grows without bound
and the training diverges (BENCHMARKS.md, "Compressors on one table (issue 35, item 2)"). Its
cost: the default (the sparse allreduce of n quantized values).
"""

from __future__ import annotations

from ..._quant.qsgd import QSGD
from .._objects import Compression, NoneCompressor
from .._registry import BITS, CompressorSpec, Param, memory_of, register_compressor

NORM = Param("norm", "--qsgd-norm", "the scale of each bucket of 1,024 values: l2 (the QSGD "
             "paper's) or max", type=str, default="l2", choices=("l2", "max"))


def build(*, bits, norm, algorithm, error_feedback):
    return Compression(NoneCompressor(), QSGD(bits or 4, norm=norm), memory_of(error_feedback),
                       algorithm)


SPEC = register_compressor(CompressorSpec(
    name="qsgd", order=60, build=build, params=(BITS, NORM), error_feedback=False,
    labels=(("qsgd_norm", lambda n: "max norm" if n == "max" else None),),
    recommended={"source": "Alistarh et al. 2017: the dense run's SGD (learning rate, "
                           "momentum)"},
    summary="all values, QSGD-quantized to --bits (4 when 0) per 1,024 values, the paper's L2 "
            "norm (--qsgd-norm max: the max norm), through the sparse allreduce; no error "
            "feedback unless --error-feedback (the paper has none)"))
