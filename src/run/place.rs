//! Placement on every rank (NIC, CPUs, preflight findings), gathered to rank 0, and `--dry-run`'s report.

use super::*;

/// This rank's placement: its endpoints' NICs and CPUs, and its preflight findings.
pub(super) fn place_rank(
    cli: &Cli,
    topo: &Topology,
    rank: usize,
    connections: &[(usize, usize)],
    plugin: &Plugin,
    sha: &str,
    cuda: bool,
) -> Result<placement::rank::RankPlan, String> {
    let devices = plugin.device_count().map_err(|e| e.to_string())?;
    let props = (0..devices)
        .map(|d| plugin.properties(d).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    placement::rank::plan(&placement::rank::RankInput {
        topo,
        rank,
        connections,
        channels: cli.channels,
        spread_channels: cli.spread_channels,
        net_dev: cli.net_dev.as_ref(),
        cpu_bind: &cli.cpu_bind,
        props: &props,
        plugin_name: plugin.name(),
        plugin_sha256: sha,
        cuda,
    })
}

/// Every rank's placement report, merged on rank 0 (empty elsewhere).
pub(super) fn gather_placement(mpi: &Mpi, mine: &placement::dry_run::RankReport) -> PlacementReport {
    let bytes = serde_json::to_vec(mine).unwrap_or_default();
    let Some(all) = mpi.gather_to_root(&bytes) else {
        return PlacementReport::default();
    };
    let mut broken = Vec::new();
    let reports = all
        .iter()
        .enumerate()
        .filter_map(|(r, b)| {
            serde_json::from_slice(b)
                .map_err(|e| {
                    broken.push(Finding::error(format!(
                        "rank {r}'s placement report is unreadable: {e}"
                    )))
                })
                .ok()
        })
        .collect();
    let mut merged = PlacementReport::merge(reports);
    for f in broken {
        merged.findings.insert(
            0,
            placement::dry_run::NodeFinding {
                level: f.level,
                text: f.text,
                hosts: Vec::new(),
            },
        );
    }
    merged
}

/// `--dry-run`: rank 0 prints the plan, the placement tables and every finding; the job ends
/// before any comm exists. Exit 0 without error findings.
pub(super) fn dry_run_report(
    mpi: &Mpi,
    topo: &Topology,
    plugin: &Plugin,
    sha: &str,
    placement: &PlacementReport,
    notes: &[String],
) -> i32 {
    let mut errors = [placement.errors() as u64];
    // Only rank 0 holds the merged report: every rank learns the verdict.
    mpi.sum_u64(&mut errors);
    if mpi.rank() == 0 {
        println!(
            "# tcpx-perf {} --dry-run: plugin {} ({}, ABI v{}, sha256 {})",
            report::TOOL_VERSION,
            plugin.path().display(),
            plugin.name(),
            plugin.abi(),
            sha
        );
        println!(
            "# ranks: {} endpoints: {} nodes: {}",
            topo.ranks(),
            topo.len(),
            topo.nodes
        );
        for note in notes {
            println!("# note: {note}");
        }
        print!("{}", placement.table());
        print!("{}", placement.finding_lines(placement::preflight::Level::Ok));
        let warnings = placement
            .findings
            .iter()
            .filter(|f| f.level == placement::preflight::Level::Warning)
            .count();
        println!(
            "# dry run: {} error(s), {warnings} warning(s), {} comms planned; no comm opened, no data moved",
            errors[0], placement.comms
        );
    }
    if errors[0] > 0 {
        EXIT_ERROR
    } else {
        EXIT_OK
    }
}
