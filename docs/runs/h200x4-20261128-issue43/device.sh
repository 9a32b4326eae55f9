#!/usr/bin/env bash
# Issue 43 on the GPU host: the CPU cost per byte of tcpx-perf + tcpx-emu before and after this
# change, next to raw TCP through the same rig, and the two checks that must not regress.
#   PART=scale: tools/scale-bench.sh 16x8x4@1gbit once per entry of BUILDS, in that order (an
#               entry is BUILD, or BUILD:TCP for a rig built with launch/cluster.sh up --tcp TCP),
#               then a steady stretch of one size (1 MiB, 8 MiB) per build of SPLIT_BUILDS split
#               per thread class (tools/cpu-split.py, 6 s after 12 s of a 1-size run);
#   PART=vs:    the emulator's throughput test (perf_64mib_vs_raw_tcp) of EMU_BUILDS, and
#               launch/vs-nccl-tests.sh at np 2 for VS_BUILDS (nccl-tests built here once).
# A build is a directory of .devcarry. The second session's run (docs/runs/h200x4-20261128b-issue43)
# sets BUILDS, SPLIT_BUILDS, EMU_BUILDS and VS_BUILDS to its head/ and final/.
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
  for entry in $BUILDS; do
    i=$((i + 1))
    b=${entry%%:*} tcp=linux
    [ "$entry" = "$b" ] || tcp=${entry#*:}
    # nowatch: this change with tcpx-emu's ctrl watcher off (a build that reads
    # TCPXEMU_DBG_NOWATCH, made for the first session's comparison only).
    if [ "$b" = nowatch ]; then export TCPXEMU_DBG_NOWATCH=1; else unset TCPXEMU_DBG_NOWATCH; fi
    name=$b
    [ "$tcp" = linux ] || name=$b-$tcp
    CLUSTER_TCP=$tcp TCPX_PERF=$PWD/.devcarry/$b/tcpx-perf OUT=$OUT/scale-$i-$name SHAPES="$SHAPE@$RATE" SLOW_SHAPE='' CUDA_SHAPE='' \
      timeout -k 5 "${SCALE_LIMIT:-240}" bash tools/scale-bench.sh >"$OUT/scale-$i-$name.txt" 2>&1
    echo "== scale run $i, build $b, TCP $tcp (exit $?)" | tee -a "$OUT/lines.txt"
    grep -E 'raw TCP|MiB:|cpu:|exit|warning' "$OUT/scale-$i-$name.txt" | tee -a "$OUT/lines.txt"
    find "$OUT/scale-$i-$name" -name pairs.csv -delete 2>/dev/null
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
  for b in ${EMU_BUILDS:-before new}; do
    echo "== perf_64mib_vs_raw_tcp, build $b" | tee -a "$OUT/lines.txt"
    timeout 120 ".devcarry/$b/emu-tests" --ignored perf_64mib_vs_raw_tcp --nocapture 2>&1 | grep streams | tee -a "$OUT/lines.txt"
  done
  src=$PWD/.devcarry/nccl-tests
  for b in ${VS_BUILDS:-new before}; do
    if [ -x "$src/build/sendrecv_perf" ]; then nt=(NCCL_TESTS="$src"); else nt=(NCCL_TESTS_SRC="$src" MPI_HOME="$PWD/.devcarry/mpi"); fi
    env "${nt[@]}" TCPX_PERF=".devcarry/$b/tcpx-perf" VS_OUT="$OUT/vs-$b" ROUNDS="${ROUNDS:-2}" ITERS=10 WARMUP=3 \
      timeout -k 5 "${VS_LIMIT:-270}" bash launch/vs-nccl-tests.sh >"$OUT/vs-$b.txt" 2>&1
    echo "== vs-nccl-tests, build $b (exit $?)" | tee -a "$OUT/lines.txt"
    tail -25 "$OUT/vs-$b.txt" | tee -a "$OUT/lines.txt"
  done
  ;;
esac
# One tarball and the summary lines come back.
cp "$OUT/lines.txt" "$FINAL/lines-${PART:-scale}.txt"
tar -czf "$FINAL/issue43-${PART:-scale}.tgz" -C "$OUT" . && rm -rf "$OUT"
