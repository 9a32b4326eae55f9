//! The node verdicts' probe, inside the job ([`crate::verdict::probe`]): after the sweep, a few
//! rounds in which every node is paired with one other node ([`matchings`]) and the i-th
//! endpoints of the two send each other the sweep's largest size (at most [`PROBE_SIZE_MAX`]),
//! one way then the other ([`one_way_halves`]), with the data checked, in a few iterations
//! ([`PROBE_ITERS`]). In a round every NIC carries the same load and no flow waits on another
//! node's progress, so a NIC's rate is its own; over the rounds each node meets several
//! partners, so a slow NIC is slow with all of them and its partners with it alone.

use super::connect::Connected;
use super::measure::{measure, Bench};
use super::settings::Settings;
use super::{Fatal, Job};
use crate::collectives::Collectives;
use crate::delivery::WireProbe;
use crate::mpi_boot::Mpi;
use crate::plan::{Iterations, Plan};
use crate::report::{ProbeRound, ProbeRun};
use std::sync::Arc;
use std::time::Instant;

/// Timed iterations of a probe round at most (the sweep's -n when fewer).
pub const PROBE_ITERS: usize = 3;

/// The most each endpoint sends its partner in a probe round: 4 MiB is 32 of the rig's 128 KiB
/// shaper buckets and 0.3 ms on a 12.5 GB/s NIC, and a slow NIC makes every round wait on it.
pub const PROBE_SIZE_MAX: u64 = 4 << 20;

/// `rounds` perfect matchings of `nodes` nodes (the circle method: round r pairs node r with
/// the fixed last one and the others around it; an odd count adds a bye), each node with a
/// different partner in every round; at most `nodes - 1` rounds (then every pair met once).
pub fn matchings(nodes: usize, rounds: usize) -> Vec<Vec<(usize, usize)>> {
    if nodes < 2 {
        return Vec::new();
    }
    let m = nodes + nodes % 2;
    let fixed = m - 1;
    (0..rounds.min(m - 1))
        .map(|r| {
            let mut pairs = vec![(r, fixed)];
            for i in 1..m / 2 {
                pairs.push(((r + i) % fixed, (r + fixed - i) % fixed));
            }
            // The bye: a pair with the added node is no pair.
            pairs.retain(|&(a, b)| a < nodes && b < nodes);
            pairs.into_iter().map(|(a, b)| (a.min(b), a.max(b))).collect()
        })
        .collect()
}

/// A round's node pairs as the probe moves them: one way, then the other (`a` to `b` for every
/// pair, then `b` to `a`). Both ways at once, a slow NIC's full egress queue holds the
/// acknowledgements of the bytes it receives: its partner's sending reads slowed by the round
/// trip (on the rig's two nodes, an eighth-rate NIC read 0.45-0.53 of the median both ways,
/// 0.74 on a loaded CI machine, where its true share is 0.22).
pub fn one_way_halves(pairs: &[(usize, usize)]) -> [Vec<(usize, usize)>; 2] {
    [pairs.to_vec(), pairs.iter().map(|&(a, b)| (b, a)).collect()]
}

/// The probe's size: the sweep's largest as asked (`-e`, before ring and fullmesh round it to
/// whole blocks), at most [`PROBE_SIZE_MAX`]. The job's buffers hold it (`plan_job`).
pub fn probe_size(plans: &[Arc<Plan>]) -> u64 {
    plans.last().map_or(0, |p| p.requested).min(PROBE_SIZE_MAX)
}

/// Why the job runs no probe, or None when it runs one of `rounds` rounds at `size`. Verdicts
/// judge hosts: `nodes` (--ranks-per-node's) on fewer than 2 distinct `hosts` have no flow
/// between hosts to judge by, and the probe would move its bytes for nothing.
pub fn skipped(nodes: usize, hosts: usize, rounds: usize, size: u64) -> Option<String> {
    if nodes < 2 {
        Some("one node: no flow between nodes".into())
    } else if hosts < 2 {
        Some(format!(
            "the {nodes} nodes are one host (--ranks-per-node): verdicts judge hosts, and no flow leaves it"
        ))
    } else if size < crate::slow_nic::MIN_SIZE {
        Some(format!(
            "the largest size, {}, is below {}, where flows say little of a NIC's rate: use -e 1M or more",
            tcpx_units::format_size_label(size),
            tcpx_units::format_size_label(crate::slow_nic::MIN_SIZE)
        ))
    } else if rounds == 0 {
        Some("--probe-rounds 0".into())
    } else {
        None
    }
}

/// The distinct hostnames of the job's ranks.
pub fn distinct_hosts(topo: &crate::topology::Topology) -> usize {
    topo.hostnames.iter().collect::<std::collections::BTreeSet<_>>().len()
}

