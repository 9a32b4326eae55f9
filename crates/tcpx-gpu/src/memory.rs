//! RAII device memory, pinned host memory, streams and events.
//!
//! Every object keeps its context alive (`Arc<Ctx>`) and makes it current before each driver
//! call, so it can be used and dropped on any thread. Raw pointers come out as `u64` device
//! addresses (`CUdeviceptr`) or `*mut u8`, which is what NCCL net plugins take (`regMr`,
//! `irecv`).
//!
//! Asynchronous copies that touch *host* memory are `unsafe`: the DMA runs after the call
//! returns, so the borrow checker cannot see it. The safe `copy_*` helpers enqueue and then
//! synchronize the stream. Copies between device buffers and kernel launches are safe:
//! Rust never holds references into device memory, and `cuMemFree` waits for the device to
//! stop using the allocation.

use crate::driver::Ctx;
use crate::error::{check, GpuError};
use crate::Device;
use cudarc::driver::sys::{self, CUdeviceptr, CUevent, CUresult, CUstream};
use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

/// Alignment of [`DeviceBuffer`] addresses: one host page, which is what plugins that register
/// GPU memory in pages (TCPX, dma-buf) expect.
pub const DEVICE_BUFFER_ALIGN: usize = 4096;

const CU_STREAM_NON_BLOCKING: u32 = 0x1;
const CU_EVENT_DISABLE_TIMING: u32 = 0x2;
const CU_MEMHOSTALLOC_PORTABLE: u32 = 0x1;
const CU_MEMHOSTALLOC_DEVICEMAP: u32 = 0x2;

fn range_check(range: &Range<usize>, len: usize, what: &str) -> Result<(), GpuError> {
    if range.start > range.end || range.end > len {
        return Err(GpuError::invalid(format!(
            "{what}: range {}..{} is outside the {len}-byte buffer: pass a range within 0..{len}",
            range.start, range.end
        )));
    }
    Ok(())
}

/// Device memory from `cuMemAlloc`, page-aligned.
///
/// `cuMemAlloc` only promises 256-byte alignment, so we allocate `len + 4096` bytes and round
/// the start up to 4 KiB; [`as_raw`](Self::as_raw) is that aligned address. Registering the
/// buffer with a plugin works on the aligned range: it lies inside one allocation.
pub struct DeviceBuffer {
    ctx: Arc<Ctx>,
    base: CUdeviceptr,
    ptr: CUdeviceptr,
    len: usize,
}

