//! Rank 0 notices that it was itself stopped (SIGSTOP, a debugger, a frozen container).
//!
//! A stopped rank 0 cannot say anything while it is stopped; when mpirun ends the job it sends
//! SIGCONT first, and rank 0's deadlines have all passed: without this, the first thread to
//! wake writes `timeout` naming no one (every other rank arrived and answered long ago). A
//! pulse thread beats every [`BEAT`]; the longest gap between beats (or since the last one, for
//! a thread that wakes before the pulse does) is the time this process did not run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BEAT: Duration = Duration::from_millis(100);
static EPOCH: OnceLock<Instant> = OnceLock::new();
static LAST_BEAT_MS: AtomicU64 = AtomicU64::new(0);
static LONGEST_GAP_MS: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Starts the pulse (once; rank 0 only needs it).
pub(super) fn watch() {
    if LAST_BEAT_MS.swap(now_ms().max(1), Ordering::SeqCst) != 0 {
        return;
    }
    let _ = std::thread::Builder::new().name("pulse".into()).spawn(|| loop {
        std::thread::sleep(BEAT);
        let now = now_ms();
        let gap = now.saturating_sub(LAST_BEAT_MS.swap(now, Ordering::SeqCst));
        LONGEST_GAP_MS.fetch_max(gap, Ordering::SeqCst);
    });
}

/// The longest time this process did not run since [`watch`] (zero before it).
pub(super) fn longest_gap() -> Duration {
    let last = LAST_BEAT_MS.load(Ordering::SeqCst);
    if last == 0 {
        return Duration::ZERO;
    }
    let since = now_ms().saturating_sub(last);
    Duration::from_millis(LONGEST_GAP_MS.load(Ordering::SeqCst).max(since))
}

/// Whether this process was stopped long enough to miss `limit` (-T) on its own account:
/// half of it, and at least two seconds (a busy host delays a sleeping thread by far less).
pub(super) fn missed(limit: Duration) -> Option<Duration> {
    let gap = longest_gap();
    (gap >= (limit / 2).max(Duration::from_secs(2))).then_some(gap)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_running_process_misses_nothing() {
        super::watch();
        std::thread::sleep(std::time::Duration::from_millis(250));
        assert!(super::longest_gap() < std::time::Duration::from_secs(2));
        assert_eq!(super::missed(std::time::Duration::from_secs(3)), None);
    }
}
