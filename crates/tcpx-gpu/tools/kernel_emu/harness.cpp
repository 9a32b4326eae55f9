#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <algorithm>
#include <functional>
#include <ucontext.h>
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__
// One block runs at a time, so a function-local static is the block's shared memory.
#define __shared__ static
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  return (unsigned)(((((unsigned long long)hi) << 32) | lo) >> (sh & 31));
}
struct Dim { unsigned x, y, z; };
Dim threadIdx, blockIdx, blockDim, gridDim;
template <class T> T __ldg(const T* p) { return *p; }
int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
unsigned long long __shfl_down_sync(unsigned, unsigned long long, int) { return 0; }
unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { auto o = *p; *p += v; return o; }

// Fibers: one per thread of the running block.
static ucontext_t sched_ctx;
static std::vector<ucontext_t> fib_ctx;
static std::vector<std::vector<char>> fib_stack;
static std::vector<int> fib_state;  // 0 running, 1 at barrier, 2 done, 3 at a warp shuffle
static unsigned cur_thread;
static const std::function<void()>* cur_fn;
static long barrier_errors = 0;
static long shuffle_errors = 0;
// Warp shuffles: a lane deposits its value and waits until every lane of its warp has reached
// the same shuffle (as __shfl_sync with a full mask demands), then reads the source lane's
// value. Two buffers by shuffle parity: a lane can be one shuffle ahead of a lane that has
// not read yet, never two (it would wait for that lane at the next one).
static std::vector<unsigned> shfl_val[2];
static std::vector<unsigned long> shfl_seq;
static void fiber_main() {
  (*cur_fn)();
  fib_state[cur_thread] = 2;
  swapcontext(&fib_ctx[cur_thread], &sched_ctx);
}
void __syncthreads() {
  fib_state[cur_thread] = 1;
  swapcontext(&fib_ctx[cur_thread], &sched_ctx);
}
// Deposits v, waits for the warp, returns the value lane `src` deposited.
template <class T> static T emu_shuffle(std::vector<T>* slots, T v, unsigned src) {
  const unsigned t = cur_thread;
  const unsigned par = shfl_seq[t] & 1;
  slots[par][t] = v;
  shfl_seq[t]++;
  fib_state[t] = 3;
  swapcontext(&fib_ctx[t], &sched_ctx);
  return slots[par][(t & ~31u) + (src & 31)];
}
static std::vector<uint4> shfl_val16[2];
unsigned __shfl_sync(unsigned, unsigned v, int src) { return emu_shuffle(shfl_val, v, (unsigned)src); }
uint4 emu_shfl16(uint4 v, unsigned src) { return emu_shuffle(shfl_val16, v, src); }
#include "k.cu"
unsigned BS = 256;
static std::mt19937_64 order_rng(7);
template <class F> void launch(unsigned gx, unsigned gy, F f) {
  gridDim = {gx, gy, 1}; blockDim = {BS, 1, 1};
  std::function<void()> fn = f;
  cur_fn = &fn;
  if (fib_ctx.size() < BS) {
    fib_ctx.resize(BS); fib_stack.resize(BS); fib_state.resize(BS);
    shfl_val[0].resize(BS); shfl_val[1].resize(BS); shfl_seq.resize(BS);
    shfl_val16[0].resize(BS); shfl_val16[1].resize(BS);
  }
  std::vector<unsigned> order(BS);
  for (unsigned by = 0; by < gy; by++) for (unsigned bx = 0; bx < gx; bx++) {
    blockIdx = {bx, by, 0};
    for (unsigned t = 0; t < BS; t++) {
      fib_stack[t].resize(1 << 16);
      getcontext(&fib_ctx[t]);
      fib_ctx[t].uc_stack.ss_sp = fib_stack[t].data();
      fib_ctx[t].uc_stack.ss_size = fib_stack[t].size();
      fib_ctx[t].uc_link = nullptr;
      makecontext(&fib_ctx[t], fiber_main, 0);
      fib_state[t] = 0;
      shfl_seq[t] = 0;
      order[t] = t;
    }
    for (;;) {
      // One pass: every runnable thread runs to its next barrier, shuffle or end, in a
      // random order.
      std::shuffle(order.begin(), order.end(), order_rng);
      for (unsigned t : order) {
        if (fib_state[t] != 0) continue;
        cur_thread = t;
        threadIdx = {t, 0, 0};
        swapcontext(&sched_ctx, &fib_ctx[t]);
      }
      // Warps whose 32 lanes all reached the same shuffle go on; a warp with some lanes at a
      // shuffle and none runnable is divergent (reported, then released to finish).
      bool released = false;
      for (unsigned w = 0; w < BS; w += 32) {
        unsigned at_shfl = 0;
        bool same = true;
        for (unsigned t = w; t < w + 32; t++) {
          if (fib_state[t] != 3) continue;
          at_shfl++;
          same &= shfl_seq[t] == shfl_seq[w];
        }
        if (at_shfl == 0) continue;
        if (at_shfl != 32 || !same) shuffle_errors++;
        for (unsigned t = w; t < w + 32; t++) if (fib_state[t] == 3) fib_state[t] = 0;
        released = true;
      }
      if (released) continue;
      unsigned at_bar = 0, done = 0;
      for (unsigned t = 0; t < BS; t++) { at_bar += fib_state[t] == 1; done += fib_state[t] == 2; }
      if (done == BS) break;
      if (at_bar != BS) {  // some threads left while others wait: divergent barrier
        barrier_errors++;
        if (at_bar == 0) break;
      }
      for (unsigned t = 0; t < BS; t++) if (fib_state[t] == 1) fib_state[t] = 0;
    }
  }
}
static u64 mixr(u64 z){ z=(z^(z>>30))*0xBF58476D1CE4E5B9ULL; z=(z^(z>>27))*0x94D049BB133111EBULL; return z^(z>>31);}
static u8 pat(u32 o, u32 i, u64 a){ u64 k=mixr((((u64)o<<32)|i)^0x7463707870657266ULL); return (u8)(mixr(k+(a/8)*0x9E3779B97F4A7C15ULL)>>(8*(a%8))); }
int main() {
  const char* seed_env = getenv("TCPX_EMU_SEED");
  std::mt19937_64 rng(seed_env ? strtoull(seed_env, nullptr, 0) : 42);
  order_rng.seed(seed_env ? strtoull(seed_env, nullptr, 0) + 1 : 7);
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
  int unpack_cases = 0;
  for (int t = 0; t < 400; t++) {
    const int mode = t % 4;  // 0: random fragments, 1: TCPX-like scrambled pages, 2: many small, 3: up to 2048
    int njobs = 1 + rng() % 5;
    TcpxUnpackBatch batch; memset(&batch, 0, sizeof batch);
    std::vector<std::vector<u8>> meta_store(njobs);
    std::vector<std::vector<u8>> bounce(njobs), dst(njobs), ref(njobs);
    u64 maxcnt = 0, expect_err = 0;
    for (int j = 0; j < njobs; j++) {
      int cnt;
      if (mode == 3) cnt = (rng() % 2) ? 2048 : 1 + rng() % 2048;
      else if (mode == 2) cnt = rng() % 300;
      else cnt = rng() % 40;
      if (rng() % 10 == 0) cnt = 0;
      size_t blen = mode == 1 ? (size_t)(cnt + 3) * 4096 : (mode >= 2 ? 4096 * 64 + rng() % 100 : 70000 + rng() % 100);
      bounce[j].resize(blen + 16); for (auto& b : bounce[j]) b = rng();
      size_t dlen = mode == 1 ? (size_t)cnt * 4096 + 1 : (mode == 3 ? (size_t)cnt * 600 + 8192 : 250000);
      dst[j].assign(dlen + 16, 0x5A);
      u8* dbase = dst[j].data() + (mode == 1 ? 0 : rng() % 16);
      u8* bbase = bounce[j].data() + (mode == 1 ? 0 : rng() % 16);
      std::vector<TcpxLoadMeta> ms;
      if (mode == 1) {
        std::vector<u32> slots(cnt + 3); for (u32 k = 0; k < slots.size(); k++) slots[k] = k;
        std::shuffle(slots.begin(), slots.end(), rng);
        for (int k = 0; k < cnt; k++) ms.push_back(TcpxLoadMeta{slots[k] * 4096u, k == cnt - 1 ? 1u + (u32)(rng() % 4096) : 4096u, (u64)k * 4096});
        std::shuffle(ms.begin(), ms.end(), rng);
      } else {
        size_t d = rng() % 16;
        for (int k = 0; k < cnt; k++) {
          u32 maxlen = mode == 0 ? 5000 : (mode == 2 ? 300 : 590);
          u32 len = (rng() % 4 == 0 && mode == 0) ? 4096 : rng() % maxlen;
          if (rng() % 20 == 0) len = 0;
          u32 so = rng() % (blen - len + 1);
          if (rng() % 3 == 0) so &= ~15u;
          TcpxLoadMeta m{so, len, d};
          d += len + (rng() % 2 ? 0 : rng() % 7);
          if (d > dlen) { d = rng() % 16; }  // wrap: later descriptors may overlap earlier ones only if valid order matters
          ms.push_back(m);
        }
      }
      // Corrupt some descriptors (skipped and counted by the kernel).
      for (auto& m : ms) {
        if (rng() % 40 != 0) continue;
        switch (rng() % 5) {
          case 0: m.dst_off = dlen; m.len = 1 + m.len; break;                        // dst end past dst_len
          case 1: m.dst_off = dlen + 1 + rng() % 1000; m.len = 0; break;             // dst_off past dst_len
          case 2: m.dst_off = ~0ULL - rng() % 8; m.len = 16; break;                  // dst_off + len wraps
          case 3: m.src_off = (u32)(blen - rng() % 8); m.len = 9 + rng() % 100; break;  // src end past bounce_len
          case 4: m.src_off = 0xffffffffu; m.len = 0xffffffffu; break;              // both huge
        }
        expect_err++;
      }
      // Overlapping valid writes would make the result order-dependent: drop duplicates by
      // making later overlapping valid fragments zero-length.
      {
        std::vector<std::pair<u64, u64>> spans;
        for (auto& m : ms) {
          bool ok = !(m.src_off + (u64)m.len > blen || m.dst_off > dlen || m.len > dlen - m.dst_off);
          if (!ok || m.len == 0) continue;
          bool ov = false;
          for (auto& sp : spans) if (m.dst_off < sp.second && sp.first < m.dst_off + m.len) { ov = true; break; }
          if (ov) m.len = 0; else spans.push_back({m.dst_off, m.dst_off + m.len});
        }
      }
      // Metas at any 16-byte alignment (host-mapped ring slots, offsets into a shared array).
      size_t mskew = 16 * (rng() % 9);
      meta_store[j].resize(ms.size() * 16 + mskew + 128);
      u8* mbase = meta_store[j].data();
      mbase += (16 - (uintptr_t)mbase % 16) % 16 + mskew;
      if (!ms.empty()) memcpy(mbase, ms.data(), ms.size() * 16);
      ref[j] = dst[j];
      u8* rbase = ref[j].data() + (dbase - dst[j].data());
      for (auto& m : ms) if (!(m.src_off + (u64)m.len > blen || m.dst_off > dlen || m.len > dlen - m.dst_off)) memcpy(rbase + m.dst_off, bbase + m.src_off, m.len);
      batch.jobs[j] = TcpxUnpackJob{(u64)mbase, (u64)cnt, (u64)bbase, blen, (u64)dbase, dlen};
      if ((u64)cnt > maxcnt) maxcnt = cnt;
    }
    u64 errs = 0;
    BS = 32 * (1 + rng() % 8);
    // Chunk size: as the launcher (warps per block, 8) or anything, incl. 0 and > BS (clamped).
    u32 per_block;
    switch (rng() % 4) {
      case 0: per_block = BS / 32; break;
      case 1: per_block = 8 <= BS ? 8 : BS; break;
      case 2: per_block = 1 + rng() % BS; break;
      default: per_block = (rng() % 2) ? 0 : BS + 1 + rng() % 100; break;
    }
    u32 eff = per_block == 0 ? 1 : (per_block > BS ? BS : per_block);
    unsigned gx = maxcnt ? (unsigned)((maxcnt + eff - 1) / eff) : 1;
    if (rng() % 2) gx = 1 + rng() % 3;  // exercise grid-stride (and the descriptor prefetch)
    if (mode == 3 && gx > 64) gx = 1 + rng() % 64;  // keep the emulation fast
    launch(gx, njobs, [&] { tcpx_unpack(batch, njobs, per_block, &errs); });
    unpack_cases++;
    for (int j = 0; j < njobs; j++) if (dst[j] != ref[j]) { fails++; printf("unpack case %d (mode %d, BS %u, per_block %u, gx %u) job %d mismatch\n", t, mode, BS, per_block, gx, j); }
    if (errs != expect_err) { fails++; printf("unpack case %d errs %llu want %llu\n", t, (unsigned long long)errs, (unsigned long long)expect_err); }
  }
  if (barrier_errors) { fails++; printf("divergent barriers: %ld\n", barrier_errors); }
  if (shuffle_errors) { fails++; printf("divergent shuffles: %ld\n", shuffle_errors); }
  printf("unpack: %d cases\n", unpack_cases);
  printf("emulation: %d failures\n", fails);
  return fails != 0;
}
