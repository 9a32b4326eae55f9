#!/usr/bin/env bash
# split.sh BUILD SIZE: CPU per GB on the wire by thread class (tools/cpu-split.py 4) of a steady
# 4 x 2 x 2 fullmesh of SIZE, 6 s into the run; THREADS=shared for tcpx-emu's shared model
# (default: auto, per-socket threads at this size). BUILD is a .devcarry/ directory. Needs rig
# 1 up: CLUSTER_RIG=1 launch/cluster.sh up --nodes 4 --nics 2 --rate 1gbit.
set -u
b=$1 size=$2
cd "$(dirname "$0")/../../.." || exit 1
export CLUSTER_RIG=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
TCPX_PERF=$PWD/.devcarry/$b/tcpx-perf TCPXEMU_THREADS=${THREADS:-auto} CLUSTER_GPUS_PER_NODE=0 timeout 60 \
  bash launch/cluster.sh run -np 8 -- --pattern fullmesh -b "$size" -e "$size" -n 100000 -w 2 -T 60 --mem host --out "$tmp/run" >"$tmp/log" 2>&1 &
sleep 6
python3 tools/cpu-split.py 4 | grep -E "^# |endpoint|tcpxemu-loop|main thread|^total" | sed "s/^/$b $size: /"
pkill -x tcpx-perf; wait
rm -rf "$tmp"
