#!/usr/bin/env bash
# Stop the single-node Slurm cluster that jobs/slurm-local-up.sh started.
#
# Usage: sudo bash jobs/slurm-local-down.sh [--purge]
# Cancels its jobs, stops only the daemons whose pids up.sh recorded in $SPARC_SLURM_DIR
# (default /tmp/sparc-slurm) -- slurmd, slurmctld, and munged when up.sh started it -- and with
# --purge removes that directory. Safe to run twice; never fails because something is already down.
set -uo pipefail

dir="${SPARC_SLURM_DIR:-/tmp/sparc-slurm}"
export SLURM_CONF="$dir/slurm.conf"

if [[ -e "$SLURM_CONF" ]] && command -v scancel >/dev/null 2>&1; then
    timeout 10 scancel --quiet --full --partition=debug 2>/dev/null || true
fi

stop() {  # stop <pidfile>: TERM, wait up to 10 s, then KILL
    local pidfile="$1" pid
    [[ -s "$pidfile" ]] || return 0
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
}

stop "$dir/slurmd.pid"
stop "$dir/slurmctld.pid"
stop "$dir/munged.pid"

if [[ "${1:-}" == "--purge" ]]; then
    rm -rf "$dir"
fi
exit 0
