//! An opened GPU: primary context, a default stream, the kernel module, and the launchers for
//! `fill`, `verify` and `unpack`.

use crate::driver::{device_info, Ctx, DeviceInfo};
use crate::error::{check, GpuError};
use crate::memory::{DeviceBuffer, PinnedFlags, PinnedHostBuffer, Stream};
use crate::nvrtc::{arch_name, kernel_image};
use crate::unpack::{UnpackJob, MAX_JOBS_PER_LAUNCH};
use cudarc::driver::sys::{self, CUfunction, CUmodule};
use std::ffi::{c_void, CStr};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

const BLOCK: u32 = 256;
/// Warps per unpack block (= descriptors staged per block) when the caller does not choose:
/// 8 descriptors are one 128-byte line of the descriptor array, read by one load instruction,
/// which is what makes host-mapped descriptors cheap; on device-resident descriptors 8-warp
/// blocks measured within 3% of smaller ones even for a lone 512 KiB receive.
const AUTO_UNPACK_WARPS: u32 = 8;

/// What the driver says about the compiled unpack kernel ([`Device::unpack_kernel_info`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelInfo {
    /// Registers per thread.
    pub registers: i32,
    /// Local memory per thread (register spills), bytes.
    pub local_bytes: i32,
    /// Resident blocks per SM at the automatic block size (8 warps).
    pub blocks_per_sm: i32,
}

/// The job table passed by value to `tcpx_unpack` (mirrors `TcpxUnpackBatch`).
#[repr(C)]
struct UnpackBatch {
    jobs: [UnpackJob; MAX_JOBS_PER_LAUNCH],
}

/// State for `verify`: a device counter and a pinned word to read it back into.
struct VerifyState {
    counter: DeviceBuffer,
    host: PinnedHostBuffer,
}

/// The loaded kernel module (compiled by NVRTC on first use).
struct Kernels {
    module: CUmodule,
    f_fill: CUfunction,
    f_verify: CUfunction,
    f_unpack: CUfunction,
}

struct Inner {
    // Field order = drop order: buffers and stream before the module, the context last.
    verify: Mutex<VerifyState>,
    unpack_errors: DeviceBuffer,
    stream: Stream,
    /// Compiled and loaded on the first kernel use ([`Device::open`] forces it at open).
    kernels: OnceLock<Result<Kernels, GpuError>>,
    info: DeviceInfo,
    ctx: Arc<Ctx>,
}

// SAFETY: module/function handles are immutable driver objects usable from any thread once
// the context is current (every method binds it); the mutable verify state is in a Mutex.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(Ok(k)) = self.kernels.get() {
            if self.ctx.bind().is_ok() {
                // SAFETY: the module was loaded in this context and is unloaded once; launches
                // that used it were on streams synchronized or destroyed by now (cuModuleUnload
                // waits).
                unsafe {
                    sys::cuModuleUnload(k.module);
                }
            }
        }
    }
}

/// An opened GPU. Cheap to clone (shared); `Send + Sync`.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

fn function(module: CUmodule, name: &CStr) -> Result<CUfunction, GpuError> {
    let mut f: CUfunction = std::ptr::null_mut();
    // SAFETY: module is live; name is NUL-terminated; out-pointer is live.
    check(
        unsafe { sys::cuModuleGetFunction(&raw mut f, module, name.as_ptr()) },
        "cuModuleGetFunction",
    )?;
    Ok(f)
}

fn load_kernels(ctx: &Ctx, cc: (u32, u32)) -> Result<Kernels, GpuError> {
    let image = kernel_image(cc)?;
    ctx.bind()?;
    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: image is a complete CUBIN from NVRTC; the context is current.
    check(
        unsafe { sys::cuModuleLoadData(&raw mut module, image.as_ptr().cast()) },
        "cuModuleLoadData",
    )?;
    let funcs = (|| {
        Ok::<_, GpuError>((
            function(module, c"tcpx_fill")?,
            function(module, c"tcpx_verify")?,
            function(module, c"tcpx_unpack")?,
        ))
    })();
    match funcs {
        Ok((f_fill, f_verify, f_unpack)) => Ok(Kernels {
            module,
            f_fill,
            f_verify,
            f_unpack,
        }),
        Err(e) => {
            // SAFETY: module was just loaded and is unused.
            unsafe { sys::cuModuleUnload(module) };
            Err(e)
        }
    }
}

