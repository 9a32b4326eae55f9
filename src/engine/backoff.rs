//! How a progress loop waits when a pass over its comms found nothing to do (`--poll`).
//!
//! GPUDirect-TCPX moves data only inside `test`, so the loop must keep testing; but once every
//! request is handed to the plugin's helper threads, a loop that spins does nothing but take a
//! core from them: one core per endpoint, whether the endpoint moves bytes or waits for a slow
//! peer (issue 17, `docs/runs/h100-20261124T0437Z-issue17`).
//!
//! `adaptive` (the default) tests back to back for [`SPIN_FOR`] after each pass that made progress,
//! then sleeps, each sleep twice the last, up to a bound ([`sleep_bound`]) that depends on what a
//! late wake-up could cost:
//! * a lane has requests of the current round (`--max-peers` schedules run in rounds) still to
//!   post: the next post is due when its oldest request completes, and the plugin still holds
//!   the others; sleeping a quarter of the time those take to complete (the iteration's mean gap
//!   between completions so far, times the requests in flight behind the oldest) starves nothing;
//! * nothing of the current round left to post (the round's tail; with one round, the
//!   iteration's): the round's last completion opens the next round or stops the clock, so a
//!   sleep is at most 1/[`PRECISION`] of the round's stretch so far (a measured time is at most
//!   1.6% long, 0.8% on average when the last completion falls at random), except before a
//!   quarter of the same round's fastest stretch in earlier iterations of the size, when no
//!   completion can be near: there the loop sleeps half the distance to that point. (A receive
//!   whose control message comes during a sleep is matched after it too, in the tail as before
//!   rounds had tails of their own; the bound is on seeing completions.) Lanes that
//!   wait for a later round count here, not as lanes with nothing in flight: those asked for a
//!   wake-up every 64th of the quiet time, a near-spin through every round of a 16 x 8 x 4
//!   fullmesh (docs/runs/h200x4-20261128-issue43).
//!
//! Every sleep is also at most [`MAX_SLEEP`]. Each wake-up costs CPU (about 25 us on the KVM guests
//! this was measured on, as much as 22 us of spinning), so the bounds are what keep the number of
//! wake-ups low. `spin` keeps the old loop (test without pause, `yield_now` every 64 empty
//! passes), for comparison.

use std::time::{Duration, Instant};

/// `--poll`: how the progress loop waits between tests that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin a little after progress, then sleep with growing pauses (bounded by [`sleep_bound`]).
    #[default]
    Adaptive,
    /// Test continuously, yielding the core every 64 empty passes.
    Spin,
}

impl std::fmt::Display for PollMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PollMode::Adaptive => "adaptive",
            PollMode::Spin => "spin",
        })
    }
}

/// After progress, test back to back this long before the first sleep: completions come in
/// bursts (a window's worth of requests finishing together), and the next post often follows.
pub const SPIN_FOR: Duration = Duration::from_micros(20);
/// The shortest sleep (the first after progress is a quarter of the bound, [`next_sleep`]).
pub const MIN_SLEEP: Duration = Duration::from_micros(2);
/// The longest sleep: an endpoint waiting for a long time wakes 100 times a second (and notices
/// an abort or a stall within 10 ms).
pub const MAX_SLEEP: Duration = Duration::from_millis(10);
/// In a round's tail, a sleep is at most this fraction of the round's stretch so far.
pub const PRECISION: u32 = 64;
/// Spin mode: empty passes between yields (and between abort/deadline checks in both modes).
pub const CHECK_EVERY: u32 = 64;

/// Where an endpoint's iteration stands, for [`sleep_bound`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Outlook {
    /// Since the iteration started.
    pub elapsed: Duration,
    /// Since the current round of the schedule opened (the completion that closed the round
    /// before; the iteration's start for the first round, and for a plan of one round).
    pub stretch: Duration,
    /// Since the last completion (or the start).
    pub quiet: Duration,
    /// Requests (and local copies) completed so far in the iteration.
    pub completions: u32,
    /// The fewest requests in flight on a lane whose next request belongs to the current round;
    /// `None` when no lane has one (the round's tail).
    pub refill_depth: Option<usize>,
    /// The current round's fastest stretch in earlier iterations of the same size on this
    /// endpoint (one round: the fastest iteration).
    pub fastest: Option<Duration>,
}

/// The longest the loop may sleep now (see the module documentation).
pub fn sleep_bound(o: &Outlook) -> Duration {
    let bound = if let Some(depth) = o.refill_depth {
        let gap = if o.completions > 0 {
            o.elapsed / o.completions
        } else {
            Duration::ZERO
        };
        let behind = u32::try_from(depth.saturating_sub(1)).unwrap_or(u32::MAX);
        (o.quiet / PRECISION).max(gap.saturating_mul(behind) / 4)
    } else {
        // A round's tail: its last completion opens the next round (or stops the clock), so it
        // is seen at most a 64th of the round's stretch late, a 64th of the iteration in all.
        let precise = o.stretch / PRECISION;
        let early = o
            .fastest
            .map_or(Duration::ZERO, |f| (f / 4).saturating_sub(o.stretch) / 2);
        precise.max(early)
    };
    bound.min(MAX_SLEEP)
}

