//! Socket helper threads: one per data socket, moving whole chunks with blocking system calls.
//!
//! TCPX runs `NCCL_SOCKET_NTHREADS` helpers that each multiplex `NCCL_NSOCKS_PERTHREAD` sockets.
//! tcpx-emu uses one thread per data socket instead: a blocking `send`/`recv(MSG_WAITALL)` of a
//! whole chunk straight from/into the caller's buffer is the cheapest way to move host memory over
//! kernel TCP (one system call per chunk, no staging copy, no spinning), and with at most 8 sockets
//! per comm the thread count stays small.
//!
//! Striping: every request is cut into `chunk_size` pieces; chunk `j` of a request whose first
//! chunk has the comm-wide running number `first_chunk` goes to socket
//! `(first_chunk + j) % nsocks`. Both sides compute the same assignment from the same
//! `(size, chunk_size, nsocks)` sequence, and each socket is a FIFO byte stream, so chunks need no
//! header: only the per-request control message on the ctrl socket (see [`crate::comm`]).
//!
//! Hand-off: the caller publishes [`Job`]s into a 16-entry ring under a mutex; each worker keeps its
//! own cursor into it, so one publication wakes all workers at most once (and not at all when none
//! is sleeping). Workers report progress by subtracting the bytes they moved from the request's
//! `pending` counter; `test` sees 0 and completes the request with no lock held by workers.
//!
//! Unpack mode (`Job::cuda`): a CUDA send chunk goes device -> the lane's pinned staging ->
//! `send()`; a CUDA receive chunk is scattered by one `recvmsg` into the lane's staging at its
//! runs' window positions ([`crate::scramble`]) and copied to the bounce pool with one async copy,
//! synchronized before the bytes count as arrived.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::NetError;
use crate::fault::{Fault, FaultKind, SLOW_CHUNK_DELAY};
use crate::gpu::CommGpu;
use crate::scramble::Plan;

/// Outstanding requests per comm (TCPX's `MAX_REQUESTS`).
pub const MAX_REQUESTS: usize = 16;

/// Which way data flows on a comm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Send,
    Recv,
}

/// One request as the workers see it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Job {
    pub seq: u64,
    /// The caller's buffer (an address: jobs cross threads).
    pub ptr: usize,
    /// Bytes to move (for receives: the size the sender announced).
    pub len: usize,
    /// Comm-wide running number of this request's first chunk.
    pub first_chunk: u64,
    /// The caller's buffer is device memory (unpack mode): sends are staged through pinned
    /// memory, receives land in the bounce buffer per the slot's [`Plan`].
    pub cuda: bool,
}

struct Ring {
    jobs: [Job; MAX_REQUESTS],
    /// Jobs published so far (sequence number of the next one).
    published: u64,
    closing: bool,
    sleepers: u32,
}

/// State shared by a comm and its workers.
pub struct Shared {
    pub dir: Dir,
    pub peer: SocketAddr,
    pub socks: Vec<TcpStream>,
    pub chunk_size: usize,
    pub fault: Option<Fault>,
    /// GPU resources (unpack mode only).
    pub gpu: Option<CommGpu>,
    /// Per receive slot: where each page of its CUDA receive lands (unpack receive comms only).
    pub plans: Vec<Mutex<Plan>>,
    /// Bytes not yet moved, per ring slot.
    pub pending: [AtomicUsize; MAX_REQUESTS],
    ring: Mutex<Ring>,
    cv: Condvar,
    failed: AtomicBool,
    error: Mutex<Option<NetError>>,
}

