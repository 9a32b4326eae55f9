//! The job ring: the caller publishes [`Job`]s, each helper thread keeps its own cursor into it.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::evloop::Looped;
use super::{Dir, Timing, MAX_REQUESTS};
use crate::config::ZeroCopy;
use crate::error::NetError;
use crate::fault::Fault;
use crate::gpu::CommGpu;
use crate::scramble::Plan;

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
    /// Set when the comm's sockets went to the shared event loops (`TCPXEMU_THREADS`): then
    /// publishing moves what it can inline and kicks the loops for the rest, instead of waking
    /// helper threads.
    pub looped: OnceLock<Looped>,
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
            looped: OnceLock::new(),
        }
    }

    /// Whether every chunk on this comm is acknowledged by the receiver (zero-copy sends).
    pub fn acks(&self) -> bool {
        self.zerocopy != ZeroCopy::Off
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A worker never panics while holding the lock, but stay usable if one did.
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        if let Some(l) = self.looped.get() {
            l.published(self);
        }
    }

    /// Records the comm's first error; later ones are dropped (they are usually consequences).
    pub fn set_error(&self, err: NetError) {
        let mut slot = self.error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
        self.error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn is_closing(&self) -> bool {
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
    pub(super) fn fetch_job(&self, next: &mut u64, block: bool) -> Fetch {
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
            ring = self.cv.wait(ring).unwrap_or_else(std::sync::PoisonError::into_inner);
            ring.sleepers -= 1;
        }
    }

    /// Blocks until the comm closes (the `stall` fault).
    pub(super) fn wait_closing(&self) {
        let mut ring = self.lock();
        while !ring.closing {
            ring.sleepers += 1;
            ring = self.cv.wait(ring).unwrap_or_else(std::sync::PoisonError::into_inner);
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
