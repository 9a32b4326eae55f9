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
//! whose completion (an event) comes before the bytes count as arrived.
//!
//! Staging copies overlap socket I/O: each lane has two pinned buffers, each with an event
//! recorded after its last copy ([`crate::gpu::Lane`]).
//! * Receive ([`RecvPipe`]): chunk `i+1` is received into one buffer while the HtoD copy of chunk
//!   `i` out of the other runs; chunk `i` is counted once its event completed (checked before
//!   each blocking receive, waited for when the socket has nothing to read, before the thread
//!   sleeps, and when it exits).
//! * Send ([`SendPipe`]): before chunk `i` is sent, the DtoH copy of the thread's next chunk
//!   ([`Chunks::peek`]: same job, or the next job if already published) is started into the other
//!   buffer; a chunk is sent only after its own event completed.
//!
//! Zero-copy sends (`TCPXEMU_ZEROCOPY=staged|all`, flagged in the hello so that the receiver
//! knows): TCPX
//! sends with `MSG_ZEROCOPY` and completes a send once the kernel released its pages. Over
//! loopback that saves nothing (the kernel copies zero-copy pages when it delivers them to a
//! local socket), so tcpx-emu hands the pages over with `vmsplice` + `splice` instead, which
//! loopback delivers by reference: the receiver's copy out of the socket is the only CPU copy.
//! The pages stay referenced until the receiver has read them, so the receiver writes one
//! acknowledgement byte per chunk back on the same data socket once its read finished, and the
//! sender ([`Tx`]) counts a chunk as moved, and reuses its staging buffer, only after that byte
//! arrived. Without zero-copy, `send` copies the chunk into the socket and it counts at once.
//!
//! The buffer rotation and the chunk cursor are CPU-only and unit-tested against models.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::config::ZeroCopy;
use crate::error::NetError;
use crate::fault::{Fault, FaultKind, SLOW_CHUNK_DELAY};
use crate::gpu::{CommGpu, Lane, STAGING_BUFS};
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

/// Where a comm's helper threads spent their time, summed over the threads (each adds its own
/// totals when it exits); logged at INFO when the comm closes, to tell a starved pipeline (idle:
/// no request posted) from a saturated one (socket I/O) or a slow device copy.
#[derive(Debug, Default)]
pub struct Timing {
    /// From each thread's first chunk to its exit.
    pub active_ns: AtomicU64,
    /// Asleep, waiting for a request to be posted.
    pub idle_ns: AtomicU64,
    /// Moving chunks: socket I/O plus staging copies.
    pub busy_ns: AtomicU64,
    /// Part of `busy_ns` spent waiting for a staging copy's event.
    pub copy_wait_ns: AtomicU64,
    pub bytes: AtomicU64,
    /// Chunks handed to the socket by reference (zero-copy sends).
    pub spliced: AtomicU64,
}

impl Timing {
    /// One line: per-thread averages as percentages of the active time, and the rate while busy.
    pub fn summary(&self, threads: usize) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let active = get(&self.active_ns).max(1.0);
        let pct = |a: &AtomicU64| 100.0 * get(a) / active;
        let spliced = match self.spliced.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!("; {n} chunks sent zero-copy"),
        };
        format!(
            "{} threads moved {} bytes; of their active time {:.0}% moving chunks (including {:.0}% waiting for staging copies), {:.0}% idle; {:.2} GB/s per thread while moving{spliced}",
            threads,
            get(&self.bytes),
            pct(&self.busy_ns),
            pct(&self.copy_wait_ns),
            pct(&self.idle_ns),
            get(&self.bytes) / get(&self.busy_ns).max(1.0)
        )
    }
}

/// State shared by a comm and its workers.
pub struct Shared {
    pub dir: Dir,
    pub peer: SocketAddr,
    pub socks: Vec<TcpStream>,
    pub chunk_size: usize,
    /// Zero-copy sends: which chunks the send side splices; unless `Off`, the receive side
    /// acknowledges every chunk.
    pub zerocopy: ZeroCopy,
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
    pub timing: Timing,
}

