//! NCCL communicators, buffers and the two timings, for the endpoints of one rank.
//!
//! One communicator per endpoint (an endpoint id is its NCCL rank), created in one
//! `ncclGroupStart`/`ncclGroupEnd` when a rank drives several GPUs (`-g`), each on its GPU's
//! primary context (the one tcpx-perf, the plugin and NCCL's runtime calls share). All NCCL
//! calls are made from the calling (MPI) thread. Launcher collectives come in through
//! [`Collectives`], so a single process can drive a one-rank communicator without MPI.

use super::nccl_sys::{NcclComm, NcclLib, NcclUniqueId, UNIQUE_ID_BYTES};
use super::ops::EndpointOp;
use crate::collectives::Collectives;
use std::sync::Arc;
use std::time::Instant;
use tcpx_gpu::{Device, DeviceBuffer, Event, Stream};

/// One endpoint's communicator and what it runs on.
struct Endpoint {
    /// The endpoint id = the NCCL rank.
    id: usize,
    // Field order = drop order: NCCL is done with the buffer and stream once the comm is gone.
    comm: NcclComm,
    buf: DeviceBuffer,
    stream: Stream,
    device: Device,
}

/// This rank's side of the NCCL baseline.
pub struct Session {
    lib: Arc<NcclLib>,
    endpoints: Vec<Endpoint>,
}

/// Per-iteration times of this rank (its slowest endpoint), microseconds.
#[derive(Debug, Clone, Default)]
pub struct RankTimes {
    pub samples_us: Vec<f64>,
    /// The batch's total / iterations (the batch timing); the samples' mean otherwise.
    pub mean_us: f64,
}

fn gpu<T>(r: Result<T, tcpx_gpu::GpuError>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("NCCL baseline: {what}: {e}"))
}

