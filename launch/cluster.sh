#!/usr/bin/env bash
# A cluster in a box: N "nodes" with K data NICs each, as network namespaces on this host,
# rail-aligned as on A3-high (NIC i of every node on one L2 segment), so tcpx-perf can rehearse
# a multi-node, multi-NIC run, with slow or dead NICs injected on purpose. docs/cluster.md.
#
#   launch/cluster.sh up --nodes N --nics K [--rate RATE] [--mtu M]
#   launch/cluster.sh shape NODE NIC RATE|off     egress limit of one NIC (tbf)
#   launch/cluster.sh link NODE NIC down|up       pull or plug one NIC's cable
#   launch/cluster.sh mtu NODE NIC M              one NIC's MTU (a mismatch on its rail)
#   launch/cluster.sh status
#   launch/cluster.sh run -np P [mpirun args] -- [tcpx-perf args]
#   launch/cluster.sh down                        removes everything the rig made (idempotent)
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
# rig's state file lives (default /run/tcpx-cluster), CLUSTER_GPUS_PER_NODE=G (run) splits a GPU
# host's GPUs over the nodes (node n gets n*G .. n*G+G-1 through CUDA_VISIBLE_DEVICES).
# Exit 77 (with one line saying what is missing) where the rig cannot exist: not root, no ip/tc,
# namespaces refused.
set -euo pipefail

IP=${IP:-ip}
TC=${TC:-tc}
RIG=${CLUSTER_RIG:-0}
STATE_DIR=${CLUSTER_STATE_DIR:-/run/tcpx-cluster}
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

# The rig's shape, from its state file (load_state).
NODES=0 NICS=0 RATE=off MTU=1500

# "is $1 an integer from $2 to $3"
in_range() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }

tag="cx$RIG"
state="$STATE_DIR/rig$RIG.env"
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
  # shellcheck disable=SC1090
  . "$state"
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
# queue of 20 ms at the rate, at least 256 KiB.
shape_nic() {
  local ns=$1 dev=$2 rate=$3
  "$TC" -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  [ "$rate" = off ] && return 0
  local bps
  bps=$(rate_bits "$rate") || die "rate '$rate': give e.g. 400mbit, 1gbit, 100000kbit, or off"
  local burst=$((bps / 8 / 250)) limit=$((bps / 8 / 50))
  [ "$burst" -ge 131072 ] || burst=131072
  [ "$limit" -ge 262144 ] || limit=262144
  "$TC" -n "$ns" qdisc add dev "$dev" root tbf rate "$bps"bit burst "$burst" limit "$limit" \
    || die "tc refused tbf on $ns $dev (rate $rate)"
}

# "400mbit" -> 400000000 (tc's units: bit, kbit, mbit, gbit; decimal).
rate_bits() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || return 1
  local n=${BASH_REMATCH[1]}
  case ${BASH_REMATCH[2]} in
    bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
  esac
}

