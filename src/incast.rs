//! Incast named: sizes whose time went into TCP retransmission timeouts.
//!
//! Many flows into one receiver at once overflow a queue on the way (the receiver NIC's, a
//! switch port's, the rig's `tc` shaper); segments are dropped, and a flow that lost its whole
//! window waits for the retransmission timeout, at least 200 ms on Linux. An iteration that
//! waited for one is a stall, not a slow network, and a fullmesh with every peer in flight at
//! once is where it happens first (rig, 8 nodes x 8 ranks: 56 flows into every receiver, 0.25 of
//! the shaped limit, iterations of 234 ms). The kernel counts every timeout per network
//! namespace ([`crate::tcp_stats`]); a size is named when its timed iterations saw timeouts and
//! a stall that they explain: its slowest iteration took at least one minimum RTO, or its busbw
//! fell below half of the best size's.

use crate::placement::dry_run::NodeFinding;
use crate::placement::preflight::Level;
use crate::report::SizeResult;

/// Linux's minimum retransmission timeout (`TCP_RTO_MIN`), microseconds.
pub const MIN_RTO_US: f64 = 200_000.0;
/// busbw below this share of the run's best size counts as a collapse.
pub const COLLAPSE_SHARE: f64 = 0.5;
/// Receivers with more peers in flight than this are served in rounds by `--max-peers auto`.
pub const SUGGESTED_MAX_PEERS: u32 = 8;

/// One warning for the run when some sizes stalled on retransmission timeouts: the worst size's
/// counts and hosts in one line, and what to try. The per-size counters stay in the results.
pub fn finding(results: &[SizeResult]) -> Option<NodeFinding> {
    let best = results.iter().map(|r| r.busbw_gbps).fold(0.0f64, f64::max);
    let stalled: Vec<&SizeResult> = results
        .iter()
        .filter(|r| {
            let timeouts = r.tcp.as_ref().map_or(0, |t| t.total.timeouts);
            timeouts > 0 && (r.stats.max >= MIN_RTO_US || r.busbw_gbps < COLLAPSE_SHARE * best)
        })
        .collect();
    let worst = stalled
        .iter()
        .max_by_key(|r| r.tcp.as_ref().map_or(0, |t| t.total.timeouts))?;
    let tcp = worst.tcp.as_ref()?;
    let receivers = worst.peers_in_flight.1;
    let hint = if receivers > SUGGESTED_MAX_PEERS {
        format!("incast: {receivers} flows per receiver; try --max-peers {SUGGESTED_MAX_PEERS}")
    } else {
        "check the NICs' queues and drops (tc -s qdisc, ethtool -S)".to_string()
    };
    let mut hosts: Vec<String> = tcp
        .namespaces
        .iter()
        .filter(|n| n.counters.timeouts > 0)
        .flat_map(|n| n.hosts.iter().cloned())
        .collect();
    hosts.dedup();
    Some(NodeFinding {
        level: Level::Warning,
        text: format!(
            "TCP timeouts stalled {} of {} sizes; {}: {} timeouts, {} retransmits ({}), busbw {:.2} of the best; {hint}",
            stalled.len(),
            results.len(),
            tcpx_units::format_size_label(worst.size_bytes),
            tcp.total.timeouts,
            tcp.total.retrans_segs,
            tcp.timeouts_by_host(3),
            if best > 0.0 { worst.busbw_gbps / best } else { 0.0 },
        ),
        hosts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::fixtures;
    use crate::tcp_stats::{TcpActivity, TcpCounters};

    fn size(bytes: u64, busbw: f64, max_us: f64, timeouts: &[u64]) -> SizeResult {
        let mut r = fixtures::size(bytes, 1000.0, Some(0));
        r.busbw_gbps = busbw;
        r.stats.max = max_us;
        r.peers_in_flight = (56, 56);
        r.tcp = TcpActivity::from_readings(timeouts.iter().enumerate().map(|(i, &t)| {
            (
                i as u64,
                format!("node{i}"),
                TcpCounters {
                    retrans_segs: 40 * t,
                    timeouts: t,
                },
            )
        }));
        r
    }

    #[test]
    fn a_collapse_with_timeouts_is_named_in_one_short_line() {
        let results = [
            size(1 << 20, 1.0, 5_000.0, &[0; 8]),
            size(4 << 20, 0.9, 240_000.0, &[3, 0, 1, 0, 0, 0, 0, 0]),
            size(8 << 20, 0.25, 234_000.0, &[40, 12, 30, 9, 0, 0, 7, 1]),
        ];
        let f = finding(&results).expect("a finding");
        assert_eq!(f.level, Level::Warning);
        assert_eq!(
            f.text,
            "TCP timeouts stalled 2 of 3 sizes; 8 MiB: 99 timeouts, 3960 retransmits (node0 40, node2 30, node1 12, 3 more), busbw 0.25 of the best; incast: 56 flows per receiver; try --max-peers 8"
        );
        assert!(f.text.len() <= 200, "{} chars", f.text.len());
        assert_eq!(f.hosts, ["node0", "node1", "node2", "node3", "node6", "node7"]);
    }

    #[test]
    fn timeouts_without_a_stall_or_a_stall_without_timeouts_say_nothing() {
        // A stray timeout (MPI's traffic, a late ACK) in a size that ran at full speed.
        assert!(finding(&[
            size(1 << 20, 1.0, 5_000.0, &[1, 0]),
            size(8 << 20, 1.0, 9_000.0, &[0, 0])
        ])
        .is_none());
        // A slow size with no timeout is the slow-NIC rule's business, not incast.
        assert!(finding(&[
            size(1 << 20, 1.0, 5_000.0, &[0, 0]),
            size(8 << 20, 0.2, 300_000.0, &[0, 0])
        ])
        .is_none());
        // Unread counters (no /proc/net): nothing to say.
        let mut r = size(8 << 20, 0.2, 300_000.0, &[5]);
        r.tcp = None;
        assert!(finding(&[size(1 << 20, 1.0, 5_000.0, &[0]), r]).is_none());
    }
}
