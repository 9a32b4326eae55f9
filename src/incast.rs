//! Incast named: sizes whose throughput collapsed into TCP losses.
//!
//! Many flows into one receiver at once overflow a queue on the way (the receiver NIC's, a
//! switch port's, the rig's `tc` shaper); segments are dropped and retransmitted. Two ways it
//! shows, and either names a size:
//! - **Retransmission timeouts**: a flow that lost its whole window waits for the RTO, at least
//!   200 ms on Linux: the size is named when its timed iterations saw timeouts and a stall that
//!   they explain (its slowest iteration took at least one minimum RTO, or its busbw fell below
//!   half of the best size's).
//! - **Retransmissions with a collapse**, no timeout needed: fast retransmit recovers every loss
//!   but the bandwidth goes. On the GPU host's rig (docs/runs/h100x4-20261126-issue28-scale)
//!   fullmesh with `--max-peers all` fell to 0.20 of the shaped limit at 8 MiB (0.16 of its
//!   2 MiB busbw) with 5479 retransmitted segments and no timeout at 8 x 8 x 4, and at
//!   12 x 5 x 3 to 0.26 of its 2 MiB busbw with 13402 (tests/fixtures/incast). A size is named when it retransmitted at least
//!   [`RETRANS_PER_MB_FLOOR`] segments per MB of network bytes, its busbw fell below
//!   [`COLLAPSE_SHARE`] of the best smaller size's (bandwidth grows with the size until the
//!   limit; it does not fall), and its receivers had more than [`INCAST_PEERS`] peers in flight.
//!
//! - **A queue with few peers**: the same collapse and losses with at most [`INCAST_PEERS`]
//!   peers per receiver are named too ("a queue overflowed"), when the retransmissions came from
//!   at least [`QUEUE_SPREAD`] of the job's namespaces, the busiest NIC ran at [`QUEUE_LOAD`] of
//!   its rate or more at the size the collapse is measured against (a queue fills only where
//!   the traffic reaches a rate), and no slow NIC was named: the 4 x 2 x 2 rig at 1gbit fell to
//!   0.34 of its limit at 8 MiB with 6 peers per receiver, 343 retransmissions and 460 drops at
//!   its shapers (issue 43). A slow NIC drops at its own shaper, so only its host retransmits,
//!   and it has its own finding; the CI's 8 x 2 x 2 rig with every peer at once collapses with
//!   retransmissions in every namespace too, but on 2 shared cores with its NICs far from any
//!   rate (tests/fixtures/incast-healthy).
//!
//! tcpx-perf knows no shaped limit, so the collapse is against its own smaller sizes. The peer
//! bound keeps out a slow NIC (which also drops at its shaper and collapses, with `--max-peers
//! auto`'s 9 peers in flight: 2.1 retransmits per MB on the same rig; fewer peers would not help
//! it) and the CI's 16 ranks on 2 shared cores (8 x 2 x 2 with every peer at once, 14 peers:
//! 2 MiB at 0.42 of 1 MiB's with 0.36 per MB; tests/fixtures/incast-healthy).
//! The kernel counts per network namespace ([`crate::tcp_stats`]); everything the rule reads is
//! in results.csv too ([`SizeLoss::from_csv`]).

use crate::placement::dry_run::NodeFinding;
use crate::placement::preflight::Level;
use crate::report::SizeResult;
use crate::tcp_stats::TcpActivity;

/// Linux's minimum retransmission timeout (`TCP_RTO_MIN`), microseconds.
pub const MIN_RTO_US: f64 = 200_000.0;
/// busbw below this share of the reference size's (the run's best for timeouts, the best smaller
/// size's for retransmissions) counts as a collapse.
pub const COLLAPSE_SHARE: f64 = 0.5;
/// Receivers with more peers in flight than this are served in rounds by `--max-peers auto`.
pub const SUGGESTED_MAX_PEERS: u32 = 8;
/// Retransmitted segments per MB (10^6 bytes) of network bytes from which losses count: 1 in
/// about 3500 full segments. The rig's incast collapses retransmitted 1.2 (8 x 8 x 4) and 2.9
/// (12 x 5 x 3, tests/fixtures/incast) per MB; `--max-peers auto` 0.9 and 0.65 on the same rigs
/// without a collapse; a 16 x 8 x 4 run 0.006.
pub const RETRANS_PER_MB_FLOOR: f64 = 0.2;
/// Receivers need more peers in flight than this for a collapse with retransmissions to be
/// incast: twice what `--max-peers auto` allows (which measured 9 in flight on the rigs).
pub const INCAST_PEERS: u32 = 2 * SUGGESTED_MAX_PEERS;
/// With fewer peers, a collapse is a queue's when at least this share of the job's namespaces
/// retransmitted (and at least two did).
pub const QUEUE_SPREAD: f64 = 0.5;
/// ... and the busiest NIC carried at least this share of its rate at the reference size.
pub const QUEUE_LOAD: f64 = 0.5;

