#!/usr/bin/env bash
# Issues 41 and 46 on the GPU host's rig: node verdicts with one NIC at a quarter of the rate,
# chosen at random (seed printed), and healthy runs; the pair figures against their links.
# Binaries: .devcarry/new (this build), .devcarry/old (fdd6c3b); Debian's iproute2 in
# .devcarry/iproute2. Everything lands in $OUT (one line per run in $OUT/lines.txt).
#   SHAPE=NODESxRANKSxNICS RATE=2gbit SLOW_RUNS=10 HEALTHY_RUNS=10 OLD_RUNS=1 SEED=41 [PART=name]
#   EXTRA="..." tcpx-perf flags added to every run (e.g. --probe-pairs 4)
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h200x2-20261128-issue41
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
export CLUSTER_GPUS_PER_NODE=0
if [ -d .devcarry/iproute2 ] && ! command -v tc >/dev/null; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
fi
SHAPE=${SHAPE:-8x8x4} RATE=${RATE:-2gbit} SEED=${SEED:-41}
IFS=x read -r NODES RANKS NICS <<<"$SHAPE"
SLOW_RATE=${SLOW_RATE:-$(( $(echo "$RATE" | tr -dc 0-9) * $( [[ $RATE == *gbit ]] && echo 1000 || echo 1) / 4 ))mbit}
ARGS=${ARGS:---pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host}
PART=${PART:-$SHAPE}
log=$OUT/$PART; mkdir -p "$log"
echo "== $PART: $SHAPE at $RATE, slow NIC at $SLOW_RATE, seed $SEED, host $(hostname), $(nproc) cores, args: $ARGS ${EXTRA:-}" | tee -a "$OUT/lines.txt"
bash launch/cluster.sh down >/dev/null 2>&1
bash launch/cluster.sh up --nodes "$NODES" --nics "$NICS" --rate "$RATE" >"$log/up.log" 2>&1 || { tail -3 "$log/up.log"; exit 1; }
RANDOM=$SEED
one() { # name binary slow(node:nic or -)
  local name=$1 bin=$2 slow=$3 s rc
  if [ "$slow" != - ]; then bash launch/cluster.sh shape "${slow%%:*}" "${slow##*:}" "$SLOW_RATE" >/dev/null || return; fi
  s=$(date +%s.%N)
  # ARGS and EXTRA are flag lists: split on purpose.
  # shellcheck disable=SC2086
  TCPX_PERF=$bin timeout -k 10 300 bash launch/cluster.sh run -np $((NODES * RANKS)) -- $ARGS ${EXTRA:-} --out "$log/$name" >"$log/$name.log" 2>&1
  rc=$?
  if [ "$slow" != - ]; then bash launch/cluster.sh shape "${slow%%:*}" "${slow##*:}" "$RATE" >/dev/null; fi
  python3 "$here/line.py" "$log/$name" "$name" "$rc" "$(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')" "$slow" | tee -a "$OUT/lines.txt"
}
pick() { echo "node$((RANDOM % NODES)):eth$((RANDOM % NICS + 1))"; }
for i in $(seq "${OLD_RUNS:-1}"); do one "old-slow$i" "$PWD/.devcarry/old/tcpx-perf" "$(pick)"; done
for i in $(seq "${SLOW_RUNS:-10}"); do one "slow$i" "$PWD/.devcarry/new/tcpx-perf" "$(pick)"; done
for i in $(seq "${HEALTHY_RUNS:-10}"); do one "healthy$i" "$PWD/.devcarry/new/tcpx-perf" -; done
bash launch/cluster.sh down >/dev/null 2>&1
# Keep pairs.csv of the old run and the first slow run only (a 16 x 8 x 4 pairs.csv is ~6 MB).
find "$log" -name pairs.csv ! -path "*old-slow1*" ! -path "*/slow1/*" -delete
find "$log" -name rank_samples.csv -delete
