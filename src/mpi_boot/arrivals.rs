//! Barriers with a deadline that know who did not come, and the timeout's reports.
//!
//! A blocking `MPI_Barrier` whose peer is stopped never returns, and says nothing about who is
//! missing. Here every bounded barrier is an `MPI_Ibarrier` polled until `-T`, and each rank
//! other than 0 first sends rank 0 a heartbeat, the barrier's sequence number, on a communicator
//! of its own: rank 0 drains them while it waits, so when the deadline passes it knows exactly
//! which ranks had not arrived. After a timeout every rank that can still speak sends rank 0 a
//! one-line account; rank 0 waits a short grace for them, and a rank that neither arrived nor
//! answered is named as silent (stopped, hung or unreachable). Only the main thread calls MPI.

use crate::collectives::{BarrierError, PeerFailure};
use mpi::point_to_point::MatchedReceiveVec;
use mpi::request::{Request, Scope, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Destination, Source};
use mpi::Tag;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

const ARRIVED: Tag = 1;
const REPORT: Tag = 2;
/// The start of a report that is an error, not a timeout's account: then the phase, [`SEP`], the
/// error.
const FAILED: &str = "\u{1}failed: ";
const SEP: char = '\u{1f}';
/// The start of a report that a process other than the launcher signalled the rank: then the
/// signal, [`SEP`], the sender.
const SIGNALLED: &str = "\u{1}signalled: ";
/// The start of a report that the rank is alive and ending on its launcher's signal (mpirun
/// ending the job): a rank that cannot send it (killed, stopped) is silent.
const ENDING: &str = "\u{1}ending";
/// How often rank 0 looks for reports while it waits in a collective.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// What rank 0 learned after its timeout.
#[derive(Debug, Default)]
pub struct TimeoutReports {
    /// Ranks that had not arrived at the barrier rank 0 last waited in (empty when rank 0 was not
    /// waiting in one).
    pub absent: Vec<usize>,
    /// Ranks that sent no account within the grace period.
    pub silent: Vec<usize>,
    /// Every other rank's account, in rank order.
    pub reports: Vec<(usize, String)>,
}

/// What rank 0 does with each error another rank reports.
pub(super) type OnFailure = Box<dyn Fn(&PeerFailure)>;
/// What rank 0 does when another rank says it is alive and ending on the launcher's signal.
pub(super) type OnEnding = Box<dyn Fn(usize)>;

