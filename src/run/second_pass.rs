//! The node verdicts' second pass, inside the job ([`crate::verdict::second_pass`]): after the
//! sweep, rank 0 judges the nodes from what it measured; every suspect it cannot tell from its
//! partners is measured again against a node that came out healthy, on every rank together, and
//! [`super::finish`] lets that measurement decide its verdict.

use super::connect::Connected;
use super::measure::{measure, Bench};
use super::settings::Settings;
use super::{Fatal, Job};
use crate::collectives::Collectives;
use crate::delivery::WireProbe;
use crate::mpi_boot::Mpi;
use crate::plan::Plan;
use crate::report::{RunInfo, SizeResult};
use std::sync::Arc;

/// The pass's pairs (suspect host, healthy host) and what it measured.
pub(super) struct SecondPass {
    pub pairs: Vec<(String, String)>,
    pub result: SizeResult,
}

/// Runs the second pass where the sweep's verdicts need one (every rank calls it after a sweep
/// that ended well); None where none does.
pub(super) fn run(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    probe: &WireProbe,
    connected: &mut Connected,
    results: &[SizeResult],
    info: &RunInfo,
) -> Result<Option<SecondPass>, Fatal> {
    let topo = &job.topo;
    // Per node, 4 bytes: its partner's index + 1 (0: none), written by rank 0 and OR-ed into
    // every rank's copy (rank 0 alone holds the placement the verdicts read).
    let mut wire = vec![0u8; 4 * topo.nodes];
    let node_of = |host: &str| {
        let rank = topo.hostnames.iter().position(|h| h == host)?;
        topo.endpoints.iter().find(|e| e.rank == rank).map(|e| e.node)
    };
    if mpi.rank() == 0 {
        let verdicts = crate::verdict::of_run(info, results, None, settings.verdicts);
        for (suspect, healthy) in crate::verdict::second_pass::pairs(&verdicts) {
            if let (Some(s), Some(h)) = (node_of(&suspect), node_of(&healthy)) {
                wire[4 * s..4 * s + 4].copy_from_slice(&(h as u32 + 1).to_le_bytes());
            }
        }
    }
    mpi.or_bytes(&mut wire);
    let nodes: Vec<(usize, usize)> = wire
        .chunks_exact(4)
        .enumerate()
        .filter_map(|(s, b)| {
            let h = u32::from_le_bytes(b.try_into().ok()?) as usize;
            (h > 0).then(|| (s, h - 1))
        })
        .collect();
    if nodes.is_empty() {
        return Ok(None);
    }
    let host_of = |node: usize| {
        let rank = topo.endpoints.iter().find(|e| e.node == node).map_or(0, |e| e.rank);
        topo.hostnames[rank].clone()
    };
    let pairs: Vec<(String, String)> = nodes.iter().map(|&(s, h)| (host_of(s), host_of(h))).collect();
    // The sweep's largest size, within the buffer every endpoint has (its block and its
    // partner's).
    let size = job.plans.last().map_or(0, |p| p.size).min(job.buffer_len / 2);
    let plan = Arc::new(Plan::node_pairs(topo, &nodes, size));
    if mpi.rank() == 0 {
        let list: Vec<String> = pairs.iter().map(|(s, h)| format!("{s} with {h}")).collect();
        println!(
            "# second pass: {} at {} (suspects the sweep could not tell from their partners, each against a healthy node)",
            list.join(", "),
            tcpx_units::format_size_label(size)
        );
    }
    let bench = Bench {
        mpi,
        engine: &connected.engine,
        topo,
        probe,
        progress: None,
    };
    // Its own data patterns, apart from the sweep's iterations.
    let mut pattern_iter = 1 << 30;
    let result = connected
        .links
        .aside(|links| measure(&settings.iterations, &bench, links, &plan, &mut pattern_iter))?;
    Ok(Some(SecondPass { pairs, result }))
}
