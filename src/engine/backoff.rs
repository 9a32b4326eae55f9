//! How a progress loop waits when a pass over its comms found nothing to do (`--poll`).
//!
//! GPUDirect-TCPX moves data only inside `test`, so the loop must keep testing; but once every
//! request is handed to the plugin's helper threads, a loop that spins does nothing but take a
//! core from them. On the 16-core H100 host, two spinning endpoints (pairs, 8 data sockets per
//! comm: 16 helper threads) cost a third of the bandwidth the same plugin moves when driven by two
//! threads that sleep between tests (issue 17, `docs/runs/*-issue17`).
//!
//! `adaptive` (the default) spins for [`SPIN_FOR`] after each pass that made progress (a burst of
//! completions, a post the window allowed), then sleeps, each sleep twice the last, at most
//! [`MAX_SLEEP`] and at most 1/[`QUIET_SHARE`] of the time since the endpoint's last completion.
//! That last bound caps what sleeping can add to a measured time: the completion that stops the
//! clock is seen at most quiet/64 late, 1.6% of the gap before it. `spin` keeps the old loop (test
//! without pause, `yield_now` every 64 empty passes), for comparison.

use std::time::{Duration, Instant};

/// `--poll`: how the progress loop waits between tests that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin a little after progress, then sleep with growing pauses (bounded by the quiet time).
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
/// The first sleep.
pub const MIN_SLEEP: Duration = Duration::from_micros(2);
/// The longest sleep: an endpoint waiting for a long time wakes 1000 times a second.
pub const MAX_SLEEP: Duration = Duration::from_millis(1);
/// A sleep is at most this fraction of the time since the last completion.
pub const QUIET_SHARE: u32 = 64;
/// Spin mode: empty passes between yields (and between abort/deadline checks in both modes).
pub const CHECK_EVERY: u32 = 64;

/// The length of the next sleep: double the last, within [`MIN_SLEEP`], [`MAX_SLEEP`] and
/// `quiet` / [`QUIET_SHARE`].
pub fn next_sleep(last: Duration, quiet: Duration) -> Duration {
    (last * 2).min(MAX_SLEEP).min(quiet / QUIET_SHARE).max(MIN_SLEEP)
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
        matches!(wait, Wait::Sleep(_)) || self.empty_passes % CHECK_EVERY == 0
    }

    /// A pass made no progress at `now`; `quiet` is the time since the last completion (or the
    /// start). Says how to wait; the caller waits (see [`Backoff::wait`]).
    pub fn empty_pass(&mut self, now: Instant, quiet: Duration) -> Wait {
        self.empty_passes = self.empty_passes.wrapping_add(1);
        match self.mode {
            PollMode::Spin if self.empty_passes % CHECK_EVERY == 0 => Wait::Yield,
            PollMode::Spin => Wait::Again,
            PollMode::Adaptive => {
                let since = *self.idle_since.get_or_insert(now);
                if now.saturating_duration_since(since) < SPIN_FOR {
                    return Wait::Again;
                }
                self.last_sleep = next_sleep(self.last_sleep, quiet);
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

    #[test]
    fn sleeps_double_within_the_quiet_share_and_the_cap() {
        let long_quiet = Duration::from_secs(10);
        let mut d = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..12 {
            d = next_sleep(d, long_quiet);
            seen.push(d.as_micros());
        }
        assert_eq!(seen, [2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000, 1000]);
        // 640 us since the last completion: never more than 10 us.
        assert_eq!(next_sleep(64 * US, 640 * US), 10 * US);
        // Right after a completion: the floor.
        assert_eq!(next_sleep(512 * US, Duration::ZERO), MIN_SLEEP);
    }

    #[test]
    fn adaptive_spins_first_then_sleeps_and_restarts_after_progress() {
        let t0 = Instant::now();
        let quiet = Duration::from_secs(1);
        let mut b = Backoff::new(PollMode::Adaptive);
        assert_eq!(b.empty_pass(t0, quiet), Wait::Again);
        assert_eq!(b.empty_pass(t0 + SPIN_FOR / 2, quiet), Wait::Again);
        assert_eq!(b.empty_pass(t0 + SPIN_FOR, quiet), Wait::Sleep(2 * US));
        assert_eq!(b.empty_pass(t0 + SPIN_FOR * 2, quiet), Wait::Sleep(4 * US));
        assert!(b.check_due(Wait::Sleep(4 * US)));
        b.progressed();
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(b.empty_pass(t1, quiet), Wait::Again, "progress restarts the spin");
        assert_eq!(
            b.empty_pass(t1 + SPIN_FOR, quiet),
            Wait::Sleep(2 * US),
            "and the sleeps"
        );
    }

    #[test]
    fn spin_never_sleeps_and_yields_every_64_passes() {
        let t0 = Instant::now();
        let mut b = Backoff::new(PollMode::Spin);
        let waits: Vec<Wait> = (0..128)
            .map(|i| b.empty_pass(t0 + Duration::from_millis(i), Duration::from_secs(1)))
            .collect();
        assert!(waits.iter().all(|w| !matches!(w, Wait::Sleep(_))));
        let yields: Vec<usize> = (0..128).filter(|&i| waits[i] == Wait::Yield).collect();
        assert_eq!(yields, [63, 127]);
        assert!(b.check_due(Wait::Yield));
    }
}
