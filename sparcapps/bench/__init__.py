"""``sparc-bench``: the sparse-allreduce microbenchmark and the merge-kernel benchmark."""

from .inputs import PATTERNS, make_input
from .kernel_bench import bench_merge_add
from .runner import BenchCase, run_case, run_cell

__all__ = ["PATTERNS", "make_input", "bench_merge_add", "BenchCase", "run_case", "run_cell"]
