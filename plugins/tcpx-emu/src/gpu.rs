//! Device-unpack emulation, the CUDA part: the per-comm GPU resources, all allocated when the
//! comm is created (connect/accept), on the CUDA context current on the calling thread.
//!
//! * Receive comm: the host-mapped `netUnpackMeta` ring (`cuMemHostAlloc(DEVICEMAP|PORTABLE)`),
//!   a region of 16 slots of [`Geometry::slot_bytes`] in the GPU's bounce pool, the
//!   device-resident `unpackNetDeviceHandle {meta, bounce_buf, head = u64::MAX}`, and per helper
//!   thread a [`Lane`].
//! * The bounce pool: ONE device buffer per GPU (CUDA context), allocated by the first receive
//!   comm and kept for the process; every receive comm of that GPU hands out the same
//!   `bounce_buf` base and addresses its own region through `src_off`. This is required, not a
//!   detail: NCCL's unpack kernel keeps a single `bounce_buf` per thread block
//!   (`ncclShmem.devicePlugin.unpack.bounce_buf`, set by every peer's `ncclNetDeviceUnpackSetup`),
//!   so a block that receives from two network peers (tree all-reduce, several p2p peers) would
//!   read one peer's pages relative to the other's buffer. TCPX's RxDM buffer is per GPU too.
//! * Send comm: per helper thread a [`Lane`] (CUDA sends go device -> pinned staging ->
//!   `send()`).
//!
//! Staging budget: every helper thread owns [`STAGING_BUFS`] pinned buffers of
//! `min(chunk, 4 MiB)` bytes, i.e. 2 x chunk per thread (8 sockets x 1 MiB chunks: 16 MiB of
//! pinned memory per comm), all allocated at connect/accept. Two buffers let a thread overlap a
//! staging copy with socket I/O (see [`crate::worker`]).
//!
//! Helper threads use the context through tcpx-gpu's objects, which make it current before
//! every driver call. Kernels are never compiled here (`Device::current` loads them lazily and
//! the plugin launches none).

use std::sync::{Arc, Mutex};

use nccl_net_abi::{LoadMeta, NetUnpackMeta, UNPACK_MAX_SLICE_PAGES, UNPACK_QUEUE_DEPTH};
use tcpx_gpu::{Device, DeviceBuffer, Event, GpuError, PinnedFlags, PinnedHostBuffer, Stream};

use crate::error::{NetError, NetResult};
use crate::scramble::{Geometry, RegionAllocator, MAX_RECV};

/// Alignment of comm regions in the bounce pool.
const REGION_ALIGN: usize = 2 << 20;

/// A GPU's bounce buffer, shared by all its receive comms (see the module docs).
pub struct BouncePool {
    pub buf: DeviceBuffer,
    regions: Mutex<RegionAllocator>,
    ctx_id: usize,
}

/// The pools of this process, one per CUDA context; never freed (like TCPX's RxDM buffer).
static POOLS: Mutex<Vec<Arc<BouncePool>>> = Mutex::new(Vec::new());

fn pool_for(dev: &Device, bytes: usize) -> NetResult<Arc<BouncePool>> {
    let mut pools = POOLS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = pools.iter().find(|p| p.ctx_id == dev.context_id()) {
        return Ok(Arc::clone(p));
    }
    let buf = dev.alloc(bytes).map_err(|e| {
        gpu_err(
            &format!("bounce pool of {} MiB (TCPXEMU_BOUNCE_POOL_MB)", bytes >> 20),
            e,
        )
    })?;
    crate::info!(
        nccl_net_abi::NCCL_INIT | nccl_net_abi::NCCL_NET,
        "GPU {}: bounce pool of {} MiB at {:#x}, shared by all receive comms of this GPU",
        dev.ordinal(),
        bytes >> 20,
        buf.as_raw()
    );
    let p = Arc::new(BouncePool {
        buf,
        regions: Mutex::new(RegionAllocator::new(bytes)),
        ctx_id: dev.context_id(),
    });
    pools.push(Arc::clone(&p));
    Ok(p)
}

