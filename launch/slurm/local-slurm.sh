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
# One node, this host, addressed on 127.0.0.1: no network beyond loopback. Or, with
# LOCAL_SLURM_RIG=I, the nodes of launch/cluster.sh's rig I (up first): one slurmd per node, in
# the node's network namespace under its host name node<n>, addressed on its management NIC, so
# `sbatch -N 2` lands on two rig nodes and their data NICs; slurmctld stays in the root namespace
# on the rig's management bridge (198.19.I.254).
#
# Environment: LOCAL_SLURM_DIR (state directory, default /var/tmp/tcpx-local-slurm),
# LOCAL_SLURM_SLOTS (CPUs the node declares, default max(nproc, 8): an A3-high job's 8 tasks fit
# on a smaller box, oversubscribing its cores), LOCAL_SLURM_PORT (slurmctld's port, default 6817;
# slurmd takes the next one), LOCAL_SLURM_RIG (a rig id, above) and CLUSTER_STATE_DIR (where
# that rig's state file is, as for launch/cluster.sh).
# A failed `up` leaves what it started to `down`, which stops it.
# Exit 77 (with one line saying what is missing) where Slurm cannot run here: not root, packages
# missing.
set -euo pipefail

DIR=${LOCAL_SLURM_DIR:-/var/tmp/tcpx-local-slurm}
PORT=${LOCAL_SLURM_PORT:-6817}
MARK="$DIR/.made-by-local-slurm"
CONF="$DIR/etc/slurm.conf"
SOCKET="$DIR/munge/munge.socket"
RIG=${LOCAL_SLURM_RIG:-}
CLUSTER_STATE_DIR=${CLUSTER_STATE_DIR:-/run/tcpx-cluster}
NODE=$(hostname -s)
# The Slurm nodes: this host, or the rig's nodes (nodes_of_rig).
NODES=("$NODE")
CTLD_ADDR=127.0.0.1

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
  [ ${#missing[@]} -eq 0 ] || cannot "${missing[*]} not found: apt-get install slurmctld slurmd slurm-client munge (or bash launch/setup.sh --tests)"
  [ -n "$(plugin_dir)" ] || cannot "Slurm's mpi_pmix.so not found: apt-get install slurm-wlm-basic-plugins"
}

# With LOCAL_SLURM_RIG: the rig's nodes from launch/cluster.sh's state file.
nodes_of_rig() {
  [ -n "$RIG" ] || return 0
  [[ $RIG =~ ^([0-9]|1[0-5])$ ]] || die "LOCAL_SLURM_RIG=$RIG: give the id (0..15) of a rig launch/cluster.sh made"
  local state="$CLUSTER_STATE_DIR/rig$RIG.env" n count
  [ -f "$state" ] || die "no rig $RIG is up ($state missing): CLUSTER_RIG=$RIG launch/cluster.sh up --nodes N --nics K first"
  count=$(sed -n 's/^NODES=//p' "$state")
  [[ $count =~ ^[1-9][0-9]*$ ]] || die "$state names no node count: bring the rig down and up again"
  NODES=()
  for n in $(seq 0 $((count - 1))); do NODES+=("node$n"); done
  CTLD_ADDR=198.19.$RIG.254
}

# "node3" -> the rig node's network namespace, as launch/cluster.sh names it.
ns_of() { if [ "$RIG" = 0 ]; then echo "$1"; else echo "r$RIG-$1"; fi; }

# The directory that holds Slurm's plugins (mpi_pmix.so among them).
plugin_dir() {
  local d
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    [ -f "$d/mpi_pmix.so" ] && { echo "$d"; return; }
  done
}

# Daemon names: munged, slurmctld, slurmd-<node> (one slurmd per node).
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
# Written by launch/slurm/local-slurm.sh: a test cluster of ${NODES[*]} on $NODE ($cpus cores).
ClusterName=tcpxlocal
SlurmctldHost=$NODE($CTLD_ADDR)
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
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
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
# Each node declares $slots CPUs on $cpus cores (config_overrides: slurmd believes slurm.conf).
SlurmdParameters=config_overrides
CONF
  if [ -z "$RIG" ]; then
    echo "NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$slots State=UNKNOWN" >>"$CONF"
  else
    local n
    for n in "${!NODES[@]}"; do
      echo "NodeName=${NODES[$n]} NodeAddr=198.19.$RIG.$((n + 1)) CPUs=$slots State=UNKNOWN" >>"$CONF"
    done
  fi
  echo "PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$CONF"
  echo "PMIxCliTmpDirBase=$DIR/pmix" >"$DIR/etc/mpi.conf"
}

