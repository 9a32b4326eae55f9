//! Device-unpack emulation, the CUDA part: the per-comm GPU resources, on the CUDA context
//! current on the calling thread. Only what `accept` must hand NCCL is made with the comm; what
//! only CUDA buffers need waits for the comm's first CUDA registration (`regMr` with
//! `NCCL_PTR_CUDA` or a DMA-BUF) or, for a caller that never registers, its first CUDA
//! `isend`/`irecv` ([`CommGpu::cuda_res`]). Both run on the caller's thread, whose current context
//! TCPX takes as the comm's GPU (contract 3), so allocating there is what TCPX does. A
//! host-memory job thus never touches the bounce pool, however many comms it opens: reserving
//! 64 MiB of a 2 GiB pool per receive comm at accept failed past 16 peers even where no byte went
//! to the GPU.
//!
//! * Receive comm, at accept: the host-mapped `netUnpackMeta` ring
//!   (`cuMemHostAlloc(DEVICEMAP|PORTABLE)`; host receives publish `cnt = 0` in it) and the
//!   device-resident `unpackNetDeviceHandle {meta, bounce_buf, head = u64::MAX}`. `bounce_buf` is
//!   the GPU's pool base if the pool exists, else 0 until the pool is made, when every such
//!   handle of that GPU is patched (the kernel reads the handle at each launch, and only follows
//!   `bounce_buf` for descriptors, which host receives never publish).
//! * Receive comm, at its first CUDA registration: a region of 16 slots of
//!   [`Geometry::slot_bytes`] in the GPU's bounce pool (the pool is made by the first such comm),
//!   and per helper thread a [`Lane`].
//! * Send comm, at its first CUDA registration: per helper thread a [`Lane`] (CUDA sends go
//!   device -> pinned staging -> `send()`).
//! * The bounce pool: ONE device buffer per GPU (CUDA context), allocated by the first receive
//!   comm that needs it and kept for the process; every receive comm of that GPU hands out the same
//!   `bounce_buf` base and addresses its own region through `src_off`. This is required, not a
//!   detail: NCCL's unpack kernel keeps a single `bounce_buf` per thread block
//!   (`ncclShmem.devicePlugin.unpack.bounce_buf`, set by every peer's `ncclNetDeviceUnpackSetup`),
//!   so a block that receives from two network peers (tree all-reduce, several p2p peers) would
//!   read one peer's pages relative to the other's buffer. TCPX's RxDM buffer is per GPU too.
//!
//! Staging budget: every helper thread owns [`STAGING_BUFS`] pinned buffers of
//! `min(chunk, 4 MiB)` bytes, i.e. 2 x chunk per thread (8 sockets x 1 MiB chunks: 16 MiB of
//! pinned memory per comm), allocated with the comm's CUDA resources. Two buffers let a thread overlap a
//! staging copy with socket I/O (see [`crate::worker`]).
//!
//! Helper threads use the context through tcpx-gpu's objects, which make it current before
//! every driver call. Kernels are never compiled here (`Device::current` loads them lazily and
//! the plugin launches none).

use std::sync::{Arc, Mutex, OnceLock, Weak};

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

/// The process's bounce pools, and the device handles still waiting for their GPU's pool.
struct Pools {
    /// One per CUDA context; never freed (like TCPX's RxDM buffer).
    made: Vec<Arc<BouncePool>>,
    /// `(context, unpackNetDeviceHandle)` of receive comms accepted before their GPU had a pool:
    /// their `bounce_buf` is 0 until [`pool_for`] makes the pool and patches them.
    waiting: Vec<(usize, Weak<DeviceBuffer>)>,
}

static POOLS: Mutex<Pools> = Mutex::new(Pools {
    made: Vec::new(),
    waiting: Vec::new(),
});

