//! Bytes moved: what every source that can see the payload says it was, and which of them
//! is a witness.
//!
//! Completions only prove that requests completed. Per size, these sources say more:
//! - the sizes a plugin reports in `test` (TCPX never reports them) and the device-unpack
//!   descriptors of each receive (GPU memory on an UNPACK plugin): both are written by the
//!   plugin under test, so they are its **claim**, not a witness; a plugin that lies about
//!   sizes writes descriptors for bytes it never received just as easily (tcpx-perf's unpack
//!   kernel copies exactly what the descriptors name, stale or not). A claim below the plan
//!   fails the size; a claim that matches verifies nothing;
//! - the kernel's counters of the interfaces the plugin's devices name ([`crate::wire`]), read
//!   on every host before and after the timed iterations and exchanged over MPI. They bound the
//!   payload from below: bytes that must have crossed an interface and did not show up there
//!   were never sent; other traffic on the interface inflates them, so they are a **lower
//!   bound** and never verify a size;
//! - the data check (`-c 1`): every received byte of every timed iteration compared with the
//!   pattern. The only exact witness: with no wrong byte, the planned bytes arrived
//!   ([`ByteCheck::witnessed_by_data_check`]).
//!
//! Where no witness saw the bytes, the result says "unverified" rather than copying the plan.

use crate::collectives::Collectives;
use crate::engine::progress::Delivered;
use crate::plan::Plan;
use crate::tcp_stats::{self, TcpActivity, TcpCounters};
use crate::topology::Topology;
use crate::wire::{self, IfaceCounters};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which hosts read which interfaces, decided once per run.
pub struct WireProbe {
    /// The interfaces the plugin's devices name, in device order, deduplicated; those this host's
    /// kernel has no counters for are kept (with `None`) so every rank sends the same layout.
    ifaces: Vec<String>,
    /// Whether this rank reads its host's counters (the lowest rank on each host).
    leader: bool,
    /// GPUDirect-TCPX receiving into GPU memory: devmem counters must move (see
    /// [`ByteCheck::devmem_errors`]).
    pub devmem_required: bool,
}

/// One interface of one host over the timed iterations of one size.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct WireBytes {
    pub host: String,
    pub iface: String,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Driver devmem packet counters (`rx_devmem_pkts`, ...), where the driver has them.
    pub devmem_pkts: Option<u64>,
}

/// The byte accounting of one size, per timed iteration where it says so.
#[derive(Debug, Clone, Default, Serialize, PartialEq, schemars::JsonSchema)]
pub struct ByteCheck {
    /// Payload bytes per iteration seen by an exact witness independent of the plugin (the data
    /// check, with no wrong byte); `None`: unverified.
    pub measured: Option<u64>,
    /// Payload bytes per iteration by the plugin's own account (its reported sizes, or its
    /// unpack descriptors): a claim by the thing under test, never a witness.
    pub claimed: Option<u64>,
    /// The sources that checked this size, as results.csv's `bytes_verified_by` names them:
    /// [`SOURCE_DATA`], [`SOURCE_PLUGIN`], [`SOURCE_UNPACK`], [`SOURCE_WIRE`].
    pub sources: Vec<&'static str>,
    /// Interface receive bytes per iteration, summed over every host that could read its
    /// interfaces; `None` when no host could.
    pub wire_rx_bytes: Option<u64>,
    /// Payload bytes per iteration that had to cross the counted interfaces (the lower bound the
    /// wire bytes are checked against).
    pub wire_payload_bytes: u64,
    /// Per host and interface, totals over the timed iterations.
    pub wire: Vec<WireBytes>,
}

/// The data check compared every received byte: an exact witness.
pub const SOURCE_DATA: &str = "data";
/// The plugin's reported sizes: its claim.
pub const SOURCE_PLUGIN: &str = "plugin (claim)";
/// The unpack descriptors the plugin wrote: its claim.
pub const SOURCE_UNPACK: &str = "unpack (claim)";
/// Interface counters: a lower bound (other traffic on the interface inflates them).
pub const SOURCE_WIRE: &str = "wire (lower bound)";