impl Shared {
    pub fn new(
        dir: Dir,
        peer: SocketAddr,
        socks: Vec<TcpStream>,
        chunk_size: usize,
        zerocopy: ZeroCopy,
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
            zerocopy,
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
            timing: Timing::default(),
        }
    }

    /// Whether every chunk on this comm is acknowledged by the receiver (zero-copy sends).
    pub fn acks(&self) -> bool {
        self.zerocopy != ZeroCopy::Off
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A worker never panics while holding the lock, but stay usable if one did.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of chunks a request of `len` bytes is cut into.
    pub fn chunks(&self, len: usize) -> u64 {
        len.div_ceil(self.chunk_size) as u64
    }

    /// Hands jobs (consecutive, in sequence order) to the workers under one lock: at most one
    /// wake-up per call. Their `pending` counters must already hold their lengths.
    pub fn publish(&self, jobs: &[Job]) {
        let Some(last) = jobs.last() else {
            return;
        };
        let wake = {
            let mut ring = self.lock();
            for job in jobs {
                ring.jobs[job.seq as usize % MAX_REQUESTS] = *job;
            }
            ring.published = last.seq + 1;
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

    /// The next job for the worker whose cursor is `next`: `Closed` once the comm is closing,
    /// `Empty` when none is published yet and `block` is false (else it waits for one).
    fn fetch_job(&self, next: &mut u64, block: bool) -> Fetch {
        let mut ring = self.lock();
        loop {
            if ring.closing {
                return Fetch::Closed;
            }
            if *next < ring.published {
                let seq = *next;
                let job = ring.jobs[seq as usize % MAX_REQUESTS];
                *next += 1;
                // A slot is recycled only once every byte of its request moved, so if request
                // `seq` was already replaced before this worker looked, none of it was ours.
                if job.seq == seq {
                    return Fetch::Job(job);
                }
                continue;
            }
            if !block {
                return Fetch::Empty;
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

/// What [`Shared::fetch_job`] found.
#[derive(Debug, Clone, Copy)]
pub enum Fetch {
    Job(Job),
    /// Nothing published yet (non-blocking fetches only).
    Empty,
    Closed,
}

/// One chunk of a job, as a helper thread moves it.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub job: Job,
    /// Index of the chunk in its job.
    pub j: u64,
    /// Offset and length of the chunk in the job's buffer.
    pub off: usize,
    pub len: usize,
}

impl Chunk {
    fn slot(&self) -> usize {
        self.job.seq as usize % MAX_REQUESTS
    }

    /// Same request, same chunk.
    pub fn same(&self, other: &Chunk) -> bool {
        self.job.seq == other.job.seq && self.j == other.j
    }
}

/// What [`Chunks::next`] found.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    Chunk(Chunk),
    /// No chunk available yet (non-blocking calls only).
    Empty,
    Closed,
    /// The next job is hit by the `stall` fault.
    Stall,
}

/// A helper thread's cursor over its chunks, in job order: chunk `j` of a job whose first chunk
/// has the comm-wide number `first_chunk` belongs to socket `(first_chunk + j) % nsocks`.
/// [`peek`](Self::peek) looks one chunk ahead without blocking, fetching at most one job early
/// (kept in `ahead`, so nothing is skipped).
#[derive(Debug)]
pub struct Chunks {
    idx: u64,
    nsocks: u64,
    cs: usize,
    cur: Option<Job>,
    /// The next chunk index of `cur` to hand out.
    j: u64,
    ahead: Option<Job>,
}

impl Chunks {
    pub fn new(idx: usize, nsocks: usize, chunk_size: usize) -> Self {
        Self {
            idx: idx as u64,
            nsocks: nsocks as u64,
            cs: chunk_size,
            cur: None,
            j: 0,
            ahead: None,
        }
    }

    /// First chunk `j` of `job` with `(first_chunk + j) % nsocks == idx` (then every nsocks-th).
    fn first(&self, job: &Job) -> u64 {
        (self.idx + self.nsocks - job.first_chunk % self.nsocks) % self.nsocks
    }

    fn get(&self, job: &Job, j: u64) -> Option<Chunk> {
        if j >= job.len.div_ceil(self.cs) as u64 {
            return None;
        }
        let off = j as usize * self.cs;
        Some(Chunk {
            job: *job,
            j,
            off,
            len: self.cs.min(job.len - off),
        })
    }

    /// The next chunk; `fetch(block)` supplies jobs. Entering a job for which `stall(seq)` holds
    /// returns [`Step::Stall`].
    pub fn next(&mut self, fetch: &mut impl FnMut(bool) -> Fetch, block: bool, stall: &impl Fn(u64) -> bool) -> Step {
        loop {
            if let Some(job) = self.cur {
                if let Some(c) = self.get(&job, self.j) {
                    self.j += self.nsocks;
                    return Step::Chunk(c);
                }
                self.cur = None;
            }
            let job = match self.ahead.take() {
                Some(job) => job,
                None => match fetch(block) {
                    Fetch::Job(job) => job,
                    Fetch::Empty => return Step::Empty,
                    Fetch::Closed => return Step::Closed,
                },
            };
            if stall(job.seq) {
                return Step::Stall;
            }
            self.j = self.first(&job);
            self.cur = Some(job);
        }
    }

    /// The chunk the next [`next`](Self::next) call will return, if it is known without blocking:
    /// in the current job, or in the first already published job with a chunk for this socket
    /// (None if a stalled job comes first). Jobs without a chunk for this socket are consumed
    /// here, exactly as `next` would skip them; the job holding the answer is kept in `ahead`.
    pub fn peek(&mut self, fetch: &mut impl FnMut(bool) -> Fetch, stall: &impl Fn(u64) -> bool) -> Option<Chunk> {
        if let Some(job) = self.cur {
            if let Some(c) = self.get(&job, self.j) {
                return Some(c);
            }
        }
        loop {
            if self.ahead.is_none() {
                match fetch(false) {
                    Fetch::Job(job) => self.ahead = Some(job),
                    Fetch::Empty | Fetch::Closed => return None,
                }
            }
            let job = self.ahead?;
            if stall(job.seq) {
                return None;
            }
            if let Some(c) = self.get(&job, self.first(&job)) {
                return Some(c);
            }
            // No chunk of this job is ours (e.g. 4 chunks per request over 8 sockets): `next`
            // would skip it as well, so drop it and look at the following one.
            self.ahead = None;
        }
    }
}

/// An error and the chunk it belongs to (for the message).
pub type ChunkError = (std::io::Error, Chunk);

/// What the receive pipeline drives; the CUDA implementation is `GpuLane`, the tests use a model.
pub trait RecvOps {
    /// Whether the socket has something to read right now (data, EOF or an error).
    fn readable(&mut self) -> bool;
    /// Receives chunk `c` into staging buffer `b` (blocking), then starts its copy to the device
    /// and records `b`'s event.
    fn recv_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()>;
    /// Whether the copy out of buffer `b` has completed (never blocks).
    fn copy_done(&mut self, b: usize) -> std::io::Result<bool>;
    /// Waits for the copy out of buffer `b`.
    fn wait_copy(&mut self, b: usize) -> std::io::Result<()>;
    /// Counts chunk `c` as arrived (its copy has completed).
    fn arrived(&mut self, c: &Chunk);
}

/// Receive side of unpack mode, double-buffered: chunk `i+1` is received into one staging
/// buffer while the copy of chunk `i` out of the other one runs.
///
/// Invariants: at most one chunk is in flight (received, copy started, not yet counted); it
/// occupies buffer `b`, and the next receive goes into `b ^ 1`, whose previous copy has been
/// waited for (a chunk leaves `inflight` only through [`flush`](Self::flush), i.e. after its
/// event completed). A chunk is counted as arrived only after its copy's event completed.
/// Completion is never delayed indefinitely: [`settle`](Self::settle) runs before every blocking
/// receive, and the worker flushes before it sleeps, before the `slow` fault's sleep, and when
/// it exits.
#[derive(Debug, Default)]
pub struct RecvPipe {
    inflight: Option<(usize, Chunk)>,
}

impl RecvPipe {
    /// Waits for the in-flight chunk's copy, then counts it as arrived.
    pub fn flush(&mut self, ops: &mut impl RecvOps) -> Result<(), ChunkError> {
        if let Some((b, c)) = self.inflight.take() {
            ops.wait_copy(b).map_err(|e| (e, c))?;
            ops.arrived(&c);
        }
        Ok(())
    }

    /// Call before blocking on the socket: completes the in-flight chunk if its copy is done, or
    /// if the socket has nothing to read right now (the next data may depend on this chunk being
    /// reported, e.g. the sender waits for the request to complete; the copy takes
    /// microseconds). When data is already there, the peer has started the next chunk and sends
    /// all of it without waiting for us, so the receive ends without our help.
    pub fn settle(&mut self, ops: &mut impl RecvOps) -> Result<(), ChunkError> {
        if let Some((b, c)) = self.inflight {
            let done = ops.copy_done(b).map_err(|e| (e, c))?;
            if done || !ops.readable() {
                return self.flush(ops);
            }
        }
        Ok(())
    }

    /// Receives chunk `c` and starts its copy; the previous chunk is counted once its copy is done.
    pub fn recv(&mut self, ops: &mut impl RecvOps, c: Chunk) -> Result<(), ChunkError> {
        self.settle(ops)?;
        let b = match self.inflight {
            Some((other, _)) => other ^ 1,
            None => 0,
        };
        if let Err(e) = ops.recv_copy(b, &c) {
            // The chunks before this one still count, as without pipelining.
            self.flush(ops)?;
            return Err((e, c));
        }
        // The previous copy was queued before this one on the same stream: it is done or
        // nearly so.
        self.flush(ops)?;
        self.inflight = Some((b, c));
        Ok(())
    }
}

/// What the send pipeline drives; the CUDA implementation is `GpuLane`, the tests use a model.
pub trait SendOps {
    /// Starts copying chunk `c` from the device into staging buffer `b` and records `b`'s event.
    fn start_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()>;
    /// Waits for the copy into buffer `b`.
    fn wait_copy(&mut self, b: usize) -> std::io::Result<()>;
    /// Sends chunk `c` from staging buffer `b` (blocking). The buffer is free again once the
    /// next `start_copy` into it returns (zero-copy: after the receiver released it).
    fn send(&mut self, b: usize, c: &Chunk) -> std::io::Result<()>;
}

/// Send side of unpack mode: while chunk `i` is sent from one staging buffer, chunk `i+1` is
/// already being copied from the device into the other.
///
/// Invariants: `staged`, if set, is the chunk the worker sends next (it comes from
/// [`Chunks::peek`]) and occupies buffer `b`; the other buffer is free (its chunk was sent,
/// `send` returned). Bytes are sent from a buffer only after its copy's event completed.
#[derive(Debug, Default)]
pub struct SendPipe {
    staged: Option<(usize, Chunk)>,
}

impl SendPipe {
    /// Sends chunk `c` through staging, first starting the copy of `next` (the chunk this
    /// thread sends after `c`, when known and stageable) into the other buffer. A failed
    /// prefetch is dropped: `next` is then copied again when its turn comes, and that copy
    /// reports the error (as without prefetching).
    pub fn send(&mut self, ops: &mut impl SendOps, c: Chunk, next: Option<Chunk>) -> Result<(), ChunkError> {
        let b = match self.staged.take() {
            Some((b, s)) if s.same(&c) => b,
            Some((_, s)) => return Err(mismatch(&s, &c)),
            None => {
                ops.start_copy(0, &c).map_err(|e| (e, c))?;
                0
            }
        };
        if let Some(n) = next {
            if ops.start_copy(b ^ 1, &n).is_ok() {
                self.staged = Some((b ^ 1, n));
            }
        }
        ops.wait_copy(b).map_err(|e| (e, c))?;
        ops.send(b, &c).map_err(|e| (e, c))
    }

    /// Checks that nothing is staged before chunk `c` is sent another way.
    pub fn idle(&self, c: &Chunk) -> Result<(), ChunkError> {
        match self.staged {
            Some((_, s)) => Err(mismatch(&s, c)),
            None => Ok(()),
        }
    }
}

fn mismatch(staged: &Chunk, c: &Chunk) -> ChunkError {
    (
        std::io::Error::other(format!(
            "internal: chunk {} of request {} was staged, but chunk {} of request {} is sent next",
            staged.j, staged.job.seq, c.j, c.job.seq
        )),
        *c,
    )
}

/// A helper thread's GPU resources, for [`RecvOps`] / [`SendOps`].
struct GpuLane<'a> {
    shared: &'a Shared,
    lane: &'a mut Lane,
    fd: i32,
    /// recvmsg's scatter list (one entry per run of a chunk), reused: no allocation per chunk.
    iov: Vec<libc::iovec>,
    /// Nanoseconds spent waiting for staging copies.
    copy_wait_ns: u64,
}

impl GpuLane<'_> {
    /// Waits for the copy through staging buffer `b`, timing the wait.
    fn wait_event(&mut self, b: usize, what: &str) -> std::io::Result<()> {
        let t = Instant::now();
        let r = self.lane.done[b].synchronize().map_err(|e| gpu_io(what, e));
        self.copy_wait_ns += t.elapsed().as_nanos() as u64;
        r
    }
}

impl GpuLane<'_> {
    /// Bytes per staging buffer.
    fn cap(&self) -> usize {
        self.lane.staging[0].len()
    }

    /// Sends a CUDA chunk larger than a staging buffer (a send chunk size above 4 MiB), in
    /// synchronous pieces through buffer 0, copied into the socket (the buffer is reused at
    /// once). Only while nothing is staged.
    fn send_unpipelined(&mut self, tx: &mut Tx, c: &Chunk) -> std::io::Result<()> {
        tx.wait_buffer(self.shared, 0)?;
        let lane = &mut *self.lane;
        let cap = lane.staging[0].len();
        let src = (c.job.ptr + c.off) as u64;
        let mut off = 0;
        while off < c.len {
            let n = cap.min(c.len - off);
            let p = lane.staging[0].as_mut_ptr();
            // SAFETY: `p` is our staging buffer of `cap >= n` bytes, untouched by the host until
            // the synchronize; the source range is the caller's device buffer, valid until the
            // request completes.
            unsafe { lane.stream.memcpy_dtoh_async(p, src + off as u64, n) }
                .map_err(|e| gpu_io("copy to staging", e))?;
            lane.stream.synchronize().map_err(|e| gpu_io("copy to staging", e))?;
            // SAFETY: `p..p+n` holds the staged bytes.
            unsafe { send_all(self.fd, p, n) }?;
            off += n;
        }
        tx.handed(self.shared, c, None, false);
        Ok(())
    }
}

impl RecvOps for GpuLane<'_> {
    fn readable(&mut self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd; timeout 0 (never blocks). On failure, report "not readable":
        // the caller then completes the in-flight chunk first, which is always safe.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    /// One `recvmsg` scatters the chunk's runs into staging buffer `b` at their window
    /// positions; one async copy moves the window to the slot's bounce region.
    fn recv_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
        let Some(ru) = self.shared.gpu.as_ref().and_then(|g| g.recv.as_ref()) else {
            return Err(std::io::Error::other("CUDA receive on a comm without a bounce buffer"));
        };
        let (seq, j, len) = (c.job.seq, c.j as usize, c.len);
        let slot = c.slot();
        let staging = &mut self.lane.staging[b];
        let base = staging.as_mut_ptr();
        let (window, copy, total) = {
            let plan = self.shared.plans[slot].lock().unwrap_or_else(|e| e.into_inner());
            let (window, runs, copy) = plan.chunk(j);
            self.iov.clear();
            let mut total = 0;
            for r in runs {
                self.iov.push(libc::iovec {
                    // SAFETY: runs of a chunk lie inside its window, and a staging buffer holds
                    // one window.
                    iov_base: unsafe { base.add(r.bounce_off as usize - window) }.cast(),
                    iov_len: r.len as usize,
                });
                total += r.len as usize;
            }
            (window, copy, total)
        };
        if total != len || copy > staging.len() {
            return Err(std::io::Error::other(format!(
                "internal: chunk {j} of request {seq} planned {total} bytes (window copy {copy}), expected {len}"
            )));
        }
        // SAFETY: every iovec points into staging buffer `b`, which no copy is reading (the
        // pipeline's invariant).
        unsafe { recv_iov_all(self.fd, &mut self.iov) }?;
        chunk_read(self.shared, self.fd)?;
        let dst = ru.bounce_base() + (ru.slot_off(slot) + window) as u64;
        // SAFETY: the window lies inside the slot's region of the live bounce buffer; staging
        // buffer `b` is not written again until its event (recorded next) has completed.
        unsafe { self.lane.stream.memcpy_htod_async(dst, base, copy) }
            .map_err(|e| gpu_io("copy to bounce buffer", e))?;
        self.lane.done[b]
            .record(&self.lane.stream)
            .map_err(|e| gpu_io("copy to bounce buffer", e))
    }

    fn copy_done(&mut self, b: usize) -> std::io::Result<bool> {
        self.lane.done[b]
            .query()
            .map_err(|e| gpu_io("copy to bounce buffer", e))
    }

    fn wait_copy(&mut self, b: usize) -> std::io::Result<()> {
        self.wait_event(b, "copy to bounce buffer")
    }

    fn arrived(&mut self, c: &Chunk) {
        credit(self.shared, c);
    }
}

