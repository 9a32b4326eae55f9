//! Device-unpack emulation, the CPU-only part: where each received page lands in the bounce
//! buffer (the *plan*), and the `loadMeta` descriptors NCCL's unpack kernel reads back.
//!
//! devmem-TCP hands the receiver payload in 4 KiB pages scattered over the NIC's RX buffer pool
//! in no particular order; TCPX lists one `loadMeta {src_off, len, dst_off}` per page. tcpx-emu
//! reproduces that shape cheaply:
//!
//! * Each receive slot (`k % 16`) owns [`Geometry::slot_bytes`] of the bounce buffer, cut into
//!   windows of `min(chunk size, 4 MiB)` bytes. Chunk `c` of a receive is assigned a random,
//!   distinct window.
//! * Inside its window, a chunk's pages are cut into runs of 1..=`max_run` pages (random lengths),
//!   and the runs are laid out in a random order. A helper thread receives the chunk with one
//!   `recvmsg` whose iovecs point at the runs' places in a pinned staging buffer (the scatter
//!   costs nothing extra), then copies the chunk's window to the device with one async copy.
//! * Descriptors: one per page (the last one partial), listed in a random order.
//!
//! Everything here is pure and deterministic given the RNG, so the CI tests (no GPU) can apply a
//! plan to host memory with [`write_chunk_host`] and reconstruct the payload with
//! `tcpx_gpu::unpack_reference`.

use nccl_net_abi::{LoadMeta, UNPACK_MAX_SLICE_PAGES, UNPACK_MAX_SLICE_SIZE, UNPACK_PAGE_SIZE};
use tcpx_gpu::unpack::Rng;

/// Fragment (devmem page) size.
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
    /// Bytes per window: `min(chunk size, 4 MiB)`, a multiple of [`PAGE`].
    pub window: usize,
    /// Windows per slot (`ceil(4 MiB / window)`).
    pub windows: usize,
    /// The chunk size the comm stripes with (a multiple of [`PAGE`]).
    pub chunk: usize,
}

impl Geometry {
    /// The geometry for a comm striping in `chunk`-byte chunks. `chunk` must be a positive
    /// multiple of [`PAGE`] (the unpack mode rounds `NCCL_DYNAMIC_CHUNK_SIZE` up).
    pub fn new(chunk: usize) -> Result<Self, String> {
        if chunk == 0 || chunk % PAGE != 0 {
            return Err(format!(
                "chunk size {chunk} is not a positive multiple of {PAGE}: device unpack places whole pages"
            ));
        }
        let window = chunk.min(MAX_RECV);
        Ok(Self {
            window,
            windows: MAX_RECV.div_ceil(window),
            chunk,
        })
    }

    /// Bounce bytes per receive slot.
    pub fn slot_bytes(&self) -> usize {
        self.window * self.windows
    }
}

/// A run of consecutive payload pages that lands contiguously in the bounce buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    /// Offset of the run in the payload (the `irecv` buffer).
    pub payload_off: u32,
    /// Payload bytes in the run (whole pages, except the receive's last page).
    pub len: u32,
    /// Offset of the run in the slot's bounce region.
    pub bounce_off: u32,
}