cmd_up() {
  local nodes=2 nics=2 rate=off mtu=1500
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:?}; shift 2 ;;
      --nics) nics=${2:?}; shift 2 ;;
      --rate) rate=${2:?}; shift 2 ;;
      --mtu) mtu=${2:?}; shift 2 ;;
      *) die "up: unknown argument '$1' (up --nodes N --nics K [--rate RATE] [--mtu M])" ;;
    esac
  done
  in_range "$nodes" 1 64 || die "--nodes $nodes: give 1 to 64"
  in_range "$nics" 1 15 || die "--nics $nics: give 1 to 15"
  in_range "$mtu" 576 65000 || die "--mtu $mtu: give 576 to 65000"
  [ "$rate" = off ] || rate_bits "$rate" >/dev/null || die "--rate $rate: give e.g. 400mbit or 1gbit"
  need_tools
  [ -f "$state" ] && die "rig $RIG is already up ($state): launch/cluster.sh down first, or CLUSTER_RIG=another id"
  local probe="${tag}probe"
  "$IP" netns add "$probe" 2>/dev/null || cannot "namespaces refused ('$IP netns add' failed)"
  "$IP" netns del "$probe"
  mkdir -p "$STATE_DIR"
  # Written first: a crash half-way leaves a state that `down` can clean up from.
  printf 'NODES=%s\nNICS=%s\nRATE=%s\nMTU=%s\n' "$nodes" "$nics" "$rate" "$mtu" >"$state"
  # Any failure from here on (set -e, die) removes what was made.
  trap 'echo "cluster.sh: up failed; removing what it made" >&2; cmd_down >/dev/null 2>&1 || true' EXIT
  "$IP" link add "$mgmt_bridge" type bridge
  "$IP" addr add "$mgmt_net.254/24" dev "$mgmt_bridge"
  "$IP" link set "$mgmt_bridge" up
  local r n
  for r in $(seq 1 "$nics"); do
    "$IP" link add "$(rail_bridge "$r")" mtu "$mtu" type bridge
    "$IP" link set "$(rail_bridge "$r")" up
  done
  for n in $(seq 0 $((nodes - 1))); do
    local ns
    ns=$(ns_of "$n")
    "$IP" netns add "$ns"
    "$IP" -n "$ns" link set lo up
    "$IP" link add "${tag}n${n}e0" type veth peer name eth0 netns "$ns"
    "$IP" link set "${tag}n${n}e0" master "$mgmt_bridge" up
    "$IP" -n "$ns" addr add "$mgmt_net.$((n + 1))/24" dev eth0
    "$IP" -n "$ns" link set eth0 up
    for r in $(seq 1 "$nics"); do
      local host_end="${tag}n${n}e$r"
      "$IP" link add "$host_end" mtu "$mtu" type veth peer name "eth$r" netns "$ns" mtu "$mtu"
      "$IP" link set "$host_end" master "$(rail_bridge "$r")" up
      "$IP" -n "$ns" addr add "$(rail_net "$r").$((n + 1))/24" dev "eth$r"
      "$IP" -n "$ns" link set "eth$r" up
      shape_nic "$ns" "eth$r" "$rate"
    done
  done
  trap - EXIT
  echo "cluster.sh: rig $RIG up: $nodes node(s) x $nics NIC(s), rate ${rate}, MTU $mtu; nodes $(ns_of 0)..$(ns_of $((nodes - 1))), PMIx on $mgmt_bridge ($mgmt_net.254)"
}

cmd_down() {
  need_tools
  local ns l
  # What the state names, and whatever carries the rig's names (a crash may have left no state).
  for ns in $("$IP" netns list 2>/dev/null | awk '{print $1}'); do
    if [ "$RIG" = 0 ]; then
      [[ $ns =~ ^node[0-9]+$ ]] || continue
    else
      [[ $ns =~ ^r$RIG-node[0-9]+$ ]] || continue
    fi
    "$IP" netns del "$ns" 2>/dev/null || true
  done
  "$IP" netns del "${tag}probe" 2>/dev/null || true
  for l in $("$IP" -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    [[ $l =~ ^${tag}(m|probe|r[0-9]+|n[0-9]+e[0-9]+)$ ]] || continue
    "$IP" link del "$l" 2>/dev/null || true
  done
  rm -f "$state"
  echo "cluster.sh: rig $RIG down"
}

cmd_shape() {
  [ $# -eq 3 ] || die "usage: shape NODE NIC RATE|off (e.g. shape node1 eth2 100mbit)"
  need_tools
  load_state
  local n r
  n=$(node_index "$1")
  r=$(nic_index "$2")
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
  echo "rig $RIG: $NODES node(s) x $NICS NIC(s), rate $RATE, MTU $MTU"
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
  # A GPU host split into nodes: node n sees GPUs n*G .. n*G+G-1 as its own 0 .. G-1.
  if [ -n "${CLUSTER_GPUS_PER_NODE:-}" ]; then
    in_range "$CLUSTER_GPUS_PER_NODE" 1 64 || die "CLUSTER_GPUS_PER_NODE=$CLUSTER_GPUS_PER_NODE: give GPUs per node (1..64)"
    CUDA_VISIBLE_DEVICES=$(seq -s, $((n * CLUSTER_GPUS_PER_NODE)) $(((n + 1) * CLUSTER_GPUS_PER_NODE - 1)))
    export CUDA_VISIBLE_DEVICES
  fi
  # shellcheck disable=SC2016
  exec "$IP" netns exec "$(ns_of "$n")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$n" "$@"
}

cmd_run() {
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
