//! The progress loop: posts chunks and tests the head of every comm until the iteration is done.
//!
//! GPUDirect-TCPX only makes progress inside `test` (its caller thread runs the control protocol),
//! so one loop keeps testing the oldest request of every comm, sender and receiver alike. Posts
//! are bounded by the window, and a post that returns no request is simply retried on the next
//! pass. Nothing here allocates or logs: the op vectors were built before the clock started, and
//! the in-flight queues were sized for the window.

use super::backoff::{Backoff, Outlook, PollMode, Wait};
use super::copier::Copier;
use super::gpu::{CudaPath, GpuState, UnpackRing};
use super::schedule::{self, RecvOp, Schedule, SendOp};
use nccl_net::{MrId, Poll, RecvComm, RecvDone, Request, SendComm};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod outcome;
use outcome::Active;
pub use outcome::{Delivered, IterationError, IterationState, IterationTiming, PeerGauge};

/// Counters a lane publishes for the stall dump (read by the watchdog thread).
#[derive(Debug, Default)]
pub struct LaneStats {
    pub posted: AtomicU64,
    pub completed: AtomicU64,
    pub consumed: AtomicU64,
    /// Nanoseconds since the run's epoch at which the oldest outstanding request was posted, or 0.
    pub oldest_post_ns: AtomicU64,
}

/// A send comm with its registrations, its ops for this size and its in-flight requests.
pub struct SendLane {
    pub comm: SendComm,
    /// Index of the lane's peer among the endpoint's send peers (for the peers-in-flight gauge).
    pub peer_slot: usize,
    /// One registration per buffer segment (see `schedule`); ops name theirs by index.
    pub mrs: Vec<MrId>,
    pub peer: String,
    pub stats: Arc<LaneStats>,
    inflight: VecDeque<(Request, u32)>,
    /// Staged path: ops whose device-to-host copy is queued (op index, batch).
    staged: VecDeque<(u32, u64)>,
    next: usize,
}

/// A receive comm likewise; completed receives are consumed (irecvConsumed) in FIFO order.
pub struct RecvLane {
    pub comm: RecvComm,
    /// Index of the lane's peer among the endpoint's receive peers.
    pub peer_slot: usize,
    /// One registration per buffer segment, as for sends.
    pub mrs: Vec<MrId>,
    pub peer: String,
    pub stats: Arc<LaneStats>,
    /// Set when the plugin delivers through device unpack (the comm's metadata ring).
    pub unpack: Option<UnpackRing>,
    /// GPUDirect receives the plugin writes to device memory that need `iflush` before the GPU
    /// reads them (see `contracts::needs_flush`).
    pub flush: bool,
    inflight: VecDeque<(Request, u32)>,
    /// Receives done in the plugin whose unpack or staging copy is queued on the GPU
    /// (op index, slot release token, batch); released in order once the batch completes.
    landing: VecDeque<(u32, Option<RecvDone>, u64)>,
    /// Receives completed on this comm since it was opened: the k-th uses metadata slot k % 16.
    completed_total: u64,
    next: usize,
}

impl SendLane {
    pub fn new(comm: SendComm, peer_slot: usize, mrs: Vec<MrId>, peer: String, window: usize) -> Self {
        Self {
            comm,
            peer_slot,
            mrs,
            peer,
            stats: Arc::default(),
            inflight: VecDeque::with_capacity(window),
            staged: VecDeque::with_capacity(window),
            next: 0,
        }
    }
}

impl RecvLane {
    pub fn new(
        comm: RecvComm,
        peer_slot: usize,
        mrs: Vec<MrId>,
        peer: String,
        window: usize,
        unpack: Option<UnpackRing>,
    ) -> Self {
        Self {
            comm,
            peer_slot,
            mrs,
            peer,
            stats: Arc::default(),
            unpack,
            flush: false,
            inflight: VecDeque::with_capacity(window),
            landing: VecDeque::with_capacity(window),
            completed_total: 0,
            next: 0,
        }
    }
}