// SAFETY: the buffer is a device address plus its owning context; the driver API is
// thread-safe and Rust never dereferences the address.
unsafe impl Send for DeviceBuffer {}
// SAFETY: as above; &DeviceBuffer only hands out the address and enqueues device work.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocates `len` bytes (uninitialised) of device memory, 4 KiB-aligned.
    pub fn new(device: &Device, len: usize) -> Result<Self, GpuError> {
        Self::from_ctx(device.ctx().clone(), len)
    }

    pub(crate) fn from_ctx(ctx: Arc<Ctx>, len: usize) -> Result<Self, GpuError> {
        ctx.bind()?;
        let bytes = len
            .checked_add(DEVICE_BUFFER_ALIGN)
            .ok_or_else(|| GpuError::invalid(format!("device buffer of {len} bytes is too large")))?;
        let mut base: CUdeviceptr = 0;
        // SAFETY: out-pointer to a live CUdeviceptr; the context is current.
        check(unsafe { sys::cuMemAlloc_v2(&raw mut base, bytes) }, "cuMemAlloc")?;
        let align = DEVICE_BUFFER_ALIGN as u64;
        let ptr = (base + align - 1) & !(align - 1);
        Ok(DeviceBuffer { ctx, base, ptr, len })
    }

    /// The 4 KiB-aligned device address of byte 0.
    #[inline]
    pub fn as_raw(&self) -> u64 {
        self.ptr
    }

    /// The device address as a pointer (for plugin calls; never dereference it on the host).
    #[inline]
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr as usize as *mut u8
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of `range`, after checking it lies inside the buffer.
    pub fn raw_range(&self, range: Range<usize>) -> Result<u64, GpuError> {
        range_check(&range, self.len, "DeviceBuffer")?;
        Ok(self.ptr + range.start as u64)
    }

    /// Exports `range` of the buffer as a DMA-BUF file descriptor
    /// (`cuMemGetHandleForAddressRange`), what `regMrDmaBuf` takes. The range must start and end
    /// on host pages (the buffer is 4 KiB-aligned; pass page multiples).
    pub fn dmabuf_fd(&self, range: Range<usize>) -> Result<std::os::fd::OwnedFd, GpuError> {
        let addr = self.raw_range(range.clone())?;
        self.ctx.bind()?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: out-pointer to a live int, as the DMA_BUF_FD handle type requires; the range
        // lies inside this allocation (checked above) and the context is current.
        check(
            unsafe {
                sys::cuMemGetHandleForAddressRange(
                    (&raw mut fd).cast(),
                    addr,
                    range.len(),
                    sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            },
            "cuMemGetHandleForAddressRange",
        )?;
        if fd < 0 {
            return Err(GpuError::invalid(
                "cuMemGetHandleForAddressRange returned no file descriptor",
            ));
        }
        // SAFETY: the driver just created this descriptor for us; we own it.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// Copies `src` into the buffer at `offset` and waits for the copy.
    pub fn copy_from_host(&self, offset: usize, src: &[u8], stream: &Stream) -> Result<(), GpuError> {
        let dst = self.raw_range(offset..offset.saturating_add(src.len()))?;
        // SAFETY: dst is inside this buffer; src is borrowed until the synchronize below.
        unsafe { stream.memcpy_htod_async(dst, src.as_ptr(), src.len())? };
        stream.synchronize()
    }

    /// Copies `dst.len()` bytes from the buffer at `offset` into `dst` and waits for the copy.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8], stream: &Stream) -> Result<(), GpuError> {
        let src = self.raw_range(offset..offset.saturating_add(dst.len()))?;
        // SAFETY: src is inside this buffer; dst is borrowed until the synchronize below.
        unsafe { stream.memcpy_dtoh_async(dst.as_mut_ptr(), src, dst.len())? };
        stream.synchronize()
    }

    /// Sets `range` to `byte` (asynchronous, on `stream`).
    pub fn memset(&self, range: Range<usize>, byte: u8, stream: &Stream) -> Result<(), GpuError> {
        let p = self.raw_range(range.clone())?;
        self.ctx.bind()?;
        // SAFETY: the range lies inside this live allocation.
        check(
            unsafe { sys::cuMemsetD8Async(p, byte, range.len(), stream.raw) },
            "cuMemsetD8Async",
        )
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: base came from cuMemAlloc in this context and is freed once. cuMemFree
            // waits for work still using it.
            unsafe {
                sys::cuMemFree_v2(self.base);
            }
        }
    }
}

/// Flags for [`PinnedHostBuffer::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedFlags {
    /// `CU_MEMHOSTALLOC_DEVICEMAP`: kernels can read and write it (zero-copy), see
    /// [`PinnedHostBuffer::device_ptr`].
    pub device_map: bool,
    /// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not only this device's.
    pub portable: bool,
}

impl PinnedFlags {
    /// `DEVICEMAP | PORTABLE`, as TCPX allocates its `netUnpackMeta` ring.
    pub const MAPPED: PinnedFlags = PinnedFlags {
        device_map: true,
        portable: true,
    };
    /// Plain pinned memory (fast, truly asynchronous copies).
    pub const PLAIN: PinnedFlags = PinnedFlags {
        device_map: false,
        portable: false,
    };
}

/// Page-locked host memory from `cuMemHostAlloc`, zeroed at allocation.
pub struct PinnedHostBuffer {
    ctx: Arc<Ctx>,
    ptr: *mut u8,
    len: usize,
    flags: PinnedFlags,
}

