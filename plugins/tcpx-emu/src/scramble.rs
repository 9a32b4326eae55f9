//! Device-unpack emulation, the CPU-only part: where each received byte lands in the bounce
//! buffer (the *plan*), and the `loadMeta` descriptors NCCL's unpack kernel reads back.
//!
//! devmem-TCP hands the receiver payload in fragments of the NIC's RX buffer pool: any length,
//! any alignment, never crossing a 4 KiB page of the pool, in no particular order; TCPX lists one
//! `loadMeta {src_off, len, dst_off}` per fragment, `dst_off` relative to the `irecv` buffer
//! (TCPX contract #17). tcpx-emu reproduces that shape cheaply:
//!
//! * Each receive slot (`k % 16`) owns [`Geometry::slot_bytes`] of the bounce buffer, cut into
//!   page-aligned windows of `min(chunk size, 4 MiB)` bytes rounded up to a page. Chunk `c` of a
//!   receive is assigned a random, distinct window.
//! * A chunk's payload is cut into runs of random byte lengths (whole pages and arbitrary
//!   lengths mixed, up to `max_run` pages), and the runs are packed back to back in a random
//!   order from the window's start, so most of them start and end inside a page. A helper thread
//!   receives the chunk with one `recvmsg` whose iovecs point at the runs' places in a pinned
//!   staging buffer (the scatter costs nothing extra), then copies the chunk's window to the
//!   device with one async copy.
//! * Descriptors: each run is cut at the bounce buffer's page boundaries (fragments are partial
//!   pages at both ends of a run, whole pages in between), listed in a random order. Chunk
//!   boundaries need not be page-aligned in the destination (any `NCCL_DYNAMIC_CHUNK_SIZE`), so a
//!   destination page may be written by fragments of two chunks that came over different
//!   sockets.
//! * At most 2048 descriptors per receive (`NET_UNPACK_MAX_SLICE_PAGES`, TCPX contract #2): a
//!   chunk of `p` pages cut into `k` runs gives at most `p + k - 1` fragments, so the plan stops
//!   cutting runs once the receive's spare descriptors are used up.
//!
//! Everything here is pure and deterministic given the RNG, so the CI tests (no GPU) can apply a
//! plan to host memory with [`write_chunk_host`] and reconstruct the payload with
//! `tcpx_gpu::unpack_reference`.

use nccl_net_abi::{LoadMeta, UNPACK_MAX_SLICE_PAGES, UNPACK_MAX_SLICE_SIZE, UNPACK_PAGE_SIZE};
use tcpx_gpu::unpack::Rng;

/// Page of the bounce buffer (a devmem fragment never crosses one).
pub const PAGE: usize = UNPACK_PAGE_SIZE;
/// Largest CUDA receive (`NET_UNPACK_MAX_SLICE_SIZE`, 4 MiB).
pub const MAX_RECV: usize = UNPACK_MAX_SLICE_SIZE;
/// Descriptors per slot (`NET_UNPACK_MAX_SLICE_PAGES`, 2048).
pub const MAX_DESCRIPTORS: usize = UNPACK_MAX_SLICE_PAGES;
/// Default largest run of consecutive payload pages kept together in the bounce buffer.
pub const DEFAULT_MAX_RUN: usize = 16;

/// How a receive slot's bounce region is cut into chunk windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per window: `min(chunk size, 4 MiB)` rounded up to a multiple of [`PAGE`].
    pub window: usize,
    /// Windows per slot: the chunks of the largest receive, at most [`MAX_DESCRIPTORS`] (every
    /// chunk needs a descriptor of its own).
    pub windows: usize,
    /// The chunk size the comm stripes with.
    pub chunk: usize,
}

impl Geometry {
    /// The geometry for a comm striping in `chunk`-byte chunks (any positive size).
    pub fn new(chunk: usize) -> Result<Self, String> {
        if chunk == 0 {
            return Err("chunk size 0: device unpack needs a positive NCCL_DYNAMIC_CHUNK_SIZE".to_owned());
        }
        let span = chunk.min(MAX_RECV);
        Ok(Self {
            window: span.next_multiple_of(PAGE),
            windows: MAX_RECV.div_ceil(span).min(MAX_DESCRIPTORS),
            chunk,
        })
    }

    /// Bounce bytes per receive slot.
    pub fn slot_bytes(&self) -> usize {
        self.window * self.windows
    }
}

/// A run of consecutive payload bytes that lands contiguously in the bounce buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    /// Offset of the run in the payload (the `irecv` buffer).
    pub payload_off: u32,
    /// Payload bytes in the run.
    pub len: u32,
    /// Offset of the run in the slot's bounce region (any alignment).
    pub bounce_off: u32,
}

