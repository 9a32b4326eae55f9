//! `tcpx-perf --plan NODESxGPUSxNICS`: the resource model of a job that does not exist yet,
//! checked against this machine's limits, on one machine and without MPI (the planning machine
//! need not have MPI peers, the plugin, or a GPU). The same model and verdicts as every run's
//! preflight ([`crate::placement::resources`]), fed from the flags instead of a live job.

use super::settings::{PluginSettings, Settings};
use super::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use crate::cli::ConnectMode;
use crate::cli::{Cli, Mem};
use crate::placement::arithmetic_nic;
use crate::placement::finding::Level;
use crate::placement::resources::check::{self, Needs, Verdict};
use crate::placement::resources::limits::Limits;
use crate::placement::resources::plugin::{is_real_tcpx, Kind};
use crate::placement::resources::shape::{active_channels, ShapePeers, Uniform};
use crate::placement::resources::{JobShape, Memory, Model, NodeNeed, PlanShape, PluginModel, ProcessNeed};
use crate::plan::{Pattern, Plan, Scope};
use nccl_net::Plugin;
use serde::Serialize;
use std::fmt::Write;

/// Device memory of A3-high's GPU (H100 80GB HBM3, 81559 MiB as its driver reports it), what
/// GPU memory is checked against on a machine without a GPU.
pub const ASSUMED_GPU_MEMORY: u64 = 81_559 << 20;

/// What `--plan-json` writes.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    pub shape: PlanShape,
    pub ranks_per_node: usize,
    pub endpoints_per_rank: usize,
    pub pattern: String,
    pub scope: String,
    pub channels: usize,
    pub max_peers: Option<usize>,
    /// `--connect`: every comm open at once, or one `--max-peers` round's.
    pub connect: ConnectMode,
    pub maxbytes: u64,
    pub memory: Memory,
    pub plugin: PluginModel,
    pub helper_threads: String,
    pub per_process: ProcessNeed,
    pub per_node: NodeNeed,
    pub limits: Limits,
    pub verdicts: Vec<Verdict>,
    pub notes: Vec<String>,
    /// No verdict is an error.
    pub fits: bool,
    /// `--simulate`: the job's bookkeeping rehearsed here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulation: Option<super::simulate::Simulation>,
}

/// Runs `--plan`; returns the exit status (0 fits, 1 crosses a limit, 64 bad usage).
pub fn plan(cli: &Cli) -> i32 {
    let mut report = match build(cli) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("tcpx-perf: usage error: {msg}");
            return EXIT_USAGE;
        }
    };
    print!("{}", table(&report));
    if cli.simulate {
        let simulated = Settings::from_cli(cli).and_then(|settings| {
            let shape = report.shape;
            super::simulate::simulate(
                &settings,
                shape.nodes,
                report.ranks_per_node,
                shape.nics,
                cli.out.as_deref(),
            )
        });
        match simulated {
            Ok(s) => {
                print!("{}", super::simulate::lines(&s));
                report.simulation = Some(s);
            }
            Err(e) => {
                eprintln!("tcpx-perf: error: --simulate: {e}");
                return EXIT_ERROR;
            }
        }
    }
    if let Some(path) = &cli.plan_json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                // Whole or absent (a full disk leaves no cut-off plan), never through a link.
                tcpx_files::write_bytes(path, tcpx_files::Durability::Synced, (text + "\n").as_bytes())
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            eprintln!("tcpx-perf: error: --plan-json {}: {e}", path.display());
            return EXIT_ERROR;
        }
    }
    if report.fits && report.simulation.as_ref().is_none_or(|s| s.named) {
        EXIT_OK
    } else {
        EXIT_ERROR
    }
}