/// Pinned staging buffers per helper thread (double buffering).
pub const STAGING_BUFS: usize = 2;

/// A helper thread's staging buffers, their copy-completion events and its stream.
/// `done[b]` is recorded right after the last copy into/out of `staging[b]`.
pub struct Lane {
    pub staging: [PinnedHostBuffer; STAGING_BUFS],
    pub done: [Event; STAGING_BUFS],
    pub stream: Stream,
}

/// The receive side's unpack state.
pub struct RecvUnpack {
    pub geo: Geometry,
    pub meta: PinnedHostBuffer,
    /// Device address of `meta` (equal to the host address under UVA).
    pub meta_dev: u64,
    /// The GPU's bounce pool (`bounce_buf` of the handle is its base).
    pub pool: Arc<BouncePool>,
    /// This comm's region of the pool: 16 slots of `geo.slot_bytes()`.
    pub region_off: usize,
    pub region_len: usize,
    /// The device-resident `unpackNetDeviceHandle` (24 bytes).
    pub handle: DeviceBuffer,
}

impl Drop for RecvUnpack {
    fn drop(&mut self) {
        self.pool
            .regions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .free(self.region_off, self.region_len, REGION_ALIGN);
    }
}

impl RecvUnpack {
    /// Device address of the `unpackNetDeviceHandle`.
    pub fn handle_ptr(&self) -> u64 {
        self.handle.as_raw()
    }

    /// Offset of slot `slot`'s region in the bounce buffer (the pool).
    pub fn slot_off(&self, slot: usize) -> usize {
        self.region_off + (slot % UNPACK_QUEUE_DEPTH) * self.geo.slot_bytes()
    }

    /// Device address of the bounce buffer base (`bounce_buf`).
    pub fn bounce_base(&self) -> u64 {
        self.pool.buf.as_raw()
    }

    // PinnedHostBuffer is page-aligned (cuMemHostAlloc), beyond NetUnpackMeta's 16 bytes.
    #[allow(clippy::cast_ptr_alignment)]
    fn meta_ptr(&self) -> *mut NetUnpackMeta {
        self.meta.as_ptr() as *mut NetUnpackMeta
    }

