//! Which NIC is slow: the link matrix (each flow's rate) read per NIC, with the NICs' own
//! counters beside it.
//!
//! The path of a flow: on a rail-aligned cluster each NIC is its own subnet (A3-high: one VPC
//! per NIC; the rig: one bridge per rail), so the kernel routes a flow by its destination: it
//! leaves the sender's host on the NIC in the receiver NIC's subnet and enters the receiver's
//! NIC. TCPX binds its sockets to the sending device's address, which chooses the source
//! address, not the route; NICs of one name are one rail. A flow between hosts therefore uses
//! `(sender host, rail)` sending and `(receiver host, rail)` receiving, the rail being the
//! receiver's NIC.
//!
//! The rule, per size of at least [`MIN_SIZE`] (as asked: `-e 1M` over 3 endpoints rounds to
//! 1048575 B and is judged) with at least [`MIN_FLOWS`] flows between hosts: every NIC side
//! (host, NIC, sending or receiving) gets the NIC's rate: the median rate of the flows through
//! it, times their number over the median side's (a NIC carrying one endpoint of three carries
//! half the flows of one carrying two, each twice as fast: per flow it would read 0.5 of the
//! median healthy, and a quarter-rate NIC 0.46), or, where the links are NIC links already (the
//! probe; a job past 65536 endpoint pairs), the median rate of those; the reference is the
//! median over all sides. A side is slow at that size when its median
//! is below [`SLOW_SHARE`] of the reference. It is reported when it is slow at more than half of
//! the sizes judged, the largest included. Each slow flow has a slow sending and a slow
//! receiving side; the sides that explain the most slow flows are named, the sending side first
//! (a NIC's egress limits TCP), and where the other side explains the same flows (two nodes
//! cannot tell them apart) the finding says so.

use crate::placement::dry_run::{NodeFinding, Row};
use crate::placement::preflight::Level;
use crate::report::{Level as LinkLevel, PairResult, SizeResult};
pub use crate::report::{Side, SlowNic};
use std::collections::{BTreeMap, HashMap};

/// Sizes below this are latency-bound on fast NICs and say little about a NIC's rate.
pub const MIN_SIZE: u64 = 1 << 20;
/// Fewer flows between hosts make the median meaningless (one slow NIC would be half of it).
pub const MIN_FLOWS: usize = 4;
/// A side below this share of the median side is slow.
pub const SLOW_SHARE: f64 = 0.5;

impl Side {
    /// `host nic sending` (or `receiving`).
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} {} {}",
            self.host,
            self.nic,
            if self.sending { "sending" } else { "receiving" }
        )
    }
}

impl SlowNic {
    /// The finding: one short line naming host, NIC, direction and measured share, and the
    /// flows as a count and this side's ranks in ranges (every flow is in `slow_nics`).
    pub fn finding(&self) -> NodeFinding {
        let twin = self
            .twin
            .as_ref()
            .map_or(String::new(), |t| format!("; same flows as {}", t.describe()));
        let wire = self.wire_bytes.map_or(String::new(), |b| {
            format!(", counters {:.1} MB/iteration", b as f64 / 1e6)
        });
        // The ranks on this side's host: senders of a sending side, receivers of a receiving one;
        // judged by NIC links, the hosts at their other ends.
        let ranks: Vec<usize> = self
            .flows
            .iter()
            .map(|&(sr, _, dr, _)| if self.side.sending { sr } else { dr })
            .collect();
        let (n, what, whom) = if self.links.is_empty() {
            (self.flows.len(), "flow", rank_ranges(&ranks))
        } else {
            let peers: Vec<String> = self
                .links
                .iter()
                .map(|(s, d)| if self.side.sending { d.clone() } else { s.clone() })
                .collect();
            (self.links.len(), "NIC link", tcpx_units::shorten(&peers, 4))
        };
        NodeFinding {
            level: Level::Warning,
            text: format!(
                "{} {} is slow {}: its flows ran at {:.2} of the median NIC at {} ({} vs {}), slow at {} of {} sizes; {n} {what}{} {} {whom}{wire}{twin}",
                self.side.host,
                self.side.nic,
                if self.side.sending { "sending" } else { "receiving" },
                self.share,
                tcpx_units::format_size_label(self.size),
                tcpx_units::format_rate(self.gbps),
                tcpx_units::format_rate(self.reference_gbps),
                self.slow_sizes,
                self.judged_sizes,
                if n == 1 { "" } else { "s" },
                if self.links.is_empty() == self.side.sending { "from" } else { "to" },
            ),
            hosts: vec![self.side.host.clone()],
        }
    }
}

