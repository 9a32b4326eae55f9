#!/usr/bin/env bash
# Issue 42, third call: does 64 x 8 x 4 finish its sizes with this build (MPI waits that sleep
# longer the longer they wait, the allreduce of the pair sums as reduce + broadcast)? One run,
# shorter flags than the issue's so that it fits a device call: -b 1M -e 2M -n 3 -w 1.
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
SHAPE=${SHAPE:-64x8x4} RATE=${RATE:-500mbit}
ARGS=${ARGS:---pattern fullmesh -b 1M -e 2M -n 3 -w 1 -T 120 --mem host}
IFS=x read -r NODES RANKS NICS <<<"$SHAPE"
echo "== $SHAPE at $RATE on $(hostname), $(nproc) cores, args: $ARGS" | tee -a "$OUT/lines.txt"
bash launch/cluster.sh down >/dev/null 2>&1
bash launch/cluster.sh up --nodes "$NODES" --nics "$NICS" --rate "$RATE" >"$OUT/up.log" 2>&1 || { tail -3 "$OUT/up.log"; exit 1; }
bash "$here/sample.sh" "$NODES" "$CLUSTER_RIG" "$OUT/finish.samples" 10 & sampler=$!
[ -n "${STACKS_AT:-}" ] && { bash "$here/stacks.sh" "$STACKS_AT" "$OUT/stacks.txt" & }
s=$(date +%s.%N)
# ARGS is a flag list: split on purpose.
# shellcheck disable=SC2086
TCPX_PERF_TRACE=1 timeout -k 5 "${LIMIT:-500}" bash launch/cluster.sh run -np $((NODES * RANKS)) -- $ARGS --out "$OUT/finish" >"$OUT/finish.log" 2>&1
rc=$?
kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
echo "finish: rc $rc, $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(python3 "$here/times.py" "$OUT/finish.log" "$OUT/finish.samples" "$OUT/finish/summary.json")" | tee -a "$OUT/lines.txt"
grep "^trace 0 " "$OUT/finish.log" >"$OUT/finish-rank0-trace.txt"
grep -E '^ +[0-9]+ +[0-9]+ +float|^# (setup|probe|Node|CPU of the whole)' "$OUT/finish.log" | tee -a "$OUT/lines.txt"
pkill -9 -x tcpx-perf 2>/dev/null
find "$OUT/finish" -name pairs.csv -delete 2>/dev/null
bash launch/cluster.sh down >/dev/null 2>&1
