#!/usr/bin/env bash
# Run an MPI command on an emulated cluster network: NODES namespaces joined by links of RATE.
#
# Usage (root):
#   jobs/emulate.sh [--ranks-per-node R] NODESxRATE -- COMMAND [ARGS...]
#   jobs/emulate.sh 4x1gbit -- sparc-bench --N 16777216 --density 0.001 0.01 --output r.jsonl
#
# Builds the network with jobs/emulated-net.sh (a fresh name per run), then runs
#   mpiexec -launcher fork -hosts 127.0.0.1,...,127.0.0.NODES -ppn R -n NODES*R \
#       jobs/netns-rank.sh COMMAND ARGS...
# with MPICH over TCP (MPIR_CVAR_CH4_NETMOD=ofi, FI_PROVIDER=tcp): hydra starts one proxy per
# "host" (all on loopback), and each rank moves into its node's namespace, so ranks of different
# nodes talk only over the shaped links; ranks of one node share memory, as on a real node.
# The network is torn down when the command ends, fails or is interrupted. Exit status: the
# command's. The command sees SPARC_EMULATED_NET (e.g. 4x1gbit,ppn=1; result records carry it in
# environment.emulated_network) and host names NAME-n<i>. MPIEXEC overrides the launcher path (default: the mpiexec on PATH).
# MPICH only: Open MPI's mpiexec has no "-launcher fork" with one proxy per loopback host, and
# its daemons would need a route from each namespace to the host's; with an Open MPI mpiexec
# this script exits 2 before building anything (use a venv with the [mpich] extra).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "emulate: $*" >&2; exit 2; }
usage="usage: $0 [--ranks-per-node R] NODESxRATE -- COMMAND [ARGS...]"

ppn=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --ranks-per-node) [[ $# -ge 2 ]] || die "$usage"; ppn="$2"; shift 2 ;;
        --ranks-per-node=*) ppn="${1#*=}"; shift ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) break ;;
    esac
done
[[ $# -ge 3 && "$2" == "--" ]] || die "$usage"
spec="$1"; shift 2
[[ "$spec" =~ ^([1-9][0-9]*)x([0-9.]+[kmgtKMGT]?bit)$ ]] \
    || die "expected NODESxRATE such as 4x1gbit or 8x100mbit, got '$spec'"
nodes="${BASH_REMATCH[1]}"
rate="${BASH_REMATCH[2],,}"
[[ "$ppn" =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node must be a positive integer, got '$ppn'"
mpiexec="${MPIEXEC:-$(command -v mpiexec || true)}"
[[ -n "$mpiexec" ]] || die "no mpiexec on PATH (activate the venv or set MPIEXEC)"
# grep reads all of it (-q would exit at the first match: mpiexec's next write then gets
# SIGPIPE, and under pipefail the check fails now and then)
"$mpiexec" --version 2>/dev/null | grep HYDRA >/dev/null \
    || die "$mpiexec is not MPICH's (Hydra) mpiexec; the emulated network needs Hydra's" \
           "'-launcher fork -hosts' (Open MPI cannot run here): use a venv with the [mpich] extra"

name="sparc$(( $$ % 100000 ))"
cleanup() { bash "$here/emulated-net.sh" down "$name"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash "$here/emulated-net.sh" up "$name" "$nodes" "$rate" >/dev/null

hosts="$(seq -s, -f '127.0.0.%g' 1 "$nodes")"
echo "emulate: $nodes nodes x $ppn ranks, links $rate, namespaces $name-n0..$((nodes - 1))" >&2
set +e
SPARC_EMULATED_NET="${nodes}x${rate},ppn=$ppn" \
MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp SPARC_NETNS_NAME="$name" SPARC_NETNS_PPN="$ppn" \
    "$mpiexec" -launcher fork -hosts "$hosts" -ppn "$ppn" -n $((nodes * ppn)) \
    bash "$here/netns-rank.sh" "$@"
rc=$?
set -e
exit "$rc"
