#include <cstdint>
#include <cstring>
#include <cstdio>
#include <vector>
#include <random>
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(x)
#define __align__(n) alignas(n)
#define __restrict__
struct uint4 { unsigned x, y, z, w; };
struct Dim { unsigned x, y, z; };
Dim threadIdx, blockIdx, blockDim, gridDim;
template <class T> T __ldg(const T* p) { return *p; }
int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
unsigned long long __shfl_down_sync(unsigned, unsigned long long, int) { return 0; }
unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { auto o = *p; *p += v; return o; }
#include "k.cu"
unsigned BS = 256;
template <class F> void launch(unsigned gx, unsigned gy, F f) {
  gridDim = {gx, gy, 1}; blockDim = {BS, 1, 1};
  for (unsigned by = 0; by < gy; by++) for (unsigned bx = 0; bx < gx; bx++)
    for (unsigned t = 0; t < BS; t++) { blockIdx = {bx, by, 0}; threadIdx = {t, 0, 0}; f(); }
}
static u64 mixr(u64 z){ z=(z^(z>>30))*0xBF58476D1CE4E5B9ULL; z=(z^(z>>27))*0x94D049BB133111EBULL; return z^(z>>31);}
static u8 pat(u32 o, u32 i, u64 a){ u64 k=mixr((((u64)o<<32)|i)^0x7463707870657266ULL); return (u8)(mixr(k+(a/8)*0x9E3779B97F4A7C15ULL)>>(8*(a%8))); }
int main() {
  std::mt19937_64 rng(42);
  int fails = 0;
  // fill/verify
  for (int t = 0; t < 300; t++) {
    size_t cap = 20000; std::vector<u8> buf(cap + 64, 0xEE);
    size_t start = rng() % 40, len = rng() % 9000; u64 off = (t % 3 == 0) ? rng() : rng() % 100000;
    if (off + len < off) off = 5;
    u32 o = rng(), it = rng();
    unsigned g = 1 + rng() % 4;
    u8* p = buf.data() + start;
    launch(g, 1, [&] { tcpx_fill(p, len, o, it, off); });
    int bad = 0;
    for (size_t i = 0; i < buf.size(); i++) {
      bool in = i >= start && i < start + len;
      u8 want = in ? pat(o, it, off + (i - start)) : 0xEE;
      if (buf[i] != want) bad++;
    }
    u64 wrong = 0;
    launch(g, 1, [&] { tcpx_verify(p, len, o, it, off, &wrong); });
    u64 wrong1 = 0;
    if (len) { p[rng() % len] ^= 0x10; launch(g, 1, [&] { tcpx_verify(p, len, o, it, off, &wrong1); }); }
    if (bad || wrong || (len && wrong1 != 1)) { fails++; printf("fill case %d: len %zu start %zu off %llu bad %d wrong %llu wrong1 %llu\n", t, len, start, (unsigned long long)off, bad, (unsigned long long)wrong, (unsigned long long)wrong1); }
  }
  // unpack
  for (int t = 0; t < 200; t++) {
    int njobs = 1 + rng() % 5;
    TcpxUnpackBatch batch; memset(&batch, 0, sizeof batch);
    std::vector<std::vector<TcpxLoadMeta>> metas(njobs);
    std::vector<std::vector<u8>> bounce(njobs), dst(njobs), ref(njobs);
    u64 maxcnt = 0, expect_err = 0;
    for (int j = 0; j < njobs; j++) {
      size_t blen = 70000 + rng() % 100; bounce[j].resize(blen + 16); for (auto& b : bounce[j]) b = rng();
      size_t dlen = 250000; dst[j].assign(dlen + 16, 0x5A);
      int cnt = rng() % 40;
      size_t d = rng() % 16;
      u8* dbase = dst[j].data() + (rng() % 16);
      u8* bbase = bounce[j].data() + (rng() % 16);
      for (int k = 0; k < cnt; k++) {
        u32 len = (rng() % 4 == 0) ? 4096 : rng() % 5000;
        u32 so = rng() % (blen - len);
        if (rng() % 3 == 0) so &= ~15u;
        TcpxLoadMeta m{so, len, d};
        if (rng() % 50 == 0) { m.dst_off = dlen; m.len = 1 + len; expect_err++; }
        else d += len + (rng() % 2 ? 0 : rng() % 7);
        
        metas[j].push_back(m);
      }
      // reference: sequentially apply valid descriptors (later overrides earlier on overlap; avoid overlap by construction? d resets may overlap)
      ref[j] = dst[j];
      u8* rbase = ref[j].data() + (dbase - dst[j].data());
      for (auto& m : metas[j]) if (!(m.src_off + (u64)m.len > blen || m.dst_off > dlen || m.len > dlen - m.dst_off)) memcpy(rbase + m.dst_off, bbase + m.src_off, m.len);
      batch.jobs[j] = TcpxUnpackJob{(u64)metas[j].data(), (u64)cnt, (u64)bbase, blen, (u64)dbase, dlen};
      if ((u64)cnt > maxcnt) maxcnt = cnt;
    }
    u64 errs = 0; BS = 32 * (1 + rng() % 8);
    unsigned gx = maxcnt ? (maxcnt + 7) / 8 : 1;
    if (rng() % 2) gx = 1 + rng() % 3;  // exercise grid-stride
    launch(gx, njobs, [&] { tcpx_unpack(batch, njobs, &errs); });
    for (int j = 0; j < njobs; j++) if (dst[j] != ref[j]) { fails++; printf("unpack case %d job %d mismatch\n", t, j); }
    if (errs != expect_err) { fails++; printf("unpack case %d errs %llu want %llu\n", t, (unsigned long long)errs, (unsigned long long)expect_err); }
  }
  printf("emulation: %d failures\n", fails);
  return fails != 0;
}