/// The length of the next sleep: the first after progress a quarter of the bound, then double
/// the last; at least [`MIN_SLEEP`], at most `bound` (unless the bound is below [`MIN_SLEEP`]).
/// Starting at a quarter rather than at [`MIN_SLEEP`] takes the wake-ups of the ramp away (on
/// the 4 x 2 x 2 rig, ~6 sleeps per completion at 1 MiB, ~28 us of CPU each:
/// docs/runs/vm-20261128-issue43) and costs no precision: a completion is still seen at most
/// one bound late.
pub fn next_sleep(last: Duration, bound: Duration) -> Duration {
    let next = if last.is_zero() { bound / 4 } else { last * 2 };
    next.min(bound).max(MIN_SLEEP)
}

/// What the loop should do after an empty pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Test again at once.
    Again,
    /// Give the core away once (`spin`).
    Yield,
    /// Sleep this long (`adaptive`).
    Sleep(Duration),
}

/// The waiting state of one progress loop.
#[derive(Debug, Clone)]
pub struct Backoff {
    mode: PollMode,
    empty_passes: u32,
    /// When the current run of empty passes began.
    idle_since: Option<Instant>,
    last_sleep: Duration,
}

impl Backoff {
    pub fn new(mode: PollMode) -> Self {
        Backoff {
            mode,
            empty_passes: 0,
            idle_since: None,
            last_sleep: Duration::ZERO,
        }
    }

    /// A pass made progress: spin again.
    pub fn progressed(&mut self) {
        self.empty_passes = 0;
        self.idle_since = None;
        self.last_sleep = Duration::ZERO;
    }

    /// Whether the loop should check its abort flag and deadline now (every [`CHECK_EVERY`]
    /// empty passes, and before every sleep).
    pub fn check_due(&self, wait: Wait) -> bool {
        matches!(wait, Wait::Sleep(_)) || self.empty_passes.is_multiple_of(CHECK_EVERY)
    }

    /// A pass made no progress at `now`; `outlook` says where the iteration stands (only asked
    /// for when the loop is about to sleep). Says how to wait; the caller waits ([`Backoff::wait`]).
    pub fn empty_pass(&mut self, now: Instant, outlook: impl FnOnce() -> Outlook) -> Wait {
        self.empty_passes = self.empty_passes.wrapping_add(1);
        match self.mode {
            PollMode::Spin if self.empty_passes.is_multiple_of(CHECK_EVERY) => Wait::Yield,
            PollMode::Spin => Wait::Again,
            PollMode::Adaptive => {
                let since = *self.idle_since.get_or_insert(now);
                if now.saturating_duration_since(since) < SPIN_FOR {
                    return Wait::Again;
                }
                self.last_sleep = next_sleep(self.last_sleep, sleep_bound(&outlook()));
                Wait::Sleep(self.last_sleep)
            }
        }
    }

    /// Carries out `wait`.
    pub fn wait(wait: Wait) {
        match wait {
            Wait::Again => std::hint::spin_loop(),
            Wait::Yield => std::thread::yield_now(),
            Wait::Sleep(d) => std::thread::sleep(d),
        }
    }
}