/// Everything the loop needs besides the lanes.
pub struct LoopContext<'a> {
    pub schedule: &'a Schedule,
    pub window: usize,
    /// Host memory: the threads that do the local copies (fullmesh's own block).
    pub copier: Option<&'a Copier>,
    /// The buffer the plugin reads and writes (host buffer, device buffer, or staging mirror).
    pub base: *mut u8,
    pub epoch: Instant,
    pub deadline: Duration,
    pub abort: &'a AtomicBool,
    /// How to wait between passes that found nothing to do.
    pub poll: PollMode,
}

fn ns_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_nanos().max(1) as u64
}

/// Runs one iteration to completion. `start` is the instant the start signal was received.
/// With `gpu`, the buffer is device memory and receives complete only once their unpack (or
/// staging copy) has run on the GPU. Returns only once no local copy is running (also on errors:
/// the caller reuses the buffer).
pub fn run_iteration(
    ctx: &LoopContext<'_>,
    send: &mut [SendLane],
    recv: &mut [RecvLane],
    state: &mut IterationState,
    gpu: Option<&mut GpuState>,
    start: Instant,
) -> Result<IterationTiming, IterationError> {
    let result = drive(ctx, send, recv, state, gpu, start);
    if let Some(c) = ctx.copier {
        c.wait();
    }
    if result.is_ok() {
        state.keep_fastest();
    }
    result
}

/// The fewest requests in flight on a lane whose next request belongs to the current `round`
/// (the plugin's work in hand when that lane's next post falls due), or `None` when no lane has
/// one: the round's tail. A lane whose next request waits for a later round posts when the
/// current round's last request completes, so it counts as the tail does, not as a lane with
/// nothing in flight (which asked for the loop to wake every 64th of the quiet time, a
/// near-spin through every round of a `--max-peers` schedule: docs/runs/h200x4-20261128-issue43).
fn refill_depth(
    schedule: &Schedule,
    send: &[SendLane],
    recv: &[RecvLane],
    active: &Active,
    round: u32,
) -> Option<usize> {
    let sends = active
        .send
        .lanes
        .iter()
        .map(|&i| i as usize)
        .filter_map(|i| (!done_for_now(&schedule.send[i], send[i].next, round)).then_some(send[i].inflight.len()));
    let recvs = active
        .recv
        .lanes
        .iter()
        .map(|&i| i as usize)
        .filter_map(|i| (!done_for_now(&schedule.recv[i], recv[i].next, round)).then_some(recv[i].inflight.len()));
    sends.chain(recvs).min()
}

