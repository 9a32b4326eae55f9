#!/usr/bin/env bash
# A cluster in a box: N "nodes" with K data NICs each, as network namespaces on this host,
# rail-aligned as on A3-high (NIC i of every node on one L2 segment), so tcpx-perf can rehearse
# a multi-node, multi-NIC run, with slow or dead NICs injected on purpose. docs/cluster.md.
#
#   launch/cluster.sh up --nodes N --nics K [--rate RATE] [--mtu M] [--tcp linux|a3]
#   launch/cluster.sh shape NODE NIC RATE|off     egress limit of one NIC (tbf)
#   launch/cluster.sh link NODE NIC down|up       pull or plug one NIC's cable
#   launch/cluster.sh mtu NODE NIC M              one NIC's MTU (a mismatch on its rail)
#   launch/cluster.sh status
#   launch/cluster.sh run -np P [mpirun args] -- [tcpx-perf args]
#   launch/cluster.sh down                        removes what the rig made, nothing else (idempotent)
#
# The rig owns only what it made: `up` refuses, naming it, any name it needs that is taken (a
# hand-made namespace node0, a link cx0r1) before it creates anything, records in the state file
# each namespace and link it is about to make before making it, then the made object (with its
# inode or ifindex) and each qdisc; `down` (and a failed `up`) removes exactly those, still the
# same objects, plus an object an interrupted `up` was making (its name was free when `up`
# began: kill -9 between `ip link add` and the record leaves nothing unrecorded), says what it
# removed, and leaves anything else that merely looks like the rig's alone, naming it. Every command checks all its
# arguments before it changes anything, so a rejected one changes nothing. `down` removes the
# state directory too when `up` made it and no other rig's state is in it.
#
# Layout (rig id I, from CLUSTER_RIG, default 0; rigs of different ids coexist):
#   node n = network namespace "node<n>" (rig 0) or "r<I>-node<n>", hostname node<n> in its ranks;
#   eth0 = management NIC (MPI/PMIx), 198.19.I.(n+1)/24 on bridge cx<I>m (root: 198.19.I.254);
#   eth<r> = data NIC of rail r, 198.18.(16*I+r).(n+1)/24 on bridge cx<I>r<r>.
# Only 198.18.0.0/15 is used (RFC 2544's benchmark range). Shaping sits on the node's side of
# each data veth (root qdisc of eth<r> in the node): that is the NIC's egress, where TCP's
# queue feedback (TSQ) sees it. A run's ranks live in the namespaces; mpirun stays in the root.
#
# Environment: IP=/TC= binaries (e.g. a carried iproute2), TCPX_PERF= the binary `run` starts
# (default target/release/tcpx-perf), CLUSTER_RIG= rig id 0..15, CLUSTER_STATE_DIR= where the
# rig's state file lives (default /run/tcpx-cluster; `up` makes it, `down` removes it when it is
# empty), CLUSTER_GPUS_PER_NODE=G (run) splits a GPU
# host's GPUs over the nodes (node n gets n*G .. n*G+G-1 through CUDA_VISIBLE_DEVICES; 0: none),
# CLUSTER_QUEUE_MS=Q (up, shape) each shaped NIC's egress queue in ms at its rate (default 20),
# CLUSTER_TCP=linux|a3 (up) the default of --tcp (linux: the kernel's defaults; a3: see a3_tcp),
# CLUSTER_HOST_STATE= where the host-wide settings the rigs raised are recorded, with the rigs
# holding them (default /run/tcpx-cluster-host: one for every rig of the host).
# Each setting is checked by the verbs that use it, before they act: a bad one is one line and
# exit 1 there, and never blocks another verb (`down` ignores both).
# Exit 77 (with one line saying what is missing) where the rig cannot exist: not root, no ip/tc,
# namespaces refused.
set -euo pipefail

IP=${IP:-ip}
TC=${TC:-tc}
RIG=${CLUSTER_RIG:-0}
STATE_DIR=${CLUSTER_STATE_DIR:-/run/tcpx-cluster}
HOST_STATE=${CLUSTER_HOST_STATE:-/run/tcpx-cluster-host}
SELF=$(readlink -f "$0")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
cannot() {
  echo "cluster.sh: cannot build the rig: $*" >&2
  exit 77
}

case $RIG in
  [0-9] | 1[0-5]) ;;
  *) die "CLUSTER_RIG=$RIG: give a rig id from 0 to 15" ;;
esac


# The rig's shape and what it made, from its state file (load_state): MADE holds lines
# "netns NAME INODE", "link NAME IFINDEX", "qdisc NAMESPACE DEV", "sysctl KEY OLD:NEW", in the
# order they were made; MAKING the "netns NAME" and "link NAME" that `up` was about to make (a
# "making" line is written before the object, its "made" line after it).
NODES=0 NICS=0 RATE=off MTU=1500 TCP=linux
MADE=()
MAKING=()
# Where iproute2 keeps named namespaces (its NETNS_RUN_DIR).
NETNS_DIR=/run/netns

