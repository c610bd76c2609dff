#!/usr/bin/env bash
# The main job: the sparse-allreduce microbenchmark on a small sweep over 4 ranks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/venv.sh"
cd "$root"
# sparc-mpiexec: the venv's mpiexec (MPICH or Open MPI) with the flags it needs
sparc-mpiexec -n 4 sparc-bench --preset small --output results/main.jsonl "$@"
