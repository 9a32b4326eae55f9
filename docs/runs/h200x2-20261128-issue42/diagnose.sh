#!/usr/bin/env bash
# Issue 42, first call: where a 64 x 8 x 4 rig (512 processes, ~1 M comms with --connect all)
# loses its connections. Runs with the default flags, counters sampled every 10 s (sample.sh):
#   A  the rig as `cluster.sh up` makes it (ARP on every rail)
#   B  the same rig with permanent neighbour entries (static-neigh.sh: no ARP)
#   C  B's rig with --connect rounds
# Binaries: .devcarry/new; Debian's iproute2 in .devcarry/iproute2. Output under $OUT.
#   RUNS="A B C" SHAPE=64x8x4 RATE=500mbit LIMIT=170
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h200x2-20261128-issue42
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=$PWD/.devcarry/new/tcpx-perf
if [ -d .devcarry/iproute2 ] && ! command -v tc >/dev/null; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
fi
SHAPE=${SHAPE:-64x8x4} RATE=${RATE:-500mbit} LIMIT=${LIMIT:-170}
IFS=x read -r NODES RANKS NICS <<<"$SHAPE"
ARGS=${ARGS:---pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 60 --mem host}
echo "== $SHAPE at $RATE on $(hostname), $(nproc) cores, pid_max $(cat /proc/sys/kernel/pid_max), args: $ARGS" | tee -a "$OUT/lines.txt"
bash launch/cluster.sh down >/dev/null 2>&1
s=$(date +%s)
bash launch/cluster.sh up --nodes "$NODES" --nics "$NICS" --rate "$RATE" >"$OUT/up.log" 2>&1 || { tail -3 "$OUT/up.log"; exit 1; }
echo "up: $(( $(date +%s) - s )) s" | tee -a "$OUT/lines.txt"
static=0
for run in ${RUNS:-A B C}; do
  extra=
  case $run in
    B | C) if [ $static = 0 ]; then s=$(date +%s); bash "$here/static-neigh.sh" "$NODES" "$NICS" "$CLUSTER_RIG" >>"$OUT/lines.txt" 2>&1; static=1; echo "static neighbours: $(( $(date +%s) - s )) s" >>"$OUT/lines.txt"; fi ;;
  esac
  [ "$run" = C ] && extra="--connect rounds"
  bash "$here/sample.sh" "$NODES" "$CLUSTER_RIG" "$OUT/$run.samples" & sampler=$!
  s=$(date +%s.%N)
  # ARGS and extra are flag lists: split on purpose.
  # shellcheck disable=SC2086
  TCPX_PERF_TRACE=1 timeout -k 5 "$LIMIT" bash launch/cluster.sh run -np $((NODES * RANKS)) -- $ARGS $extra --out "$OUT/$run" >"$OUT/$run.log" 2>&1
  rc=$?
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  wall=$(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
  sizes=$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$OUT/$run.log")
  echo "$run ($extra): rc $rc, $wall s, $sizes size(s); $(grep -m1 '^# setup:' "$OUT/$run.log" | cut -c1-200)" | tee -a "$OUT/lines.txt"
  tail -2 "$OUT/$run.samples" | tee -a "$OUT/lines.txt"
  pkill -9 -x tcpx-perf 2>/dev/null; sleep 2
  find "$OUT/$run" -name pairs.csv -delete 2>/dev/null
done
bash launch/cluster.sh down >/dev/null 2>&1
