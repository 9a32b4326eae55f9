//! A verdict per node, `healthy`, `suspect` or `bad`, each with its evidence in one line
//! (docs/drain.md).
//!
//! Where the probe ran (rounds of node pairs after the sweep), its flows judge the NICs
//! ([`probe`]): the sweep's flows wait on each other, and at 16 nodes and beyond they hide a
//! slow NIC and accuse its neighbours (docs/drain.md#why-a-probe). Without it (a run that
//! failed before it, `--probe-rounds 0`), the sweep's flows, as follows.
//!
//! The flows: the slow-NIC rule's sides ([`crate::slow_nic`]: each NIC of each node, sending and
//! receiving, with the median rate of its flows at each size judged, and the median side as the
//! reference). A side is slow when its share of the reference is below the suspect share at the
//! largest size judged (however the smaller sizes went: a side at 0.29 there is never healthy);
//! it is very slow when below the bad share at the largest size and at more than half of the
//! sizes judged. The shares are measured ([`DEFAULT_SUSPECT_SHARE`], [`DEFAULT_BAD_SHARE`]) and
//! set by `--suspect-share`, `--bad-share`.
//!
//! Which end is at fault: each slow flow has two ends. A slow side whose partners' ends of its
//! flows are mostly not slow (they are fast with everyone else) is at fault, decided by its
//! `partners` (fullmesh, and rounds, make every node a partner of every other). A slow side
//! whose partners are all slow too (the only partner in `pairs`, a ring, a 2-node job) cannot be
//! told from them: both ends are `suspect`, `cannot-separate`, and the evidence says to re-run
//! with fullmesh. A slow side whose slow partners are all at fault is their victim, and healthy.
//! The direction is the side's (sending or receiving); a node whose every NIC is at fault is
//! named as the node (CPU, PCIe, memory: what its NICs share), not a NIC.
//!
//! Findings: an error finding that names a node makes it `bad`; a warning that names some nodes
//! (not all: a job-wide warning says nothing about one node) makes them `suspect`. The failure
//! that ended a run early makes its culprit's node `suspect` (the blame graph's root,
//! [`crate::blame`]: the rank the others' errors lead to), beside what the sizes measured before
//! say of every node.

use crate::placement::dry_run::{NodeFinding, Row};
use crate::placement::preflight::Level;
use crate::report::{Health, NodeVerdict, PairResult, Side, SizeResult, SlowSide};
use crate::slow_nic::{judged_sizes, Judged};
use std::collections::{BTreeMap, BTreeSet};

pub mod probe;

/// `decided_by` of a suspect whose only partners are slow too (a two-node probe, or a sweep with
/// one partner each and no probe).
pub const CANNOT_SEPARATE: &str = "cannot-separate";

/// A NIC side below this share of the median side is suspect: below the lowest share a side of
/// a healthy rig kept, 0.567 in 41 healthy runs and 0.542 beside slowed NICs
/// (docs/drain.md#thresholds).
pub const DEFAULT_SUSPECT_SHARE: f64 = 0.5;
/// A NIC side below this share of the median side, with partners fast with everyone else, is
/// bad: a NIC at an eighth of the rate measured 0.11-0.21, at a quarter 0.15-0.40.
pub const DEFAULT_BAD_SHARE: f64 = 0.35;

/// The shares of the median side below which a side is suspect and bad.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub suspect: f64,
    pub bad: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            suspect: DEFAULT_SUSPECT_SHARE,
            bad: DEFAULT_BAD_SHARE,
        }
    }
}

impl Thresholds {
    /// Both in (0, 1], bad below suspect; else the line naming the fix.
    pub fn new(suspect: f64, bad: f64) -> Result<Thresholds, String> {
        let share = |v: f64| v > 0.0 && v <= 1.0;
        if !share(suspect) || !share(bad) || bad >= suspect {
            return Err(format!(
                "--bad-share {bad} and --suspect-share {suspect}: give shares of the median in (0, 1], the bad one below the suspect one (defaults {DEFAULT_BAD_SHARE} and {DEFAULT_SUSPECT_SHARE})"
            ));
        }
        Ok(Thresholds { suspect, bad })
    }
}

/// What a run says about its nodes.
pub struct Evidence<'a> {
    /// Every node of the job, in rank order (each once).
    pub hosts: &'a [String],
    /// Placement: each endpoint's NIC.
    pub rows: &'a [Row],
    pub results: &'a [SizeResult],
    /// Preflight's findings (the measured ones, slow NIC and incast, are not about one node's
    /// fault and are left out by the caller).
    pub findings: &'a [NodeFinding],
    /// The run's failure: the failing rank's host and the line that says it.
    pub failure: Option<(&'a str, &'a str)>,
    /// The probe after the sweep: where it ran, it alone judges the NICs ([`probe`]).
    pub probe: Option<&'a crate::report::ProbeRun>,
}

