#!/usr/bin/env bash
# Bring up a real single-node Slurm cluster on this machine, without systemd, for tests and demos.
#
# Usage:  sudo bash jobs/slurm-local-up.sh            # prints the SLURM_CONF line to export
#         export SLURM_CONF=/tmp/sparc-slurm/slurm.conf
#         sbatch --nodes=1 --ntasks-per-node=2 jobs/bench-strong.sbatch --preset small
#         sudo bash jobs/slurm-local-down.sh
#
# What it does (needs root):
#   1. installs Debian's slurmctld, slurmd, slurm-client and munge with apt-get when missing;
#   2. starts munged as the munge user (or reuses a munged that already answers);
#   3. writes slurm.conf into $SPARC_SLURM_DIR (default /tmp/sparc-slurm): one node, this host,
#      NodeAddr=127.0.0.1, CPUs=$SPARC_SLURM_CPUS (default 4), linuxproc process tracking, no
#      task plugin, no accounting; /etc/slurm is not touched, clients find the file by SLURM_CONF;
#   4. starts `slurmctld -D` and `slurmd -D` in the background (pids in $SPARC_SLURM_DIR/*.pid,
#      logs in $SPARC_SLURM_DIR/log/) and waits until the node is idle.
# Exit status 0 once the cluster accepts jobs; non-zero with the daemon logs' tail otherwise.
# Stop everything this script started with jobs/slurm-local-down.sh.
set -euo pipefail

dir="${SPARC_SLURM_DIR:-/tmp/sparc-slurm}"
cpus="${SPARC_SLURM_CPUS:-4}"
ctld_port="${SPARC_SLURM_CTLD_PORT:-6817}"
slurmd_port="${SPARC_SLURM_SLURMD_PORT:-6818}"
wait_s="${SPARC_SLURM_WAIT:-60}"

die() { echo "slurm-local-up: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts daemons)"

# ---- 1. packages
need=()
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if ((${#need[@]})); then
    echo "slurm-local-up: installing ${need[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 \
             && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; } \
        || die "apt-get install ${need[*]} failed"
fi

mkdir -p "$dir"/{log,spool/ctld,spool/d,run}
if [[ -s "$dir/slurmctld.pid" ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    die "a cluster started from $dir is already running; run jobs/slurm-local-down.sh first"
fi

# ---- 2. munge
if ! (munge -n 2>/dev/null | unmunge >/dev/null 2>&1); then
    [[ -s /etc/munge/munge.key ]] || {
        if command -v mungekey >/dev/null 2>&1; then mungekey --create --force >/dev/null
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
    }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- munged
    for _ in $(seq 50); do
        [[ -s /run/munge/munged.pid ]] && break
        sleep 0.1
    done
    cp /run/munge/munged.pid "$dir/munged.pid"   # we started it: down.sh stops it
    munge -n | unmunge >/dev/null || die "munged started but does not answer"
fi

# ---- 3. configuration
host="$(hostname -s)"
cat >"$dir/slurm.conf" <<EOF
# Written by jobs/slurm-local-up.sh: a single-node test cluster.
ClusterName=sparc-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

# ---- 4. daemons
slurmctld -D -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
echo $! >"$dir/slurmctld.pid"
slurmd -D -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 &
echo $! >"$dir/slurmd.pid"

state=""
for _ in $(seq $((wait_s * 5))); do
    state="$(sinfo -h -n "$host" -o %T 2>/dev/null | head -n1 || true)"
    for d in slurmctld slurmd; do
        kill -0 "$(cat "$dir/$d.pid")" 2>/dev/null || { state="$d exited"; break 2; }
    done
    case "$state" in
        idle|mixed|allocated) break ;;
        down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.2
done
if [[ ! "$state" =~ ^(idle|mixed|allocated)$ ]]; then
    echo "slurm-local-up: node $host not ready after ${wait_s}s (state '${state:-none}')" >&2
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 2>/dev/null || true
    exit 1
fi
echo "export SLURM_CONF=$SLURM_CONF"
