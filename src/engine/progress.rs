//! The progress loop: posts chunks and tests the head of every comm until the iteration is done.
//!
//! GPUDirect-TCPX only makes progress inside `test` (its caller thread runs the control protocol),
//! so one loop keeps testing the oldest request of every comm, sender and receiver alike. Posts
//! are bounded by the window, and a post that returns no request is simply retried on the next
//! pass. Nothing here allocates or logs: the op vectors were built before the clock started, and
//! the in-flight queues were sized for the window.

use super::schedule::{RecvOp, Schedule, SendOp};
use nccl_net::{MrId, Poll, RecvComm, RecvDone, Request, SendComm};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters a lane publishes for the stall dump (read by the watchdog thread).
#[derive(Debug, Default)]
pub struct LaneStats {
    pub posted: AtomicU64,
    pub completed: AtomicU64,
    pub consumed: AtomicU64,
    /// Nanoseconds since the run's epoch at which the oldest outstanding request was posted, or 0.
    pub oldest_post_ns: AtomicU64,
}

/// A send comm with its registration, its ops for this size and its in-flight requests.
pub struct SendLane {
    pub comm: SendComm,
    pub mr: MrId,
    pub peer: String,
    pub stats: Arc<LaneStats>,
    inflight: VecDeque<(Request, u32)>,
    next: usize,
}

/// A receive comm likewise; completed receives are consumed (irecvConsumed) in FIFO order.
pub struct RecvLane {
    pub comm: RecvComm,
    pub mr: MrId,
    pub peer: String,
    pub stats: Arc<LaneStats>,
    inflight: VecDeque<(Request, u32)>,
    next: usize,
}

impl SendLane {
    pub fn new(comm: SendComm, mr: MrId, peer: String, window: usize) -> Self {
        Self {
            comm,
            mr,
            peer,
            stats: Arc::default(),
            inflight: VecDeque::with_capacity(window),
            next: 0,
        }
    }
}

impl RecvLane {
    pub fn new(comm: RecvComm, mr: MrId, peer: String, window: usize) -> Self {
        Self {
            comm,
            mr,
            peer,
            stats: Arc::default(),
            inflight: VecDeque::with_capacity(window),
            next: 0,
        }
    }
}

/// What one endpoint measured in one iteration.
#[derive(Debug, Clone, Copy, Default)]
pub struct IterationTiming {
    /// From the start signal to the endpoint's last completion.
    pub elapsed: Duration,
    /// Network bytes received (as completed receives report them).
    pub bytes_received: u64,
}

/// Why an iteration did not finish.
#[derive(Debug)]
pub enum IterationError {
    Plugin(nccl_net::NetError),
    /// The deadline passed; the string is the per-comm state dump.
    Stalled(String),
    /// Another worker of this rank failed and asked everyone to stop.
    Aborted,
    /// A receive completed with a size other than the one planned.
    SizeMismatch {
        peer: String,
        expected: u64,
        got: usize,
    },
}

impl std::fmt::Display for IterationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IterationError::Plugin(e) => write!(f, "{e}"),
            IterationError::Stalled(dump) => write!(f, "no progress before the -T deadline\n{dump}"),
            IterationError::Aborted => write!(f, "stopped because another worker failed"),
            IterationError::SizeMismatch { peer, expected, got } => {
                write!(
                    f,
                    "receive from {peer} completed with {got} bytes, {expected} were planned"
                )
            }
        }
    }
}

impl From<nccl_net::NetError> for IterationError {
    fn from(e: nccl_net::NetError) -> Self {
        IterationError::Plugin(e)
    }
}

/// Per-iteration mutable state, allocated once per size (not per iteration).
pub struct IterationState {
    pub received: Vec<bool>,
    pub flow_done: Vec<Option<Instant>>,
    pub round_left: Vec<u32>,
}

impl IterationState {
    pub fn new(schedule: &Schedule, flows: usize) -> Self {
        Self {
            received: vec![false; schedule.recv_slots],
            flow_done: vec![None; flows],
            round_left: schedule.ops_per_round.clone(),
        }
    }

    fn reset(&mut self, schedule: &Schedule) {
        self.received.fill(false);
        self.flow_done.fill(None);
        self.round_left.copy_from_slice(&schedule.ops_per_round);
    }

    fn current_round(&self) -> u32 {
        self.round_left
            .iter()
            .position(|&left| left > 0)
            .unwrap_or(self.round_left.len()) as u32
    }
}