impl Device {
    /// Opens GPU `ordinal`: retains its primary context, creates a stream, and loads the
    /// kernels, compiled by NVRTC for the GPU's `sm_XY` once per process (later opens reuse
    /// the image).
    pub fn open(ordinal: usize) -> Result<Device, GpuError> {
        let dev = Self::open_lazy(ordinal)?;
        dev.kernels()?;
        Ok(dev)
    }

    /// Like [`open`](Self::open), but the kernels are compiled (NVRTC) and loaded only on the
    /// first kernel launch: for users that only need memory, streams and copies (a net plugin
    /// must not pay 100+ ms of NVRTC, nor require NVRTC at all).
    pub fn open_lazy(ordinal: usize) -> Result<Device, GpuError> {
        Self::with_ctx(Ctx::retain(ordinal)?)
    }

    /// The device of the context current on the calling thread (NCCL makes the GPU's primary
    /// context current with `cudaSetDevice` before it calls a plugin), GPU 0's primary context
    /// when none is current. Kernels are loaded lazily, as with [`open_lazy`](Self::open_lazy).
    ///
    /// A primary context's device is made once per process and kept (its context retained to
    /// the end, as TCPX keeps its per-GPU state): a plugin asks for it per comm, and a new one
    /// per comm (a stream, three buffers, a synchronize) queued every comm of every process on
    /// the driver's locks. A borrowed context's device is new each time (its creator may destroy
    /// the context).
    pub fn current() -> Result<Device, GpuError> {
        static OPENED: Mutex<Vec<Device>> = Mutex::new(Vec::new());
        let ctx = Ctx::current()?;
        if !ctx.owned {
            return Self::with_ctx(ctx);
        }
        let mut opened = OPENED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(dev) = opened.iter().find(|d| d.inner.ctx.raw == ctx.raw) {
            dev.make_current()?;
            return Ok(dev.clone());
        }
        let dev = Self::with_ctx(ctx)?;
        opened.push(dev.clone());
        Ok(dev)
    }

    fn with_ctx(ctx: Arc<Ctx>) -> Result<Device, GpuError> {
        let info = device_info(ctx.ordinal())?;
        ctx.bind()?;
        let stream = Stream::with_ctx(ctx.clone())?;
        let dev = Device {
            inner: Arc::new(Inner {
                verify: Mutex::new(VerifyState {
                    counter: DeviceBuffer::from_ctx(ctx.clone(), 8)?,
                    host: PinnedHostBuffer::from_ctx(ctx.clone(), 8, PinnedFlags::PLAIN)?,
                }),
                unpack_errors: DeviceBuffer::from_ctx(ctx.clone(), 8)?,
                stream,
                kernels: OnceLock::new(),
                info,
                ctx,
            }),
        };
        dev.inner.unpack_errors.memset(0..8, 0, &dev.inner.stream)?;
        dev.inner.stream.synchronize()?;
        Ok(dev)
    }

    fn kernels(&self) -> Result<&Kernels, GpuError> {
        self.inner
            .kernels
            .get_or_init(|| load_kernels(&self.inner.ctx, self.inner.info.compute_capability))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the kernels are loaded (always after [`open`](Self::open); after the first
    /// kernel use with [`open_lazy`](Self::open_lazy) / [`current`](Self::current)).
    pub fn kernels_loaded(&self) -> bool {
        matches!(self.inner.kernels.get(), Some(Ok(_)))
    }

    /// Address of this device's context (`CUcontext`), an identity for caches.
    pub fn context_id(&self) -> usize {
        self.inner.ctx.raw as usize
    }

    pub(crate) fn ctx(&self) -> &Arc<Ctx> {
        &self.inner.ctx
    }

    /// What this GPU is.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The CUDA ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.info.ordinal
    }

    /// The architecture the kernels were compiled for, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        arch_name(self.inner.info.compute_capability)
    }

