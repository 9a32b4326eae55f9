#!/usr/bin/env bash
# Issue 42, second call (this build): 64 x 8 x 4 with the issue's flags and the default
# --connect, where its time goes (trace, counters); 16 x 8 x 4 --connect all against rounds
# (TCPX_PERF_TRACE's "size N done" lines give each size's wall time), and --plan's threads
# against the peaks (sample.sh every 2 s, summary.json's threads_peak).
#   BIG=64x8x4 SMALL=16x8x4 RATE=500mbit BIG_LIMIT=330
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
RATE=${RATE:-500mbit}
ARGS=${ARGS:---pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host}
# run NAME SHAPE LIMIT SAMPLE_EVERY [flags]: one run on the rig that is up, with counters.
run() {
  local name=$1 shape=$2 limit=$3 every=$4 nodes ranks nics s rc
  shift 4
  IFS=x read -r nodes ranks nics <<<"$shape"
  bash "$here/sample.sh" "$nodes" "$CLUSTER_RIG" "$OUT/$name.samples" "$every" & local sampler=$!
  s=$(date +%s.%N)
  # ARGS is a flag list: split on purpose.
  # shellcheck disable=SC2086
  TCPX_PERF_TRACE=1 timeout -k 5 "$limit" bash launch/cluster.sh run -np $((nodes * ranks)) -- $ARGS "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  rc=$?
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  echo "$name ($shape $*): rc $rc, $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(python3 "$here/times.py" "$OUT/$name.log" "$OUT/$name.samples" "$OUT/$name/summary.json")" | tee -a "$OUT/lines.txt"
  pkill -9 -x tcpx-perf 2>/dev/null; sleep 1
  find "$OUT/$name" -name pairs.csv -delete 2>/dev/null
}
rig() { # SHAPE
  local nodes ranks nics
  IFS=x read -r nodes ranks nics <<<"$1"
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$RATE" >"$OUT/up-$1.log" 2>&1 || { tail -3 "$OUT/up-$1.log"; exit 1; }
}
echo "== $(hostname), $(nproc) cores, pid_max $(cat /proc/sys/kernel/pid_max), rate $RATE, args: $ARGS" | tee -a "$OUT/lines.txt"
SMALL=${SMALL:-16x8x4} BIG=${BIG:-64x8x4}
for c in all rounds; do
  for p in "$SMALL" "$BIG"; do
    echo "plan $p --connect $c: $("$TCPX_PERF" --plan "$p" $ARGS --connect "$c" --plan-json "$OUT/plan-$p-$c.json" >/dev/null 2>&1; python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("threads", j["per_process"]["threads"], "files", j["per_process"]["files"])' "$OUT/plan-$p-$c.json")" | tee -a "$OUT/lines.txt"
  done
done
rig "$SMALL"
for i in 1 2; do
  run "small-all$i" "$SMALL" 90 1
  run "small-rounds$i" "$SMALL" 90 1 --connect rounds
done
rig "$BIG"
run big-all "$BIG" "${BIG_LIMIT:-330}" 10
bash launch/cluster.sh down >/dev/null 2>&1
