//! Host side of device unpack: the job descriptor the kernel takes, validation against NCCL's
//! limits, a CPU reference, and generators of realistic fragment layouts for tests and the
//! benchmark.
//!
//! Contract (plugin-abi.md §2): a completed TCPX receive leaves `cnt` descriptors
//! `LoadMeta {src_off, len, dst_off}` in slot `k % 16` of the host-mapped `netUnpackMeta`
//! ring; the consumer copies `len` bytes from `bounce_buf + src_off` to `dst + dst_off` for
//! each, and only then calls `irecvConsumed` (seed-system.md §F row 8). Limits: at most
//! [`MAX_FRAGMENTS`] (2048) descriptors and [`MAX_RECEIVE_BYTES`] (4 MiB) per receive.

use crate::error::GpuError;
use nccl_net_abi::{
    LoadMeta, NetUnpackMeta, UNPACK_MAX_SLICE_PAGES, UNPACK_MAX_SLICE_SIZE, UNPACK_PAGE_SIZE, UNPACK_QUEUE_DEPTH,
};

/// Most descriptors in one receive (`NET_UNPACK_MAX_SLICE_PAGES`).
pub const MAX_FRAGMENTS: usize = UNPACK_MAX_SLICE_PAGES;
/// Most payload bytes in one receive (`NET_UNPACK_MAX_SLICE_SIZE`).
pub const MAX_RECEIVE_BYTES: usize = UNPACK_MAX_SLICE_SIZE;
/// Fragment (devmem page) size.
pub const PAGE: usize = UNPACK_PAGE_SIZE;
/// Jobs carried by one kernel launch. [`crate::Device::unpack`] splits longer job lists into
/// several launches. The job table travels as the kernel parameter (64 × 48 B = 3 KiB, under
/// the 4 KiB launch-parameter limit), so there is no staging buffer to recycle and the hot
/// path allocates nothing.
pub const MAX_JOBS_PER_LAUNCH: usize = 64;

/// One completed receive to unpack (mirrors `TcpxUnpackJob` in `kernels/unpack.cu`).
///
/// All addresses are device-accessible: `metas` may be device memory or the device alias of
/// host-mapped memory (TCPX's `netUnpackMeta` ring, see [`UnpackJob::from_meta_ring`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackJob {
    /// Address of `cnt` [`LoadMeta`]s, 16-byte aligned.
    pub metas: u64,
    /// Number of descriptors (≤ [`MAX_FRAGMENTS`]).
    pub cnt: u64,
    /// Bounce buffer base.
    pub bounce: u64,
    /// Bytes of the bounce buffer (descriptors reaching past it are skipped and counted).
    pub bounce_len: u64,
    /// Destination base (the buffer given to `irecv`).
    pub dst: u64,
    /// Bytes writable at `dst` (descriptors reaching past it are skipped and counted).
    pub dst_len: u64,
}

const _: () = assert!(std::mem::size_of::<UnpackJob>() == 48);
const _: () = assert!(std::mem::size_of::<UnpackJob>() * MAX_JOBS_PER_LAUNCH + 16 <= 4096);

impl UnpackJob {
    /// A job from explicit addresses.
    pub fn new(metas: u64, cnt: usize, bounce: u64, bounce_len: u64, dst: u64, dst_len: u64) -> Self {
        UnpackJob {
            metas,
            cnt: cnt as u64,
            bounce,
            bounce_len,
            dst,
            dst_len,
        }
    }

    /// The job for ring slot `slot` of a `netUnpackMeta` whose device-side address is
    /// `meta_dev` (the `meta` field of `unpackNetDeviceHandle`); `cnt` is the slot's count as
    /// the host read it from `meta->cnt[slot]` after `test()` reported the receive done.
    pub fn from_meta_ring(
        meta_dev: u64,
        slot: usize,
        cnt: u64,
        bounce: u64,
        bounce_len: u64,
        dst: u64,
        dst_len: u64,
    ) -> Result<Self, GpuError> {
        if slot >= UNPACK_QUEUE_DEPTH {
            return Err(GpuError::invalid(format!(
                "unpack ring slot {slot} out of range: use request_index % {UNPACK_QUEUE_DEPTH}"
            )));
        }
        let slot_off =
            std::mem::offset_of!(NetUnpackMeta, mem) + slot * UNPACK_MAX_SLICE_PAGES * std::mem::size_of::<LoadMeta>();
        let job = UnpackJob {
            metas: meta_dev + slot_off as u64,
            cnt,
            bounce,
            bounce_len,
            dst,
            dst_len,
        };
        job.validate()?;
        Ok(job)
    }