/// Where every byte of one receive lands. Buffers are reused between receives (no allocation
/// once the capacities are reached; [`Plan::with_capacity`] reserves them all up front).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    len: usize,
    /// Runs in payload order; the runs of chunk `c` are `runs[chunk_runs[c]..chunk_runs[c+1]]`.
    runs: Vec<Run>,
    chunk_runs: Vec<u32>,
    /// Window offset (slot-relative) of each chunk.
    chunk_window: Vec<u32>,
    /// Scratch: window indices and run order.
    scratch: Vec<u32>,
}

impl Plan {
    /// A plan with every buffer reserved for the largest receive (at most one run per
    /// descriptor).
    pub fn with_capacity(geo: &Geometry) -> Self {
        Self {
            len: 0,
            runs: Vec::with_capacity(MAX_DESCRIPTORS),
            chunk_runs: Vec::with_capacity(geo.windows + 1),
            chunk_window: Vec::with_capacity(geo.windows),
            scratch: Vec::with_capacity(MAX_DESCRIPTORS.max(geo.windows)),
        }
    }

    /// Payload bytes of the planned receive.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the planned receive is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.chunk_window.len()
    }

    /// All runs, in payload order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Chunk `c`: its window's offset in the slot region, its runs (payload order), and the
    /// bytes to copy from the staging buffer to the window (the chunk's bytes, packed from the
    /// window's start).
    pub fn chunk(&self, c: usize) -> (usize, &[Run], usize) {
        let runs = &self.runs[self.chunk_runs[c] as usize..self.chunk_runs[c + 1] as usize];
        let bytes: usize = runs.iter().map(|r| r.len as usize).sum();
        (self.chunk_window[c] as usize, runs, bytes)
    }

    /// Plans a receive of `len` bytes (at most 4 MiB): random windows per chunk; runs of random
    /// lengths (whole pages or any byte count, up to `max_run` pages) packed in a random order
    /// inside each window, as long as the descriptors stay within [`MAX_DESCRIPTORS`].
    pub fn build(&mut self, len: usize, geo: &Geometry, max_run: usize, rng: &mut Rng) -> Result<(), String> {
        if len > MAX_RECV {
            return Err(format!(
                "receive of {len} bytes exceeds the device-unpack limit of {MAX_RECV} bytes ({MAX_DESCRIPTORS} fragments)"
            ));
        }
        let nchunks = len.div_ceil(geo.chunk);
        let pages: usize = (0..nchunks)
            .map(|c| geo.chunk.min(len - c * geo.chunk).div_ceil(PAGE))
            .sum();
        if nchunks > geo.windows || pages > MAX_DESCRIPTORS {
            return Err(format!(
                "receive of {len} bytes in {nchunks} chunks of {} bytes needs at least {pages} fragments, more than {MAX_DESCRIPTORS}: raise NCCL_DYNAMIC_CHUNK_SIZE",
                geo.chunk
            ));
        }
        // Each run boundary inside a chunk may add one fragment (a page shared by two runs).
        let mut spare = MAX_DESCRIPTORS - pages;
        let max_run = max_run.max(1) as u64;
        self.len = len;
        self.runs.clear();
        self.chunk_runs.clear();
        self.chunk_window.clear();
        // Distinct random windows: a partial Fisher-Yates over 0..windows.
        self.scratch.clear();
        self.scratch.extend(0..geo.windows as u32);
        for c in 0..nchunks {
            let j = c + rng.below((geo.windows - c) as u64) as usize;
            self.scratch.swap(c, j);
            self.chunk_window.push(self.scratch[c] * geo.window as u32);
        }
        for c in 0..nchunks {
            let start = c * geo.chunk;
            let clen = geo.chunk.min(len - start);
            let first = self.runs.len();
            self.chunk_runs.push(first as u32);
            let mut off = 0;
            while off < clen {
                let rest = clen - off;
                let n = if spare == 0 {
                    rest
                } else if rng.below(2) == 0 {
                    ((1 + rng.below(max_run)) as usize * PAGE).min(rest)
                } else {
                    (1 + rng.below(max_run * PAGE as u64) as usize).min(rest)
                };
                if n < rest {
                    spare -= 1;
                }
                self.runs.push(Run {
                    payload_off: (start + off) as u32,
                    len: n as u32,
                    bounce_off: 0,
                });
                off += n;
            }
            // Pack the runs in a random order from the window's start.
            let nruns = self.runs.len() - first;
            self.scratch.clear();
            self.scratch.extend(0..nruns as u32);
            rng.shuffle(&mut self.scratch);
            let mut at = self.chunk_window[c];
            for &i in &self.scratch {
                let r = &mut self.runs[first + i as usize];
                r.bounce_off = at;
                at += r.len;
            }
        }
        self.chunk_runs.push(self.runs.len() as u32);
        Ok(())
    }

    /// Writes the receive's descriptors (each run cut at the bounce buffer's page boundaries,
    /// listed in a random order) into `out`, with `src_off` relative to the bounce buffer base
    /// (`slot_off` = the slot region's offset, a multiple of [`PAGE`]). Returns the count.
    pub fn descriptors(&self, slot_off: u32, out: &mut [LoadMeta], rng: &mut Rng) -> Result<usize, String> {
        let (mut n, cap) = (0, out.len());
        for r in &self.runs {
            let (mut src, mut dst, mut left) = (slot_off + r.bounce_off, r.payload_off, r.len);
            while left > 0 {
                let l = left.min(PAGE as u32 - src % PAGE as u32);
                let m = out
                    .get_mut(n)
                    .ok_or_else(|| format!("internal: the plan needs more than {cap} descriptors"))?;
                *m = LoadMeta {
                    src_off: src,
                    len: l,
                    dst_off: u64::from(dst),
                };
                n += 1;
                (src, dst, left) = (src + l, dst + l, left - l);
            }
        }
        rng.shuffle(&mut out[..n]);
        Ok(n)
    }
}

