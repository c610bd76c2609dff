#!/usr/bin/env bash
# Rank wrapper for jobs/emulate.sh: run one MPI rank inside its emulated node's namespace.
#
# mpiexec (hydra, -launcher fork) starts this in the host namespace with PMI_RANK set; rank r
# belongs to node r / SPARC_NETNS_PPN, namespace $SPARC_NETNS_NAME-n<node>. The PMI connection is
# an inherited file descriptor, so it survives the move. FI_TCP_IFACE pins libfabric's tcp
# provider to the node's shaped link. Each node also gets its own UTS namespace with the
# namespace's name as host name, so records count the emulated nodes as nodes.
set -euo pipefail
rank="${PMI_RANK:?netns-rank.sh: no PMI_RANK; start it through jobs/emulate.sh}"
name="${SPARC_NETNS_NAME:?netns-rank.sh: SPARC_NETNS_NAME not set}"
ppn="${SPARC_NETNS_PPN:?netns-rank.sh: SPARC_NETNS_PPN not set}"
ns="$name-n$((rank / ppn))"
exec ip netns exec "$ns" unshare --uts -- \
    sh -c 'hostname "$1" && shift && exec env FI_TCP_IFACE=sparc0 "$@"' sh "$ns" "$@"