impl Shared {
    pub fn new(
        dir: Dir,
        peer: SocketAddr,
        socks: Vec<TcpStream>,
        chunk_size: usize,
        fault: Option<Fault>,
        gpu: Option<CommGpu>,
    ) -> Self {
        let plans = match gpu.as_ref().and_then(|g| g.recv.as_ref()) {
            Some(r) => (0..MAX_REQUESTS)
                .map(|_| Mutex::new(Plan::with_capacity(&r.geo)))
                .collect(),
            None => Vec::new(),
        };
        Self {
            dir,
            peer,
            socks,
            chunk_size,
            fault,
            gpu,
            plans,
            pending: std::array::from_fn(|_| AtomicUsize::new(0)),
            ring: Mutex::new(Ring {
                jobs: [Job::default(); MAX_REQUESTS],
                published: 0,
                closing: false,
                sleepers: 0,
            }),
            cv: Condvar::new(),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A worker never panics while holding the lock, but stay usable if one did.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of chunks a request of `len` bytes is cut into.
    pub fn chunks(&self, len: usize) -> u64 {
        len.div_ceil(self.chunk_size) as u64
    }

    /// Hands a job to the workers. Its `pending` counter must already hold `job.len`.
    pub fn publish(&self, job: Job) {
        let wake = {
            let mut ring = self.lock();
            ring.jobs[job.seq as usize % MAX_REQUESTS] = job;
            ring.published = job.seq + 1;
            ring.sleepers > 0
        };
        if wake {
            self.cv.notify_all();
        }
    }

    /// Records the comm's first error; later ones are dropped (they are usually consequences).
    pub fn set_error(&self, err: NetError) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(err);
            self.failed.store(true, Ordering::Release);
        }
    }