fn drive(
    ctx: &LoopContext<'_>,
    send: &mut [SendLane],
    recv: &mut [RecvLane],
    state: &mut IterationState,
    mut gpu: Option<&mut GpuState>,
    start: Instant,
) -> Result<IterationTiming, IterationError> {
    state.reset(ctx.schedule);
    rewind(send, recv);
    let mut clock = Clock {
        last: start,
        delivered: Delivered::default(),
        completions: 0,
    };
    let mut local = LocalCursor::default();
    let mut backoff = Backoff::new(ctx.poll);
    // The current round's stretch: it opened at the completion that closed the round before.
    let (mut stretch_round, mut stretch_start) = (state.current_round(), start);
    state.active.open_through(stretch_round);
    loop {
        let round = state.current_round();
        if round != stretch_round {
            state.close_stretch(stretch_round, clock.last.saturating_duration_since(stretch_start));
            (stretch_round, stretch_start) = (round, clock.last);
            state.active.open_through(round);
        }
        let completed = match gpu.as_deref_mut() {
            Some(g) => g.completed()?,
            None => 0,
        };
        // Local copies (fullmesh's own block) are part of the pattern's time, as nccl-tests'
        // self-send is; on the host they run on the copy threads while this loop keeps driving
        // the network, on the GPU they are one asynchronous copy.
        let mut progressed = pump_local(ctx, &mut local, state, round, gpu.as_deref_mut(), completed, &mut clock)?;
        progressed |= pump_lanes(ctx, send, recv, state, round, gpu.as_deref_mut(), completed, &mut clock)?;
        if let Some(g) = gpu.as_deref_mut() {
            g.end_pass()?;
        }
        if local.is_done(ctx.schedule) && state.active.is_empty() && finished(ctx.schedule, send, recv) {
            state.close_stretch(stretch_round, clock.last.saturating_duration_since(stretch_start));
            break;
        }
        if progressed {
            backoff.progressed();
            continue;
        }
        // The stall clock (and the longest sleep) restarts at every completion (the clock's last
        // one, or the start): a slow but steady iteration is never reported as stalled.
        let now = Instant::now();
        let quiet = now.saturating_duration_since(clock.last);
        let wait = backoff.empty_pass(now, || Outlook {
            elapsed: now.saturating_duration_since(start),
            quiet,
            completions: clock.completions,
            refill_depth: refill_depth(ctx.schedule, send, recv, &state.active, round),
            stretch: now.saturating_duration_since(stretch_start),
            fastest: state.fastest.get(round as usize).copied().flatten(),
        });
        if backoff.check_due(wait) {
            if ctx.abort.load(Ordering::Relaxed) {
                return Err(IterationError::Aborted);
            }
            if quiet > ctx.deadline {
                return Err(IterationError::Stalled(format!(
                    "no completion for {:.1} s (-T {} s); waiting on {}\n{}",
                    quiet.as_secs_f64(),
                    ctx.deadline.as_secs(),
                    waiting_on(send, recv),
                    dump_lanes(ctx.epoch, send, recv)
                )));
            }
        }
        // Oversubscribed hosts (CI runs 4 ranks on 2 cores) need the core back, and the plugin's
        // helper threads need it whenever they have the work. Not while the GPU runs a batch of
        // this loop's (unpack, staging, local copy): it ends within microseconds and releases
        // receives (and their window slots), so the loop polls its event instead of sleeping.
        let gpu_busy = gpu.as_deref().is_some_and(super::gpu::GpuState::busy);
        Backoff::wait(if gpu_busy { Wait::Again } else { wait });
    }
    Ok(IterationTiming {
        elapsed: clock.last.saturating_duration_since(start),
        delivered: clock.delivered,
        peers_in_flight: (state.send_peers.max, state.recv_peers.max),
    })
}

/// The endpoint's last completion and what was delivered so far in this iteration.
struct Clock {
    last: Instant,
    delivered: Delivered,
    /// Completions (requests and local copies) so far.
    completions: u32,
}

impl Clock {
    fn complete(&mut self) {
        self.last = Instant::now();
        self.completions += 1;
    }
}

/// One pass over the active lanes (outcome::Active): receives first, then sends. A lane leaves
/// the list once it holds nothing and has nothing left in this round; its round's opening
/// brings it back.
#[allow(clippy::too_many_arguments)]
fn pump_lanes(
    ctx: &LoopContext<'_>,
    send: &mut [SendLane],
    recv: &mut [RecvLane],
    state: &mut IterationState,
    round: u32,
    mut gpu: Option<&mut GpuState>,
    completed: u64,
    clock: &mut Clock,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    let mut at = 0;
    while let Some(&i) = state.active.recv.lanes.get(at) {
        let (lane, ops) = (&mut recv[i as usize], &ctx.schedule.recv[i as usize]);
        progressed |= retire_landed(lane, ops, state, completed, clock)?;
        progressed |= pump_recv(ctx, lane, ops, state, round, gpu.as_deref_mut(), clock)?;
        if lane.inflight.is_empty() && lane.landing.is_empty() && done_for_now(ops, lane.next, round) {
            state.active.recv.drop(at);
        } else {
            at += 1;
        }
    }
    let mut at = 0;
    while let Some(&i) = state.active.send.lanes.get(at) {
        let (lane, ops) = (&mut send[i as usize], &ctx.schedule.send[i as usize]);
        progressed |= pump_send(ctx, lane, ops, state, round, gpu.as_deref_mut(), completed, clock)?;
        if lane.inflight.is_empty() && lane.staged.is_empty() && done_for_now(ops, lane.next, round) {
            state.active.send.drop(at);
        } else {
            at += 1;
        }
    }
    Ok(progressed)
}