// SAFETY: owned host memory; access goes through &/&mut borrows (or unsafe raw pointers).
unsafe impl Send for PinnedHostBuffer {}
// SAFETY: as above; &PinnedHostBuffer only allows reads.
unsafe impl Sync for PinnedHostBuffer {}

impl PinnedHostBuffer {
    /// Allocates `len` bytes of pinned host memory.
    pub fn new(device: &Device, len: usize, flags: PinnedFlags) -> Result<Self, GpuError> {
        Self::from_ctx(device.ctx().clone(), len, flags)
    }

    pub(crate) fn from_ctx(ctx: Arc<Ctx>, len: usize, flags: PinnedFlags) -> Result<Self, GpuError> {
        ctx.bind()?;
        let mut f = 0;
        if flags.portable {
            f |= CU_MEMHOSTALLOC_PORTABLE;
        }
        if flags.device_map {
            f |= CU_MEMHOSTALLOC_DEVICEMAP;
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live pointer; the context is current.
        check(
            unsafe { sys::cuMemHostAlloc(&raw mut p, len.max(1), f) },
            "cuMemHostAlloc",
        )?;
        // SAFETY: p points to at least len.max(1) writable bytes we own.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Ok(PinnedHostBuffer {
            ctx,
            ptr: p.cast(),
            len,
            flags,
        })
    }

    /// Host pointer to byte 0.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Mutable host pointer to byte 0.
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr/len describe our zero-initialised allocation.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The flags it was allocated with.
    pub fn flags(&self) -> PinnedFlags {
        self.flags
    }

    /// The device-side alias (`cuMemHostGetDevicePointer`) for kernels; requires
    /// [`PinnedFlags::device_map`]. Under UVA it equals the host address.
    pub fn device_ptr(&self) -> Result<u64, GpuError> {
        if !self.flags.device_map {
            return Err(GpuError::invalid(
                "PinnedHostBuffer::device_ptr needs a buffer allocated with PinnedFlags::MAPPED",
            ));
        }
        self.ctx.bind()?;
        let mut d: CUdeviceptr = 0;
        // SAFETY: ptr is a live cuMemHostAlloc(DEVICEMAP) allocation.
        check(
            unsafe { sys::cuMemHostGetDevicePointer_v2(&raw mut d, self.ptr.cast(), 0) },
            "cuMemHostGetDevicePointer",
        )?;
        Ok(d)
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: ptr came from cuMemHostAlloc and is freed once.
            unsafe {
                sys::cuMemFreeHost(self.ptr.cast());
            }
        }
    }
}

/// A non-blocking CUDA stream (`CU_STREAM_NON_BLOCKING`: no implicit sync with stream 0).
pub struct Stream {
    ctx: Arc<Ctx>,
    pub(crate) raw: CUstream,
}