fn pools() -> std::sync::MutexGuard<'static, Pools> {
    POOLS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pool_for(dev: &Device, bytes: usize) -> NetResult<Arc<BouncePool>> {
    let mut pools = pools();
    if let Some(p) = pools.made.iter().find(|p| p.ctx_id == dev.context_id()) {
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
    // Every handle of this GPU handed out so far says `bounce_buf = 0`: give them the base.
    let base = buf.as_raw().to_le_bytes();
    let ctx = dev.context_id();
    let mut patch_err = None;
    pools.waiting.retain(|(c, h)| {
        if *c != ctx {
            return true;
        }
        if let Some(h) = h.upgrade() {
            if let Err(e) = h.copy_from_host(8, &base, dev.stream()) {
                patch_err.get_or_insert(e);
            }
        }
        false
    });
    if let Some(e) = patch_err {
        return Err(gpu_err("writing bounce_buf into an unpackNetDeviceHandle", e));
    }
    let p = Arc::new(BouncePool {
        buf,
        regions: Mutex::new(RegionAllocator::new(bytes)),
        ctx_id: ctx,
    });
    pools.made.push(Arc::clone(&p));
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

/// The receive side's unpack state made at accept: what NCCL's device handle points to.
pub struct RecvUnpack {
    pub geo: Geometry,
    pub meta: PinnedHostBuffer,
    /// Device address of `meta` (equal to the host address under UVA).
    pub meta_dev: u64,
    /// The device-resident `unpackNetDeviceHandle` (24 bytes); shared with `POOLS`' waiting
    /// list, which patches its `bounce_buf` when the GPU's pool is made.
    pub handle: Arc<DeviceBuffer>,
}

impl RecvUnpack {
    /// Device address of the `unpackNetDeviceHandle`.
    pub fn handle_ptr(&self) -> u64 {
        self.handle.as_raw()
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

/// A receive comm's region of its GPU's bounce pool (made with its CUDA resources).
pub struct Region {
    pub pool: Arc<BouncePool>,
    /// This comm's region of the pool: 16 slots of `slot_bytes`.
    pub off: usize,
    pub len: usize,
    slot_bytes: usize,
}

impl Drop for Region {
    fn drop(&mut self) {
        self.pool
            .regions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .free(self.off, self.len, REGION_ALIGN);
    }
}

impl Region {
    /// Offset of slot `slot`'s region in the bounce buffer (the pool).
    pub fn slot_off(&self, slot: usize) -> usize {
        self.off + (slot % UNPACK_QUEUE_DEPTH) * self.slot_bytes
    }

    /// Device address of the bounce buffer base (`bounce_buf`).
    pub fn bounce_base(&self) -> u64 {
        self.pool.buf.as_raw()
    }
}

/// What only CUDA buffers need: made by [`CommGpu::cuda_res`] at the comm's first CUDA
/// registration or post.
pub struct CudaRes {
    /// One per data socket / helper thread.
    pub lanes: Vec<Mutex<Lane>>,
    /// Receive comms only.
    pub region: Option<Region>,
}

/// A value made once, by the first caller that needs it and never before; a failed attempt
/// leaves it unmade (the next caller tries again and gets the error too). Why not `OnceLock`
/// alone: its fallible `get_or_try_init` is unstable, and two callers must not both allocate.
pub struct Deferred<T> {
    cell: OnceLock<T>,
    making: Mutex<()>,
}

impl<T> Default for Deferred<T> {
    fn default() -> Self {
        Self {
            cell: OnceLock::new(),
            making: Mutex::new(()),
        }
    }
}

impl<T> Deferred<T> {
    /// The value, if made.
    pub fn get(&self) -> Option<&T> {
        self.cell.get()
    }

    /// The value, made by `make` if this is the first call that succeeds.
    pub fn get_or_make<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.cell.get() {
            return Ok(v);
        }
        let _making = self.making.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = self.cell.get() {
            return Ok(v);
        }
        let v = make()?;
        Ok(self.cell.get_or_init(|| v))
    }
}

/// A comm's GPU resources (unpack mode only): see the module docs for what is made when.
pub struct CommGpu {
    pub dev: Device,
    /// Receive comms only.
    pub recv: Option<RecvUnpack>,
    nsocks: usize,
    chunk: usize,
    pool_bytes: usize,
    cuda: Deferred<CudaRes>,
}

fn gpu_err(what: &str, e: GpuError) -> NetError {
    NetError::system(format!("device unpack: {what}: {e}"))
}

impl CommGpu {
    /// What a comm with `nsocks` helper threads striping in `chunk`-byte chunks needs at once,
    /// on the calling thread's current CUDA context: for a receive comm the `netUnpackMeta`
    /// ring and the device handle. `pool_bytes` sizes the GPU's bounce pool, should this comm be
    /// the first to need it.
    pub fn new(recv: bool, nsocks: usize, chunk: usize, pool_bytes: usize) -> NetResult<Self> {
        let dev = Device::current().map_err(|e| gpu_err("no usable CUDA context on the calling thread", e))?;
        let recv = if recv {
            // Receives place whole pages: their chunk size is a multiple of 4 KiB (the
            // receiver's value, rounded up at init in unpack mode). Sends take any chunk size.
            let geo = Geometry::new(chunk).map_err(NetError::invalid_argument)?;
            let meta = dev
                .alloc_pinned(std::mem::size_of::<NetUnpackMeta>(), PinnedFlags::MAPPED)
                .map_err(|e| gpu_err("host-mapped netUnpackMeta", e))?;
            let meta_dev = meta
                .device_ptr()
                .map_err(|e| gpu_err("netUnpackMeta device pointer", e))?;
            let handle = Arc::new(dev.alloc(24).map_err(|e| gpu_err("unpackNetDeviceHandle", e))?);
            // Under the pools' lock: a pool made meanwhile either is seen here or patches us.
            let mut pools = pools();
            let made = pools.made.iter().find(|p| p.ctx_id == dev.context_id());
            let bounce = made.map_or(0, |p| p.buf.as_raw());
            if made.is_none() {
                pools.waiting.retain(|(_, h)| h.strong_count() > 0);
                pools.waiting.push((dev.context_id(), Arc::downgrade(&handle)));
            }
            let mut h = [0u8; 24];
            h[0..8].copy_from_slice(&meta_dev.to_le_bytes());
            h[8..16].copy_from_slice(&bounce.to_le_bytes());
            h[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
            handle
                .copy_from_host(0, &h, dev.stream())
                .map_err(|e| gpu_err("writing unpackNetDeviceHandle", e))?;
            drop(pools);
            Some(RecvUnpack {
                geo,
                meta,
                meta_dev,
                handle,
            })
        } else {
            None
        };
        Ok(Self {
            dev,
            recv,
            nsocks,
            chunk,
            pool_bytes,
            cuda: Deferred::default(),
        })
    }

    /// The CUDA-only resources, if a CUDA buffer was registered or posted (helper threads).
    pub fn cuda(&self) -> Option<&CudaRes> {
        self.cuda.get()
    }

    /// The CUDA-only resources, made now on the calling thread's context if this is the comm's
    /// first CUDA registration or post. `comms` (open comms of the process) goes into the
    /// message when the pool has no room.
    pub fn cuda_res(&self, comms: usize) -> NetResult<&CudaRes> {
        self.cuda.get_or_make(|| self.make_cuda(comms))
    }

    fn make_cuda(&self, comms: usize) -> NetResult<CudaRes> {
        let dev = &self.dev;
        // One window per receive chunk per buffer; sends go through staging in pieces of this
        // size.
        let staging_len = self.chunk.clamp(1, MAX_RECV);
        let mut lanes = Vec::with_capacity(self.nsocks);
        for _ in 0..self.nsocks {
            let pinned = || {
                dev.alloc_pinned(staging_len, PinnedFlags::PLAIN)
                    .map_err(|e| gpu_err("pinned staging buffer", e))
            };
            let event = || Event::new(dev, false).map_err(|e| gpu_err("event", e));
            let staging = [pinned()?, pinned()?];
            let done = [event()?, event()?];
            let stream = dev.new_stream().map_err(|e| gpu_err("stream", e))?;
            lanes.push(Mutex::new(Lane { staging, done, stream }));
        }
        let region = match &self.recv {
            None => None,
            Some(ru) => {
                let pool = pool_for(dev, self.pool_bytes)?;
                let len = UNPACK_QUEUE_DEPTH * ru.geo.slot_bytes();
                let off = {
                    let mut regions = pool.regions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let got = regions.alloc(len, REGION_ALIGN);
                    got.ok_or_else(|| {
                        NetError::system(format!(
                            "regMr: device unpack: the bounce pool of GPU {} ({} MiB) has no room for another receive comm that receives into CUDA memory ({} MiB needed, {} MiB free; {comms} comms open in this process): raise TCPXEMU_BOUNCE_POOL_MB (at most 4095)",
                            dev.ordinal(),
                            regions.capacity() >> 20,
                            len.next_multiple_of(REGION_ALIGN) >> 20,
                            regions.available() >> 20
                        ))
                    })?
                };
                Some(Region {
                    pool,
                    off,
                    len,
                    slot_bytes: ru.geo.slot_bytes(),
                })
            }
        };
        Ok(CudaRes { lanes, region })
    }

    /// Device address of slot `slot`'s bounce region, once reserved.
    pub fn bounce_slot(&self, slot: usize) -> Option<u64> {
        let r = self.cuda()?.region.as_ref()?;
        Some(r.bounce_base() + r.slot_off(slot) as u64)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// The reservation rule without a GPU: what [`CommGpu::cuda_res`] defers is made by the first
    /// CUDA registration or post only; host traffic never asks for it (a comm calls it only
    /// for CUDA buffers), a second CUDA call reuses it, and a failure (a full pool) leaves
    /// nothing behind, so the next CUDA call reports the error again instead of using half a
    /// reservation.
    #[test]
    fn deferred_resources_are_made_once_by_the_first_cuda_use() {
        let made = Cell::new(0);
        let res: Deferred<u32> = Deferred::default();
        let make = |ok: bool| {
            made.set(made.get() + 1);
            if ok {
                Ok(7)
            } else {
                Err("no room")
            }
        };
        // Accept and any number of host transfers: nothing asked for, nothing made.
        assert!(res.get().is_none());
        assert_eq!(made.get(), 0);
        assert_eq!(res.get_or_make(|| make(false)), Err("no room"));
        assert!(res.get().is_none(), "a failed reservation keeps nothing");
        assert_eq!(res.get_or_make(|| make(true)), Ok(&7));
        assert_eq!(res.get_or_make(|| make(true)), Ok(&7));
        assert_eq!((made.get(), res.get()), (2, Some(&7)));
        // Concurrent first uses make it once.
        let shared: Deferred<usize> = Deferred::default();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..8 {
                sc.spawn(|| {
                    let v = shared.get_or_make(|| {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        Ok::<_, ()>(calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
                    });
                    assert_eq!(v, Ok(&0));
                });
            }
        });
        assert_eq!(calls.into_inner(), 1);
    }
}
