#!/usr/bin/env bash
# Cluster scale in a box: A3-high-shaped rigs (launch/cluster.sh) of many nodes x 8 ranks x 4 NICs
# on one big host, fullmesh with default flags, and what each costs and reaches:
#   - setup seconds (summary.json placement.setup.seconds), exit status;
#   - peak threads and open files per tcpx-perf process (sampled from /proc every 0.2 s);
#   - per size >= 8 MiB: the job's network rate (netbw x endpoints) over the rig's shaped limit
#     (nodes x NICs x RATE, one direction), and the spread of the NICs' sent bytes (min and max
#     over the median NIC);
#   - TCP timeouts and retransmissions per size (results.csv, schema 4);
#   - with SLOW_NODE/SLOW_NIC: the same rig with that NIC shaped to a quarter, and the finding that
#     names it (its length in characters).
# docs/runs/*-issue28-scale holds what it printed on the device tool's 4 x H100 host.
#
#   OUT=DIR RATE=2gbit SHAPES="8x8x4 16x8x4" SLOW_SHAPE=8x8x4 CUDA_SHAPE=2x2x4 tools/scale-bench.sh
#
# SHAPES are NODESxRANKSxNICS run in host memory; CUDA_SHAPE (empty: none) runs --mem cuda with
# node n's ranks on GPUs n*R..n*R+R-1 (CLUSTER_GPUS_PER_NODE=R). ARGS replaces the tcpx-perf flags
# (default: fullmesh, -b 1M -e 8M, 10 timed iterations). IP/TC as for launch/cluster.sh;
# IPROUTE2=DIR (an extracted iproute2 with its libraries: the GPU host has none) writes wrappers.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/scale-out}
RATE=${RATE:-2gbit}
SHAPES=${SHAPES:-8x8x4 16x8x4}
SLOW_SHAPE=${SLOW_SHAPE:-8x8x4}
SLOW_NODE=${SLOW_NODE:-node5} SLOW_NIC=${SLOW_NIC:-eth3}
CUDA_SHAPE=${CUDA_SHAPE-2x2x4}
read -r -a ARGS <<<"${ARGS:---pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120}"
export CLUSTER_RIG=${CLUSTER_RIG:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"

if [ -n "${IPROUTE2:-}" ]; then
  # Wrappers whose library path reaches iproute2 only, never what `ip netns exec` starts.
  ipr=$(cd "$IPROUTE2" && pwd) wrap="$OUT/.bin"
  libs=$ipr/lib/x86_64-linux-gnu:$ipr/usr/lib/x86_64-linux-gnu
  mkdir -p "$wrap"
  cat >"$wrap/ip" <<WRAP
#!/bin/sh
if [ "\$1" = netns ] && [ "\$2" = exec ]; then
  ns=\$3; shift 3
  LD_LIBRARY_PATH=$libs exec $ipr/bin/ip netns exec "\$ns" env -u LD_LIBRARY_PATH "\$@"
fi
LD_LIBRARY_PATH=$libs exec $ipr/bin/ip "\$@"
WRAP
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/sbin/tc "$@"\n' "$libs" "$ipr" >"$wrap/tc"
  chmod +x "$wrap/ip" "$wrap/tc"
  export IP=$wrap/ip TC=$wrap/tc
fi

# Peak threads and fds of every tcpx-perf process, until $1/stop appears.
sample() {
  local dir=$1 pid t f
  : >"$dir/peaks.raw"
  while [ ! -e "$dir/stop" ]; do
    for pid in $(pgrep -x tcpx-perf); do
      t=$(ls "/proc/$pid/task" 2>/dev/null | wc -l)
      f=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      echo "$pid $t $f" >>"$dir/peaks.raw"
    done
    sleep 0.2
  done
  awk '{ if ($2 > t[$1]) t[$1] = $2; if ($3 > f[$1]) f[$1] = $3 }
       END { for (p in t) { n++; if (t[p] > mt) mt = t[p]; if (f[p] > mf) mf = f[p] } printf "%d processes, peak %d threads, %d fds per process\n", n, mt, mf }' \
    "$dir/peaks.raw" >"$dir/peaks.txt"
}

# One run of shape NxRxK: rig up, optional slow NIC, run, rig down; a block of summary lines.
run_shape() {
  local shape=$1 mem=$2 slow=$3 name nodes ranks nics dir rc start
  IFS=x read -r nodes ranks nics <<<"$shape"
  name="$shape-$mem${slow:+-slow}"
  dir="$OUT/$name"
  mkdir -p "$dir"
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$RATE" >"$dir/up.log" 2>&1 || {
    echo "== $name: rig up failed"; tail -3 "$dir/up.log"; return
  }
  [ -n "$slow" ] && bash launch/cluster.sh shape "$SLOW_NODE" "$SLOW_NIC" "$slow" >>"$dir/up.log" 2>&1
  local env=()
  [ "$mem" = cuda ] && env=(CLUSTER_GPUS_PER_NODE="$ranks")
  rm -f "$dir/stop"
  sample "$dir" &
  local sampler=$!
  start=$(date +%s.%N)
  env "${env[@]}" timeout -k 10 300 bash launch/cluster.sh run -np $((nodes * ranks)) -- \
    "${ARGS[@]}" --mem "$mem" --out "$dir/run" >"$dir/log" 2>&1
  rc=$?
  touch "$dir/stop"
  wait "$sampler"
  bash launch/cluster.sh down >/dev/null 2>&1
  [ "$rc" -ne 0 ] && grep -v '^\[plugin\]' "$dir/log" | grep -m3 -iE 'error|failed' | cut -c1-400 | sed 's/^/   log: /'
  echo "== $name: exit $rc in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(cat "$dir/peaks.txt")"
  python3 - "$dir/run" "$nodes" "$nics" "$RATE" <<'PY'
import csv, json, re, statistics, sys
run, nodes, nics, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
limit = nodes * nics * bits / 8 / 1e9  # GB/s, one direction
try:
    s = json.load(open(f"{run}/summary.json"))
except Exception as e:
    print(f"   no summary.json: {e}")
    sys.exit()
setup = (s.get("placement") or {}).get("setup") or {}
print(f"   status {s.get('status')}, complete {s.get('complete')}, setup {setup.get('seconds', float('nan')):.2f} s"
      f" ({setup.get('comms')} comms), error: {s.get('error')}")
rows = list(csv.DictReader(open(f"{run}/results.csv"))) if s.get("sizes_done") else []
eps = s.get("endpoints", 0)
for r, j in zip(rows, s.get("results", [])):
    size = int(r["size_bytes"])
    net = float(r["netbw_gbps"]) * eps
    tx = [w["tx_bytes"] for w in j["bytes"]["wire"] if w["iface"] != "eth0"]
    med = statistics.median(tx) if tx else 0
    spread = f"NIC tx min/max over median {min(tx)/med:.2f}/{max(tx)/med:.2f}" if med else "no NIC counters"
    print(f"   {size >> 20:>4} MiB: busbw {float(r['busbw_gbps']):.3f} GB/s, network {net:.3f} GB/s = {net/limit:.2f} of {limit:.2f}"
          f"; peers in flight {r['recv_peers_in_flight']}; tcp timeouts {r.get('tcp_timeouts')}, retrans {r.get('tcp_retrans_segs')}; {spread}")
for f in (s.get("placement") or {}).get("findings", []):
    if f.get("level") != "ok":
        print(f"   {f['level']} ({len(f['text'])} chars): {f['text']}")
PY
}

{
  echo "# tools/scale-bench.sh on $(hostname): $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs, kernel $(uname -r), pid_max $(cat /proc/sys/kernel/pid_max)"
  echo "# rate $RATE per NIC, tcpx-perf ${ARGS[*]}, $(date -u +%FT%TZ)"
  for shape in $SHAPES; do run_shape "$shape" host ""; done
  if [ -n "$SLOW_SHAPE" ]; then
    quarter=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)([kmg]?)bit','$RATE'); print(f'{int(m.group(1))*{\"\":1,\"k\":1e3,\"m\":1e6,\"g\":1e9}[m.group(2)]/4/1e6:.0f}mbit')")
    run_shape "$SLOW_SHAPE" host "$quarter"
  fi
  [ -n "$CUDA_SHAPE" ] && run_shape "$CUDA_SHAPE" cuda ""
} 2>&1 | tee "$OUT/summary.txt"