// SAFETY: CUDA streams may be used from any thread; we bind the context first.
unsafe impl Send for Stream {}
// SAFETY: as above; enqueueing from several threads is allowed by the driver.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a stream on `device`.
    pub fn new(device: &Device) -> Result<Self, GpuError> {
        Self::with_ctx(device.ctx().clone())
    }

    pub(crate) fn with_ctx(ctx: Arc<Ctx>) -> Result<Self, GpuError> {
        ctx.bind()?;
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a live CUstream; the context is current.
        check(
            unsafe { sys::cuStreamCreate(&raw mut raw, CU_STREAM_NON_BLOCKING) },
            "cuStreamCreate",
        )?;
        Ok(Stream { ctx, raw })
    }

    /// The raw `CUstream` (for `cudaStream_t` parameters).
    #[inline]
    pub fn as_raw(&self) -> *mut c_void {
        self.raw.cast()
    }

    /// Waits for all work enqueued so far.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: raw is a live stream.
        check(unsafe { sys::cuStreamSynchronize(self.raw) }, "cuStreamSynchronize")
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        check(
            unsafe { sys::cuStreamWaitEvent(self.raw, event.raw, 0) },
            "cuStreamWaitEvent",
        )
    }

    /// Copies `len` bytes between device buffers (asynchronous).
    pub fn copy_dtod(
        &self,
        dst: &DeviceBuffer,
        dst_off: usize,
        src: &DeviceBuffer,
        src_off: usize,
        len: usize,
    ) -> Result<(), GpuError> {
        let d = dst.raw_range(dst_off..dst_off.saturating_add(len))?;
        let s = src.raw_range(src_off..src_off.saturating_add(len))?;
        // SAFETY: both ranges were checked to lie inside live allocations.
        unsafe { self.memcpy_dtod_async(d, s, len) }
    }

    /// `cuMemcpyDtoDAsync` on raw device addresses.
    ///
    /// # Safety
    /// `dst..dst+len` and `src..src+len` must be valid device memory of this context for the
    /// whole time the copy runs.
    #[inline]
    pub unsafe fn memcpy_dtod_async(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: the caller guarantees the ranges.
        check(
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, self.raw) },
            "cuMemcpyDtoDAsync",
        )
    }

    /// `cuMemcpyHtoDAsync`.
    ///
    /// # Safety
    /// `dst..dst+len` must be valid device memory; `src..src+len` must stay readable and
    /// unmodified until the stream has passed this copy (pageable memory is staged before the
    /// call returns, pinned memory is read later).
    #[inline]
    pub unsafe fn memcpy_htod_async(&self, dst: u64, src: *const u8, len: usize) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: the caller guarantees the ranges and their lifetime.
        check(
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, self.raw) },
            "cuMemcpyHtoDAsync",
        )
    }

    /// `cuMemcpyDtoHAsync`.
    ///
    /// # Safety
    /// `src..src+len` must be valid device memory; `dst..dst+len` must stay writable and must
    /// not be read or written by the host until the stream has passed this copy.
    #[inline]
    pub unsafe fn memcpy_dtoh_async(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: the caller guarantees the ranges and exclusive access.
        check(
            unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, self.raw) },
            "cuMemcpyDtoHAsync",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: raw is a live stream destroyed once; pending work still completes.
            unsafe {
                sys::cuStreamDestroy_v2(self.raw);
            }
        }
    }
}

/// A CUDA event: completion marker on a stream, optionally with timing.
pub struct Event {
    ctx: Arc<Ctx>,
    raw: CUevent,
}

// SAFETY: events may be recorded, queried and synchronized from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event; `timing = false` makes record/query cheaper (no timestamp).
    pub fn new(device: &Device, timing: bool) -> Result<Self, GpuError> {
        let ctx = device.ctx().clone();
        ctx.bind()?;
        let flags = if timing { 0 } else { CU_EVENT_DISABLE_TIMING };
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a live CUevent; the context is current.
        check(unsafe { sys::cuEventCreate(&raw mut raw, flags) }, "cuEventCreate")?;
        Ok(Event { ctx, raw })
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        check(unsafe { sys::cuEventRecord(self.raw, stream.raw) }, "cuEventRecord")
    }

    /// `true` once the work before the last record has finished (never blocks).
    pub fn query(&self) -> Result<bool, GpuError> {
        self.ctx.bind()?;
        // SAFETY: raw is live.
        match unsafe { sys::cuEventQuery(self.raw) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|()| false),
        }
    }

    /// Blocks until the work before the last record has finished.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: raw is live.
        check(unsafe { sys::cuEventSynchronize(self.raw) }, "cuEventSynchronize")
    }

    /// Milliseconds from `self` to `end` (both recorded with timing, `end` complete).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, GpuError> {
        self.ctx.bind()?;
        let mut ms = 0f32;
        // SAFETY: both handles are live; out-pointer to a live f32.
        check(
            unsafe { sys::cuEventElapsedTime(&raw mut ms, self.raw, end.raw) },
            "cuEventElapsedTime",
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: raw is live and destroyed once.
            unsafe {
                sys::cuEventDestroy_v2(self.raw);
            }
        }
    }
}
