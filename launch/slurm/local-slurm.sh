#!/usr/bin/env bash
# A real Slurm on this one Linux machine, for rehearsing and testing the Slurm path of tcpx-perf
# (launch/slurm/a3-high.sbatch, `srun --mpi=pmix`) without a cluster. docs/slurm.md.
#
#   launch/slurm/local-slurm.sh up        start munged, slurmctld and slurmd (idempotent)
#   launch/slurm/local-slurm.sh status    what runs, sinfo; exit 0 only when the node is up
#   launch/slurm/local-slurm.sh env       the line to eval so srun/sbatch/squeue find this Slurm
#   launch/slurm/local-slurm.sh down      stop what `up` started, remove what it made (idempotent)
#
# Debian 12's Slurm 22.05 and MUNGE (apt-get install slurmctld slurmd slurm-client munge; the
# PMIx plugin, mpi_pmix.so, comes with slurm-wlm-basic-plugins). Nothing outside the state
# directory is written: its own munge key and socket, its own slurm.conf (clients find it through
# SLURM_CONF, which `env` prints), spool, state and logs. The daemons run as root
# (SlurmUser=root): acceptable for a throwaway test cluster on a box that is already yours, not
# for a shared one. No cgroups (proctrack/linuxproc, task/none), so it also runs in containers.
# One node, this host, addressed on 127.0.0.1: no network beyond loopback.
#
# Environment: LOCAL_SLURM_DIR (state directory, default /var/tmp/tcpx-local-slurm),
# LOCAL_SLURM_SLOTS (CPUs the node declares, default max(nproc, 8): an A3-high job's 8 tasks fit
# on a smaller box, oversubscribing its cores), LOCAL_SLURM_PORT (slurmctld's port, default 6817;
# slurmd takes the next one).
# Exit 77 (with one line saying what is missing) where Slurm cannot run here: not root, packages
# missing.
set -euo pipefail

DIR=${LOCAL_SLURM_DIR:-/var/tmp/tcpx-local-slurm}
PORT=${LOCAL_SLURM_PORT:-6817}
MARK="$DIR/.made-by-local-slurm"
CONF="$DIR/etc/slurm.conf"
SOCKET="$DIR/munge/munge.socket"
NODE=$(hostname -s)

die() {
  echo "local-slurm.sh: $*" >&2
  exit 1
}
cannot() {
  echo "local-slurm.sh: cannot run Slurm here: $*" >&2
  exit 77
}

# Every wait has a deadline: "until CMD succeeds, at most $1 seconds".
wait_for() {
  local limit=$1
  shift
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

need_tools() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (the daemons run as SlurmUser=root)"
  local missing=()
  for tool in munged slurmctld slurmd srun sbatch scontrol; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] || cannot "${missing[*]} not found: apt-get install slurmctld slurmd slurm-client munge (or bash launch/setup.sh)"
  [ -n "$(plugin_dir)" ] || cannot "Slurm's mpi_pmix.so not found: apt-get install slurm-wlm-basic-plugins"
}

# The directory that holds Slurm's plugins (mpi_pmix.so among them).
plugin_dir() {
  local d
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    [ -f "$d/mpi_pmix.so" ] && { echo "$d"; return; }
  done
}