/// Everything the loop needs besides the lanes.
pub struct LoopContext<'a> {
    pub schedule: &'a Schedule,
    pub window: usize,
    /// Bytes of local copy done per pass of the loop (the chunk size).
    pub local_step: u64,
    pub base: *mut u8,
    pub epoch: Instant,
    pub deadline: Duration,
    pub abort: &'a AtomicBool,
}

fn ns_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_nanos().max(1) as u64
}

/// Runs one iteration to completion. `start` is the instant the start signal was received.
pub fn run_iteration(
    ctx: &LoopContext<'_>,
    send: &mut [SendLane],
    recv: &mut [RecvLane],
    state: &mut IterationState,
    start: Instant,
) -> Result<IterationTiming, IterationError> {
    state.reset(ctx.schedule);
    rewind(send, recv);
    let mut last = start;
    let mut bytes = 0u64;

    let mut local = LocalCursor::default();
    let mut idle_passes = 0u32;
    loop {
        let mut progressed = false;
        let round = state.current_round();
        // Local copies (fullmesh's own block) are part of the pattern's time, as nccl-tests'
        // self-send is; they advance one step per pass so the network keeps being driven.
        progressed |= pump_local(ctx, &mut local, state, round, &mut last);
        for (lane, ops) in recv.iter_mut().zip(&ctx.schedule.recv) {
            progressed |= pump_recv(ctx, lane, ops, state, round, &mut last, &mut bytes)?;
        }
        for (lane, ops) in send.iter_mut().zip(&ctx.schedule.send) {
            progressed |= pump_send(ctx, lane, ops, state, round, &mut last)?;
        }
        if local.copy == ctx.schedule.local.len() && finished(ctx.schedule, send, recv) {
            break;
        }
        if progressed {
            idle_passes = 0;
            continue;
        }
        idle_passes += 1;
        if idle_passes % 64 == 0 {
            // Oversubscribed hosts (CI runs 4 ranks on 2 cores) need the core back.
            std::thread::yield_now();
            if ctx.abort.load(Ordering::Relaxed) {
                return Err(IterationError::Aborted);
            }
            if start.elapsed() > ctx.deadline {
                return Err(IterationError::Stalled(dump_lanes(ctx.epoch, send, recv)));
            }
        }
    }
    Ok(IterationTiming {
        elapsed: last.saturating_duration_since(start),
        bytes_received: bytes,
    })
}

/// Position in the endpoint's local copies.
#[derive(Default)]
struct LocalCursor {
    copy: usize,
    done: u64,
}

fn pump_local(
    ctx: &LoopContext<'_>,
    cursor: &mut LocalCursor,
    state: &mut IterationState,
    round: u32,
    last: &mut Instant,
) -> bool {
    let Some(copy) = ctx.schedule.local.get(cursor.copy) else {
        return false;
    };
    if copy.round > round {
        return false;
    }
    let step = (copy.len - cursor.done).min(ctx.local_step);
    // SAFETY: both ranges lie inside the endpoint buffer (the plan's layout) and do not overlap:
    // the source is in the send half, the destination in the receive half.
    unsafe {
        std::ptr::copy_nonoverlapping(
            ctx.base.add((copy.src_off + cursor.done) as usize),
            ctx.base.add((copy.dst_off + cursor.done) as usize),
            step as usize,
        );
    }
    cursor.done += step;
    if cursor.done == copy.len {
        *last = Instant::now();
        state.flow_done[copy.flow as usize] = Some(*last);
        state.round_left[copy.round as usize] -= 1;
        cursor.copy += 1;
        cursor.done = 0;
    }
    true
}

fn finished(schedule: &Schedule, send: &[SendLane], recv: &[RecvLane]) -> bool {
    send.iter()
        .zip(&schedule.send)
        .all(|(l, ops)| l.next == ops.len() && l.inflight.is_empty())
        && recv
            .iter()
            .zip(&schedule.recv)
            .all(|(l, ops)| l.next == ops.len() && l.inflight.is_empty())
}

