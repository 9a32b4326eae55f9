#!/usr/bin/env bash
# Issue 15 on a one-GPU host (what ran, 2026-11-24 ~04:45 UTC): NCCL through tcpx-perf's
# baseline code (examples/nccl_probe, one rank) in both tcpx-emu modes, and where the loader's
# search finds NCCL. Binaries built on the CPU machine, carried as target/nccl-bin:
# tcpx-perf, libnccl_net_tcpxemu_v7.so, nccl_probe (cargo build --release --example nccl_probe).
set -u
B=target/nccl-bin
NCCL=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null)/lib/libnccl.so.2
echo "# NCCL library: $NCCL"; ls -la "$NCCL"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
export NCCL_SOCKET_IFNAME=lo TCPXEMU_IFNAMES=lo
for mode in unpack host; do
  echo "== probe, TCPXEMU_MODE=$mode: nccl_probe --plugin $B/libnccl_net_tcpxemu_v7.so --nccl-lib \$NCCL -b 1M -e 256M -f 4 -n 10 -w 2 -T 60"
  TCPXEMU_MODE=$mode timeout 150 $B/nccl_probe --plugin $B/libnccl_net_tcpxemu_v7.so --nccl-lib "$NCCL" -b 1M -e 256M -f 4 -n 10 -w 2 -T 60
  echo "rc=$?"
  log=$(ls -t /tmp/tcpx-perf-nccl-*.log 2>/dev/null | head -1)
  echo "-- NCCL log $log (selected lines)"
  grep -E "NCCL version|Loaded net plugin|Using network|DEVICE_UNPACK|GPU Direct|NET/Plugin|Init COMPLETE|WARN" "$log" | cut -c1-200 | head -16
  echo "-- log lines: $(wc -l < "$log")"
done
echo "== which NCCL the loader's search finds (no LD_LIBRARY_PATH): $(ldconfig -p | grep -m2 libnccl)"