/// A send helper's lane and socket side together, for [`SendOps`].
struct GpuTx<'g, 'a> {
    gl: &'g mut GpuLane<'a>,
    tx: &'g mut Tx,
}

impl SendOps for GpuTx<'_, '_> {
    fn start_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
        let lane = &mut *self.gl.lane;
        if c.len > lane.staging[b].len() {
            return Err(std::io::Error::other(format!(
                "internal: chunk {} of request {} ({} bytes) exceeds the staging buffer",
                c.j, c.job.seq, c.len
            )));
        }
        // Zero-copy: the socket may still reference the buffer's pages.
        self.tx.wait_buffer(self.gl.shared, b)?;
        let p = lane.staging[b].as_mut_ptr();
        // SAFETY: `p` is staging buffer `b` (free: the pipeline's invariant, and released by the
        // receiver's acknowledgement on zero-copy comms), not touched by the host until its
        // event completed; the source is the caller's device buffer, valid until the request
        // completes, which needs this chunk sent.
        unsafe { lane.stream.memcpy_dtoh_async(p, (c.job.ptr + c.off) as u64, c.len) }
            .map_err(|e| gpu_io("copy to staging", e))?;
        lane.done[b]
            .record(&lane.stream)
            .map_err(|e| gpu_io("copy to staging", e))
    }

    fn wait_copy(&mut self, b: usize) -> std::io::Result<()> {
        self.gl.wait_event(b, "copy to staging")
    }

    fn send(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
        // SAFETY: staging buffer `b` holds the chunk's `c.len` bytes (its copy completed) and is
        // not written again before `Tx` released it.
        unsafe {
            self.tx
                .send(self.gl.shared, c, self.gl.lane.staging[b].as_ptr(), Some(b))
        }
    }
}