/// What the retransmission rule reads of one size; all of it is in results.csv.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeLoss {
    pub size_bytes: u64,
    pub busbw_gbps: f64,
    /// The most peers one endpoint had receives posted to at once.
    pub recv_peers: u32,
    /// Network bytes of the timed iterations (planned bytes per iteration x iterations).
    pub network_bytes: f64,
    /// (retransmitted segments, retransmission timeouts); `None` where no host read them.
    pub tcp: Option<(u64, u64)>,
    /// (namespaces that retransmitted, namespaces read); `None` where unknown (results.csv).
    pub spread: Option<(usize, usize)>,
    /// The busiest NIC's bytes per iteration over its rate, over the iteration's time
    /// ([`crate::cost::busiest_nic_load`]); `None` where no rate is known.
    pub link_load: Option<f64>,
}

impl SizeLoss {
    pub fn of(r: &SizeResult) -> SizeLoss {
        SizeLoss {
            size_bytes: r.size_bytes,
            busbw_gbps: r.busbw_gbps,
            recv_peers: r.peers_in_flight.1,
            network_bytes: r.bytes_planned as f64 * r.iters as f64,
            tcp: r.tcp.as_ref().map(|t| (t.total.retrans_segs, t.total.timeouts)),
            spread: r.tcp.as_ref().map(|t| {
                let hit = t.namespaces.iter().filter(|n| n.counters.retrans_segs > 0).count();
                (hit, t.namespaces.len())
            }),
            link_load: None,
        }
    }

    /// Whether the losses came from many namespaces (a queue everybody crosses), not one host.
    fn spread_wide(&self) -> bool {
        self.spread
            .is_some_and(|(hit, all)| hit >= 2 && hit as f64 >= QUEUE_SPREAD * all as f64)
    }

    /// The sizes of a results.csv (schema 4 and later: `tcp_retrans_segs`, `tcp_timeouts`),
    /// or what is wrong with it.
    pub fn from_csv(text: &str) -> Result<Vec<SizeLoss>, String> {
        let mut reader = ::csv::Reader::from_reader(text.as_bytes());
        let header = reader.headers().map_err(|e| e.to_string())?.clone();
        let col = |name: &str| header.iter().position(|c| c == name).ok_or(format!("no {name} column"));
        let idx = [
            col("size_bytes")?,
            col("busbw_gbps")?,
            col("recv_peers_in_flight")?,
            col("bytes_planned")?,
            col("iters")?,
            col("tcp_retrans_segs")?,
            col("tcp_timeouts")?,
        ];
        reader
            .records()
            .map(|row| {
                let row = row.map_err(|e| e.to_string())?;
                let cell = |i: usize| row.get(idx[i]).unwrap_or("");
                let num = |i: usize| {
                    cell(i)
                        .parse::<f64>()
                        .map_err(|_| format!("{:?} is no number", cell(i)))
                };
                let tcp = match (cell(5).parse::<u64>(), cell(6).parse::<u64>()) {
                    (Ok(r), Ok(t)) => Some((r, t)),
                    _ => None,
                };
                Ok(SizeLoss {
                    size_bytes: num(0)? as u64,
                    busbw_gbps: num(1)?,
                    recv_peers: num(2)? as u32,
                    network_bytes: num(3)? * num(4)?,
                    tcp,
                    spread: None,
                    link_load: None,
                })
            })
            .collect()
    }

    /// Retransmitted segments per MB of network bytes.
    fn retrans_per_mb(&self) -> Option<f64> {
        let (retrans, _) = self.tcp?;
        (self.network_bytes > 0.0).then(|| retrans as f64 / (self.network_bytes / 1e6))
    }
}

