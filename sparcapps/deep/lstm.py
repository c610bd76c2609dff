"""``sparc-lstm``: an LSTM trained data-parallel with quantized top-k SGD over sparcml.

Data sets: ``digits`` (each 8x8 digit read row by row: a sequence of 8 steps of 8 features,
classified by :class:`SeqLSTM`; offline) and ``ptb`` (Penn Treebank from the data home, a
word-level :class:`WordLM` with truncated BPTT of ``--bptt`` steps, scored by test perplexity).
Launch with ``mpiexec -n P sparc-lstm [options]``; see ``--help``.
"""

from __future__ import annotations

import sys

from sparcapps.cli_args import add_deprecated_alias, nonnegative_float, positive_int

from sparcapps.data import data_home
from sparcapps.cli_args import options_from_args
from sparcapps.simapp import check_simulate_arguments

from .data import load_digits_split, load_ptb
from .simranks import shared_data
from .train import ClassifyTask, LanguageModelTask, run_app, simulated_main
from .train import build_parser as common

__all__ = ["main", "make_task", "build_parser"]

APP = "sparc-lstm"


def build_parser():
    p = common(APP, "Data-parallel LSTM training with quantized top-k SGD (sparcml.torch).",
               datasets=("digits", "ptb"), width=128, depth=1, lr=0.3, epochs=40,
               batch_size=32)
    p.add_argument("--bptt", type=positive_int, default=35, help="ptb: time steps per window")
    # --clip-norm is DGC's clipping of each rank's bucket: this one is the optimizer's
    clip = p.add_argument("--clip-grad-norm", dest="clip", type=nonnegative_float, default=0.25,
                          help="ptb: clip the L2 norm of the averaged gradient to this before "
                               "the update (torch.nn.utils.clip_grad_norm_; 0: no clipping)")
    add_deprecated_alias(p, "--clip", clip)
    return p


def make_task(args, comm):
    from .models import SeqLSTM, WordLM  # imports torch: not at --help

    rank, size = comm.Get_rank(), comm.Get_size()
    if args.dataset == "digits":
        model = SeqLSTM(args.width, args.depth)
        return ClassifyTask(model, *shared_data(comm, "digits", load_digits_split), rank=rank,
                            size=size, batch_size=args.batch_size, seed=args.seed)

    root = data_home(args.data_home) / "ptb"
    corpus = shared_data(comm, ("ptb", str(root)), lambda: load_ptb(root))
    model = WordLM(len(corpus.vocab), args.width, args.depth)
    return LanguageModelTask(model, corpus, rank=rank, size=size, batch_size=args.batch_size,
                             bptt=args.bptt, clip=args.clip)


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
