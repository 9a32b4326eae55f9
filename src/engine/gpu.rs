//! The GPU side of an endpoint: its device buffer, the pinned staging mirror when the plugin
//! cannot take CUDA memory, and the asynchronous work that completes receives.
//!
//! Device work is batched: everything queued during one pass of the progress loop (unpack jobs
//! for the receives that completed in that pass, staging copies, local copies) goes to the
//! stream as one launch or a few copies, followed by one event. A receive counts as delivered,
//! and its slot is released with `irecvConsumed`, only once the event of its batch has
//! completed; batches complete in order on the one stream, so a watermark suffices.

use nccl_net::abi::{self, NetUnpackMeta, UnpackNetDeviceHandle};
use tcpx_gpu::{Device, DeviceBuffer, Event, PinnedFlags, PinnedHostBuffer, Stream, UnpackJob};

/// How CUDA buffers reach the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaPath {
    /// Registered as `NCCL_PTR_CUDA` (the plugin moves device memory itself).
    Direct,
    /// The plugin takes host memory only: the engine copies through pinned host memory, as NCCL
    /// does for such plugins.
    Staged,
}

/// Where a receive comm's device-unpack metadata lives (`NCCL_NET_DEVICE_UNPACK`).
#[derive(Debug, Clone, Copy)]
pub struct UnpackRing {
    /// Host address of the host-mapped `netUnpackMeta` (UVA: the device alias is the same).
    pub meta: *const NetUnpackMeta,
    pub bounce: u64,
}

// SAFETY: the ring is plugin-owned, host-mapped memory that lives as long as the comm; it is only
// read from the thread that drives the comm.
unsafe impl Send for UnpackRing {}

impl UnpackRing {
    /// Reads the device handle `accept` filled: a device pointer to `unpackNetDeviceHandle`.
    pub fn from_handle(device: &Device, handle: &abi::DeviceHandleV7) -> Result<Option<UnpackRing>, String> {
        if handle.net_device_type != abi::NCCL_NET_DEVICE_UNPACK {
            return Ok(None);
        }
        if handle.net_device_version != abi::NCCL_NET_DEVICE_UNPACK_VERSION {
            return Err(format!(
                "the plugin's device-unpack version is {}, tcpx-perf implements {}",
                handle.net_device_version,
                abi::NCCL_NET_DEVICE_UNPACK_VERSION
            ));
        }
        if handle.handle.is_null() || handle.size < std::mem::size_of::<UnpackNetDeviceHandle>() {
            return Err("the plugin's device-unpack handle is NULL or too small".into());
        }
        let mut raw = [0u8; std::mem::size_of::<UnpackNetDeviceHandle>()];
        // SAFETY: the handle points at device memory of at least this size (checked above); the
        // copy is synchronised before `raw` is read.
        unsafe {
            device
                .stream()
                .memcpy_dtoh_async(raw.as_mut_ptr(), handle.handle as u64, raw.len())
        }
        .map_err(|e| e.to_string())?;
        device.stream().synchronize().map_err(|e| e.to_string())?;
        // SAFETY: `raw` holds the plain-data struct just copied.
        let h: UnpackNetDeviceHandle = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        if h.meta.is_null() || h.bounce_buf.is_null() {
            return Err("the plugin's device-unpack handle has no metadata ring or bounce buffer".into());
        }
        Ok(Some(UnpackRing {
            meta: h.meta,
            bounce: h.bounce_buf as u64,
        }))
    }

    /// Bytes the descriptors of the `k`-th receive of the comm (slot k % 16) describe.
    pub fn descriptor_bytes(&self, k: u64) -> u64 {
        let slot = (k % abi::UNPACK_QUEUE_DEPTH as u64) as usize;
        // SAFETY: `meta` is the plugin's mapped ring, valid while the comm lives; the plugin wrote
        // the slot's count and descriptors before `test` reported the receive done. Volatile:
        // the plugin rewrites the ring between receives.
        unsafe {
            let cnt = std::ptr::read_volatile(std::ptr::addr_of!((*self.meta).cnt[slot]));
            let cnt = (cnt as usize).min(abi::UNPACK_MAX_SLICE_PAGES);
            (0..cnt)
                .map(|i| {
                    u64::from(std::ptr::read_volatile(std::ptr::addr_of!(
                        (*self.meta).mem[slot][i].len
                    )))
                })
                .sum()
        }
    }