# "is $1 an integer from $2 to $3", read as decimal (010 is ten)
in_range() { [[ $1 =~ ^[0-9]+$ ]] && [ "$((10#$1))" -ge "$2" ] && [ "$((10#$1))" -le "$3" ]; }
# Each setting is checked by the verbs that use it, before they change anything, so that a bad
# setting of one verb never blocks another (`down` above all).
QUEUE_MS=${CLUSTER_QUEUE_MS:-20}
check_queue_ms() {
  in_range "$QUEUE_MS" 1 10000 || die "CLUSTER_QUEUE_MS=$QUEUE_MS: give each NIC's queue in ms at its rate (1..10000)"
  QUEUE_MS=$((10#$QUEUE_MS))
}
check_gpus_per_node() {
  [ -z "${CLUSTER_GPUS_PER_NODE:-}" ] && return 0
  in_range "$CLUSTER_GPUS_PER_NODE" 0 64 \
    || die "CLUSTER_GPUS_PER_NODE=$CLUSTER_GPUS_PER_NODE: give GPUs per node (0..64; 0: none)"
  # Decimal from here on: shell arithmetic would read 010 as octal 8 and refuse 08.
  CLUSTER_GPUS_PER_NODE=$((10#$CLUSTER_GPUS_PER_NODE))
}

tag="cx$RIG"
state="$STATE_DIR/rig$RIG.env"
# In a state directory that `up` created (so `down` may remove it once it is empty).
made_dir_mark="$STATE_DIR/.made-by-cluster.sh"
ns_of() { if [ "$RIG" = 0 ]; then echo "node$1"; else echo "r$RIG-node$1"; fi; }
mgmt_bridge="${tag}m"
rail_bridge() { echo "${tag}r$1"; }
mgmt_net="198.19.$RIG"
rail_net() { echo "198.18.$((16 * RIG + $1))"; }

need_tools() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (network namespaces, veth, tc)"
  command -v "$IP" >/dev/null 2>&1 || cannot "needs iproute2's ip (apt-get install iproute2, or IP=/path/to/ip)"
  command -v "$TC" >/dev/null 2>&1 || cannot "needs iproute2's tc (apt-get install iproute2, or TC=/path/to/tc)"
  command -v unshare >/dev/null 2>&1 || cannot "needs unshare (util-linux)"
}

load_state() {
  [ -f "$state" ] || die "no rig $RIG is up (no $state): run launch/cluster.sh up --nodes N --nics K first"
  read_state
}

# The state file, parsed (never sourced: it is data).
read_state() {
  local line
  MADE=() MAKING=()
  while IFS= read -r line; do
    case $line in
      NODES=*) NODES=${line#NODES=} ;;
      NICS=*) NICS=${line#NICS=} ;;
      RATE=*) RATE=${line#RATE=} ;;
      MTU=*) MTU=${line#MTU=} ;;
      TCP=*) TCP=${line#TCP=} ;;
      "made "*) MADE+=("${line#made }") ;;
      "making "*) MAKING+=("${line#making }") ;;
    esac
  done <"$state"
}

# Identity of a namespace (its nsfs inode) and of a root-namespace link (its ifindex); empty
# when there is none of that name.
netns_id() { stat -L -c %i "$NETNS_DIR/$1" 2>/dev/null || true; }
link_id() { cat "/sys/class/net/$1/ifindex" 2>/dev/null || true; }

# Appends "made KIND NAME ID" to the state file, right after making it.
record() { echo "made $*" >>"$state"; }
record_netns() { record netns "$1" "$(netns_id "$1")"; }
record_link() { record link "$1" "$(link_id "$1")"; }
# Appends "making KIND NAME" right before making it: a kill between the making and its record
# leaves an object `down` still knows.
about_to_make() { echo "making $1 $2" >>"$state"; }

# make_recorded KIND NAME COMMAND...: runs COMMAND (which makes NAME) between its "making" line and its
# "made" line; where COMMAND fails the "making" line goes (NAME may be someone else's, taken
# since `up` checked it was free) and `up` fails, removing what it made.
make_recorded() {
  local kind=$1 name=$2
  shift 2
  about_to_make "$kind" "$name"
  if ! "$@"; then
    sed -i "/^making $kind $name\$/d" "$state"
    die "up: could not make $kind $name"
  fi
  if [ "$kind" = netns ]; then record_netns "$name"; else record_link "$name"; fi
}

# What remove_made removed, by kind, for `down`'s line.
REMOVED_NETNS=0 REMOVED_LINKS=0 REMOVED_QDISCS=0 RESTORED_SYSCTLS=0 UNFINISHED=()

# Removes what the state file records, newest first, each only while it is still the object the
# rig made (same inode / ifindex); qdiscs only inside a namespace that is still the rig's. Then
# what an interrupted `up` was making and never recorded as made (remove_unfinished).
remove_made() {
  local i kind name id dev
  remove_unfinished
  for ((i = ${#MADE[@]} - 1; i >= 0; i--)); do
    read -r kind name id <<<"${MADE[i]}"
    case $kind in
      qdisc)
        dev=$id
        if ns_is_ours "$name" && "$TC" -n "$name" qdisc del dev "$dev" root 2>/dev/null; then
          REMOVED_QDISCS=$((REMOVED_QDISCS + 1))
        fi
        ;;
      netns)
        if [ -n "$id" ] && [ "$(netns_id "$name")" = "$id" ] && "$IP" netns del "$name"; then
          REMOVED_NETNS=$((REMOVED_NETNS + 1))
        fi
        ;;
      link)
        # A veth's host end is gone with its namespace's end: count it only where it was removed.
        if [ -n "$id" ] && [ "$(link_id "$name")" = "$id" ] && "$IP" link del "$name" 2>/dev/null; then
          REMOVED_LINKS=$((REMOVED_LINKS + 1))
        fi
        ;;
      sysctl)
        # id is "OLD:NEW": put OLD back only while the value is still the one the rig set.
        if [ "$(cat "/proc/sys/$name" 2>/dev/null)" = "${id#*:}" ] && echo "${id%%:*}" >"/proc/sys/$name" 2>/dev/null; then
          RESTORED_SYSCTLS=$((RESTORED_SYSCTLS + 1))
        fi
        ;;
    esac
  done
}