impl ByteCheck {
    /// The data check ran on this size and found no wrong byte: the planned `bytes` (per
    /// iteration) arrived exactly, and the size is verified.
    pub fn witnessed_by_data_check(&mut self, bytes: u64) {
        self.measured = Some(bytes);
        self.sources.insert(0, SOURCE_DATA);
    }

    /// GPUDirect-TCPX with GPU memory: every interface that received payload must have counted
    /// devmem packets, or the bytes went through the host path (contract #15). One line per
    /// interface that did not.
    pub fn devmem_errors(&self) -> Vec<String> {
        use crate::placement::devmem::{devmem_findings, NicTraffic};
        let traffic: Vec<NicTraffic> = self
            .wire
            .iter()
            .map(|w| NicTraffic {
                nic: format!("{}:{}", w.host, w.iface),
                gpu_payload_bytes: w.rx_bytes,
                devmem_delta: w.devmem_pkts,
            })
            .collect();
        devmem_findings(&traffic)
            .into_iter()
            .filter(|f| f.level == crate::placement::preflight::Level::Error)
            .map(|f| f.text)
            .collect()
    }

    /// `wire_rx_bytes / wire_payload_bytes`: at least 1 for a run that delivered everything.
    pub fn wire_ratio(&self) -> Option<f64> {
        let rx = self.wire_rx_bytes?;
        (self.wire_payload_bytes > 0).then(|| rx as f64 / self.wire_payload_bytes as f64)
    }