    /// The descriptor array of `slot`.
    ///
    /// # Safety
    /// Only the comm's caller thread may write a slot, and only while it is free (between
    /// `irecvConsumed` of its previous receive and `test` reporting the next one done).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_metas(&self, slot: usize) -> &mut [LoadMeta; UNPACK_MAX_SLICE_PAGES] {
        // SAFETY: the ring is a live, zeroed, correctly sized and aligned allocation (page
        // aligned); exclusivity per the contract above.
        unsafe { &mut (*self.meta_ptr()).mem[slot % UNPACK_QUEUE_DEPTH] }
    }

    /// Publishes `cnt` for `slot` and fences, as TCPX does before `test` reports the receive
    /// done (`*cnt = n; atomic_thread_fence(release); _mm_sfence()`).
    pub fn publish_cnt(&self, slot: usize, cnt: u64) {
        // SAFETY: `cnt[slot]` lies in the live ring; the GPU reads it with volatile loads.
        unsafe { std::ptr::write_volatile(&raw mut (*self.meta_ptr()).cnt[slot % UNPACK_QUEUE_DEPTH], cnt) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// `cnt[slot]` as the GPU would read it.
    pub fn cnt(&self, slot: usize) -> u64 {
        // SAFETY: as in publish_cnt.
        unsafe { std::ptr::read_volatile(&raw const (*self.meta_ptr()).cnt[slot % UNPACK_QUEUE_DEPTH]) }
    }
}

/// A comm's GPU resources (unpack mode only).
pub struct CommGpu {
    pub dev: Device,
    /// One per data socket / helper thread.
    pub lanes: Vec<Mutex<Lane>>,
    /// Receive comms only.
    pub recv: Option<RecvUnpack>,
}

fn gpu_err(what: &str, e: GpuError) -> NetError {
    NetError::system(format!("device unpack: {what}: {e}"))
}

impl CommGpu {
    /// Allocates everything for a comm with `nsocks` helper threads striping in `chunk`-byte
    /// chunks, on the calling thread's current CUDA context; a receive comm takes a region of
    /// the GPU's bounce pool (created with `pool_bytes` by the first receive comm).
    pub fn new(recv: bool, nsocks: usize, chunk: usize, pool_bytes: usize) -> NetResult<Self> {
        let dev = Device::current().map_err(|e| gpu_err("no usable CUDA context on the calling thread", e))?;
        // Receives place whole pages: their chunk size is a multiple of 4 KiB (the receiver's
        // value, rounded up at init in unpack mode). Sends take any chunk size.
        let geo = if recv {
            Some(Geometry::new(chunk).map_err(NetError::invalid_argument)?)
        } else {
            None
        };
        // One window per receive chunk per buffer; sends go through staging in pieces of this
        // size.
        let staging_len = chunk.clamp(1, MAX_RECV);
        let mut lanes = Vec::with_capacity(nsocks);
        for _ in 0..nsocks {
            let pinned = || {
                dev.alloc_pinned(staging_len, PinnedFlags::PLAIN)
                    .map_err(|e| gpu_err("pinned staging buffer", e))
            };
            let event = || Event::new(&dev, false).map_err(|e| gpu_err("event", e));
            let staging = [pinned()?, pinned()?];
            let done = [event()?, event()?];
            let stream = dev.new_stream().map_err(|e| gpu_err("stream", e))?;
            lanes.push(Mutex::new(Lane { staging, done, stream }));
        }
        let recv = if let Some(geo) = geo {
            let meta = dev
                .alloc_pinned(std::mem::size_of::<NetUnpackMeta>(), PinnedFlags::MAPPED)
                .map_err(|e| gpu_err("host-mapped netUnpackMeta", e))?;
            let meta_dev = meta
                .device_ptr()
                .map_err(|e| gpu_err("netUnpackMeta device pointer", e))?;
            let pool = pool_for(&dev, pool_bytes)?;
            let region_len = UNPACK_QUEUE_DEPTH * geo.slot_bytes();
            let region_off = {
                let mut regions = pool.regions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let got = regions.alloc(region_len, REGION_ALIGN);
                got.ok_or_else(|| {
                    NetError::system(format!(
                        "device unpack: the bounce pool of GPU {} ({} MiB) has no room for another receive comm ({} MiB needed, {} MiB free): raise TCPXEMU_BOUNCE_POOL_MB (at most 4095)",
                        dev.ordinal(),
                        regions.capacity() >> 20,
                        region_len.next_multiple_of(REGION_ALIGN) >> 20,
                        regions.available() >> 20
                    ))
                })?
            };
            let handle = dev.alloc(24);
            // From here on, dropping `ru` gives the region back.
            let ru = RecvUnpack {
                geo,
                meta,
                meta_dev,
                pool,
                region_off,
                region_len,
                handle: handle.map_err(|e| gpu_err("unpackNetDeviceHandle", e))?,
            };
            let mut h = [0u8; 24];
            h[0..8].copy_from_slice(&meta_dev.to_le_bytes());
            h[8..16].copy_from_slice(&ru.bounce_base().to_le_bytes());
            h[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
            ru.handle
                .copy_from_host(0, &h, dev.stream())
                .map_err(|e| gpu_err("writing unpackNetDeviceHandle", e))?;
            Some(ru)
        } else {
            None
        };
        Ok(Self { dev, lanes, recv })
    }
}

/// Whether `ptr` is device memory, for buffers passed without a memory handle.
pub fn is_device_pointer(ptr: usize) -> bool {
    tcpx_gpu::pointer_is_device(ptr as u64).unwrap_or(false)
}

/// Whether a CUDA driver with at least one GPU is present (the `auto` mode's test).
pub fn cuda_present() -> Result<bool, String> {
    tcpx_gpu::Gpu::probe().map(|g| g.is_some_and(|g| g.count() > 0))
}