# Runs a daemon's start command with none of the caller's descriptors but stdout and stderr
# (stdin from /dev/null): a daemon forks into the background keeping what it inherited, so
# `flock LOCK local-slurm.sh up` held LOCK until `down`, and any pipe or file a caller opened
# stayed open in munged, slurmctld and every slurmd.
detached() {
  (
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then exec {fd}>&-; fi
    done
    exec "$@" </dev/null
  )
}

# Starts the slurmd of node $1: here, or in the rig node's namespace under its host name.
start_slurmd() {
  local node=$1
  if [ -z "$RIG" ]; then
    detached slurmd -f "$CONF" -N "$node"
  else
    # `ip netns exec` mounts the namespace's own /sys (its NICs, as the ranks must see them),
    # without the cgroup mounts slurmd's start-up checks for (Slurm 22.05 initialises its cgroup
    # plugin whatever the config): a cgroup v1 layout with only the named systemd hierarchy.
    # Nothing uses cgroups (proctrack/linuxproc, task/none). And a private PMIx client directory
    # (mpi.conf): the nodes share /tmp, where each node's step would make the same one.
    # shellcheck disable=SC2016
    detached ip netns exec "$(ns_of "$node")" unshare --uts sh -c '
      mount -t tmpfs tmpfs /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
        mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd &&
        mount -t tmpfs tmpfs "$2" && hostname "$0" && exec slurmd -f "$1"' "$node" "$CONF" "$DIR/pmix"
  fi
}

up() {
  need_tools
  nodes_of_rig
  if [ -d "$DIR" ] && [ ! -f "$MARK" ]; then
    die "$DIR exists and was not made by local-slurm.sh: set LOCAL_SLURM_DIR to a new directory"
  fi
  mkdir -p "$DIR"
  chmod 700 "$DIR"
  touch "$MARK"
  mkdir -p "$DIR"/{etc,munge,run,log,state,spool,pmix}
  chmod 700 "$DIR/munge"
  if ! running munged; then
    [ -f "$DIR/etc/munge.key" ] || { dd if=/dev/urandom of="$DIR/etc/munge.key" bs=1024 count=1 status=none && chmod 400 "$DIR/etc/munge.key"; }
    detached munged --force --key-file="$DIR/etc/munge.key" --socket="$SOCKET" --pid-file="$DIR/run/munged.pid" \
      --log-file="$DIR/log/munged.log" --seed-file="$DIR/state/munged.seed" ||
      die "munged did not start: $(tail -3 "$DIR/log/munged.log" 2>/dev/null)"
    wait_for 10 munge -S "$SOCKET" -n || die "munged does not answer on $SOCKET: $(tail -3 "$DIR/log/munged.log" 2>/dev/null)"
  fi
  write_config
  export SLURM_CONF=$CONF
  if ! running slurmctld; then
    # -c: a fresh controller (no jobs or node states from an earlier `up`); -i: ignore an old state file.
    detached slurmctld -c -i -f "$CONF" || die "slurmctld did not start: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
    wait_for 20 scontrol ping || die "slurmctld does not answer on port $PORT: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
  fi
  local node
  for node in "${NODES[@]}"; do
    mkdir -p "$DIR/spool/$node"
    running "slurmd-$node" || start_slurmd "$node" || die "slurmd of $node did not start: $(tail -5 "$DIR/log/slurmd-$node.log" 2>/dev/null)"
  done
  for node in "${NODES[@]}"; do
    node_idle() { sinfo -h -n "$node" -o %T | grep -Eq '^(idle|mixed|allocated)'; }
    wait_for 30 node_idle || die "node $node did not come up: sinfo says '$(sinfo -h -n "$node" -o '%T %E' 2>&1)'; $DIR/log/slurmd-$node.log: $(tail -3 "$DIR/log/slurmd-$node.log" 2>/dev/null)"
  done
  echo "local-slurm.sh: up: $(sinfo -h -N -o '%N (%c CPUs, %T)' | paste -sd' ')"
  echo "export SLURM_CONF=$CONF"
}

status() {
  local d ok=0
  for d in munged slurmctld $(daemon_files slurmd-); do
    if running "$d"; then echo "$d: running (pid $(pid_of "$d"))"; else echo "$d: not running"; ok=1; fi
  done
  if [ "$ok" -eq 0 ]; then
    SLURM_CONF=$CONF sinfo -N -o '%N %T %c' || ok=1
    SLURM_CONF=$CONF squeue || ok=1
  fi
  return "$ok"
}

# The daemons whose pid files start with $1 (slurmd-<node>: every slurmd started), or $1 itself
# when there is none (so status names the one that should run).
daemon_files() {
  local f found=0
  for f in "$DIR/run/$1"*.pid; do
    [ -f "$f" ] || continue
    found=1
    f=${f##*/}
    echo "${f%.pid}"
  done
  [ "$found" = 1 ] || echo "${1%-}"
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
  for d in $(daemon_files slurmd-); do stop "$d"; done
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