/// Lets this thread's short sleeps end on time: Linux delays a sleeping thread's wake-up by up to
/// its timer slack (50 us by default), which would make every [`MIN_SLEEP`] a 50 us sleep.
/// Threads started from this one inherit the setting; the plugin's helper threads block in system
/// calls and are not affected. Best effort: a failure leaves the default slack.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a value and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn sleeps_double_up_to_the_bound() {
        let mut d = Duration::ZERO;
        let seen: Vec<u128> = (0..8)
            .map(|_| {
                d = next_sleep(d, 100 * US);
                d.as_micros()
            })
            .collect();
        assert_eq!(
            seen,
            [25, 50, 100, 100, 100, 100, 100, 100],
            "from a quarter of the bound"
        );
        assert_eq!(next_sleep(Duration::ZERO, 4 * US), MIN_SLEEP, "never below the floor");
        assert_eq!(next_sleep(512 * US, Duration::ZERO), MIN_SLEEP, "never below the floor");
    }

    #[test]
    fn refill_bound_follows_the_work_the_plugin_still_holds() {
        // 4 completions in 64 ms (16 ms apart), 8 in flight: 7 x 16 ms / 4 = 28 ms, capped.
        let o = Outlook {
            elapsed: 64 * MS,
            stretch: 64 * MS,
            quiet: MS,
            completions: 4,
            refill_depth: Some(8),
            fastest: None,
        };
        assert_eq!(sleep_bound(&o), MAX_SLEEP);
        assert_eq!(
            sleep_bound(&Outlook {
                refill_depth: Some(3),
                ..o
            }),
            8 * MS
        );
        // One in flight (window 1), or none completed yet: the quiet time rules.
        assert_eq!(
            sleep_bound(&Outlook {
                refill_depth: Some(1),
                ..o
            }),
            MS / 64
        );
        assert_eq!(
            sleep_bound(&Outlook {
                completions: 0,
                quiet: 64 * MS,
                ..o
            }),
            MS
        );
    }

    #[test]
    fn tail_bound_is_a_64th_of_the_iteration_or_half_the_way_to_a_quarter_of_the_fastest() {
        let tail = Outlook {
            elapsed: 64 * MS,
            stretch: 64 * MS,
            quiet: 32 * MS,
            completions: 9,
            refill_depth: None,
            fastest: None,
        };
        assert_eq!(sleep_bound(&tail), MS);
        let fastest = Some(160 * MS);
        let at = |ms: u64| {
            sleep_bound(&Outlook {
                elapsed: MS * ms as u32,
                stretch: MS * ms as u32,
                fastest,
                ..tail
            })
        };
        assert_eq!(at(0), MAX_SLEEP);
        assert_eq!(at(30), 5 * MS);
        assert_eq!(at(40), 40 * MS / 64, "from a quarter of the fastest on: precise");
        assert_eq!(at(100), 100 * MS / 64);
    }

    /// Walks the adaptive sleeps of a tail (the last completion at `end`) and returns how late
    /// the loop wakes after it.
    fn lateness(end: Duration, fastest: Option<Duration>) -> Duration {
        let (mut t, mut last) = (SPIN_FOR, Duration::ZERO);
        while t < end {
            let o = Outlook {
                elapsed: t,
                stretch: t,
                quiet: t,
                completions: 0,
                refill_depth: None,
                fastest,
            };
            last = next_sleep(last, sleep_bound(&o));
            t += last;
        }
        t.checked_sub(end).unwrap()
    }

    #[test]
    fn the_clock_stops_at_most_a_64th_late() {
        for end_us in [50u64, 333, 1_000, 4_567, 15_000, 64_000, 150_000, 1_000_000] {
            let end = US * end_us as u32;
            let allowed = (end / PRECISION).max(MIN_SLEEP);
            assert!(lateness(end, None) <= allowed, "{end:?}: {:?}", lateness(end, None));
            // With an earlier iteration up to 4x slower, still on time.
            for fastest in [end, 2 * end, 4 * end] {
                let late = lateness(end, Some(fastest));
                assert!(late <= allowed, "{end:?} after {fastest:?}: {late:?}");
            }
        }
        // The guarantee needs the history: an iteration 10x faster than every earlier one may be
        // seen late (this is why only a quarter of the fastest is trusted).
        assert!(lateness(10 * MS, Some(400 * MS)) > 10 * MS / PRECISION);
    }

    #[test]
    fn a_long_wait_takes_few_wake_ups() {
        // A 150 ms tail after an iteration of 150 ms: at most ~100 sleeps (each wake-up costs
        // ~25 us of CPU on the KVM guests measured: under 2% of a core).
        let (mut t, mut last, mut wakes) = (SPIN_FOR, Duration::ZERO, 0);
        while t < 150 * MS {
            let o = Outlook {
                elapsed: t,
                stretch: t,
                quiet: t,
                refill_depth: None,
                fastest: Some(150 * MS),
                ..Outlook::default()
            };
            last = next_sleep(last, sleep_bound(&o));
            t += last;
            wakes += 1;
        }
        assert!(wakes < 110, "{wakes} wake-ups");
    }

    #[test]
    fn adaptive_spins_first_then_sleeps_and_restarts_after_progress() {
        let t0 = Instant::now();
        let long = || Outlook {
            elapsed: Duration::from_secs(1),
            stretch: Duration::from_secs(1),
            quiet: Duration::from_secs(1),
            ..Outlook::default()
        };
        let mut b = Backoff::new(PollMode::Adaptive);
        assert_eq!(b.empty_pass(t0, long), Wait::Again);
        assert_eq!(b.empty_pass(t0 + SPIN_FOR / 2, long), Wait::Again);
        // A second into the tail: the bound is MAX_SLEEP; the first sleep a quarter of it.
        assert_eq!(b.empty_pass(t0 + SPIN_FOR, long), Wait::Sleep(MAX_SLEEP / 4));
        assert_eq!(b.empty_pass(t0 + SPIN_FOR * 2, long), Wait::Sleep(MAX_SLEEP / 2));
        assert!(b.check_due(Wait::Sleep(MAX_SLEEP / 2)));
        b.progressed();
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(b.empty_pass(t1, long), Wait::Again, "progress restarts the spin");
        assert_eq!(
            b.empty_pass(t1 + SPIN_FOR, long),
            Wait::Sleep(MAX_SLEEP / 4),
            "and the sleeps"
        );
    }

    #[test]
    fn spin_never_sleeps_and_yields_every_64_passes() {
        let t0 = Instant::now();
        let mut b = Backoff::new(PollMode::Spin);
        let waits: Vec<Wait> = (0..128)
            .map(|i| b.empty_pass(t0 + Duration::from_millis(i), Outlook::default))
            .collect();
        assert!(waits.iter().all(|w| !matches!(w, Wait::Sleep(_))));
        let yields: Vec<usize> = (0..128).filter(|&i| waits[i] == Wait::Yield).collect();
        assert_eq!(yields, [63, 127]);
        assert!(b.check_due(Wait::Yield));
    }
}