/// When rank 0 last took the other ranks' reports (milliseconds since [`EPOCH`]): the signal
/// thread, waiting for accounts, knows whether the main thread is taking them.
static LAST_DRAIN_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn since_epoch(t: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(t.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

/// Rank 0: whether the main thread took the other ranks' reports at `t` or later.
pub fn drained_since(t: Instant) -> bool {
    LAST_DRAIN_MS.load(std::sync::atomic::Ordering::SeqCst) >= since_epoch(t).max(1)
}
/// What rank 0 does when another rank says who signalled it: rank, signal, sender.
pub(super) type OnSignalled = Box<dyn Fn(usize, &str, &str)>;

pub(super) struct Arrivals {
    comm: SimpleCommunicator,
    /// Bounded barriers entered so far (the same count on every rank).
    seq: Cell<u64>,
    /// Rank 0: the last barrier each rank announced.
    seen: RefCell<Vec<u64>>,
    /// Rank 0: each rank's account of its timeout.
    accounts: RefCell<Vec<Option<String>>>,
    /// Rank 0: the first rank that reported an error, and the error.
    failure: RefCell<Option<PeerFailure>>,
    /// Rank 0: told of that first error as soon as it is taken (on the main thread), so that the
    /// record says it even if the job ends while rank 0 still waits.
    on_failure: RefCell<Option<OnFailure>>,
    /// Rank 0: told when another rank reports the signal that stops it.
    on_signalled: RefCell<Option<OnSignalled>>,
    /// Rank 0: told when another rank says it is ending on the launcher's signal.
    on_ending: RefCell<Option<OnEnding>>,
    /// Non-root: this rank has told rank 0 who signalled it (or that it is ending).
    told_signal: Cell<bool>,
    /// Rank 0: the barrier that timed out, if one did.
    timed_out: Cell<Option<u64>>,
    /// Sends still in flight (their buffers are leaked: a few bytes per barrier).
    sends: RefCell<Vec<Request<'static, [u8], StaticScope>>>,
}

impl Arrivals {
    pub(super) fn new(world: &SimpleCommunicator) -> Arrivals {
        let ranks = world.size() as usize;
        Arrivals {
            comm: world.duplicate(),
            seq: Cell::new(0),
            seen: RefCell::new(vec![0; ranks]),
            accounts: RefCell::new(vec![None; ranks]),
            failure: RefCell::new(None),
            on_failure: RefCell::new(None),
            on_signalled: RefCell::new(None),
            on_ending: RefCell::new(None),
            told_signal: Cell::new(false),
            timed_out: Cell::new(None),
            sends: RefCell::new(Vec::new()),
        }
    }

    /// A barrier over `world` that gives up after `limit`; on rank 0 the error lists the ranks
    /// that had not arrived (empty on the others, which cannot know).
    pub(super) fn barrier_within(&self, world: &SimpleCommunicator, limit: Duration) -> Result<(), BarrierError> {
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        let root = self.comm.rank() == 0;
        if !root {
            self.post(ARRIVED, seq.to_le_bytes().to_vec());
        }
        let started = Instant::now();
        let mut request = world.immediate_barrier();
        loop {
            request = match request.test() {
                Ok(_) => return Ok(()),
                Err(pending) => pending,
            };
            if root {
                self.drain();
                if let Some(f) = self.failure.borrow().clone() {
                    std::mem::forget(request);
                    return Err(BarrierError::PeerFailed {
                        rank: f.rank,
                        message: f.error,
                    });
                }
            } else {
                self.tell_if_signalled();
            }
            let waited = started.elapsed();
            if waited >= limit {
                // The barrier can never be completed now; the job ends after the timeout's reports.
                std::mem::forget(request);
                if !root {
                    return Err(BarrierError::TimedOut { absent: Vec::new() });
                }
                self.timed_out.set(Some(seq));
                return Err(BarrierError::TimedOut {
                    absent: self.absent(seq),
                });
            }
            pause(waited);
        }
    }

    /// Waits for `request` (a collective or a transfer) as a blocking call would; rank 0 takes
    /// the other ranks' reports meanwhile, so that an error of a rank that will never join is
    /// known (and recorded, see [`Arrivals::on_failure`]) before mpirun ends the job.
    pub(super) fn wait<'a, D: ?Sized, S: Scope<'a>>(&self, mut request: Request<'a, D, S>) {
        let root = self.comm.rank() == 0;
        let started = Instant::now();
        let mut drained = started;
        loop {
            request = match request.test() {
                Ok(_) => return,
                Err(pending) => pending,
            };
            if root && drained.elapsed() >= DRAIN_EVERY {
                self.drain();
                drained = Instant::now();
            } else if !root {
                self.tell_if_signalled();
            }
            pause(started.elapsed());
        }
    }

    /// Rank 0: `f` runs (on the main thread) when an error of another rank arrives.
    pub(super) fn on_failure(&self, f: OnFailure) {
        *self.on_failure.borrow_mut() = Some(f);
    }

    /// Rank 0: `f` runs (on the main thread) when another rank reports who signalled it.
    pub(super) fn on_signalled(&self, f: OnSignalled) {
        *self.on_signalled.borrow_mut() = Some(f);
    }

    /// Rank 0: `f` runs (on the main thread) when another rank says it is ending on the
    /// launcher's signal.
    pub(super) fn on_ending(&self, f: OnEnding) {
        *self.on_ending.borrow_mut() = Some(f);
    }

    /// Non-root, once: when a process other than the launcher signalled this rank, sends rank 0
    /// the signal and its sender; when the launcher did, that this rank is alive and ending (a
    /// rank that cannot say so is silent). The signal thread cannot call MPI, so the main
    /// thread does, wherever it waits, while the signal thread lingers.
    pub(super) fn tell_if_signalled(&self) {
        if self.told_signal.get() || self.comm.rank() == 0 {
            return;
        }
        if let Some((signal, from)) = crate::signals::signalled_by_other() {
            self.told_signal.set(true);
            self.report(&format!("{SIGNALLED}{signal}{SEP}{from}"));
        } else if crate::signals::ending().is_some_and(|e| e.by_launcher) {
            self.told_signal.set(true);
            self.report(ENDING);
        }
    }

    /// If a signal is ending this process, never returns: other ranks tell rank 0 they are
    /// ending (with `failed`, their phase and error, if they have one) and wait for the signal
    /// thread to end the process; rank 0 takes the others' reports until its signal thread,
    /// which waits for them, has written the record and ends the process.
    pub(super) fn hold_if_ending(&self, failed: Option<(&str, &str)>) {
        if !crate::signals::is_ending() {
            return;
        }
        if self.comm.rank() != 0 {
            self.tell_if_signalled();
            if let Some((phase, error)) = failed {
                self.report_failure(phase, error.lines().next().unwrap_or(error));
            }
            crate::signals::hold_if_ending();
        }
        loop {
            self.drain();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Ranks other than 0 whose last announced barrier is before `seq`.
    fn absent(&self, seq: u64) -> Vec<usize> {
        let seen = self.seen.borrow();
        (1..seen.len()).filter(|&r| seen[r] < seq).collect()
    }

    /// Non-root: sends rank 0 this rank's error and the phase it failed in.
    pub(super) fn report_failure(&self, phase: &str, error: &str) {
        self.report(&format!("{FAILED}{phase}{SEP}{error}"));
    }

    /// Non-root: sends rank 0 this rank's account of its timeout.
    pub(super) fn report(&self, message: &str) {
        if self.comm.rank() != 0 {
            self.post(REPORT, message.as_bytes().to_vec());
            // Push it out: the caller will only sleep after this.
            let deadline = Instant::now() + Duration::from_millis(200);
            while !self.sends.borrow().is_empty() && Instant::now() < deadline {
                self.complete_sends();
                std::thread::yield_now();
            }
        }
    }

    /// Rank 0: waits up to `grace` for every other rank's account.
    pub(super) fn reports(&self, grace: Duration) -> TimeoutReports {
        let ranks = self.comm.size() as usize;
        let started = Instant::now();
        loop {
            self.drain();
            let all = self.accounts.borrow().iter().skip(1).all(Option::is_some);
            if all || started.elapsed() >= grace {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let accounts = self.accounts.borrow();
        TimeoutReports {
            absent: self.timed_out.get().map(|seq| self.absent(seq)).unwrap_or_default(),
            silent: (1..ranks).filter(|&r| accounts[r].is_none()).collect(),
            reports: (1..ranks).filter_map(|r| accounts[r].clone().map(|m| (r, m))).collect(),
        }
    }

    /// Rank 0: the first error another rank reported.
    pub(super) fn reported_failure(&self) -> Option<PeerFailure> {
        if self.comm.rank() == 0 {
            self.drain();
        }
        self.failure.borrow().clone()
    }

    /// Rank 0: takes every heartbeat and account that has arrived.
    fn drain(&self) {
        LAST_DRAIN_MS.store(since_epoch(Instant::now()), std::sync::atomic::Ordering::SeqCst);
        while let Some(message) = self.comm.any_process().immediate_matched_probe_with_tag(ARRIVED) {
            let (bytes, status) = message.matched_receive_vec::<u8>();
            let seq = bytes
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes);
            let mut seen = self.seen.borrow_mut();
            if let Some(slot) = seen.get_mut(status.source_rank() as usize) {
                *slot = (*slot).max(seq);
            }
        }
        while let Some(message) = self.comm.any_process().immediate_matched_probe_with_tag(REPORT) {
            let (bytes, status) = message.matched_receive_vec::<u8>();
            let rank = status.source_rank() as usize;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(failed) = text.strip_prefix(FAILED) {
                let (phase, error) = failed.split_once(SEP).unwrap_or(("", failed));
                let reported = PeerFailure {
                    rank,
                    phase: phase.to_string(),
                    error: error.to_string(),
                };
                if self.failure.borrow().is_none() {
                    *self.failure.borrow_mut() = Some(reported.clone());
                }
                if let Some(tell) = self.on_failure.borrow().as_ref() {
                    tell(&reported);
                }
            } else if text == ENDING {
                if let Some(tell) = self.on_ending.borrow().as_ref() {
                    tell(rank);
                }
            } else if let Some(signalled) = text.strip_prefix(SIGNALLED) {
                let (signal, from) = signalled.split_once(SEP).unwrap_or((signalled, ""));
                if let Some(tell) = self.on_signalled.borrow().as_ref() {
                    tell(rank, signal, from);
                }
            } else if let Some(slot) = self.accounts.borrow_mut().get_mut(rank) {
                *slot = Some(text);
            }
        }
    }

    fn post(&self, tag: Tag, bytes: Vec<u8>) {
        self.complete_sends();
        let buf: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let request = self
            .comm
            .process_at_rank(0)
            .immediate_send_with_tag(StaticScope, buf, tag);
        self.sends.borrow_mut().push(request);
    }

    fn complete_sends(&self) {
        let pending: Vec<_> = self.sends.borrow_mut().drain(..).collect();
        let still: Vec<_> = pending.into_iter().filter_map(|r| r.test().err()).collect();
        self.sends.borrow_mut().extend(still);
    }
}

/// How long a wait only yields between polls.
const YIELD_FOR: Duration = Duration::from_millis(1);
/// The longest sleep between polls of a long wait.
const MAX_PAUSE: Duration = Duration::from_millis(1);

/// Between polls of a wait: yield the core at first (as Open MPI does when oversubscribed), so
/// that a short barrier's exit skew stays an iteration's start skew; past [`YIELD_FOR`] sleep a
/// 64th of the time waited so far (at most [`MAX_PAUSE`]), so a rank leaves the barrier at most
/// a 64th of its wait late: the clock's own precision (tcpx-perf times an iteration to a 64th),
/// for a few hundred wake-ups where yielding took one per scheduler pass. At 16 x 8 x 4 the
/// ranks that finished an 8 MiB iteration first yielded for up to 50 ms, then slept 100 us at a
/// time, while waiting for the slowest: 3.2 CPU-s per GB moved, 40% of the job's CPU
/// (docs/cpu.md).
fn pause(waited: Duration) {
    match sleep_between_polls(waited) {
        None => std::thread::yield_now(),
        Some(d) => std::thread::sleep(d),
    }
}

/// [`pause`]'s rule: None to yield, else how long to sleep.
fn sleep_between_polls(waited: Duration) -> Option<Duration> {
    (waited >= YIELD_FOR).then(|| (waited / 64).min(MAX_PAUSE))
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        // A heartbeat rank 0 never took must not hold up (or panic) the end of the process.
        self.complete_sends();
        for request in self.sends.get_mut().drain(..) {
            std::mem::forget(request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short wait yields; a longer one sleeps a 64th of it, never more than 1 ms; and a wait of
    /// a second polls a few hundred times, not the tens of thousands a yield loop made.
    #[test]
    fn a_wait_yields_then_sleeps_a_64th_of_its_length() {
        let ms = Duration::from_millis;
        assert_eq!(sleep_between_polls(Duration::ZERO), None);
        assert_eq!(sleep_between_polls(Duration::from_micros(999)), None);
        assert_eq!(sleep_between_polls(ms(1)), Some(ms(1) / 64));
        assert_eq!(sleep_between_polls(ms(32)), Some(ms(1) / 2));
        assert_eq!(sleep_between_polls(ms(64)), Some(ms(1)));
        assert_eq!(sleep_between_polls(ms(5000)), Some(ms(1)));
        let (mut waited, mut polls) = (YIELD_FOR, 0);
        while waited < Duration::from_secs(1) {
            waited += sleep_between_polls(waited).unwrap_or_default();
            polls += 1;
        }
        assert!((300..1300).contains(&polls), "{polls} polls in a second");
    }
}