/// The host "bounce writer": what a helper thread plus its device copy do for chunk `c`, on
/// host memory. `payload` is the whole receive, `staging` a chunk-sized scratch buffer and
/// `slot` the slot's bounce region.
pub fn write_chunk_host(plan: &Plan, c: usize, payload: &[u8], staging: &mut [u8], slot: &mut [u8]) {
    let (window, runs, copy) = plan.chunk(c);
    // The scatter of recvmsg's iovecs (runs in payload order = stream order).
    for r in runs {
        let s = r.bounce_off as usize - window;
        let p = r.payload_off as usize;
        staging[s..s + r.len as usize].copy_from_slice(&payload[p..p + r.len as usize]);
    }
    // The one HtoD copy of the window.
    slot[window..window + copy].copy_from_slice(&staging[..copy]);
}

/// First-fit allocator of byte ranges, for carving per-comm regions out of a GPU's one bounce
/// buffer (NCCL's unpack kernel keeps a single `bounce_buf` per thread block, so every receive
/// comm of a GPU must use the same base, as TCPX's RxDM-provided buffer is).
#[derive(Debug, Clone)]
pub struct RegionAllocator {
    len: usize,
    /// Free ranges `(offset, length)`, sorted by offset, never adjacent (coalesced).
    free: Vec<(usize, usize)>,
}

