//! `tcpx-perf --plan SHAPE --simulate`: a job's bookkeeping rehearsed on one machine, before
//! anyone reserves its nodes. No MPI, no plugin, no socket: the code a run uses, over synthetic
//! times.
//!
//! What it runs, phase by phase, each timed with the process's peak memory after it:
//! - rank 0's plans of every size and its endpoints' schedules (what every rank builds for itself);
//! - per size, every rank's halves of the link matrix from its own held plan and synthetic
//!   flow times ([`crate::matrix::Matrix::halves`]: in a job each rank makes its own, at once;
//!   here they are made one after another, on this machine's cores, as rank 0's input), then
//!   rank 0's work: the matrix joined ([`crate::matrix::Matrix::merge`]), checked against the
//!   links, and the files rewritten as after every size of a run;
//! - a probe of `--probe-rounds` rounds of node pairs, the node verdicts and the findings, and
//!   the final files and pictures.
//!
//! The synthetic times: every flow runs at its NIC's rate shared by the endpoints on that NIC
//! (a 200 Gbit/s NIC), within ±5%, and one NIC of one node (both its directions) at a quarter:
//! the verdicts must name it.

use super::settings::Settings;
use crate::engine::schedule::Schedule;
use crate::export::{self, json::RunStatus};
use crate::matrix::{FlowTimes, Halves, Level, Matrix};
use crate::placement::dry_run::Row;
use crate::placement::{arithmetic_nic, Choice};
use crate::plan::{Holder, Lanes, Plan};
use crate::report::{self, NodeVerdict, ProbeRound, ProbeRun, RunInfo, SizeResult};
use crate::topology::Topology;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The synthetic NICs' line rate, Gbit/s (A3-high's).
const NIC_GBPS: f64 = 200.0;

/// What `--simulate` measured (`--plan-json`'s `simulation`).
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    /// What one link of the matrix is at this shape.
    pub level: Level,
    /// Links per size at that level.
    pub links: usize,
    /// The job's directed endpoint pairs.
    pub endpoint_pairs: u64,
    pub ranks: usize,
    /// Every phase in order: seconds, and the process's peak memory after it.
    pub phases: Vec<Phase>,
    /// Seconds of the whole rehearsal.
    pub seconds: f64,
    /// The process's peak resident memory (VmHWM), bytes.
    pub peak_bytes: u64,
    /// Rank 0's own work: its plans and schedules, and its per-size work (the other ranks'
    /// halves, made here for it, left out), seconds.
    pub rank0_seconds: f64,
    /// The largest per-size rank 0 work, seconds: from the gathered halves to the size's files.
    pub rank0_size_seconds_max: f64,
    /// Every other rank's halves, mean seconds per rank per size.
    pub rank_halves_seconds: f64,
    /// The NIC slowed to a quarter: `host nic`.
    pub slowed: String,
    /// The node verdicts the synthetic probe gave, `host verdict [nics]`, all but healthy.
    pub verdicts: Vec<String>,
    /// The verdicts name the slowed NIC (bad), and no other node.
    pub named: bool,
    /// The result folder's bytes (every file).
    pub out_bytes: u64,
    pub out: Option<PathBuf>,
}

/// One phase of the rehearsal.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub seconds: f64,
    pub peak_bytes: u64,
}

/// The job being rehearsed: its topology, placement rows and the slowed NIC.
struct Rig {
    topo: Topology,
    rows: Vec<Row>,
    /// (node, NIC index) at a quarter of its rate.
    slowed: (usize, usize),
    /// Endpoints per NIC of a node.
    per_nic: f64,
}

impl Rig {
    fn new(nodes: usize, rpn: usize, g: usize, nics: usize) -> Rig {
        let ranks = nodes * rpn;
        let topo =
            Topology::with_ranks_per_node(ranks, rpn, g, (0..ranks).map(|r| format!("node{}", r / rpn)).collect());
        let gpus = rpn * g;
        let rows = topo
            .endpoints
            .iter()
            .enumerate()
            .map(|(e, ep)| Row {
                endpoint: e,
                rank: ep.rank,
                host: topo.hostnames[ep.rank].clone(),
                gpu: ep.gpu,
                gpu_pci: "-".into(),
                gpu_numa: "-".into(),
                nic: format!("eth{}", arithmetic_nic(ep.gpu, gpus, nics) + 1),
                nic_dev: arithmetic_nic(ep.gpu, gpus, nics),
                nic_pci: "-".into(),
                nic_numa: "-".into(),
                speed_gbps: NIC_GBPS,
                shapers: Vec::new(),
                mtu: Some(8244),
                distance: "simulated".into(),
                choice: Choice::Arithmetic,
                cpus: "-".into(),
                cpus_why: String::new(),
            })
            .collect();
        Rig {
            topo,
            rows,
            slowed: (nodes * 2 / 3, nics - 1),
            per_nic: (gpus as f64 / nics as f64).max(1.0),
        }
    }

