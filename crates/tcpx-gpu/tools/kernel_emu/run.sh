#!/usr/bin/env bash
# CPU emulation of kernels/*.cu (no GPU, no CUDA needed: g++ and python3). Every thread of a
# block is a fiber (ucontext); __syncthreads switches fibers, threads run between barriers one
# after another in a random order per phase (so a missing barrier shows up as a mismatch),
# and a barrier that not every thread of the block reaches is reported. Exact for these
# kernels because their threads write disjoint bytes; the warp reduction in tcpx_verify is
# replaced by a per-thread atomicAdd and the inline-PTX descriptor load by two plain loads.
# Warp shuffles are rendezvous points: every lane of the warp must reach the same one (else
# "divergent shuffles" is reported) before any reads another lane's value.
# Checks fill/verify against an independent pattern formula and unpack against a sequential
# memcpy reference (unpack_reference's semantics) on random layouts: aligned and unaligned
# fragments, TCPX-like scrambled pages, metas at any 16-byte alignment, all block sizes and
# chunk sizes, grid-stride launches, up to 2048 descriptors, and corrupt descriptors (which
# must be skipped and counted).
# Usage: [TCPX_EMU_SEED=n] crates/tcpx-gpu/tools/kernel_emu/run.sh
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
             "lo = ((const u64*)p)[0]; hi = ((const u64*)p)[1];", src, flags=re.S)
assert new != src, "descriptor load not found: update run.sh"
# One warp rendezvous per 16-byte shuffle instead of four (same semantics, 4x fewer fiber
# switches).
shfl = re.sub(r'(uint4 tcpx_shfl16\(const uint4 v, u32 src\) \{).*?\n\}',
              r'\1 return emu_shfl16(v, src); }', new, flags=re.S)
assert shfl != new, "tcpx_shfl16 not found: update run.sh"
new = shfl
open(out, "w").write(new)
PY
g++ -O1 -std=c++17 -w -I"$tmp" "$here/harness.cpp" -o "$tmp/emu"
"$tmp/emu"