/// Runs the probe (every rank calls it after a sweep that ended well): its rounds one after
/// another, each on its own comms. Rank 0 checks each round's pairs against the links
/// (`rows`) and prints one line for the probe.
pub(super) fn run(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    probe: &WireProbe,
    connected: &mut Connected,
    rows: &[crate::placement::dry_run::Row],
) -> Result<ProbeRun, Fatal> {
    let topo = &job.topo;
    let size = probe_size(&job.plans);
    if let Some(why) = skipped(topo.nodes, distinct_hosts(topo), settings.probe_rounds, size) {
        return Ok(ProbeRun {
            skipped: Some(why),
            ..ProbeRun::default()
        });
    }
    let host_of = |node: usize| {
        let rank = topo.endpoints.iter().find(|e| e.node == node).map_or(0, |e| e.rank);
        topo.hostnames[rank].clone()
    };
    // A NIC is judged by its links: its endpoints' bytes together over the time they took, one
    // endpoint on it or three.
    let nic_links = connected.matrix.at(crate::matrix::Level::Nic);
    let bench = Bench {
        mpi,
        engine: &connected.engine,
        topo,
        probe,
        matrix: &nic_links,
        progress: None,
    };
    let holder = crate::plan::Holder::Endpoints(topo.endpoints_of(mpi.rank()));
    let started = Instant::now();
    let mut out = ProbeRun {
        size_bytes: size,
        ..ProbeRun::default()
    };
    // A share needs a few iterations, not the sweep's -n: a slow NIC makes every round wait
    // on it, and the probe's cost is its rounds times its iterations.
    let it = Iterations {
        iters: settings.iterations.iters.min(PROBE_ITERS),
        warmup: settings.iterations.warmup.min(1),
        // Each iteration alone: a link's time is one iteration's, whatever the sweep's timing.
        timing: crate::plan::Timing::PerIteration,
        ..settings.iterations
    };
    // Its own data patterns, apart from the sweep's iterations.
    let mut pattern_iter = 1 << 30;
    let at_once = match settings.probe_pairs {
        0 => usize::MAX,
        n => n,
    };
    for (index, pairs) in matchings(topo.nodes, settings.probe_rounds).into_iter().enumerate() {
        // With --probe-pairs, a round's pairs in groups one after another (nodes that share
        // one host's cores: the rig), judged together.
        let mut round: Option<crate::report::SizeResult> = None;
        let directed = pairs.chunks(at_once).flat_map(one_way_halves);
        for group in directed {
            let plan = Arc::new(Plan::node_pairs(topo, &group, size, &holder));
            out.bytes += plan.network_bytes() * (it.iters + it.warmup) as u64;
            let mut part = connected
                .links
                .aside(|links| measure(&it, &bench, links, &plan, &mut pattern_iter))
                .map_err(|f| f.within(&format!("probe round {}", index + 1)))?;
            crate::link_check::mark(rows, &mut part);
            // Checked as the sweep's: a wrong byte counts, and the probe then decides nothing.
            if let Some(w) = part.wrong {
                out.wrong = Some(out.wrong.unwrap_or(0) + w);
            }
            match &mut round {
                Some(r) => {
                    r.time_us += part.time_us;
                    r.pairs.append(&mut part.pairs);
                }
                None => round = Some(part),
            }
        }
        let Some(result) = round else { continue };
        out.rounds.push(ProbeRound {
            pairs: pairs.iter().map(|&(a, b)| (host_of(a), host_of(b))).collect(),
            time_us: result.time_us,
            result,
        });
    }
    out.seconds = started.elapsed().as_secs_f64();
    if mpi.rank() == 0 {
        println!("# {}", out.line());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round pairs every node once (a bye for an odd count), and no two rounds repeat a
    /// pair: each node meets a new partner in every round.
    #[test]
    fn matchings_pair_every_node_with_a_new_partner_each_round() {
        for nodes in [2, 3, 4, 7, 8, 16, 64] {
            let rounds = matchings(nodes, 5);
            assert_eq!(rounds.len(), 5.min(nodes + nodes % 2 - 1), "{nodes} nodes");
            let mut met = std::collections::BTreeSet::new();
            for pairs in &rounds {
                let mut seen: Vec<usize> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
                seen.sort_unstable();
                let before = seen.len();
                seen.dedup();
                assert_eq!(before, seen.len(), "a node twice in one round: {pairs:?}");
                assert_eq!(seen.len(), nodes - nodes % 2, "{nodes} nodes: {pairs:?}");
                for &p in pairs {
                    assert!(p.0 < p.1 && p.1 < nodes);
                    assert!(met.insert(p), "{p:?} met twice");
                }
            }
        }
        assert!(matchings(1, 3).is_empty());
        assert_eq!(matchings(2, 3), vec![vec![(0, 1)]]);
    }

    #[test]
    fn a_probe_is_skipped_saying_why() {
        assert!(skipped(1, 1, 3, 1 << 20).unwrap().contains("one node"));
        assert!(skipped(4, 4, 0, 1 << 20).unwrap().contains("--probe-rounds 0"));
        let one_host = skipped(2, 1, 3, 1 << 20).unwrap();
        assert!(
            one_host.contains("the 2 nodes are one host (--ranks-per-node)"),
            "{one_host}"
        );
        let small = skipped(16, 16, 3, 512 << 10).unwrap();
        assert!(
            small.contains("512 KiB, is below 1 MiB") && small.contains("-e 1M"),
            "{small}"
        );
        assert_eq!(skipped(16, 16, 3, 1 << 20), None);
        assert_eq!(skipped(4, 2, 3, 1 << 20), None, "2 hosts of 2 nodes each");
    }
}
