#!/usr/bin/env bash
# CPU emulation of kernels/*.cu (no GPU, no CUDA needed: g++ and python3). Runs every thread
# of every block sequentially, which is exact for these kernels because their threads write
# disjoint bytes; the warp reduction in tcpx_verify is replaced by a per-thread atomicAdd and
# the inline-PTX descriptor load by two plain loads. Checks fill/verify against an
# independent pattern formula and unpack against memcpy on random layouts, alignments, block
# sizes and grid-stride launches, including corrupt descriptors.
# Usage: crates/tcpx-gpu/tools/kernel_emu/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$root" "$tmp/k.cu" <<'PY'
import re, sys
root, out = sys.argv[1], sys.argv[2]
src = open(f"{root}/kernels/pattern.cu").read() + "\n" + open(f"{root}/kernels/unpack.cu").read()
src = src.replace("(threadIdx.x & 31) == 0 && count != 0", "count != 0")
new = re.sub(r'asm volatile\("ld\.volatile.*?\);',
             "lo = ((const u64*)(metas + f))[0]; dst_off = ((const u64*)(metas + f))[1];", src, flags=re.S)
assert new != src, "descriptor load not found: update run.sh"
open(out, "w").write(new)
PY
g++ -O1 -std=c++17 -w -I"$tmp" "$here/harness.cpp" -o "$tmp/emu"
"$tmp/emu"