/// A size named by the retransmission rule: where, and against which smaller size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Collapse {
    /// Index of the collapsed size.
    pub at: usize,
    /// Index of the best smaller size.
    pub reference: usize,
    /// busbw over the reference's.
    pub share: f64,
    pub retrans_per_mb: f64,
    /// Many peers per receiver (incast); else a queue with few peers (the third rule).
    pub incast: bool,
}

/// The deepest of `found`.
fn deepest(found: &[Collapse]) -> Option<&Collapse> {
    found.iter().min_by(|a, b| a.share.total_cmp(&b.share))
}

/// The second rule's collapses and, unless a slow NIC was named (`slow_nic`: the third rule
/// stays out of its way), the third's: few peers per receiver, losses from many namespaces.
pub fn collapses(sizes: &[SizeLoss], slow_nic: bool) -> Vec<Collapse> {
    let mut found = Vec::new();
    for (at, s) in sizes.iter().enumerate() {
        let Some(rate) = s.retrans_per_mb() else { continue };
        let reference = sizes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.size_bytes < s.size_bytes)
            .max_by(|a, b| a.1.busbw_gbps.total_cmp(&b.1.busbw_gbps));
        let Some((reference, best)) = reference else { continue };
        if best.busbw_gbps <= 0.0 {
            continue;
        }
        let share = s.busbw_gbps / best.busbw_gbps;
        let incast = s.recv_peers > INCAST_PEERS;
        let loaded = best.link_load.is_some_and(|l| l >= QUEUE_LOAD);
        let queue = !incast && !slow_nic && s.spread_wide() && loaded;
        if rate >= RETRANS_PER_MB_FLOOR && share < COLLAPSE_SHARE && (incast || queue) {
            found.push(Collapse {
                at,
                reference,
                share,
                retrans_per_mb: rate,
                incast,
            });
        }
    }
    found
}

/// The warning for the deepest of `found` (collapses of `sizes`: [`collapses`]).
fn collapse_finding(sizes: &[SizeLoss], found: &[Collapse], hosts: Vec<String>) -> Option<NodeFinding> {
    let worst = deepest(found)?;
    let s = &sizes[worst.at];
    let (retrans, timeouts) = s.tcp?;
    let of = if found.len() > 1 {
        format!(" (1 of {} sizes)", found.len())
    } else {
        String::new()
    };
    let (what, hint) = if worst.incast {
        ("incast", format!("try --max-peers {SUGGESTED_MAX_PEERS}"))
    } else {
        (
            "a queue overflowed",
            "check the NICs' queues and drops (tc -s qdisc, ethtool -S)".to_string(),
        )
    };
    Some(NodeFinding {
        level: Level::Warning,
        text: format!(
            "{what} at {}{of}: busbw {:.2} of {}'s, {retrans} retransmits ({:.1} per MB), {timeouts} timeouts, {} peers per receiver; {hint}",
            tcpx_units::format_size_label(s.size_bytes),
            worst.share,
            tcpx_units::format_size_label(sizes[worst.reference].size_bytes),
            worst.retrans_per_mb,
            s.recv_peers,
        ),
        hosts,
    })
}

/// One warning for the run when some sizes stalled on retransmission timeouts or collapsed with
/// retransmissions, with many peers per receiver or, unless a slow NIC was named (`slow_nic`),
/// losses from many namespaces at a loaded NIC (`loads`: per result, the busiest NIC's share of
/// its rate). Timeouts first: they are the stronger evidence. The per-size counters stay in the
/// results.
pub fn finding(results: &[SizeResult], slow_nic: bool, loads: &[Option<f64>]) -> Option<NodeFinding> {
    timeout_finding(results).or_else(|| {
        let mut sizes: Vec<SizeLoss> = results.iter().map(SizeLoss::of).collect();
        for (s, l) in sizes.iter_mut().zip(loads) {
            s.link_load = *l;
        }
        let found = collapses(&sizes, slow_nic);
        let hosts = results[deepest(&found)?.at]
            .tcp
            .as_ref()
            .map(retransmitting_hosts)
            .unwrap_or_default();
        collapse_finding(&sizes, &found, hosts)
    })
}

/// The hosts of the namespaces that retransmitted, most first.
fn retransmitting_hosts(tcp: &TcpActivity) -> Vec<String> {
    let mut hit: Vec<_> = tcp.namespaces.iter().filter(|n| n.counters.retrans_segs > 0).collect();
    hit.sort_by_key(|n| std::cmp::Reverse(n.counters.retrans_segs));
    hit.iter().flat_map(|n| n.hosts.iter().cloned()).collect()
}