/// Which plugin's figures the plan uses, and why (a note). The built-in tcpx-emu without
/// `--plugin`, and GPUDirect-TCPX for `--plugin tcpx`; any other `--plugin` is opened as a run
/// opens it and asked its name (`ncclNetPlugin_vN.name`, without `init`): GPUDirectTCPX's is
/// TCPX, tcpx-emu's is tcpx-emu, and a name that is neither, or a plugin that cannot be opened or
/// named, is planned as unknown, never as a plugin it is not.
fn plugin_kind(settings: &PluginSettings) -> (Kind, Option<String>) {
    let Some(spec) = settings.spec.as_deref() else {
        return (Kind::TcpxEmu, None);
    };
    if spec.eq_ignore_ascii_case("tcpx") {
        return (
            Kind::Tcpx,
            Some("--plugin tcpx: planned as GPUDirect-TCPX (by the word; no file opened)".into()),
        );
    }
    let unknown = "planned as unknown: tcpx-perf's own needs, none of the plugin's (its threads, \
                   sockets past one per comm, memory); --plugin tcpx plans GPUDirect-TCPX";
    let named = super::vet::plugin_source(settings)
        .and_then(|src| Plugin::identify(&src, &super::vet::open_options(settings)).map_err(|e| e.to_string()));
    match named {
        Ok(id) => {
            let file = if id.path == std::path::Path::new(spec) {
                String::new()
            } else {
                format!(" ({})", id.path.display())
            };
            let said = format!(
                "--plugin {spec}{file} names itself '{}' (ncclNetPlugin_v{})",
                id.name, id.abi
            );
            if is_real_tcpx(&id.name) {
                (Kind::Tcpx, Some(format!("{said}: planned as GPUDirect-TCPX")))
            } else if id.name.starts_with("tcpx-emu") {
                (Kind::TcpxEmu, Some(format!("{said}: planned as tcpx-emu")))
            } else {
                (
                    Kind::Unknown,
                    Some(format!("{said}, neither GPUDirectTCPX nor tcpx-emu: {unknown}")),
                )
            }
        }
        Err(e) => (
            Kind::Unknown,
            Some(format!("--plugin {spec} not opened ({e}): {unknown}")),
        ),
    }
}

/// Ranks per node: `--ranks-per-node`, else one rank per `-g` GPUs.
fn ranks_per_node(shape: PlanShape, settings: &Settings) -> Result<usize, String> {
    let g = settings.job.endpoints_per_rank;
    let rpn = match settings.job.ranks_per_node {
        Some(r) => r,
        None if shape.gpus.is_multiple_of(g) => shape.gpus / g,
        None => {
            return Err(format!(
                "--plan {shape}: {} GPUs per node do not split into ranks of -g {g}: use a -g that divides {}",
                shape.gpus, shape.gpus
            ))
        }
    };
    if rpn * g > shape.gpus {
        return Err(format!(
            "--plan {shape}: {rpn} ranks per node x -g {g} need {} GPUs per node, the shape has {}: lower --ranks-per-node or -g",
            rpn * g,
            shape.gpus
        ));
    }
    Ok(rpn)
}

