"""The deep apps' communication options turned into what trains with them: the
:class:`sparcml.compression.Compression` and whether the compressor owns the momentum.

Shared by the training loop (:mod:`.train`), the simulated ranks' calibration
(:mod:`.simranks`) and the compressor table.
"""

from __future__ import annotations

from sparcml import QSGD
from sparcml.compression import (COMPRESSORS, Compression, GlobalTopKCompressor, NoneMemory,
                                 ResidualMemory, TopKCompressor, build, get_compressor,
                                 recommended_hyperparameters)
from sparcapps.cli_args import compressor_params_from_args, options_from_args

__all__ = ["compression_from_args", "resolve_hyperparameters", "resolve_compressor_defaults",
           "error_feedback_of", "compressor_has_own_momentum"]


def _active_compressor(args) -> str | None:
    """The ``--compressor`` that runs (None for top-k / global top-k and ``--dense``)."""
    name = getattr(args, "compressor", None)
    return name if name and not args.dense else None


def resolve_hyperparameters(args, *, lr: float, momentum: float):
    """Fill ``args.lr`` and ``args.momentum`` where the user gave none (None): with
    ``--compressor NAME``, NAME's paper's recommendation
    (:func:`sparcml.compression.recommended_hyperparameters`: the app's dense ``lr`` times its
    learning-rate scale, its SGD momentum outside the compressor); else the app's ``lr`` and
    ``momentum``. A value the user gave wins. Returns ``args`` (modified)."""
    name = _active_compressor(args)
    if name:
        if name in COMPRESSORS:
            rec = recommended_hyperparameters(name, lr=lr, momentum=momentum)
            lr, momentum = rec["lr"], rec["momentum"]
    if getattr(args, "lr", None) is None:
        args.lr = lr
    if getattr(args, "momentum", None) is None:
        args.momentum = momentum
    return args


def resolve_compressor_defaults(args, *, steps_per_epoch: int, clip: float | None):
    """Fill the compressor parameters whose paper default depends on the run (left None):
    DGC's ``--density-warmup-steps`` (its record's ``recommended["warmup_epochs"]``, the
    paper's four, of ``steps_per_epoch`` steps)
    and ``--clip-norm`` (the run's own clipping threshold ``clip``, e.g. ``sparc-lstm``'s
    ``--clip``; none without). Called once the task is built, before the compression; the
    record then holds the values that ran. Returns ``args`` (modified)."""
    name = _active_compressor(args)
    if not name:
        return args

    if name not in COMPRESSORS:
        return args
    spec = get_compressor(name)
    declared = {p.dest for p in spec.params}
    epochs = spec.recommended.get("warmup_epochs")
    if "density_warmup_steps" in declared and epochs is not None \
            and getattr(args, "density_warmup_steps", None) is None:
        args.density_warmup_steps = int(epochs) * int(steps_per_epoch)
    if "clip_norm" in declared and getattr(args, "clip_norm", None) is None and clip:
        args.clip_norm = float(clip)
    return args


def compression_from_args(args):
    """The :class:`sparcml.compression.Compression` the communication options ask for."""

    options = options_from_args(args)
    if args.dense:
        return Compression.none(options=options)
    if getattr(args, "compressor", None):
        return build(args.compressor, **compressor_params_from_args(args),
                     error_feedback=error_feedback_of(args),
                     algorithm=args.algorithm).with_options(options)
    compressor = GlobalTopKCompressor(density=args.density) if args.global_topk \
        else TopKCompressor(density=args.density, chunk=args.topk_bucket_size)
    return Compression(compressor,
                       quantizer=QSGD(args.bits) if args.bits else None,
                       memory=NoneMemory() if args.no_error_feedback else ResidualMemory(),
                       algorithm=args.algorithm, options=options)


def error_feedback_of(args) -> bool | None:
    """``--no-error-feedback`` (False), ``--error-feedback`` (True), else None: the
    compressor's own default (records made before ``--error-feedback`` existed lack it)."""
    if getattr(args, "no_error_feedback", False):
        return False
    return True if getattr(args, "error_feedback", None) else None


def compressor_has_own_momentum(args) -> bool:
    """Whether the compressor applies a momentum itself (``--compressor-momentum``; its
    registry record's ``own_momentum``): its recommended SGD ``--momentum`` is then 0, and a
    ``--momentum`` the user gives adds an outer momentum on top, as asked."""
    name = _active_compressor(args)
    return bool(name) and get_compressor(name).own_momentum
