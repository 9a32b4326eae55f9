#!/bin/bash
# usage: pool.sh BIN LABEL N: N runs of a 4-rank -g 8 fullmesh (tcpx-emu, loopback), each
# printing its setup line's seconds and setup threads. old = the build of 555b650, new = the build
# of 72a12cd; "busy": 4 x `sh -c 'while :; do :; done'` beside it.
set -u
cd "$(git rev-parse --show-toplevel)" || exit 1
out=${POOL_OUT:-/tmp/setup-pool}
mkdir -p "$out"
for i in $(seq 1 "$3"); do
  d=$out/$2-$i
  rm -rf "$d"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    timeout 120 mpirun -np 4 "$1" --pattern fullmesh -g 8 -b 64K -e 64K -n 2 -w 1 --progress never -T 60 --out "$d" > "$d.txt" 2>&1
  rc=$?
  echo "$2 run $i rc $rc $(grep -o 'setup: [0-9.]* s' "$d.txt") $(grep -o 'up to [0-9]* setup thread(s) per endpoint' "$d.txt") $(grep -o 'first timed iteration [0-9.]* s' "$d.txt")"
done