/// A lane whose next op (at `next`) is past the current round, or that has none left.
fn done_for_now<Op: schedule::HasRound>(ops: &[Op], next: usize, round: u32) -> bool {
    ops.get(next).is_none_or(|op| op.round() > round)
}

/// Position in the endpoint's local copies.
#[derive(Default)]
struct LocalCursor {
    copy: usize,
    done: u64,
    /// GPU: the batch the copies were queued under (0 = not queued yet).
    batch: u64,
    /// Host: the current copy was handed to the copy threads.
    started: bool,
}

impl LocalCursor {
    fn is_done(&self, schedule: &Schedule) -> bool {
        self.copy == schedule.local.len()
    }
}

fn pump_local(
    ctx: &LoopContext<'_>,
    cursor: &mut LocalCursor,
    state: &mut IterationState,
    round: u32,
    gpu: Option<&mut GpuState>,
    completed: u64,
    clock: &mut Clock,
) -> Result<bool, IterationError> {
    let Some(copy) = ctx.schedule.local.get(cursor.copy) else {
        return Ok(false);
    };
    if copy.round > round {
        return Ok(false);
    }
    if let Some(g) = gpu {
        if cursor.batch == 0 {
            cursor.batch = g.pending_batch();
            g.queue_local_copy(copy.src_off, copy.dst_off, copy.len)?;
            return Ok(true);
        }
        if cursor.batch > completed {
            return Ok(false);
        }
        cursor.batch = 0;
        cursor.done = copy.len;
    } else {
        let Some(copier) = ctx.copier else {
            return Err(IterationError::LocalCopy(
                "no copy threads for a host-memory local copy".into(),
            ));
        };
        if !cursor.started {
            // SAFETY: both ranges lie inside the endpoint buffer (the plan's layout) and do not
            // overlap (the source is in the send half, the destination in the receive half);
            // nothing else touches the destination, and `run_iteration` waits for the copy
            // before it returns.
            unsafe {
                copier.start(
                    ctx.base.add(copy.src_off as usize),
                    ctx.base.add(copy.dst_off as usize),
                    copy.len as usize,
                );
            }
            cursor.started = true;
            return Ok(true);
        }
        if !copier.is_idle() {
            return Ok(false);
        }
        cursor.started = false;
        cursor.done = copy.len;
    }
    if cursor.done == copy.len {
        clock.complete();
        state.flow_done[copy.flow as usize] = Some(clock.last);
        state.round_left[copy.round as usize] -= 1;
        cursor.copy += 1;
        cursor.done = 0;
    }
    Ok(true)
}

/// The registration of segment `reg`. A zero-length op at the very end of the buffer names the
/// segment after the last one; it lies at the end of the last.
fn segment_mr(mrs: &[MrId], reg: u32) -> MrId {
    mrs[(reg as usize).min(mrs.len() - 1)]
}

fn finished(schedule: &Schedule, send: &[SendLane], recv: &[RecvLane]) -> bool {
    send.iter()
        .zip(&schedule.send)
        .all(|(l, ops)| l.next == ops.len() && l.inflight.is_empty() && l.staged.is_empty())
        && recv
            .iter()
            .zip(&schedule.recv)
            .all(|(l, ops)| l.next == ops.len() && l.inflight.is_empty() && l.landing.is_empty())
}

/// A request was posted on a lane of peer `peer_slot` that had `was_empty` nothing in flight: it
/// is the lane's oldest, and the peer counts as busy in `gauge`.
fn note_post(stats: &LaneStats, gauge: &mut PeerGauge, peer_slot: usize, epoch: Instant, was_empty: bool) {
    if was_empty {
        stats
            .oldest_post_ns
            .store(ns_since(epoch, Instant::now()), Ordering::Relaxed);
        gauge.up(peer_slot);
    }
    stats.posted.fetch_add(1, Ordering::Relaxed);
}

/// After a completion: the oldest outstanding request is now the head of the queue.
fn note_oldest(stats: &LaneStats, epoch: Instant, head: Option<&(Request, u32)>) {
    let oldest = head.map_or(0, |(req, _)| ns_since(epoch, req.posted_at()));
    stats.oldest_post_ns.store(oldest, Ordering::Relaxed);
}