# The namespaces and links `up` was making when it stopped (a "making" line without its "made"
# line) that exist: their names were free when that `up` began, so they are its own.
remove_unfinished() {
  local line kind name
  for line in "${MAKING[@]}"; do
    read -r kind name <<<"$line"
    made_record "$kind" "$name" && continue
    case $kind in
      netns)
        if [ -z "$(netns_id "$name")" ] || ! "$IP" netns del "$name" 2>/dev/null; then continue; fi
        REMOVED_NETNS=$((REMOVED_NETNS + 1))
        ;;
      link)
        if [ -z "$(link_id "$name")" ] || ! "$IP" link del "$name" 2>/dev/null; then continue; fi
        REMOVED_LINKS=$((REMOVED_LINKS + 1))
        ;;
      *) continue ;;
    esac
    UNFINISHED+=("$name")
  done
}

# "does the state record $1 $2 as made"
made_record() {
  local line kind name id
  for line in "${MADE[@]}"; do
    read -r kind name id <<<"$line"
    [ "$kind" = "$1" ] && [ "$name" = "$2" ] && return 0
  done
  return 1
}

# What `down` removed, in one phrase.
removed_phrase() {
  local what="removed $REMOVED_NETNS namespace(s), $REMOVED_LINKS link(s), $REMOVED_QDISCS qdisc(s)"
  [ "$RESTORED_SYSCTLS" -eq 0 ] || what+=", restored $RESTORED_SYSCTLS sysctl(s)"
  [ ${#UNFINISHED[@]} -eq 0 ] || what+=" (of them ${UNFINISHED[*]} made by an up that was interrupted)"
  echo "$what"
}

# "is $1 a namespace the state records as made by this rig, still the same one"
ns_is_ours() {
  local line kind name id
  for line in "${MADE[@]}"; do
    read -r kind name id <<<"$line"
    [ "$kind" = netns ] && [ "$name" = "$1" ] && [ -n "$id" ] && [ "$(netns_id "$1")" = "$id" ] && return 0
  done
  return 1
}

# Namespaces and links on this host that carry this rig's names (made by it or not).
rig_named() {
  local ns l
  for ns in $("$IP" netns list 2>/dev/null | awk '{print $1}'); do
    if [ "$RIG" = 0 ]; then
      [[ $ns =~ ^node[0-9]+$ ]] && echo "$ns"
    else
      [[ $ns =~ ^r$RIG-node[0-9]+$ ]] && echo "$ns"
    fi
    [[ $ns =~ ^${tag}probe[0-9]+$ ]] && echo "$ns"
  done
  for l in $("$IP" -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    [[ $l =~ ^${tag}(m|probe[0-9]*|r[0-9]+|n[0-9]+e[0-9]+)$ ]] && echo "$l"
  done
  true
}

# Removes the state file, and the state directory when `up` made it and it is now empty.
remove_state() {
  rm -f "$state"
  [ -f "$made_dir_mark" ] || return 0
  local f
  for f in "$STATE_DIR"/* "$STATE_DIR"/.[!.]*; do
    if [ -e "$f" ] && [ "$f" != "$made_dir_mark" ]; then return 0; fi
  done
  rm -f "$made_dir_mark"
  rmdir "$STATE_DIR" 2>/dev/null || true
}

# "node1" -> 1, checked against the rig.
node_index() {
  local name=$1
  [[ $name =~ ^node([0-9]+)$ ]] || die "'$name' is no node name: use node0..node$((NODES - 1))"
  local n=${BASH_REMATCH[1]}
  [ "$n" -lt "$NODES" ] || die "$name: the rig has nodes node0..node$((NODES - 1))"
  echo "$n"
}
nic_index() {
  local name=$1
  [[ $name =~ ^eth([0-9]+)$ ]] || die "'$name' is no data NIC: use eth1..eth$NICS"
  local r=${BASH_REMATCH[1]}
  { [ "$r" -ge 1 ] && [ "$r" -le "$NICS" ]; } || die "$name: the rig's data NICs are eth1..eth$NICS"
  echo "$r"
}

# tbf that reaches its rate: a bucket of at least 2 GSO packets (veth sends up to 64 KiB
# segments) and at least 4 ms at the rate (so a timer tick of 1-4 ms never starves it); a
# queue of CLUSTER_QUEUE_MS (20) at the rate, at least 256 KiB.
# The rate is checked by the caller (valid_rate) before anything changes; `replace` swaps the
# qdisc in one step, so a tc refusal leaves the old one in place. Recorded in the state file.
shape_nic() {
  local ns=$1 dev=$2 rate=$3
  if [ "$rate" = off ]; then
    "$TC" -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    sed -i "/^made qdisc $ns $dev\$/d" "$state"
    return 0
  fi
  local bps
  bps=$(rate_bits "$rate")
  local burst=$((bps / 8 / 250)) limit=$((bps * QUEUE_MS / 8000))
  [ "$burst" -ge 131072 ] || burst=131072
  [ "$limit" -ge 262144 ] || limit=262144
  [ "$limit" -lt 4294967296 ] || die "a queue of ${QUEUE_MS} ms at $rate is past tbf's 4 GB: a smaller CLUSTER_QUEUE_MS"
  # tc's own words stay out: its usage text is no answer to `shape node1 eth2 RATE`.
  "$TC" -n "$ns" qdisc replace dev "$dev" root tbf rate "$bps"bit burst "$burst" limit "$limit" 2>/dev/null \
    || die "tc refused a ${rate} limit on $ns $dev; its shaping is left as it was"
  grep -qx "made qdisc $ns $dev" "$state" || record qdisc "$ns" "$dev"
}

# Rates shape_nic takes, bits per second: from 1kbit (tc refuses less than a byte a second) to
# 1000gbit (the queue, 20 ms at the rate, must fit tbf's 32-bit byte limit: 2.5 GB here).
MIN_RATE_BITS=1000 MAX_RATE_BITS=1000000000000
RATE_RANGE="1kbit to 1000gbit"

# "is $1 a rate shape_nic takes" (off, or tc's decimal units within the range above)
valid_rate() {
  [ "$1" = off ] && return 0
  local bps
  bps=$(rate_bits "$1") && [ "$bps" -ge "$MIN_RATE_BITS" ] && [ "$bps" -le "$MAX_RATE_BITS" ]
}

# "400mbit" -> 400000000 (tc's units: bit, kbit, mbit, gbit; decimal). Refuses numbers of more
# than 13 digits, whose bits would overflow the shell's 64-bit arithmetic.
rate_bits() {
  local r=${1,,}
  [[ $r =~ ^0*([0-9]{1,13})(bit|kbit|mbit|gbit)$ ]] || return 1
  local n=$((10#${BASH_REMATCH[1]}))
  case ${BASH_REMATCH[2]} in
    bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
  esac
}

# The kernel's ARP table is one for every namespace, with one set of limits (gc_thresh1..3,
# default 128/512/1024 entries, settable in the root namespace only). Each node holds an entry
# per peer on every rail and on the management bridge: 16 nodes x 4 NICs need about 1200, and
# past gc_thresh3 new neighbours cannot be resolved, so connects fail with "No route to host"
# (seen at 16 x 8 x 4 on the GPU host). Raise what is too low, record the old value, and let
# `down` put it back.
raise_neigh_limits() {
  local need=$(($1 * (($1 - 1) * $2 + $1 + 1))) key
  for key in 1:gc_thresh1 2:gc_thresh2 3:gc_thresh3; do
    raise_sysctl "net/ipv4/neigh/default/${key#*:}" $((need * ${key%%:*})) "$need ARP entries needed"
  done
}

# Every veth of every rig node hands its packets to the sending CPU's backlog queue
# (net.core.netdev_max_backlog, 1000 by default, one limit for the host), where a real NIC has
# rings of its own. A 16 x 8 x 4 job with every comm open holds ~180 k idle sockets through a
# 40 s setup; their keepalive timers fire together, one CPU sends thousands of probes in one
# softirq, and the queue overflows (the 4 x H100 host counted 39200 drops in /proc/net/softnet_stat
# in the run where the kernels aborted 709 connections on keepalive timeout, and 0 drops with 0
# aborts in the runs without; docs/cluster.md#idle-connections). Raised so a rig drops no packet a
# real NIC would have carried.
RIG_BACKLOG=65536
raise_backlog() { raise_sysctl net/core/netdev_max_backlog "$RIG_BACKLOG" "the rig's veths need a deeper backlog queue"; }

# raise_sysctl KEY WANT WHY: raises the host-wide /proc/sys/KEY to WANT if it is lower. The
# setting is the host's, shared by every rig up at once, so it is recorded host-wide (HOST_STATE,
# one file a key: "original V", "set V", "rig ID" per rig holding it), not in one rig's state:
# the first rig to raise it records the host's own value, a later one only adds itself (on
# 1dfe633 a second rig recorded the first's raised value as the host's, and two rigs up then
# down left gc_thresh1 at 184), and the last to go puts the host's value back (host_release).
raise_sysctl() {
  local key=$1 want=$2 why=$3 cur file
  cur=$(cat "/proc/sys/$key" 2>/dev/null) || return 0
  file="$HOST_STATE/$(echo "$key" | tr / .)"
  mkdir -p "$HOST_STATE"
  (
    flock 9
    if [ -f "$file" ]; then
      grep -qx "rig $RIG" "$file" || echo "rig $RIG" >>"$file"
    elif [ "$cur" -lt "$want" ]; then
      printf 'original %s\nset %s\nrig %s\n' "$cur" "$cur" "$RIG" >"$file"
    fi
    if [ "$cur" -lt "$want" ]; then
      echo "$want" >"/proc/sys/$key" || exit 1
      sed -i "s/^set .*/set $want/" "$file"
    fi
  ) 9>>"$HOST_STATE/.lock" || die "up: $why; cannot raise /proc/sys/$key from $cur to $want"
}

# host_release: this rig no longer holds the host-wide settings it raised; where it was the last,
# each goes back to the host's own value (while it is still the value the rigs set: one someone
# changed since is theirs). Runs with or without this rig's state file (a test that lost it).
# The directory and its lock file stay for the next rig.
host_release() {
  [ -d "$HOST_STATE" ] || return 0
  local file
  (
    flock 9
    for file in "$HOST_STATE"/*; do
      if [ ! -f "$file" ] || ! grep -qx "rig $RIG" "$file"; then continue; fi
      sed -i "/^rig $RIG\$/d" "$file"
      grep -q '^rig ' "$file" && continue
      local key original set
      key=$(basename "$file" | tr . /)
      original=$(sed -n 's/^original //p' "$file")
      set=$(sed -n 's/^set //p' "$file")
      if [ "$(cat "/proc/sys/$key" 2>/dev/null)" = "$set" ] && echo "$original" >"/proc/sys/$key" 2>/dev/null; then
        echo "restored" >>"$HOST_STATE/.restored.$RIG"
      fi
      rm -f "$file"
    done
  ) 9>>"$HOST_STATE/.lock"
  if [ -f "$HOST_STATE/.restored.$RIG" ]; then
    RESTORED_SYSCTLS=$((RESTORED_SYSCTLS + $(wc -l <"$HOST_STATE/.restored.$RIG")))
    rm -f "$HOST_STATE/.restored.$RIG"
  fi
}

# The TCP settings GPUDirect-TCPX's receive daemon (RxDM) gives an A3 node before a job
# (google/tcpgpudmarxd, scripts/a3-tuning-scripts/setup.sh; GKE and Slurm start it with
# `--setup_param "--verbose 128 2 0"`: initcwnd 128, rto_min 2 ms, no quickack), applied in node
# namespace $1 for its $2 rails: no slow start after idle (a comm that waited a round keeps its
# window), A3's socket buffer limits, no cached metrics, no MTU probing, and the rails' routes
# with A3's initial window and minimum RTO. All of these are per namespace; RxDM's one global
# setting (tcp_cubic's hystart_detect, a module parameter) is left alone.
a3_tcp() {
  local ns=$1 nics=$2 r
  "$IP" netns exec "$ns" sh -c 'cd /proc/sys/net/ipv4 && echo 0 >tcp_slow_start_after_idle && echo 0 >tcp_mtu_probing &&
    echo "4096 1048576 15728640" >tcp_rmem && echo "4096 1048576 67108864" >tcp_wmem && echo 1 >tcp_no_metrics_save' \
    || die "up: --tcp a3: cannot set node $ns's TCP settings (/proc/sys/net/ipv4 in its namespace)"
  for r in $(seq 1 "$nics"); do
    "$IP" -n "$ns" route replace "$(rail_net "$r").0/24" dev "eth$r" proto kernel scope link \
      src "$(rail_net "$r").$((${ns##*node} + 1))" initcwnd 128 rto_min 2ms \
      || die "up: --tcp a3: cannot set the initial window and minimum RTO of $ns's eth$r route"
  done
}

cmd_up() {
  local nodes=2 nics=2 rate=off mtu=1500 tcp=${CLUSTER_TCP:-linux}
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:?}; shift 2 ;;
      --nics) nics=${2:?}; shift 2 ;;
      --rate) rate=${2:?}; shift 2 ;;
      --mtu) mtu=${2:?}; shift 2 ;;
      --tcp) tcp=${2:?}; shift 2 ;;
      *) die "up: unknown argument '$1' (up --nodes N --nics K [--rate RATE] [--mtu M] [--tcp linux|a3])" ;;
    esac
  done
  case $tcp in
    linux | a3) ;;
    *) die "--tcp $tcp: give linux (the kernel's TCP defaults) or a3 (what TCPX's RxDM sets on A3 nodes); CLUSTER_TCP sets the default" ;;
  esac
  check_queue_ms
  in_range "$nodes" 1 64 || die "--nodes $nodes: give 1 to 64"
  in_range "$nics" 1 15 || die "--nics $nics: give 1 to 15"
  in_range "$mtu" 576 65000 || die "--mtu $mtu: give 576 to 65000"
  nodes=$((10#$nodes)) nics=$((10#$nics)) mtu=$((10#$mtu))
  valid_rate "$rate" || die "--rate $rate: give a rate from $RATE_RANGE (e.g. 400mbit, 2gbit) or off"
  need_tools
  [ -f "$state" ] && die "rig $RIG is already up ($state): launch/cluster.sh down first, or CLUSTER_RIG=another id"
  # Every name the rig needs must be free: what is there already is someone else's.
  local r n l taken=()
  for n in $(seq 0 $((nodes - 1))); do
    [ -z "$(netns_id "$(ns_of "$n")")" ] || taken+=("namespace $(ns_of "$n")")
  done
  for l in "$mgmt_bridge" $(for r in $(seq 1 "$nics"); do rail_bridge "$r"; done) \
    $(for n in $(seq 0 $((nodes - 1))); do for r in $(seq 0 "$nics"); do echo "${tag}n${n}e$r"; done; done); do
    [ -z "$(link_id "$l")" ] || taken+=("link $l")
  done
  [ ${#taken[@]} -eq 0 ] || die "up: rig $RIG needs names that are taken, left alone: ${taken[*]}; remove them if they are yours, or CLUSTER_RIG=another id"
  if [ ! -d "$STATE_DIR" ]; then
    mkdir -p "$STATE_DIR"
    : >"$made_dir_mark"
  fi
  # Written first, then a "making" line before each object and a "made" line after it: a crash
  # (kill -9) anywhere leaves a state that `down` cleans up from completely.
  printf 'NODES=%s\nNICS=%s\nRATE=%s\nMTU=%s\nTCP=%s\n' "$nodes" "$nics" "$rate" "$mtu" "$tcp" >"$state"
  local probe="${tag}probe$$"
  about_to_make netns "$probe"
  if ! "$IP" netns add "$probe" 2>/dev/null; then
    read_state
    remove_made
    remove_state
    cannot "namespaces refused ('$IP netns add' failed)"
  fi
  "$IP" netns del "$probe"
  # Any failure from here on (set -e, die) removes what was made, and only that.
  trap 'echo "cluster.sh: up failed; removing what it made" >&2; read_state; remove_made; host_release; remove_state' EXIT
  raise_neigh_limits "$nodes" "$nics"
  raise_backlog
  make_recorded link "$mgmt_bridge" "$IP" link add "$mgmt_bridge" type bridge
  "$IP" addr add "$mgmt_net.254/24" dev "$mgmt_bridge"
  "$IP" link set "$mgmt_bridge" up
  for r in $(seq 1 "$nics"); do
    make_recorded link "$(rail_bridge "$r")" "$IP" link add "$(rail_bridge "$r")" mtu "$mtu" type bridge
    "$IP" link set "$(rail_bridge "$r")" up
  done
  for n in $(seq 0 $((nodes - 1))); do
    local ns
    ns=$(ns_of "$n")
    make_recorded netns "$ns" "$IP" netns add "$ns"
    "$IP" -n "$ns" link set lo up
    make_recorded link "${tag}n${n}e0" "$IP" link add "${tag}n${n}e0" type veth peer name eth0 netns "$ns"
    "$IP" link set "${tag}n${n}e0" master "$mgmt_bridge" up
    "$IP" -n "$ns" addr add "$mgmt_net.$((n + 1))/24" dev eth0
    "$IP" -n "$ns" link set eth0 up
    for r in $(seq 1 "$nics"); do
      local host_end="${tag}n${n}e$r"
      make_recorded link "$host_end" "$IP" link add "$host_end" mtu "$mtu" type veth peer name "eth$r" netns "$ns" mtu "$mtu"
      "$IP" link set "$host_end" master "$(rail_bridge "$r")" up
      "$IP" -n "$ns" addr add "$(rail_net "$r").$((n + 1))/24" dev "eth$r"
      "$IP" -n "$ns" link set "eth$r" up
      shape_nic "$ns" "eth$r" "$rate"
    done
    [ "$tcp" = linux ] || a3_tcp "$ns" "$nics"
  done
  trap - EXIT
  echo "cluster.sh: rig $RIG up: $nodes node(s) x $nics NIC(s), rate ${rate}, MTU $mtu, TCP $tcp; nodes $(ns_of 0)..$(ns_of $((nodes - 1))), PMIx on $mgmt_bridge ($mgmt_net.254)"
}

cmd_down() {
  need_tools
  local left
  if [ -f "$state" ]; then
    read_state
    left=$(rig_named | tr '\n' ' ')
    if [ ${#MADE[@]} -eq 0 ] && [ ${#MAKING[@]} -eq 0 ] && [ -n "$left" ]; then
      die "down: $state records nothing rig $RIG made (an older cluster.sh wrote it); removed nothing. These carry its names: ${left% }; remove those that are yours by hand (ip netns del NAME, ip link del NAME), then the state file"
    fi
    remove_made
    host_release
    remove_state
    left=$(rig_named | tr '\n' ' ')
    [ -z "$left" ] || echo "cluster.sh: left alone (rig $RIG did not make them): ${left% }" >&2
    echo "cluster.sh: rig $RIG down: $(removed_phrase)"
    return 0
  fi
  host_release
  left=$(rig_named | tr '\n' ' ')
  if [ -n "$left" ]; then
    die "down: no state for rig $RIG ($state), so nothing records what it made; removed nothing. These carry its names: ${left% }; remove those that are yours by hand (ip netns del NAME, ip link del NAME)"
  fi
  # An `up` killed before it wrote its state may have made the state directory.
  remove_state
  echo "cluster.sh: rig $RIG down"
}

cmd_shape() {
  [ $# -eq 3 ] || die "usage: shape NODE NIC RATE|off (e.g. shape node1 eth2 100mbit)"
  check_queue_ms
  need_tools
  load_state
  local n r
  n=$(node_index "$1")
  r=$(nic_index "$2")
  valid_rate "$3" || die "shape: rate '$3': give a rate from $RATE_RANGE (e.g. 400mbit, 1gbit, 100000kbit) or off; nothing changed"
  shape_nic "$(ns_of "$n")" "eth$r" "$3"
  echo "cluster.sh: $1 $2 egress ${3}"
}

cmd_link() {
  if [ $# -ne 3 ] || { [ "$3" != down ] && [ "$3" != up ]; }; then die "usage: link NODE NIC down|up"; fi
  need_tools
  load_state
  local n r
  n=$(node_index "$1")
  r=$(nic_index "$2")
  # The cable: the switch side goes down, so the node's NIC loses carrier (NO-CARRIER) but keeps
  # its address, as a real NIC whose link dropped.
  "$IP" link set "${tag}n${n}e$r" "$3"
  echo "cluster.sh: $1 $2 link $3"
}

cmd_mtu() {
  if [ $# -ne 3 ] || ! in_range "$3" 576 65000; then die "usage: mtu NODE NIC M, M from 576 to 65000 (e.g. mtu node1 eth2 9000)"; fi
  set -- "$1" "$2" "$((10#$3))"
  need_tools
  load_state
  local n r
  n=$(node_index "$1")
  r=$(nic_index "$2")
  # The switch side follows upward so larger frames can leave; the bridge keeps the rail's MTU.
  if [ "$3" -gt "$("$IP" -o link show "${tag}n${n}e$r" | sed -E 's/.* mtu ([0-9]+).*/\1/')" ]; then
    "$IP" link set "${tag}n${n}e$r" mtu "$3"
  fi
  "$IP" -n "$(ns_of "$n")" link set "eth$r" mtu "$3"
  echo "cluster.sh: $1 $2 MTU $3"
}

cmd_status() {
  need_tools
  if [ ! -f "$state" ]; then
    echo "cluster.sh: rig $RIG is down"
    return 0
  fi
  load_state
  echo "rig $RIG: $NODES node(s) x $NICS NIC(s), rate $RATE, MTU $MTU, TCP $TCP"
  local n r ns
  for n in $(seq 0 $((NODES - 1))); do
    ns=$(ns_of "$n")
    for r in $(seq 1 "$NICS"); do
      local link qdisc bytes
      link=$("$IP" -n "$ns" -o link show "eth$r" 2>/dev/null \
        | sed -E 's/^[0-9]+: ([^:@]+)[^<]*<([^>]*)> mtu ([0-9]+).* state ([A-Z]+).*/\4 mtu \3 <\2>/')
      qdisc=$("$TC" -n "$ns" qdisc show dev "eth$r" 2>/dev/null | head -1 | awk '{print $2, ($2 == "tbf" ? "rate " $8 : "")}')
      bytes=$("$IP" netns exec "$ns" cat "/sys/class/net/eth$r/statistics/tx_bytes" 2>/dev/null || echo '?')
      printf 'node%s eth%s %s  %s/24  %s  tx %s B\n' "$n" "$r" "${link:-missing}" "$(rail_net "$r").$((n + 1))" "${qdisc:-?}" "$bytes"
    done
  done
}

# Runs inside mpirun: this rank's node from its rank (rank r on node r / (P/N)), then the
# command in that node's network namespace, under its own hostname.
cmd_rank() {
  load_state
  local rank=${OMPI_COMM_WORLD_RANK:?_rank runs under mpirun} size=${OMPI_COMM_WORLD_SIZE:?}
  local n=$((rank / (size / NODES)))
  local ifnames r
  ifnames=$(for r in $(seq 1 "$NICS"); do printf 'eth%s,' "$r"; done)
  export TCPXEMU_IFNAMES=${ifnames%,}
  # A GPU host split into nodes: node n sees GPUs n*G .. n*G+G-1 as its own 0 .. G-1; G = 0:
  # nodes without GPUs (CUDA finds none: no process initialises a GPU it would share).
  if [ -n "${CLUSTER_GPUS_PER_NODE:-}" ]; then
    check_gpus_per_node
    CUDA_VISIBLE_DEVICES=""
    if [ "$CLUSTER_GPUS_PER_NODE" -gt 0 ]; then
      CUDA_VISIBLE_DEVICES=$(seq -s, $((n * CLUSTER_GPUS_PER_NODE)) $(((n + 1) * CLUSTER_GPUS_PER_NODE - 1)))
    fi
    export CUDA_VISIBLE_DEVICES
  fi
  # shellcheck disable=SC2016
  exec "$IP" netns exec "$(ns_of "$n")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$n" "$@"
}

cmd_run() {
  # Before mpirun starts: a bad value is one line here, not one per rank.
  check_gpus_per_node
  need_tools
  load_state
  local np="" margs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      -np | -n) np=${2:?}; shift 2 ;;
      *) margs+=("$1"); shift ;;
    esac
  done
  [ "${1:-}" = -- ] && shift
  in_range "$np" 1 100000 || die "run: give -np P (a multiple of the rig's $NODES nodes)"
  np=$((10#$np))
  [ $((np % NODES)) -eq 0 ] || die "run: -np $np does not spread evenly over $NODES nodes; give a multiple of $NODES"
  local bin=${TCPX_PERF:-$ROOT/target/release/tcpx-perf}
  [ -x "$bin" ] || die "no tcpx-perf at $bin: run launch/build.sh, or set TCPX_PERF="
  # shellcheck source=/dev/null
  source "$ROOT/launch/mpirun-args.sh"
  local exports=() v
  for v in $(env | grep -oE '^(NCCL|TCPXEMU|TCPX_PERF)_[A-Z0-9_]+' || true); do exports+=(-x "$v"); done
  if [ -n "${CLUSTER_GPUS_PER_NODE:-}" ]; then exports+=(-x CLUSTER_GPUS_PER_NODE); fi
  # PMIx: ranks in the namespaces reach mpirun's server over the management bridge, not lo.
  export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$mgmt_bridge"
  export OMPI_MCA_oob_tcp_if_include="$mgmt_bridge" OMPI_MCA_btl_tcp_if_include=eth0
  export CLUSTER_RIG="$RIG" CLUSTER_STATE_DIR="$STATE_DIR" IP
  exec mpirun "${MPIRUN_ARGS[@]}" "${exports[@]}" -x CLUSTER_RIG -x CLUSTER_STATE_DIR -x IP \
    -np "$np" "${margs[@]}" bash "$SELF" _rank "$bin" "$@"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case $verb in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  shape) cmd_shape "$@" ;;
  link) cmd_link "$@" ;;
  mtu) cmd_mtu "$@" ;;
  status) cmd_status ;;
  run) cmd_run "$@" ;;
  _rank) cmd_rank "$@" ;;
  *) die "usage: cluster.sh up|down|shape|link|mtu|status|run (see the top of launch/cluster.sh)" ;;
esac
