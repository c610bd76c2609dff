"""``signum``: signs of a local momentum, majority vote (Bernstein et al. 2018).

The class: :class:`sparcml.compression.SignCompressor` with a momentum ``beta``
(``--compressor-momentum``, the paper's 0.9; ``m = beta m + (1 - beta) g``), with its cost (an
allgather of the packed signs, ``compressors/signsgd.py``). The SGD runs without momentum
unless ``--momentum`` is given.
"""

from __future__ import annotations

from .._objects import Compression, NoneMemory
from .signsgd import SIGN_LR_SCALE, SignCompressor
from .._registry import MOMENTUM, CompressorSpec, register_compressor


def build(*, momentum, algorithm, error_feedback):
    return Compression(SignCompressor(momentum), None, NoneMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="signum", order=90, build=build, params=(MOMENTUM,), own_momentum=True,
    labels=(("lr", lambda lr: f"lr {lr:g}"),
            ("momentum", lambda m: f"then SGD momentum {m:g}" if m else None)),
    recommended={"lr_scale": SIGN_LR_SCALE, "momentum": 0.0,
                 "source": "Bernstein et al. 2018: signum's own momentum 0.9 "
                           "(--compressor-momentum), no SGD momentum; the rate 1/30 of the "
                           "dense one measured in issue 35 (LSTM lr 0.01)"},
    summary="signs {-1, 0, +1} of a local momentum (--compressor-momentum, 0.9), "
            "majority vote; no SGD momentum unless --momentum is given"))
