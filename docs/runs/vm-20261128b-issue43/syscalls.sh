#!/usr/bin/env bash
# syscalls.sh BUILD SIZE: system calls and context switches per second, by thread class, of a
# steady 4 x 2 x 2 fullmesh of SIZE on the shared helper-thread model (TCPXEMU_THREADS=shared),
# 3 s of `perf record` (raw_syscalls:sys_enter, sched:sched_switch) 6 s into the run, and the
# bytes the rig's NICs sent meanwhile. BUILD is a .devcarry/ directory (tcpx-perf and its
# plugin). Needs rig 1 up: CLUSTER_RIG=1 launch/cluster.sh up --nodes 4 --nics 2 --rate 1gbit.
set -u
b=$1 size=$2
cd "$(dirname "$0")/../../.." || exit 1
export CLUSTER_RIG=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
tx() { for n in 0 1 2 3; do for e in 1 2; do ip netns exec "r1-node$n" cat "/sys/class/net/eth$e/statistics/tx_bytes"; done; done | paste -sd+ | bc; }
TCPX_PERF=$PWD/.devcarry/$b/tcpx-perf TCPXEMU_THREADS=${THREADS:-shared} CLUSTER_GPUS_PER_NODE=0 timeout 60 \
  bash launch/cluster.sh run -np 8 -- --pattern fullmesh -b "$size" -e "$size" -n 100000 -w 2 -T 60 --mem host --out "$tmp/run" >"$tmp/log" 2>&1 &
sleep 6
pids=$(pgrep -x tcpx-perf | paste -sd,)
tx0=$(tx)
perf record -q -e raw_syscalls:sys_enter -e sched:sched_switch -o "$tmp/perf.data" -p "$pids" -- sleep 3 >/dev/null 2>&1
tx1=$(tx)
pkill -x tcpx-perf; wait
echo "== $b $size: $(( (tx1 - tx0) / 3 / 1000000 )) MB/s on the wire (perf running)"
perf script -i "$tmp/perf.data" -F comm,event,trace 2>/dev/null | awk '{c=$1; sub(/-?[0-9]+$/,"",c); if ($2 ~ /sys_enter/) {match($0,/NR [0-9]+/); k=c" "substr($0,RSTART,RLENGTH)} else k=c" switch"; n[k]++; tot[$2 ~ /sys_enter/ ? "syscalls" : "switches"]++} END {for (k in n) if (n[k] > 600) printf "%8.0f/s %s\n", n[k]/3, k; for (t in tot) printf "%8.0f/s TOTAL %s\n", tot[t]/3, t}' | sort -rn | head -24
rm -rf "$tmp"
