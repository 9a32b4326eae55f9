#!/usr/bin/env bash
# Issue 33, second session, on the 4 x H100 host: where a 128-rank job's time goes before its
# first byte. Binaries in .devcarry/{old,new} (old: main ef9ce73 + TCPX_PERF_TRACE; new: + setup
# threads bind the endpoint's context, tcpx-gpu's Device::current kept per primary context),
# GPU test binaries in .devcarry/tests. Everything lands in $OUT. PART=a: GPU tests, MPI_Init,
# dry runs, rounds (old); PART=b: rounds (new), then nodes without GPUs (CLUSTER_GPUS_PER_NODE=0):
# dry run, all, rounds; PART=c: cuInit in 128 processes, then nodes without GPUs, traced finer;
# PART=d: MPI_Init's components, then 16x8x4 without GPUs in the nodes, default sizes, all and rounds;
# PART=e: 10 runs of 16x8x4, one with a slowed NIC, 64x8x4 with --connect rounds, healthy and slowed;
# PART=f: the slowed 16x8x4 run again, traced, its logs kept.
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h100x4-20261127b-issue33
OUT=${OUT:-/tmp/out}; W=/tmp/w; mkdir -p "$OUT" "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=1
source tools/iproute2-wrap.sh
iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
T=.devcarry/tests
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}'; }
PART=${PART:-a}
{
  date -u; nproc; nvidia-smi -L | head -8
  if [ "$PART" = a ]; then
  echo "== GPU tests of the new build"
  for t in tcpx_gpu gpu nccl_net_tcpxemu; do
    timeout 120 "$T/$t" --test-threads 4 >"$W/test-$t.log" 2>&1; echo "$t: exit $? $(grep -E '^test result' "$W/test-$t.log" | tail -1)"
    grep -E "FAILED|panicked" "$W/test-$t.log" | head -5
  done
  echo "== MPI_Init alone, 128 ranks (mpirun flags of launch/mpirun-args.sh)"
  for v in "" "-x HWLOC_COMPONENTS=-pci"; do
    s=$(date +%s.%N)
    # shellcheck disable=SC2086
    echo "$v: $(timeout 120 mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none $v -np 128 $T/mpi-init-time 2>&1 | tail -1), wall $(since "$s") s"
  done
  fi
  if [ "$PART" = d ]; then
    echo "== MPI_Init alone, 128 ranks, component choices"
    for v in "--mca pml ob1 --mca btl self,vader" "--mca pml ob1 --mca btl self,vader,tcp" "--mca pml ^ucx" "--mca pml ob1 --mca btl self,vader --mca coll ^hcoll,ucc"; do
      s=$(date +%s.%N)
      # shellcheck disable=SC2086
      echo "$v: $(timeout 120 mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none $v -np 128 $T/mpi-init-time 2>&1 | tail -1), wall $(since "$s") s"
    done
    export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF_TRACE=1 TCPX_PERF=$PWD/.devcarry/new/tcpx-perf
    for m in all rounds; do
      echo "== $m-default (16x8x4 at 2gbit, no GPU in the nodes, -b 1M -e 8M -n 10 -w 2 -T 120 --connect $m)"
      bash docs/runs/h100x4-20261127-issue33/diag-run.sh "$W/$m-default" 16 8 4 2gbit -- --pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host --connect $m
      cp "$W/$m-default/log" "$W/$m-default.log"
      python3 $here/trace-summary.py "$W/$m-default.log" >"$OUT/$m-default.trace.txt" 2>&1
      grep -E "^# setup|^ +[0-9]+ +[0-9]+ " "$W/$m-default.log" | cut -c1-300 | head -8
      find "$W/$m-default" \( -name 'rank_samples.csv' -o -name 'samples.csv' -o -name '*.svg' \) -delete
    done
    exit 0
  fi
  if [ "$PART" = e ]; then
    export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=$PWD/.devcarry/new/tcpx-perf
    A=(--pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host)
    echo "== 16x8x4, 10 runs, default flags (--connect all)"
    bash $here/repeat.sh "$W/e16" 16 8 4 2gbit 10 - 90 -- "${A[@]}"
    echo "== 16x8x4, node5 eth3 at a quarter (500mbit)"
    bash $here/repeat.sh "$W/e16slow" 16 8 4 2gbit 1 node5:eth3:500mbit 90 -- "${A[@]}"
    echo "== 64x8x4 at 500mbit, --connect rounds"
    bash $here/repeat.sh "$W/e64" 64 8 4 500mbit 1 - 200 -- "${A[@]}" --connect rounds
    echo "== 64x8x4 at 500mbit, --connect rounds, node37 eth2 at a quarter (125mbit)"
    bash $here/repeat.sh "$W/e64slow" 64 8 4 500mbit 1 node37:eth2:125mbit 200 -- "${A[@]}" --connect rounds
    exit 0
  fi
  if [ "$PART" = f ]; then
    export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=$PWD/.devcarry/new/tcpx-perf TCPX_PERF_TRACE=1
    echo "== 16x8x4, node5 eth3 at a quarter (500mbit), -T 60, traced"
    bash $here/repeat.sh "$W/f16slow" 16 8 4 2gbit 1 node5:eth3:500mbit 110 -- --pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 60 --mem host
    python3 $here/trace-summary.py "$W/f16slow/log1" | tail -12
    grep -v "^trace" "$W/f16slow/log1" | grep -E "tcpx-perf|WARN|error" | cut -c1-250 | sort | uniq -c | sort -rn | head -20
    tar czf "$OUT/f16slow.tgz" -C "$W" f16slow
    exit 0
  fi
  if [ "$PART" = c ]; then
    echo "== cuInit in 128 processes at once (CUDA_VISIBLE_DEVICES unset, then empty)"
    for v in unset empty; do
      s=$(date +%s.%N)
      for i in $(seq 128); do
        if [ $v = unset ]; then $T/cuinit-time; else CUDA_VISIBLE_DEVICES= $T/cuinit-time; fi >"$W/cuinit-$v-$i.txt" &
      done
      wait
      echo "$v: wall $(since "$s") s; $(cat "$W"/cuinit-$v-*.txt | awk '{d += $2; c += $4; if ($4 > m) m = $4} END {printf "dlopen %.2f s, cuInit %.2f s summed, slowest cuInit %.2f s", d, c, m}'); $(sort "$W"/cuinit-$v-*.txt | awk '{print $5, $6, $7, $8}' | uniq -c | tr '\n' ' ')"
    done
  fi
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes 16 --nics 4 --rate 2gbit >"$W/up.log" 2>&1 || tail -3 "$W/up.log"
  run() { # name binary timeout args...
    local name=$1 bin=$2 limit=$3; shift 3
    local s; s=$(date +%s.%N)
    TCPX_PERF_TRACE=1 TCPX_PERF=$PWD/.devcarry/$bin/tcpx-perf timeout -k 5 "$limit" bash launch/cluster.sh run -np 128 -- "$@" --mem host --out "$W/$name" >"$W/$name.log" 2>&1
    echo "== $name ($bin: $*): exit $? in $(since "$s") s"
    grep -E "^# setup|^tcpx-perf: (error|rank [0-9]+: (error|timeout))" "$W/$name.log" | head -3 | cut -c1-400
    python3 $here/trace-summary.py "$W/$name.log" >"$OUT/$name.trace.txt" 2>&1
    head -14 "$OUT/$name.trace.txt"
  }
  if [ "$PART" = a ]; then
  run dry-old old 60 --dry-run
  run dry-new new 60 --dry-run
  run rounds-old old 75 --pattern fullmesh -b 1M -e 1M -n 1 -w 0 -T 60 --connect rounds
  elif [ "$PART" = b ]; then
  run rounds-new new 150 --pattern fullmesh -b 1M -e 1M -n 1 -w 0 -T 60 --connect rounds
  export CLUSTER_GPUS_PER_NODE=0
  run dry-nogpu new 60 --dry-run
  run all-nogpu new 100 --pattern fullmesh -b 1M -e 1M -n 1 -w 0 -T 60 --connect all
  run rounds-nogpu new 120 --pattern fullmesh -b 1M -e 1M -n 1 -w 0 -T 60 --connect rounds
  elif [ "$PART" = c ]; then
  export CLUSTER_GPUS_PER_NODE=0
  run dry-nogpu2 new 60 --dry-run
  run all-nogpu2 new 100 --pattern fullmesh -b 1M -e 1M -n 1 -w 0 -T 60 --connect all
  fi
  bash launch/cluster.sh down >/dev/null 2>&1
} 2>&1 | tee "$OUT/session-$PART.txt"
tar czf "$OUT/logs-$PART.tgz" -C "$W" . 2>/dev/null