/// The timeouts rule: the worst size's counts and hosts in one line, and what to try.
fn timeout_finding(results: &[SizeResult]) -> Option<NodeFinding> {
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
        let f = finding(&results, false, &[]).expect("a finding");
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
        assert!(finding(
            &[
                size(1 << 20, 1.0, 5_000.0, &[1, 0]),
                size(8 << 20, 1.0, 9_000.0, &[0, 0])
            ],
            false,
            &[]
        )
        .is_none());
        // A slow size with no timeout is the slow-NIC rule's business, not incast.
        assert!(finding(
            &[
                size(1 << 20, 1.0, 5_000.0, &[0, 0]),
                size(8 << 20, 0.2, 300_000.0, &[0, 0])
            ],
            false,
            &[]
        )
        .is_none());
        // Unread counters (no /proc/net): nothing to say.
        let mut r = size(8 << 20, 0.2, 300_000.0, &[5]);
        r.tcp = None;
        assert!(finding(&[size(1 << 20, 1.0, 5_000.0, &[0]), r], false, &[]).is_none());
    }
}

/// The retransmission rule on measured figures (docs/runs/h100x4-20261126-issue28-scale: the
/// GPU host's rig, fullmesh `-b 1M -e 8M -n 10`, every NIC at 2gbit; busbw as the share of the
/// shaped limit, which has the ratios busbw has) and on recorded runs (tests/fixtures/incast*).
#[cfg(test)]
mod retransmission_tests {
    use super::*;

    /// The second rule's collapses alone (many peers per receiver), in the order given.
    fn lossy_collapses(sizes: &[SizeLoss]) -> Vec<Collapse> {
        collapses(sizes, false).into_iter().filter(|c| c.incast).collect()
    }

    /// The second rule's warning: the deepest incast collapse's counts in one line.
    fn lossy_collapse_finding(sizes: &[SizeLoss], hosts: Vec<String>) -> Option<NodeFinding> {
        collapse_finding(sizes, &lossy_collapses(sizes), hosts)
    }

    const MIB: u64 = 1 << 20;

    /// Fullmesh at `--scope inter-node` (the rig's default) over `endpoints` of which `remote`
    /// on other nodes, 10 timed iterations: (size in MiB, busbw, retransmits), 0 timeouts.
    fn run(endpoints: u64, remote: u64, peers: u32, sizes: &[(u64, f64, u64)]) -> Vec<SizeLoss> {
        sizes
            .iter()
            .map(|&(mib, busbw, retrans)| SizeLoss {
                size_bytes: mib * MIB,
                busbw_gbps: busbw,
                recv_peers: peers,
                network_bytes: (endpoints * mib * MIB * remote / endpoints * 10) as f64,
                tcp: Some((retrans, 0)),
                spread: None,
                link_load: None,
            })
            .collect()
    }

    #[test]
    fn the_rigs_8x8x4_collapse_with_every_peer_at_once_is_named_without_timeouts() {
        let all = run(
            64,
            56,
            56,
            &[(1, 0.85, 0), (2, 1.25, 2260), (4, 0.36, 182), (8, 0.20, 5479)],
        );
        let f = lossy_collapse_finding(&all, vec![]).expect("incast named");
        assert_eq!(f.level, Level::Warning);
        assert_eq!(
            f.text,
            "incast at 8 MiB: busbw 0.16 of 2 MiB's, 5479 retransmits (1.2 per MB), 0 timeouts, 56 peers per receiver; try --max-peers 8"
        );
        assert!(f.text.len() <= 200, "{} chars", f.text.len());
        // 4 MiB collapsed too, with 0.08 retransmits per MB: below the floor, not named.
        assert_eq!(lossy_collapses(&all).len(), 1);
    }

