#!/usr/bin/env bash
# A small SLURM cluster on this one machine (Debian's slurm-wlm 22.05 and
# munge), for tests/integration/test_slurm.py: launch/slurm.sbatch runs under it as on a
# real cluster. Four nodes, each its own slurmd on 127.0.0.1:
#   partition cpu (default): cpu1, cpu2 -- 4 CPUs each, no GPUs
#   partition gpu:           gpu2 (2 GPUs, 4 CPUs), gpu8 (8 GPUs, 8 CPUs)
# The node sizes are declared, not detected (the machine may have 2 cores);
# the GPUs are GRES entries backed by dummy device files, so jobs can ask for
# GPUs and the tests check which GPU each task would drive, while the tasks
# run JAX on the CPU. Idempotent: once everything is up it returns at once.
set -euo pipefail

etc=/etc/slurm
state=/var/lib/slurm
logs=/var/log/slurm
# Outside /dev: a /dev/nvidia0 would make JAX think this machine has a GPU.
gpu_files="${state}/dummy-gpus"
nodes=(cpu1 cpu2 gpu2 gpu8)
host="$(hostname -s)"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

# The node names must resolve: JAX's coordinator is the job's first node.
if ! grep -qw cpu1 /etc/hosts; then
  echo "127.0.0.1 ${nodes[*]}" >> /etc/hosts
fi

mkdir -p "${etc}" "${state}/slurmctld" "${logs}" "${gpu_files}"
for node in "${nodes[@]}"; do mkdir -p "${state}/slurmd-${node}"; done
for i in 0 1 2 3 4 5 6 7; do  # NVIDIA's device numbers; nothing opens them.
  [ -c "${gpu_files}/nvidia${i}" ] || mknod "${gpu_files}/nvidia${i}" c 195 "${i}"
done

# One slurmd per node, all on this machine, told apart by their ports.
node() { echo "NodeName=$1 NodeHostname=${host} NodeAddr=127.0.0.1 Port=$2 ${*:3}"; }
config="$(cat <<EOF
# Written by .ci/slurm_setup.sh: a test cluster on one machine.
ClusterName=ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# No cgroups inside a container: track processes by parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Trust the node lines below over the hardware.
SlurmdParameters=config_overrides
GresTypes=gpu
# A job no node can run is refused at once, not left pending.
EnforcePartLimits=ALL
MpiDefault=none
ReturnToService=2
StateSaveLocation=${state}/slurmctld
SlurmdSpoolDir=${state}/slurmd-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=${logs}/slurmctld.log
SlurmdLogFile=${logs}/slurmd-%n.log
# No database, so no sacct: scontrol shows a job for 5 minutes after its
# end, and jobcomp.log keeps a line for each job.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=${logs}/jobcomp.log
NodeName=DEFAULT RealMemory=2000 State=UNKNOWN
$(node cpu1 6821 CPUs=4)
$(node cpu2 6822 CPUs=4)
$(node gpu2 6823 CPUs=4 Gres=gpu:2)
$(node gpu8 6824 CPUs=8 Gres=gpu:8)
PartitionName=cpu Nodes=cpu[1-2] Default=YES MaxTime=10 State=UP
PartitionName=gpu Nodes=gpu2,gpu8 MaxTime=10 State=UP
EOF
)"
gres="$(cat <<EOF
AutoDetect=off
NodeName=gpu2 Name=gpu File=${gpu_files}/nvidia[0-1]
NodeName=gpu8 Name=gpu File=${gpu_files}/nvidia[0-7]
EOF
)"

changed=0
if [ "$(cat "${etc}/slurm.conf" 2>/dev/null)" != "${config}" ]; then
  echo "${config}" > "${etc}/slurm.conf"
  changed=1
fi
if [ "$(cat "${etc}/gres.conf" 2>/dev/null)" != "${gres}" ]; then
  echo "${gres}" > "${etc}/gres.conf"
  changed=1
fi

# Whether the daemon of a pid file runs (a zombie or a reused pid does not).
running() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [[ "$(ps -o stat=,comm= -p "${pid}" 2>/dev/null)" =~ ^[^Z].*\ $2$ ]]
}
stop() {
  running "$1" "$2" || return 0
  kill "$(cat "$1")"
  for _ in $(seq 100); do running "$1" "$2" || return 0; sleep 0.1; done
  kill -9 "$(cat "$1")"
}

if ! { munge -n </dev/null | unmunge; } >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
if [ "${changed}" = 1 ]; then  # Daemons that read an older configuration.
  for node in "${nodes[@]}"; do stop "/run/slurmd-${node}.pid" slurmd; done
  stop /run/slurmctld.pid slurmctld
fi
running /run/slurmctld.pid slurmctld || slurmctld
for node in "${nodes[@]}"; do
  running "/run/slurmd-${node}.pid" slurmd || slurmd -N "${node}"
done

for _ in $(seq 100); do  # Every node up: idle, or running jobs.
  states="$(sinfo -h -N -o %t 2>/dev/null | sort -u)"
  if [ -n "${states}" ] && ! grep -qvxE 'idle|mix|alloc' <<<"${states}"; then
    exit 0
  fi
  sleep 0.3
done
echo "SLURM did not come up; see ${logs}/slurmctld.log and slurmd-*.log:" >&2
sinfo -N >&2 || true
exit 1
