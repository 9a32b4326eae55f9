//! Staging pipes of unpack mode: double-buffered copies between the device and pinned staging,
//! overlapped with socket I/O ([`RecvPipe`], [`SendPipe`]), and their CUDA implementation.

use std::sync::MutexGuard;
use std::time::Instant;

use super::io::{gpu_io, recv_iov_all, send_all};
use super::zerocopy::{chunk_read, Tx};
use super::{credit, Chunk, Shared};
use crate::gpu::Lane;

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
pub(super) struct GpuLane<'a> {
    pub(super) shared: &'a Shared,
    /// Locked for the thread's life from its first CUDA chunk on (the lane is its alone).
    pub(super) lane: MutexGuard<'a, Lane>,
    pub(super) fd: i32,
    /// recvmsg's scatter list (one entry per run of a chunk), reused: no allocation per chunk.
    pub(super) iov: Vec<libc::iovec>,
    /// Nanoseconds spent waiting for staging copies.
    pub(super) copy_wait_ns: u64,
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
    pub(super) fn cap(&self) -> usize {
        self.lane.staging[0].len()
    }

    /// Sends a CUDA chunk larger than a staging buffer (a send chunk size above 4 MiB), in
    /// synchronous pieces through buffer 0, copied into the socket (the buffer is reused at
    /// once). Only while nothing is staged.
    pub(super) fn send_unpipelined(&mut self, tx: &mut Tx, c: &Chunk) -> std::io::Result<()> {
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
        unsafe { libc::poll(&raw mut p, 1, 0) > 0 }
    }

    /// One `recvmsg` scatters the chunk's runs into staging buffer `b` at their window
    /// positions; one async copy moves the window to the slot's bounce region.
    fn recv_copy(&mut self, b: usize, c: &Chunk) -> std::io::Result<()> {
        let Some(slot_dst) = self.shared.gpu.as_ref().and_then(|g| g.bounce_slot(c.slot())) else {
            return Err(std::io::Error::other("CUDA receive on a comm without a bounce buffer"));
        };
        let (seq, j, len) = (c.job.seq, c.j as usize, c.len);
        let slot = c.slot();
        let staging = &mut self.lane.staging[b];
        let base = staging.as_mut_ptr();
        let (window, copy, total) = {
            let plan = self.shared.plans[slot]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        let dst = slot_dst + window as u64;
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
pub(super) struct GpuTx<'g, 'a> {
    pub(super) gl: &'g mut GpuLane<'a>,
    pub(super) tx: &'g mut Tx,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::Job;
    use tcpx_gpu::unpack::Rng;

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
                self.0.arrived(c);
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
