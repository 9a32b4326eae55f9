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
// Copy: one warp per fragment: a 4 KiB fragment is 256 16-byte vectors, i.e. 8 per lane, all
// 8 loads issued before the first store.
//
// Width: the copy uses the widest W in {16, 8, 4, 2, 1} with (src ^ dst) % W == 0: a few
// head bytes (lane-parallel) bring src (and so dst) to W alignment, the body moves W-byte
// words, the tail (< W bytes) is lane-parallel bytes. So any src_off / dst_off / len works;
// page-aligned fragments take the 16-byte path with no head or tail.
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

template <typename T>
__device__ __forceinline__ T tcpx_ld(const T* p) { return __ldg(p); }

// Copies n words of type T from s to d, lanes striding by 32, UNROLL words in flight per lane.
template <typename T>
__device__ __forceinline__ void tcpx_copy_body(const T* __restrict__ s, T* __restrict__ d, u64 n,
                                               u32 lane) {
  for (u64 base = 0; base < n; base += 32 * TCPX_UNPACK_UNROLL) {
    T v[TCPX_UNPACK_UNROLL];
#pragma unroll
    for (u32 u = 0; u < TCPX_UNPACK_UNROLL; u++) {
      const u64 i = base + u * 32 + lane;
      if (i < n) v[u] = tcpx_ld(s + i);
    }
#pragma unroll
    for (u32 u = 0; u < TCPX_UNPACK_UNROLL; u++) {
      const u64 i = base + u * 32 + lane;
      if (i < n) d[i] = v[u];
    }
  }
}

// Lane-parallel byte copy of n bytes (n may exceed 32).
__device__ __forceinline__ void tcpx_copy_bytes(const u8* __restrict__ s, u8* __restrict__ d, u64 n,
                                                u32 lane) {
  for (u64 i = lane; i < n; i += 32) d[i] = __ldg(s + i);
}

template <typename T>
__device__ __forceinline__ void tcpx_copy_aligned(const u8* s, u8* d, u64 len, u32 lane) {
  const u64 W = sizeof(T);
  u64 head = (W - ((u64)s & (W - 1))) & (W - 1);
  if (head > len) head = len;
  if (head) tcpx_copy_bytes(s, d, head, lane);
  s += head;
  d += head;
  len -= head;
  const u64 n = len / W;
  tcpx_copy_body<T>((const T*)s, (T*)d, n, lane);
  const u64 tail = len - n * W;
  if (tail) tcpx_copy_bytes(s + n * W, d + n * W, tail, lane);
}

__device__ __forceinline__ void tcpx_copy_fragment(const u8* s, u8* d, u64 len, u32 lane) {
  const u32 co = (u32)(((u64)s ^ (u64)d) & 15);
  if (co == 0) {
    tcpx_copy_aligned<uint4>(s, d, len, lane);
  } else if ((co & 7) == 0) {
    tcpx_copy_aligned<u64>(s, d, len, lane);
  } else if ((co & 3) == 0) {
    tcpx_copy_aligned<u32>(s, d, len, lane);
  } else if ((co & 1) == 0) {
    tcpx_copy_aligned<u16>(s, d, len, lane);
  } else {
    tcpx_copy_bytes(s, d, len, lane);
  }
}

// One 16-byte descriptor, read with ld.volatile (relaxed, system scope, as NCCL's load128):
// never served from a stale cache line, so it is right for the host-mapped ring the CPU
// wrote before the launch, and costs nothing extra since each descriptor is read once.
__device__ __forceinline__ void tcpx_load_meta(const TcpxLoadMeta* p, u64& lo, u64& hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p));
}

extern "C" __global__ void __launch_bounds__(TCPX_UNPACK_MAX_BLOCK)
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
