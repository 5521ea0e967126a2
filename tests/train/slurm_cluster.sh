#!/bin/sh
# A Slurm cluster of one machine, for the tests that start ft under srun and
# sbatch: munged, slurmctld and slurmd run as root with everything in DIR
# (configuration, key, socket, state, logs) and ports of their own, so they
# touch nothing of a Slurm the machine may already have.
#
#   slurm_cluster.sh start DIR   exit 0 once the node takes jobs; DIR/slurm.conf
#                                is the configuration for srun and sbatch
#   slurm_cluster.sh stop DIR    stops the three daemons
set -eu
what=$1
dir=$(realpath -m "$2")

stop() {
  for daemon in slurmd slurmctld munged; do
    [ -s "$dir/$daemon.pid" ] && kill "$(cat "$dir/$daemon.pid")" 2>/dev/null || true
  done
}

case $what in
stop)
  stop
  exit 0
  ;;
start) ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
host=$(hostname -s)
port=$((20000 + $$ % 20000))
head -c 1024 /dev/urandom >"$dir/munge.key"
chmod 600 "$dir/munge.key"
cat >"$dir/slurm.conf" <<EOF
ClusterName=ft
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=ft Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF

munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 60); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && exit 0
  sleep 0.5
done
echo "slurm_cluster.sh: the node did not become idle within 30 s; logs in $dir/log" >&2
stop
exit 1
