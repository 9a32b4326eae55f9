#!/usr/bin/env bash
# Issue 20 item 5: the cluster rig on a 2-GPU host, 2 nodes x 1 GPU x 1 NIC, every pattern with
# --mem cuda and --baseline nccl. Run from a folder holding target/release/{tcpx-perf,
# libnccl_net_tcpxemu*.so}, launch/{cluster.sh,mpirun-args.sh}, with Debian 12's iproute2
# extracted at ../iproute2 (the GPU host has none). Results under $OUT (default ./out).
set -u
cd "$(dirname "$0")" || exit 1
D=$PWD OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{ date -u; nvidia-smi -L; nproc; uname -r; } >"$OUT/env.txt" 2>&1

# ip/tc wrappers: the carried libraries for iproute2 only, never for what `ip netns exec` starts.
IPR=$(cd "$D/../iproute2" && pwd)
LIBS=$IPR/lib/x86_64-linux-gnu:$IPR/usr/lib/x86_64-linux-gnu
cat >"$D/ip" <<WRAP
#!/bin/sh
if [ "\$1" = netns ] && [ "\$2" = exec ]; then
  ns=\$3; shift 3
  LD_LIBRARY_PATH=$LIBS exec $IPR/bin/ip netns exec "\$ns" env -u LD_LIBRARY_PATH "\$@"
fi
LD_LIBRARY_PATH=$LIBS exec $IPR/bin/ip "\$@"
WRAP
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/sbin/tc "$@"\n' "$LIBS" "$IPR" >"$D/tc"
chmod +x "$D/ip" "$D/tc"
export IP=$D/ip TC=$D/tc TCPX_PERF=$D/target/release/tcpx-perf CLUSTER_RIG=3 CLUSTER_GPUS_PER_NODE=1
NCCL_LIB=$(python3 2>/dev/null -c 'import nvidia.nccl as m; print(m.__path__[0])')/lib/libnccl.so.2
echo "NCCL: $NCCL_LIB" >>"$OUT/env.txt"

bash launch/cluster.sh down >/dev/null 2>&1
bash launch/cluster.sh up --nodes 2 --nics 1 2>&1 | tee "$OUT/up.log"
for p in sendrecv pairs ring fullmesh; do
  echo "== $p" | tee -a "$OUT/summary.txt"
  # shellcheck disable=SC2086
  timeout -k 5 75 bash launch/cluster.sh run -np 2 -- --pattern "$p" ${RUN_ARGS:---mem cuda --baseline nccl --nccl-lib $NCCL_LIB} \
    -b 1M -e 256M -f 4 -n 10 -w 3 -T 30 --out "$OUT/$p" >"$OUT/$p.log" 2>&1
  echo "exit $?" | tee -a "$OUT/summary.txt"
  grep -E '^# (ranks|nodes|mem|baseline|NCCL)|^ +[0-9]+ |warning|error' "$OUT/$p.log" | head -20 >>"$OUT/summary.txt"
done
bash launch/cluster.sh status >"$OUT/status.txt" 2>&1
bash launch/cluster.sh down 2>&1 | tee -a "$OUT/up.log"