/// What the flows say of one host: its pieces, its lowest side's share, its slow sides.
#[derive(Debug, Default)]
pub(crate) struct HostFlows {
    pieces: Vec<Piece>,
    lowest: Option<f64>,
    slow_sides: Vec<SlowSide>,
    /// Which measurement the shares are of (`probe`), for a healthy node's evidence.
    decided_by: Option<&'static str>,
}

/// One side judged at every size: its health and share at the largest size.
#[derive(Debug, Clone, Copy)]
struct Judgement {
    health: Health,
    share: f64,
    slow_sizes: usize,
}

fn judge_side(judged: &[Judged], side: &Side, t: Thresholds) -> Judgement {
    let share_at = |j: &Judged| j.median.get(side).map(|m| m / j.reference);
    let share = judged.last().and_then(share_at).unwrap_or(1.0);
    let below = |limit: f64| judged.iter().filter(|j| share_at(j).is_some_and(|s| s < limit)).count();
    let persistent = |limit: f64| share < limit && 2 * below(limit) > judged.len();
    // Bad takes more than half of the sizes; below the suspect share at the largest size (the
    // figure a healthy side kept above 0.56 in 41 rig runs) is doubt enough, never "healthy".
    let health = if persistent(t.bad) {
        Health::Bad
    } else if share < t.suspect {
        Health::Suspect
    } else {
        Health::Healthy
    };
    Judgement {
        health,
        share,
        slow_sizes: below(t.suspect),
    }
}

/// The other end of `p` seen from `side`.
fn opposite(side: &Side, p: &PairResult) -> Side {
    Side {
        host: if side.sending {
            p.dst_host.clone()
        } else {
            p.src_host.clone()
        },
        nic: side.nic.clone(),
        sending: !side.sending,
    }
}

/// Who is to blame for a slow side.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Blame {
    /// Its partners are fast with everyone else.
    AtFault,
    /// Its partners are slow too and not known to be at fault.
    CannotSeparate,
    /// Every slow partner is at fault.
    Victim,
}

/// A slow side at the largest size, what its partners say and who is to blame.
struct SlowEnd {
    side: Side,
    judgement: Judgement,
    partners: Vec<(Side, Health)>,
    blame: Blame,
}

impl SlowEnd {
    fn record(&self, judged_sizes: usize, flows: usize) -> SlowSide {
        SlowSide {
            nic: self.side.nic.clone(),
            sending: self.side.sending,
            share: self.judgement.share,
            slow_sizes: self.judgement.slow_sizes,
            judged_sizes,
            flows,
            peers: self.partners.iter().map(|(s, _)| s.host.clone()).collect(),
            peers_fast: self.fast_partners(),
        }
    }

    fn fast_partners(&self) -> usize {
        self.partners.iter().filter(|(_, h)| *h == Health::Healthy).count()
    }
}

/// Every slow side at the largest size judged, with its blame.
fn slow_ends(judged: &[Judged], t: Thresholds) -> Vec<SlowEnd> {
    let Some(last) = judged.last() else { return Vec::new() };
    let health: BTreeMap<&Side, Judgement> = last.median.keys().map(|s| (s, judge_side(judged, s, t))).collect();
    let mut ends: Vec<SlowEnd> = health
        .iter()
        .filter(|(_, j)| j.health != Health::Healthy)
        .map(|(side, judgement)| {
            let partners: BTreeSet<Side> = last.flows[*side].iter().map(|p| opposite(side, p)).collect();
            let partners: Vec<(Side, Health)> = partners
                .into_iter()
                .map(|s| {
                    let h = health.get(&s).map_or(Health::Healthy, |j| j.health);
                    (s, h)
                })
                .collect();
            SlowEnd {
                side: (*side).clone(),
                judgement: *judgement,
                partners,
                blame: Blame::CannotSeparate,
            }
        })
        .collect();
    for e in &mut ends {
        let fast = e.fast_partners();
        if fast > 0 && 2 * fast > e.partners.len() {
            e.blame = Blame::AtFault;
        }
    }
    let at_fault: BTreeSet<Side> = ends
        .iter()
        .filter(|e| e.blame == Blame::AtFault)
        .map(|e| e.side.clone())
        .collect();
    for e in ends.iter_mut().filter(|e| e.blame != Blame::AtFault) {
        let mut slow = e.partners.iter().filter(|(_, h)| *h != Health::Healthy).peekable();
        if slow.peek().is_some() && slow.all(|(s, _)| at_fault.contains(s)) {
            e.blame = Blame::Victim;
        }
    }
    ends
}