impl RegionAllocator {
    /// An allocator over `0..len`, all free.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            free: if len > 0 { vec![(0, len)] } else { Vec::new() },
        }
    }

    /// Total bytes managed.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Bytes free.
    pub fn available(&self) -> usize {
        self.free.iter().map(|f| f.1).sum()
    }

    /// The lowest free range of `len` bytes (rounded up to `align`, a power of two), if any.
    pub fn alloc(&mut self, len: usize, align: usize) -> Option<usize> {
        let len = len.max(1).next_multiple_of(align);
        for i in 0..self.free.len() {
            let (off, flen) = self.free[i];
            let start = off.next_multiple_of(align);
            if start + len > off + flen {
                continue;
            }
            let mut pieces = Vec::with_capacity(2);
            if start > off {
                pieces.push((off, start - off));
            }
            if start + len < off + flen {
                pieces.push((start + len, off + flen - start - len));
            }
            self.free.splice(i..=i, pieces);
            return Some(start);
        }
        None
    }

    /// Returns `off..off+len` (as passed to, and rounded by, [`alloc`](Self::alloc)).
    pub fn free(&mut self, off: usize, len: usize, align: usize) {
        let len = len.max(1).next_multiple_of(align);
        let i = self.free.partition_point(|f| f.0 < off);
        self.free.insert(i, (off, len));
        // Coalesce with the next, then the previous range.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcpx_gpu::unpack::{check_exact_cover, validate_metas};
    use tcpx_gpu::unpack_reference;

    fn payload(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        (0..len).map(|_| rng.next_u64() as u8).collect()
    }

    #[test]
    fn geometry() {
        let g = Geometry::new(524_288).unwrap();
        assert_eq!((g.window, g.windows, g.slot_bytes()), (524_288, 8, MAX_RECV));
        let g = Geometry::new(8 << 20).unwrap();
        assert_eq!((g.window, g.windows, g.slot_bytes()), (MAX_RECV, 1, MAX_RECV));
        let g = Geometry::new(12 * 1024).unwrap();
        assert_eq!(g.windows, 342);
        assert!(g.slot_bytes() >= MAX_RECV);
        // Any chunk size: windows are whole pages, one per chunk of the largest receive.
        let g = Geometry::new(524_289).unwrap();
        assert_eq!((g.window, g.windows), (524_288 + PAGE, 8));
        let g = Geometry::new(1000).unwrap();
        assert_eq!((g.window, g.windows), (PAGE, MAX_DESCRIPTORS));
        assert!(Geometry::new(0).is_err());
    }

    #[test]
    fn too_large_or_too_fragmented_is_refused() {
        let g = Geometry::new(524_288).unwrap();
        let mut plan = Plan::with_capacity(&g);
        let e = plan.build(MAX_RECV + 1, &g, 16, &mut Rng::new(1)).unwrap_err();
        assert!(e.contains("4194304") && e.contains("2048"), "{e}");
        // 1000-byte chunks: a 4 MiB receive would need 4195 fragments.
        let g = Geometry::new(1000).unwrap();
        let mut plan = Plan::with_capacity(&g);
        let e = plan.build(MAX_RECV, &g, 16, &mut Rng::new(1)).unwrap_err();
        assert!(
            e.contains("more than 2048") && e.contains("NCCL_DYNAMIC_CHUNK_SIZE"),
            "{e}"
        );
        assert!(plan.build(2_000_000, &g, 16, &mut Rng::new(1)).is_ok());
    }

    /// Random sizes and chunk sizes (page multiples or not): the plan applied with the host
    /// bounce writer, then unpacked with the reference, gives the payload back; descriptors are
    /// within limits, never cross a bounce page or a chunk, cover the payload exactly once, point
    /// inside the slot's region, and are not in payload order; across the cases there are
    /// unaligned and partial fragments mixed with whole pages, and destination pages shared by
    /// two chunks.
    #[test]
    fn plan_round_trips_through_unpack_reference() {
        let mut rng = Rng::new(0x5eed);
        let (mut shuffled, mut unaligned, mut partial, mut whole, mut shared_dst_pages) = (0, 0, 0, 0, 0);
        for case in 0..300 {
            let chunk = [
                PAGE,
                3 * PAGE + 5,
                16 * PAGE,
                65_537,
                128 * PAGE,
                524_288,
                1_048_576 + 123,
                2048 * PAGE,
                MAX_RECV,
            ][case % 9];
            let geo = Geometry::new(chunk).unwrap();
            let len = match case % 5 {
                0 => MAX_RECV,
                1 => rng.below(64) as usize,
                2 => PAGE * (1 + rng.below(1024) as usize),
                _ => rng.below(MAX_RECV as u64 + 1) as usize,
            };
            let max_run = [1, 4, 16, 64][case % 4];
            let slot = case % 16;
            let slot_off = (slot * geo.slot_bytes()) as u32;
            let mut plan = Plan::with_capacity(&geo);
            let caps = (
                plan.runs.capacity(),
                plan.chunk_runs.capacity(),
                plan.scratch.capacity(),
            );
            plan.build(len, &geo, max_run, &mut rng).unwrap();
            assert_eq!(
                caps,
                (
                    plan.runs.capacity(),
                    plan.chunk_runs.capacity(),
                    plan.scratch.capacity()
                ),
                "no reallocation"
            );
            assert_eq!(plan.chunks(), len.div_ceil(chunk));
            for r in plan.runs() {
                assert!(r.bounce_off as usize + r.len as usize <= geo.slot_bytes());
            }
            let data = payload(len, case as u64);
            let mut bounce = vec![0u8; 16 * geo.slot_bytes()];
            let mut staging = vec![0u8; geo.window];
            let region = slot * geo.slot_bytes()..(slot + 1) * geo.slot_bytes();
            // Chunks land in any order (they come from different sockets).
            let mut order: Vec<usize> = (0..plan.chunks()).collect();
            rng.shuffle(&mut order);
            for c in order {
                let (w, _, copy) = plan.chunk(c);
                assert!(w + copy <= geo.slot_bytes() && copy <= geo.window);
                write_chunk_host(&plan, c, &data, &mut staging, &mut bounce[region.clone()]);
            }
            let mut metas = vec![LoadMeta::default(); MAX_DESCRIPTORS];
            let n = plan.descriptors(slot_off, &mut metas, &mut rng).unwrap();
            let metas = &metas[..n];
            assert!(n <= MAX_DESCRIPTORS && n >= len.div_ceil(PAGE));
            assert_eq!(validate_metas(metas, bounce.len(), len).unwrap(), len);
            check_exact_cover(metas, len).unwrap();
            let mut dst_page_chunk = std::collections::HashMap::new();
            for m in metas {
                let (src, l, dst) = (m.src_off as usize, m.len as usize, m.dst_off as usize);
                assert!(region.contains(&src), "src inside the slot region");
                assert!(src + l <= region.end);
                assert!(
                    l >= 1 && src % PAGE + l <= PAGE,
                    "a fragment never crosses a bounce page: {m:?}"
                );
                assert_eq!(dst / chunk, (dst + l - 1) / chunk, "a fragment never spans two chunks");
                unaligned += usize::from(src % PAGE != 0 || dst % PAGE != 0);
                partial += usize::from(l < PAGE && dst + l < len);
                whole += usize::from(l == PAGE && src % PAGE == 0);
                for page in dst / PAGE..=(dst + l - 1) / PAGE {
                    let prev = dst_page_chunk.insert(page, dst / chunk);
                    shared_dst_pages += usize::from(prev.is_some_and(|p| p != dst / chunk));
                }
            }
            if metas.windows(2).any(|w| w[0].dst_off > w[1].dst_off) {
                shuffled += 1;
            }
            let mut out = vec![0u8; len];
            unpack_reference(metas, &bounce, &mut out);
            assert!(out == data, "case {case}: len {len} chunk {chunk} max_run {max_run}");
        }
        assert!(shuffled > 200, "descriptors are listed out of order");
        assert!(
            unaligned > 10_000 && partial > 10_000 && whole > 10_000,
            "{unaligned} {partial} {whole}"
        );
        assert!(shared_dst_pages > 100, "{shared_dst_pages}");
    }

    /// The bounce placement is actually scrambled: with 1-page runs, most runs of a 4 MiB
    /// receive do not land at their payload offset; the 4 MiB receive stays within 2048
    /// descriptors.
    #[test]
    fn pages_are_scrambled() {
        let geo = Geometry::new(524_288).unwrap();
        let mut plan = Plan::with_capacity(&geo);
        let mut rng = Rng::new(7);
        plan.build(MAX_RECV, &geo, 1, &mut rng).unwrap();
        let moved = plan.runs().iter().filter(|r| r.bounce_off != r.payload_off).count();
        assert!(moved > plan.runs().len() * 9 / 10, "{moved}");
        let mut metas = vec![LoadMeta::default(); MAX_DESCRIPTORS];
        let n = plan.descriptors(0, &mut metas, &mut rng).unwrap();
        assert!(n > 1024 && n <= MAX_DESCRIPTORS, "{n}");
    }

    #[test]
    fn region_allocator_first_fit_and_coalescing() {
        let mb = 1 << 20;
        let mut a = RegionAllocator::new(256 * mb);
        let r: Vec<usize> = (0..4).map(|_| a.alloc(64 * mb, 2 * mb).unwrap()).collect();
        assert_eq!(r, vec![0, 64 * mb, 128 * mb, 192 * mb]);
        assert_eq!(a.alloc(1, 2 * mb), None, "full");
        a.free(64 * mb, 64 * mb, 2 * mb);
        a.free(128 * mb, 64 * mb, 2 * mb);
        assert_eq!(a.available(), 128 * mb);
        assert_eq!(a.alloc(100 * mb, 2 * mb), Some(64 * mb), "coalesced hole reused");
        a.free(0, 64 * mb, 2 * mb);
        a.free(64 * mb, 100 * mb, 2 * mb);
        a.free(192 * mb, 64 * mb, 2 * mb);
        assert_eq!(a.available(), 256 * mb);
        assert_eq!(a.free, vec![(0, 256 * mb)]);
        // Random alloc/free never overlaps and always returns everything.
        let mut rng = Rng::new(3);
        let mut a = RegionAllocator::new(64 * mb);
        let mut live: Vec<(usize, usize)> = Vec::new();
        for _ in 0..2000 {
            if rng.below(2) == 0 || live.is_empty() {
                let len = (1 + rng.below(8) as usize) * mb;
                if let Some(off) = a.alloc(len, mb) {
                    assert!(off + len <= 64 * mb);
                    assert!(live.iter().all(|&(o, l)| off + len <= o || o + l <= off), "overlap");
                    live.push((off, len));
                }
            } else {
                let (o, l) = live.swap_remove(rng.below(live.len() as u64) as usize);
                a.free(o, l, mb);
            }
        }
        for (o, l) in live.drain(..) {
            a.free(o, l, mb);
        }
        assert_eq!(a.free, vec![(0, 64 * mb)]);
    }
}
