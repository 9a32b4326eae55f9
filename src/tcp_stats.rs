//! The kernel's TCP loss counters of this process's network namespace: how often TCP had to
//! retransmit, and how often a retransmission timer fired.
//!
//! Why: many flows into one receiver at once (fullmesh at scale: 56 flows per receiver at
//! 8 nodes x 8 GPUs) overflow the receiver's queue; the senders lose segments, and once a whole
//! window is lost only the retransmission timeout (at least 200 ms on Linux) recovers it. An
//! iteration that waited for one looks like a slow network, and nothing but these counters tells
//! the two apart.
//!
//! Both counters are per network namespace: `/proc/net/snmp` and `/proc/net/netstat` show the
//! namespace of the process that reads them. Each host's leader reads them around every size's
//! timed iterations; other traffic of the namespace (MPI's own, ssh) is counted too, which is why
//! the finding compares against the size's stalls instead of reporting every retransmission.

use std::collections::HashMap;

/// TCP loss counters at one moment, or their growth over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct TcpCounters {
    /// Segments retransmitted (`Tcp: RetransSegs` in `/proc/net/snmp`).
    pub retrans_segs: u64,
    /// Retransmission timeouts (`TcpExt: TCPTimeouts` in `/proc/net/netstat`): each stalled its
    /// flow for at least the minimum RTO (200 ms).
    pub timeouts: u64,
}

impl TcpCounters {
    /// Growth from `self` to `later` (a counter that went backwards counts as 0: a namespace
    /// cannot reset its counters, but a reading of another namespace can look like it).
    #[must_use]
    pub fn delta(&self, later: &TcpCounters) -> TcpCounters {
        TcpCounters {
            retrans_segs: later.retrans_segs.saturating_sub(self.retrans_segs),
            timeouts: later.timeouts.saturating_sub(self.timeouts),
        }
    }
}

/// One network namespace's counter growth over a size's timed iterations, with the hosts (as
/// the run names them) that share it: `--ranks-per-node` makes several "nodes" of one namespace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct NamespaceTcp {
    pub hosts: Vec<String>,
    #[serde(flatten)]
    pub counters: TcpCounters,
}

/// The TCP loss counters of one size, over every namespace the job's hosts read (each once).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct TcpActivity {
    /// Sums over `namespaces`.
    #[serde(flatten)]
    pub total: TcpCounters,
    pub namespaces: Vec<NamespaceTcp>,
}

impl TcpActivity {
    /// Folds `(namespace key, host, growth)` readings, one per host leader, into one activity:
    /// readings of one namespace count once. `None` when there are no readings.
    pub fn from_readings(readings: impl IntoIterator<Item = (u64, String, TcpCounters)>) -> Option<TcpActivity> {
        let mut keys: Vec<u64> = Vec::new();
        let mut act = TcpActivity::default();
        for (key, host, c) in readings {
            if let Some(i) = keys.iter().position(|&k| k == key) {
                act.namespaces[i].hosts.push(host);
            } else {
                keys.push(key);
                act.total.retrans_segs += c.retrans_segs;
                act.total.timeouts += c.timeouts;
                act.namespaces.push(NamespaceTcp {
                    hosts: vec![host],
                    counters: c,
                });
            }
        }
        (!keys.is_empty()).then_some(act)
    }

    /// The namespaces with at least one timeout, most first: `host:count` joined by `,` (the
    /// first `limit`, then how many more), for one short line.
    pub fn timeouts_by_host(&self, limit: usize) -> String {
        let mut hit: Vec<&NamespaceTcp> = self.namespaces.iter().filter(|n| n.counters.timeouts > 0).collect();
        hit.sort_by_key(|n| std::cmp::Reverse(n.counters.timeouts));
        let mut parts: Vec<String> = hit
            .iter()
            .take(limit)
            .map(|n| format!("{} {}", n.hosts.join("+"), n.counters.timeouts))
            .collect();
        if hit.len() > limit {
            parts.push(format!("{} more", hit.len() - limit));
        }
        parts.join(", ")
    }
}

/// This namespace's counters; `None` where `/proc/net` cannot be read (not Linux, or a
/// restricted container), which leaves the columns empty rather than zero.
pub fn read() -> Option<TcpCounters> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let netstat = std::fs::read_to_string("/proc/net/netstat").ok()?;
    parse(&snmp, &netstat)
}