pid_of() { [ -f "$DIR/run/$1.pid" ] && cat "$DIR/run/$1.pid"; }
running() {
  local pid
  pid=$(pid_of "$1") || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

write_config() {
  local slots cpus
  cpus=$(nproc)
  slots=${LOCAL_SLURM_SLOTS:-$((cpus > 8 ? cpus : 8))}
  [[ $slots =~ ^[1-9][0-9]*$ ]] || die "LOCAL_SLURM_SLOTS=$slots: give a positive number of CPUs for the node"
  if ! [[ $PORT =~ ^[1-9][0-9]*$ ]] || [ "$PORT" -ge 65535 ]; then
    die "LOCAL_SLURM_PORT=$PORT: give a free TCP port (1..65534)"
  fi
  cat >"$CONF" <<CONF
# Written by launch/slurm/local-slurm.sh: a one-node test cluster on $NODE ($cpus cores).
ClusterName=tcpxlocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
PluginDir=$(plugin_dir)
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups: processes are tracked by parentage, tasks are not confined (containers allow both).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Job ids that do not repeat after down/up (results/slurm-<job id> would exist already): seconds.
FirstJobId=$(($(date +%s) % 60000000 + 1))
# A task that outlives its job's end by this much is killed; scancel's SIGTERM comes first.
KillWait=10
# The node declares $slots CPUs on $cpus cores (config_overrides: slurmd believes slurm.conf).
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$slots State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

up() {
  need_tools
  if [ -d "$DIR" ] && [ ! -f "$MARK" ]; then
    die "$DIR exists and was not made by local-slurm.sh: set LOCAL_SLURM_DIR to a new directory"
  fi
  mkdir -p "$DIR"
  chmod 700 "$DIR"
  touch "$MARK"
  mkdir -p "$DIR"/{etc,munge,run,log,state,spool}
  chmod 700 "$DIR/munge"
  if ! running munged; then
    [ -f "$DIR/etc/munge.key" ] || { dd if=/dev/urandom of="$DIR/etc/munge.key" bs=1024 count=1 status=none && chmod 400 "$DIR/etc/munge.key"; }
    munged --force --key-file="$DIR/etc/munge.key" --socket="$SOCKET" --pid-file="$DIR/run/munged.pid" \
      --log-file="$DIR/log/munged.log" --seed-file="$DIR/state/munged.seed" ||
      die "munged did not start: $(tail -3 "$DIR/log/munged.log" 2>/dev/null)"
    wait_for 10 munge -S "$SOCKET" -n || die "munged does not answer on $SOCKET: $(tail -3 "$DIR/log/munged.log" 2>/dev/null)"
  fi
  write_config
  export SLURM_CONF=$CONF
  if ! running slurmctld; then
    # -c: a fresh controller (no jobs or node states from an earlier `up`); -i: ignore an old state file.
    slurmctld -c -i -f "$CONF" || die "slurmctld did not start: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
    wait_for 20 scontrol ping || die "slurmctld does not answer on port $PORT: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
  fi
  if ! running slurmd; then
    slurmd -f "$CONF" -N "$NODE" || die "slurmd did not start: $(tail -5 "$DIR/log/slurmd.log" 2>/dev/null)"
  fi
  node_idle() { sinfo -h -n "$NODE" -o %T | grep -Eq '^(idle|mixed|allocated)'; }
  wait_for 30 node_idle || die "node $NODE did not come up: sinfo says '$(sinfo -h -n "$NODE" -o '%T %E' 2>&1)'; $DIR/log/slurmd.log: $(tail -3 "$DIR/log/slurmd.log" 2>/dev/null)"
  echo "local-slurm.sh: up: node $NODE ($(sinfo -h -n "$NODE" -o '%c CPUs, %T'))"
  echo "export SLURM_CONF=$CONF"
}

status() {
  local d ok=0
  for d in munged slurmctld slurmd; do
    if running "$d"; then echo "$d: running (pid $(pid_of "$d"))"; else echo "$d: not running"; ok=1; fi
  done
  if [ "$ok" -eq 0 ]; then
    SLURM_CONF=$CONF sinfo -N -o '%N %T %c' || ok=1
    SLURM_CONF=$CONF squeue || ok=1
  fi
  return "$ok"
}

# Stops one daemon by its pid file: SIGTERM, then SIGKILL after 10 s.
stop() {
  local pid
  pid=$(pid_of "$1") || return 0
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  if ! wait_for 10 bash -c "! kill -0 $pid"; then
    echo "local-slurm.sh: $1 (pid $pid) ignored SIGTERM for 10 s: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
  fi
}

down() {
  [ -d "$DIR" ] || { echo "local-slurm.sh: down: nothing to do ($DIR does not exist)"; return; }
  [ -f "$MARK" ] || die "$DIR was not made by local-slurm.sh: not touching it"
  export SLURM_CONF=$CONF
  if running slurmctld; then
    # Jobs first, so their steps end through slurmd (which kills what it started) before it stops.
    no_jobs() { [ -z "$(squeue -h -o %i)" ]; }
    no_jobs || squeue -h -o %i | xargs scancel --full --quiet || true
    wait_for 20 no_jobs || echo "local-slurm.sh: jobs still listed after 20 s: $(squeue -h 2>&1)" >&2
  fi
  stop slurmd
  stop slurmctld
  stop munged
  rm -rf "$DIR"
  echo "local-slurm.sh: down: stopped, $DIR removed"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *)
    echo "usage: launch/slurm/local-slurm.sh up|down|status|env" >&2
    exit 64
    ;;
esac
