//! Instants as this kernel's `CLOCK_MONOTONIC` seconds, the clock every process on one running
//! kernel shares whatever its namespaces (the rig's nodes, ranks of one host): a flow's first
//! post on one rank and its last byte on another can be subtracted where both ranks have one
//! boot id. Across kernels the clocks are unrelated and the instants are only compared with
//! their own rank's (the run's pair figures, [`crate::run`]).

use std::sync::OnceLock;
use std::time::Instant;

/// An `Instant` and the monotonic clock read together, once per process.
static ORIGIN: OnceLock<(Instant, f64)> = OnceLock::new();

fn monotonic_now() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// `t` in seconds of `CLOCK_MONOTONIC` (Rust's `Instant` reads the same clock on Linux; the
/// origin pairs them within a microsecond).
pub fn mono_secs(t: Instant) -> f64 {
    let (instant, secs) = *ORIGIN.get_or_init(|| (Instant::now(), monotonic_now()));
    if t >= instant {
        secs + t.duration_since(instant).as_secs_f64()
    } else {
        secs - instant.duration_since(t).as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instant maps to within a millisecond of the kernel's monotonic clock read now (a wrong
    /// origin, or an instant on another clock, lands seconds or days away), and durations map
    /// exactly.
    #[test]
    fn an_instant_maps_onto_the_kernels_monotonic_clock() {
        let now = Instant::now();
        let mapped = mono_secs(now);
        let kernel = monotonic_now();
        assert!((kernel - mapped).abs() < 1e-3, "mapped {mapped} vs kernel {kernel}");
        let later = now + std::time::Duration::from_millis(250);
        assert!((mono_secs(later) - mapped - 0.25).abs() < 1e-9);
    }
}