    /// Checks what the host can check without reading the descriptors.
    pub fn validate(&self) -> Result<(), GpuError> {
        if self.cnt > MAX_FRAGMENTS as u64 {
            return Err(GpuError::invalid(format!(
                "unpack job has {} fragments, more than {MAX_FRAGMENTS}: keep each irecv at most {MAX_RECEIVE_BYTES} bytes",
                self.cnt
            )));
        }
        if self.cnt > 0 && (self.metas == 0 || !self.metas.is_multiple_of(16)) {
            return Err(GpuError::invalid(format!(
                "unpack job metas address {:#x} is null or not 16-byte aligned: pass the LoadMeta array address",
                self.metas
            )));
        }
        if self.cnt > 0 && (self.bounce == 0 || self.dst == 0) {
            return Err(GpuError::invalid(
                "unpack job has a null bounce or destination address: pass the plugin's bounce_buf and the irecv buffer",
            ));
        }
        Ok(())
    }
}

/// Checks a receive's descriptors against NCCL's limits and the buffer sizes; returns the
/// payload bytes. Use it where the descriptors are host-visible (the mapped TCPX ring).
pub fn validate_metas(metas: &[LoadMeta], bounce_len: usize, dst_len: usize) -> Result<usize, GpuError> {
    if metas.len() > MAX_FRAGMENTS {
        return Err(GpuError::invalid(format!(
            "receive has {} fragments, more than {MAX_FRAGMENTS}: keep each irecv at most {MAX_RECEIVE_BYTES} bytes",
            metas.len()
        )));
    }
    let mut total = 0usize;
    for (i, m) in metas.iter().enumerate() {
        let src_end = u64::from(m.src_off) + u64::from(m.len);
        let dst_end = m.dst_off.checked_add(u64::from(m.len));
        if src_end > bounce_len as u64 || dst_end.is_none_or(|e| e > dst_len as u64) {
            return Err(GpuError::invalid(format!(
                "fragment {i} (src_off {}, len {}, dst_off {}) is outside the bounce buffer ({bounce_len} B) or destination ({dst_len} B): the plugin's metadata is corrupt or the wrong ring slot was read",
                m.src_off, m.len, m.dst_off
            )));
        }
        total += m.len as usize;
    }
    if total > MAX_RECEIVE_BYTES {
        return Err(GpuError::invalid(format!(
            "receive carries {total} bytes, more than {MAX_RECEIVE_BYTES}: keep each irecv at most {MAX_RECEIVE_BYTES} bytes"
        )));
    }
    Ok(total)
}

/// CPU reference of the unpack kernel: `dst[dst_off..+len] = bounce[src_off..+len]` for each
/// descriptor, in order.
///
/// # Panics
/// If a descriptor reaches outside `bounce` or `dst` (run [`validate_metas`] first).
pub fn unpack_reference(metas: &[LoadMeta], bounce: &[u8], dst: &mut [u8]) {
    for m in metas {
        let s = m.src_off as usize;
        let d = m.dst_off as usize;
        let n = m.len as usize;
        dst[d..d + n].copy_from_slice(&bounce[s..s + n]);
    }
}

/// Checks that the descriptors write every byte of `0..len` exactly once and nothing else.
pub fn check_exact_cover(metas: &[LoadMeta], len: usize) -> Result<(), String> {
    let mut spans: Vec<(u64, u64)> = metas
        .iter()
        .filter(|m| m.len > 0)
        .map(|m| (m.dst_off, m.dst_off + u64::from(m.len)))
        .collect();
    spans.sort_unstable();
    let mut at = 0u64;
    for (s, e) in spans {
        if s != at {
            return Err(if s < at {
                format!("bytes {s}..{at} are written twice")
            } else {
                format!("bytes {at}..{s} are never written")
            });
        }
        at = e;
    }
    if at != len as u64 {
        return Err(format!("coverage ends at {at}, expected {len}"));
    }
    Ok(())
}