#[allow(clippy::too_many_arguments)]
fn pump_send(
    ctx: &LoopContext<'_>,
    lane: &mut SendLane,
    ops: &[SendOp],
    state: &mut IterationState,
    round: u32,
    mut gpu: Option<&mut GpuState>,
    completed: u64,
    clock: &mut Clock,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    let staged_path = gpu.as_deref().is_some_and(|g| g.path == CudaPath::Staged);
    // Ops become sendable in order: dependencies met and (staged path) copied out of the GPU.
    while lane.inflight.len() + lane.staged.len() < ctx.window && lane.next < ops.len() {
        let op = ops[lane.next];
        let waiting = op
            .dep
            .is_some_and(|(first, last)| !state.received[first as usize..=last as usize].iter().all(|&r| r));
        if op.round > round || waiting {
            break;
        }
        let batch = match gpu.as_deref_mut() {
            Some(g) if staged_path => {
                g.queue_stage_out(op.off, op.len)?;
                g.pending_batch()
            }
            _ => 0,
        };
        lane.staged.push_back((lane.next as u32, batch));
        lane.next += 1;
        progressed = true;
    }
    while let Some(&(idx, batch)) = lane.staged.front() {
        if batch > completed {
            break;
        }
        let op = ops[idx as usize];
        // SAFETY: the range lies inside the registered buffer, which outlives the request.
        let posted = unsafe {
            lane.comm.isend(
                segment_mr(&lane.mrs, op.reg),
                ctx.base.add(op.off as usize),
                op.len as usize,
                0,
            )?
        };
        let Some(req) = posted else { break };
        let first = &mut state.flow_posted[op.flow as usize];
        if first.is_none() {
            *first = Some(Instant::now());
        }
        note_post(
            &lane.stats,
            &mut state.send_peers,
            lane.peer_slot,
            ctx.epoch,
            lane.inflight.is_empty(),
        );
        lane.staged.pop_front();
        lane.inflight.push_back((req, idx));
        progressed = true;
    }
    while let Some((req, idx)) = lane.inflight.pop_front() {
        match lane.comm.test(req)? {
            Poll::Pending(req) => {
                lane.inflight.push_front((req, idx));
                break;
            }
            Poll::Done { .. } => {
                clock.complete();
                if lane.inflight.is_empty() {
                    state.send_peers.down(lane.peer_slot);
                }
                state.round_left[ops[idx as usize].round as usize] -= 1;
                lane.stats.completed.fetch_add(1, Ordering::Relaxed);
                lane.stats.consumed.fetch_add(1, Ordering::Relaxed);
                note_oldest(&lane.stats, ctx.epoch, lane.inflight.front());
                progressed = true;
            }
        }
    }
    Ok(progressed)
}