/// Ranks as ranges, at most [`RANGES_MAX`] characters: `rank 3`, `ranks 40-47,52`, or the
/// first ranges and `... (N ranks)`.
pub fn rank_ranges(ranks: &[usize]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    let word = if sorted.len() == 1 { "rank" } else { "ranks" };
    let all = parts.join(",");
    if all.len() <= RANGES_MAX {
        return format!("{word} {all}");
    }
    let mut shown = String::new();
    for p in &parts {
        if shown.len() + p.len() + 1 > RANGES_MAX {
            break;
        }
        shown.push_str(p);
        shown.push(',');
    }
    format!("{word} {shown}... ({} ranks)", sorted.len())
}

/// The most characters [`rank_ranges`] spends on the ranges themselves.
const RANGES_MAX: usize = 32;

/// The sides one link crosses, or None for a link within a host, a node pair (it crosses every
/// NIC), or an endpoint whose NIC is unknown or spread over several.
fn sides(p: &PairResult, nic_of: &HashMap<(usize, usize), &str>) -> Option<[Side; 2]> {
    if p.src_host == p.dst_host {
        return None;
    }
    let rail = match (&p.rail, p.dst_rank.zip(p.dst_gpu)) {
        (Some(rail), _) => rail.as_str(),
        (None, Some(end)) => *nic_of.get(&end)?,
        (None, None) => return None,
    };
    if rail.contains('+') {
        return None;
    }
    Some([
        Side {
            host: p.src_host.clone(),
            nic: rail.to_string(),
            sending: true,
        },
        Side {
            host: p.dst_host.clone(),
            nic: rail.to_string(),
            sending: false,
        },
    ])
}

/// One size judged: each side's median rate, the reference, and the flows through each side.
pub(crate) struct Judged<'a> {
    pub size: u64,
    pub reference: f64,
    pub median: BTreeMap<Side, f64>,
    pub flows: BTreeMap<Side, Vec<&'a PairResult>>,
    pub result: &'a SizeResult,
}

/// The sizes the rule judges (at least [`MIN_SIZE`] as asked, at least `min_flows` links between
/// hosts: [`MIN_FLOWS`] for the sweep), smallest first: the slow-NIC finding's input and the
/// node verdicts' ([`crate::verdict`]).
pub(crate) fn judged_sizes<'a>(rows: &[Row], results: &'a [SizeResult], min_flows: usize) -> Vec<Judged<'a>> {
    let nic_of: HashMap<(usize, usize), &str> = rows.iter().map(|r| ((r.rank, r.gpu), r.nic.as_str())).collect();
    let mut judged: Vec<Judged> = results.iter().filter_map(|r| judge(r, &nic_of, min_flows)).collect();
    judged.sort_by_key(|j| j.size);
    judged
}