fn pump_send(
    ctx: &LoopContext<'_>,
    lane: &mut SendLane,
    ops: &[SendOp],
    state: &mut IterationState,
    round: u32,
    last: &mut Instant,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    while lane.inflight.len() < ctx.window && lane.next < ops.len() {
        let op = ops[lane.next];
        if op.round > round || op.dep.is_some_and(|slot| !state.received[slot as usize]) {
            break;
        }
        // SAFETY: the range lies inside the registered endpoint buffer, which outlives the request.
        let posted = unsafe {
            lane.comm
                .isend(lane.mr, ctx.base.add(op.off as usize), op.len as usize, 0)?
        };
        let Some(req) = posted else { break };
        if lane.inflight.is_empty() {
            lane.stats
                .oldest_post_ns
                .store(ns_since(ctx.epoch, Instant::now()), Ordering::Relaxed);
        }
        lane.inflight.push_back((req, lane.next as u32));
        lane.next += 1;
        lane.stats.posted.fetch_add(1, Ordering::Relaxed);
        progressed = true;
    }
    while let Some((req, idx)) = lane.inflight.pop_front() {
        match lane.comm.test(req)? {
            Poll::Pending(req) => {
                lane.inflight.push_front((req, idx));
                break;
            }
            Poll::Done { .. } => {
                *last = Instant::now();
                state.round_left[ops[idx as usize].round as usize] -= 1;
                lane.stats.completed.fetch_add(1, Ordering::Relaxed);
                lane.stats.consumed.fetch_add(1, Ordering::Relaxed);
                let oldest = if lane.inflight.is_empty() {
                    0
                } else {
                    ns_since(ctx.epoch, *last)
                };
                lane.stats.oldest_post_ns.store(oldest, Ordering::Relaxed);
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
    last: &mut Instant,
    bytes: &mut u64,
) -> Result<bool, IterationError> {
    let mut progressed = false;
    while lane.inflight.len() < ctx.window && lane.next < ops.len() {
        let op = ops[lane.next];
        if op.round > round {
            break;
        }
        // SAFETY: the range lies inside the registered endpoint buffer, which outlives the request.
        let posted = unsafe {
            lane.comm
                .irecv(lane.mr, ctx.base.add(op.off as usize), op.len as usize, 0)?
        };
        let Some(req) = posted else { break };
        if lane.inflight.is_empty() {
            lane.stats
                .oldest_post_ns
                .store(ns_since(ctx.epoch, Instant::now()), Ordering::Relaxed);
        }
        lane.inflight.push_back((req, lane.next as u32));
        lane.next += 1;
        lane.stats.posted.fetch_add(1, Ordering::Relaxed);
        progressed = true;
    }
    while let Some((req, idx)) = lane.inflight.pop_front() {
        match lane.comm.test(req)? {
            Poll::Pending(req) => {
                lane.inflight.push_front((req, idx));
                break;
            }
            Poll::Done { size, recv: done } => {
                let op = ops[idx as usize];
                if let Some(got) = size {
                    if got as u64 != op.len {
                        return Err(IterationError::SizeMismatch {
                            peer: lane.peer.clone(),
                            expected: op.len,
                            got,
                        });
                    }
                }
                lane.stats.completed.fetch_add(1, Ordering::Relaxed);
                consume(lane, done)?;
                *last = Instant::now();
                *bytes += op.len;
                state.received[op.slot as usize] = true;
                state.flow_done[op.flow as usize] = Some(*last);
                state.round_left[op.round as usize] -= 1;
                let oldest = if lane.inflight.is_empty() {
                    0
                } else {
                    ns_since(ctx.epoch, *last)
                };
                lane.stats.oldest_post_ns.store(oldest, Ordering::Relaxed);
                progressed = true;
            }
        }
    }
    Ok(progressed)
}

/// Host memory is usable as soon as the receive completes, so the slot is released at once, in
/// completion (= FIFO) order. Device-unpack delivery releases it after the unpack kernel instead.
fn consume(lane: &mut RecvLane, done: Option<RecvDone>) -> Result<(), IterationError> {
    if let Some(done) = done {
        lane.comm.consume(done)?;
    }
    lane.stats.consumed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// One line per comm: peer, posted/completed/consumed counts, age of the oldest request.
pub fn dump_stats<'a>(epoch: Instant, lanes: impl Iterator<Item = (&'static str, &'a str, &'a LaneStats)>) -> String {
    let now_ns = ns_since(epoch, Instant::now());
    let mut out = String::new();
    for (kind, peer, s) in lanes {
        let oldest = s.oldest_post_ns.load(Ordering::Relaxed);
        let age = if oldest == 0 {
            "none outstanding".to_string()
        } else {
            format!("oldest request {:.1} s old", now_ns.saturating_sub(oldest) as f64 / 1e9)
        };
        let _ = writeln!(
            out,
            "  {kind} comm with {peer}: posted {} completed {} consumed {}, {age}",
            s.posted.load(Ordering::Relaxed),
            s.completed.load(Ordering::Relaxed),
            s.consumed.load(Ordering::Relaxed),
        );
    }
    out
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
