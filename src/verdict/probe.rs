//! The verdicts the probe gives ([`crate::run`]'s probe: rounds of node pairs after the sweep).
//!
//! Why not the sweep: in a fullmesh every flow of a round waits on the others (an endpoint
//! starts its next round of peers only when its current one is done, and its receives are
//! posted as its own progress allows), so one slow NIC slows its partners' later flows too and
//! at 16 nodes x 8 ranks the per-flow rates no longer separate (docs/drain.md#why-a-probe).
//! In a probe round each node sends and receives with one partner only, every NIC carrying the
//! same load: a side's rate is its own or its partner's. Over the rounds each node meets a new
//! partner, so a side slow in most of its rounds is at fault, and a side slow in one round of
//! several is its partner's victim.
//!
//! Per round: the slow-NIC rule's sides ([`crate::slow_nic`]: each NIC of each node, sending and
//! receiving, with the median rate of its flows) and the round's median side as the reference.
//! A side's share is the median of its shares over its rounds; it is bad (suspect) when that
//! median is below the bad (suspect) share and it was below it in more than half of its rounds.
//! With one round (two nodes) the two ends of a slow flow cannot be told apart: both suspect.

use super::{direction, peers_text, HostFlows, Piece, Thresholds, CANNOT_SEPARATE};
use crate::placement::dry_run::Row;
use crate::report::{Health, ProbeRun, Side, SlowSide};
use crate::slow_nic::judged_sizes;
use std::collections::{BTreeMap, BTreeSet};

/// Rounds by default: each node meets 3 partners, so a side slow with one of them (its victim)
/// is slow in 1 of 3 rounds and cleared, and a side at fault in 3 of 3.
pub const DEFAULT_ROUNDS: u8 = 3;

/// `decided_by` of a verdict the probe gave.
pub const PROBE: &str = "probe";

/// One NIC side over the probe's rounds.
#[derive(Debug, Default)]
struct Rounds {
    /// Per round it ran in: its share of the round's median side, and its partner's host.
    shares: Vec<(f64, String)>,
    flows: usize,
}

impl Rounds {
    fn median(&self) -> f64 {
        tcpx_units::median(&self.shares.iter().map(|s| s.0).collect::<Vec<_>>())
    }

    fn below(&self, limit: f64) -> usize {
        self.shares.iter().filter(|s| s.0 < limit).count()
    }

    /// Below `limit` at the median and in more than half of its rounds.
    fn persistently_below(&self, limit: f64) -> bool {
        self.median() < limit && 2 * self.below(limit) > self.shares.len()
    }

    fn partners(&self) -> Vec<String> {
        self.shares.iter().map(|s| s.1.clone()).collect()
    }
}

/// Every side the probe measured, with its shares round by round.
fn sides(rows: &[Row], probe: &ProbeRun) -> BTreeMap<Side, Rounds> {
    let mut out: BTreeMap<Side, Rounds> = BTreeMap::new();
    for round in &probe.rounds {
        let judged = judged_sizes(rows, std::slice::from_ref(&round.result));
        let Some(j) = judged.first() else { continue };
        for (side, median) in &j.median {
            let flows = &j.flows[side];
            // A round pairs each node with one other: every flow of the side has that partner.
            let partner = flows.first().map_or(String::new(), |p| {
                if side.sending {
                    p.dst_host.clone()
                } else {
                    p.src_host.clone()
                }
            });
            let entry = out.entry(side.clone()).or_default();
            entry.shares.push((median / j.reference, partner));
            entry.flows += flows.len();
        }
    }
    out
}

/// What the probe says of each host: its pieces, its lowest side's share and its slow sides.
pub(super) fn evidence(rows: &[Row], probe: &ProbeRun, t: Thresholds) -> BTreeMap<String, HostFlows> {
    let sides = sides(rows, probe);
    let mut out: BTreeMap<String, HostFlows> = BTreeMap::new();
    for (side, rounds) in &sides {
        let host = out.entry(side.host.clone()).or_default();
        let share = rounds.median();
        host.lowest = Some(host.lowest.map_or(share, |l: f64| l.min(share)));
    }
    for (host, flows) in &mut out {
        let mine: Vec<(&Side, &Rounds)> = sides.iter().filter(|(s, _)| &s.host == host).collect();
        let nics: BTreeSet<&str> = mine.iter().map(|(s, _)| s.nic.as_str()).collect();
        let health_of = |r: &Rounds| {
            if r.shares.len() < 2 {
                Health::Healthy
            } else if r.persistently_below(t.bad) {
                Health::Bad
            } else if r.persistently_below(t.suspect) {
                Health::Suspect
            } else {
                Health::Healthy
            }
        };
        let at_fault: Vec<&(&Side, &Rounds)> = mine.iter().filter(|(_, r)| health_of(r) != Health::Healthy).collect();
        let faulty_nics: BTreeSet<&str> = at_fault.iter().map(|(s, _)| s.nic.as_str()).collect();
        if nics.len() > 1 && faulty_nics.len() == nics.len() {
            let health = at_fault
                .iter()
                .map(|(_, r)| health_of(r))
                .max()
                .unwrap_or(Health::Suspect);
            let dirs: BTreeSet<&str> = at_fault.iter().map(|(s, _)| direction(s.sending)).collect();
            let shares: Vec<String> = at_fault
                .iter()
                .map(|(s, r)| format!("{} {:.2}", s.nic, r.median()))
                .collect();
            flows.pieces.push(Piece {
                health,
                decided_by: PROBE,
                text: format!(
                    "every NIC slow {} in the probe ({} of the median): the node, not one NIC (CPU, PCIe, memory)",
                    dirs.into_iter().collect::<Vec<_>>().join(" and "),
                    shares.join(", "),
                ),
            });
        } else {
            for (side, rounds) in &at_fault {
                flows.pieces.push(Piece {
                    health: health_of(rounds),
                    decided_by: PROBE,
                    text: format!(
                        "{} {} at {:.2} of the median in the probe, slow in {} of {} rounds (with {}, each fast with the others)",
                        side.nic,
                        direction(side.sending),
                        rounds.median(),
                        rounds.below(t.suspect),
                        rounds.shares.len(),
                        peers_text(&rounds.partners()),
                    ),
                });
            }
        }
        // One round (two nodes): a slow side's partner end is slow in the same flows.
        for (side, rounds) in mine
            .iter()
            .filter(|(_, r)| r.shares.len() == 1 && r.median() < t.suspect)
        {
            flows.pieces.push(Piece {
                health: Health::Suspect,
                decided_by: CANNOT_SEPARATE,
                text: format!(
                    "{} {} at {:.2} of the median in the probe's one round, with {} only: cannot separate (a third node would tell)",
                    side.nic,
                    direction(side.sending),
                    rounds.median(),
                    peers_text(&rounds.partners()),
                ),
            });
        }
        flows.slow_sides = mine
            .iter()
            .filter(|(_, r)| r.below(t.suspect) > 0 && (health_of(r) != Health::Healthy || r.shares.len() == 1))
            .map(|(s, r)| {
                let partners = r.partners();
                SlowSide {
                    nic: s.nic.clone(),
                    sending: s.sending,
                    share: r.median(),
                    slow_sizes: r.below(t.suspect),
                    judged_sizes: r.shares.len(),
                    flows: r.flows,
                    peers_fast: partners.len(),
                    peers: partners,
                }
            })
            .collect();
        flows.decided_by = Some(PROBE);
    }
    out
}
