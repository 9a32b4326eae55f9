// Device unpack: NCCL's DEV_UNPACK contract (plugin-abi.md section 2), batched.
//
// A receive that the TCPX plugin completed left its payload scattered over the bounce buffer
// as fragments (devmem pages, usually 4 KiB), described by `loadMeta {src_off, len, dst_off}`:
// copy `len` bytes from `bounce + src_off` to `dst + dst_off`. One launch gathers MANY
// receives: the host passes an array of jobs {metas, cnt, bounce, bounce_len, dst, dst_len}
// BY VALUE as the kernel parameter (at most TCPX_UNPACK_MAX_JOBS, 3 KiB, under the 4 KiB
// parameter limit), so the launch itself carries the job table: no staging buffer, no
// host-to-device copy, nothing to recycle.
//
// Grid: blockIdx.y = job; blockIdx.x = chunk of `per_block` consecutive descriptors of that
// job (grid-stride over chunks). Descriptors are staged per block: thread t < per_block loads
// descriptor t of the chunk (one 16-byte load per thread, so a warp reads up to 512
// contiguous bytes and a chunk of 8 is one 128-byte line), checks it, and writes it to
// shared memory; after a barrier the block's warps take the chunk's fragments round-robin.
// Host-mapped descriptors (TCPX's netUnpackMeta ring, not cached by the GPU) thus cost one
// PCIe round trip per chunk, with each line read once, instead of one per fragment; when a
// block has another chunk (grid-stride), its descriptors are loaded before the current
// chunk's copies start, so that round trip overlaps the copies.
//
// Copy: one warp per fragment. Every fragment, whatever its src_off, dst_off and len, is
// copied with 16-byte vector loads and stores, so the speed hardly depends on alignment
// (TCPX's fragments are whole pages whose destination is shifted by wherever the chunk began
// in the TCP stream, plus partial pages at packet and chunk boundaries, contract #17):
// - the destination words that lie wholly inside the fragment, [align_up(d), align_down(d +
//   len)), are stored as aligned 16-byte vectors, 8 per lane in flight (a 4 KiB page is one
//   round trip);
// - their source bytes are read as ALIGNED 16-byte words, each once. When src and dst are
//   co-aligned ((src - dst) % 16 == 0) a loaded word is stored as is; otherwise each
//   destination word is bytes r..r+15 of two consecutive source words (r = the same offset
//   for the whole fragment, so no divergence): the lane's own word and the next lane's,
//   passed by warp shuffles, merged with two selects and four funnel shifts;
// - the <= 15 head and <= 15 tail bytes (destination outside whole words) are one byte per
//   lane (lanes 0-15 head, 16-31 tail), loaded before and stored after the body so that their
//   latency overlaps it; a fragment with no whole destination word (len <= 30) is all bytes.
// Aligned source words only ever cover bytes of the 16-byte-aligned hull of the fragment's
// source range (each one holds at least one source byte), so the kernel never reads outside
// the 16-byte-aligned hull of [bounce, bounce + bounce_len): inside the same page, and inside
// the allocation whenever its base and size are multiples of 16 (cuMemAlloc: 256-byte base;
// DeviceBuffer and TCPX's bounce buffer: whole pages).
//
// Safety net: a descriptor that points outside [bounce, bounce + bounce_len) or
// [dst, dst + dst_len) is skipped and counted in *errors (the host reads it back with
// Device::unpack_errors), so corrupt metadata cannot scribble over unrelated GPU memory.

#ifndef TCPX_GPU_TYPES
#define TCPX_GPU_TYPES
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
#endif

#define TCPX_UNPACK_MAX_JOBS 64
#define TCPX_UNPACK_UNROLL 8
// Most threads per block, and so most descriptors staged per chunk (one per thread).
#define TCPX_UNPACK_MAX_BLOCK 256
// Blocks of 256 threads resident per SM that the register budget must allow (3: at most 85
// registers a thread, 24 warps an SM; ptxas for sm_90 uses 80 with no spills. 4 would spill,
// 1 or 2 leaves 16 warps an SM).
#define TCPX_UNPACK_MIN_BLOCKS 3

struct __align__(16) TcpxLoadMeta {
  u32 src_off;
  u32 len;
  u64 dst_off;
};

// Must match tcpx_gpu::UnpackJob (48 bytes).
struct TcpxUnpackJob {
  u64 metas;       // device-accessible pointer to cnt TcpxLoadMeta (16-byte aligned)
  u64 cnt;         // number of descriptors (<= 2048)
  u64 bounce;      // bounce buffer base (device pointer)
  u64 bounce_len;  // bytes readable from bounce
  u64 dst;         // destination base (the irecv buffer)
  u64 dst_len;     // bytes writable at dst
};

struct TcpxUnpackBatch {
  TcpxUnpackJob jobs[TCPX_UNPACK_MAX_JOBS];
};