/// One reason for a verdict.
#[derive(Debug)]
struct Piece {
    health: Health,
    decided_by: &'static str,
    text: String,
}

fn direction(sending: bool) -> &'static str {
    if sending {
        "sending"
    } else {
        "receiving"
    }
}

/// `node1`, `node1, node3`, or `7 peers`.
fn peers_text(peers: &[String]) -> String {
    if peers.len() <= 2 {
        peers.join(", ")
    } else {
        format!("{} peers", peers.len())
    }
}

/// The pieces the flows give one host: its sides at fault (as the node when they cover every
/// NIC it has) and those that cannot be separated from their partners.
fn flow_pieces(host: &str, ends: &[SlowEnd], nics: &BTreeSet<&str>, last: &Judged, judged: usize) -> Vec<Piece> {
    let mine: Vec<&SlowEnd> = ends.iter().filter(|e| e.side.host == host).collect();
    let flows = |e: &SlowEnd| last.flows.get(&e.side).map_or(0, Vec::len);
    let mut pieces = Vec::new();
    let at_fault: Vec<&&SlowEnd> = mine.iter().filter(|e| e.blame == Blame::AtFault).collect();
    let faulty_nics: BTreeSet<&str> = at_fault.iter().map(|e| e.side.nic.as_str()).collect();
    if nics.len() > 1 && faulty_nics.len() == nics.len() {
        let health = at_fault
            .iter()
            .map(|e| e.judgement.health)
            .max()
            .unwrap_or(Health::Suspect);
        let dirs: BTreeSet<&str> = at_fault.iter().map(|e| direction(e.side.sending)).collect();
        let shares: Vec<String> = at_fault
            .iter()
            .map(|e| format!("{} {:.2}", e.side.nic, e.judgement.share))
            .collect();
        let peers: BTreeSet<String> = at_fault
            .iter()
            .flat_map(|e| e.partners.iter().map(|(s, _)| s.host.clone()))
            .collect();
        pieces.push(Piece {
            health,
            decided_by: "partners",
            text: format!(
                "every NIC slow {} ({} of the median): the node, not one NIC (CPU, PCIe, memory); {} flows to {} fast with the others",
                dirs.into_iter().collect::<Vec<_>>().join(" and "),
                shares.join(", "),
                at_fault.iter().map(|e| flows(e)).sum::<usize>(),
                peers_text(&peers.into_iter().collect::<Vec<_>>()),
            ),
        });
    } else {
        for e in &at_fault {
            let peers: Vec<String> = e.partners.iter().map(|(s, _)| s.host.clone()).collect();
            pieces.push(Piece {
                health: e.judgement.health,
                decided_by: "partners",
                text: format!(
                    "{} {} at {:.2} of the median ({} of {judged} sizes), {} flows with {}, {} of them fast with the others",
                    e.side.nic,
                    direction(e.side.sending),
                    e.judgement.share,
                    e.judgement.slow_sizes,
                    flows(e),
                    peers_text(&peers),
                    e.fast_partners(),
                ),
            });
        }
    }
    for e in mine.iter().filter(|e| e.blame == Blame::CannotSeparate) {
        let partners: Vec<String> = e
            .partners
            .iter()
            .map(|(s, _)| format!("{} {}", s.host, s.nic))
            .collect();
        pieces.push(Piece {
            health: Health::Suspect,
            decided_by: CANNOT_SEPARATE,
            text: format!(
                "{} {} at {:.2} of the median ({} of {judged} sizes) with {} only, slow too: cannot separate, re-run with fullmesh",
                e.side.nic,
                direction(e.side.sending),
                e.judgement.share,
                e.judgement.slow_sizes,
                if partners.len() <= 2 { partners.join(", ") } else { format!("{} peers", partners.len()) },
            ),
        });
    }
    pieces
}

/// The pieces findings and the failure give one host.
fn named_pieces(host: &str, e: &Evidence) -> Vec<Piece> {
    let mut pieces = Vec::new();
    if let Some((failed, line)) = e.failure {
        if failed == host {
            // Where the run broke, not proof of a fault there (a plugin's or the launcher's
            // error names a node too): a failed run leaves no node `bad` on its own, and a node
            // named by failure after failure shows in `history nodes`.
            pieces.push(Piece {
                health: Health::Suspect,
                decided_by: "failure",
                text: format!("failure: {line}"),
            });
        }
    }
    let every_node = e.hosts.len();
    for f in e.findings.iter().filter(|f| f.hosts.iter().any(|h| h == host)) {
        let health = match f.level {
            Level::Error => Health::Bad,
            Level::Warning if f.hosts.len() < every_node => Health::Suspect,
            _ => continue,
        };
        pieces.push(Piece {
            health,
            decided_by: "finding",
            text: format!(
                "{}: {}",
                if health == Health::Bad { "error" } else { "warning" },
                f.text
            ),
        });
    }
    pieces
}

