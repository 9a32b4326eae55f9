//! Who moves a comm's chunks: one helper thread per data socket, moving whole chunks with
//! blocking system calls (this file; `TCPXEMU_THREADS=per-socket`), or the process's shared
//! event loops ([`evloop`]; `TCPXEMU_THREADS=shared`). `auto`, the default, picks per comm at
//! its first transfer ([`crate::threads`]: per-socket while the process has at most
//! `TCPXEMU_THREAD_SOCKETS` data sockets open, or when the comm needs it: CUDA memory, zero-copy,
//! the `stall`/`slow` faults). Both models share everything below except the system calls: the
//! striping, the job ring with one cursor per socket, the `pending` counters and the error path.
//!
//! Thread count per process: per-socket comms, one helper per data socket (from the comm's
//! first transfer to its close); shared comms, `TCPXEMU_SHARED_THREADS` loops in all (started by
//! the first shared comm, kept for the process). [`crate::threads::helper_threads`] gives the
//! formula.
//!
//! TCPX runs `NCCL_SOCKET_NTHREADS` helpers that each multiplex `NCCL_NSOCKS_PERTHREAD` sockets.
//! tcpx-emu uses one thread per data socket instead: a blocking `send`/`recv(MSG_WAITALL)` of a
//! whole chunk straight from/into the caller's buffer is the cheapest way to move host memory over
//! kernel TCP (one system call per chunk, no staging copy, no spinning), and with at most 8 sockets
//! per comm a comm's thread count stays small
//! (a process with hundreds of comms is what the shared model is for).
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

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::config::ZeroCopy;
use crate::error::NetError;
use crate::fault::{Fault, FaultKind, SLOW_CHUNK_DELAY};

mod chunks;
pub mod evloop;
mod io;
mod pipes;
mod ring;
mod zerocopy;

pub use chunks::{Chunk, Chunks, Step};
pub use io::send_all;
pub use pipes::{ChunkError, RecvOps, RecvPipe, SendOps, SendPipe};
pub use ring::{Fetch, Job, Shared};
pub use zerocopy::Tx;

use io::recv_all;
use pipes::{GpuLane, GpuTx};
use zerocopy::{block_sigpipe, chunk_read};

/// Outstanding requests per comm: TCPX's `MAX_REQUESTS` (its one home is the ABI crate).
pub use nccl_net_abi::TCPX_MAX_REQUESTS as MAX_REQUESTS;

/// Which way data flows on a comm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Send,
    Recv,
}

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
    /// Part of `bytes`: chunks whose last byte the publishing thread moved itself (the shared
    /// model's inline moves).
    pub inline_bytes: AtomicU64,
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
    // The GPU lane, from the first CUDA chunk on (the comm's CUDA resources exist by then: they
    // are made before a CUDA request is posted).
    let mut gl: Option<GpuLane> = None;
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
        if c.job.cuda && gl.is_none() {
            gl = sh.gpu.as_ref().and_then(|g| g.cuda()).map(|r| GpuLane {
                shared: sh,
                // The lane is this thread's alone: hold it for the thread's life.
                lane: r.lanes[idx].lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                fd,
                iov: Vec::with_capacity(1024),
                copy_wait_ns: 0,
            });
        }
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
}