/// The workspace's one seeded generator (splitmix64), for layouts: the GPU check reproduces a
/// failing layout from its seed.
pub use tcpx_units::Rng;

/// Descriptors of one receive plus the bounce-buffer size they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The descriptors, in the (shuffled) order the plugin would list them.
    pub metas: Vec<LoadMeta>,
    /// Payload bytes (`dst` range `0..len` is covered exactly once).
    pub len: usize,
    /// Bytes of bounce buffer the descriptors address (`src_off + len` ≤ this).
    pub bounce_len: usize,
}

impl Layout {
    /// Builds the bounce buffer content that unpacks to `payload` (the inverse of unpack):
    /// `bounce[src_off..+len] = payload[dst_off..+len]`.
    pub fn scatter(&self, payload: &[u8], bounce: &mut [u8]) {
        for m in &self.metas {
            let s = m.src_off as usize;
            let d = m.dst_off as usize;
            let n = m.len as usize;
            bounce[s..s + n].copy_from_slice(&payload[d..d + n]);
        }
    }

    /// Shifts every `src_off` by `by` (to place several receives in one bounce buffer).
    pub fn offset_src(&mut self, by: u32) {
        for m in &mut self.metas {
            m.src_off += by;
        }
        self.bounce_len += by as usize;
    }
}

fn check_len(len: usize) {
    assert!(
        len <= MAX_RECEIVE_BYTES,
        "a receive carries at most {MAX_RECEIVE_BYTES} bytes, asked for {len}"
    );
}

/// TCPX-like layout of a receive of `len` bytes: the payload's 4 KiB pages land on randomly
/// chosen pages of a bounce region of `bounce_pages` pages (≥ the pages needed; random page
/// order), the last fragment is partial, and the descriptors are listed in random order.
///
/// # Panics
/// If `len` exceeds 4 MiB or `bounce_pages` is too small.
pub fn scrambled_pages(len: usize, bounce_pages: usize, rng: &mut Rng) -> Layout {
    check_len(len);
    let pages = len.div_ceil(PAGE);
    assert!(bounce_pages >= pages, "bounce region of {bounce_pages} pages < {pages}");
    let mut slots: Vec<u32> = (0..bounce_pages as u32).collect();
    rng.shuffle(&mut slots);
    let mut metas: Vec<LoadMeta> = (0..pages)
        .map(|k| LoadMeta {
            src_off: slots[k] * PAGE as u32,
            len: (len - k * PAGE).min(PAGE) as u32,
            dst_off: (k * PAGE) as u64,
        })
        .collect();
    rng.shuffle(&mut metas);
    Layout {
        metas,
        len,
        bounce_len: bounce_pages * PAGE,
    }
}

/// Adversarial layout of a receive of `len` bytes: fragments of random length (1..=4096
/// bytes, half of them full pages), each placed at a random byte offset inside its own
/// randomly chosen bounce page, so src and dst alignments vary; descriptors in random order;
/// never more than [`MAX_FRAGMENTS`] fragments.
///
/// # Panics
/// If `len` exceeds 4 MiB.
pub fn random_fragments(len: usize, rng: &mut Rng) -> Layout {
    check_len(len);
    let mut lens = Vec::new();
    let mut left = len;
    while left > 0 {
        let budget = MAX_FRAGMENTS - lens.len();
        // Smallest length that still fits the rest into the fragment budget.
        let min = left.div_ceil(budget).max(1);
        let mut n = if rng.below(2) == 0 {
            PAGE
        } else {
            1 + rng.below(PAGE as u64) as usize
        };
        n = n.clamp(min, PAGE).min(left);
        lens.push(n);
        left -= n;
    }
    let mut dst = 0u64;
    let pieces = lens
        .iter()
        .map(|&n| {
            let inpage = rng.below((PAGE - n) as u64 + 1) as u32;
            let piece = (inpage, n as u32, dst);
            dst += n as u64;
            piece
        })
        .collect();
    place_on_pages(pieces, len, rng)
}

