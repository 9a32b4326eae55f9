#!/usr/bin/env bash
# GPU checks that fit a host with a single GPU: two ranks share it, each its own "node"
# (--ranks-per-node 1), which exercises the CUDA registration, device-unpack and staging paths.
#  1. every pattern, --mem cuda, data check on, through the built-in plugin (tcpx-emu as TCPX
#     presents itself: v7 only, unpack mode, unaligned fragments), at odd sizes (registrations
#     are page-rounded) and at 1 GiB; each run must exit 0, #wrong 0, bytes verified by unpack;
#  2. --mem host with a GPU present (the endpoint's context is made current for the plugin);
#  3. the staged path (a host-only plugin with --mem cuda);
#  4. the plugin's own unpack check (examples/unpack_check), when carried.
# Usage (binaries in BIN_DIR: tcpx-perf, libnccl_net_tcpxemu_v7.so, libnccl_net_tcpxemu.so,
# optionally unpack_check):  BIN_DIR=.device/bin tools/one-gpu-checks.sh
set -uo pipefail
BIN_DIR=${BIN_DIR:-target/release}
export NCCL_NVLS_ENABLE=0
[ "$(id -u)" -eq 0 ] && ROOT=(--allow-run-as-root) || ROOT=()
MPI=(mpirun "${ROOT[@]}" --oversubscribe --bind-to none -np 2)
COMMON=(--ranks-per-node 1 -n 5 -w 1 -T 120 --no-out --progress never)
fail=0
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nproc) cores"

# One run: prints exit status, #wrong and the byte check of every size; fails on any of them.
check() {
  local label=$1; shift
  out=$("${MPI[@]}" "$@" 2>&1)
  rc=$?
  wrong=$(echo "$out" | awk '/Out of bounds values/ {print $7}')
  path=$(echo "$out" | grep -m1 '^# memory:' | cut -c1-70)
  printf '%-34s exit %d, wrong %s  %s\n' "$label" "$rc" "${wrong:-?}" "$path"
  if [ "$rc" -ne 0 ] || [ "${wrong:-x}" != 0 ]; then fail=1; echo "$out" | grep -v '^\[plugin\]' | tail -12; fi
}

echo "## 1. every pattern, --mem cuda, v7-only tcpx-emu (unpack mode), odd sizes and 1 GiB"
for pattern in sendrecv pairs ring fullmesh; do
  check "$pattern odd sizes" "$BIN_DIR/tcpx-perf" --pattern "$pattern" --mem cuda -b 1000003 -e 64M -f 8 "${COMMON[@]}"
done
check "sendrecv 1 GiB" "$BIN_DIR/tcpx-perf" --pattern sendrecv --mem cuda -b 1G -e 1G "${COMMON[@]}"
# The byte check: with CUDA memory on an UNPACK plugin, the descriptors witness every receive.
out=$("${MPI[@]}" "$BIN_DIR/tcpx-perf" --pattern ring --mem cuda -b 4M -e 4M --out "${OUT:-/tmp}/ring-bytes" \
  --ranks-per-node 1 -n 3 -w 1 --progress never 2>&1)
echo "ring 4M results.csv: $(cut -d, -f18-22 "${OUT:-/tmp}/ring-bytes/results.csv" | tr '\n' ' ')"
grep -q unpack "${OUT:-/tmp}/ring-bytes/results.csv" || { fail=1; echo "unpack did not verify the bytes"; echo "$out" | tail -5; }

echo "## 2. --mem host on a GPU host (context current for every plugin call)"
check "fullmesh host" "$BIN_DIR/tcpx-perf" --pattern fullmesh --mem host -b 1M -e 64M -f 8 "${COMMON[@]}"

echo "## 3. staged path: --mem cuda through the host-only mode (TCPXEMU_MODE=host)"
check "ring staged" -x TCPXEMU_MODE=host "$BIN_DIR/tcpx-perf" --pattern ring --mem cuda -b 1M -e 64M -f 8 "${COMMON[@]}"

if [ -x "$BIN_DIR/unpack_check" ]; then
  echo "## 4. tcpx-emu unpack_check"
  NCCL_DYNAMIC_CHUNK_SIZE=524288 "$BIN_DIR/unpack_check" 2>&1 | tail -8 || fail=1
fi
echo "RESULT: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