    /// The run's finding (what summary.json and the footer get), from the 8 x 8 x 4 collapse as
    /// the engine reports it: 0 timeouts, so the timeouts rule alone said nothing.
    #[test]
    fn the_runs_finding_names_a_collapse_without_timeouts_and_the_retransmitting_hosts() {
        use crate::export::fixtures;
        use crate::tcp_stats::{TcpActivity, TcpCounters};
        let sizes = [(1, 0.85, 0), (2, 1.25, 2260), (4, 0.36, 182), (8, 0.20, 5479)];
        let results: Vec<SizeResult> = sizes
            .iter()
            .map(|&(mib, busbw, retrans): &(u64, f64, u64)| {
                let mut r = fixtures::size(mib * MIB, 1000.0, Some(0));
                r.busbw_gbps = busbw;
                r.iters = 10;
                r.bytes_planned = 56 * mib * MIB;
                r.peers_in_flight = (56, 56);
                // node7 retransmitted nothing; the rest split the count.
                r.tcp = TcpActivity::from_readings((0..8u64).map(|n| {
                    let share = if n == 7 {
                        0
                    } else {
                        retrans / 7 + u64::from(n < retrans % 7)
                    };
                    (
                        n,
                        format!("node{n}"),
                        TcpCounters {
                            retrans_segs: share,
                            timeouts: 0,
                        },
                    )
                }));
                r
            })
            .collect();
        let f = finding(&results, false, &[]).expect("incast named");
        assert!(
            f.text
                .starts_with("incast at 8 MiB: busbw 0.16 of 2 MiB's, 5479 retransmits"),
            "{}",
            f.text
        );
        assert_eq!(f.hosts.len(), 7, "{:?}", f.hosts);
        assert!(!f.hosts.contains(&"node7".to_string()), "{:?}", f.hosts);
    }

    #[test]
    fn the_same_rig_with_max_peers_auto_a_slow_nic_or_16_nodes_is_not_incast() {
        // --max-peers auto: 4298 retransmits at 8 MiB (0.9 per MB) but no collapse.
        let auto = run(64, 56, 9, &[(1, 0.48, 0), (2, 0.88, 0), (4, 0.65, 5), (8, 0.89, 4298)]);
        assert_eq!(lossy_collapses(&auto), []);
        // node5 eth3 at 500mbit: a collapse with 2.1 retransmits per MB, from 9 peers: the
        // slow-NIC rule's, not incast (fewer peers would not help).
        let slow = run(
            64,
            56,
            9,
            &[(1, 0.34, 16), (2, 0.05, 8), (4, 0.06, 40), (8, 0.09, 9673)],
        );
        assert_eq!(lossy_collapses(&slow), []);
        // 16 x 8 x 4, CPU-bound at 128 ranks on 64 cores: no collapse, no losses.
        let big = run(128, 120, 9, &[(1, 0.14, 0), (2, 0.23, 13), (4, 0.44, 0), (8, 0.55, 60)]);
        assert_eq!(lossy_collapses(&big), []);
    }

    /// The 4 x 2 x 2 rig at 1gbit (issue 43; `tools/scale-bench.sh` on the VM): 8 MiB fell to
    /// 0.49 of 4 MiB's busbw with 6 peers per receiver and every namespace retransmitting.
    #[test]
    fn a_collapse_with_few_peers_and_losses_everywhere_is_a_queue() {
        let mut sizes = run(
            8,
            6,
            6,
            &[(1, 0.121, 0), (2, 0.150, 26), (4, 0.151, 15), (8, 0.074, 343)],
        );
        for s in &mut sizes {
            s.spread = Some((4, 4));
            s.link_load = Some(1.0);
        }
        let f = collapse_finding(&sizes, &collapses(&sizes, false), vec![]).expect("a queue named");
        assert_eq!(
            f.text,
            "a queue overflowed at 8 MiB: busbw 0.49 of 4 MiB's, 343 retransmits (0.7 per MB), 0 timeouts, 6 peers per receiver; check the NICs' queues and drops (tc -s qdisc, ethtool -S)"
        );
        assert_eq!(lossy_collapses(&sizes), [], "the incast rule alone keeps its 16 peers");
        assert_eq!(collapses(&sizes, true), [], "a slow NIC named: its own finding says it");
        // One host's losses (a slow NIC's shaper), or counters of one namespace: not a queue.
        let mut one = sizes.clone();
        one[3].spread = Some((1, 4));
        assert_eq!(collapses(&one, false), []);
        one[3].spread = Some((1, 1));
        assert_eq!(collapses(&one, false), []);
        one[3].spread = None;
        assert_eq!(collapses(&one, false), []);
        // Losses everywhere but no collapse, or a collapse with few losses: quiet.
        let mut kept = sizes.clone();
        kept[3].busbw_gbps = 0.08;
        assert_eq!(collapses(&kept, false), []);
        let mut few = sizes.clone();
        few[3].tcp = Some((90, 0));
        assert_eq!(collapses(&few, false), []);
        // NICs far from their rate at the reference size: no queue filled.
        let mut idle = sizes;
        idle[2].link_load = Some(0.2);
        assert_eq!(collapses(&idle, false), []);
        idle[2].link_load = None;
        assert_eq!(collapses(&idle, false), []);
    }

