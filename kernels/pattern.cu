// Deterministic data pattern: GPU fill and verify.
//
// This is a bit-exact port of the host data check in crates/tcpx-gpu/src/pattern.rs
// (pattern_byte, fill, verify; splitmix64's mix and GOLDEN from crates/tcpx-units/src/rng.rs). Byte `a` (absolute offset in the sender's logical buffer) of origin `o`,
// iteration `i` is
//
//     key      = mix(((o << 32) | i) ^ SEED)
//     word(w)  = mix(key + w * GOLDEN)
//     byte(a)  = little-endian byte (a % 8) of word(a / 8)
//
// Both kernels walk absolute 8-byte words with a grid-stride loop: thread k handles word
// w0 + k. When the buffer address minus the absolute offset is a multiple of 8, absolute
// word boundaries coincide with 8-byte memory boundaries and interior words are moved with
// one aligned 64-bit access; partial words at either end (and every word of a buffer whose
// memory alignment differs from its absolute alignment) go byte by byte.
//
// Compiled at run time by NVRTC (crates/tcpx-gpu/src/nvrtc.rs); self-contained, no includes.

#ifndef TCPX_GPU_TYPES
#define TCPX_GPU_TYPES
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
#endif

#define TCPX_SEED 0x7463707870657266ULL   /* "tcpxperf" */
#define TCPX_GOLDEN 0x9E3779B97F4A7C15ULL

__device__ __forceinline__ u64 tcpx_mix(u64 z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__device__ __forceinline__ u64 tcpx_key(u32 origin, u32 iter) {
  return tcpx_mix((((u64)origin << 32) | (u64)iter) ^ TCPX_SEED);
}

__device__ __forceinline__ u64 tcpx_word(u64 key, u64 index) {
  return tcpx_mix(key + index * TCPX_GOLDEN);
}

// Number of differing bytes between two words (same fold as pattern.rs differing_bytes).
__device__ __forceinline__ u32 tcpx_differing_bytes(u64 a, u64 b) {
  u64 x = a ^ b;
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  return (u32)__popcll(x & 0x0101010101010101ULL);
}

// Fills p[0..len) with pattern(origin, iter, offset + i). Requires offset + len <= 2^64
// (checked on the host).
extern "C" __global__ void __launch_bounds__(256)
tcpx_fill(u8* p, u64 len, u32 origin, u32 iter, u64 offset) {
  if (len == 0) return;
  const u64 key = tcpx_key(origin, iter);
  const u64 end = offset + len;  // absolute, exclusive
  const u64 w0 = offset >> 3;
  const u64 nw = ((end - 1) >> 3) - w0 + 1;
  const bool aligned = ((((u64)p) - offset) & 7) == 0;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < nw; k += stride) {
    const u64 w = w0 + k;
    const u64 v = tcpx_word(key, w);
    const u64 a = w << 3;
    if (aligned && a >= offset && a + 8 <= end) {
      *(u64*)(p + (a - offset)) = v;
    } else {
#pragma unroll
      for (u32 b = 0; b < 8; b++) {
        const u64 ab = a + b;
        if (ab >= offset && ab < end) p[ab - offset] = (u8)(v >> (8 * b));
      }
    }
  }
}

// Adds the number of bytes of p[0..len) that differ from the pattern to *wrong.
extern "C" __global__ void __launch_bounds__(256)
tcpx_verify(const u8* p, u64 len, u32 origin, u32 iter, u64 offset, u64* wrong) {
  u64 count = 0;
  if (len != 0) {
    const u64 key = tcpx_key(origin, iter);
    const u64 end = offset + len;
    const u64 w0 = offset >> 3;
    const u64 nw = ((end - 1) >> 3) - w0 + 1;
    const bool aligned = ((((u64)p) - offset) & 7) == 0;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < nw; k += stride) {
      const u64 w = w0 + k;
      const u64 v = tcpx_word(key, w);
      const u64 a = w << 3;
      if (aligned && a >= offset && a + 8 <= end) {
        const u64 got = *(const u64*)(p + (a - offset));
        if (got != v) count += tcpx_differing_bytes(got, v);
      } else {
#pragma unroll
        for (u32 b = 0; b < 8; b++) {
          const u64 ab = a + b;
          if (ab >= offset && ab < end) count += (p[ab - offset] != (u8)(v >> (8 * b))) ? 1 : 0;
        }
      }
    }
  }
  // Warp sum, then one atomic per warp that saw a wrong byte.
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) count += __shfl_down_sync(0xffffffffu, count, s);
  if ((threadIdx.x & 31) == 0 && count != 0) atomicAdd(wrong, count);
}