fn pump_recv(
    ctx: &LoopContext<'_>,
    lane: &mut RecvLane,
    ops: &[RecvOp],
    state: &mut IterationState,
    round: u32,
    mut gpu: Option<&mut GpuState>,
    clock: &mut Clock,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    // A receive holds its plugin slot until it is consumed, so landing receives count too.
    while lane.inflight.len() + lane.landing.len() < ctx.window && lane.next < ops.len() {
        let op = ops[lane.next];
        if op.round > round {
            break;
        }
        // SAFETY: the range lies inside the registered buffer, which outlives the request.
        let posted = unsafe {
            lane.comm.irecv(
                segment_mr(&lane.mrs, op.reg),
                ctx.base.add(op.off as usize),
                op.len as usize,
                0,
            )?
        };
        let Some(req) = posted else { break };
        note_post(
            &lane.stats,
            &mut state.recv_peers,
            lane.peer_slot,
            ctx.epoch,
            lane.inflight.is_empty(),
        );
        lane.inflight.push_back((req, lane.next as u32));
        lane.next += 1;
        progressed = true;
    }
    while let Some((req, idx)) = lane.inflight.pop_front() {
        match lane.comm.test(req)? {
            Poll::Pending(req) => {
                lane.inflight.push_front((req, idx));
                break;
            }
            Poll::Done { size, recv: done } => {
                if lane.inflight.is_empty() {
                    state.recv_peers.down(lane.peer_slot);
                }
                let op = ops[idx as usize];
                match size {
                    Some(got) if got as u64 != op.len => {
                        return Err(IterationError::SizeMismatch {
                            peer: lane.peer.clone(),
                            source: "the plugin reported",
                            expected: op.len,
                            got: got as u64,
                        });
                    }
                    Some(got) => clock.delivered.reported += got as u64,
                    None => clock.delivered.reported_missed += 1,
                }
                lane.stats.completed.fetch_add(1, Ordering::Relaxed);
                if lane.flush && op.len > 0 {
                    let deadline = Instant::now() + ctx.deadline;
                    // SAFETY: the receive just completed into this range of the registration.
                    unsafe {
                        lane.comm.flush(
                            segment_mr(&lane.mrs, op.reg),
                            ctx.base.add(op.off as usize),
                            op.len as usize,
                            deadline,
                        )?;
                    };
                }
                let k = lane.completed_total;
                lane.completed_total += 1;
                progressed = true;
                // Bytes that still have to reach the device buffer are queued on the GPU; the
                // receive counts as delivered (and its slot is released) when that has run.
                let queued = queue_to_device(lane, op, k, gpu.as_deref_mut(), clock)?;
                if lane.unpack.is_none() {
                    clock.delivered.unpacked_missed += 1;
                }
                match queued {
                    Some(batch) => lane.landing.push_back((idx, done, batch)),
                    None => deliver(lane, op, done, state, clock)?,
                }
                note_oldest(&lane.stats, ctx.epoch, lane.inflight.front());
            }
        }
    }
    Ok(progressed)
}

/// Queues a completed receive's bytes on the GPU when they still have to reach the device
/// buffer (device unpack, or staging); the GPU batch it waits for, or `None` when the bytes are
/// already in the user buffer.
#[inline]
fn queue_to_device(
    lane: &RecvLane,
    op: RecvOp,
    k: u64,
    gpu: Option<&mut GpuState>,
    clock: &mut Clock,
) -> Result<Option<u64>, IterationError> {
    let Some(g) = gpu else { return Ok(None) };
    Ok(match lane.unpack {
        Some(ring) => {
            // The descriptors say where every received byte lies: they must
            // cover the receive exactly.
            let described = ring.descriptor_bytes(k);
            if described != op.len {
                return Err(IterationError::SizeMismatch {
                    peer: lane.peer.clone(),
                    source: "the unpack descriptors cover",
                    expected: op.len,
                    got: described,
                });
            }
            clock.delivered.unpacked += described;
            g.queue_unpack(ring.job(k, g.dev_base() + op.off, op.len)?)?;
            Some(g.pending_batch())
        }
        None if g.path == CudaPath::Staged => {
            g.queue_stage_in(op.off, op.len)?;
            Some(g.pending_batch())
        }
        None => None,
    })
}

/// Releases, in order, the landing receives whose GPU batch has completed.
fn retire_landed(
    lane: &mut RecvLane,
    ops: &[RecvOp],
    state: &mut IterationState,
    completed: u64,
    clock: &mut Clock,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    while lane.landing.front().is_some_and(|l| l.2 <= completed) {
        let (idx, done, _) = lane.landing.pop_front().expect("front exists");
        deliver(lane, ops[idx as usize], done, state, clock)?;
        progressed = true;
    }
    Ok(progressed)
}

/// The receive's bytes are in the destination buffer: release the plugin slot (irecvConsumed,
/// in FIFO order) and record the delivery.
fn deliver(
    lane: &mut RecvLane,
    op: RecvOp,
    done: Option<RecvDone>,
    state: &mut IterationState,
    clock: &mut Clock,
) -> Result<(), IterationError> {
    if let Some(done) = done {
        lane.comm.consume(done)?;
    }
    lane.stats.consumed.fetch_add(1, Ordering::Relaxed);
    clock.complete();
    clock.delivered.receives += 1;
    clock.delivered.planned += op.len;
    state.received[op.slot as usize] = true;
    state.flow_done[op.flow as usize] = Some(clock.last);
    state.round_left[op.round as usize] -= 1;
    Ok(())
}