    /// Every rank's kernel: each node a host of its own.
    fn kernels(&self) -> Vec<Option<usize>> {
        (0..self.topo.ranks())
            .map(|r| Some(self.topo.endpoints[self.topo.endpoints_of(r).start].node))
            .collect()
    }

    fn nic(&self, e: usize) -> usize {
        self.rows[e].nic_dev
    }

    /// Whether a flow from `src` to `dst` crosses the slowed NIC (the rail is the receiver's).
    fn slow(&self, src: usize, dst: usize) -> bool {
        let (node, nic) = self.slowed;
        self.nic(dst) == nic && (self.topo.endpoints[src].node == node || self.topo.endpoints[dst].node == node)
    }

    /// Synthetic times of `plan`'s held flows: each endpoint's NIC share for the bytes it
    /// sends per iteration (`sent`), within ±5%; a quarter through the slowed NIC.
    fn times(&self, plan: &Plan, sent: u64) -> Vec<FlowTimes> {
        let share = NIC_GBPS * 1e9 / 8.0 / self.per_nic;
        let base = sent as f64 / share;
        plan.flows
            .iter()
            .map(|f| {
                let jitter = 0.95 + 0.1 * (hash(f.src, f.dst, plan.size) % 1000) as f64 / 1000.0;
                let slow = if self.slow(f.src, f.dst) { 4.0 } else { 1.0 };
                let posted = 1e-6 * jitter;
                let done = posted + base * slow * jitter;
                FlowTimes {
                    part: 0,
                    posted: Some((posted, posted)),
                    done: Some((done, done)),
                }
            })
            .collect()
    }
}

/// A deterministic spread of three numbers.
fn hash(a: usize, b: usize, c: u64) -> u64 {
    tcpx_units::rng::mix(tcpx_units::rng::mix(tcpx_units::rng::mix(a as u64) ^ b as u64) ^ c)
}

/// The phases' clock.
struct Clock {
    phases: Vec<Phase>,
    at: Instant,
}

impl Clock {
    fn lap(&mut self, name: impl Into<String>) -> f64 {
        let seconds = self.at.elapsed().as_secs_f64();
        self.phases.push(Phase {
            name: name.into(),
            seconds,
            peak_bytes: crate::trace::peak_bytes(),
        });
        self.at = Instant::now();
        seconds
    }
}

