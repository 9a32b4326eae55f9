//! The place phase: placement on every rank (NIC, CPUs, preflight findings), gathered to rank 0,
//! the check that every rank runs the same plan, and `--dry-run`'s report.

use super::settings::Settings;
use super::vet::{run_info, Vetted};
use super::{agree, Fatal, Job, EXIT_ERROR, EXIT_OK};
use crate::collectives::Collectives;
use crate::engine::gpu::CudaPath;
use crate::engine::MemKind;
use crate::export::{self, json::RunStatus};
use crate::mpi_boot::Mpi;
use crate::placement::rank::EndpointPlace;
use crate::placement::resources::{self, Memory};
use crate::placement::{self, dry_run::PlacementReport, preflight::Finding, PlacementSettings};
use crate::report::{self, RunInfo};
use crate::topology::Topology;
use nccl_net::Plugin;

/// How the place phase ended.
pub(super) enum Placed {
    /// `--dry-run`: the exit status.
    DryRun(i32),
    /// Placed and agreed: the run's description and this rank's endpoints.
    Ready(Box<Ready>),
}

pub(super) struct Ready {
    pub info: RunInfo,
    pub endpoints: Vec<EndpointPlace>,
    /// The link matrix's layout: every endpoint's NIC (gathered from every rank's placement).
    pub matrix: crate::matrix::Matrix,
}

/// Places this rank's endpoints, checks that every rank runs exactly the same plan, and (without
/// `--dry-run`) describes the run.
pub(super) fn place(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    vetted: &Vetted,
    mut notes: Vec<String>,
    start_time: String,
) -> Result<Placed, Fatal> {
    let fields = agreement_fields(settings, job, vetted);
    let inputs = resource_inputs(settings, job, vetted);
    let peers = job_peers(mpi, job, &inputs);
    let rank_plan = agree(
        mpi,
        place_rank(
            &settings.placement,
            &job.topo,
            mpi.rank(),
            &job.connections,
            &vetted.plugin,
            &vetted.sha256,
            inputs,
            &peers,
        ),
    )?;
    notes.extend(rank_plan.notes.iter().cloned());
    let same_plan = mpi.check_same_plan(&fields);
    let mut placement = gather_placement(mpi, &rank_plan.report);
    if settings.dry_run {
        if let Err(e) = same_plan {
            placement.findings.insert(
                0,
                placement::dry_run::NodeFinding {
                    level: placement::preflight::Level::Error,
                    text: e,
                    hosts: vec![job.topo.hostnames[0].clone()],
                },
            );
        }
        let code = dry_run_report(mpi, &job.topo, &vetted.plugin, &vetted.sha256, &placement, &notes);
        return Ok(Placed::DryRun(code));
    }
    same_plan.map_err(Fatal::Everywhere)?;
    // Every endpoint's NIC, on every rank: a sender names the rail of the links it sends on.
    let nics = mpi.gather_strings(
        &rank_plan
            .report
            .rows
            .iter()
            .map(|r| format!("{}={}", r.endpoint, r.nic))
            .collect::<Vec<_>>()
            .join("\u{1f}"),
    );
    let mut rails = vec![String::new(); job.topo.len()];
    for (e, nic) in nics
        .iter()
        .flat_map(|n| n.split('\u{1f}'))
        .filter_map(|x| x.split_once('='))
    {
        if let Some(slot) = e.parse::<usize>().ok().and_then(|e| rails.get_mut(e)) {
            *slot = nic.to_string();
        }
    }
    let links = job.plans.first().map_or(0, |p| p.totals.links);
    let matrix = crate::matrix::Matrix::new(&job.topo, &rails, job.clocks.kernels(), links);
    let mut info = run_info(settings, job, vetted, start_time);
    info.notes = notes;
    info.placement = placement;
    // The run writes summary.json there at its end (a dry run returned above: no file).
    info.placement.findings_file = settings.output.dir.as_ref().map(|d| d.join(export::json::SUMMARY_JSON));
    info.nccl = vetted.resources.nccl.as_ref().map(|p| p.info().clone());
    claim_out_dir(settings, mpi, &mut info)?;
    refuse_error_findings(settings, mpi, &mut info, job.plans.len())?;
    Ok(Placed::Ready(Box::new(Ready {
        info,
        endpoints: rank_plan.endpoints,
        matrix,
    })))
}