/// The verdicts of a run described by `info` with `results` measured: its nodes (host names in
/// rank order, each once; none for a one-node job), placement's rows and findings, its probe,
/// and the failure that ended it early (the culprit's host and its line).
pub fn of_run(
    info: &crate::report::RunInfo,
    results: &[SizeResult],
    failure: Option<(&str, &str)>,
    t: Thresholds,
) -> Vec<NodeVerdict> {
    let mut hosts: Vec<String> = Vec::new();
    for h in &info.hosts {
        if !hosts.contains(&h.hostname) {
            hosts.push(h.hostname.clone());
        }
    }
    if hosts.len() < 2 {
        return Vec::new();
    }
    let evidence = Evidence {
        hosts: &hosts,
        rows: &info.placement.rows,
        results,
        findings: &info.placement.findings,
        failure,
        probe: info.probe.as_ref(),
    };
    verdicts(&evidence, t)
}

/// What the sweep's flows say of each host (no probe ran: a run that failed, `--probe-rounds
/// 0`); None when no size was judged.
fn sweep_evidence(e: &Evidence, t: Thresholds) -> Option<BTreeMap<String, HostFlows>> {
    let judged = judged_sizes(e.rows, e.results, crate::slow_nic::MIN_FLOWS);
    let last = judged.last()?;
    let ends = slow_ends(&judged, t);
    Some(
        e.hosts
            .iter()
            .map(|host| {
                let mine = last.median.iter().filter(|(s, _)| &s.host == host);
                let nics: BTreeSet<&str> = last
                    .median
                    .keys()
                    .filter(|s| &s.host == host)
                    .map(|s| s.nic.as_str())
                    .collect();
                let flows = HostFlows {
                    lowest: mine.map(|(_, m)| m / last.reference).reduce(f64::min),
                    pieces: flow_pieces(host, &ends, &nics, last, judged.len()),
                    slow_sides: ends
                        .iter()
                        .filter(|s| &s.side.host == host && s.blame != Blame::Victim)
                        .map(|s| s.record(judged.len(), last.flows.get(&s.side).map_or(0, Vec::len)))
                        .collect(),
                    decided_by: None,
                };
                (host.clone(), flows)
            })
            .collect(),
    )
}

/// Every node's verdict; empty when nothing was judged (no probe, no size of at least 1 MiB
/// with flows between nodes) and no finding or failure names a node.
pub fn verdicts(e: &Evidence, t: Thresholds) -> Vec<NodeVerdict> {
    let flows = match e.probe {
        // Wrong data: nothing it measured is a rate of anything (and the sweep, which the probe
        // was there to overrule, does not decide instead).
        Some(p) if p.wrong.unwrap_or(0) > 0 => None,
        Some(p) if !p.rounds.is_empty() => Some(probe::evidence(e.rows, p, t)),
        _ => sweep_evidence(e, t),
    };
    let named: Vec<Vec<Piece>> = e.hosts.iter().map(|h| named_pieces(h, e)).collect();
    if flows.is_none() && named.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    let mut flows = flows.unwrap_or_default();
    e.hosts
        .iter()
        .zip(named)
        .map(|(host, named)| {
            let mut pieces = named;
            let mine = flows.remove(host).unwrap_or_default();
            pieces.extend(mine.pieces);
            verdict_of(host, pieces, mine.lowest, mine.slow_sides, mine.decided_by)
        })
        .collect()
}

/// The verdict the pieces give (the most severe), their texts in one line, most severe first.
fn verdict_of(
    host: &str,
    mut pieces: Vec<Piece>,
    lowest: Option<f64>,
    slow_sides: Vec<SlowSide>,
    measured_by: Option<&'static str>,
) -> NodeVerdict {
    pieces.sort_by_key(|p| std::cmp::Reverse(p.health));
    let verdict = pieces.first().map_or(Health::Healthy, |p| p.health);
    let evidence = if pieces.is_empty() {
        lowest.map_or("no flow between nodes judged".to_string(), |l| {
            let by = measured_by.map_or(String::new(), |b| format!(" in the {b}"));
            format!("lowest NIC side at {l:.2} of the median{by}")
        })
    } else {
        pieces.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("; ")
    };
    NodeVerdict {
        host: host.to_string(),
        verdict,
        evidence,
        decided_by: pieces.first().map(|p| p.decided_by).or(measured_by).map(str::to_string),
        lowest_share: lowest,
        slow_sides,
    }
}

#[cfg(test)]
mod tests;
