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

/// A probe round's links judged: at least two (one node pair, each way), so that a two-node
/// job is judged too (its one round says `cannot-separate` of a slow pair, never `healthy`).
pub const MIN_LINKS: usize = 2;

/// Every side the probe measured, with its shares round by round.
fn sides(rows: &[Row], probe: &ProbeRun) -> BTreeMap<Side, Rounds> {
    let mut out: BTreeMap<Side, Rounds> = BTreeMap::new();
    for round in &probe.rounds {
        let judged = judged_sizes(rows, std::slice::from_ref(&round.result), MIN_LINKS);
        let Some(j) = judged.first() else { continue };
        for (side, median) in &j.median {
            let flows = &j.flows[side];
            // A round pairs each node with one other: every link of the side has that partner.
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

/// What the probe makes of one side.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    /// Slow in most of its rounds (two or more): at fault, bad or suspect.
    AtFault(Health),
    /// Slow only in rounds whose partner's end of its links is at fault: healthy.
    Victim(Vec<String>),
    /// Slow with its only partner of a one-round probe (two nodes): it or the partner.
    CannotSeparate,
    /// Slow in its only judged round of several, with a partner not at fault: doubt.
    OneRound,
    /// Not slow, or slow in a minority of its rounds with partners not at fault.
    Fine,
}

/// Each side's call: at fault first (slow in most rounds), then, for a side slow with some
/// partners, whether each of those partners is at fault on the other end (a victim), whether
/// the job has no third node to tell (one round), or neither.
fn calls(sides: &BTreeMap<Side, Rounds>, rounds_run: usize, t: Thresholds) -> BTreeMap<&Side, Call> {
    let at_fault = |r: &Rounds| {
        if r.shares.len() < 2 {
            None
        } else if r.persistently_below(t.bad) {
            Some(Health::Bad)
        } else if r.persistently_below(t.suspect) {
            Some(Health::Suspect)
        } else {
            None
        }
    };
    let faulty: BTreeSet<&Side> = sides
        .iter()
        .filter(|(_, r)| at_fault(r).is_some())
        .map(|(s, _)| s)
        .collect();
    sides
        .iter()
        .map(|(side, r)| {
            if let Some(h) = at_fault(r) {
                return (side, Call::AtFault(h));
            }
            let slow_with: Vec<&String> = r.shares.iter().filter(|s| s.0 < t.suspect).map(|s| &s.1).collect();
            if slow_with.is_empty() {
                return (side, Call::Fine);
            }
            // The other end of its links with a partner: the partner's side on the same rail,
            // the other way.
            let other_end = |host: &String| Side {
                host: host.clone(),
                nic: side.nic.clone(),
                sending: !side.sending,
            };
            let call = if slow_with.iter().all(|h| faulty.contains(&other_end(h))) {
                Call::Victim(slow_with.into_iter().cloned().collect())
            } else if rounds_run == 1 {
                Call::CannotSeparate
            } else if r.shares.len() == 1 {
                Call::OneRound
            } else {
                Call::Fine
            };
            (side, call)
        })
        .collect()
}

/// The piece a side's call adds besides being at fault: a victim's healthy note, or a doubt.
fn call_piece(side: &Side, rounds: &Rounds, call: &Call, rounds_run: usize) -> Option<Piece> {
    let (health, decided_by, text) = match call {
        Call::Victim(partners) => (
            Health::Healthy,
            PROBE,
            format!(
                "{} {} slow only with {}, slow with every partner (their victim)",
                side.nic,
                direction(side.sending),
                peers_text(partners),
            ),
        ),
        Call::CannotSeparate => (
            Health::Suspect,
            CANNOT_SEPARATE,
            format!(
                "{} {} at {:.2} of the median in the probe's one round, with {} only: cannot separate (a third node would tell)",
                side.nic,
                direction(side.sending),
                rounds.median(),
                peers_text(&rounds.partners()),
            ),
        ),
        Call::OneRound => (
            Health::Suspect,
            PROBE,
            format!(
                "{} {} at {:.2} of the median in its only judged round of {rounds_run}, with {} (not slow with every partner): too few rounds to tell",
                side.nic,
                direction(side.sending),
                rounds.median(),
                peers_text(&rounds.partners()),
            ),
        ),
        Call::AtFault(_) | Call::Fine => return None,
    };
    Some(Piece {
        health,
        decided_by,
        text,
    })
}

/// What the probe says of each host: its pieces, its lowest side's share and its slow sides.
pub(super) fn evidence(rows: &[Row], probe: &ProbeRun, t: Thresholds) -> BTreeMap<String, HostFlows> {
    let sides = sides(rows, probe);
    let calls = calls(&sides, probe.rounds.len(), t);
    let mut out: BTreeMap<String, HostFlows> = BTreeMap::new();
    for (side, rounds) in &sides {
        let host = out.entry(side.host.clone()).or_default();
        let share = rounds.median();
        host.lowest = Some(host.lowest.map_or(share, |l: f64| l.min(share)));
    }
    for (host, flows) in &mut out {
        let mine: Vec<(&Side, &Rounds, &Call)> = sides
            .iter()
            .filter(|(s, _)| &s.host == host)
            .map(|(s, r)| (s, r, &calls[s]))
            .collect();
        let nics: BTreeSet<&str> = mine.iter().map(|(s, _, _)| s.nic.as_str()).collect();
        let at_fault: Vec<(&Side, &Rounds, Health)> = mine
            .iter()
            .filter_map(|(s, r, c)| match c {
                Call::AtFault(h) => Some((*s, *r, *h)),
                _ => None,
            })
            .collect();
        let faulty_nics: BTreeSet<&str> = at_fault.iter().map(|(s, _, _)| s.nic.as_str()).collect();
        if nics.len() > 1 && faulty_nics.len() == nics.len() {
            let health = at_fault.iter().map(|x| x.2).max().unwrap_or(Health::Suspect);
            let dirs: BTreeSet<&str> = at_fault.iter().map(|(s, _, _)| direction(s.sending)).collect();
            let shares: Vec<String> = at_fault
                .iter()
                .map(|(s, r, _)| format!("{} {:.2}", s.nic, r.median()))
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
            for (side, rounds, health) in &at_fault {
                flows.pieces.push(Piece {
                    health: *health,
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
        for (side, rounds, call) in &mine {
            flows.pieces.extend(call_piece(side, rounds, call, probe.rounds.len()));
        }
        flows.slow_sides = mine
            .iter()
            .filter(|(_, _, c)| matches!(c, Call::AtFault(_) | Call::CannotSeparate | Call::OneRound))
            .map(|(s, r, _)| {
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
