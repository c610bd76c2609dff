#!/usr/bin/env bash
# An emulated cluster network on one machine: N "nodes" as Linux network namespaces, each joined
# by a veth pair to a bridge (the "switch", itself in a namespace of its own), every link shaped to
# RATE in both directions with `tc tbf`. Nothing is added to the host's own namespace: the only
# addresses are 10.213.0.0/24 inside these namespaces (the subnet can be reused by concurrent
# networks because each lives in its own namespaces).
#
# Usage (root):
#   jobs/emulated-net.sh up NAME NODES RATE   # e.g. up sparc42 4 1gbit; prints the namespaces
#   jobs/emulated-net.sh down NAME            # deletes NAME-sw, NAME-n0 ... (idempotent)
#   jobs/emulated-net.sh list NAME            # the namespaces of NAME that exist
#
# Node i is namespace NAME-n<i>, interface sparc0 (address 10.213.0.<i+1>); the switch is NAME-sw
# with ports p<i> on bridge br0. RATE is anything `tc` accepts as a rate (100mbit, 1gbit, 10gbit).
# netem is not assumed: links have bandwidth, no added delay. NAME: letters and digits, at most 10.
#
# Shaping that holds for small messages too: frames of SPARC_FRAME bytes (default 9000, jumbo
# frames; GSO limited to one frame), and besides tbf's bucket (SPARC_TBF_BURST_MS, default 4 ms
# at RATE) a peak-rate bucket of two frames at 1.05 RATE, so that a link that has been idle
# does not pass its bucket at memory speed. TCP keeps its window across idle moments
# (tcp_slow_start_after_idle=0 in each node), as an HPC fabric's transport does.
# `up` tears down what it built when any step fails. jobs/emulate.sh runs a command on such a
# network and always tears it down.
set -euo pipefail

die() { echo "emulated-net: $*" >&2; exit 1; }

check_name() {
    [[ "$1" =~ ^[A-Za-z][A-Za-z0-9]{0,9}$ ]] || die "NAME must be letters/digits, at most 10, got '$1'"
}

shaping_for() {  # "BURST PEAKBITS FRAME": tbf bucket (SPARC_TBF_BURST_MS ms at RATE, at least
                # 64 KiB), peak rate (1.05 RATE, bits/s), frame size (SPARC_FRAME, 1500..65535)
    SPARC_TBF_BURST_MS="${SPARC_TBF_BURST_MS:-4}" SPARC_FRAME="${SPARC_FRAME:-9000}" python3 - "$1" <<'EOF'
import os
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmgt]?)bit", sys.argv[1].lower())
if not m:
    sys.exit(f"emulated-net: rate must look like 100mbit or 1gbit, got {sys.argv[1]!r}")
frame = os.environ["SPARC_FRAME"]
if not frame.isdigit() or not 1500 <= int(frame) <= 65535:
    sys.exit(f"emulated-net: SPARC_FRAME must be a frame size in bytes, 1500..65535, got {frame!r}")
bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
print(max(int(bits / 8 * float(os.environ['SPARC_TBF_BURST_MS']) / 1e3), 65536),
      int(bits * 1.05), frame)
EOF
}

net_list() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-(sw|n[0-9]+)$" || true
}

net_down() {
    local ns
    for ns in $(net_list "$1"); do ip netns del "$ns" 2>/dev/null || true; done
}

net_up() {
    local name="$1" nodes="$2" rate="$3" shaping burst peak frame tbf i sw ns
    check_name "$name"
    [[ "$nodes" =~ ^[1-9][0-9]*$ && "$nodes" -le 250 ]] || die "NODES must be 1..250, got '$nodes'"
    [[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces)"
    ip netns list >/dev/null 2>&1 || die "'ip netns' is not available here"
    shaping="$(shaping_for "$rate")" || exit 1
    read -r burst peak frame <<<"$shaping"
    # the peak bucket holds two frames (and their headers): bursts of at most that at 1.05 RATE
    tbf=(tbf rate "$rate" burst "$burst" latency 100ms peakrate "${peak}bit" mtu $((2 * frame + 200)))
    [[ -z "$(net_list "$name")" ]] || die "namespaces $name-* already exist; run: $0 down $name"
    trap 'net_down "$name"' ERR
    sw="$name-sw"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for ((i = 0; i < nodes; i++)); do
        ns="$name-n$i"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
        ip link add name sparc0 netns "$ns" type veth peer name "p$i" netns "$sw"
        ip -n "$ns" link set sparc0 mtu "$frame" gso_max_size "$frame"
        ip -n "$sw" link set "p$i" mtu "$frame" gso_max_size "$frame"
        ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev sparc0
        ip -n "$ns" link set sparc0 up
        ip -n "$sw" link set "p$i" master br0
        ip -n "$sw" link set "p$i" up
        # upload (node -> switch) and download (switch -> node), each shaped to RATE
        ip netns exec "$ns" tc qdisc add dev sparc0 root "${tbf[@]}"
        ip netns exec "$sw" tc qdisc add dev "p$i" root "${tbf[@]}"
    done
    trap - ERR
    net_list "$name"
}

case "${1:-}" in
    up)   [[ $# -eq 4 ]] || die "usage: $0 up NAME NODES RATE"; net_up "$2" "$3" "$4" ;;
    down) [[ $# -eq 2 ]] || die "usage: $0 down NAME"; check_name "$2"; net_down "$2" ;;
    list) [[ $# -eq 2 ]] || die "usage: $0 list NAME"; check_name "$2"; net_list "$2" ;;
    *)    die "usage: $0 up NAME NODES RATE | down NAME | list NAME" ;;
esac
