#!/usr/bin/env bash
# NCCL as the judge of tcpx-emu's device-unpack emulation.
#
# Runs NCCL itself (PyTorch's torch.distributed, NCCL backend, one process per GPU) on the
# tcpx-emu plugin in unpack mode, with NVLink P2P and shared memory off, so every byte between
# GPUs goes through the plugin and reaches NCCL's buffers only through NCCL's own device-unpack
# kernel reading the plugin's netUnpackMeta descriptors (NCCL_PROTO=Simple). For each GPU count:
# a ring send/recv and an all-reduce at several sizes, checked element by element
# (tools/nccl_judge.py), plus checks on NCCL's log that the plugin and device unpack were used.
#
# Usage: tools/nccl-judge.sh [NGPUS ...]          (default: 2 4)
# Env:   TCPXEMU_PLUGIN  path of libnccl-net-tcpxemu.so (default: .device/emu/, then target/release/)
#        JUDGE_LOGDIR    where the full logs go (default: /tmp/nccl-judge)
#        JUDGE_TIMEOUT   seconds per GPU count (default: 150)
#        any NCCL_* / TCPXEMU_* variable to override the defaults below.
# Exit:  0 when every case of every GPU count passed, 1 otherwise, 2 on a setup error.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
plugin=${TCPXEMU_PLUGIN:-}
if [ -z "$plugin" ]; then
  for c in "$root/.device/emu/libnccl-net-tcpxemu.so" "$root/target/release/libnccl-net-tcpxemu.so"; do
    if [ -f "$c" ]; then plugin=$c; break; fi
  done
fi
if [ -z "$plugin" ] || [ ! -f "$plugin" ]; then
  echo "nccl-judge: FAIL (setup): libnccl-net-tcpxemu.so not found: build it (cargo build --release -p tcpx-emu) or set TCPXEMU_PLUGIN"
  exit 2
fi
plugin=$(readlink -f "$plugin")
logdir=${JUDGE_LOGDIR:-/tmp/nccl-judge}
mkdir -p "$logdir"
tmo=${JUDGE_TIMEOUT:-150}

export NCCL_NET_PLUGIN="$plugin" NCCL_NET=tcpx-emu
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_PROTO=${NCCL_PROTO:-Simple}
# The NIC is lo (no PCI path): let NCCL use GPU buffers (GDR) at any distance, else receives go
# to host memory and never through device unpack.
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-SYS}
export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET}
export TCPXEMU_MODE=${TCPXEMU_MODE:-unpack} TCPXEMU_IFNAMES=${TCPXEMU_IFNAMES:-lo}
export NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-4} NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-1}
export NCCL_DYNAMIC_CHUNK_SIZE=${NCCL_DYNAMIC_CHUNK_SIZE:-524288}
export PYTHONUNBUFFERED=1

echo "nccl-judge: plugin $plugin"
echo "nccl-judge: $(env | grep -E '^(NCCL|TCPXEMU)_' | sort | tr '\n' ' ')"
overall=0
summary=()
for n in "${@:-2 4}"; do
  for ngpu in $n; do
    log="$logdir/judge-${ngpu}gpu.log"
    echo "=== nccl-judge: $ngpu GPUs (log: $log)"
    start=$(date +%s)
    timeout --kill-after=10 "$tmo" python3 -m torch.distributed.run --standalone --nproc_per_node "$ngpu" \
      "$here/nccl_judge.py" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    fails=()
    [ "$rc" -eq 0 ] || fails+=("exit code $rc$([ "$rc" -eq 124 ] && echo ' (timeout)')")
    # Count records, not lines: several ranks write to one stream, so two records can share a line.
    npass=$(grep -o 'JUDGE rank=[0-9]* case=[^ ]* PASS' "$log" | sort -u | wc -l)
    nfail=$(grep -o 'JUDGE rank=[0-9]* case=[^ ]* FAIL' "$log" | sort -u | wc -l)
    ncases=$(( ngpu * 10 ))
    [ "$nfail" -eq 0 ] || fails+=("$nfail failed case(s)")
    [ "$npass" -eq "$ncases" ] || fails+=("$npass of $ncases cases passed")
    grep -q 'NET/Plugin: Loaded net plugin tcpx-emu' "$log" || fails+=("NCCL did not load the tcpx-emu plugin")
    grep -q 'Using network tcpx-emu' "$log" || fails+=("NCCL did not use network tcpx-emu")
    grep -q 'Using NCCL_NET_DEVICE_UNPACK net plugin version 7' "$log" || fails+=("NCCL did not accept device unpack v7")
    nhandles=$(grep -c 'device-unpack handle netDeviceType UNPACK' "$log")
    [ "$nhandles" -gt 0 ] || fails+=("the plugin handed out no UNPACK device handle")
    # Receives that went through the bounce buffer + NCCL's unpack kernel (plugin close lines).
    nunpack=$(grep -oE 'closing recv comm from peer [^ ]+: [0-9]+ device-unpack receives' "$log" |
      awk '{s += $(NF-2)} END {print s + 0}')
    nfirst=$(grep -c 'first device-unpack receive' "$log")
    [ "$nunpack" -gt 0 ] || [ "$nfirst" -gt 0 ] ||
      fails+=("no receive went through device unpack (GDR off? see the 'GPU Direct RDMA' lines)")
    ngdr=$(grep -c 'via NET/tcpx-emu/[0-9]*/GDRDMA' "$log")
    echo "--- cases"
    grep 'JUDGE' "$log" | sort -V
    echo "--- NCCL / plugin evidence"
    grep -m1 'NET/Plugin: Loaded net plugin' "$log"
    grep -m1 'Using network' "$log"
    grep -m1 'NCCL_NET_DEVICE_UNPACK' "$log"
    grep -m1 'NET/tcpx-emu : using' "$log"
    grep -m2 'device-unpack handle' "$log"
    grep -m2 'first device-unpack receive' "$log"
    grep -m2 'GPU Direct RDMA' "$log"
    grep -m4 'via NET/' "$log"
    echo "channels via GDRDMA: $ngdr; UNPACK handles: $nhandles; recv comms with device-unpack receives: $nfirst; device-unpack receives at close: $nunpack"
    grep 'closing recv comm' "$log" | head -8
    if grep -qE 'WARN|Error|error|Traceback|Segmentation|Aborted' "$log"; then
      echo "--- warnings / errors (first 40)"
      grep -E 'WARN|Error|error|Traceback|Segmentation|Aborted|Exception' "$log" | head -40
    fi
    if [ "${#fails[@]}" -eq 0 ]; then
      summary+=("PASS  ${ngpu} GPUs: $npass/$ncases cases, $nfirst recv comms used device unpack ($nunpack receives counted at close), ${secs}s")
    else
      overall=1
      summary+=("FAIL  ${ngpu} GPUs: $(IFS=';'; echo "${fails[*]}") (${secs}s)")
      echo "--- last 40 lines of $log"
      tail -40 "$log"
    fi
  done
done
echo "=== nccl-judge summary"
for s in "${summary[@]}"; do echo "$s"; done
[ "$overall" -eq 0 ] && echo "nccl-judge: PASS" || echo "nccl-judge: FAIL"
exit "$overall"