__device__ __forceinline__ uint4 tcpx_ld16(const uint4* p) { return __ldg(p); }

// A 16-byte global store. Spelled out because the destination address is computed from an
// integer (the job table), from which the compiler cannot infer the global space and would
// emit a generic store. (The CPU emulator in tools/kernel_emu compiles the plain store.)
__device__ __forceinline__ void tcpx_st16(uint4* p, const uint4 v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#else
  *p = v;
#endif
}

// Bytes r .. r+15 of the 32 bytes lo|hi (little-endian), for r = 4 * q + sh / 8, q < 4 and sh
// in {0, 8, 16, 24}: what a 16-byte load at (address of lo) + r would return. Two selects
// move by q words, a funnel shift by the remaining bytes (a shift of 0 returns the low word).
__device__ __forceinline__ uint4 tcpx_window(const uint4 lo, const uint4 hi, u32 q, u32 sh) {
  const bool two = q & 2, one = q & 1;
  const u32 t0 = two ? lo.z : lo.x, t1 = two ? lo.w : lo.y, t2 = two ? hi.x : lo.z;
  const u32 t3 = two ? hi.y : lo.w, t4 = two ? hi.z : hi.x, t5 = two ? hi.w : hi.y;
  const u32 w0 = one ? t1 : t0, w1 = one ? t2 : t1, w2 = one ? t3 : t2;
  const u32 w3 = one ? t4 : t3, w4 = one ? t5 : t4;
  uint4 o;
  o.x = __funnelshift_r(w0, w1, sh);
  o.y = __funnelshift_r(w1, w2, sh);
  o.z = __funnelshift_r(w2, w3, sh);
  o.w = __funnelshift_r(w3, w4, sh);
  return o;
}

// Value of `v` in lane src (all 32 lanes must call it together).
__device__ __forceinline__ uint4 tcpx_shfl16(const uint4 v, u32 src) {
  uint4 o;
  o.x = __shfl_sync(0xffffffffu, v.x, src);
  o.y = __shfl_sync(0xffffffffu, v.y, src);
  o.z = __shfl_sync(0xffffffffu, v.z, src);
  o.w = __shfl_sync(0xffffffffu, v.w, src);
  return o;
}

// n aligned 16-byte destination words d[0..n) from aligned source words s: d[i] = s[i] when
// r == 0; otherwise (r in 1..15) d[i] = bytes r .. r+15 of s[i] | s[i+1], reading s[0 ..= n].
// Called by all 32 lanes of the warp with the same arguments (r is the same for every word of
// a fragment, so the branch on it never diverges). Lane t takes words t, t + 32, ...;
// TCPX_UNPACK_UNROLL words per lane in flight, all loaded before the first store (a 4 KiB page
// is one round trip). For r != 0 the word after s[i] is the next lane's word, passed by a
// shuffle (lane 31 gets lane 0's next slot; lane 0 loads one extra word for the last slot),
// so every source word is loaded once.
__device__ __forceinline__ void tcpx_copy_words(const uint4* __restrict__ s, uint4* __restrict__ d,
                                                u32 n, u32 r, u32 lane) {
  const u32 q = r >> 2;
  const u32 sh = (r & 3) * 8;
  const u32 next_lane = (lane + 1) & 31;
  const u32 nload = n + (r != 0 ? 1 : 0);  // source words read
  for (u32 base = 0; base < n; base += 32 * TCPX_UNPACK_UNROLL) {
    // One address per lane, the slots at constant offsets (immediates in the instructions).
    const uint4* sp = s + base + lane;
    uint4* dp = d + base + lane;
    const u32 store_left = n - base;  // slot u stores iff u * 32 + lane < store_left
    const u32 load_left = nload - base;
    // v[TCPX_UNPACK_UNROLL]: the word after the last slot, lane 0 only (r != 0).
    uint4 v[TCPX_UNPACK_UNROLL + 1];
#pragma unroll
    for (u32 u = 0; u <= TCPX_UNPACK_UNROLL; u++) {
      v[u] = make_uint4(0, 0, 0, 0);
      const bool want = u < TCPX_UNPACK_UNROLL ? u * 32 + lane < load_left
                                               : r != 0 && lane == 0 && u * 32 < load_left;
      if (want) v[u] = tcpx_ld16(sp + u * 32);
    }
#pragma unroll
    for (u32 u = 0; u < TCPX_UNPACK_UNROLL; u++) {
      uint4 o = v[u];
      if (r != 0) {
        o = tcpx_window(v[u], tcpx_shfl16(lane == 0 ? v[u + 1] : v[u], next_lane), q, sh);
      }
      if (u * 32 + lane < store_left) tcpx_st16(dp + u * 32, o);
    }
  }
}

