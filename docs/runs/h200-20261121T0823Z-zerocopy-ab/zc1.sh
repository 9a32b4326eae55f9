#!/usr/bin/env bash
# Zero-copy sends: correctness (every pattern, --mem cuda -c 1; NCCL judge) and A/B against copying sends.
set -u
export NCCL_NVLS_ENABLE=0
B=.device/bin
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
echo "# $(nvidia-smi -L | wc -l) GPUs; $(nproc) cores; $(uname -r); pipe-max-size $(cat /proc/sys/fs/pipe-max-size)"
echo "## correctness, TCPXEMU_ZEROCOPY=1"
for shape in "4 1" "1 4" "2 1"; do set -- $shape
  for pattern in sendrecv pairs ring fullmesh; do
    out=$("${MPI[@]}" -np $1 -x NCCL_NSOCKS_PERTHREAD=2 -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=1048576 -x TCPXEMU_ZEROCOPY=1 \
      $B/tcpx-perf --pattern $pattern -g $2 --mem cuda -b 1M -e 64M -f 8 -n 5 -w 1 --chunk 4M --window 8 -T 60 --no-out --progress never 2>&1)
    rc=$?; wrong=$(echo "$out" | awk '/Out of bounds values/ {print $7}')
    echo "$pattern np=$1 -g $2 cuda: exit $rc wrong ${wrong:-?}"; [ $rc -ne 0 ] && echo "$out" | tail -8
  done
done
for pattern in sendrecv fullmesh; do
  out=$("${MPI[@]}" -np 4 -x NCCL_NSOCKS_PERTHREAD=2 -x NCCL_SOCKET_NTHREADS=1 -x TCPXEMU_ZEROCOPY=1 \
    $B/tcpx-perf --pattern $pattern --mem host -b 1K -e 64M -f 16 -n 5 -w 1 -T 60 --no-out --progress never 2>&1)
  rc=$?; wrong=$(echo "$out" | awk '/Out of bounds values/ {print $7}')
  echo "$pattern np=4 host: exit $rc wrong ${wrong:-?}"; [ $rc -ne 0 ] && echo "$out" | tail -8
done
echo "## NCCL judge, TCPXEMU_ZEROCOPY=1"
TCPXEMU_ZEROCOPY=1 TCPXEMU_PLUGIN=$B/libnccl-net-tcpxemu.so JUDGE_TIMEOUT=150 timeout 200 bash launch/nccl-judge.sh 4 2>&1 | tail -6
echo "## A/B"
V=nsocks=2,ch=2,cs=1048576,buf=262144,win=16
for rep in 1 2; do
  BIN_DIR=$B PATTERN=fullmesh MEM=cuda SIZES="64M 1G" ITERS=10 WARMUP=2 bash launch/sweep.sh $V,zc=0 $V,zc=1 $V,zc=1,buf=1048576 2>&1
  BIN_DIR=$B PATTERN=fullmesh MEM=host SIZES="64M 1G" ITERS=10 WARMUP=2 bash launch/sweep.sh $V,zc=0 $V,zc=1 2>&1
  BIN_DIR=$B PATTERN=sendrecv MEM=cuda SIZES="64M 1G" ITERS=10 WARMUP=2 bash launch/sweep.sh $V,zc=0 $V,zc=1 2>&1
  BIN_DIR=$B PATTERN=sendrecv MEM=host SIZES="64M 1G" ITERS=10 WARMUP=2 bash launch/sweep.sh $V,zc=0 $V,zc=1 2>&1
done
