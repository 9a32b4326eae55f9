//! `TCPX_PERF_TRACE=1`: rank 0 prints `trace 0 SECONDS EVENT` at the milestones of its start
//! (MPI, flags, plan, plugin, placement, every connect's listen / handle exchange /
//! connect-accept, the first timed iteration, each size's end), SECONDS since its process
//! started. Where a job's first minute goes at scale (docs/runs/h100x4-20261127b-issue33: 128
//! ranks, CUDA's serialized initialisation); `docs/runs/h100x4-20261127b-issue33/trace-summary.py`
//! folds the lines per event. Off, a milestone costs one environment lookup.
//!
//! Rank 0's lines go to stdout, the stream of its header and table, so that they land in order
//! among them and never inside one of their lines: under mpirun a rank's stdout is a pty that
//! Open MPI reads 4096 bytes at a time, whatever the line ends, and a line on another stream
//! (stderr, another rank's) could be forwarded between two reads of one line. The other ranks
//! trace only with `TCPX_PERF_TRACE=all`, on stderr, where their lines may fall inside one of rank
//! 0's (the price of seeing every rank's milestones on one console).

/// How `TCPX_PERF_TRACE` asks for trace lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracing {
    /// Unset: none.
    Off,
    /// Rank 0's, on stdout.
    Rank0,
    /// Every rank's: rank 0's on stdout, the others' on stderr.
    All,
}

impl Tracing {
    /// From the variable's value (`None`: unset).
    pub fn from_value(value: Option<&std::ffi::OsStr>) -> Tracing {
        match value {
            None => Tracing::Off,
            Some(v) if v.eq_ignore_ascii_case("all") => Tracing::All,
            Some(_) => Tracing::Rank0,
        }
    }
}

/// Prints this rank's milestone `what` when `TCPX_PERF_TRACE` asks for it (see the module).
pub fn trace(what: &str) {
    let tracing = Tracing::from_value(std::env::var_os("TCPX_PERF_TRACE").as_deref());
    if tracing == Tracing::Off {
        return;
    }
    let rank = crate::mpi_boot::launcher_rank();
    let line = format!("trace {rank} {:.3} {what}", process_age().unwrap_or(-1.0));
    match (rank, tracing) {
        (0, _) => println!("{line}"),
        (_, Tracing::All) => eprintln!("{line}"),
        _ => {}
    }
}

/// Prints this rank's resident and peak memory after `what` (MB), when tracing: where a
/// process's memory goes (its plans, its comms, the first size's buffers and state).
pub fn memory(what: &str) {
    if std::env::var_os("TCPX_PERF_TRACE").is_some() {
        let (rss, peak) = (status_kb("VmRSS:"), status_kb("VmHWM:"));
        trace(&format!(
            "memory after {what}: resident {:.1} MB, peak {:.1} MB",
            rss as f64 * 1024.0 / 1e6,
            peak as f64 * 1024.0 / 1e6
        ));
    }
}

/// The process's peak resident memory so far (`VmHWM`), bytes; 0 where /proc does not say.
pub fn peak_bytes() -> u64 {
    status_kb("VmHWM:") * 1024
}

/// A `kB` figure of `/proc/self/status` (0 where absent).
fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
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
    use super::Tracing;

    #[test]
    fn the_variable_chooses_whose_lines() {
        assert_eq!(Tracing::from_value(None), Tracing::Off);
        assert_eq!(Tracing::from_value(Some("1".as_ref())), Tracing::Rank0);
        assert_eq!(Tracing::from_value(Some("ALL".as_ref())), Tracing::All);
    }

    #[test]
    fn a_fresh_process_is_young() {
        let age = super::process_age().expect("/proc says");
        // The test binary started moments ago (a busy CI box: generous).
        assert!((0.0..600.0).contains(&age), "{age}");
    }
}