    /// The unpack job for the `k`-th receive of the comm (slot k % 16) into `dst`.
    pub fn job(&self, k: u64, dst: u64, dst_len: u64) -> Result<UnpackJob, String> {
        let slot = (k % abi::UNPACK_QUEUE_DEPTH as u64) as usize;
        // SAFETY: `meta` is the plugin's mapped ring, valid while the comm lives; the plugin wrote
        // `cnt[slot]` (with a release fence) before `test` reported the receive done.
        let cnt = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.meta).cnt[slot])) };
        // The bounce buffer's size is not part of the ABI; src_off is 32-bit, so 4 GiB bounds it.
        UnpackJob::from_meta_ring(self.meta as u64, slot, cnt, self.bounce, 1 << 32, dst, dst_len)
            .map_err(|e| e.to_string())
    }
}

/// Per-endpoint GPU state.
pub struct GpuState {
    pub device: Device,
    pub path: CudaPath,
    pub buffer: DeviceBuffer,
    pub staging: Option<PinnedHostBuffer>,
    stream: Stream,
    events: Vec<Event>,
    /// Batches issued / known complete (batch ids start at 1).
    issued: u64,
    done: u64,
    /// Unpack jobs and copies queued in the current pass.
    jobs: Vec<UnpackJob>,
    queued: bool,
}