// Copies one fragment (any alignment, any length) with the warp; see "Copy" above.
__device__ __forceinline__ void tcpx_copy_fragment(const u8* s, u8* d, u64 len, u32 lane) {
  const u64 da = (u64)d;
  const u64 w_lo = (da + 15) & ~15ULL;  // first whole destination word
  const u64 w_hi = (da + len) & ~15ULL;  // end of the last whole destination word
  if (w_hi <= w_lo) {
    // No whole destination word: len <= 30 < 32 lanes.
    if (lane < len) d[lane] = __ldg(s + lane);
    return;
  }
  const u64 head = w_lo - da;        // 0..15
  const u64 tail = da + len - w_hi;  // 0..15
  // Edge bytes: lane t < 16 takes head byte t, lane 16 + t tail byte t.
  const u64 e = lane < 16 ? lane : (w_hi - da) + (lane - 16);
  const bool edge = lane < 16 ? lane < head : lane - 16 < tail;
  u8 eb = 0;
  if (edge) eb = __ldg(s + e);
  const u8* sb = s + head;  // source of the first whole destination word
  const u32 r = (u32)((u64)sb & 15);
  const uint4* sw = (const uint4*)(sb - r);
  const u32 n = (u32)((w_hi - w_lo) >> 4);  // len < 2^32
  tcpx_copy_words(sw, (uint4*)w_lo, n, r, lane);
  if (edge) d[e] = eb;
}

// One 16-byte descriptor, read with ld.volatile (relaxed, system scope, as NCCL's load128):
// never served from a stale cache line, so it is right for the host-mapped ring the CPU
// wrote before the launch, and costs nothing extra since each descriptor is read once.
__device__ __forceinline__ void tcpx_load_meta(const TcpxLoadMeta* p, u64& lo, u64& hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p));
}

extern "C" __global__ void __launch_bounds__(TCPX_UNPACK_MAX_BLOCK, TCPX_UNPACK_MIN_BLOCKS)
tcpx_unpack(const TcpxUnpackBatch batch, u32 njobs, u32 per_block, u64* errors) {
  // The chunk's checked descriptors: src_off | len << 32 (len 0: nothing to copy), dst_off.
  __shared__ u64 s_lo[TCPX_UNPACK_MAX_BLOCK];
  __shared__ u64 s_dst[TCPX_UNPACK_MAX_BLOCK];
  if (blockIdx.y >= njobs) return;
  const TcpxUnpackJob& job = batch.jobs[blockIdx.y];
  const TcpxLoadMeta* metas = (const TcpxLoadMeta*)job.metas;
  const u64 cnt = job.cnt;
  const u8* bounce = (const u8*)job.bounce;
  const u64 bounce_len = job.bounce_len;
  u8* dst = (u8*)job.dst;
  const u64 dst_len = job.dst_len;

  const u32 tid = threadIdx.x;
  const u32 lane = tid & 31;
  const u32 warp = tid >> 5;
  const u32 wpb = blockDim.x >> 5;
  // Descriptors per chunk: 1..blockDim.x (one per loading thread).
  u32 chunk = per_block;
  if (chunk == 0) chunk = 1;
  if (chunk > blockDim.x) chunk = blockDim.x;
  const u64 step = (u64)gridDim.x * chunk;
  u64 base = (u64)blockIdx.x * chunk;
  // Block-uniform exits and loop conditions only: every thread reaches every barrier.
  if (base >= cnt) return;

  u64 lo = 0, hi = 0;
  if (tid < chunk && base + tid < cnt) tcpx_load_meta(metas + base + tid, lo, hi);
  for (;;) {
    if (tid < chunk) {
      u64 keep_lo = 0, keep_dst = 0;
      if (base + tid < cnt) {
        const u64 src_off = lo & 0xffffffffULL;
        const u64 len = lo >> 32;
        if (src_off + len > bounce_len || hi > dst_len || len > dst_len - hi) {
          atomicAdd(errors, 1ULL);
        } else {
          keep_lo = lo;
          keep_dst = hi;
        }
      }
      s_lo[tid] = keep_lo;
      s_dst[tid] = keep_dst;
    }
    __syncthreads();
    const u64 next = base + step;
    const bool more = next < cnt;
    // Prefetch the next chunk's descriptors; they are first used after this chunk's copies.
    if (more && tid < chunk && next + tid < cnt) tcpx_load_meta(metas + next + tid, lo, hi);
    const u64 rem = cnt - base;
    const u32 n = rem < (u64)chunk ? (u32)rem : chunk;
    for (u32 k = warp; k < n; k += wpb) {
      const u64 m = s_lo[k];
      const u64 len = m >> 32;
      if (len == 0) continue;
      tcpx_copy_fragment(bounce + (m & 0xffffffffULL), dst + s_dst[k], len, lane);
    }
    if (!more) break;
    __syncthreads();  // every warp is done with s_lo / s_dst before they are overwritten
    base = next;
  }
}
