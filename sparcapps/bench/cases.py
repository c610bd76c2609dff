"""The cases of one cell of ``sparc-bench``'s sweep, shared by the real and the simulated sweep
(:mod:`.cli`, :mod:`.simulate`): what each row times and what it is called."""

from __future__ import annotations

from sparcml import AUTO, DENSE_BASELINE, TOPK_ALLREDUCE, get_algorithm

from .runner import BenchCase

__all__ = ["cell_cases", "row_name"]


def cell_cases(args, algorithms, dim, density, pattern, replay) -> list:
    """The :class:`~.runner.BenchCase` list of one cell, in the order they are timed: per
    algorithm its index coding and partition variants (each also quantized with ``--bits``),
    then its node-aware row (``--hierarchical``, with the first variant's options); last the
    ``--topk`` rows. The real and the
    simulated sweep time the same list."""
    cases = []
    for algorithm in algorithms:
        for coding, parts in _variants(algorithm, args):
            cases.append(BenchCase(dim, density, pattern, algorithm, args.dtype,
                                   args.nonblocking, reuse_output=args.reuse_output,
                                   index_coding=coding, partitions=parts, replay=replay))
            if args.bits and _takes_quantizer(algorithm):  # and quantized
                cases.append(BenchCase(dim, density, pattern, algorithm, args.dtype,
                                       args.nonblocking, args.bits, args.quantize_sparse,
                                       args.reuse_output, index_coding=coding,
                                       partitions=parts, replay=replay))
        if args.hierarchical and algorithm != DENSE_BASELINE:
            # beside the flat row of the first variant (its flat / node-aware ratio)
            coding, parts = _variants(algorithm, args)[0]
            cases.append(BenchCase(dim, density, pattern, algorithm, args.dtype,
                                   args.nonblocking, reuse_output=args.reuse_output,
                                   hierarchical=True, index_coding=coding, partitions=parts,
                                   replay=replay))
    if args.topk is not None:
        for coding, parts in _variants(TOPK_ALLREDUCE, args):
            cases.append(BenchCase(dim, density, pattern, TOPK_ALLREDUCE, args.dtype,
                                   args.nonblocking, topk=args.topk, replay=replay,
                                   index_coding=coding, partitions=parts))
    return cases


def row_name(case, ran: str | None, hierarchical: bool) -> str:
    """A row's label: the algorithm (``auto:<what it ran>``), ``(k)`` for top-k, ``+qB`` for
    quantized, ``+h`` node-aware (asked for, or ``auto``'s choice), ``+raw``/``+coded`` and
    ``+eq`` for the index coding and partition variants."""
    name = case.algorithm if case.algorithm != AUTO else f"auto:{ran}"
    if case.topk is not None:
        name += f"({case.topk})"
    if case.bits:
        name += f"+q{case.bits}" + ("s" if case.quantize_sparse else "")
    if case.hierarchical or hierarchical:
        name += "+h"
    return name + ("" if case.index_coding == "auto" else "+" + case.index_coding) + (
        "+eq" if case.partitions == "equal" else "")


def _variants(algorithm: str, args) -> list[tuple[str, str]]:
    """The (index coding, partitions) cases of an algorithm: every requested value where it
    changes something (indices: not the dense baseline; partitions: the split algorithms and
    topk_allreduce's reduce-scatter)."""
    codings = ["auto"] if algorithm == DENSE_BASELINE else args.index_coding
    split = "split" in algorithm or algorithm in (AUTO, TOPK_ALLREDUCE)
    parts = args.partitions if split else ["balanced"]
    return [(c, p) for c in codings for p in parts]


def _takes_quantizer(algorithm: str) -> bool:
    return algorithm == AUTO or get_algorithm(algorithm).accepts_quantizer