    /// The CI's 8 x 2 x 2 rig with every peer at once (tests/fixtures/incast-healthy, its
    /// summary.json): 2 MiB at 0.42 of 1 MiB's busbw, 53 retransmits (0.36 per MB), 14 peers,
    /// all 8 namespaces retransmitting, on 2 shared cores with unshaped NICs: not a queue.
    #[test]
    fn the_ci_rigs_crowded_collapse_is_no_queue() {
        let mut sizes = run(
            16,
            14,
            14,
            &[(1, 0.0244, 11), (2, 0.0102, 53), (4, 0.0160, 46), (8, 0.0238, 7)],
        );
        for s in &mut sizes {
            s.spread = Some((8, 8));
        }
        assert_eq!(collapses(&sizes, false), [], "no rate known: the NICs' load is not");
        sizes[0].link_load = Some(0.01);
        assert_eq!(collapses(&sizes, false), [], "1% of a 10 Gbit/s veth");
    }

    #[test]
    fn each_condition_is_needed() {
        let base = run(64, 56, 56, &[(2, 1.25, 0), (8, 0.20, 5479)]);
        assert_eq!(lossy_collapses(&base).len(), 1);
        let mut few_losses = base.clone();
        few_losses[1].tcp = Some((900, 0)); // 0.19 per MB
        assert_eq!(lossy_collapses(&few_losses), []);
        let mut few_peers = base.clone();
        few_peers[1].recv_peers = INCAST_PEERS;
        assert_eq!(lossy_collapses(&few_peers), []);
        let mut no_collapse = base.clone();
        no_collapse[1].busbw_gbps = 0.63;
        assert_eq!(lossy_collapses(&no_collapse), []);
        // The first size has nothing smaller to collapse from; unread counters say nothing.
        assert_eq!(lossy_collapses(&base[1..]), []);
        let mut unread = base;
        unread[1].tcp = None;
        assert_eq!(lossy_collapses(&unread), []);
    }

    /// A recorded run's results.csv (a folder of tests/fixtures), or None where it is absent.
    fn recorded(folder: &str) -> Option<Vec<SizeLoss>> {
        let path = format!("{}/tests/fixtures/{folder}/results.csv", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).ok()?;
        Some(SizeLoss::from_csv(&text).unwrap_or_else(|e| panic!("{path}: {e}")))
    }

    /// The GPU host's 12 x 5 x 3 rig with `--max-peers all` (tests/fixtures/incast/README.md):
    /// busbw 0.133 GB/s at 2 MiB, 0.035 at 8 MiB with 13402 retransmits and no timeout.
    #[test]
    fn the_recorded_12x5x3_collapse_is_named() {
        let sizes = recorded("incast/h100x4-12x5x3-maxpeers-all").expect("the recorded run is committed");
        let f = lossy_collapse_finding(&sizes, vec![]).expect("the recorded collapse is named");
        assert_eq!(
            f.text,
            "incast at 8388600 B: busbw 0.26 of 2097120 B's, 13402 retransmits (2.9 per MB), 0 timeouts, 55 peers per receiver; try --max-peers 8"
        );
        assert!(f.text.len() <= 200, "{} chars: {}", f.text.len(), f.text);
    }

    /// Healthy runs: the same 12 x 5 x 3 rig with default flags (3006 retransmits at 8 MiB, no
    /// collapse), and two recorded on this 2-core VM: fullmesh with default flags, 4 ranks on one
    /// host, and the 8 x 2 x 2 rig with every peer at once.
    #[test]
    fn recorded_healthy_runs_are_not_named() {
        for folder in [
            "incast/h100x4-12x5x3-auto",
            "incast-healthy/fullmesh-4",
            "incast-healthy/rig-8x2x2-all",
        ] {
            let sizes = recorded(folder).unwrap_or_else(|| panic!("tests/fixtures/{folder} is committed"));
            assert!(sizes.iter().all(|s| s.tcp.is_some()), "{folder}: counters read");
            assert_eq!(lossy_collapses(&sizes), [], "{folder}");
        }
    }
}