fn build(cli: &Cli) -> Result<PlanReport, String> {
    let settings = Settings::from_cli(cli)?;
    let shape = cli.plan.ok_or("--plan needs NODESxGPUSxNICS")?;
    let rpn = ranks_per_node(shape, &settings)?;
    let g = settings.job.endpoints_per_rank;
    let layout = Uniform::new(shape.nodes, rpn, g).map_err(|e| format!("--plan {shape}: {e}"))?;
    let n = layout.endpoints();
    let sweep = &settings.sweep;
    let scope = sweep.scope_on(shape.nodes);
    let peers = ShapePeers::new(
        sweep.pattern,
        scope,
        sweep.dir,
        layout,
        sweep.max_peers,
        (settings.transport.connect == ConnectMode::Rounds).then(|| settings.rounds_per_connect()),
    )?;
    // Buffers grow with the size and connections do not depend on it: the largest size decides.
    let largest = sweep.sizes.last().copied().unwrap_or(0);
    let (size, buffer_len) = Plan::sized(sweep.pattern, n, largest);
    if size == 0 {
        return Err(format!(
            "every size is smaller than the {n} endpoints it must be split over; raise -e"
        ));
    }
    let (kind, plugin_note) = plugin_kind(&settings.plugin);
    let env = |k: &str| std::env::var(k).ok();
    let mut plugin = PluginModel::from_env("", &env)?;
    plugin.kind = kind;
    let (memory, mut notes) = memory_of(&settings, &plugin);
    notes.splice(0..0, plugin_note);
    let nic_of = |e: usize| arithmetic_nic(layout.gpu_of(e), shape.gpus, shape.nics);
    let nic_names: Vec<String> = (0..shape.nics).map(|n| format!("nic{n}")).collect();
    let tr = &settings.transport;
    let mut limits = Limits::read();
    // A machine with a GPU plans nodes with GPUs: its ranks load CUDA's driver.
    let cuda_runtime = memory != Memory::Host || limits.gpu_memory.is_some();
    let job = JobShape {
        layout: &layout,
        peers: &peers,
        channels: tr.channels,
        active_channels: active_channels(sweep.pattern, n, size, tr.chunk, tr.channels),
        buffer_len,
        memory,
        // Fullmesh copies each endpoint's block to itself unless the scope leaves its node out.
        local_copies: sweep.pattern == Pattern::Fullmesh && scope == Scope::All,
        // The imagined nodes are machines of their own: each node's ranks share its kernel,
        // whose pid_max this machine's stands in for.
        connects_in_flight: tr
            .connects_in_flight
            .unwrap_or_else(|| crate::engine::setup::connects_in_flight(limits.pid_max, rpn * g)),
        plugin: &plugin,
        nic_of: &nic_of,
        nic_names: &nic_names,
        cuda_runtime,
    };
    let model = Model::new(&job);
    let per_process = model.worst_process(layout.representative_ranks().into_iter());
    let per_node = model.worst_node(layout.representative_nodes().into_iter());
    if memory != Memory::Host && limits.gpu_memory.is_none() {
        limits.gpu_memory = Some(ASSUMED_GPU_MEMORY);
        limits.gpu_memory_assumed = true;
        notes.push(format!(
            "no GPU here: GPU memory checked against A3-high's H100 80GB, {:.2} GB (assumed)",
            ASSUMED_GPU_MEMORY as f64 / 1e9
        ));
    }
    let verdicts = check::verdicts(
        &Needs {
            host: "",
            process: &per_process,
            node: Some(&per_node),
            plugin: &plugin,
            memory,
        },
        &limits,
    );
    Ok(PlanReport {
        shape,
        ranks_per_node: rpn,
        endpoints_per_rank: g,
        pattern: sweep.pattern.to_string(),
        scope: scope.to_string(),
        channels: tr.channels,
        max_peers: sweep.max_peers,
        connect: tr.connect,
        maxbytes: size,
        memory,
        helper_threads: plugin.thread_mode(per_process.comms, memory == Memory::Cuda),
        plugin,
        fits: verdicts.iter().all(|v| v.level != Level::Error),
        per_process,
        per_node,
        limits,
        verdicts,
        notes,
        simulation: None,
    })
}

/// Where buffers live (`--mem auto` plans GPU memory: the shape's nodes have GPUs), and the
/// notes that say what was assumed.
fn memory_of(settings: &Settings, plugin: &PluginModel) -> (Memory, Vec<String>) {
    let mut notes = Vec::new();
    let memory = match settings.transport.mem {
        Mem::Host => Memory::Host,
        Mem::Cuda => Memory::Cuda,
        Mem::Auto => {
            notes.push("--mem auto planned as cuda: the shape's nodes have GPUs".to_string());
            Memory::Cuda
        }
    };
    if memory != Memory::Host && plugin.kind == Kind::Tcpx {
        notes.push("TCPX's bounce buffer is RxDM's GPU memory, outside this process's figures".to_string());
    }
    (memory, notes)
}

fn level_word(l: Level) -> &'static str {
    match l {
        Level::Error => "error",
        Level::Warning => "warning",
        Level::Ok => "ok",
    }
}

