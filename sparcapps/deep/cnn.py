"""``sparc-cnn``: a CNN trained data-parallel with quantized top-k SGD over sparcml.

Data sets: ``digits`` (scikit-learn's bundled 8x8 digits, offline; :class:`DigitsCNN`) and
``cifar10`` (the binary version from the data home; :class:`ResNetCifar`). Launch with
``mpiexec -n P sparc-cnn [options]``; see ``--help`` and :mod:`sparcapps.deep.train`.
"""

from __future__ import annotations

import sys

from sparcapps.data import data_home
from sparcapps.cli_args import options_from_args
from sparcapps.simapp import check_simulate_arguments

from .data import load_cifar10, load_digits_split
from .simranks import shared_data
from .train import ClassifyTask, run_app, simulated_main
from .train import build_parser as common

__all__ = ["main", "make_task", "build_parser"]

APP = "sparc-cnn"


def build_parser():
    return common(APP, "Data-parallel CNN training with quantized top-k SGD (sparcml.torch).",
                  datasets=("digits", "cifar10"), width=16, depth=2, lr=0.1, epochs=20,
                  batch_size=32)


def make_task(args, comm):
    """The model and this rank's data for ``args`` (collective only through nothing; the data
    are loaded once for all simulated ranks)."""
    from .models import DigitsCNN, ResNetCifar  # imports torch: not at --help

    if args.dataset == "digits":
        data = shared_data(comm, "digits", load_digits_split)
        model = DigitsCNN(args.width, args.depth)
    else:
        root = data_home(args.data_home) / "cifar10"
        data = shared_data(comm, ("cifar10", str(root)), lambda: load_cifar10(root))
        model = ResNetCifar(args.width, args.depth)
    return ClassifyTask(model, *data, rank=comm.Get_rank(), size=comm.Get_size(),
                        batch_size=args.batch_size, seed=args.seed)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options_from_args(args, parser)  # a bad SPARCML_* variable: exit 2; records what runs
    check_simulate_arguments(parser, args)
    if args.simulate:
        return simulated_main(APP, args, parser, make_task)
    return run_app(APP, args, make_task)


if __name__ == "__main__":
    sys.exit(main())