impl Session {
    /// Creates the communicators: rank 0 makes the unique id and every rank learns it through
    /// `coll`; `local` lists this rank's (endpoint id, GPU ordinal); `buffer_len` bytes of
    /// device memory per endpoint.
    pub fn init<C: Collectives + ?Sized>(
        lib: Arc<NcclLib>,
        coll: &C,
        nranks: usize,
        local: &[(usize, usize)],
        buffer_len: u64,
    ) -> Result<Session, String> {
        let mut id = vec![0u8; UNIQUE_ID_BYTES];
        if coll.rank() == 0 {
            id = lib.unique_id()?.to_bytes();
        }
        // Every other rank contributes zeros: the OR is rank 0's id.
        coll.or_bytes(&mut id);
        let id = NcclUniqueId::from_bytes(&id).ok_or("NCCL baseline: unique id of the wrong length")?;
        let mut endpoints = Vec::with_capacity(local.len());
        for &(ep, ordinal) in local {
            let device = gpu(Device::open_lazy(ordinal), &format!("GPU {ordinal}"))?;
            let stream = gpu(device.new_stream(), "stream")?;
            let buf = gpu(device.alloc(buffer_len.max(8) as usize), "buffer")?;
            gpu(buf.memset(0..buf.len(), 0, &stream), "buffer clear")?;
            gpu(stream.synchronize(), "buffer clear")?;
            endpoints.push(Endpoint {
                id: ep,
                comm: std::ptr::null_mut(),
                buf,
                stream,
                device,
            });
        }
        let mut session = Session { lib, endpoints };
        session.lib.group_start()?;
        let mut failed = None;
        for e in &mut session.endpoints {
            // ncclCommInitRank takes the GPU from the calling thread's current device.
            if let Err(err) = gpu(e.device.make_current(), "make GPU current") {
                failed = Some(err);
                break;
            }
            match session.lib.comm_init_rank(nranks, id, e.id) {
                Ok(c) => e.comm = c,
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        let ended = session.lib.group_end();
        if let Some(err) = failed {
            return Err(err);
        }
        ended?;
        Ok(session)
    }

    /// Local endpoints, in the order ops are given.
    pub fn endpoint_ids(&self) -> Vec<usize> {
        self.endpoints.iter().map(|e| e.id).collect()
    }

    /// Enqueues one operation on every local endpoint (`ops[i]` for the i-th local endpoint),
    /// in one group.
    pub fn enqueue(&self, ops: &[&EndpointOp]) -> Result<(), String> {
        self.lib.group_start()?;
        let r = self.enqueue_grouped(ops);
        let ended = self.lib.group_end();
        r.and(ended)
    }

    fn enqueue_grouped(&self, ops: &[&EndpointOp]) -> Result<(), String> {
        for (e, op) in self.endpoints.iter().zip(ops) {
            gpu(e.device.make_current(), "make GPU current")?;
            let base = e.buf.as_raw();
            let s = e.stream.as_raw();
            let fits = op.buffer_len() <= e.buf.len() as u64;
            if !fits {
                return Err(format!(
                    "NCCL baseline: endpoint {} needs {} buffer bytes, {} allocated",
                    e.id,
                    op.buffer_len(),
                    e.buf.len()
                ));
            }
            match op {
                EndpointOp::P2p { sends, recvs } => {
                    for t in sends {
                        // SAFETY: the range lies in the endpoint's live device buffer (checked
                        // above); the stream is the buffer's GPU's; nothing else touches the
                        // buffer until the stream is synchronized.
                        unsafe { self.lib.send(base + t.off, t.len as usize, t.peer, e.comm, s) }?;
                    }
                    for t in recvs {
                        // SAFETY: as above.
                        unsafe { self.lib.recv(base + t.off, t.len as usize, t.peer, e.comm, s) }?;
                    }
                }
                EndpointOp::AllReduce { count } => {
                    // SAFETY: [0, 8 count) lies in the buffer (checked above), as above.
                    unsafe { self.lib.all_reduce(base, base + 4 * count, *count as usize, e.comm, s) }?;
                }
            }
        }
        Ok(())
    }

    /// Waits for every local stream.
    pub fn synchronize(&self) -> Result<(), String> {
        for e in &self.endpoints {
            gpu(e.stream.synchronize(), "stream synchronize")?;
        }
        Ok(())
    }

    /// `n` operations, then waits for them.
    pub fn warm_up(&self, ops: &[&EndpointOp], n: usize) -> Result<(), String> {
        for _ in 0..n {
            self.enqueue(ops)?;
        }
        self.synchronize()
    }

    /// nccl-tests' timing: a barrier, then `iters` operations back to back with a CUDA event
    /// before the first and after each; time = (last event - first) / iters, each sample the
    /// interval between consecutive events; a rank's figure is its slowest endpoint's.
    pub fn time_batch<C: Collectives + ?Sized>(
        &self,
        coll: &C,
        ops: &[&EndpointOp],
        iters: usize,
    ) -> Result<RankTimes, String> {
        let mut marks: Vec<Vec<Event>> = Vec::with_capacity(self.endpoints.len());
        for e in &self.endpoints {
            let evs = (0..=iters)
                .map(|_| gpu(Event::new(&e.device, true), "timing event"))
                .collect::<Result<Vec<_>, _>>()?;
            marks.push(evs);
        }
        coll.barrier();
        for (e, evs) in self.endpoints.iter().zip(&marks) {
            gpu(evs[0].record(&e.stream), "event record")?;
        }
        for i in 1..=iters {
            self.enqueue(ops)?;
            for (e, evs) in self.endpoints.iter().zip(&marks) {
                gpu(evs[i].record(&e.stream), "event record")?;
            }
        }
        self.synchronize()?;
        let mut samples = vec![0.0f64; iters];
        let mut total = 0.0f64;
        for evs in &marks {
            for i in 0..iters {
                let ms = gpu(evs[i].elapsed_ms(&evs[i + 1]), "event elapsed")?;
                samples[i] = samples[i].max(f64::from(ms) * 1e3);
            }
            let ms = gpu(evs[0].elapsed_ms(&evs[iters]), "event elapsed")?;
            total = total.max(f64::from(ms) * 1e3);
        }
        Ok(RankTimes {
            samples_us: samples,
            mean_us: total / iters.max(1) as f64,
        })
    }

    /// tcpx-perf's timing: per iteration a barrier, then the operation, the clock running from
    /// the enqueue to the completion of every local stream.
    pub fn time_barrier<C: Collectives + ?Sized>(
        &self,
        coll: &C,
        ops: &[&EndpointOp],
        iters: usize,
    ) -> Result<RankTimes, String> {
        let mut samples = Vec::with_capacity(iters);
        for _ in 0..iters {
            coll.barrier();
            let t0 = Instant::now();
            self.enqueue(ops)?;
            self.synchronize()?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let mean_us = samples.iter().sum::<f64>() / iters.max(1) as f64;
        Ok(RankTimes {
            samples_us: samples,
            mean_us,
        })
    }

    /// Fills `len` bytes at `off` of local endpoint `i`'s buffer with the data pattern of its
    /// endpoint (asynchronous on its stream).
    pub fn fill(&self, i: usize, off: u64, len: u64, iter: u32, origin_off: u64) -> Result<(), String> {
        let e = &self.endpoints[i];
        gpu(
            e.device.fill(
                &e.buf,
                off as usize..(off + len) as usize,
                e.id as u32,
                iter,
                origin_off,
                &e.stream,
            ),
            "pattern fill",
        )
    }

    /// Bytes of local endpoint `i`'s buffer at `off..off+len` that differ from `origin`'s
    /// pattern (waits for the stream).
    pub fn wrong_bytes(
        &self,
        i: usize,
        off: u64,
        len: u64,
        origin: usize,
        iter: u32,
        origin_off: u64,
    ) -> Result<u64, String> {
        let e = &self.endpoints[i];
        gpu(
            e.device.verify(
                &e.buf,
                off as usize..(off + len) as usize,
                origin as u32,
                iter,
                origin_off,
                &e.stream,
            ),
            "pattern check",
        )
    }

    /// Destroys the communicators (collective over the job's ranks).
    pub fn close(mut self) -> Result<(), String> {
        let mut first_err = None;
        for e in &mut self.endpoints {
            let comm = std::mem::replace(&mut e.comm, std::ptr::null_mut());
            if comm.is_null() {
                continue;
            }
            let _ = e.device.make_current();
            // SAFETY: comm came from ncclCommInitRank, is destroyed once and not used after.
            if let Err(err) = unsafe { self.lib.comm_destroy(comm) } {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Session {
    /// A session left without [`Session::close`] (an error path) aborts its communicators:
    /// `ncclCommAbort` does not wait for peers that may be gone.
    fn drop(&mut self) {
        for e in &mut self.endpoints {
            let comm = std::mem::replace(&mut e.comm, std::ptr::null_mut());
            if !comm.is_null() {
                let _ = e.device.make_current();
                // SAFETY: as in close.
                unsafe { self.lib.comm_abort(comm) };
            }
        }
    }
}
