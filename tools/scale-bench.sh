#!/usr/bin/env bash
# Cluster scale in a box: A3-high-shaped rigs (launch/cluster.sh) of many nodes x 8 ranks x 4 NICs
# on one big host, fullmesh with default flags, and what each costs and reaches:
#   - setup seconds (summary.json placement.setup.seconds), exit status;
#   - peak threads and open files per tcpx-perf process (sampled from /proc every 0.2 s);
#   - per size: the job's network rate (netbw x endpoints) over the rig's shaped limit (nodes x
#     NICs x RATE, one direction), the spread of the NICs' sent bytes (min and max over the median
#     NIC), TCP timeouts and retransmissions (results.csv, schema 4);
#   - the CPU as the possible limit, per size: the host's cores busy while it ran (/proc/stat
#     every 0.2 s, the size's window from the time its row was printed), tcpx-perf's own cores
#     and cpu_s/GB next to raw TCP's through the same rig (tools/raw_tcp_cpu.py, node0 -> node1
#     on eth1), and "CPU-bound: X of Y cores busy" where the host was >= 90 % busy;
#   - the kernel's view of the run, one line summed over every rig namespace: /proc/net/netstat
#     and /proc/net/snmp deltas (TCPAbortOnTimeout, EstabResets, TCPKeepAlive, TCPTimeouts,
#     RetransSegs), the ARP table's res_failed, forced_gc_runs, table_fulls (one table for every
#     namespace, read once) and the tbf qdiscs' drops and overlimits;
#   - with SLOW_NODE/SLOW_NIC: the same rig with that NIC shaped to a quarter, and the finding that
#     names it (its length in characters).
# docs/runs/*-issue28-scale holds what it printed on the device tool's 4 x H100 host.
#
#   OUT=DIR RATE=2gbit SHAPES="8x8x4 16x8x4" SLOW_SHAPE=8x8x4 CUDA_SHAPE=2x2x4 tools/scale-bench.sh
#   SHAPES="64x8x4@500mbit 64x1x4g8" SLOW_SHAPE= CUDA_SHAPE= tools/scale-bench.sh   # 64 A3-high nodes
#   SHAPES=4x2x2 SLOW_SHAPE= CUDA_SHAPE= RATE=400mbit tools/scale-bench.sh          # a small box
#
# A shape is NODESxRANKSxNICS[gG][@RATE]: RANKS processes per node, each driving G GPUs (`-g G`,
# G endpoints per rank; default 1), so 64x1x4g8 is 64 nodes of one 8-GPU process (512
# endpoints) and 64x8x4 the same endpoints as 512 processes; @RATE overrides RATE for that shape.
# SHAPES run in host memory, on nodes without GPUs (CLUSTER_GPUS_PER_NODE=0); SLOW_SHAPE (empty: none) and CUDA_SHAPE (empty: none) runs --mem cuda with node n's processes on
# GPUs n*R*G..(n+1)*R*G-1 (CLUSTER_GPUS_PER_NODE=R*G). ARGS replaces the tcpx-perf flags
# (default: fullmesh, -b 1M -e 8M, 10 timed iterations). IP/TC as for launch/cluster.sh;
# IPROUTE2=DIR (an extracted iproute2 with its libraries: the GPU host has none) writes wrappers.
# RAW_TCP=0 skips the raw TCP stream.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/scale-out}
RATE=${RATE:-2gbit}
SHAPES=${SHAPES:-8x8x4 16x8x4}
SLOW_SHAPE=${SLOW_SHAPE-8x8x4}
SLOW_NODE=${SLOW_NODE:-node5} SLOW_NIC=${SLOW_NIC:-eth3}
CUDA_SHAPE=${CUDA_SHAPE-2x2x4}
RAW_TCP=${RAW_TCP:-1}
read -r -a ARGS <<<"${ARGS:---pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120}"
export CLUSTER_RIG=${CLUSTER_RIG:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
IP=${IP:-ip} TC=${TC:-tc}

if [ -n "${IPROUTE2:-}" ]; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$IPROUTE2" "$OUT/.bin" || exit 1
fi

# Peak threads and fds of every tcpx-perf process, and the host's CPU line of /proc/stat with
# the time, every 0.2 s until $1/stop appears.
sample() {
  local dir=$1 pid t f
  : >"$dir/peaks.raw"
  : >"$dir/stat.raw"
  while [ ! -e "$dir/stop" ]; do
    echo "$(date +%s.%N) $(head -1 /proc/stat)" >>"$dir/stat.raw"
    for pid in $(pgrep -x tcpx-perf); do
      # shellcheck disable=SC2012 # /proc's entries are numbers
      t=$(ls "/proc/$pid/task" 2>/dev/null | wc -l)
      # shellcheck disable=SC2012
      f=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      echo "$pid $t $f" >>"$dir/peaks.raw"
    done
    sleep 0.2
  done
  # One more after the run: the last size's window closes after the last sample of the loop.
  echo "$(date +%s.%N) $(head -1 /proc/stat)" >>"$dir/stat.raw"
  awk '{ if ($2 > t[$1]) t[$1] = $2; if ($3 > f[$1]) f[$1] = $3 }
       END { for (p in t) { n++; if (t[p] > mt) mt = t[p]; if (f[p] > mf) mf = f[p] } printf "%d processes, peak %d threads, %d fds per process\n", n, mt, mf }' \
    "$dir/peaks.raw" >"$dir/peaks.txt"
}

# The rig's namespace of node $1 (launch/cluster.sh's names).
ns_of() { if [ "$CLUSTER_RIG" = 0 ]; then echo "node$1"; else echo "r$CLUSTER_RIG-node$1"; fi; }

# Every rig namespace's TCP counters and qdisc statistics, and the ARP table's (one for all).
rig_counters() {
  local nodes=$1 n ns
  for n in $(seq 0 $((nodes - 1))); do
    ns=$(ns_of "$n")
    echo "== ns $ns"
    "$IP" netns exec "$ns" cat /proc/net/snmp /proc/net/netstat
    echo "== qdisc $ns"
    "$TC" -n "$ns" -s qdisc show
  done
  echo "== ntable"
  "$IP" -s ntable show name arp_cache
}

# Raw TCP through the rig: node0 -> node1 over eth1 for about 3 s at the rate (64 MB to 2 GB);
# both ends' JSON lines in $1/raw.json.
raw_tcp() {
  local dir=$1 rate=$2 bytes addr port=$((5201 + CLUSTER_RIG)) recv_pid
  bytes=$(python3 -c "import re; m=re.fullmatch(r'(\d+)([kmg]?)bit','$rate'); b=int(m.group(1))*{'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)]/8*3; print(int(min(max(b, 64e6), 2e9)))")
  addr="198.18.$((16 * CLUSTER_RIG + 1)).2"
  : >"$dir/raw.json"
  timeout 120 "$IP" netns exec "$(ns_of 1)" python3 tools/raw_tcp_cpu.py recv "$addr" "$port" >>"$dir/raw.json" 2>"$dir/raw.err" &
  recv_pid=$!
  timeout 120 "$IP" netns exec "$(ns_of 0)" python3 tools/raw_tcp_cpu.py send "$addr" "$port" "$bytes" >>"$dir/raw.json" 2>>"$dir/raw.err"
  wait "$recv_pid"
}

# One run of shape NxRxK[gG][@RATE]: rig up, raw TCP, optional slow NIC, run, counters, rig
# down; a block of summary lines.
run_shape() {
  local shape=$1 mem=$2 slow=$3 name nodes ranks nics gpus rate dir rc start
  if [[ ! $shape =~ ^([0-9]+)x([0-9]+)x([0-9]+)(g([0-9]+))?(@([0-9]+[kmg]?bit))?$ ]]; then
    echo "== $shape: no shape: give NODESxRANKSxNICS[gG][@RATE], e.g. 16x8x4, 64x1x4g8, 64x8x4@500mbit"
    return
  fi
  nodes=${BASH_REMATCH[1]} ranks=${BASH_REMATCH[2]} nics=${BASH_REMATCH[3]}
  gpus=${BASH_REMATCH[5]:-1} rate=${BASH_REMATCH[7]:-$RATE}
  # The rate is in the name when the shape gives one: 16x8x4@1gbit and 16x8x4@500mbit are two
  # runs, and a run never reads another's results (a second run into one folder was refused,
  # and its report showed the first run's figures as its own).
  name="${shape%@*}${BASH_REMATCH[6]:+-${BASH_REMATCH[7]}}-$mem${slow:+-slow}"
  dir="$OUT/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$rate" >"$dir/up.log" 2>&1 || {
    echo "== $name: rig up failed"; tail -3 "$dir/up.log"; return
  }
  if [ "$RAW_TCP" = 1 ] && [ "$nodes" -ge 2 ] && [ -z "$slow" ]; then raw_tcp "$dir" "$rate"; fi
  [ -n "$slow" ] && bash launch/cluster.sh shape "$SLOW_NODE" "$SLOW_NIC" "$slow" >>"$dir/up.log" 2>&1
  local env=() gflag=()
  # Host memory: the nodes get no GPU. 128 processes initialising CUDA on one host's 4 GPUs
  # queue in the driver (~115 ms each: 15 s before the plugin opens), which A3-high nodes, 8
  # processes each on their own GPUs, never do (docs/runs/h100x4-20261127b-issue33).
  env=(CLUSTER_GPUS_PER_NODE=0)
  [ "$mem" = cuda ] && env=(CLUSTER_GPUS_PER_NODE="$((ranks * gpus))")
  [ "$gpus" -gt 1 ] && gflag=(-g "$gpus")
  rig_counters "$nodes" >"$dir/counters.before" 2>&1
  rm -f "$dir/stop"
  sample "$dir" &
  local sampler=$!
  start=$(date +%s.%N)
  # Each output line with the time it came (log.ts): a size's row closes its window.
  env "${env[@]}" timeout -k 10 300 bash launch/cluster.sh run -np $((nodes * ranks)) -- \
    "${ARGS[@]}" "${gflag[@]}" --mem "$mem" --out "$dir/run" 2>&1 |
    python3 -uc 'import sys, time
with open(sys.argv[1], "w") as log, open(sys.argv[2], "w") as ts:
    for line in sys.stdin:
        log.write(line); ts.write(f"{time.time():.3f} {line}")' "$dir/log" "$dir/log.ts"
  rc=${PIPESTATUS[0]}
  touch "$dir/stop"
  wait "$sampler"
  rig_counters "$nodes" >"$dir/counters.after" 2>&1
  bash launch/cluster.sh down >/dev/null 2>&1
  [ "$rc" -ne 0 ] && grep -v '^\[plugin\]' "$dir/log" | grep -m3 -iE 'error|failed' | cut -c1-400 | sed 's/^/   log: /'
  echo "== $name: exit $rc in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(cat "$dir/peaks.txt"); rate $rate per NIC"
  python3 tools/scale_bench_report.py "$dir" "$nodes" "$nics" "$rate" "$((nodes * ranks))" "$(nproc)"
}

{
  echo "# tools/scale-bench.sh on $(hostname): $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs, kernel $(uname -r), pid_max $(cat /proc/sys/kernel/pid_max)"
  echo "# rate $RATE per NIC (unless a shape says @RATE), egress queue ${CLUSTER_QUEUE_MS:-20} ms at the rate, TCP ${CLUSTER_TCP:-linux}, tcpx-perf ${ARGS[*]}, $(date -u +%FT%TZ)"
  for shape in $SHAPES; do run_shape "$shape" host ""; done
  if [ -n "$SLOW_SHAPE" ]; then
    slow_rate=$RATE
    [[ $SLOW_SHAPE == *@* ]] && slow_rate=${SLOW_SHAPE#*@}
    quarter=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)([kmg]?)bit','$slow_rate'); print(f'{int(m.group(1))*{\"\":1,\"k\":1e3,\"m\":1e6,\"g\":1e9}[m.group(2)]/4/1e6:.0f}mbit')")
    run_shape "$SLOW_SHAPE" host "$quarter"
  fi
  if [ -n "$CUDA_SHAPE" ]; then run_shape "$CUDA_SHAPE" cuda ""; fi
} 2>&1 | tee "$OUT/summary.txt"
