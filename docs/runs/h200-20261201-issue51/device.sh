#!/usr/bin/env bash
# Issue 51 on the GPU host (one call, under 10 minutes): the rank's own bookkeeping at scale.
#   1. --plan --simulate of 64x8x4 and 512x8x4 (fullmesh and the default sendrecv) on this host;
#   2. BIG (64 x 8 x 4) on the rig at 500mbit, fullmesh, -b 1M -e 2M -n 3 -w 1: RUNS64 runs (3),
#      each with setup, warm-up, first timed byte, each size's last iteration to its row, rank
#      0's memory after its plans / its first connect / each size, every process's peak; then
#      one more with mpirun --mca btl self,tcp (MPI's memory without its shared-memory transport);
#   3. MID (32 x 8 x 4) the same, once;
#   4. SMALL (16 x 8 x 4) at 1gbit with one NIC of a random node at a quarter (SEED printed):
#      the verdicts must name it, and nobody else.
# Carried (.devcarry, not in git): new/tcpx-perf and its v7 plugin, iproute2/ (Debian's, the
# host has none). Output: $OUT/lines.txt, each run's log, memory samples and summary.json.
#   PART=big|rest|all  BIG=64x8x4 MID=32x8x4 SMALL=16x8x4 RUNS64=3 SEED=...
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h200-20261201-issue51
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=${TCPX_PERF:-$PWD/.devcarry/new/tcpx-perf}
if [ -d .devcarry/iproute2 ] && ! command -v tc >/dev/null; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
fi
say() { echo "$*" | tee -a "$OUT/lines.txt"; }
ARGS=${ARGS:---pattern fullmesh -b 1M -e 2M -n 3 -w 1 -T 120 --mem host}
say "== $(hostname): $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB, pid_max $(cat /proc/sys/kernel/pid_max), $(date -u +%FT%TZ); args: $ARGS"
[ "${PART:-all}" = rest ] || for s in "64x8x4 --pattern fullmesh" "512x8x4 --pattern fullmesh" "512x8x4"; do
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e s %M KB" "$TCPX_PERF" --plan $s -b 1M -e 8M --mem host --simulate >"$OUT/simulate.txt" 2>"$OUT/simulate.time"
  say "simulate --plan $s -b 1M -e 8M: $(grep -E '^# simulation: [0-9.]+ s in all|named|NOT named' "$OUT/simulate.txt" | tr '\n' ' ') ($(tail -1 "$OUT/simulate.time"))"
done
# run NAME SHAPE LIMIT [flags]: one run on the rig that is up.
run() {
  local name=$1 shape=$2 limit=$3 nodes ranks nics s rc
  shift 3
  IFS=x read -r nodes ranks nics <<<"$shape"
  python3 "$here/memory.py" "$OUT/$name.memory" 2 &
  local sampler=$!
  s=$(date +%s.%N)
  # ARGS is a flag list: split on purpose.
  # shellcheck disable=SC2086
  # MPIRUN_EXTRA: mpirun's own flags (e.g. --mca btl self,tcp), split on purpose.
  # shellcheck disable=SC2086
  TCPX_PERF_TRACE=1 timeout -k 5 "$limit" bash launch/cluster.sh run -np $((nodes * ranks)) ${MPIRUN_EXTRA:-} -- $ARGS "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  rc=$?
  kill $sampler 2>/dev/null
  wait $sampler 2>/dev/null
  say "$name ($shape $*): exit $rc, $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(python3 "$here/figures.py" "$OUT/$name.log" "$OUT/$name.memory")"
  grep -E '^# Node verdicts|^# node|bad|suspect' "$OUT/$name.log" | head -4 >>"$OUT/lines.txt"
  pkill -9 -x tcpx-perf 2>/dev/null
  sleep 1
  find "$OUT/$name" -name pairs.csv -size +20M -delete 2>/dev/null
}
rig() { # SHAPE RATE
  local nodes ranks nics t
  IFS=x read -r nodes ranks nics <<<"$1"
  t=$(date +%s)
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$2" >"$OUT/up-$1.log" 2>&1 || { tail -3 "$OUT/up-$1.log"; exit 1; }
  say "rig $1 at $2 up in $(($(date +%s) - t)) s"
}
# The shapes (a rehearsal on a small machine sets smaller ones); PART=big: the simulations and
# BIG's runs, PART=rest: MID and SMALL (two calls, each under 10 minutes), PART=all: both.
BIG=${BIG:-64x8x4} MID=${MID:-32x8x4} SMALL=${SMALL:-16x8x4} PART=${PART:-all}
if [ "$PART" != rest ]; then
  rig "$BIG" 500mbit
  for i in $(seq 1 "${RUNS64:-3}"); do
    run "big-$i" "$BIG" "${LIMIT64:-140}"
  done
  # The same without Open MPI's shared-memory transport, whose footprint grows with the ranks
  # on one host (512 here, 8 on a node of a real 64-node job): what a rank itself holds.
  MPIRUN_EXTRA="--mca btl self,tcp" run big-btl-tcp "$BIG" "${LIMIT64:-140}"
fi
# Everything comes back as one tarball (the device returns a few files of $OUT, not hundreds).
pack() {
  tar czf /tmp/issue51.tgz --exclude='*/pairs.csv' --exclude='*/rank_samples.csv' -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/issue51.tgz "$OUT/"
}
if [ "$PART" = big ]; then
  bash launch/cluster.sh down >/dev/null 2>&1
  say "== done $(date -u +%FT%TZ)"
  pack
  exit 0
fi
rig "$MID" 500mbit
run mid "$MID" "${LIMIT32:-100}"
rig "$SMALL" 1gbit
IFS=x read -r snodes _ snics <<<"$SMALL"
SEED=${SEED:-$RANDOM}
node=$((SEED % snodes)) nic=$((SEED / snodes % snics + 1))
say "seed $SEED: node$node eth$nic at a quarter (250mbit)"
bash launch/cluster.sh shape "node$node" "eth$nic" 250mbit >>"$OUT/up-$SMALL.log" 2>&1
# Issue 41's flags (the probe at 4 MiB): at 2 MiB a 1gbit rig's healthy pairs ride its shaper's
# bucket above the link's rate, and such pairs judge nothing.
ARGS="--pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host" \
  run small-slow "$SMALL" "${LIMIT16:-120}" --healthy-hostfile "$OUT/healthy.txt" --drain-list "$OUT/drain.txt"
python3 - "$OUT/small-slow/summary.json" "node$node" "eth$nic" <<'PY' | tee -a "$OUT/lines.txt"
import json, sys
s, host, nic = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
v = s.get("node_verdicts") or []
bad = [x["host"] for x in v if x["verdict"] == "bad"]
others = [x["host"] + " " + x["verdict"] for x in v if x["host"] != host and x["verdict"] != "healthy"]
mine = [x for x in v if x["host"] == host]
named = bool(mine) and mine[0]["verdict"] == "bad" and any(y["nic"] == nic for y in mine[0].get("slow_sides", []))
print(f"small-slow verdicts: {host} {nic} named {named}; bad {bad}; others not healthy {others}")
PY
bash launch/cluster.sh down >/dev/null 2>&1
say "== done $(date -u +%FT%TZ)"
pack