/// Comms with requests outstanding that the dump lists one by one; the rest are counted.
const DUMP_OUTSTANDING: usize = 32;

/// The comms' state for a stall: a line per comm with requests outstanding (peer,
/// posted/completed/consumed counts, age of the oldest request; the first [`DUMP_OUTSTANDING`],
/// then a count), and the idle ones counted by kind and counts. A 512-rank fullmesh has 2016
/// comms a rank; a line for each from every rank at once was 50 MB of console.
pub fn dump_stats<'a>(epoch: Instant, lanes: impl Iterator<Item = (&'static str, &'a str, &'a LaneStats)>) -> String {
    let now_ns = ns_since(epoch, Instant::now());
    let mut out = String::new();
    // Idle comms by (kind, posted, completed, consumed), with their count.
    type Counts<'k> = (&'k str, u64, u64, u64);
    let mut idle: Vec<(Counts<'_>, usize)> = Vec::new();
    let mut listed = 0usize;
    let mut unlisted = 0usize;
    for (kind, peer, s) in lanes {
        let oldest = s.oldest_post_ns.load(Ordering::Relaxed);
        let counts = (
            s.posted.load(Ordering::Relaxed),
            s.completed.load(Ordering::Relaxed),
            s.consumed.load(Ordering::Relaxed),
        );
        if oldest == 0 {
            let key = (kind, counts.0, counts.1, counts.2);
            match idle.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => idle.push((key, 1)),
            }
            continue;
        }
        if listed == DUMP_OUTSTANDING {
            unlisted += 1;
            continue;
        }
        listed += 1;
        let _ = writeln!(
            out,
            "  {kind} comm with {peer}: posted {} completed {} consumed {}, oldest request {:.1} s old",
            counts.0,
            counts.1,
            counts.2,
            now_ns.saturating_sub(oldest) as f64 / 1e9
        );
    }
    if unlisted > 0 {
        let _ = writeln!(out, "  ... and {unlisted} more comm(s) with requests outstanding");
    }
    for ((kind, posted, completed, consumed), n) in idle {
        let _ = writeln!(
            out,
            "  {n} {kind} comm(s) with none outstanding: posted {posted} completed {completed} consumed {consumed}"
        );
    }
    out
}

/// The comms with requests outstanding, for the stall's one-line diagnosis: `recv from rank 1
/// gpu 1 (node0) over eth2, send to ...` (each peer and NIC once, whatever the channels).
fn waiting_on(send: &[SendLane], recv: &[RecvLane]) -> String {
    let outstanding = |s: &LaneStats| s.oldest_post_ns.load(Ordering::Relaxed) != 0;
    let mut named: Vec<String> = Vec::new();
    let lanes = send
        .iter()
        .filter(|l| outstanding(&l.stats))
        .map(|l| format!("send to {}", l.peer))
        .chain(
            recv.iter()
                .filter(|l| outstanding(&l.stats))
                .map(|l| format!("recv from {}", l.peer)),
        );
    for lane in lanes {
        if !named.contains(&lane) {
            named.push(lane);
        }
    }
    if named.is_empty() {
        "no comm (every posted request completed)".to_string()
    } else {
        named.join(", ")
    }
}

fn dump_lanes(epoch: Instant, send: &[SendLane], recv: &[RecvLane]) -> String {
    dump_stats(
        epoch,
        send.iter()
            .map(|l| ("send", l.peer.as_str(), &*l.stats))
            .chain(recv.iter().map(|l| ("recv", l.peer.as_str(), &*l.stats))),
    )
}

/// Resets the lanes' op cursors for a new iteration.
fn rewind(send: &mut [SendLane], recv: &mut [RecvLane]) {
    for l in send {
        debug_assert!(l.inflight.is_empty());
        l.next = 0;
    }
    for l in recv {
        debug_assert!(l.inflight.is_empty());
        l.next = 0;
    }
}
