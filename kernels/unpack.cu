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
// Grid: blockIdx.y = job, blockIdx.x * warps_per_block + warp = fragment (grid-stride).
// One warp per fragment: a 4 KiB fragment is 256 16-byte vectors, i.e. 8 per lane, all 8
// loads issued before the first store. The fragment's descriptor (16 B) is read once per warp
// (all lanes load the same address: one broadcast transaction), works from device memory or
// from host-mapped memory (TCPX's netUnpackMeta ring).
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

extern "C" __global__ void __launch_bounds__(256)
tcpx_unpack(const TcpxUnpackBatch batch, u32 njobs, u64* errors) {
  if (blockIdx.y >= njobs) return;
  const TcpxUnpackJob& job = batch.jobs[blockIdx.y];
  const TcpxLoadMeta* metas = (const TcpxLoadMeta*)job.metas;
  const u64 cnt = job.cnt;
  const u8* bounce = (const u8*)job.bounce;
  const u64 bounce_len = job.bounce_len;
  u8* dst = (u8*)job.dst;
  const u64 dst_len = job.dst_len;

  const u32 lane = threadIdx.x & 31;
  const u32 wpb = blockDim.x >> 5;
  const u64 stride = (u64)gridDim.x * wpb;
  for (u64 f = (u64)blockIdx.x * wpb + (threadIdx.x >> 5); f < cnt; f += stride) {
    // 16-byte descriptor; every lane loads the same address (one broadcast transaction).
    // Volatile, as NCCL's load128: the ring may be host-mapped memory the CPU rewrites.
    u64 lo, dst_off;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(lo), "=l"(dst_off)
                 : "l"(metas + f));
    const u64 src_off = lo & 0xffffffffULL;
    const u64 len = lo >> 32;
    if (src_off + len > bounce_len || dst_off > dst_len || len > dst_len - dst_off) {
      if (lane == 0) atomicAdd(errors, 1ULL);
      continue;
    }
    tcpx_copy_fragment(bounce + src_off, dst + dst_off, len, lane);
  }
}
