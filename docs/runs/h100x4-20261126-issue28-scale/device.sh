#!/usr/bin/env bash
# Issue 28 on the device tool's 4 x H100 host, from the repository root, with the old build
# (0e51949) in .devcarry/old and the new one in .devcarry/new (stripped tcpx-perf, both plugins,
# unpack_check, the tcpx-emu unit tests as emu-tests) and Debian 12's iproute2 in
# .devcarry/iproute2. PHASES: gpu (the new plugin's CUDA paths), ab (old vs new, same call),
# scale (tools/scale-bench.sh on the new build), before (the old build at scale), peers
# (--max-peers all / 16 at 8 x 8 x 4). Results under $OUT.
set -u
OUT=${OUT:-/tmp/out} PHASES=${PHASES:-gpu ab}
N=$PWD/.devcarry/new O=$PWD/.devcarry/old
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
{ date -u; nvidia-smi -L; nproc; uname -r; echo "pid_max $(cat /proc/sys/kernel/pid_max)"; } >"$OUT/env.txt" 2>&1
for phase in $PHASES; do
  case $phase in
    gpu)
      {
        echo "== bounce test"; "$N/emu-tests" --exact tests::bounce::receive_comms_that_only_see_host_buffers_reserve_no_bounce_space --nocapture 2>&1 | tail -5
        echo "== shared + CUDA refusal"; "$N/emu-tests" tests::shared 2>&1 | tail -3
        echo "== unpack_check"; TCPXEMU_MODE=unpack "$N/unpack_check" 256 8 2>&1 | tail -5
        echo "== one-gpu-checks"; BIN_DIR=$N bash tools/one-gpu-checks.sh 2>&1 | tail -25
      } >"$OUT/gpu.txt" 2>&1 ;;
    ab)
      for run in "2 --pattern sendrecv --mem host -b 16M -e 256M -f 4" "4 --pattern fullmesh --mem host -b 16M -e 256M -f 4" \
                 "2 --pattern sendrecv --mem cuda -b 16M -e 256M -f 4" "4 --pattern fullmesh --mem cuda -b 16M -e 256M -f 4"; do
        read -r np args <<<"$run"
        echo "== NP=$np $args"
        # shellcheck disable=SC2086
        OLD_DIR=$O NEW_DIR=$N NP=$np ROUNDS=3 bash tools/ab-binaries.sh $args -n 10 -w 3 2>&1 | tail -6
      done >"$OUT/ab.txt" 2>&1 ;;
    scale)
      OUT=$OUT/scale IPROUTE2=.devcarry/iproute2 TCPX_PERF=$N/tcpx-perf bash tools/scale-bench.sh >/dev/null 2>&1 ;;
    before)
      OUT=$OUT/before IPROUTE2=.devcarry/iproute2 TCPX_PERF=$O/tcpx-perf SHAPES="8x8x4 16x8x4" SLOW_SHAPE= CUDA_SHAPE= \
        bash tools/scale-bench.sh >/dev/null 2>&1 ;;
    peers)
      for p in all 16; do
        OUT=$OUT/peers-$p IPROUTE2=.devcarry/iproute2 TCPX_PERF=$N/tcpx-perf SHAPES=8x8x4 SLOW_SHAPE= CUDA_SHAPE= \
          ARGS="--pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --max-peers $p" bash tools/scale-bench.sh >/dev/null 2>&1
      done ;;
  esac
done
# Small files only come back: drop the per-iteration CSVs and pictures of the scale runs.
find "$OUT" \( -name 'rank_samples.csv' -o -name 'samples.csv' -o -name '*.svg' -o -name 'peaks.raw' -o -name '.bin' \) -exec rm -rf {} + 2>/dev/null
find "$OUT" -name summary.txt -o -name '*.txt' | head -50 | xargs tail -n +1 2>/dev/null | head -300