/// Parses the two files' text: both hold pairs of lines, `Prefix: names...` then
/// `Prefix: values...`.
pub fn parse(snmp: &str, netstat: &str) -> Option<TcpCounters> {
    let retrans_segs = *table(snmp, "Tcp").get("RetransSegs")?;
    let timeouts = *table(netstat, "TcpExt").get("TCPTimeouts")?;
    Some(TcpCounters { retrans_segs, timeouts })
}

/// The `name -> value` map of one prefix's header/value line pair.
fn table<'a>(text: &'a str, prefix: &str) -> HashMap<&'a str, u64> {
    let tag = format!("{prefix}:");
    let mut lines = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(tag.as_str()));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return HashMap::new();
    };
    names
        .split_whitespace()
        .skip(1)
        .zip(values.split_whitespace().skip(1))
        // RtoMin and MaxConn can be negative (-1 = unknown); they are not counters.
        .filter_map(|(n, v)| v.parse::<u64>().ok().map(|v| (n, v)))
        .collect()
}

/// A process's network namespace, as a number that is the same for every process in it (the
/// inode of `/proc/self/ns/net`), combined with the machine's boot id so that two machines whose
/// initial namespaces share an inode number stay apart. Hosts with the same key read the same
/// counters and must be counted once.
pub fn namespace_key() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata("/proc/self/ns/net").ok()?.ino();
    let boot = crate::topology::boot_id().unwrap_or_default();
    // FNV-1a over the boot id; 21 bits of it above the inode's 32 (namespace inodes are below
    // 2^32) stay below 2^53, so the key crosses MPI as an exact f64.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in boot.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Some(((h & 0x1f_ffff) << 32) | (inode & 0xffff_ffff))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Excerpts of a real Linux 6.1 machine's /proc/net/snmp and /proc/net/netstat (this box).
    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 123\n\
        Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
        Tcp: 1 200 120000 -1 1563 27 0 4 9 1011352 1324121 1042 0 23 0\n\
        Udp: InDatagrams NoPorts\nUdp: 5 0\n";
    const NETSTAT: &str = "TcpExt: SyncookiesSent SyncookiesRecv TCPTimeouts TCPLossProbes\n\
        TcpExt: 0 0 37 12\n\
        IpExt: InNoRoutes InTruncatedPkts\nIpExt: 0 0\n";

    #[test]
    fn reads_retransmissions_and_timeouts() {
        assert_eq!(
            parse(SNMP, NETSTAT),
            Some(TcpCounters {
                retrans_segs: 1042,
                timeouts: 37
            })
        );
    }

    #[test]
    fn missing_counters_are_none_not_zero() {
        assert_eq!(parse(SNMP, "IpExt: InNoRoutes\nIpExt: 0\n"), None);
        assert_eq!(parse("", NETSTAT), None);
    }

    #[test]
    fn delta_never_underflows() {
        let a = TcpCounters {
            retrans_segs: 10,
            timeouts: 5,
        };
        let b = TcpCounters {
            retrans_segs: 25,
            timeouts: 4,
        };
        assert_eq!(
            a.delta(&b),
            TcpCounters {
                retrans_segs: 15,
                timeouts: 0
            }
        );
    }

    fn growth(retrans_segs: u64, timeouts: u64) -> TcpCounters {
        TcpCounters { retrans_segs, timeouts }
    }

    #[test]
    fn a_shared_namespace_counts_once() {
        let act = TcpActivity::from_readings([
            (7, "node0".to_string(), growth(10, 2)),
            (8, "node1".to_string(), growth(5, 0)),
            // --ranks-per-node: node2 is node0's namespace read again.
            (7, "node2".to_string(), growth(10, 2)),
        ])
        .expect("readings");
        assert_eq!(act.total, growth(15, 2));
        assert_eq!(act.namespaces[0].hosts, ["node0", "node2"]);
        assert_eq!(act.timeouts_by_host(1), "node0+node2 2");
        assert_eq!(TcpActivity::from_readings([]), None);
    }

    #[test]
    fn timeouts_by_host_lists_the_worst_first_and_counts_the_rest() {
        let act = TcpActivity::from_readings((0..10).map(|i| (i, format!("node{i}"), growth(0, i)))).expect("readings");
        assert_eq!(act.timeouts_by_host(3), "node9 9, node8 8, node7 7, 6 more");
    }

    #[test]
    fn this_machine_has_counters_and_a_namespace() {
        // Linux CI and developer machines: both files exist in every namespace.
        assert!(read().is_some());
        let k = namespace_key().expect("namespace key");
        assert!(k < (1u64 << 53), "{k} does not cross MPI as an exact f64");
    }
}
