"""The deep apps' communication options turned into what trains with them: the
:class:`sparcml.compression.Compression` and whether the compressor owns the momentum.

Shared by the training loop (:mod:`.train`), the simulated ranks' calibration
(:mod:`.simranks`) and the compressor table.
"""

from __future__ import annotations

__all__ = ["compression_from_args"]


def compression_from_args(args):
    """The :class:`sparcml.compression.Compression` the communication options ask for."""
    from sparcml import QSGD
    from sparcml.compression import (Compression, GlobalTopKCompressor, NoneMemory,
                                     ResidualMemory, TopKCompressor)

    from sparcapps.cli_args import options_from_args

    options = options_from_args(args)
    if args.dense:
        return Compression.none(options=options)
    if getattr(args, "compressor", None):
        from sparcml.compression import build

        from sparcapps.cli_args import compressor_params_from_args

        return build(args.compressor, **compressor_params_from_args(args),
                     error_feedback=not args.no_error_feedback,
                     algorithm=args.algorithm).with_options(options)
    compressor = GlobalTopKCompressor(density=args.density) if args.global_topk \
        else TopKCompressor(density=args.density, chunk=args.topk_bucket_size)
    return Compression(compressor,
                       quantizer=QSGD(args.bits) if args.bits else None,
                       memory=NoneMemory() if args.no_error_feedback else ResidualMemory(),
                       algorithm=args.algorithm, options=options)


def _own_momentum(args) -> bool:
    """Whether the compressor applies the optimizer's --momentum itself (its registry record's
    ``own_momentum``): the SGD then runs without momentum."""
    from sparcml.compression import get_compressor

    name = getattr(args, "compressor", None)
    return bool(name) and not args.dense and get_compressor(name).own_momentum