    /// The device's default stream (non-blocking, created at open).
    pub fn stream(&self) -> &Stream {
        &self.inner.stream
    }

    /// A new stream on this device.
    pub fn new_stream(&self) -> Result<Stream, GpuError> {
        Stream::new(self)
    }

    /// Allocates `len` bytes of device memory (see [`DeviceBuffer::new`]).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer, GpuError> {
        DeviceBuffer::new(self, len)
    }

    /// Allocates `len` bytes of pinned host memory (see [`PinnedHostBuffer::new`]).
    pub fn alloc_pinned(&self, len: usize, flags: PinnedFlags) -> Result<PinnedHostBuffer, GpuError> {
        PinnedHostBuffer::new(self, len, flags)
    }

    /// Makes this GPU's primary context current on the calling thread. Net plugins (TCPX,
    /// tcpx-emu in unpack mode) take the GPU from the calling thread's context in listen,
    /// connect, accept and regMr, as NCCL's `cudaSetDevice` arranges; call this first.
    pub fn make_current(&self) -> Result<(), GpuError> {
        self.inner.ctx.bind()
    }

    /// Waits for all work on every stream of this device's context.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.inner.ctx.bind()?;
        // SAFETY: the context is current.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
    }

    fn grid_for(&self, words: u64) -> u32 {
        let max = u64::from(self.inner.info.sm_count.max(1)) * 8;
        words.div_ceil(u64::from(BLOCK)).clamp(1, max) as u32
    }

    fn launch(
        &self,
        f: CUfunction,
        grid: (u32, u32),
        block: u32,
        params: &mut [*mut c_void],
        stream: &Stream,
    ) -> Result<(), GpuError> {
        self.inner.ctx.bind()?;
        // SAFETY: f belongs to this device's module; params point at live values whose types
        // match the kernel signature (each caller documents its list); the launch copies
        // them before returning.
        check(
            unsafe {
                sys::cuLaunchKernel(
                    f,
                    grid.0,
                    grid.1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    stream.raw,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )
    }

    /// Fills `buf[range]` on the GPU with the pattern: byte `i` of the range =
    /// `pattern_byte(origin, iter, offset + i)` (the same bytes as `pattern::fill` on the host). Asynchronous.
    pub fn fill(
        &self,
        buf: &DeviceBuffer,
        range: Range<usize>,
        origin: u32,
        iter: u32,
        offset: u64,
        stream: &Stream,
    ) -> Result<(), GpuError> {
        let p = buf.raw_range(range.clone())?;
        // SAFETY: the range was checked against the live buffer.
        unsafe { self.fill_raw(p, range.len(), origin, iter, offset, stream) }
    }

    /// [`fill`](Self::fill) on a raw device address (e.g. memory a plugin or NCCL allocated).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be device memory of this GPU, valid until the kernel has run.
    pub unsafe fn fill_raw(
        &self,
        ptr: u64,
        len: usize,
        origin: u32,
        iter: u32,
        offset: u64,
        stream: &Stream,
    ) -> Result<(), GpuError> {
        check_offset(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let (mut p, mut l, mut o, mut i, mut off) = (ptr, len as u64, origin, iter, offset);
        let words = (offset + len as u64 - 1) / 8 - offset / 8 + 1;
        // Kernel: tcpx_fill(u8* p, u64 len, u32 origin, u32 iter, u64 offset)
        let mut params: [*mut c_void; 5] = [
            (&raw mut p).cast(),
            (&raw mut l).cast(),
            (&raw mut o).cast(),
            (&raw mut i).cast(),
            (&raw mut off).cast(),
        ];
        self.launch(
            self.kernels()?.f_fill,
            (self.grid_for(words), 1),
            BLOCK,
            &mut params,
            stream,
        )
    }

    /// Counts the bytes of `buf[range]` that differ from the pattern (0 = intact). Runs on
    /// `stream` and waits for the result.
    pub fn verify(
        &self,
        buf: &DeviceBuffer,
        range: Range<usize>,
        origin: u32,
        iter: u32,
        offset: u64,
        stream: &Stream,
    ) -> Result<u64, GpuError> {
        let p = buf.raw_range(range.clone())?;
        // SAFETY: the range was checked against the live buffer.
        unsafe { self.verify_raw(p, range.len(), origin, iter, offset, stream) }
    }

    /// [`verify`](Self::verify) on a raw device address.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be device memory of this GPU, valid until this call returns.
    pub unsafe fn verify_raw(
        &self,
        ptr: u64,
        len: usize,
        origin: u32,
        iter: u32,
        offset: u64,
        stream: &Stream,
    ) -> Result<u64, GpuError> {
        check_offset(offset, len)?;
        let mut st = self
            .inner
            .verify
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.counter.memset(0..8, 0, stream)?;
        let words = if len == 0 {
            0
        } else {
            (offset + len as u64 - 1) / 8 - offset / 8 + 1
        };
        let (mut p, mut l, mut o, mut i, mut off, mut c) = (ptr, len as u64, origin, iter, offset, st.counter.as_raw());
        // Kernel: tcpx_verify(const u8* p, u64 len, u32 origin, u32 iter, u64 offset, u64* wrong)
        let mut params: [*mut c_void; 6] = [
            (&raw mut p).cast(),
            (&raw mut l).cast(),
            (&raw mut o).cast(),
            (&raw mut i).cast(),
            (&raw mut off).cast(),
            (&raw mut c).cast(),
        ];
        self.launch(
            self.kernels()?.f_verify,
            (self.grid_for(words), 1),
            BLOCK,
            &mut params,
            stream,
        )?;
        let dst = st.host.as_mut_ptr();
        // SAFETY: the pinned word is ours (the lock is held) and is read only after the sync.
        unsafe { stream.memcpy_dtoh_async(dst, st.counter.as_raw(), 8)? };
        stream.synchronize()?;
        let mut w = [0u8; 8];
        w.copy_from_slice(st.host.as_slice());
        Ok(u64::from_le_bytes(w))
    }

    /// Enqueues the unpack of every job on `stream` (asynchronous; record an event after it
    /// and call `irecvConsumed` only once the event completed).
    ///
    /// One launch handles up to [`MAX_JOBS_PER_LAUNCH`] jobs; longer lists take several
    /// launches. No allocation: the job table is built on the stack and travels as the kernel
    /// parameter. Each job is validated on the host first ([`UnpackJob::validate`]);
    /// descriptors pointing outside a job's buffers are skipped by the kernel and counted
    /// (see [`unpack_errors`](Self::unpack_errors)).
    ///
    /// The addresses in the jobs must be device-accessible memory that stays valid until the
    /// stream has passed the launch (the same contract as the plugin's own buffers).
    ///
    /// Block size: one warp copies one fragment (16-byte loads and stores at any alignment);
    /// a block of 8 warps takes 8 consecutive descriptors of a job, loaded with one coalesced
    /// read (one PCIe round trip per block when they are in the host-mapped `netUnpackMeta`
    /// ring) before its warps copy.
    ///
    /// The kernel reads the bounce buffer in aligned 16-byte words: it may read up to 15
    /// bytes before or after a fragment's source bytes, never outside the 16-byte-aligned
    /// hull of `[bounce, bounce + bounce_len)` (keep bounce buffers 16-byte aligned and sized,
    /// as whole-page buffers are, so that this stays inside the allocation).
    pub fn unpack(&self, jobs: &[UnpackJob], stream: &Stream) -> Result<(), GpuError> {
        self.unpack_with_block(jobs, stream, 0)
    }

    /// [`unpack`](Self::unpack) with a fixed block size (`threads_per_block` a multiple of 32
    /// up to 256; each block takes as many descriptors as it has warps), or the automatic
    /// choice with 0. For benchmarks and tuning.
    pub fn unpack_with_block(
        &self,
        jobs: &[UnpackJob],
        stream: &Stream,
        threads_per_block: u32,
    ) -> Result<(), GpuError> {
        self.unpack_tuned(jobs, stream, threads_per_block, 0)
    }

    /// [`unpack_with_block`](Self::unpack_with_block) with at most `max_blocks_per_job`
    /// blocks per job (0: one block per chunk of descriptors). Fewer blocks loop over the
    /// chunks, each loading its next chunk's descriptors before copying the current one, which
    /// hides the read of host-mapped descriptors behind copies. For benchmarks and tuning.
    pub fn unpack_tuned(
        &self,
        jobs: &[UnpackJob],
        stream: &Stream,
        threads_per_block: u32,
        max_blocks_per_job: u32,
    ) -> Result<(), GpuError> {
        if !threads_per_block.is_multiple_of(32) || threads_per_block > BLOCK {
            return Err(GpuError::invalid(format!(
                "unpack block of {threads_per_block} threads: use 0 (automatic) or a multiple of 32 up to {BLOCK}"
            )));
        }
        for j in jobs {
            j.validate()?;
        }
        let mut batch = UnpackBatch {
            jobs: [UnpackJob::default(); MAX_JOBS_PER_LAUNCH],
        };
        for chunk in jobs.chunks(MAX_JOBS_PER_LAUNCH) {
            batch.jobs[..chunk.len()].copy_from_slice(chunk);
            let max_cnt = chunk.iter().map(|j| j.cnt).max().unwrap_or(0);
            if max_cnt == 0 {
                continue;
            }
            let mut n = chunk.len() as u32;
            let mut errs = self.inner.unpack_errors.as_raw();
            // One warp per fragment and one descriptor per warp in each chunk: a block stages
            // its `warps` descriptors with one coalesced read (see kernels/unpack.cu).
            let warps = if threads_per_block == 0 {
                AUTO_UNPACK_WARPS
            } else {
                threads_per_block / 32
            };
            let mut per_block = warps;
            let mut grid_x = max_cnt.div_ceil(u64::from(per_block)) as u32;
            if max_blocks_per_job > 0 {
                grid_x = grid_x.min(max_blocks_per_job);
            }
            // Kernel: tcpx_unpack(const TcpxUnpackBatch batch, u32 njobs, u32 per_block, u64* errors)
            let mut params: [*mut c_void; 4] = [
                (&raw mut batch).cast(),
                (&raw mut n).cast(),
                (&raw mut per_block).cast(),
                (&raw mut errs).cast(),
            ];
            let block = warps * 32;
            self.launch(self.kernels()?.f_unpack, (grid_x, n), block, &mut params, stream)?;
        }
        Ok(())
    }

    /// Register use, spills and occupancy of the unpack kernel as compiled for this GPU (for
    /// benchmark reports: the kernel is tuned for 24 resident warps per SM on sm_90).
    pub fn unpack_kernel_info(&self) -> Result<KernelInfo, GpuError> {
        let f = self.kernels()?.f_unpack;
        self.inner.ctx.bind()?;
        let attr = |a: sys::CUfunction_attribute| -> Result<i32, GpuError> {
            let mut v = 0;
            // SAFETY: f is a live function of this context's module; the out-pointer is live.
            check(
                unsafe { sys::cuFuncGetAttribute(&raw mut v, a, f) },
                "cuFuncGetAttribute",
            )?;
            Ok(v)
        };
        let mut blocks = 0;
        // SAFETY: as above.
        check(
            unsafe {
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&raw mut blocks, f, (AUTO_UNPACK_WARPS * 32) as i32, 0)
            },
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )?;
        Ok(KernelInfo {
            registers: attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            local_bytes: attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            blocks_per_sm: blocks,
        })
    }

    /// Number of descriptors the unpack kernel skipped because they pointed outside their
    /// job's buffers, since the last call; resets the count. Synchronizes `stream`.
    pub fn unpack_errors(&self, stream: &Stream) -> Result<u64, GpuError> {
        let mut w = [0u8; 8];
        self.inner.unpack_errors.copy_to_host(0, &mut w, stream)?;
        self.inner.unpack_errors.memset(0..8, 0, stream)?;
        stream.synchronize()?;
        Ok(u64::from_le_bytes(w))
    }
}

fn check_offset(offset: u64, len: usize) -> Result<(), GpuError> {
    if offset.checked_add(len as u64).is_none() {
        return Err(GpuError::invalid(format!(
            "pattern offset {offset} + length {len} overflows 64 bits: use a smaller absolute offset"
        )));
    }
    Ok(())
}
