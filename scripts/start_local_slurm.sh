#!/usr/bin/env bash
# Bring up a single-node SLURM cluster on this machine (Debian's slurm-wlm and munge, no
# systemd), for tests/workflow/test_slurm.py and CI. Idempotent: installs the packages when
# missing, (re)writes the config, starts only the daemons that are not running, and waits until
# `sinfo` shows the node idle. Needs root.
#
# Partitions: `cpu` (default) and `gpu`, both on this node. The node declares one GRES
# `gpu:h100` with no device behind it, so `--gpus=h100:1` jobs are scheduled (and the GPU guard
# in score-shard then fails them, as there is no CUDA device). Accounting is off, so the SLURM
# profiles' `slurm-status-command: squeue` is what works here (MinJobAge keeps finished jobs
# visible to squeue).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
    echo "start_local_slurm.sh: must run as root" >&2
    exit 1
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi

node=$(hostname -s)
conf_dir=/etc/slurm
install -d -m 0755 "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge

# munge: a key shared by every daemon and client on the node
if [[ ! -s /etc/munge/munge.key ]]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

# the node's real CPUs and memory, as slurmd measures them (a mismatch drains the node)
hardware=$(slurmd -C | head -n 1 | sed -E 's/^NodeName=[^ ]+ //')

cat >"$conf_dir/slurm.conf.new" <<EOF
# Written by scripts/start_local_slurm.sh: a single-node test cluster.
ClusterName=carbonvep
SlurmctldHost=${node}(127.0.0.1)
AuthType=auth/munge
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
GresTypes=gpu
NodeName=${node} NodeAddr=127.0.0.1 ${hardware} Gres=gpu:h100:1 State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL Default=NO MaxTime=INFINITE State=UP
EOF
# slurmd drops a GPU without a device file; /dev/null stands in for one (there is no GPU)
echo "NodeName=${node} Name=gpu Type=h100 File=/dev/null" >"$conf_dir/gres.conf.new"

changed=0
for name in slurm.conf gres.conf; do
    if ! cmp -s "$conf_dir/$name.new" "$conf_dir/$name"; then
        mv "$conf_dir/$name.new" "$conf_dir/$name"
        changed=1
    else
        rm "$conf_dir/$name.new"
    fi
done

running() { pgrep -x "$1" >/dev/null; }

running munged || runuser -u munge -- /usr/sbin/munged
if [[ $changed -eq 1 ]]; then
    # a new node definition (GRES) needs fresh daemons: stop the ones this script started
    for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
        if [[ -s $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null; then
            while kill -0 "$(cat "$pidfile")" 2>/dev/null; do sleep 0.2; done
        fi
    done
fi
running slurmctld || /usr/sbin/slurmctld
running slurmd || /usr/sbin/slurmd

# wait for the controller, then for the node to be idle (resume it if a restart left it down)
for _ in $(seq 60); do
    state=$(sinfo -h -N -n "$node" -o %T 2>/dev/null | head -n 1 || true)
    case "$state" in
        idle | mixed | allocated) break ;;
        down* | drain* | fail* | inval*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
sinfo
case "$state" in
    idle | mixed | allocated) echo "local SLURM ready: node $node ($state)" ;;
    *)
        echo "local SLURM: node $node is '$state', not idle; see /var/log/slurm/" >&2
        exit 1
        ;;
esac
