"""``sparc-bench``: the sparse-allreduce microbenchmark (the merge-kernel benchmark is the
developer's tool ``scripts/kernel_bench.py``)."""

from .inputs import PATTERNS, make_input
from .runner import BenchCase, run_case, run_cell

__all__ = ["PATTERNS", "make_input", "BenchCase", "run_case", "run_cell"]