/// The byte a zero-copy receiver writes back on a data socket for every chunk it has read.
const ACK: u8 = 0xac;

/// A receiver has read a chunk out of socket `fd`: on zero-copy comms, acknowledge it (the
/// sender's pages are free again).
fn chunk_read(sh: &Shared, fd: i32) -> std::io::Result<()> {
    if !sh.acks() {
        return Ok(());
    }
    // SAFETY: one readable byte.
    unsafe { send_all(fd, &ACK, 1) }
}

/// The socket side of a send helper thread: hands a chunk's bytes to the socket and decides
/// when the chunk counts as moved (see the module docs).
pub struct Tx {
    fd: i32,
    /// Zero-copy comms only.
    zc: Option<Acked>,
    /// Chunks spliced so far.
    pub spliced: u64,
}

struct Acked {
    /// Host-memory chunks are spliced too (`TCPXEMU_ZEROCOPY=all`), not only staged ones.
    splice_host: bool,
    /// `(read end, write end)`; None if the pipe could not be made (then chunks are copied,
    /// and still acknowledged).
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Chunks handed to the socket and not acknowledged yet, oldest first, each with whether it
    /// counts only once acknowledged (spliced) or counted already (copied).
    unacked: VecDeque<(Chunk, bool)>,
    /// Chunks acknowledged so far (chunks handed over: this plus `unacked.len()`).
    acked: u64,
    /// Per staging buffer: the number of chunks handed over right after its last chunk went
    /// out; the buffer may be written again once `acked` reached it.
    busy_until: [u64; STAGING_BUFS],
}

impl Tx {
    /// A send helper's socket side under `policy`; `chunk_size` sizes the pipe.
    pub fn new(fd: i32, policy: ZeroCopy, chunk_size: usize) -> Self {
        let zc = (policy != ZeroCopy::Off).then(|| Acked {
            splice_host: policy == ZeroCopy::All,
            pipe: splice_pipe(chunk_size),
            unacked: VecDeque::with_capacity(4 * MAX_REQUESTS),
            acked: 0,
            busy_until: [0; STAGING_BUFS],
        });
        Self { fd, zc, spliced: 0 }
    }

    /// Sends chunk `c`'s bytes from `ptr` (from staging buffer `buf`, if any). A copied chunk
    /// counts now; a spliced one (zero-copy comms: staged chunks, and host chunks under `all`)
    /// once acknowledged.
    ///
    /// # Safety
    /// `ptr..ptr+c.len` must be readable, and stay unmodified until the chunk counts.
    pub unsafe fn send(&mut self, sh: &Shared, c: &Chunk, ptr: *const u8, buf: Option<usize>) -> std::io::Result<()> {
        let pipe = self
            .zc
            .as_ref()
            .filter(|z| buf.is_some() || z.splice_host)
            .and_then(|z| z.pipe.as_ref());
        let spliced = pipe.is_some();
        match pipe {
            // SAFETY: the caller's contract.
            Some((r, w)) => unsafe { splice_all(self.fd, r.as_raw_fd(), w.as_raw_fd(), ptr, c.len) }?,
            // SAFETY: as above.
            None => unsafe { send_all(self.fd, ptr, c.len) }?,
        }
        self.spliced += u64::from(spliced);
        self.handed(sh, c, buf, spliced);
        self.poll(sh)
    }

    /// Chunk `c` went into the socket (from staging buffer `buf`, if any), by reference
    /// (`spliced`) or copied.
    pub fn handed(&mut self, sh: &Shared, c: &Chunk, buf: Option<usize>, spliced: bool) {
        if !spliced {
            credit(sh, c);
        }
        if let Some(z) = self.zc.as_mut() {
            z.unacked.push_back((*c, spliced));
            if let (Some(b), true) = (buf, spliced) {
                z.busy_until[b] = z.acked + z.unacked.len() as u64;
            }
        }
    }