/// Memory in GB (10^9 bytes), as the findings say it.
fn bytes(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
}

/// The printed plan: a header, one aligned row per resource, one line per finding not ok.
pub fn table(r: &PlanReport) -> String {
    let mut s = format!(
        "# tcpx-perf --plan {}: {} ranks ({} per node, -g {}), {}, scope {}, {} channel(s), --connect {}, -e {}, --mem {}, {} (helper threads {})\n",
        r.shape,
        r.shape.nodes * r.ranks_per_node,
        r.ranks_per_node,
        r.endpoints_per_rank,
        r.pattern,
        r.scope,
        r.channels,
        serde_json::to_value(r.connect).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        tcpx_units::format_size(r.maxbytes),
        serde_json::to_value(r.memory).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        r.plugin.name(),
        r.helper_threads
    );
    for note in &r.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    s.push_str(&resource_rows(r));
    let mut counts = [0usize; 2];
    for v in r.verdicts.iter().filter(|v| v.level != Level::Ok) {
        counts[usize::from(v.level == Level::Warning)] += 1;
        let _ = writeln!(s, "# {}: {}", level_word(v.level), v.text);
    }
    let _ = writeln!(
        s,
        "# plan: {} error(s), {} warning(s): {}",
        counts[0],
        counts[1],
        if r.fits {
            "a job of this shape fits this machine's limits"
        } else {
            "a job of this shape would cross this machine's limits"
        }
    );
    s
}

/// One aligned row per resource: per process, per node, and this machine's limit with its verdict.
fn resource_rows(r: &PlanReport) -> String {
    let (p, n) = (&r.per_process, &r.per_node);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "#   {:<22} {:>12} {:>12}   limit here",
        "resource", "per process", "per node"
    );
    let ranks = n.ranks;
    let rows: Vec<(String, String, String)> = [
        ("comms (send+recv)", p.comms.to_string(), (p.comms * ranks).to_string()),
        ("listen comms", p.listens.to_string(), (p.listens * ranks).to_string()),
        (
            "sockets (data+ctrl)",
            p.sockets.to_string(),
            (p.sockets * ranks).to_string(),
        ),
        ("open files", p.files.to_string(), "-".into()),
        (
            "helper threads",
            p.helper_threads.to_string(),
            (p.helper_threads * ranks).to_string(),
        ),
        ("threads", p.threads.to_string(), n.threads.to_string()),
        ("host memory", bytes(p.host_bytes), bytes(n.host_bytes)),
        ("pinned memory", bytes(p.pinned_bytes), bytes(n.pinned_bytes)),
        ("GPU memory (per GPU)", bytes(p.gpu_bytes), "-".into()),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_string(), b, c))
    .chain(n.ports.iter().map(|port| {
        (
            format!("ports on {}", port.address),
            "-".into(),
            (port.listening + port.connecting).to_string(),
        )
    }))
    .collect();
    for (resource, per_process, per_node) in rows {
        let key = resource.trim_end_matches(" (per GPU)").replace(" (send+recv)", "");
        let limit = r
            .verdicts
            .iter()
            .filter(|v| v.resource == key)
            .min_by_key(|v| v.level)
            .map_or(String::new(), |v| {
                let limit = if key.contains("memory") {
                    bytes(v.limit)
                } else {
                    v.limit.to_string()
                };
                format!("{limit} ({}) {}", v.limit_name, level_word(v.level))
            });
        let _ = writeln!(s, "#   {resource:<22} {per_process:>12} {per_node:>12}   {limit}");
    }
    for v in r.verdicts.iter().filter(|v| v.resource == "bounce pool") {
        let _ = writeln!(
            s,
            "#   {:<22} {:>12} {:>12}   {} ({}) {}",
            "bounce pool (per GPU)",
            bytes(v.need),
            "-",
            bytes(v.limit),
            v.limit_name,
            level_word(v.level)
        );
    }
    s
}