/// How a TCPX receive's payload arrived, for [`tcpx_stream`]: the shape of the devmem
/// fragments the plugin lists (plugin-abi.md §2, tcpx-contracts.md #2 and #17).
///
/// The model: a receive of `len` bytes is cut into chunks of [`chunk`](Self::chunk) bytes
/// (TCPX's `NCCL_DYNAMIC_CHUNK_SIZE`); each chunk is a contiguous run of one data socket's TCP
/// stream. That stream is cut into packets of [`mss`](Self::mss) payload bytes (8192 at MTU
/// 8244: 8244 - 20 IPv4 - 20 TCP - 12 timestamp option), a few of them shorter (a sender's
/// write boundary, a retransmission). With header split, each packet's payload fills devmem
/// pages from a page boundary, each page landing on a random page of the bounce buffer, and
/// each received page piece is one descriptor (TCPX: one per `SCM_DEVMEM_OFFSET` cmsg).
/// A chunk starts anywhere inside a packet (the socket's previous message ended there), so
/// its first fragment begins mid-page and every later one has its destination shifted
/// against its page-aligned source by that phase; the chunk's last fragment is partial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamShape {
    /// Bytes per chunk (a chunk travels on one socket).
    pub chunk: usize,
    /// Payload bytes of a full packet.
    pub mss: usize,
    /// Chance, in 1/1000, that a packet carries fewer than `mss` bytes (1..mss, uniform).
    pub short_packet_permille: u64,
    /// Whether chunks start at a random offset inside their first packet (true) or at a
    /// packet start (false: every fragment but a chunk's last is then a whole aligned page).
    pub random_phase: bool,
}

impl Default for StreamShape {
    /// GKE's TCPX setup: 512 KiB chunks, MTU 8244, 2% short packets, random chunk phase.
    fn default() -> Self {
        StreamShape {
            chunk: 512 << 10,
            mss: 8192,
            short_packet_permille: 20,
            random_phase: true,
        }
    }
}

/// TCPX-like layout of a receive of `len` bytes (see [`StreamShape`]): mostly whole 4 KiB
/// pages, with partial and unaligned fragments at packet and chunk boundaries; descriptors in
/// random order, never more than [`MAX_FRAGMENTS`] (short packets are skipped once they
/// could break that bound).
///
/// # Panics
/// If `len` exceeds 4 MiB, `shape.chunk` or `shape.mss` is 0, or the receive needs more than
/// [`MAX_FRAGMENTS`] fragments even with full packets (at a small MSS: about 2.8 MiB at MSS
/// 1448, contract #2).
pub fn tcpx_stream(len: usize, shape: &StreamShape, rng: &mut Rng) -> Layout {
    check_len(len);
    assert!(
        shape.chunk > 0 && shape.mss > 0,
        "chunk and mss must be positive: {shape:?}"
    );
    let chunks = len.div_ceil(shape.chunk);
    // Every fragment as (in-page offset, len, dst_off), in stream order.
    let mut pieces: Vec<(u32, u32, u64)> = Vec::new(); // (in-page offset, len, dst_off)
    for c in 0..chunks {
        let start = c * shape.chunk;
        let end = (start + shape.chunk).min(len);
        // Stream position of the chunk's first byte inside its first packet.
        let mut skip = if shape.random_phase {
            rng.below(shape.mss as u64) as usize
        } else {
            0
        };
        let mut at = start;
        while at < end {
            // Worst case for the rest: every remaining page and chunk edge split in two.
            let worst_rest = (len - at).div_ceil(PAGE) + 2 * (chunks - c) + 4;
            let may_short = pieces.len() + worst_rest + 2 <= MAX_FRAGMENTS;
            let plen = if may_short && shape.mss > 1 && rng.below(1000) < shape.short_packet_permille {
                1 + rng.below(shape.mss as u64 - 1) as usize
            } else {
                shape.mss
            };
            if skip >= plen {
                // The chunk begins after this (short) packet.
                skip -= plen;
                continue;
            }
            let take = (plen - skip).min(end - at);
            // Payload bytes skip..skip+take of this packet, cut at its page boundaries.
            let mut p = skip;
            while p < skip + take {
                let piece_end = ((p / PAGE + 1) * PAGE).min(skip + take);
                pieces.push(((p % PAGE) as u32, (piece_end - p) as u32, (at + p - skip) as u64));
                p = piece_end;
            }
            at += take;
            skip = 0;
        }
    }
    assert!(
        pieces.len() <= MAX_FRAGMENTS,
        "a {len}-byte receive at MSS {} takes {} fragments, more than {MAX_FRAGMENTS} (real TCPX exits): use smaller receives",
        shape.mss,
        pieces.len()
    );
    place_on_pages(pieces, len, rng)
}