    /// Waits until the socket no longer references staging buffer `b`.
    pub fn wait_buffer(&mut self, sh: &Shared, b: usize) -> std::io::Result<()> {
        while self.zc.as_ref().is_some_and(|z| z.acked < z.busy_until[b]) {
            self.read_acks(sh, true)?;
        }
        Ok(())
    }

    /// Counts the chunks acknowledged so far (never blocks).
    pub fn poll(&mut self, sh: &Shared) -> std::io::Result<()> {
        self.read_acks(sh, false)
    }

    /// Waits until every chunk handed over is acknowledged (before the thread sleeps: requests
    /// complete only through it).
    pub fn settle(&mut self, sh: &Shared) -> Result<(), ChunkError> {
        while let Some((oldest, _)) = self.zc.as_ref().and_then(|z| z.unacked.front().copied()) {
            self.read_acks(sh, true).map_err(|e| (e, oldest))?;
        }
        Ok(())
    }

    fn read_acks(&mut self, sh: &Shared, block: bool) -> std::io::Result<()> {
        let Some(z) = self.zc.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; 64];
        let want = z.unacked.len().min(buf.len());
        if want == 0 {
            return Ok(());
        }
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `want` writable bytes.
        let ret = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), want, flags) };
        let n = match moved(ret, peer_closed) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
        if let Some(bad) = buf[..n].iter().find(|&&b| b != ACK) {
            return Err(std::io::Error::other(format!(
                "protocol: byte {bad:#04x} instead of a chunk acknowledgement on the data socket"
            )));
        }
        for _ in 0..n {
            if let Some((c, true)) = z.unacked.pop_front() {
                credit(sh, &c);
            }
        }
        z.acked += n as u64;
        Ok(())
    }
}

/// A pipe for [`splice_all`], as large as a chunk where the kernel allows (fewer, larger
/// hand-overs); None if no pipe could be made.
fn splice_pipe(chunk_size: usize) -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        crate::warn!(
            nccl_net_abi::NCCL_NET,
            "zero-copy sends: pipe2 failed ({}); copying instead",
            std::io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Unprivileged processes may go up to /proc/sys/fs/pipe-max-size (1 MiB by default); the
    // default 64 KiB also works, in more system calls.
    for size in [chunk_size.clamp(4096, 4 << 20), 1 << 20] {
        // SAFETY: fcntl on our descriptor.
        if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) } >= 0 {
            break;
        }
    }
    Some((r, w))
}

/// Hands `len` bytes at `ptr` to socket `fd` by reference: `vmsplice` puts the pages in the
/// pipe, `splice` moves them into the socket. The pages must stay unmodified until the receiver
/// has read them.
///
/// # Safety
/// `ptr..ptr+len` must be readable, and stay unmodified until the receiver acknowledged them.
unsafe fn splice_all(fd: i32, pipe_r: i32, pipe_w: i32, mut ptr: *const u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        let iov = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: one iovec over the caller's readable range; the pipe is empty here.
        let ret = unsafe { libc::vmsplice(pipe_w, &iov, 1, 0) };
        let Some(n) = moved(ret, write_zero)? else {
            continue;
        };
        let more = if n < len { libc::SPLICE_F_MORE } else { 0 };
        let mut left = n;
        while left > 0 {
            // SAFETY: moves pipe buffers into the socket; no user memory is touched.
            let ret = unsafe {
                libc::splice(
                    pipe_r,
                    std::ptr::null_mut(),
                    fd,
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_MOVE | more,
                )
            };
            if let Some(m) = moved(ret, write_zero)? {
                left -= m;
            }
        }
        // SAFETY: n <= len: still inside the caller's range.
        ptr = unsafe { ptr.add(n) };
        len -= n;
    }
    Ok(())
}