    /// The CSV cell for the per-interface bytes: `host:iface=rx/tx` joined by `;`.
    pub fn wire_cell(&self) -> String {
        self.wire
            .iter()
            .map(|w| format!("{}:{}={}/{}", w.host, w.iface, w.rx_bytes, w.tx_bytes))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// What [`WireProbe::exchange`] gathered from every rank.
pub struct Exchanged {
    pub wire: Vec<WireBytes>,
    pub tcp: Option<TcpActivity>,
    /// Per host, the payload that had to arrive there per iteration.
    pub arriving: BTreeMap<String, Arriving>,
}

/// A snapshot of this host's interfaces and its namespace's TCP loss counters (empty on
/// non-leaders).
pub struct Snapshot {
    ifaces: Vec<Option<IfaceCounters>>,
    tcp: Option<(u64, TcpCounters)>,
}

impl WireProbe {
    /// `device_names`: every plugin device's name (interfaces for socket plugins).
    pub fn new(device_names: &[String], topo: &Topology, rank: usize) -> WireProbe {
        let mut ifaces: Vec<String> = Vec::new();
        for name in device_names {
            if !ifaces.contains(name) {
                ifaces.push(name.clone());
            }
        }
        let host = &topo.hostnames[rank];
        let leader = topo.hostnames.iter().position(|h| h == host) == Some(rank);
        WireProbe {
            ifaces,
            leader,
            devmem_required: false,
        }
    }

    /// The interfaces this rank counts, for the header ("lo on 1 host").
    pub fn ifaces(&self) -> &[String] {
        &self.ifaces
    }

    pub fn snapshot(&self) -> Snapshot {
        if !self.leader {
            return Snapshot {
                ifaces: Vec::new(),
                tcp: None,
            };
        }
        Snapshot {
            ifaces: self.ifaces.iter().map(|i| wire::read(i)).collect(),
            tcp: tcp_stats::namespace_key().zip(tcp_stats::read()),
        }
    }

    /// Exchanges every host's counter deltas, summed over the `(before, after)` intervals, in
    /// one collective (every rank calls it): the interfaces' bytes as [`WireBytes`], one per
    /// host and readable interface, the TCP loss counters of each network namespace once
    /// (`None` when no host could read them), and what had to arrive at each host (every rank's
    /// `arriving` summed by host). Several intervals: a size run round by round
    /// (`--connect rounds`) counts its timed traffic only, never the connects between rounds.
    pub fn exchange(
        &self,
        coll: &dyn Collectives,
        topo: &Topology,
        intervals: &[(Snapshot, Snapshot)],
        arriving: Arriving,
    ) -> Exchanged {
        // Per interface: rx, tx, devmem (-1 = none); -1 rx = no reading. Then the namespace key,
        // retransmitted segments and timeouts (-1 key = no reading), then this rank's arriving
        // bytes. f64 is exact below 2^53.
        let n = self.ifaces.len();
        let stride = 3 * n + 5;
        let mut mine = vec![-1.0; stride];
        mine[3 * n + 3] = arriving.from_others as f64;
        mine[3 * n + 4] = arriving.from_itself as f64;
        if self.leader && !intervals.is_empty() {
            for i in 0..n {
                // Summed over the intervals; no reading in any of them is no reading.
                let deltas: Option<Vec<IfaceCounters>> = intervals
                    .iter()
                    .map(|(before, after)| match (before.ifaces.get(i)?, after.ifaces.get(i)?) {
                        (Some(b), Some(a)) => Some(b.delta(a)),
                        _ => None,
                    })
                    .collect();
                if let Some(deltas) = deltas {
                    mine[3 * i] = deltas.iter().map(|d| d.rx_bytes as f64).sum();
                    mine[3 * i + 1] = deltas.iter().map(|d| d.tx_bytes as f64).sum();
                    let devmem: Option<Vec<u64>> = deltas.iter().map(|d| d.devmem_pkts).collect();
                    mine[3 * i + 2] = devmem.map_or(-1.0, |v| v.iter().sum::<u64>() as f64);
                }
            }
        }
        let tcp: Option<Vec<(u64, TcpCounters)>> = intervals
            .iter()
            .map(|(before, after)| match (before.tcp, after.tcp) {
                (Some((k, b)), Some((k2, a))) if k == k2 => Some((k, b.delta(&a))),
                _ => None,
            })
            .collect();
        if let Some(tcp) = tcp.filter(|t| !t.is_empty() && t.iter().all(|(k, _)| *k == t[0].0)) {
            let retrans: u64 = tcp.iter().map(|(_, d)| d.retrans_segs).sum();
            let timeouts: u64 = tcp.iter().map(|(_, d)| d.timeouts).sum();
            mine[3 * n..3 * n + 3].copy_from_slice(&[tcp[0].0 as f64, retrans as f64, timeouts as f64]);
        }
        let all = coll.gather_f64(&mine);
        let rows = || all.chunks(stride).enumerate().take(topo.ranks());
        let mut wire = Vec::new();
        for (rank, row) in rows() {
            for (i, iface) in self.ifaces.iter().enumerate() {
                let v = &row[3 * i..3 * i + 3];
                if v[0] < 0.0 {
                    continue;
                }
                wire.push(WireBytes {
                    host: topo.hostnames[rank].clone(),
                    iface: iface.clone(),
                    rx_bytes: v[0] as u64,
                    tx_bytes: v[1] as u64,
                    devmem_pkts: (v[2] >= 0.0).then_some(v[2] as u64),
                });
            }
        }
        let tcp = TcpActivity::from_readings(rows().filter(|(_, row)| row[3 * n] >= 0.0).map(|(rank, row)| {
            let v = &row[3 * n..];
            (
                v[0] as u64,
                topo.hostnames[rank].clone(),
                TcpCounters {
                    retrans_segs: v[1] as u64,
                    timeouts: v[2] as u64,
                },
            )
        }));
        let mut arriving: BTreeMap<String, Arriving> = BTreeMap::new();
        for (rank, row) in rows() {
            let a = arriving.entry(topo.hostnames[rank].clone()).or_default();
            a.from_others += row[3 * n + 3] as u64;
            a.from_itself += row[3 * n + 4] as u64;
        }
        Exchanged { wire, tcp, arriving }
    }
}

/// Payload bytes per iteration that must arrive at a host: from other hosts, and from the host
/// itself (the kernel routes those over `lo`, so they count where a loopback interface is
/// counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arriving {
    pub from_others: u64,
    pub from_itself: u64,
}

impl Arriving {
    /// What the counted interfaces must show: with a loopback interface among them, the host's
    /// own flows too.
    fn owed(&self, loopback: bool) -> u64 {
        self.from_others + if loopback { self.from_itself } else { 0 }
    }
}

/// What `rank`'s endpoints receive per iteration over the network, by where it comes from:
/// every network flow of `plan` (a held plan holds them all) into one of them.
pub fn arriving(plan: &Plan, topo: &Topology, rank: usize) -> Arriving {
    let host_of = |endpoint: usize| topo.hostnames[topo.endpoints[endpoint].rank].as_str();
    let mine = topo.endpoints_of(rank);
    let host = topo.hostnames[rank].as_str();
    let mut a = Arriving::default();
    for f in plan.flows.iter().filter(|f| !f.is_local() && mine.contains(&f.dst)) {
        if host_of(f.src) == host {
            a.from_itself += f.len;
        } else {
            a.from_others += f.len;
        }
    }
    a
}

/// Checks one size: `delivered` summed over all ranks and timed iterations, `wire` from
/// [`WireProbe::exchange`] and what had to arrive at each host (its ranks' [`arriving`],
/// summed by the same exchange). An error names the numbers of the first shortfall found.
pub fn check(
    plan: &Plan,
    iters: u64,
    delivered: &Delivered,
    wire: Vec<WireBytes>,
    arriving: &BTreeMap<String, Arriving>,
) -> Result<ByteCheck, String> {
    let planned = plan.network_bytes() * iters;
    if delivered.planned != planned {
        return Err(format!(
            "size {}: receives for {} bytes completed, {planned} planned over {iters} iterations: the result is invalid",
            plan.size, delivered.planned
        ));
    }
    let mut sources = Vec::new();
    let mut claimed = None;
    if delivered.reported_missed == 0 && delivered.receives > 0 {
        // Each reported size was already compared with its receive's plan as it completed.
        sources.push(SOURCE_PLUGIN);
        claimed = Some(delivered.reported / iters);
    }
    if delivered.unpacked_missed == 0 && delivered.receives > 0 {
        sources.push(SOURCE_UNPACK);
        claimed = Some(delivered.unpacked / iters);
    }

    let mut hosts: Vec<&str> = Vec::new();
    for w in &wire {
        if !hosts.contains(&w.host.as_str()) {
            hosts.push(&w.host);
        }
    }
    let (mut rx_total, mut payload_total) = (0u64, 0u64);
    for host in &hosts {
        let counted: Vec<&WireBytes> = wire.iter().filter(|w| w.host == *host).collect();
        let loopback = counted.iter().any(|w| wire::is_loopback(&w.iface));
        let payload = arriving.get(*host).map_or(0, |a| a.owed(loopback)) * iters;
        let rx: u64 = counted.iter().map(|w| w.rx_bytes).sum();
        if rx < payload {
            let names: Vec<&str> = counted.iter().map(|w| w.iface.as_str()).collect();
            return Err(format!(
                "size {}: host {host} received {rx} bytes on {} over {iters} timed iterations, less than the {payload} bytes of payload that had to arrive there: the plugin did not put the data on the wire",
                plan.size,
                names.join(",")
            ));
        }
        rx_total += rx;
        payload_total += payload;
    }
    let wire_seen = !hosts.is_empty() && payload_total > 0;
    if wire_seen {
        sources.push(SOURCE_WIRE);
    }
    Ok(ByteCheck {
        measured: None,
        claimed,
        sources,
        wire_rx_bytes: wire_seen.then(|| rx_total / iters),
        wire_payload_bytes: payload_total / iters,
        wire,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Direction, Pattern, Scope};

    fn setup(n: usize, hosts: usize) -> (Plan, Topology) {
        let names = (0..n).map(|r| format!("h{}", r * hosts / n)).collect();
        let t = Topology::with_ranks_per_node(n, n, 1, names);
        let p = Plan::build(Pattern::Sendrecv, Scope::All, Direction::Bi, &t, 1 << 20, None).unwrap();
        (p, t)
    }

    /// What had to arrive at each host: every rank's [`arriving`] summed, as the exchange sums
    /// them.
    fn owed(p: &Plan, t: &Topology) -> BTreeMap<String, Arriving> {
        let mut by_host: BTreeMap<String, Arriving> = BTreeMap::new();
        for rank in 0..t.ranks() {
            let a = arriving(p, t, rank);
            let h = by_host.entry(t.hostnames[rank].clone()).or_default();
            h.from_others += a.from_others;
            h.from_itself += a.from_itself;
        }
        by_host
    }

    fn delivered(p: &Plan, iters: u64) -> Delivered {
        Delivered {
            receives: 4,
            planned: p.network_bytes() * iters,
            reported_missed: 4,
            unpacked_missed: 4,
            ..Delivered::default()
        }
    }

    fn lo(host: &str, rx: u64) -> WireBytes {
        WireBytes {
            host: host.into(),
            iface: "lo".into(),
            rx_bytes: rx,
            tx_bytes: rx,
            devmem_pkts: None,
        }
    }

    #[test]
    fn loopback_counts_must_cover_the_payload() {
        let (p, t) = setup(2, 1);
        let payload = p.network_bytes() * 3;
        let ok = check(&p, 3, &delivered(&p, 3), vec![lo("h0", payload + 100)], &owed(&p, &t)).unwrap();
        assert_eq!(ok.sources, vec![SOURCE_WIRE]);
        assert_eq!(
            ok.measured, None,
            "wire bytes bound the payload; they do not measure it"
        );
        assert!(ok.wire_ratio().unwrap() >= 1.0);
        let err = check(&p, 3, &delivered(&p, 3), vec![lo("h0", payload / 2)], &owed(&p, &t)).unwrap_err();
        assert!(
            err.contains("did not put the data on the wire") && err.contains(&(payload / 2).to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_nic_only_owes_the_bytes_from_other_hosts() {
        // 4 ranks on 2 hosts; sendrecv's ring shift: 0->1 and 2->3 stay on their host.
        let (p, t) = setup(4, 2);
        let owed = owed(&p, &t);
        let from_other_hosts = owed["h0"].from_others;
        assert!(from_other_hosts > 0 && owed["h0"].from_itself > 0);
        let eth = |host: &str, rx| WireBytes {
            iface: "eth1".into(),
            ..lo(host, rx)
        };
        let wire = vec![eth("h0", from_other_hosts), eth("h1", owed["h1"].from_others)];
        assert!(check(&p, 1, &delivered(&p, 1), wire, &owed).is_ok());
    }

    #[test]
    fn devmem_counters_that_did_not_move_are_errors() {
        let (p, t) = setup(2, 1);
        let nic = |devmem| WireBytes {
            iface: "eth2".into(),
            devmem_pkts: devmem,
            ..lo("h0", 4_300_000_000)
        };
        let c = check(&p, 1, &delivered(&p, 1), vec![nic(Some(0))], &owed(&p, &t)).unwrap();
        let errors = c.devmem_errors();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("h0:eth2: 0 devmem packets for 4.3 GB"),
            "{errors:?}"
        );
        let c = check(&p, 1, &delivered(&p, 1), vec![nic(Some(1_000_000))], &owed(&p, &t)).unwrap();
        assert!(c.devmem_errors().is_empty());
    }

    #[test]
    fn nothing_seen_is_unverified_and_completions_must_match_the_plan() {
        let (p, t) = setup(2, 1);
        let none = check(&p, 2, &delivered(&p, 2), Vec::new(), &owed(&p, &t)).unwrap();
        assert!(none.sources.is_empty() && none.measured.is_none() && none.wire_rx_bytes.is_none());
        let mut short = delivered(&p, 2);
        short.planned -= 1;
        assert!(check(&p, 2, &short, Vec::new(), &owed(&p, &t))
            .unwrap_err()
            .contains("the result is invalid"));
        let reported = Delivered {
            reported: p.network_bytes() * 2,
            reported_missed: 0,
            ..delivered(&p, 2)
        };
        let mut c = check(&p, 2, &reported, Vec::new(), &owed(&p, &t)).unwrap();
        assert_eq!(
            (c.sources.clone(), c.claimed, c.measured),
            (vec![SOURCE_PLUGIN], Some(p.network_bytes()), None),
            "the plugin's sizes are its claim: they verify nothing"
        );
        c.witnessed_by_data_check(p.network_bytes());
        assert_eq!(c.measured, Some(p.network_bytes()));
        assert_eq!(c.sources, vec![SOURCE_DATA, SOURCE_PLUGIN]);
    }
}
