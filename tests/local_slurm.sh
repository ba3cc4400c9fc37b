#!/usr/bin/env bash
# Bring up / tear down a throwaway single-node Slurm cluster (Debian 12:
# slurmctld + slurmd + slurm-client 22.05, munge), everything under one DIR.
#   local_slurm.sh start DIR   -> prints "export SLURM_CONF=DIR/slurm.conf"
#   local_slurm.sh stop DIR
# Exit 77 (+ one line on stderr) when it cannot run here, so tests can skip.
# Env: LOCAL_SLURM_PORT (slurmctld port, slurmd uses +1; default 6817),
#      LOCAL_SLURM_CPUS (CPUs advertised for the node; default nproc).
set -euo pipefail
skip() { echo "local_slurm: skip: $*" >&2; exit 77; }
die() { echo "local_slurm: error: $*" >&2; exit 1; }

verb=${1:-}; dir=${2:-}
[[ ( $verb == start || $verb == stop ) && -n $dir ]] || die "usage: $0 start|stop DIR"
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
conf=$dir/slurm.conf

# Kill by pid file, bounded (TERM, then KILL after ~10 s).
killpid() {
  local f=$1 pid
  [[ -s $f ]] || return 0
  pid=$(cat "$f"); kill "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

if [[ $verb == stop ]]; then
  export SLURM_CONF=$conf
  # Job processes (tasks, batch shells, srun) as slurmd tracks them.
  pids='' jobs=''
  [[ -s $dir/slurmd.pid ]] &&
    pids=$(timeout 5 scontrol listpids 2>/dev/null | awk 'NR > 1 { print $1 }' || true)
  # Cancel all jobs and give Slurm a bounded moment to tear them down itself.
  [[ -s $dir/slurmctld.pid ]] && jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
  # shellcheck disable=SC2086  # one job id per word
  if [[ -n $jobs ]] && timeout 5 scancel $jobs >/dev/null 2>&1; then
    for _ in $(seq 20); do
      # clean teardown: forget the pids (they could be reused by now)
      [[ -z $(timeout 5 squeue -h -t R,CG -o %i 2>/dev/null) ]] && { pids=; break; }
      sleep 0.5
    done
  fi
  killpid "$dir/slurmd.pid" & killpid "$dir/slurmctld.pid" & wait   # each takes 1-2 s
  # Orphaned slurmstepds (not children of slurmd; they rewrite their environ)
  # keep $dir/log/slurmd.log open: match exactly that, never a process name.
  for f in /proc/[0-9]*/fd/*; do
    [[ $(readlink "$f" 2>/dev/null) == "$dir/log/slurmd.log" ]] || continue
    p=${f#/proc/}; pids+=" ${p%%/*}"
  done
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  killpid "$dir/munged.pid"
  exit 0
fi

# ---- start ----
[[ $EUID -eq 0 ]] || skip "needs root (slurmd must run as root)"
for b in munged slurmctld slurmd sinfo srun sbatch scontrol; do
  command -v "$b" >/dev/null || skip "$b not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
[[ -e $dir/slurmctld.pid ]] && die "$dir already in use; run stop first"

host=$(hostname -s)
port=${LOCAL_SLURM_PORT:-6817}
cpus=${LOCAL_SLURM_CPUS:-$(nproc)}
mkdir -p "$dir"/{state,spool,log}
chmod 755 "$dir"   # clients of any uid must reach munge.sock; key itself is 0400

# Private munge instance: own key and socket, so /etc/munge is untouched.
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
  --seed-file="$dir/munge.seed" || die "munged failed, see $dir/log/munged.log"

: >"$dir/plugstack.conf"   # keep slurm away from /etc/slurm/plugstack.conf
cat >"$conf" <<EOF
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
# munge via our private socket (used by auth/munge and cred/munge)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
MailProg=/bin/true
# no cgroups: plain /proc process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# accept CPUs= different from what slurmd detects (LOCAL_SLURM_CPUS)
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# no slurmdbd: completed jobs go to a text file readable with "sacct -c"
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
# keep finished jobs visible to "scontrol show job" for an hour
MinJobAge=3600
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF

export SLURM_CONF=$conf
slurmctld -f "$conf" || die "slurmctld failed, see $dir/log/slurmctld.log"
slurmd -f "$conf" || die "slurmd failed, see $dir/log/slurmd.log"

# Bounded wait for the node to become idle.
for _ in $(seq 60); do
  st=$(sinfo -h -N -n "$host" -o %t 2>/dev/null || true)
  [[ $st == idle ]] && { echo "export SLURM_CONF=$conf"; exit 0; }
  sleep 0.5
done
echo "node state: '${st:-none}'; logs in $dir/log" >&2
die "node $host not idle after 30 s"