fn judge<'a>(r: &'a SizeResult, nic_of: &HashMap<(usize, usize), &str>, min_flows: usize) -> Option<Judged<'a>> {
    let mut flows: BTreeMap<Side, Vec<&PairResult>> = BTreeMap::new();
    let mut count = 0;
    let links = &r.pairs;
    // A link faster than even its shaper's bucket allows is an error of measurement (the clocks),
    // not a rate to judge by; one above its rate within the bucket is a burst on a link at its
    // rate (a NIC link of the probe runs alone at the line rate: 4 MiB at 100 Mbit/s with a 128
    // KiB bucket reads 3% above it) and is judged, a few percent fast.
    for p in links.iter().filter(|p| !p.impossible) {
        let Some(both) = sides(p, nic_of) else { continue };
        count += 1;
        for s in both {
            flows.entry(s).or_default().push(p);
        }
    }
    if r.size_bytes.max(r.requested_bytes) < MIN_SIZE || count < min_flows {
        return None;
    }
    // Endpoint pairs share their NIC with the side's other flows at once: a side's rate is its
    // flows' median times their number over the median side's. A NIC link is the NIC's already.
    let typical = tcpx_units::median(&flows.values().map(|f| f.len() as f64).collect::<Vec<_>>());
    let median: BTreeMap<Side, f64> = flows
        .iter()
        .map(|(s, f)| {
            let endpoints = f.iter().all(|p| p.level() == LinkLevel::Endpoint);
            let share = if endpoints && typical > 0.0 {
                f.len() as f64 / typical
            } else {
                1.0
            };
            let rates: Vec<f64> = f.iter().map(|p| p.gbps).collect();
            (s.clone(), tcpx_units::median(&rates) * share)
        })
        .collect();
    let reference = tcpx_units::median(&median.values().copied().collect::<Vec<_>>());
    (reference > 0.0).then_some(Judged {
        size: r.size_bytes,
        reference,
        median,
        flows,
        result: r,
    })
}

/// The slow NIC sides of a run (see the module's rule); empty when none or too few flows.
pub fn find(rows: &[Row], results: &[SizeResult]) -> Vec<SlowNic> {
    let judged = judged_sizes(rows, results, MIN_FLOWS);
    let Some(last) = judged.iter().max_by_key(|j| j.size) else {
        return Vec::new();
    };
    let slow_at = |j: &Judged, s: &Side| j.median.get(s).is_some_and(|m| *m < SLOW_SHARE * j.reference);
    // Slow at the largest size and at more than half of the sizes.
    let mut slow: Vec<&Side> = last
        .median
        .keys()
        .filter(|s| slow_at(last, s) && 2 * judged.iter().filter(|j| slow_at(j, s)).count() > judged.len())
        .collect();
    // The sides explaining the most slow flows first; sending before receiving.
    slow.sort_by_key(|s| (std::cmp::Reverse(last.flows[*s].len()), !s.sending));
    let mut named: Vec<SlowNic> = Vec::new();
    for s in slow {
        let mut flows: Vec<_> = last.flows[s]
            .iter()
            .filter_map(|p| Some((p.src_rank?, p.src_gpu?, p.dst_rank?, p.dst_gpu?)))
            .collect();
        flows.sort_unstable();
        let mut links: Vec<(String, String)> = last.flows[s]
            .iter()
            .filter(|p| p.src_rank.is_none())
            .map(|p| (p.src_host.clone(), p.dst_host.clone()))
            .collect();
        links.sort_unstable();
        // The other side of exactly these flows, already named: its twin.
        if let Some(prev) = named
            .iter_mut()
            .find(|n| n.flows == flows && n.links == links && n.twin.is_none())
        {
            prev.twin = Some(s.clone());
            continue;
        }
        let wire_bytes = last
            .result
            .bytes
            .wire
            .iter()
            .find(|w| w.host == s.host && w.iface == s.nic)
            .map(|w| if s.sending { w.tx_bytes } else { w.rx_bytes } / last.result.iters.max(1) as u64);
        named.push(SlowNic {
            side: s.clone(),
            share: last.median[s] / last.reference,
            gbps: last.median[s],
            reference_gbps: last.reference,
            size: last.size,
            slow_sizes: judged.iter().filter(|j| slow_at(j, s)).count(),
            judged_sizes: judged.len(),
            flows,
            links,
            wire_bytes,
            twin: None,
        });
    }
    named
}

#[cfg(test)]
pub(crate) mod tests;