/// Runs the rehearsal of a job of `nodes` x `rpn` ranks x `g` endpoints over `nics` NICs a node
/// with `settings`' sweep; `out`: where the files go (else a temporary directory, removed).
pub(super) fn simulate(
    settings: &Settings,
    nodes: usize,
    rpn: usize,
    nics: usize,
    out: Option<&Path>,
) -> Result<Simulation, String> {
    let started = Instant::now();
    let g = settings.job.endpoints_per_rank;
    let rig = Rig::new(nodes, rpn, g, nics);
    let topo = &rig.topo;
    let mut clock = Clock {
        phases: Vec::new(),
        at: Instant::now(),
    };
    let sweep = &settings.sweep;
    // Rank 0's own: its plans and its endpoints' schedules.
    let mine = Holder::Endpoints(topo.endpoints_of(0));
    let (plans, _) = sweep.plans(topo, &mine)?;
    let mut rank0 = clock.lap("rank 0: its plans of every size");
    let tr = &settings.transport;
    let connections = plans[0].connections();
    for plan in &plans {
        for e in topo.endpoints_of(0) {
            let lanes = Lanes::of(e, &connections, tr.channels);
            std::hint::black_box(Schedule::build(plan, e, &lanes, tr.chunk, u64::MAX));
        }
    }
    rank0 += clock.lap("rank 0: its endpoints' schedules of every size");
    let rails: Vec<String> = rig.rows.iter().map(|r| r.nic.clone()).collect();
    let kernels = rig.kernels();
    let matrix = Matrix::new(topo, &rails, &kernels, plans[0].totals.links);

    let (dir, temporary) = out_dir(out)?;
    let mut info = run_info(settings, &rig, nics);
    let planned = plans.len();
    let swept = sizes(settings, &rig, &matrix, &plans, &dir, &info, &mut clock)?;
    rank0 += swept.rank0;
    let results = swept.results;
    info.probe = Some(probe(settings, &rig, &results));
    rank0 += clock.lap("probe: rounds of node pairs, joined");
    let _ = super::finish::add_link_findings(&mut info, &results, settings.verdicts);
    rank0 += clock.lap("node verdicts and findings");
    export::write_results(&dir, &info, &results, planned, &RunStatus::Ok).map_err(|e| e.to_string())?;
    rank0 += clock.lap("final files and pictures");
    let out_bytes = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    if temporary {
        // Ours: made by this process under the temporary directory, with only our files in it.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let slowed_host = format!("node{}", rig.slowed.0);
    let slowed_nic = format!("eth{}", rig.slowed.1 + 1);
    let named = names_only(&info.node_verdicts, &slowed_host, &slowed_nic);
    Ok(Simulation {
        level: matrix.level,
        links: swept.links,
        endpoint_pairs: plans[0].totals.links,
        ranks: topo.ranks(),
        seconds: started.elapsed().as_secs_f64(),
        peak_bytes: crate::trace::peak_bytes(),
        rank0_seconds: rank0,
        rank0_size_seconds_max: swept.size_max,
        rank_halves_seconds: swept.halves / (topo.ranks() * plans.len()).max(1) as f64,
        slowed: format!("{slowed_host} {slowed_nic}"),
        verdicts: info
            .node_verdicts
            .iter()
            .filter(|v| v.verdict != report::Health::Healthy)
            .map(|v| {
                let sides: Vec<String> = v
                    .slow_sides
                    .iter()
                    .map(|s| format!("{} {}", s.nic, if s.sending { "sending" } else { "receiving" }))
                    .collect();
                format!("{} {} ({})", v.host, v.verdict.as_str(), sides.join(", "))
            })
            .collect(),
        named,
        out_bytes,
        out: (!temporary).then_some(dir),
        phases: clock.phases,
    })
}

/// What the rehearsal of the sizes gave: their results, and the seconds of rank 0's work.
struct Swept {
    results: Vec<SizeResult>,
    /// Rank 0's own seconds over every size, and the most one size took.
    rank0: f64,
    size_max: f64,
    /// Seconds of every rank's halves, made here.
    halves: f64,
    /// Links a size.
    links: usize,
}

/// Every size as a run does it: every rank's halves, rank 0's join and link check, the files.
fn sizes(
    settings: &Settings,
    rig: &Rig,
    matrix: &Matrix,
    plans: &[Arc<Plan>],
    dir: &Path,
    info: &RunInfo,
    clock: &mut Clock,
) -> Result<Swept, String> {
    let mut out = Swept {
        results: Vec::new(),
        rank0: 0.0,
        size_max: 0.0,
        halves: 0.0,
        links: 0,
    };
    for plan in plans {
        let sent = plan.network_bytes() / plan.senders().max(1) as u64;
        let label = tcpx_units::format_size_label(plan.size);
        let gathered = every_rank_halves(settings, rig, matrix, plan.size, sent)?;
        out.halves += clock.lap(format!("{label}: every rank's halves (their own work, made here)"));
        let mut r = synthetic_size(plan, settings, &rig.topo, rig, sent);
        let decoded: Vec<Halves> = gathered.iter().filter_map(|m| Halves::decode(m)).collect();
        drop(gathered);
        r.pairs = matrix.merge(&decoded);
        drop(decoded);
        out.links = r.pairs.len();
        crate::link_check::mark(&rig.rows, &mut r);
        let joined = clock.lap(format!("{label}: rank 0 joins {} links", r.pairs.len()));
        out.results.push(r);
        export::write_partial(dir, info, &out.results, plans.len(), &RunStatus::Running).map_err(|e| e.to_string())?;
        let written = clock.lap(format!("{label}: rank 0 rewrites the files"));
        out.size_max = out.size_max.max(joined + written);
        out.rank0 += joined + written;
    }
    Ok(out)
}

/// Whether the verdicts call the slowed NIC's node bad naming that NIC, and no other node worse
/// than healthy.
fn names_only(verdicts: &[NodeVerdict], host: &str, nic: &str) -> bool {
    let named = verdicts
        .iter()
        .any(|v| v.host == host && v.verdict == report::Health::Bad && v.slow_sides.iter().any(|s| s.nic == nic));
    named
        && verdicts
            .iter()
            .all(|v| v.host == host || v.verdict == report::Health::Healthy)
}

/// Every rank's halves of one size, each from its own held plan, made on this machine's cores.
fn every_rank_halves(
    settings: &Settings,
    rig: &Rig,
    matrix: &Matrix,
    size: u64,
    sent: u64,
) -> Result<Vec<Vec<f64>>, String> {
    let ranks = rig.topo.ranks();
    let sweep = &settings.sweep;
    let scope = sweep.scope_on(rig.topo.nodes);
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(8);
    let mut out: Vec<Vec<f64>> = vec![Vec::new(); ranks];
    let chunk = ranks.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = out
            .chunks_mut(chunk)
            .enumerate()
            .map(|(w, slots)| {
                s.spawn(move || -> Result<(), String> {
                    for (i, slot) in slots.iter_mut().enumerate() {
                        let rank = w * chunk + i;
                        let holder = Holder::Endpoints(rig.topo.endpoints_of(rank));
                        let plan = Plan::build_held(
                            &holder,
                            sweep.pattern,
                            scope,
                            sweep.dir,
                            &rig.topo,
                            size,
                            sweep.max_peers,
                        )?;
                        *slot = matrix.halves(&plan, &rig.times(&plan, sent)).encode();
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a simulation thread panicked".into())))
            .collect::<Result<Vec<()>, String>>()
    })?;
    Ok(out)
}

/// A size's figures as the synthetic times make them (the pairs come from the matrix).
fn synthetic_size(plan: &Plan, settings: &Settings, topo: &Topology, rig: &Rig, sent: u64) -> SizeResult {
    let it = &settings.iterations;
    let share = NIC_GBPS * 1e9 / 8.0 / rig.per_nic;
    // The slowed NIC holds every iteration back.
    let time_us = sent as f64 / share * 4.0 * 1e6;
    let iters = it.iters.max(1);
    let samples_us: Vec<f64> = (0..iters)
        .map(|i| time_us * (0.98 + 0.04 * (hash(i, 0, plan.size) % 100) as f64 / 100.0))
        .collect();
    let rank_samples_us: Vec<f64> = (0..topo.ranks()).flat_map(|_| samples_us.iter().copied()).collect();
    let mean = samples_us.iter().sum::<f64>() / iters as f64;
    let algbw = tcpx_units::gbps(plan.size, mean);
    let mut bytes = crate::delivery::ByteCheck::default();
    bytes.witnessed_by_data_check(plan.network_bytes());
    SizeResult {
        size_bytes: plan.size,
        requested_bytes: plan.requested,
        count: plan.size / 4,
        iters,
        time_us: mean,
        algbw_gbps: algbw,
        busbw_gbps: algbw * plan.busbw_factor(),
        wrong: Some(0),
        stats: crate::stats::summarize(&samples_us),
        bytes_planned: plan.network_bytes(),
        bytes,
        samples_us,
        busbw_factor: plan.busbw_factor(),
        netbw_gbps: algbw * plan.netbw_factor(),
        peers_in_flight: (0, 0),
        cpu: crate::cputime::CpuCost::from_ranks(&vec![0.0; 3 * topo.ranks()], plan.network_bytes() * iters as u64),
        rank_samples_us,
        pairs: Vec::new(),
        tcp: None,
        nccl: None,
    }
}

/// The probe's rounds over the synthetic times, each joined as the run joins a round.
fn probe(settings: &Settings, rig: &Rig, results: &[SizeResult]) -> ProbeRun {
    let topo = &rig.topo;
    let size = results
        .last()
        .map_or(0, |r| r.size_bytes)
        .min(super::probe::PROBE_SIZE_MAX);
    if let Some(why) = super::probe::skipped(
        topo.nodes,
        super::probe::distinct_hosts(topo),
        settings.probe_rounds,
        size,
    ) {
        return ProbeRun {
            skipped: Some(why),
            ..ProbeRun::default()
        };
    }
    let rails: Vec<String> = rig.rows.iter().map(|r| r.nic.clone()).collect();
    let kernels = rig.kernels();
    let host_of = |node: usize| format!("node{node}");
    let mut out = ProbeRun {
        size_bytes: size,
        ..ProbeRun::default()
    };
    for pairs in super::probe::matchings(topo.nodes, settings.probe_rounds) {
        // Both halves of the round in one plan: synthetic times have no acknowledgements.
        let plan = Arc::new(Plan::node_pairs(
            topo,
            &super::probe::one_way_halves(&pairs).concat(),
            size,
            &Holder::Job,
        ));
        // Judged per NIC, as the run's probe.
        let matrix = Matrix::new(topo, &rails, &kernels, plan.totals.links).at(Level::Nic);
        let halves = matrix.halves(&plan, &rig.times(&plan, size));
        let mut result = synthetic_size(&plan, settings, topo, rig, size);
        result.pairs = matrix.merge(std::slice::from_ref(&halves));
        crate::link_check::mark(&rig.rows, &mut result);
        out.bytes += plan.network_bytes();
        out.rounds.push(ProbeRound {
            pairs: pairs.iter().map(|&(a, b)| (host_of(a), host_of(b))).collect(),
            time_us: result.time_us,
            result,
        });
    }
    out
}

/// The result directory: `out` (made, or empty), else a new one under the temporary directory.
fn out_dir(out: Option<&Path>) -> Result<(PathBuf, bool), String> {
    if let Some(dir) = out {
        export::prepare_out_dir(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
        return Ok((dir.to_path_buf(), false));
    }
    let dir = std::env::temp_dir().join(format!("tcpx-perf-simulate-{}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((dir, true))
}

/// The run's description as rank 0 would hold it.
fn run_info(settings: &Settings, rig: &Rig, nics: usize) -> RunInfo {
    let topo = &rig.topo;
    RunInfo {
        tool_version: report::TOOL_VERSION.to_string(),
        git_commit: report::git_commit(),
        command: std::env::args().collect(),
        start_time: report::now_rfc3339(),
        settings: super::vet::run_settings(
            settings,
            topo,
            settings.sweep.scope_on(topo.nodes).to_string(),
            "host",
            "host (simulated)".into(),
        ),
        hosts: super::vet::hosts_of(topo),
        plugin: report::PluginInfo {
            path: "(simulated)".into(),
            sha256: String::new(),
            name: "simulated".into(),
            abi: 7,
            ptr_support: "host".into(),
            device_type: "host".into(),
            devices: nics,
        },
        mpi_library: "(simulated)".into(),
        env: Vec::new(),
        config: settings.flags.clone(),
        notes: vec!["--simulate: synthetic times, no MPI, no plugin, no socket".into()],
        placement: report::PlacementReport {
            rows: rig.rows.clone(),
            ..report::PlacementReport::default()
        },
        force: false,
        cpu: None,
        nccl: None,
        bandwidth_gate: None,
        slow_nics: Vec::new(),
        node_verdicts: Vec::new(),
        probe: None,
    }
}

/// The rehearsal in lines for the terminal.
pub fn lines(s: &Simulation) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = format!(
        "# simulation: {} ranks, {} directed endpoint pairs; the link matrix per {} ({} links a size)\n",
        s.ranks,
        s.endpoint_pairs,
        s.level.name(),
        s.links
    );
    out.push_str("#   phase                                                         seconds   peak MB\n");
    for p in &s.phases {
        out.push_str(&format!(
            "#   {:<60} {:>8.3} {:>9.1}\n",
            p.name,
            p.seconds,
            mb(p.peak_bytes)
        ));
    }
    out.push_str(&format!(
        "# simulation: {:.2} s in all, peak memory {:.1} MB; rank 0's own work {:.2} s (a size's at most {:.3} s); every other rank's halves {:.3} ms a size each; result folder {:.1} MB\n",
        s.seconds,
        mb(s.peak_bytes),
        s.rank0_seconds,
        s.rank0_size_seconds_max,
        s.rank_halves_seconds * 1e3,
        mb(s.out_bytes)
    ));
    out.push_str(&format!(
        "# simulation: {} slowed to a quarter; verdicts: {}; {}\n",
        s.slowed,
        if s.verdicts.is_empty() {
            "all healthy".to_string()
        } else {
            s.verdicts.join("; ")
        },
        if s.named {
            "named, nobody else"
        } else {
            "NOT named alone"
        }
    ));
    if let Some(dir) = &s.out {
        out.push_str(&format!("# simulation: files in {}\n", dir.display()));
    }
    out
}
