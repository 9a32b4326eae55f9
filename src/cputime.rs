//! CPU cost: user and system CPU time of the whole process, every thread included (the endpoint
//! workers, the plugin's helper threads, MPI's), from `getrusage(RUSAGE_SELF)`, which also counts
//! threads that have exited.
//!
//! A benchmark that moves bytes with CPU copies (tcpx-emu over kernel TCP, TCPX's control path and
//! its helper threads) must say what the moving cost besides the time: a progress loop that spins
//! takes a core per endpoint whether or not it helps, and on an A3-high node those cores are the
//! ones TCPX's helper threads are bound to.

use serde::Serialize;

/// CPU seconds, user and system.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    pub user_s: f64,
    pub sys_s: f64,
}

impl CpuTime {
    /// This process's CPU time so far (all threads, living and exited).
    pub fn now() -> CpuTime {
        // SAFETY: getrusage writes into the zeroed struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a rusage; RUSAGE_SELF cannot fail with it.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) } != 0 {
            return CpuTime::default();
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        CpuTime {
            user_s: secs(ru.ru_utime),
            sys_s: secs(ru.ru_stime),
        }
    }

    /// The CPU time spent between `earlier` and `self`.
    #[must_use]
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            sys_s: (self.sys_s - earlier.sys_s).max(0.0),
        }
    }

    pub fn add(&mut self, other: CpuTime) {
        self.user_s += other.user_s;
        self.sys_s += other.sys_s;
    }

    pub fn total_s(self) -> f64 {
        self.user_s + self.sys_s
    }
}

/// What a phase cost in CPU, over every rank. Seconds per rank are means over ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CpuCost {
    /// User CPU seconds per rank (mean over ranks).
    pub user_s: f64,
    /// System CPU seconds per rank (mean over ranks).
    pub sys_s: f64,
    /// The busiest rank's user + system seconds.
    pub max_rank_s: f64,
    /// Wall-clock seconds of the phase per rank (mean over ranks).
    pub wall_s: f64,
    /// (user + system) / wall: cores a rank kept busy on average.
    pub cores_per_rank: f64,
    /// User + system seconds over all ranks per GB (1e9 bytes) moved; null without bytes.
    pub cpu_s_per_gb: Option<f64>,
}

impl CpuCost {
    /// From every rank's `[user_s, sys_s, wall_s]` (rank-major, as `gather_f64` returns them) and
    /// the bytes the phase moved over all ranks.
    pub fn from_ranks(per_rank: &[f64], bytes: u64) -> CpuCost {
        let ranks: Vec<&[f64]> = per_rank.chunks_exact(3).collect();
        if ranks.is_empty() {
            return CpuCost::default();
        }
        let n = ranks.len() as f64;
        let sum = |k: usize| ranks.iter().map(|r| r[k]).sum::<f64>();
        let (user, sys, wall) = (sum(0), sum(1), sum(2));
        CpuCost {
            user_s: user / n,
            sys_s: sys / n,
            max_rank_s: ranks.iter().map(|r| r[0] + r[1]).fold(0.0, f64::max),
            wall_s: wall / n,
            cores_per_rank: if wall > 0.0 { (user + sys) / wall } else { 0.0 },
            cpu_s_per_gb: (bytes > 0).then(|| (user + sys) / (bytes as f64 / 1e9)),
        }
    }

    /// The local part of [`CpuCost::from_ranks`]'s input.
    pub fn local(cpu: CpuTime, wall_s: f64) -> [f64; 3] {
        [cpu.user_s, cpu.sys_s, wall_s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_cpu_s() -> f64 {
        // SAFETY: as in `CpuTime::now`, for the calling thread.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut ru) }, 0);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        secs(ru.ru_utime) + secs(ru.ru_stime)
    }

    #[test]
    fn process_cpu_time_counts_other_threads() {
        let before = CpuTime::now();
        // Another thread burns 20 ms of its own CPU time and exits: RUSAGE_SELF must count it.
        std::thread::spawn(|| {
            let start = thread_cpu_s();
            let mut x = 0u64;
            while thread_cpu_s() - start < 0.02 {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        })
        .join()
        .unwrap();
        let spent = CpuTime::now().since(before);
        assert!(spent.total_s() >= 0.02, "{spent:?}");
        assert_eq!(before.since(CpuTime::now()), CpuTime::default(), "never negative");
    }

    #[test]
    fn cost_over_ranks() {
        // Rank 0: 1 s user, 3 s system over 2 s; rank 1: 2 + 2 over 2 s; 8 GB moved.
        let c = CpuCost::from_ranks(&[1.0, 3.0, 2.0, 2.0, 2.0, 2.0], 8_000_000_000);
        assert_eq!((c.user_s, c.sys_s, c.max_rank_s, c.wall_s), (1.5, 2.5, 4.0, 2.0));
        assert_eq!(c.cores_per_rank, 2.0);
        assert_eq!(c.cpu_s_per_gb, Some(1.0));
        assert_eq!(CpuCost::from_ranks(&[1.0, 0.0, 0.0], 0).cpu_s_per_gb, None);
        assert_eq!(CpuCost::from_ranks(&[], 5), CpuCost::default());
        assert_eq!(
            CpuCost::local(
                CpuTime {
                    user_s: 1.0,
                    sys_s: 2.0
                },
                3.0
            ),
            [1.0, 2.0, 3.0]
        );
    }
}
