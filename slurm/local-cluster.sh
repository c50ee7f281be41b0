#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the `slurm` test tier and for trying
# `hawkes-run submit` without a cluster. Root on Debian/Ubuntu; no systemd needed.
#
#   bash slurm/local-cluster.sh up       # install (apt), configure, start munged/slurmctld/slurmd
#   bash slurm/local-cluster.sh status   # daemons, sinfo; exit 0 only when the node is usable
#   bash slurm/local-cluster.sh down     # stop the daemons (configuration and packages stay)
#
# Idempotent: `up` on a running cluster only checks it. The node offers 8 fake GPUs (gres on
# /dev/tty0..7; Slurm sets CUDA_VISIBLE_DEVICES for them as for real ones; its TaskProlog sets
# HAWKES_OPENCL_DEVICE=cpu in every job unless set, since hawkes-run refuses the CPU where Slurm
# gives GPUs) and
# max(CPUs, $HAWKES_SLURM_CPUS, 16) CPUs, so a 2 chains x 2 ranks job fits on a small machine.
# It writes /etc/slurm/slurm.conf and gres.conf (refusing to replace files it did not write),
# keeps state in /var/lib/hawkes-slurm and logs in /var/log/hawkes-slurm.
# Accounting: none (no slurmdbd); finished jobs go to the jobcomp/filetxt log.
set -euo pipefail

ETC=/etc/slurm
STATE=/var/lib/hawkes-slurm
LOGS=/var/log/hawkes-slurm
MARK="# written by hawkes slurm/local-cluster.sh"
PARTITION=${HAWKES_SLURM_PARTITION:-debug}

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*"; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts system daemons)"
}

alive() {  # pidfile -> 0 when that process runs
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || die "slurmctld/slurmd/munge missing and no apt-get here"
    say "installing slurmctld slurmd slurm-client munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

write_if_ours() {  # path, content: write unless a foreign file is there
    local path=$1 content=$2
    if [ -e "$path" ] && ! head -n2 "$path" | grep -qF "$MARK"; then  # (2: a #! line first)
        die "$path exists and was not written by this script; not touching a real cluster"
    fi
    if [ "$(cat "$path" 2>/dev/null)" != "$content" ]; then
        printf '%s\n' "$content" >"$path.tmp"
        mv "$path.tmp" "$path"
        return 0
    fi
    return 1
}

configure() {
    local host cpus mem real_cpus
    host=$(hostname -s)
    real_cpus=$(nproc --all)
    cpus=$(( real_cpus > ${HAWKES_SLURM_CPUS:-16} ? real_cpus : ${HAWKES_SLURM_CPUS:-16} ))
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$ETC" "$STATE/ctld" "$STATE/d" "$LOGS"
    write_if_ours "$ETC/slurm.conf" "$MARK
ClusterName=hawkes-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobRequeue=1
TaskProlog=$STATE/task-prolog.sh
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=600
KillWait=10
InactiveLimit=0
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:8 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP" && CHANGED=1
    # 8 fake GPUs on character devices; where /dev/tty0..7 are missing (some containers), on
    # links to /dev/null (Slurm wants character devices; nothing constrains devices here)
    local files="/dev/tty[0-7]" i
    for i in 0 1 2 3 4 5 6 7; do
        if [ "${HAWKES_SLURM_FAKE_FILES:-0}" = 1 ] || [ ! -c "/dev/tty$i" ]; then
            files="$STATE/gpu[0-7]"
            break
        fi
    done
    if [ "$files" != "/dev/tty[0-7]" ]; then
        for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$STATE/gpu$i"; done
    fi
    write_if_ours "$ETC/gres.conf" "$MARK
AutoDetect=off
NodeName=$host Name=gpu File=$files" && CHANGED=1
    # the GPUs are fake: jobs name the CPU OpenCL device (an engine.device in the config, or
    # a HAWKES_OPENCL_DEVICE the job already has, wins); a TaskProlog's "export" lines set the
    # task's environment
    write_if_ours "$STATE/task-prolog.sh" "#!/bin/sh
$MARK
[ -n \"\${HAWKES_OPENCL_DEVICE:-}\" ] || echo export HAWKES_OPENCL_DEVICE=cpu" && CHANGED=1
    chmod 0755 "$STATE/task-prolog.sh"
    write_if_ours "$ETC/cgroup.conf" "$MARK
CgroupPlugin=autodetect
IgnoreSystemd=yes" && CHANGED=1
    return 0
}

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && pgrep -x munged >/dev/null; then
        return
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
    fi
    chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do
        [ -S /run/munge/munge.socket.2 ] && return
        sleep 0.1
    done
    die "munged did not start (see /var/log/munge/munged.log)"
}

wait_node() {  # wait until the node takes jobs
    local state
    for _ in $(seq 120); do
        state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n1 || true)
        case "$state" in
            idle* | mixed* | allocated*) return 0 ;;
            down* | drain*) scontrol update nodename="$(hostname -s)" state=resume \
                >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node not ready (state '${state:-none}'); see $LOGS/slurmctld.log and $LOGS/slurmd.log"
}

up() {
    need_root
    install_packages
    CHANGED=0
    configure
    start_munge
    if [ "$CHANGED" -eq 1 ] && alive "$STATE/slurmctld.pid"; then
        say "configuration changed: restarting the daemons"
        down
        start_munge
    fi
    alive "$STATE/slurmctld.pid" || slurmctld
    alive "$STATE/slurmd.pid" || slurmd
    wait_node
    say "up: $(sinfo -h -o '%P %D node(s) %c CPUs %G %T')"
}

stop_pidfile() {
    local pidfile=$1 pid
    alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

down() {
    need_root
    stop_pidfile "$STATE/slurmd.pid"
    stop_pidfile "$STATE/slurmctld.pid"
    say "down (munged left running; configuration in $ETC, state in $STATE)"
}

status() {
    local rc=0
    for d in slurmctld slurmd; do
        if alive "$STATE/$d.pid"; then
            say "$d running (pid $(cat "$STATE/$d.pid"))"
        else
            say "$d not running"
            rc=1
        fi
    done
    if command -v sinfo >/dev/null && sinfo -h >/dev/null 2>&1; then
        sinfo -N -o '%N %P %c %G %T'
        sinfo -h -N -o '%T' | grep -Eq '^(idle|mixed|allocated)' || rc=1
    else
        say "sinfo cannot reach a controller"
        rc=1
    fi
    return "$rc"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) die "usage: $0 {up|down|status}" ;;
esac