/// Puts each fragment `(in-page offset, len, dst_off)` on its own random page of a bounce
/// region 1.25x the fragment count, and lists the descriptors in random order.
fn place_on_pages(pieces: Vec<(u32, u32, u64)>, len: usize, rng: &mut Rng) -> Layout {
    let bounce_pages = pieces.len() + pieces.len() / 4 + 1;
    let mut slots: Vec<u32> = (0..bounce_pages as u32).collect();
    rng.shuffle(&mut slots);
    let mut metas: Vec<LoadMeta> = pieces
        .iter()
        .zip(&slots)
        .map(|(&(inpage, n, dst_off), &slot)| LoadMeta {
            src_off: slot * PAGE as u32 + inpage,
            len: n,
            dst_off,
        })
        .collect();
    rng.shuffle(&mut metas);
    Layout {
        metas,
        len,
        bounce_len: bounce_pages * PAGE,
    }
}

/// Every fragment length in `lens` (each 1..=4096) at every source-minus-destination
/// alignment (mod 16) where the page allows it, destinations back to back (so their own
/// alignment varies too): the edge cases of the copy (no whole 16-byte word, one, head and
/// tail bytes, co-aligned and shifted bodies). Exact cover of `0..len`.
///
/// # Panics
/// If a length is 0 or above 4096, or the fragments exceed 4 MiB or 2048 descriptors.
pub fn alignment_sweep(lens: &[u32], rng: &mut Rng) -> Layout {
    let mut pieces = Vec::new();
    let mut dst = 0u64;
    for &n in lens {
        assert!(n > 0 && n as usize <= PAGE, "fragment length {n} outside 1..={PAGE}");
        let room = (PAGE - n as usize) as u64; // in-page offsets 0..=room fit
        for r in 0..16u64 {
            // In-page offset with (src - dst) % 16 == r when the page has room for one.
            let want = (dst + r) % 16;
            let inpage = if want <= room {
                want + 16 * rng.below((room - want) / 16 + 1)
            } else {
                rng.below(room + 1)
            };
            pieces.push((inpage as u32, n, dst));
            dst += u64::from(n);
        }
    }
    let len = dst as usize;
    check_len(len);
    assert!(pieces.len() <= MAX_FRAGMENTS, "{} fragments", pieces.len());
    place_on_pages(pieces, len, rng)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_layout_and_ring_offsets() {
        let j = UnpackJob::from_meta_ring(0x1000, 3, 5, 0x10_0000, 1 << 20, 0x20_0000, 1 << 20).unwrap();
        assert_eq!(j.metas, 0x1000 + 3 * 2048 * 16);
        assert!(UnpackJob::from_meta_ring(0x1000, 16, 5, 1, 1, 1, 1).is_err());
        assert!(UnpackJob::new(16, 2049, 1, 1, 1, 1).validate().is_err());
        assert!(UnpackJob::new(8, 1, 1, 1, 1, 1).validate().is_err());
        assert!(UnpackJob::new(0, 0, 0, 0, 0, 0).validate().is_ok());
    }

    #[test]
    fn validate_rejects_out_of_bounds_and_limits() {
        let m = |s, l, d| LoadMeta {
            src_off: s,
            len: l,
            dst_off: d,
        };
        assert_eq!(validate_metas(&[m(0, 10, 0), m(10, 5, 10)], 15, 15).unwrap(), 15);
        assert!(validate_metas(&[m(10, 10, 0)], 15, 100).is_err());
        assert!(validate_metas(&[m(0, 10, 95)], 100, 100).is_err());
        assert!(validate_metas(&[m(0, 10, u64::MAX - 3)], 100, 100).is_err());
        let many = vec![m(0, 1, 0); MAX_FRAGMENTS + 1];
        assert!(validate_metas(&many, 10, 10).is_err());
        let big = vec![m(0, 4096, 0); 1025];
        assert!(validate_metas(&big, 1 << 20, 1 << 20).is_err());
        let e = validate_metas(&many, 10, 10).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.contains("keep each irecv"), "{e}");
    }
}
