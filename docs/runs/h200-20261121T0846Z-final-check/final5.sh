#!/usr/bin/env bash
set -u
export NCCL_NVLS_ENABLE=0
TCPXEMU_PLUGIN=.device/bin/libnccl-net-tcpxemu.so JUDGE_TIMEOUT=150 timeout 330 bash launch/nccl-judge.sh 2 4 2>&1 | tail -4
BIN_DIR=.device/bin SECTIONS="correctness" bash launch/h200-gpu-tests.sh 2>&1
V=nsocks=2,ch=2,cs=2097152,buf=1048576,win=16
BIN_DIR=.device/bin PATTERN=fullmesh MEM=cuda SIZES="64M 1G" ITERS=10 WARMUP=2 bash launch/sweep.sh $V $V,zc=off 2>&1