/// Blocks SIGPIPE on the calling thread: `splice` into a socket the peer closed raises it (it
/// has no MSG_NOSIGNAL), and a C host program would die of it; the call fails with EPIPE instead.
fn block_sigpipe() {
    // SAFETY: plain signal-mask calls on a local, initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Counts chunk `c`'s bytes as moved.
fn credit(shared: &Shared, c: &Chunk) {
    shared.pending[c.slot()].fetch_sub(c.len, Ordering::Release);
}

/// Records a worker's failure as the comm's error (unless the comm is closing).
fn report(shared: &Shared, idx: usize, (e, c): ChunkError) {
    if shared.is_closing() {
        return;
    }
    let what = match shared.dir {
        Dir::Send => "sending to",
        Dir::Recv => "receiving from",
    };
    shared.set_error(NetError::from_io(
        &e,
        format_args!(
            "data socket {idx} {what} peer {}: request {} chunk {} ({} bytes at offset {})",
            shared.peer, c.job.seq, c.j, c.len, c.off
        ),
    ));
}

/// Body of the helper thread for data socket `idx`.
pub fn run(shared: Arc<Shared>, idx: usize) {
    let sh = &*shared;
    let fd = sh.socks[idx].as_raw_fd();
    let mut chunks = Chunks::new(idx, sh.socks.len(), sh.chunk_size);
    let mut next = 0u64;
    let mut fetch = |block: bool| sh.fetch_job(&mut next, block);
    let stall = |seq: u64| sh.dir == Dir::Send && Fault::hits(sh.fault, FaultKind::Stall, seq);
    // The lane is this thread's alone: hold it for the thread's life.
    let mut lane = sh
        .gpu
        .as_ref()
        .map(|g| g.lanes[idx].lock().unwrap_or_else(|e| e.into_inner()));
    let mut gl = lane.as_deref_mut().map(|lane| GpuLane {
        shared: sh,
        lane,
        fd,
        iov: Vec::with_capacity(1024),
        copy_wait_ns: 0,
    });
    let zerocopy = if sh.dir == Dir::Send {
        sh.zerocopy
    } else {
        ZeroCopy::Off
    };
    if zerocopy != ZeroCopy::Off {
        block_sigpipe();
    }
    let mut tx = Tx::new(fd, zerocopy, sh.chunk_size);
    let mut rp = RecvPipe::default();
    let mut sp = SendPipe::default();
    let (mut first, mut idle_ns, mut busy_ns, mut bytes) = (None::<Instant>, 0u64, 0u64, 0u64);
    loop {
        let step = match chunks.next(&mut fetch, false, &stall) {
            Step::Empty => {
                // About to sleep: complete the in-flight receive, or every send still waiting
                // for its acknowledgement, first.
                if let Some(g) = gl.as_mut() {
                    if let Err(e) = rp.flush(g) {
                        report(sh, idx, e);
                        break;
                    }
                }
                if let Err(e) = tx.settle(sh) {
                    report(sh, idx, e);
                    break;
                }
                let t = Instant::now();
                let s = chunks.next(&mut fetch, true, &stall);
                if first.is_some() {
                    idle_ns += t.elapsed().as_nanos() as u64;
                }
                s
            }
            s => s,
        };
        let c = match step {
            Step::Chunk(c) => c,
            // Nothing is staged for a stalled job (`peek` skips it) and receives never stall.
            Step::Stall => {
                sh.wait_closing();
                break;
            }
            Step::Empty | Step::Closed => break,
        };
        let t = Instant::now();
        first.get_or_insert(t);
        let res: Result<(), ChunkError> = match (sh.dir, c.job.cuda, gl.as_mut()) {
            (Dir::Recv, true, Some(g)) => rp.recv(g, c),
            (Dir::Send, true, Some(g)) if c.len <= g.cap() => {
                let cap = g.cap();
                let n = chunks.peek(&mut fetch, &stall).filter(|n| n.job.cuda && n.len <= cap);
                sp.send(&mut GpuTx { gl: g, tx: &mut tx }, c, n)
            }
            (Dir::Send, true, Some(g)) => sp
                .idle(&c)
                .and_then(|()| g.send_unpipelined(&mut tx, &c).map_err(|e| (e, c))),
            (Dir::Recv, true, None) => Err((
                std::io::Error::other("CUDA receive on a comm without a bounce buffer"),
                c,
            )),
            (Dir::Send, true, None) => Err((std::io::Error::other("CUDA send on a comm without GPU resources"), c)),
            (Dir::Recv, false, g) => g
                .map_or(Ok(()), |g| rp.settle(g))
                // SAFETY: the job's buffer stays valid until the request completes or the comm
                // closes (the caller's contract), and `off + len <= job.len`.
                .and_then(|()| unsafe { recv_all(fd, (c.job.ptr + c.off) as *mut u8, c.len) }.map_err(|e| (e, c)))
                .and_then(|()| chunk_read(sh, fd).map_err(|e| (e, c)))
                .map(|()| credit(sh, &c)),
            (Dir::Send, false, _) => sp
                .idle(&c)
                // SAFETY: as above; the buffer is left alone until the request completes, which
                // needs this chunk counted.
                .and_then(|()| unsafe { tx.send(sh, &c, (c.job.ptr + c.off) as *const u8, None) }.map_err(|e| (e, c))),
        };
        busy_ns += t.elapsed().as_nanos() as u64;
        if let Err(e) = res {
            report(sh, idx, e);
            break;
        }
        bytes += c.len as u64;
        if Fault::hits(sh.fault, FaultKind::Slow, c.job.seq) {
            // Count the chunk before sleeping, as without pipelining.
            if let Some(g) = gl.as_mut() {
                if let Err(e) = rp.flush(g) {
                    report(sh, idx, e);
                    break;
                }
            }
            std::thread::sleep(SLOW_CHUNK_DELAY);
        }
    }
    if let Some(g) = gl.as_mut() {
        // Count what fully arrived (chunks before a failure still count), then make sure no copy
        // touches the staging buffers once the thread has ended (the comm frees them after join).
        if let Err(e) = rp.flush(g) {
            report(sh, idx, e);
        }
        let _ = g.lane.stream.synchronize();
    }
    let tm = &sh.timing;
    if let Some(first) = first {
        tm.active_ns
            .fetch_add(first.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
    tm.idle_ns.fetch_add(idle_ns, Ordering::Relaxed);
    tm.busy_ns.fetch_add(busy_ns, Ordering::Relaxed);
    tm.bytes.fetch_add(bytes, Ordering::Relaxed);
    tm.spliced.fetch_add(tx.spliced, Ordering::Relaxed);
    tm.copy_wait_ns
        .fetch_add(gl.map_or(0, |g| g.copy_wait_ns), Ordering::Relaxed);
}

fn gpu_io(what: &str, e: tcpx_gpu::GpuError) -> std::io::Error {
    std::io::Error::other(format!("device unpack: {what}: {e}"))
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
        let ret = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_WAITALL) };
        let Some(mut n) = moved(ret, peer_closed)? else {
            continue;
        };
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

/// The result of a system call that moves bytes: `Ok(Some(n))` for `n > 0` bytes, `Ok(None)` if
/// it was interrupted (call again), the error otherwise; a return of 0 becomes `zero`.
fn moved(ret: isize, zero: impl FnOnce() -> std::io::Error) -> std::io::Result<Option<usize>> {
    match ret {
        n if n > 0 => Ok(Some(n as usize)),
        0 => Err(zero()),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

fn write_zero() -> std::io::Error {
    std::io::ErrorKind::WriteZero.into()
}

/// End of stream where bytes were expected.
fn peer_closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed by peer")
}

/// Sends exactly `len` bytes (MSG_NOSIGNAL: a dead peer is EPIPE, never SIGPIPE).
///
/// # Safety
/// `ptr..ptr+len` must be readable for the duration of the call.
pub unsafe fn send_all(fd: i32, mut ptr: *const u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        // SAFETY: the caller guarantees `ptr..ptr+len` is readable for the request's lifetime.
        let ret = unsafe { libc::send(fd, ptr.cast(), len, libc::MSG_NOSIGNAL) };
        let Some(n) = moved(ret, write_zero)? else {
            continue;
        };
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
unsafe fn recv_all(fd: i32, ptr: *mut u8, len: usize) -> std::io::Result<()> {
    let mut iov = [libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    }];
    // SAFETY: the one iovec is the caller's writable range.
    unsafe { recv_iov_all(fd, &mut iov) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_summary_averages_over_threads() {
        let t = Timing::default();
        // Two threads, 1 s active each: 1.5 s moving (0.2 s of it waiting for copies), 0.4 s idle,
        // 3 GB moved.
        t.active_ns.store(2_000_000_000, Ordering::Relaxed);
        t.busy_ns.store(1_500_000_000, Ordering::Relaxed);
        t.copy_wait_ns.store(200_000_000, Ordering::Relaxed);
        t.idle_ns.store(400_000_000, Ordering::Relaxed);
        t.bytes.store(3_000_000_000, Ordering::Relaxed);
        assert_eq!(
            t.summary(2),
            "2 threads moved 3000000000 bytes; of their active time 75% moving chunks (including 10% waiting for staging copies), 20% idle; 2.00 GB/s per thread while moving"
        );
        // A comm that never moved a byte must not divide by zero.
        assert!(Timing::default()
            .summary(1)
            .ends_with("0% idle; 0.00 GB/s per thread while moving"));
        t.spliced.store(7, Ordering::Relaxed);
        assert!(t.summary(2).ends_with("while moving; 7 chunks sent zero-copy"));
    }
    use std::collections::VecDeque;
    use tcpx_gpu::unpack::Rng;

    /// Jobs with random sizes (some empty, some not a multiple of the chunk size), numbered as
    /// the comm numbers them.
    fn jobs(rng: &mut Rng, n: usize, cs: usize) -> Vec<Job> {
        let mut first_chunk = 0;
        (0..n as u64)
            .map(|seq| {
                let len = match rng.below(4) {
                    0 => 0,
                    1 => 1 + rng.below(cs as u64) as usize,
                    _ => rng.below(6 * cs as u64) as usize,
                };
                let job = Job {
                    seq,
                    ptr: 0,
                    len,
                    first_chunk,
                    cuda: rng.below(4) != 0,
                };
                first_chunk += len.div_ceil(cs) as u64;
                job
            })
            .collect()
    }

    /// The chunks of socket `idx`, as the pre-pipelining worker enumerated them.
    fn reference(jobs: &[Job], idx: usize, nsocks: usize, cs: usize) -> Vec<(u64, u64, usize, usize)> {
        let (idx, nsocks) = (idx as u64, nsocks as u64);
        let mut out = Vec::new();
        for job in jobs {
            let nchunks = job.len.div_ceil(cs) as u64;
            let mut j = (idx + nsocks - job.first_chunk % nsocks) % nsocks;
            while j < nchunks {
                let off = j as usize * cs;
                out.push((job.seq, j, off, cs.min(job.len - off)));
                j += nsocks;
            }
        }
        out
    }

    fn key(c: &Chunk) -> (u64, u64, usize, usize) {
        (c.job.seq, c.j, c.off, c.len)
    }

    /// A job source that publishes jobs one at a time at random moments; `Closed` at the end.
    struct Source<'a> {
        rng: Rng,
        jobs: VecDeque<Job>,
        published: usize,
        all: &'a [Job],
    }

    impl<'a> Source<'a> {
        fn new(all: &'a [Job], seed: u64) -> Self {
            Self {
                rng: Rng::new(seed),
                jobs: VecDeque::new(),
                published: 0,
                all,
            }
        }

        fn fetch(&mut self, block: bool) -> Fetch {
            if self.published < self.all.len() && (block || self.rng.below(2) == 0) {
                self.jobs.push_back(self.all[self.published]);
                self.published += 1;
            }
            match self.jobs.pop_front() {
                Some(j) => Fetch::Job(j),
                None if self.published == self.all.len() => Fetch::Closed,
                None => Fetch::Empty,
            }
        }
    }

    #[test]
    fn chunks_match_the_striping_and_peek_is_exact() {
        let mut rng = Rng::new(7);
        for round in 0..300 {
            let cs = 1 + rng.below(5000) as usize;
            let nsocks = 1 + rng.below(8) as usize;
            let njobs = rng.below(40) as usize;
            let all = jobs(&mut rng, njobs, cs);
            let stall_at = if round % 5 == 0 {
                rng.below(all.len() as u64 + 1)
            } else {
                u64::MAX
            };
            let stall = |seq: u64| seq >= stall_at;
            let mut seen = std::collections::HashSet::new();
            for idx in 0..nsocks {
                let mut src = Source::new(&all, round * 8 + idx as u64);
                let mut fetch = |block: bool| src.fetch(block);
                let mut cur = Chunks::new(idx, nsocks, cs);
                let mut got = Vec::new();
                let mut peeked: Option<Chunk> = None;
                let end = loop {
                    let step = match cur.next(&mut fetch, false, &stall) {
                        Step::Empty => cur.next(&mut fetch, true, &stall),
                        s => s,
                    };
                    let c = match step {
                        Step::Chunk(c) => c,
                        s => break s,
                    };
                    if let Some(p) = peeked.take() {
                        assert_eq!(key(&p), key(&c), "peek announced another chunk");
                    }
                    assert!(!stall(c.job.seq));
                    got.push(key(&c));
                    if rng.below(2) == 0 {
                        peeked = cur.peek(&mut fetch, &stall);
                        if let Some(p) = peeked {
                            assert!(!stall(p.job.seq));
                            // Peeking twice gives the same answer.
                            assert_eq!(cur.peek(&mut fetch, &stall).map(|q| key(&q)), Some(key(&p)));
                        }
                    }
                };
                let upto: Vec<Job> = all.iter().copied().filter(|j| !stall(j.seq)).collect();
                assert_eq!(
                    got,
                    reference(&upto, idx, nsocks, cs),
                    "socket {idx} of {nsocks}, chunk {cs}"
                );
                assert!(peeked.is_none(), "peek announced a chunk that never came");
                if stall_at < all.len() as u64 {
                    assert!(matches!(end, Step::Stall));
                } else {
                    assert!(matches!(end, Step::Closed));
                }
                for k in got {
                    assert!(seen.insert((k.0, k.1)), "chunk handed to two sockets");
                }
            }
            let total: u64 = all
                .iter()
                .filter(|j| !stall(j.seq))
                .map(|j| j.len.div_ceil(cs) as u64)
                .sum();
            assert_eq!(seen.len() as u64, total, "every chunk on exactly one socket");
        }
    }

    #[test]
    fn peek_looks_past_jobs_without_a_chunk_for_this_socket() {
        // 4 chunks per request over 8 sockets: socket 1 owns chunk 1 of every other request.
        let cs = 1 << 20;
        let all: Vec<Job> = (0..6)
            .map(|seq| Job {
                seq,
                ptr: 0,
                len: 4 * cs,
                first_chunk: 4 * seq,
                cuda: true,
            })
            .collect();
        let mut queue: VecDeque<Job> = all.iter().copied().collect();
        let mut fetch = |_block: bool| queue.pop_front().map_or(Fetch::Closed, Fetch::Job);
        let no_stall = |_: u64| false;
        let mut cur = Chunks::new(1, 8, cs);
        for seq in [0u64, 2, 4] {
            let Step::Chunk(c) = cur.next(&mut fetch, false, &no_stall) else {
                panic!("chunk of request {seq} expected")
            };
            assert_eq!((c.job.seq, c.j), (seq, 1));
            let p = cur.peek(&mut fetch, &no_stall);
            assert_eq!(p.map(|p| (p.job.seq, p.j)), (seq < 4).then_some((seq + 2, 1)));
        }
        // A stalled request in between hides the next chunk.
        let mut queue: VecDeque<Job> = all.iter().copied().collect();
        let mut fetch = |_block: bool| queue.pop_front().map_or(Fetch::Closed, Fetch::Job);
        let stall = |seq: u64| seq >= 1;
        let mut cur = Chunks::new(1, 8, cs);
        assert!(matches!(cur.next(&mut fetch, false, &stall), Step::Chunk(_)));
        assert!(cur.peek(&mut fetch, &stall).is_none());
        assert!(matches!(cur.next(&mut fetch, false, &stall), Step::Stall));
    }

    fn chunk(n: u64, len: usize) -> Chunk {
        Chunk {
            job: Job {
                seq: n / 3,
                ptr: 0,
                len: 3 * len,
                first_chunk: 0,
                cuda: true,
            },
            j: n % 3,
            off: (n % 3) as usize * len,
            len,
        }
    }

    /// A model of a lane: two buffers, copies completing in stream order at random moments.
    #[derive(Default)]
    struct Model {
        rng: Option<Rng>,
        /// Per buffer: (chunk id, copy started in this order, completed).
        buf: [Option<(u64, u64, bool)>; 2],
        copies: u64,
        arrived: Vec<u64>,
        fail_recv_at: Option<u64>,
        fail_prefetch: bool,
        sent: Vec<u64>,
        /// Buffers a send is allowed from (copy waited on).
        waited: [bool; 2],
    }

    impl Model {
        fn rng(&mut self) -> &mut Rng {
            self.rng.get_or_insert_with(|| Rng::new(1))
        }

        fn id(c: &Chunk) -> u64 {
            c.job.seq * 3 + c.j
        }

        /// Completes copies in stream order up to and including the one in buffer `b`.
        fn complete(&mut self, b: usize) {
            let Some((_, order, _)) = self.buf[b] else { return };
            for x in self.buf.iter_mut().flatten() {
                if x.1 <= order {
                    x.2 = true;
                }
            }
        }

        fn start(&mut self, b: usize, c: &Chunk) {
            if let Some((id, _, done)) = self.buf[b] {
                assert!(done, "buffer {b} reused while the copy of chunk {id} runs");
            }
            self.buf[b] = Some((Self::id(c), self.copies, false));
            self.copies += 1;
            self.waited[b] = false;
        }
    }

    impl RecvOps for Model {
        fn readable(&mut self) -> bool {
            self.rng().below(3) != 0
        }
        fn recv_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
            if let Some((id, _, done)) = self.buf[b] {
                assert!(done, "received into buffer {b} while the copy of chunk {id} runs");
            }
            if self.fail_recv_at == Some(Self::id(c)) {
                return Err(std::io::Error::other("injected"));
            }
            self.start(b, c);
            Ok(())
        }
        fn copy_done(&mut self, b: usize) -> std::io::Result<bool> {
            if self.rng().below(2) == 0 {
                self.complete(b);
            }
            Ok(self.buf[b].expect("query of an idle buffer").2)
        }
        fn wait_copy(&mut self, b: usize) -> std::io::Result<()> {
            self.complete(b);
            Ok(())
        }
        fn arrived(&mut self, c: &Chunk) {
            let id = Self::id(c);
            let b = self
                .buf
                .iter()
                .flatten()
                .find(|x| x.0 == id)
                .expect("arrived chunk not in a buffer");
            assert!(b.2, "chunk {id} counted before its copy completed");
            self.arrived.push(id);
        }
    }

    impl SendOps for Model {
        fn start_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
            assert!(
                self.buf[b].is_none(),
                "copy into buffer {b} while it holds unsent chunk {:?}",
                self.buf[b]
            );
            // Only prefetches fail (the other buffer holds the chunk being sent).
            if self.fail_prefetch && self.buf[b ^ 1].is_some() && self.rng().below(2) == 0 {
                return Err(std::io::Error::other("injected"));
            }
            self.start(b, c);
            Ok(())
        }
        fn wait_copy(&mut self, b: usize) -> std::io::Result<()> {
            self.complete(b);
            self.waited[b] = true;
            Ok(())
        }
        fn send(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
            let (id, _, done) = self.buf[b].take().expect("send from an empty buffer");
            assert!(done && self.waited[b], "sent before the copy completed");
            assert_eq!(id, Self::id(c), "sent another chunk's bytes");
            self.sent.push(id);
            Ok(())
        }
    }

    #[test]
    fn recv_pipe_counts_every_chunk_after_its_copy_in_order() {
        for seed in 0..200 {
            let mut m = Model {
                rng: Some(Rng::new(seed)),
                ..Default::default()
            };
            let mut p = RecvPipe::default();
            let n = 1 + seed % 17;
            for i in 0..n {
                p.recv(&mut m, chunk(i, 4096)).unwrap();
                // At most one chunk (the last) is in flight.
                assert!(m.arrived.len() as u64 >= i);
                if m.rng().below(4) == 0 {
                    // The worker goes idle / settles before a blocking receive.
                    p.settle(&mut m).unwrap();
                }
                if m.rng().below(8) == 0 {
                    p.flush(&mut m).unwrap();
                    assert_eq!(m.arrived.len() as u64, i + 1);
                }
            }
            p.flush(&mut m).unwrap();
            assert_eq!(m.arrived, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn recv_pipe_settle_completes_when_nothing_to_read() {
        struct Quiet(Model);
        impl RecvOps for Quiet {
            fn readable(&mut self) -> bool {
                false
            }
            fn recv_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
                self.0.recv_copy(b, c)
            }
            fn copy_done(&mut self, _b: usize) -> std::io::Result<bool> {
                Ok(false)
            }
            fn wait_copy(&mut self, b: usize) -> std::io::Result<()> {
                RecvOps::wait_copy(&mut self.0, b)
            }
            fn arrived(&mut self, c: &Chunk) {
                self.0.arrived(c)
            }
        }
        let mut q = Quiet(Model::default());
        let mut p = RecvPipe::default();
        p.recv(&mut q, chunk(0, 4096)).unwrap();
        assert!(q.0.arrived.is_empty());
        p.settle(&mut q).unwrap();
        assert_eq!(q.0.arrived, [0]);
    }

    #[test]
    fn recv_pipe_failure_still_counts_earlier_chunks() {
        for fail in 0..6 {
            let mut m = Model {
                fail_recv_at: Some(fail),
                ..Default::default()
            };
            let mut p = RecvPipe::default();
            let mut err = None;
            for i in 0..6 {
                if let Err((e, c)) = p.recv(&mut m, chunk(i, 4096)) {
                    err = Some((e, Model::id(&c)));
                    break;
                }
            }
            let (e, id) = err.expect("the injected failure");
            assert_eq!(e.to_string(), "injected");
            assert_eq!(id, fail, "the error names the failing chunk");
            assert_eq!(m.arrived, (0..fail).collect::<Vec<_>>());
        }
    }

    #[test]
    fn send_pipe_sends_in_order_from_completed_copies() {
        for seed in 0..200 {
            let mut m = Model {
                rng: Some(Rng::new(seed)),
                fail_prefetch: seed % 3 == 0,
                ..Default::default()
            };
            let mut p = SendPipe::default();
            let n = 1 + seed % 19;
            for i in 0..n {
                // The next chunk is known (published) only sometimes.
                let next = (i + 1 < n && m.rng().below(4) != 0).then(|| chunk(i + 1, 4096));
                p.send(&mut m, chunk(i, 4096), next).unwrap();
            }
            assert_eq!(m.sent, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn send_pipe_refuses_to_skip_a_staged_chunk() {
        let mut m = Model::default();
        let mut p = SendPipe::default();
        p.send(&mut m, chunk(0, 4096), Some(chunk(1, 4096))).unwrap();
        assert!(p.idle(&chunk(2, 4096)).is_err());
        assert!(p.send(&mut m, chunk(2, 4096), None).is_err());
    }
}