/// Rank 0 claims `--out` for this job ([`export::claim`]) before anything is written there. A
/// directory another job holds ends every rank together and cleanly (exit 1), rank 0 naming the
/// holder; a stale claim taken over is a note in the header.
fn claim_out_dir(settings: &Settings, mpi: &Mpi, info: &mut RunInfo) -> Result<(), Fatal> {
    let claimed = match &settings.output.dir {
        Some(dir) if mpi.rank() == 0 => export::claim::claim(dir).map_err(|e| e.to_string()),
        _ => Ok(None),
    };
    info.notes.extend(agree(mpi, claimed)?);
    Ok(())
}

/// An error finding stops the run before any data moves: rank 0 (which alone holds the merged
/// findings) prints them and writes a summary.json saying `status: "error"`, and every rank
/// exits 1 together. `--force` runs anyway, recorded in the header and summary.json.
fn refuse_error_findings(
    settings: &Settings,
    mpi: &Mpi,
    info: &mut RunInfo,
    sizes_planned: usize,
) -> Result<(), Fatal> {
    let mut errors = [info.placement.errors() as u64];
    mpi.sum_u64(&mut errors);
    let [errors] = errors;
    if errors == 0 {
        return Ok(());
    }
    if settings.force {
        info.notes.push(format!(
            "--force: running despite {errors} error finding(s) of preflight (listed below); the results may not mean what they say"
        ));
        return Ok(());
    }
    let msg = format!(
        "preflight found {errors} error finding(s) (listed above); no data moved. Fix them, or pass --force to run anyway"
    );
    if mpi.rank() == 0 {
        // Written first: a line cut short names summary.json only where it was written.
        let written = settings.output.dir.as_ref().and_then(|dir| {
            export::prepare_out_dir(dir)
                .and_then(|()| export::write_results(dir, info, &[], sizes_planned, &RunStatus::Refused(msg.clone())))
                .map_err(|e| eprintln!("tcpx-perf: warning: summary.json not written: {e}"))
                .ok()
                .map(|()| dir.join(export::json::SUMMARY_JSON))
        });
        info.placement.findings_file.clone_from(&written);
        print!("{}", info.placement.finding_lines(placement::preflight::Level::Warning));
        if let Some(file) = written {
            println!("# Findings written to {}", file.display());
        }
    }
    Err(Fatal::Everywhere(msg))
}

/// What every rank must run exactly: `(name, value)`, compared over ranks before data moves.
fn agreement_fields(settings: &Settings, job: &Job, vetted: &Vetted) -> Vec<(&'static str, String)> {
    let (sweep, it, tr) = (&settings.sweep, &settings.iterations, &settings.transport);
    let sizes: Vec<String> = job.plans.iter().map(|p| p.size.to_string()).collect();
    let plugin = &vetted.plugin;
    vec![
        ("tool version", report::TOOL_VERSION.to_string()),
        ("pattern", sweep.pattern.to_string()),
        ("scope", job.scope.to_string()),
        ("dir", sweep.dir.to_string()),
        ("sizes", sizes.join(",")),
        // The job's sums, which every rank computes alone from the shape.
        (
            "plan totals",
            job.plans
                .iter()
                .map(|p| format!("{:?}", p.totals))
                .collect::<Vec<_>>()
                .join(";"),
        ),
        ("iters", it.iters.to_string()),
        ("warmup", it.warmup.to_string()),
        ("check", u32::from(it.check).to_string()),
        ("mem", format!("{:?}", vetted.mem())),
        ("average", it.average.to_string()),
        ("ngpus", settings.job.endpoints_per_rank.to_string()),
        ("chunk", tr.chunk.to_string()),
        ("max-reg", vetted.resources.reg_segment.to_string()),
        ("channels", tr.channels.to_string()),
        ("window", tr.window.to_string()),
        ("timeout", settings.timeout.as_secs().to_string()),
        (
            "max-peers",
            sweep.max_peers.map_or_else(|| "all".to_string(), |n| n.to_string()),
        ),
        ("net-dev", format!("{:?}", settings.placement.net_dev)),
        ("plugin name", plugin.name().to_string()),
        ("plugin ABI", plugin.abi().to_string()),
        ("plugin sha256", vetted.sha256.clone()),
        (
            "NCCL baseline",
            vetted
                .resources
                .nccl
                .as_ref()
                .map_or("none".into(), |p| p.version().to_string()),
        ),
    ]
}