    /// The comm's sticky error, if any.
    pub fn error(&self) -> Option<NetError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// Stops the workers: flags closing, wakes sleepers, and shuts the data sockets down so that
    /// workers blocked in send/recv return.
    pub fn begin_close(&self) {
        self.lock().closing = true;
        self.cv.notify_all();
        for s in &self.socks {
            // SAFETY: shutdown on a descriptor we own; errors (already shut down) are irrelevant.
            unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }

    /// The next job for the worker whose cursor is `next`, or None once the comm is closing.
    fn next_job(&self, next: &mut u64) -> Option<Job> {
        let mut ring = self.lock();
        loop {
            if ring.closing {
                return None;
            }
            if *next < ring.published {
                let seq = *next;
                let job = ring.jobs[seq as usize % MAX_REQUESTS];
                *next += 1;
                // A slot is recycled only once every byte of its request moved, so if request
                // `seq` was already replaced before this worker looked, none of it was ours.
                if job.seq == seq {
                    return Some(job);
                }
                continue;
            }
            ring.sleepers += 1;
            ring = self.cv.wait(ring).unwrap_or_else(|e| e.into_inner());
            ring.sleepers -= 1;
        }
    }

    /// Blocks until the comm closes (the `stall` fault).
    fn wait_closing(&self) {
        let mut ring = self.lock();
        while !ring.closing {
            ring.sleepers += 1;
            ring = self.cv.wait(ring).unwrap_or_else(|e| e.into_inner());
            ring.sleepers -= 1;
        }
    }
}

/// Body of the helper thread for data socket `idx`.
pub fn run(shared: Arc<Shared>, idx: usize) {
    let nsocks = shared.socks.len() as u64;
    let fd = shared.socks[idx].as_raw_fd();
    let cs = shared.chunk_size;
    let mut next = 0u64;
    // recvmsg's scatter list (one entry per run of a chunk), reused: no allocation per chunk.
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(if shared.gpu.is_some() { 1024 } else { 0 });
    while let Some(job) = shared.next_job(&mut next) {
        if shared.dir == Dir::Send && Fault::hits(shared.fault, FaultKind::Stall, job.seq) {
            shared.wait_closing();
            return;
        }
        let nchunks = shared.chunks(job.len);
        // First chunk j of this job with (first_chunk + j) % nsocks == idx, then every nsocks-th.
        let mut j = (idx as u64 + nsocks - job.first_chunk % nsocks) % nsocks;
        while j < nchunks {
            let off = j as usize * cs;
            let len = cs.min(job.len - off);
            // SAFETY: the job's buffer stays valid until the request completes or the comm
            // closes (the caller's contract), and `off + len <= job.len`.
            let res = unsafe {
                match (shared.dir, job.cuda) {
                    (Dir::Send, false) => send_all(fd, (job.ptr + off) as *const u8, len),
                    (Dir::Recv, false) => recv_all(fd, (job.ptr + off) as *mut u8, len),
                    (Dir::Send, true) => send_cuda(&shared, idx, fd, (job.ptr + off) as u64, len),
                    (Dir::Recv, true) => recv_unpack(&shared, idx, fd, job.seq, j as usize, len, &mut iov),
                }
            };
            if let Err(e) = res {
                if !shared.is_closing() {
                    let what = match shared.dir {
                        Dir::Send => "sending to",
                        Dir::Recv => "receiving from",
                    };
                    shared.set_error(NetError::from_io(
                        &e,
                        format_args!(
                            "data socket {idx} {what} peer {}: request {} chunk {j} ({len} bytes at offset {off})",
                            shared.peer, job.seq
                        ),
                    ));
                }
                return;
            }
            shared.pending[job.seq as usize % MAX_REQUESTS].fetch_sub(len, Ordering::Release);
            if Fault::hits(shared.fault, FaultKind::Slow, job.seq) {
                std::thread::sleep(SLOW_CHUNK_DELAY);
            }
            j += nsocks;
        }
    }
}

fn gpu_io(what: &str, e: tcpx_gpu::GpuError) -> std::io::Error {
    std::io::Error::other(format!("device unpack: {what}: {e}"))
}

/// Sends `len` bytes of device memory at `src`: device -> pinned staging (the lane's buffer,
/// in pieces of its size) -> `send()`.
///
/// # Safety
/// `src..src+len` must be device memory of the comm's context, valid for the call.
unsafe fn send_cuda(shared: &Shared, idx: usize, fd: i32, src: u64, len: usize) -> std::io::Result<()> {
    let gpu = shared
        .gpu
        .as_ref()
        .ok_or_else(|| std::io::Error::other("CUDA send on a comm without GPU resources"))?;
    let mut lane = gpu.lanes[idx].lock().unwrap_or_else(|e| e.into_inner());
    let lane = &mut *lane;
    let cap = lane.staging.len();
    let mut off = 0;
    while off < len {
        let n = cap.min(len - off);
        let p = lane.staging.as_mut_ptr();
        // SAFETY: `p` is our staging buffer of `cap >= n` bytes, untouched by the host until
        // the synchronize; the source range is the caller's device buffer.
        unsafe { lane.stream.memcpy_dtoh_async(p, src + off as u64, n) }.map_err(|e| gpu_io("copy to staging", e))?;
        lane.stream.synchronize().map_err(|e| gpu_io("copy to staging", e))?;
        // SAFETY: `p..p+n` holds the staged bytes.
        unsafe { send_all(fd, p, n) }?;
        off += n;
    }
    Ok(())
}

/// Receives chunk `j` (`len` bytes) of receive `seq` into the bounce buffer: one `recvmsg`
/// scatters the chunk's runs into the lane's staging buffer at their window positions, one async
/// copy moves the window to the slot's bounce region, and the stream is synchronized before the
/// caller may count the bytes as arrived.
fn recv_unpack(
    shared: &Shared,
    idx: usize,
    fd: i32,
    seq: u64,
    j: usize,
    len: usize,
    iov: &mut Vec<libc::iovec>,
) -> std::io::Result<()> {
    let (Some(gpu), Some(ru)) = (shared.gpu.as_ref(), shared.gpu.as_ref().and_then(|g| g.recv.as_ref())) else {
        return Err(std::io::Error::other("CUDA receive on a comm without a bounce buffer"));
    };
    let slot = seq as usize % MAX_REQUESTS;
    let mut lane = gpu.lanes[idx].lock().unwrap_or_else(|e| e.into_inner());
    let lane = &mut *lane;
    let base = lane.staging.as_mut_ptr();
    let (window, copy, total) = {
        let plan = shared.plans[slot].lock().unwrap_or_else(|e| e.into_inner());
        let (window, runs, copy) = plan.chunk(j);
        iov.clear();
        let mut total = 0;
        for r in runs {
            iov.push(libc::iovec {
                // SAFETY: runs of a chunk lie inside its window, and staging holds one window.
                iov_base: unsafe { base.add(r.bounce_off as usize - window) }.cast(),
                iov_len: r.len as usize,
            });
            total += r.len as usize;
        }
        (window, copy, total)
    };
    if total != len || copy > lane.staging.len() {
        return Err(std::io::Error::other(format!(
            "internal: chunk {j} of request {seq} planned {total} bytes (window copy {copy}), expected {len}"
        )));
    }
    // SAFETY: every iovec points into our staging buffer.
    unsafe { recv_iov_all(fd, iov) }?;
    let dst = ru.bounce_base() + (ru.slot_off(slot) + window) as u64;
    // SAFETY: the window lies inside the slot's region of the live bounce buffer; staging is not
    // touched until the synchronize below.
    unsafe { lane.stream.memcpy_htod_async(dst, base, copy) }.map_err(|e| gpu_io("copy to bounce buffer", e))?;
    lane.stream
        .synchronize()
        .map_err(|e| gpu_io("copy to bounce buffer", e))
}

/// Receives exactly the bytes the iovecs describe (recvmsg with MSG_WAITALL, resumed after
/// partial reads); EOF first is `UnexpectedEof`.
///
/// # Safety
/// Every iovec must describe writable memory for the duration of the call.
unsafe fn recv_iov_all(fd: i32, iov: &mut [libc::iovec]) -> std::io::Result<()> {
    let mut first = 0;
    while first < iov.len() && iov[first].iov_len == 0 {
        first += 1;
    }
    while first < iov.len() {
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov[first..].as_mut_ptr();
        msg.msg_iovlen = (iov.len() - first) as _;
        // SAFETY: the iovecs describe writable memory (the caller's contract).
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_WAITALL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by peer",
            ));
        }
        let mut n = n as usize;
        while n > 0 {
            let l = iov[first].iov_len;
            if n >= l {
                n -= l;
                first += 1;
            } else {
                // SAFETY: advancing inside the same iovec.
                iov[first].iov_base = unsafe { iov[first].iov_base.cast::<u8>().add(n) }.cast();
                iov[first].iov_len -= n;
                n = 0;
            }
        }
        while first < iov.len() && iov[first].iov_len == 0 {
            first += 1;
        }
    }
    Ok(())
}

/// Sends exactly `len` bytes (MSG_NOSIGNAL: a dead peer is EPIPE, never SIGPIPE).
///
/// # Safety
/// `ptr..ptr+len` must be readable for the duration of the call.
pub unsafe fn send_all(fd: i32, mut ptr: *const u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        // SAFETY: the caller guarantees `ptr..ptr+len` is readable for the request's lifetime.
        let n = unsafe { libc::send(fd, ptr.cast(), len, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let n = n as usize;
        // SAFETY: n <= len, so the pointer stays within the buffer.
        ptr = unsafe { ptr.add(n) };
        len -= n;
    }
    Ok(())
}

/// Receives exactly `len` bytes; EOF before that is `UnexpectedEof`.
///
/// # Safety
/// `ptr..ptr+len` must be writable for the duration of the call.
unsafe fn recv_all(fd: i32, mut ptr: *mut u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        // SAFETY: the caller guarantees `ptr..ptr+len` is writable for the request's lifetime.
        let n = unsafe { libc::recv(fd, ptr.cast(), len, libc::MSG_WAITALL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by peer",
            ));
        }
        let n = n as usize;
        // SAFETY: n <= len.
        ptr = unsafe { ptr.add(n) };
        len -= n;
    }
    Ok(())
}
