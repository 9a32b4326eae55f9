#!/usr/bin/env bash
# Issue 43 on the GPU host: the CPU cost per byte of tcpx-perf + tcpx-emu before and after this
# change, next to raw TCP through the same rig, and the two checks that must not regress.
#   PART=scale: tools/scale-bench.sh 16x8x4@1gbit (BUILDS, in that order), then a steady
#               stretch of one size (1 MiB, 8 MiB) per build split per thread class
#               (tools/cpu-split.py, 6 s after 12 s of a 1-size run);
#   PART=vs:    the emulator's throughput test (perf_64mib_vs_raw_tcp) of both builds, and
#               launch/vs-nccl-tests.sh at np 2 for both builds (nccl-tests built here once).
# Carried (.devcarry, not in git): before/ and new/ (stripped tcpx-perf, the v7 plugin, the
# tcpx-emu test binary), iproute2/ (Debian's, the host has none), nccl-tests/ (source, a0b82b2),
# mpi/include (Debian's Open MPI headers: the host's Open MPI has no mpi.h).
set -u
cd "$(dirname "$0")/../../.." || exit 1
FINAL=${OUT:-/tmp/out}; OUT=$FINAL/work; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
if [ -d .devcarry/iproute2 ] && ! command -v tc >/dev/null; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
fi
SHAPE=${SHAPE:-16x8x4} RATE=${RATE:-1gbit} BUILDS=${BUILDS:-before new before new}
echo "# $(hostname): $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs, kernel $(uname -r), $(date -u +%FT%TZ)" | tee -a "$OUT/lines.txt"
case ${PART:-scale} in
scale)
  i=0
  for b in $BUILDS; do
    i=$((i + 1))
    # nowatch: this change with tcpx-emu's ctrl watcher off (a build that reads
    # TCPXEMU_DBG_NOWATCH, made for this comparison only).
    if [ "$b" = nowatch ]; then export TCPXEMU_DBG_NOWATCH=1; else unset TCPXEMU_DBG_NOWATCH; fi
    TCPX_PERF=$PWD/.devcarry/$b/tcpx-perf OUT=$OUT/scale-$i-$b SHAPES="$SHAPE@$RATE" SLOW_SHAPE= CUDA_SHAPE= \
      timeout -k 5 "${SCALE_LIMIT:-240}" bash tools/scale-bench.sh >"$OUT/scale-$i-$b.txt" 2>&1
    echo "== scale run $i, build $b (exit $?)" | tee -a "$OUT/lines.txt"
    grep -E 'raw TCP|MiB:|cpu:|exit' "$OUT/scale-$i-$b.txt" | tee -a "$OUT/lines.txt"
    find "$OUT/scale-$i-$b" -name pairs.csv -delete 2>/dev/null
  done
  IFS=x read -r NODES RANKS NICS <<<"$SHAPE"
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$NODES" --nics "$NICS" --rate "$RATE" >"$OUT/up.log" 2>&1 || { tail -3 "$OUT/up.log"; exit 1; }
  unset TCPXEMU_DBG_NOWATCH
  for size in ${SPLIT_SIZES:-1M 8M}; do
    for b in ${SPLIT_BUILDS:-before new}; do
      rm -rf "$OUT/split-$b-$size"
      CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=$PWD/.devcarry/$b/tcpx-perf timeout -k 5 90 bash launch/cluster.sh run \
        -np $((NODES * RANKS)) -- --pattern fullmesh -b "$size" -e "$size" -n "${SPLIT_ITERS:-400}" -w 2 -T 60 \
        --mem host --out "$OUT/split-$b-$size" >"$OUT/split-$b-$size.log" 2>&1 &
      run=$!
      sleep "${SPLIT_AFTER:-12}"
      echo "== split $b $size" | tee -a "$OUT/lines.txt"
      python3 tools/cpu-split.py "${SPLIT_FOR:-6}" --json "$OUT/split-$b-$size.json" | tee -a "$OUT/lines.txt"
      pkill -x tcpx-perf; wait "$run" 2>/dev/null
      sleep 1
    done
  done
  bash launch/cluster.sh down >/dev/null 2>&1
  ;;
vs)
  for b in before new; do
    echo "== perf_64mib_vs_raw_tcp, build $b" | tee -a "$OUT/lines.txt"
    timeout 120 ".devcarry/$b/emu-tests" --ignored perf_64mib_vs_raw_tcp --nocapture 2>&1 | grep streams | tee -a "$OUT/lines.txt"
  done
  src=$PWD/.devcarry/nccl-tests
  for b in new before; do
    if [ -x "$src/build/sendrecv_perf" ]; then nt=(NCCL_TESTS="$src"); else nt=(NCCL_TESTS_SRC="$src" MPI_HOME="$PWD/.devcarry/mpi"); fi
    env "${nt[@]}" TCPX_PERF=".devcarry/$b/tcpx-perf" VS_OUT="$OUT/vs-$b" ROUNDS=${ROUNDS:-2} ITERS=10 WARMUP=3 \
      timeout -k 5 "${VS_LIMIT:-270}" bash launch/vs-nccl-tests.sh >"$OUT/vs-$b.txt" 2>&1
    echo "== vs-nccl-tests, build $b (exit $?)" | tee -a "$OUT/lines.txt"
    tail -25 "$OUT/vs-$b.txt" | tee -a "$OUT/lines.txt"
  done
  ;;
esac
# One tarball and the summary lines come back.
cp "$OUT/lines.txt" "$FINAL/lines-${PART:-scale}.txt"
tar -czf "$FINAL/issue43-${PART:-scale}.tgz" -C "$OUT" . && rm -rf "$OUT"
