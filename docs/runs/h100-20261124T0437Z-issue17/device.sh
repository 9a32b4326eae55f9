#!/usr/bin/env bash
# Issue 17 on the GPU host, one call. Sections write to $OUT as they go.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TCPXEMU_MODE=host NCCL_DYNAMIC_CHUNK_SIZE=524288
source launch/mpirun-args.sh
T0=$(date +%s)
stamp() { echo "== $(($(date +%s) - T0)) s: $*"; }
SECTIONS=${SECTIONS:-A E G F2 D2}

secA() {
  {
    date -u; hostname; nproc; lscpu; numactl -H 2>/dev/null; nvidia-smi -L
    bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f')
    echo "GPU $bus local_cpulist: $(cat /sys/bus/pci/devices/${bus#0000}/local_cpulist 2>/dev/null || cat /sys/bus/pci/devices/${bus:4}/local_cpulist)"
    mpirun --version | head -1
    md5sum new/* old/*
    mpirun "${MPIRUN_ARGS[@]}" -np 2 new/tcpx-perf --pattern pairs --dir uni --mem host --dry-run 2>&1
    mpirun "${MPIRUN_ARGS[@]}" -np 2 bash -c 'echo "rank $OMPI_COMM_WORLD_RANK affinity: $(grep Cpus_allowed_list /proc/self/status)"'
    echo "### E: a waiting rank's CPU (TCPXEMU_FAULT=slow on rank 0)"
  } >"$OUT/env.log" 2>&1
}

# E: a waiting rank's CPU: rank 0's helper sleeps 1 ms per 512 KiB chunk (64 MiB: 128 ms per iteration).
secE() {
  for poll in spin adaptive spin adaptive; do
    echo "--poll $poll"
    TCPXEMU_FAULT=slow TCPXEMU_FAULT_RANK=0 mpirun "${MPIRUN_ARGS[@]}" -np 2 -x TCPXEMU_FAULT -x TCPXEMU_FAULT_RANK \
      new/tcpx-perf --pattern pairs --dir uni --mem host -b 64M -e 64M --chunk 64M -n 3 -w 1 -c 0 --poll $poll --no-out --progress never 2>&1 |
      grep -E '^ +[0-9]|^# +[0-9]{5,} |CPU'
  done >>"$OUT/env.log" 2>&1
}

# B: the issue's table with the old build (spin, before this work) against the bare plugin, 512 MiB.
secB() {
  SOCKS="1 4 8" SIZES="512M" ROUNDS=3 BIN_DIR=old bash launch/overhead.sh >"$OUT/B-old-vs-bare.log" 2>&1
}

# C: the acceptance table: every socket count 1-8, 64 MiB-1 GiB, default tcpx-perf (adaptive).
secC() {
  SOCKS="1 2 3 4 5 6 7 8" SIZES="64M 1G" ROUNDS=${CROUNDS:-4} BIN_DIR=new bash launch/overhead.sh >"$OUT/C-overhead.log" 2>&1
}

# F: old vs new build, same command, alternated (launch/ab-binaries.sh): 2-rank pairs and 4-rank sendrecv.
secF() {
  {
    echo "### pairs uni, 8 sockets, 2 ranks (the issue's command)"
    OLD_DIR=$PWD/old NEW_DIR=$PWD/new NP=2 ROUNDS=3 MPI_ARGS="-x NCCL_NSOCKS_PERTHREAD=8 -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE" \
      bash ../../launch/ab-binaries.sh --pattern pairs --dir uni --mem host -b 512M -e 512M --chunk 64M --window 8 -n 8 -w 2 -c 0
    echo "### sendrecv, 4 sockets, 4 ranks"
    OLD_DIR=$PWD/old NEW_DIR=$PWD/new NP=4 ROUNDS=3 MPI_ARGS="-x NCCL_NSOCKS_PERTHREAD=4 -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE" \
      bash ../../launch/ab-binaries.sh --pattern sendrecv --mem host -b 256M -e 1G -f 4 --chunk 64M --window 8 -n 5 -w 2 -c 0
  } >"$OUT/F-ab-old-new.log" 2>&1
}

# D: 4 ranks, aggregate against raw loopback TCP with the same stream count, same call.
secD() {
  export TCPXEMU_SOCKBUF=524288
  {
    echo "# raw loopback, 512 KiB chunks and socket buffers: hot buffers; a cold 64 MiB receive ring per stream; cold send and receive rings"
    RING=1 new/loopback_copies 12 16
    RING=128 new/loopback_copies 12 16
    RING=128 SEND_RING=128 new/loopback_copies 12 16
    for pat in "sendrecv 4" "fullmesh 1"; do
      set -- $pat
      for round in 1 2; do
        echo "### $1 NCCL_NSOCKS_PERTHREAD=$2 TCPXEMU_SOCKBUF=$TCPXEMU_SOCKBUF --poll adaptive round $round"
        NCCL_NSOCKS_PERTHREAD=$2 mpirun "${MPIRUN_ARGS[@]}" -np 4 -x NCCL_NSOCKS_PERTHREAD -x TCPXEMU_SOCKBUF -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE \
          new/tcpx-perf --pattern $1 --mem host -b 256M -e 1G -f 2 --chunk 64M --window 8 -n 5 -w 2 -c 0 --no-out --progress never 2>&1 |
          grep -E '^ +[0-9]|^# +[0-9]{5,} |CPU|error'
      done
    done
    echo "### raw again (drift check)"
    RING=128 SEND_RING=128 new/loopback_copies 12 16
  } >"$OUT/D-aggregate.log" 2>&1
  unset TCPXEMU_SOCKBUF
}


# G: the acceptance table, final build: sockets 1 4 8, 64 MiB-1 GiB.
secG() {
  SOCKS="1 4 8" SIZES="64M 1G" ROUNDS=3 BIN_DIR=new bash launch/overhead.sh >"$OUT/G-overhead.log" 2>&1
}

# F2: old vs new build, the issue's command at 1, 4 and 8 sockets (launch/ab-binaries.sh).
secF2() {
  for k in 1 4 8; do
    echo "### pairs uni, $k sockets, 2 ranks"
    OLD_DIR=$PWD/old NEW_DIR=$PWD/new NP=2 ROUNDS=3 MPI_ARGS="-x NCCL_NSOCKS_PERTHREAD=$k -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE" \
      bash ../../launch/ab-binaries.sh --pattern pairs --dir uni --mem host -b 512M -e 512M --chunk 64M --window 8 -n 8 -w 2 -c 0
  done >"$OUT/F2-ab-old-new.log" 2>&1
}

# D2: 4 ranks with the final build, against raw loopback with cold buffers.
secD2() {
  export TCPXEMU_SOCKBUF=524288
  {
    RING=128 SEND_RING=128 new/loopback_copies 12 16
    for pat in "sendrecv 4" "fullmesh 1"; do
      set -- $pat
      for round in 1 2; do
        echo "### $1 NCCL_NSOCKS_PERTHREAD=$2 TCPXEMU_SOCKBUF=$TCPXEMU_SOCKBUF round $round"
        NCCL_NSOCKS_PERTHREAD=$2 mpirun "${MPIRUN_ARGS[@]}" -np 4 -x NCCL_NSOCKS_PERTHREAD -x TCPXEMU_SOCKBUF -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE \
          new/tcpx-perf --pattern $1 --mem host -b 256M -e 1G -f 2 --chunk 64M --window 8 -n 5 -w 2 -c 0 --no-out --progress never 2>&1 |
          grep -E '^ +[0-9]|^# +[0-9]{5,} |CPU|error'
      done
    done
    RING=1 new/loopback_copies 12 16
  } >"$OUT/D2-aggregate.log" 2>&1
  unset TCPXEMU_SOCKBUF
}

for s in $SECTIONS; do
  stamp "section $s"
  "sec$s"
done
stamp done