impl GpuState {
    /// Opens the GPU, allocates the device buffer (and the staging mirror for `Staged`), and
    /// enough events for `max_batches` batches in flight.
    pub fn new(ordinal: usize, len: usize, path: CudaPath, max_batches: usize) -> Result<GpuState, String> {
        let device = Device::open(ordinal).map_err(|e| e.to_string())?;
        device.make_current().map_err(|e| e.to_string())?;
        let buffer = device.alloc(len.max(1)).map_err(|e| e.to_string())?;
        buffer
            .memset(0..buffer.len(), 0, device.stream())
            .map_err(|e| e.to_string())?;
        let staging = match path {
            CudaPath::Direct => None,
            CudaPath::Staged => Some(
                device
                    .alloc_pinned(len.max(1), PinnedFlags::PLAIN)
                    .map_err(|e| e.to_string())?,
            ),
        };
        let stream = device.new_stream().map_err(|e| e.to_string())?;
        let events = (0..max_batches.max(2))
            .map(|_| Event::new(&device, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        device.synchronize().map_err(|e| e.to_string())?;
        Ok(GpuState {
            device,
            path,
            buffer,
            staging,
            stream,
            events,
            issued: 0,
            done: 0,
            jobs: Vec::with_capacity(tcpx_gpu::MAX_JOBS_PER_LAUNCH),
            queued: false,
        })
    }

    /// The pointer the plugin sees: the device buffer, or the staging mirror.
    pub fn net_base(&mut self) -> *mut u8 {
        match self.staging.as_mut() {
            Some(s) => s.as_mut_ptr(),
            None => self.buffer.as_mut_ptr(),
        }
    }

    pub fn dev_base(&self) -> u64 {
        self.buffer.as_raw()
    }

    /// The id the work queued now will complete under.
    pub fn pending_batch(&self) -> u64 {
        self.issued + 1
    }

    /// Queues an unpack job (launched with the others at the end of the pass).
    pub fn queue_unpack(&mut self, job: UnpackJob) -> Result<(), String> {
        if self.jobs.len() == self.jobs.capacity() {
            self.flush_jobs()?;
        }
        self.jobs.push(job);
        self.queued = true;
        Ok(())
    }

    fn flush_jobs(&mut self) -> Result<(), String> {
        if !self.jobs.is_empty() {
            self.device
                .unpack(&self.jobs, &self.stream)
                .map_err(|e| e.to_string())?;
            self.jobs.clear();
        }
        Ok(())
    }

    /// Staging: device -> pinned mirror before a send.
    pub fn queue_stage_out(&mut self, off: u64, len: u64) -> Result<(), String> {
        let base = self.net_base();
        // SAFETY: the range lies inside both the device buffer and its mirror of the same size;
        // the mirror outlives the copy (it is only released after the stream is synchronised).
        unsafe {
            self.stream
                .memcpy_dtoh_async(base.add(off as usize), self.dev_base() + off, len as usize)
        }
        .map_err(|e| e.to_string())?;
        self.queued = true;
        Ok(())
    }

    /// Staging: pinned mirror -> device after a receive.
    pub fn queue_stage_in(&mut self, off: u64, len: u64) -> Result<(), String> {
        let base = self.net_base();
        // SAFETY: as above.
        unsafe {
            self.stream
                .memcpy_htod_async(self.dev_base() + off, base.add(off as usize), len as usize)
        }
        .map_err(|e| e.to_string())?;
        self.queued = true;
        Ok(())
    }

    /// A local copy inside the device buffer (fullmesh's own block).
    pub fn queue_local_copy(&mut self, src_off: u64, dst_off: u64, len: u64) -> Result<(), String> {
        // SAFETY: both ranges lie inside the device buffer and do not overlap.
        unsafe {
            self.stream
                .memcpy_dtod_async(self.dev_base() + dst_off, self.dev_base() + src_off, len as usize)
        }
        .map_err(|e| e.to_string())?;
        self.queued = true;
        Ok(())
    }

    /// Ends the pass: launches the queued unpack jobs and records the batch's event.
    pub fn end_pass(&mut self) -> Result<(), String> {
        if !self.queued {
            return Ok(());
        }
        self.flush_jobs()?;
        if self.issued - self.done >= self.events.len() as u64 {
            // Every event is in use: wait for the oldest batch rather than reuse its event.
            let oldest = &self.events[((self.done + 1) % self.events.len() as u64) as usize];
            oldest.synchronize().map_err(|e| e.to_string())?;
            self.done += 1;
        }
        self.issued += 1;
        let event = &self.events[(self.issued % self.events.len() as u64) as usize];
        event.record(&self.stream).map_err(|e| e.to_string())?;
        self.queued = false;
        Ok(())
    }

    /// Whether a batch was issued that is not known complete yet.
    pub fn busy(&self) -> bool {
        self.done < self.issued
    }

    /// The newest batch known complete (queries events in order; never blocks).
    pub fn completed(&mut self) -> Result<u64, String> {
        while self.done < self.issued {
            let event = &self.events[((self.done + 1) % self.events.len() as u64) as usize];
            if !event.query().map_err(|e| e.to_string())? {
                break;
            }
            self.done += 1;
        }
        Ok(self.done)
    }

    /// Descriptors the unpack kernel skipped (out of their job's buffers) since the last call;
    /// resets the count. Synchronous: called after an iteration, outside the clock.
    pub fn take_unpack_errors(&self) -> Result<u64, String> {
        self.device.unpack_errors(&self.stream).map_err(|e| e.to_string())
    }

    /// Fills `[off, off + len)` of the device buffer with `origin`'s pattern and waits.
    pub fn fill(&self, off: u64, len: u64, origin: u32, iter: u32, origin_off: u64) -> Result<(), String> {
        let range = off as usize..(off + len) as usize;
        self.device
            .fill(&self.buffer, range, origin, iter, origin_off, &self.stream)
            .map_err(|e| e.to_string())?;
        self.stream.synchronize().map_err(|e| e.to_string())
    }

    /// Counts wrong bytes in `[off, off + len)` of the device buffer.
    pub fn verify(&self, off: u64, len: u64, origin: u32, iter: u32, origin_off: u64) -> Result<u64, String> {
        let range = off as usize..(off + len) as usize;
        self.device
            .verify(&self.buffer, range, origin, iter, origin_off, &self.stream)
            .map_err(|e| e.to_string())
    }
}