/// Where every page of one receive lands. Buffers are reused between receives (no allocation
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
    /// A plan with every buffer reserved for the largest receive.
    pub fn with_capacity(geo: &Geometry) -> Self {
        let pages = MAX_RECV / PAGE;
        Self {
            len: 0,
            runs: Vec::with_capacity(pages),
            chunk_runs: Vec::with_capacity(geo.windows + 1),
            chunk_window: Vec::with_capacity(geo.windows),
            scratch: Vec::with_capacity(pages.max(geo.windows)),
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
    /// bytes to copy from the staging buffer to the window (its pages, the last one whole).
    pub fn chunk(&self, c: usize) -> (usize, &[Run], usize) {
        let runs = &self.runs[self.chunk_runs[c] as usize..self.chunk_runs[c + 1] as usize];
        let bytes: usize = runs.iter().map(|r| r.len as usize).sum();
        (self.chunk_window[c] as usize, runs, bytes.div_ceil(PAGE) * PAGE)
    }

    /// Plans a receive of `len` bytes (at most 4 MiB): random windows per chunk, random run
    /// lengths in 1..=`max_run` pages, random run order inside each window.
    pub fn build(&mut self, len: usize, geo: &Geometry, max_run: usize, rng: &mut Rng) -> Result<(), String> {
        if len > MAX_RECV {
            return Err(format!(
                "receive of {len} bytes exceeds the device-unpack limit of {MAX_RECV} bytes ({MAX_DESCRIPTORS} fragments)"
            ));
        }
        let max_run = max_run.max(1) as u64;
        self.len = len;
        self.runs.clear();
        self.chunk_runs.clear();
        self.chunk_window.clear();
        let nchunks = len.div_ceil(geo.chunk);
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
            let pages = clen.div_ceil(PAGE);
            let first = self.runs.len();
            self.chunk_runs.push(first as u32);
            let mut p = 0;
            while p < pages {
                let n = (1 + rng.below(max_run) as usize).min(pages - p);
                let off = start + p * PAGE;
                self.runs.push(Run {
                    payload_off: off as u32,
                    len: (n * PAGE).min(start + clen - off) as u32,
                    bounce_off: 0,
                });
                p += n;
            }
            // Lay the runs out in a random order from the window's start.
            let nruns = self.runs.len() - first;
            self.scratch.clear();
            self.scratch.extend(0..nruns as u32);
            rng.shuffle(&mut self.scratch);
            let mut at = self.chunk_window[c];
            for &i in &self.scratch {
                let r = &mut self.runs[first + i as usize];
                r.bounce_off = at;
                at += (r.len as usize).div_ceil(PAGE) as u32 * PAGE as u32;
            }
        }
        self.chunk_runs.push(self.runs.len() as u32);
        Ok(())
    }

    /// Writes the receive's descriptors (one per page, in a random order) into `out`, with
    /// `src_off` relative to the bounce buffer base (`slot_off` = the slot region's offset).
    /// Returns the count (at most `out.len()`, which must hold the receive's pages).
    pub fn descriptors(&self, slot_off: u32, out: &mut [LoadMeta], rng: &mut Rng) -> usize {
        let mut n = 0;
        for r in &self.runs {
            let mut done = 0u32;
            while done < r.len {
                let l = (r.len - done).min(PAGE as u32);
                out[n] = LoadMeta {
                    src_off: slot_off + r.bounce_off + done,
                    len: l,
                    dst_off: u64::from(r.payload_off + done),
                };
                n += 1;
                done += l;
            }
        }
        rng.shuffle(&mut out[..n]);
        n
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
            self.free.splice(i..i + 1, pieces);
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
        assert!(Geometry::new(1000).is_err());
        assert!(Geometry::new(0).is_err());
    }

    #[test]
    fn too_large_is_refused() {
        let g = Geometry::new(524_288).unwrap();
        let mut plan = Plan::with_capacity(&g);
        let e = plan.build(MAX_RECV + 1, &g, 16, &mut Rng::new(1)).unwrap_err();
        assert!(e.contains("4194304") && e.contains("2048"), "{e}");
    }

    /// Random sizes and geometries: the plan applied with the host bounce writer, then unpacked
    /// with the reference, gives the payload back; descriptors are within limits, cover the
    /// payload exactly once, point inside the slot's region, and are not in payload order.
    #[test]
    fn plan_round_trips_through_unpack_reference() {
        let mut rng = Rng::new(0x5eed);
        let mut shuffled_seen = 0;
        for case in 0..300 {
            let chunk = PAGE * [1, 3, 16, 128, 256, 1024, 2048][case % 7];
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
                assert!(r.len as usize <= max_run * PAGE);
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
            let n = plan.descriptors(slot_off, &mut metas, &mut rng);
            let metas = &metas[..n];
            assert_eq!(n, len.div_ceil(PAGE), "one descriptor per page");
            assert!(n <= MAX_DESCRIPTORS);
            assert_eq!(validate_metas(metas, bounce.len(), len).unwrap(), len);
            check_exact_cover(metas, len).unwrap();
            for m in metas {
                assert!(region.contains(&(m.src_off as usize)), "src inside the slot region");
                assert!(m.src_off as usize + m.len as usize <= region.end);
                assert!(m.len as usize <= PAGE && m.src_off as usize % PAGE == 0);
            }
            if metas.windows(2).any(|w| w[0].dst_off > w[1].dst_off) {
                shuffled_seen += 1;
            }
            let mut out = vec![0u8; len];
            unpack_reference(metas, &bounce, &mut out);
            assert!(out == data, "case {case}: len {len} chunk {chunk} max_run {max_run}");
        }
        assert!(shuffled_seen > 200, "descriptors are listed out of order");
    }

    /// The bounce placement is actually scrambled: with 1-page runs, most pages of a 4 MiB
    /// receive do not land at their payload offset.
    #[test]
    fn pages_are_scrambled() {
        let geo = Geometry::new(524_288).unwrap();
        let mut plan = Plan::with_capacity(&geo);
        plan.build(MAX_RECV, &geo, 1, &mut Rng::new(7)).unwrap();
        let moved = plan.runs().iter().filter(|r| r.bounce_off != r.payload_off).count();
        assert!(moved > plan.runs().len() * 9 / 10, "{moved}");
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