/// What the resource model of the preflight reads besides the placement.
pub(super) struct ResourceInputs {
    memory: Memory,
    buffer_len: u64,
    local_copies: bool,
    /// `--connect rounds`: every held network flow's (src, dst, part), one part's comms open
    /// at once; and the parts.
    rounds: Option<(Vec<RoundFlow>, usize)>,
    connects_in_flight: usize,
    kernel_nodes: Vec<usize>,
}

/// A network flow's (sender, receiver, `--connect rounds` part).
type RoundFlow = (usize, usize, u32);

/// The job's memory, buffers, local copies and the comms open at once, as the engine will use them.
pub(super) fn resource_inputs(settings: &Settings, job: &Job, vetted: &Vetted) -> ResourceInputs {
    ResourceInputs {
        memory: match vetted.mem() {
            MemKind::Host => Memory::Host,
            MemKind::Cuda(CudaPath::Direct) => Memory::Cuda,
            MemKind::Cuda(CudaPath::Staged) => Memory::CudaStaged,
        },
        buffer_len: job.buffer_len,
        connects_in_flight: job.connects_in_flight,
        kernel_nodes: job.kernel_nodes.clone(),
        local_copies: job
            .plans
            .iter()
            .any(|p| p.flows.iter().any(crate::plan::Flow::is_local)),
        // A plan's rounds are its peers' shifts, the same at every size; a connect opens a
        // part's (`Links`).
        rounds: (settings.transport.connect == crate::cli::ConnectMode::Rounds)
            .then(|| job.plans.first())
            .flatten()
            .map(|p| {
                let per_part = settings.rounds_per_connect();
                let flows = p
                    .flows
                    .iter()
                    .filter(|f| !f.is_local())
                    .map(|f| (f.src, f.dst, f.round / per_part as u32))
                    .collect();
                (flows, p.rounds().div_ceil(per_part))
            }),
    }
}

/// Every endpoint's peers, in every phase (every comm at once; with `--connect rounds`, each
/// part's): each rank counts its own endpoints from its held plan, and a sum over the ranks
/// gives every rank the job's, 2 numbers per endpoint and phase.
fn job_peers(mpi: &Mpi, job: &Job, inputs: &ResourceInputs) -> resources::Counted {
    let n = job.topo.len();
    let (own, phases): (resources::Counted, Vec<resources::Phase>) = match &inputs.rounds {
        None => (resources::Counted::all(n, &job.connections), vec![None]),
        Some((flows, parts)) => (
            resources::Counted::by_round(n, flows.iter().copied()),
            (0..*parts as u32).map(Some).collect(),
        ),
    };
    let mut table = own.to_table(&phases, job.topo.endpoints_of(mpi.rank()), n);
    mpi.sum_u64(&mut table);
    resources::Counted::from_table(&phases, n, &table)
}

/// This rank's placement: its endpoints' NICs and CPUs, and its preflight findings.
#[allow(clippy::too_many_arguments)]
pub(super) fn place_rank(
    settings: &PlacementSettings,
    topo: &Topology,
    rank: usize,
    connections: &[(usize, usize)],
    plugin: &Plugin,
    sha: &str,
    inputs: ResourceInputs,
    peers: &resources::Counted,
) -> Result<placement::rank::RankPlan, String> {
    let devices = plugin.device_count().map_err(|e| e.to_string())?;
    let props = (0..devices)
        .map(|d| plugin.properties(d).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    placement::rank::plan(&placement::rank::RankInput {
        topo,
        rank,
        connections,
        channels: settings.channels,
        spread_channels: settings.spread_channels,
        net_dev: settings.net_dev.as_ref(),
        cpu_bind: &settings.cpu_bind,
        props: &props,
        plugin_name: plugin.name(),
        plugin_sha256: sha,
        memory: inputs.memory,
        buffer_len: inputs.buffer_len,
        local_copies: inputs.local_copies,
        peers,
        connects_in_flight: inputs.connects_in_flight,
        kernel_nodes: &inputs.kernel_nodes,
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
                    )));
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
