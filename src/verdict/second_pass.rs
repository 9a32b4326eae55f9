//! The second pass: a node the first pass could not tell from its partners (`cannot-separate`:
//! `pairs`, a ring, two nodes) is measured again against a node that came out healthy, inside
//! the same job, and the verdict says which pass decided.
//!
//! Each such suspect gets its own healthy partner (in host order; suspects beyond the healthy
//! nodes stay undecided). The pass sends the run's largest size both ways between the i-th
//! endpoints of the two nodes ([`crate::plan::Plan::node_pairs`]), the data checked as in the
//! sweep. Its flows are judged like a size of the sweep (median flow rate per NIC side over the
//! median side); the partner is known to be fast with everyone else, so whatever is slow in the
//! pair is the suspect's: its lowest side's share decides `bad`, `suspect` or `healthy` with the
//! first pass's thresholds, `decided_by: second-pass`.

use super::Thresholds;
use crate::placement::dry_run::Row;
use crate::report::{Health, NodeVerdict, SizeResult};
use crate::slow_nic::judged_sizes;

/// What the first pass left undecided: (suspect, healthy partner) host pairs, suspects in host
/// order, each partner used once.
pub fn pairs(verdicts: &[NodeVerdict]) -> Vec<(String, String)> {
    let mut healthy = verdicts.iter().filter(|v| v.verdict == Health::Healthy);
    verdicts
        .iter()
        .filter(|v| v.verdict == Health::Suspect && v.decided_by.as_deref() == Some(super::CANNOT_SEPARATE))
        .map_while(|s| healthy.next().map(|h| (s.host.clone(), h.host.clone())))
        .collect()
}

/// The suspects' verdicts from the pass's measurement `result` of `pairs` (placement's `rows`
/// name each endpoint's NIC). Too few flows to judge leave a suspect as it was, saying so.
pub fn apply(
    verdicts: &mut [NodeVerdict],
    pairs: &[(String, String)],
    rows: &[Row],
    result: &SizeResult,
    t: Thresholds,
) {
    let judged = judged_sizes(rows, std::slice::from_ref(result));
    for (suspect, partner) in pairs {
        let Some(v) = verdicts.iter_mut().find(|v| &v.host == suspect) else {
            continue;
        };
        let Some(j) = judged.last() else {
            v.evidence.push_str(&format!(
                "; second pass with {partner}: too few flows between nodes to judge"
            ));
            continue;
        };
        let lowest = j
            .median
            .iter()
            .filter(|(side, _)| &side.host == suspect)
            .map(|(side, m)| (side, m / j.reference))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((side, share)) = lowest else {
            continue;
        };
        let size = tcpx_units::format_size_label(j.size);
        let direction = if side.sending { "sending" } else { "receiving" };
        let health = if share < t.bad {
            Health::Bad
        } else if share < t.suspect {
            Health::Suspect
        } else {
            Health::Healthy
        };
        let text = if health == Health::Healthy {
            format!("second pass with healthy {partner} at {size}: lowest NIC side at {share:.2} of the median (its first-pass partner was the slow end)")
        } else {
            format!(
                "{} {direction} at {share:.2} of the median with healthy {partner} at {size} (second pass)",
                side.nic
            )
        };
        v.verdict = health;
        v.evidence = text;
        v.decided_by = Some(SECOND_PASS.to_string());
        v.lowest_share = Some(share);
        if health == Health::Healthy {
            v.slow_sides.clear();
        }
    }
}

/// `decided_by` of a verdict the second pass gave.
pub const SECOND_PASS: &str = "second-pass";
