//! Why one slow NIC costs the job more than its bytes explain.
//!
//! At the largest size, each NIC's bytes per iteration (its interface counters: payload and
//! headers, a lower bound on its busy time) over its rate (the shaper's or its link speed,
//! [`crate::link_check`]) is the least time that NIC needs per iteration; the slowest NIC's
//! bound is the least the job can take. Where one NIC's bound stands out (above
//! [`STANDS_OUT`] times the median NIC's) and the iteration took more than [`SLOWER`] times
//! that bound, one line says so with what the kernel counted in the same iterations:
//! retransmission timeouts (each at least 200 ms, Linux's minimum RTO) and retransmitted
//! segments (drops at a queue: the shaper's, a switch's), or none (the other flows waited on
//! the slow one: the pattern's rounds, a receiver's queue).

use crate::placement::dry_run::{NodeFinding, Row};
use crate::placement::preflight::Level;
use crate::report::SizeResult;

/// A NIC whose bytes take this many times the median NIC's time is the job's slow one.
pub const STANDS_OUT: f64 = 1.5;
/// The job counts as slower than that NIC explains past this many times its bound.
pub const SLOWER: f64 = 1.5;

/// Per NIC of size `r` with a known rate and bytes sent: (seconds per iteration its bytes take
/// at its rate, host, NIC, bytes per iteration, bytes per second).
fn nic_bounds<'a>(rows: &'a [Row], r: &'a SizeResult) -> impl Iterator<Item = (f64, &'a str, &'a str, f64, f64)> + 'a {
    let iters = r.iters.max(1) as f64;
    r.bytes.wire.iter().filter_map(move |w| {
        let rate = crate::link_check::egress_rate(rows, &w.host, &w.iface)?;
        let bytes = w.tx_bytes as f64 / iters;
        (bytes > 0.0).then_some((bytes / rate, w.host.as_str(), w.iface.as_str(), bytes, rate))
    })
}

/// The busiest NIC's load at size `r`: its bytes per iteration (interface counters) over its
/// rate, over the iteration's mean time; None where no NIC with bytes has a known rate.
pub fn busiest_nic_load(rows: &[Row], r: &SizeResult) -> Option<f64> {
    let seconds = r.time_us * 1e-6;
    if seconds <= 0.0 {
        return None;
    }
    nic_bounds(rows, r).map(|n| n.0 / seconds).reduce(f64::max)
}

/// The finding, or None (no NIC stands out, no rate known, or the job kept pace with it).
pub fn finding(rows: &[Row], results: &[SizeResult]) -> Option<NodeFinding> {
    let r = results.iter().max_by_key(|r| r.size_bytes)?;
    let mut nics: Vec<(f64, &str, &str, f64, f64)> = nic_bounds(rows, r).collect();
    if nics.len() < 2 {
        return None;
    }
    nics.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = tcpx_units::median(&nics.iter().map(|n| n.0).collect::<Vec<_>>());
    let &(bound, host, nic, bytes, rate) = nics.last()?;
    let took = r.time_us * 1e-6;
    if bound < STANDS_OUT * median || took < SLOWER * bound {
        return None;
    }
    let why = match r.tcp.as_ref().map(|t| (t.total.timeouts, t.total.retrans_segs)) {
        Some((0, 0)) => "no TCP loss: the other flows waited on its flows (the pattern's rounds, a receiver's queue)".to_string(),
        Some((timeouts, retrans)) => format!(
            "{timeouts} retransmission timeout(s) (200 ms each at least) and {retrans} retransmitted segment(s): drops at a queue (its shaper's, a switch's)"
        ),
        None => "no TCP counters to say why".to_string(),
    };
    Some(NodeFinding {
        level: Level::Warning,
        text: format!(
            "at {} an iteration took {:.0} ms, {:.1}x what the slowest NIC's bytes take ({host} {nic}: {:.1} MB at {}, {:.0} ms); {why}",
            tcpx_units::format_size_label(r.size_bytes),
            took * 1e3,
            took / bound,
            bytes / 1e6,
            tcpx_units::format_rate(rate / 1e9),
            bound * 1e3,
        ),
        hosts: vec![host.to_string()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::WireBytes;

    fn run(time_us: f64, slow_tx: u64, tcp: Option<(u64, u64)>) -> Vec<SizeResult> {
        let mut r = crate::export::fixtures::size(8 << 20, time_us, Some(0));
        r.iters = 1;
        r.bytes.wire = (0..4)
            .flat_map(|n| (1..=2).map(move |k| (n, k)))
            .map(|(n, k)| WireBytes {
                host: format!("node{n}"),
                iface: format!("eth{k}"),
                rx_bytes: 10_000_000,
                tx_bytes: if (n, k) == (2, 1) { slow_tx } else { 10_000_000 },
                devmem_pkts: None,
            })
            .collect();
        r.tcp = tcp.map(|(timeouts, retrans)| crate::tcp_stats::TcpActivity {
            total: crate::tcp_stats::TcpCounters {
                retrans_segs: retrans,
                timeouts,
            },
            namespaces: Vec::new(),
        });
        vec![r]
    }

    /// 4 nodes x 2 NICs at 80 Mbit/s (10 MB/s, 1 s for each NIC's 10 MB), node2's eth1 at a
    /// quarter (20 Mbit/s: 4 s).
    fn rows() -> Vec<Row> {
        let mut rows = crate::slow_nic::tests::placement_rows(4, 2);
        for r in &mut rows {
            r.speed_gbps = if r.host == "node2" && r.nic == "eth1" {
                0.02
            } else {
                0.08
            };
        }
        rows
    }

    #[test]
    fn the_busiest_nic_load_is_its_bytes_time_over_the_iteration() {
        // node2 eth1: 10 MB at 2.5 MB/s = 4 s of an 8 s iteration; the others 1 s.
        let r = &run(8e6, 10_000_000, None)[0];
        let load = busiest_nic_load(&rows(), r).expect("rates known");
        assert!((load - 0.5).abs() < 1e-9, "{load}");
        assert_eq!(busiest_nic_load(&[], r), None, "no rate known");
    }

    #[test]
    fn a_job_slower_than_its_slow_nic_explains_is_named_with_the_counters() {
        // 10 MB at 2.5 MB/s: 4 s; the iteration took 12 s with 5 timeouts.
        let f = finding(&rows(), &run(12e6, 10_000_000, Some((5, 300)))).expect("a finding");
        assert_eq!(f.hosts, ["node2"]);
        assert!(
            f.text.starts_with("at 8 MiB an iteration took 12000 ms, 3.0x what the slowest NIC's bytes take (node2 eth1: 10.0 MB at 20.0 Mbit/s, 4000 ms); 5 retransmission timeout(s)"),
            "{}",
            f.text
        );
        let quiet = finding(&rows(), &run(12e6, 10_000_000, Some((0, 0)))).unwrap();
        assert!(
            quiet.text.ends_with(
                "no TCP loss: the other flows waited on its flows (the pattern's rounds, a receiver's queue)"
            ),
            "{}",
            quiet.text
        );
    }

    #[test]
    fn a_job_that_keeps_pace_with_its_slowest_nic_or_has_none_is_quiet() {
        assert!(finding(&rows(), &run(4.5e6, 10_000_000, Some((0, 0)))).is_none());
        let even: Vec<Row> = crate::slow_nic::tests::placement_rows(4, 2);
        assert!(finding(&even, &run(12e6, 10_000_000, Some((5, 300)))).is_none());
    }
}
