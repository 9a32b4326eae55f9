//! `TCPX_PERF_TRACE=1`: each rank prints `trace RANK SECONDS EVENT` on stderr at the milestones
//! of its start (MPI, flags, plan, plugin, placement, every connect's listen / handle exchange /
//! connect-accept, the first timed iteration, each size's end), SECONDS since its process started. Where a job's
//! first minute goes at scale (docs/runs/h100x4-20261127b-issue33: 128 ranks, CUDA's serialized
//! initialisation); `docs/runs/h100x4-20261127b-issue33/trace-summary.py` folds the lines per
//! event. Off, a milestone costs one environment lookup.

/// Prints this rank's milestone `what` when `TCPX_PERF_TRACE` is set.
pub fn trace(what: &str) {
    if std::env::var_os("TCPX_PERF_TRACE").is_some() {
        let rank = crate::mpi_boot::launcher_rank();
        eprintln!("trace {rank} {:.3} {what}", process_age().unwrap_or(-1.0));
    }
}

/// Seconds since this process started (`/proc/self/stat`'s start time against the uptime, at
/// the kernel's clock tick), or None where /proc does not say.
pub fn process_age() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name in parentheses (which may hold spaces): field 3 on; the start time
    // is field 22.
    let rest = &stat[stat.rfind(')')? + 2..];
    let ticks: f64 = rest.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| (uptime - ticks / hz as f64).max(0.0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fresh_process_is_young() {
        let age = super::process_age().expect("/proc says");
        // The test binary started moments ago (a busy CI box: generous).
        assert!((0.0..600.0).contains(&age), "{age}");
    }
}
