//! One benchmark run, from parsed flags to the result directory.
//!
//! Order of business: MPI and the topology; the plan for every size (identical on every rank);
//! the plugin; the check that all ranks agree on all of it; connections; the sweep; the report.
//! Errors that every rank hits identically (a plan that cannot work) are printed once by rank 0;
//! errors of one rank (a plugin that fails to load there) are printed by that rank, which then
//! ends the whole job so that no other rank waits for it.

use crate::baseline::{self, NcclBaseline};
use crate::cli::{Cli, Mem, PluginLog, Scope as ScopeArg};
use crate::contracts;
use crate::cputime::{CpuCost, CpuTime};
use crate::delivery::{self, WireProbe};
use crate::engine::gpu::CudaPath;
use crate::engine::progress::Delivered;
use crate::engine::watchdog::{self, Watchdog};
use crate::engine::{Collectives, Engine, EngineConfig, MemKind};
use crate::export::{self, json::RunStatus, table};
use crate::mpi_boot::Mpi;
use crate::placement::{self, dry_run::PlacementReport, preflight::Finding};
use crate::plan::{Direction, Pattern, Plan, Scope};
use crate::report::{self, HostInfo, PairResult, PluginInfo, RunInfo, SizeResult};
use crate::stats;
use crate::topology::Topology;
use nccl_net::{LogLevel, OpenOptions, Plugin, PluginSource};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Exit statuses (documented in the README and `--help`).
pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_WRONG_DATA: i32 = 2;
pub const EXIT_TIMEOUT: i32 = watchdog::EXIT_TIMEOUT;
/// A flag or value tcpx-perf does not accept (`EX_USAGE` of sysexits.h).
pub const EXIT_USAGE: i32 = 64;

/// This process's rank as the launcher announces it, before MPI starts (Open MPI, PMIx, PMI,
/// Slurm); 0 for a process started without a launcher.
pub fn launcher_rank() -> usize {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
        .unwrap_or(0)
}

/// The built-in plugin: tcpx-emu as GPUDirect-TCPX presents itself (only `ncclNetPlugin_v7`
/// exported, so nothing can pick a newer table), by NCCL's file name and by cargo's. The build
/// with every table (v7..v12) is `--plugin tcpxemu`.
pub const EMU_PLUGIN_FILES: [&str; 2] = ["libnccl-net-tcpxemu-v7.so", "libnccl_net_tcpxemu_v7.so"];

enum Fatal {
    /// The flags are invalid (the same on every rank): rank 0 says so once, all exit with
    /// [`EXIT_USAGE`].
    Usage(String),
    /// Every rank reached the same conclusion: rank 0 says it once, all exit.
    Everywhere(String),
    /// Only this rank knows: it says so and ends the job.
    Here(String),
    /// This rank's progress stopped before the -T deadline: ends the job with EXIT_TIMEOUT.
    Stalled(String),
    /// Already reported by the rank that failed (see [`agree`]); every rank exits.
    Reported,
}

/// Runs the benchmark; returns the process exit status.
pub fn run(cli: Cli) -> i32 {
    // Before MPI starts threads (the environment is process-wide): the built-in tcpx-emu behaves
    // as TCPX, which moves no data without NCCL_DYNAMIC_CHUNK_SIZE; give it GKE's value.
    let mut notes = Vec::new();
    if cli.plugin.is_none() && std::env::var_os(contracts::DYNAMIC_CHUNK_ENV).is_none() {
        std::env::set_var(contracts::DYNAMIC_CHUNK_ENV, contracts::DYNAMIC_CHUNK_DEFAULT);
        notes.push(format!(
            "{}={} set for the built-in tcpx-emu (GKE's value for TCPX; it was unset)",
            contracts::DYNAMIC_CHUNK_ENV,
            contracts::DYNAMIC_CHUNK_DEFAULT
        ));
    }
    let mpi = match Mpi::init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("tcpx-perf: error: {e}");
            return EXIT_ERROR;
        }
    };
    let outcome = run_with(&cli, &mpi, notes);
    report_plugin_repeats(mpi.rank());
    match outcome {
        Ok(code) => code,
        Err(Fatal::Usage(msg)) => {
            if mpi.rank() == 0 {
                eprintln!("tcpx-perf: usage error: {msg}");
            }
            exit_together(&mpi, EXIT_USAGE)
        }
        Err(Fatal::Everywhere(msg)) => {
            if mpi.rank() == 0 {
                eprintln!("tcpx-perf: error: {msg}");
            }
            exit_together(&mpi, EXIT_ERROR)
        }
        Err(Fatal::Here(msg)) => {
            eprintln!("tcpx-perf: rank {}: error: {msg}", mpi.rank());
            mpi.abort(EXIT_ERROR)
        }
        Err(Fatal::Stalled(msg)) => {
            eprintln!("tcpx-perf: rank {}: timeout: {msg}", mpi.rank());
            mpi.abort(EXIT_TIMEOUT)
        }
        Err(Fatal::Reported) => exit_together(&mpi, EXIT_ERROR),
    }
}

/// For errors every rank reached together: no rank leaves before the one that explains the error
/// has printed it (mpirun ends the job at the first non-zero exit, cutting off what others had
/// still to say).
fn exit_together(mpi: &Mpi, code: i32) -> i32 {
    use std::io::Write;
    let _ = std::io::stderr().flush();
    mpi.barrier();
    code
}

/// The plugin log lines this rank held back as repeats, with their counts.
fn report_plugin_repeats(rank: usize) {
    for line in nccl_net::logger::suppressed_summary() {
        eprintln!("tcpx-perf: rank {rank}: plugin log repeated: {line}");
    }
}

/// Setup steps every rank runs at the same point: when any rank fails, all learn it, the
/// lowest failing rank says why (once), and every rank exits normally instead of aborting.
fn agree<T>(mpi: &Mpi, local: Result<T, String>) -> Result<T, Fatal> {
    let mut failed = vec![0u64; mpi.size()];
    failed[mpi.rank()] = u64::from(local.is_err());
    mpi.sum_u64(&mut failed);
    let Some(first) = failed.iter().position(|&f| f != 0) else {
        return local.map_err(Fatal::Here);
    };
    let count = failed.iter().filter(|&&f| f != 0).count();
    if let Err(msg) = &local {
        if mpi.rank() == first {
            let others = if count > 1 {
                format!(" (and {} more rank(s))", count - 1)
            } else {
                String::new()
            };
            eprintln!("tcpx-perf: rank {first}{others}: error: {msg}");
        }
    }
    Err(Fatal::Reported)
}

fn plugin_source(cli: &Cli) -> Result<PluginSource, String> {
    if let Some(spec) = &cli.plugin {
        return Ok(if spec.contains('/') {
            PluginSource::Path(spec.into())
        } else {
            PluginSource::Name(spec.clone())
        });
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the tcpx-perf binary: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    EMU_PLUGIN_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .map(PluginSource::Path)
        .ok_or_else(|| {
            format!(
                "the built-in tcpx-emu plugin is not next to the binary ({}/{}); build the workspace with `cargo build --release` or pass --plugin PATH",
                dir.display(),
                EMU_PLUGIN_FILES[0]
            )
        })
}

fn open_plugin(cli: &Cli) -> Result<Arc<Plugin>, String> {
    let options = OpenOptions {
        force_abi: cli.abi,
        log_level: match cli.plugin_log {
            PluginLog::None => LogLevel::None,
            PluginLog::Warn => LogLevel::Warn,
            PluginLog::Info => LogLevel::Info,
            PluginLog::Trace => LogLevel::Trace,
        },
        search_dirs: std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .into_iter()
            .collect(),
    };
    Plugin::open(&plugin_source(cli)?, &options).map_err(|e| e.to_string())
}

fn ptr_support_str(bits: i32) -> String {
    let mut parts = Vec::new();
    for (bit, name) in [
        (nccl_net::abi::NCCL_PTR_HOST, "HOST"),
        (nccl_net::abi::NCCL_PTR_CUDA, "CUDA"),
        (nccl_net::abi::NCCL_PTR_DMABUF, "DMABUF"),
    ] {
        if bits & bit != 0 {
            parts.push(name);
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("|")
    }
}

fn run_with(cli: &Cli, mpi: &Mpi, mut notes: Vec<String>) -> Result<i32, Fatal> {
    let run_start = (CpuTime::now(), std::time::Instant::now());
    // From the first collective on, every wait is bounded: setup (flags, topology, plugin) has
    // -T too; the engine arms its own watchdog per phase.
    let setup = Watchdog::start(|| "  (no comms yet)".to_string(), mpi.rank());
    setup.arm(
        "setup (flags, topology, plugin)",
        Duration::from_secs(cli.timeout.max(1)),
    );
    // Every rank's flags must mean the same before any check made from them: a rank that
    // disagrees would otherwise wait in a collective the others never reach.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let all = mpi.gather_strings(&argv.join("\u{1f}"));
    let argvs: Vec<Vec<String>> = all
        .iter()
        .map(|a| {
            if a.is_empty() {
                Vec::new()
            } else {
                a.split('\u{1f}').map(String::from).collect()
            }
        })
        .collect();
    if let Some(msg) = Cli::disagreement(&argvs) {
        return Err(Fatal::Usage(msg));
    }
    // Every rank now has the same flags, so rank 0 alone reports what is wrong with them.
    cli.validate().map_err(Fatal::Usage)?;
    let start_time = report::now_rfc3339();
    let rank = mpi.rank();
    let topo = mpi.topology(cli.ngpus, cli.ranks_per_node).map_err(Fatal::Everywhere)?;
    let scope = match cli.scope.resolve(topo.nodes) {
        ScopeArg::InterNode => Scope::InterNode,
        _ => Scope::All,
    };
    let pattern: Pattern = cli.pattern;
    let dir: Direction = cli.dir;

    // Plans for every size (pure and identical on every rank).
    let mut plans = Vec::new();
    let mut skipped = Vec::new();
    for size in cli.sizes() {
        let plan = Plan::build(pattern, scope, dir, &topo, size, cli.max_peers).map_err(Fatal::Everywhere)?;
        if plan.is_degenerate(size) {
            skipped.push(size);
        } else {
            plans.push(Arc::new(plan));
        }
    }
    let Some(first) = plans.first() else {
        return Err(Fatal::Everywhere(format!(
            "every size is smaller than the {} endpoints it must be split over; raise -b",
            topo.len()
        )));
    };
    let connections = first.connections();
    let buffer_len = plans
        .iter()
        .flat_map(|p| p.buffer_len.iter().copied())
        .max()
        .unwrap_or(0);

    let plugin = agree(mpi, open_plugin(cli))?;
    if contracts::is_tcpx_like(plugin.name()) {
        let value = std::env::var(contracts::DYNAMIC_CHUNK_ENV).ok();
        if let Some(problem) = contracts::dynamic_chunk_problem(value.as_deref()) {
            return Err(Fatal::Everywhere(problem));
        }
    }
    let limit = contracts::request_limit(plugin.name());
    if cli.window > limit {
        return Err(Fatal::Everywhere(format!(
            "--window {} exceeds the {limit} outstanding requests per comm that plugin '{}' accepts; use --window {limit} or less",
            cli.window,
            plugin.name()
        )));
    }
    let props = agree(mpi, plugin.properties(0).map_err(|e| e.to_string()))?;
    let mem = agree(mpi, resolve_mem(cli.mem, &topo, rank, &props, &mut notes))?;
    let cuda_unpack =
        mem == MemKind::Cuda(CudaPath::Direct) && props.net_device_type == nccl_net::abi::NCCL_NET_DEVICE_UNPACK;
    notes.extend(contracts::check_chunk(cli.chunk, plugin.abi(), &props, cuda_unpack).map_err(Fatal::Everywhere)?);
    let reg_segment = contracts::registration_segment(plugin.abi(), cli.max_reg);
    if mem == MemKind::Cuda(CudaPath::Direct)
        && contracts::prefers_dmabuf(
            &props,
            plugin.has_reg_mr_dma_buf(),
            true,
            std::env::var("NCCL_DMABUF_ENABLE").ok().as_deref(),
        )
    {
        notes.push(
            "GPU memory is registered through DMA-BUF (regMrDmaBuf) where the GPU's driver exports it, as NCCL does; NCCL_DMABUF_ENABLE=0 uses regMr".into(),
        );
    }
    let device_names: Vec<String> = (0..plugin.device_count().unwrap_or(0))
        .filter_map(|d| plugin.properties(d).ok().map(|p| p.name))
        .collect();
    if (first.netbw_factor() - first.busbw_factor()).abs() > 1e-9 {
        notes.push(format!(
            "--scope {scope}: same-node blocks stay off the network; busbw uses alltoall's (n-1)/n as nccl-tests does, results.csv's netbw_gbps counts network bytes alone ({:.3} x algbw)",
            first.netbw_factor()
        ));
    }
    let mut probe = WireProbe::new(&device_names, &topo, rank);
    probe.devmem_required = cuda_unpack && crate::placement::preflight::is_real_tcpx(plugin.name());
    notes.push(format!(
        "bytes checked by: interface counters of {} on every host (a lower bound), unpack descriptor totals{}, plugin-reported sizes where the plugin reports them",
        probe.ifaces().join(","),
        if cuda_unpack { "" } else { " (not in this memory mode)" }
    ));
    if props.ptr_support & nccl_net::abi::NCCL_PTR_HOST == 0 && mem != MemKind::Cuda(CudaPath::Direct) {
        return Err(Fatal::Everywhere(format!(
            "plugin '{}' does not take host memory (ptrSupport {}); use --mem cuda on a GPU host",
            plugin.name(),
            ptr_support_str(props.ptr_support)
        )));
    }
    let sha = report::sha256_file(plugin.path()).unwrap_or_else(|_| "unreadable".into());
    let nccl_prep = agree(mpi, baseline::prepare(cli, &plugin, &props, &topo, rank))?;
    if let Some(p) = &nccl_prep {
        baseline::check_distinct_gpus(mpi, &topo, p).map_err(Fatal::Everywhere)?;
    }

    // Every rank must run exactly this.
    let sizes: Vec<String> = plans.iter().map(|p| p.size.to_string()).collect();
    let fields = [
        ("tool version", report::TOOL_VERSION.to_string()),
        ("pattern", pattern.to_string()),
        ("scope", scope.to_string()),
        ("dir", dir.to_string()),
        ("sizes", sizes.join(",")),
        ("iters", cli.iters.to_string()),
        ("warmup", cli.warmup_iters.to_string()),
        ("check", cli.check.to_string()),
        ("mem", format!("{mem:?}")),
        ("average", cli.average.to_string()),
        ("ngpus", cli.ngpus.to_string()),
        ("chunk", cli.chunk.to_string()),
        ("max-reg", reg_segment.to_string()),
        ("channels", cli.channels.to_string()),
        ("window", cli.window.to_string()),
        ("timeout", cli.timeout.to_string()),
        ("max-peers", format!("{:?}", cli.max_peers)),
        ("net-dev", format!("{:?}", cli.net_dev)),
        ("plugin name", plugin.name().to_string()),
        ("plugin ABI", plugin.abi().to_string()),
        ("plugin sha256", sha.clone()),
        (
            "NCCL baseline",
            nccl_prep.as_ref().map_or("none".into(), |p| p.version().to_string()),
        ),
    ];
    // Placement and preflight: every rank places its endpoints, rank 0 gathers the report.
    let rank_plan = agree(
        mpi,
        place_rank(
            cli,
            &topo,
            rank,
            &connections,
            &plugin,
            &sha,
            mem == MemKind::Cuda(CudaPath::Direct),
        ),
    )?;
    notes.extend(rank_plan.notes.iter().cloned());
    let same_plan = mpi.check_same_plan(&fields);
    let mut placement = gather_placement(mpi, &rank_plan.report);
    if cli.dry_run {
        if let Err(e) = same_plan {
            placement.findings.insert(
                0,
                placement::dry_run::NodeFinding {
                    level: placement::preflight::Level::Error,
                    text: e,
                    hosts: vec![topo.hostnames[0].clone()],
                },
            );
        }
        return Ok(dry_run_report(mpi, &topo, &plugin, &sha, &placement, &notes));
    }
    same_plan.map_err(Fatal::Everywhere)?;

    let mut info = run_info(
        cli,
        mpi,
        &topo,
        &plugin,
        &props,
        &sha,
        (pattern, scope, dir, mem),
        start_time,
    );
    info.notes = notes;
    info.placement = placement;
    info.nccl = nccl_prep.as_ref().map(|p| p.info().clone());
    let out_dir = (!cli.no_out).then(|| {
        cli.out
            .clone()
            .unwrap_or_else(|| export::default_out_dir(pattern.as_str()))
    });
    if rank == 0 {
        if let Some(dir) = &out_dir {
            export::prepare_out_dir(dir).map_err(|e| Fatal::Here(e.to_string()))?;
        }
        print!("{}", table::header(&info));
        for s in &skipped {
            println!("# skipped size {s}: smaller than one byte per endpoint");
        }
    }

    let config = EngineConfig {
        mem,
        channels: cli.channels,
        window: cli.window,
        chunk: cli.chunk,
        timeout: Duration::from_secs(cli.timeout),
        setup_threads: cli
            .setup_threads
            .unwrap_or(if contracts::is_tcpx_like(plugin.name()) { 64 } else { 1 }),
        reg_segment,
        poll: cli.poll,
    };
    setup.disarm();
    let setup_start = std::time::Instant::now();
    let engine = agree(
        mpi,
        Engine::start(
            plugin.clone(),
            topo.clone(),
            connections,
            config,
            rank,
            rank_plan.endpoints,
        ),
    )?;
    let timing = engine.connect(mpi, buffer_len).map_err(Fatal::Here)?;
    // The slowest rank's setup, from starting its workers to its last comm.
    let all = mpi.gather_f64(&[
        setup_start.elapsed().as_secs_f64(),
        timing.connect.as_secs_f64(),
        timing.threads as f64,
    ]);
    let max = |i: usize| all.iter().skip(i).step_by(3).copied().fold(0.0, f64::max);
    let setup_report = placement::dry_run::SetupReport {
        seconds: max(0),
        connect_seconds: max(1),
        comms: info.placement.comms,
        sockets_per_node: std::mem::take(&mut info.placement.sockets_per_node),
        max_setup_threads: max(2) as usize,
    };
    if rank == 0 {
        print!("{}", setup_report.line());
    }
    info.placement.setup = Some(setup_report);
    let mut nccl = match nccl_prep {
        Some(p) => Some(agree(
            mpi,
            NcclBaseline::start(p, mpi, &plans, Duration::from_secs(cli.timeout)),
        )?),
        None => None,
    };
    if let (0, Some(b)) = (rank, &nccl) {
        print!("{}", b.header_lines());
    }

    let progress = progress_bar(cli, rank, plans.len() * (cli.iters + cli.warmup_iters));
    let mut results = Vec::new();
    let mut pattern_iter: u32 = 0;
    let mut failure = None;
    for plan in &plans {
        let started = std::time::Instant::now();
        let measured = measure(
            cli,
            mpi,
            &engine,
            &topo,
            &probe,
            plan,
            &mut pattern_iter,
            progress.as_ref(),
        );
        // --baseline nccl: NCCL's figures of this size, right after tcpx-perf's.
        let measured = match (measured, nccl.as_mut()) {
            (Ok(mut r), Some(b)) => b
                .measure(cli, mpi, plan, r.busbw_gbps, started)
                .map_err(Fatal::Here)
                .map(|f| {
                    r.nccl = Some(f);
                    r
                }),
            (m, _) => m,
        };
        match measured {
            Ok(r) => {
                if rank == 0 {
                    let line = table::row(&r);
                    match &progress {
                        Some(bar) => bar.println(line.trim_end()),
                        None => println!("{}", line.trim_end()),
                    }
                }
                results.push(r);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    if let Some(b) = &nccl {
        info.nccl = Some(b.info().clone());
    }
    if let Some(fatal) = failure {
        // Rows measured so far are kept, under a summary that says the run failed and why.
        let msg = match &fatal {
            Fatal::Usage(m) | Fatal::Everywhere(m) | Fatal::Here(m) | Fatal::Stalled(m) => m.clone(),
            Fatal::Reported => "see the error printed by the failing rank".to_string(),
        };
        if rank == 0 {
            if let Some(dir) = &out_dir {
                let _ = export::write_results(dir, &info, &results, RunStatus::Failed(msg));
            }
        }
        if matches!(fatal, Fatal::Everywhere(_)) {
            let _ = engine.close(mpi);
        }
        return Err(fatal);
    }
    if let Some(b) = nccl.take() {
        info.nccl = Some(b.finish().map_err(Fatal::Here)?);
    }
    engine.close(mpi).map_err(Fatal::Here)?;
    // The whole run's CPU cost (setup, warm-up, checks and every size) per every network byte
    // it moved, warm-up included.
    let moved = plans
        .iter()
        .map(|p| p.network_bytes() * (cli.iters + cli.warmup_iters) as u64)
        .sum();
    let mine = CpuCost::local(CpuTime::now().since(run_start.0), run_start.1.elapsed().as_secs_f64());
    info.cpu = Some(CpuCost::from_ranks(&mpi.gather_f64(&mine), moved));

    let wrong = export::wrong_total(&results).unwrap_or(0);
    let status = if wrong > 0 { RunStatus::WrongData } else { RunStatus::Ok };
    if rank == 0 {
        print!("{}", table::footer(&results));
        print!("{}", table::cpu_footer(&results, info.cpu.as_ref()));
        if let Some(dir) = &out_dir {
            export::write_results(dir, &info, &results, status.clone()).map_err(|e| Fatal::Here(e.to_string()))?;
            println!("# Results written to {}", dir.display());
        }
    }
    Ok(if wrong > 0 { EXIT_WRONG_DATA } else { EXIT_OK })
}

/// This rank's placement: its endpoints' NICs and CPUs, and its preflight findings.
fn place_rank(
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
fn gather_placement(mpi: &Mpi, mine: &placement::dry_run::RankReport) -> PlacementReport {
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
fn dry_run_report(
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

/// Picks host or CUDA memory (`--mem`) and, for CUDA, how buffers reach the plugin.
fn resolve_mem(
    choice: Mem,
    topo: &Topology,
    rank: usize,
    props: &nccl_net::Properties,
    notes: &mut Vec<String>,
) -> Result<MemKind, String> {
    let want_cuda = match choice {
        Mem::Host => return Ok(MemKind::Host),
        Mem::Cuda => true,
        Mem::Auto => false,
    };
    if let Some(why) = contracts::cuda_unreachable(props) {
        if want_cuda {
            return Err(format!("--mem cuda: {why}; use --mem host"));
        }
        notes.push(format!("--mem auto chose host memory: {why}"));
        return Ok(MemKind::Host);
    }
    let gpus = match tcpx_gpu::Gpu::probe() {
        Ok(Some(info)) if info.count() > 0 => info.count(),
        Ok(_) if !want_cuda => return Ok(MemKind::Host),
        Err(_) if !want_cuda => return Ok(MemKind::Host),
        Ok(_) => return Err("--mem cuda: this host has no CUDA driver or no visible GPU; use --mem host".into()),
        Err(e) => return Err(format!("--mem cuda: {e}; use --mem host")),
    };
    for e in topo.endpoints_of(rank) {
        let gpu = topo.endpoints[e].gpu;
        if gpu >= gpus {
            return Err(format!(
                "endpoint {e} needs GPU {gpu} but {gpus} GPU(s) are visible (CUDA_VISIBLE_DEVICES); launch fewer ranks per node, lower -g, or use --mem host"
            ));
        }
    }
    let direct = props.ptr_support & nccl_net::abi::NCCL_PTR_CUDA != 0;
    Ok(MemKind::Cuda(if direct { CudaPath::Direct } else { CudaPath::Staged }))
}

/// The header's description of the data path that ran.
fn mem_path(mem: MemKind, props: &nccl_net::Properties) -> String {
    match mem {
        MemKind::Host => "host memory (NCCL_PTR_HOST), received straight into the user buffer".into(),
        MemKind::Cuda(CudaPath::Staged) => {
            "CUDA memory staged through pinned host memory by tcpx-perf (the plugin has no NCCL_PTR_CUDA)".into()
        }
        MemKind::Cuda(CudaPath::Direct) if props.net_device_type == nccl_net::abi::NCCL_NET_DEVICE_UNPACK => {
            "CUDA memory registered as NCCL_PTR_CUDA; receives land in the plugin's bounce buffer and are gathered by the device-unpack kernel (batched; irecvConsumed after the kernel)".into()
        }
        MemKind::Cuda(CudaPath::Direct) => "CUDA memory registered as NCCL_PTR_CUDA (the plugin writes device memory)".into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_info(
    cli: &Cli,
    mpi: &Mpi,
    topo: &Topology,
    plugin: &Plugin,
    props: &nccl_net::Properties,
    sha: &str,
    (pattern, scope, dir, mem): (Pattern, Scope, Direction, MemKind),
    start_time: String,
) -> RunInfo {
    let hosts = (0..topo.ranks())
        .map(|r| HostInfo {
            rank: r,
            hostname: topo.hostnames[r].clone(),
            node: topo.endpoints[topo.endpoints_of(r).start].node,
            gpus: topo.endpoints_of(r).map(|e| topo.endpoints[e].gpu).collect(),
        })
        .collect();
    let device_type = match props.net_device_type {
        nccl_net::abi::NCCL_NET_DEVICE_HOST => "host".to_string(),
        nccl_net::abi::NCCL_NET_DEVICE_UNPACK => format!("unpack (version {})", props.net_device_version),
        other => format!("type {other}"),
    };
    RunInfo {
        tool_version: report::TOOL_VERSION.into(),
        git_commit: report::git_commit(),
        command: std::env::args().collect(),
        start_time,
        pattern: pattern.to_string(),
        scope: scope.to_string(),
        dir: dir.to_string(),
        mem: if mem == MemKind::Host { "host" } else { "cuda" }.into(),
        mem_path: mem_path(mem, props),
        ranks: mpi.size(),
        endpoints: topo.len(),
        nodes: topo.nodes,
        gpus_per_rank: cli.ngpus,
        hosts,
        plugin: PluginInfo {
            path: plugin.path().display().to_string(),
            sha256: sha.into(),
            name: plugin.name().into(),
            abi: plugin.abi(),
            ptr_support: ptr_support_str(props.ptr_support),
            device_type,
            devices: plugin.device_count().unwrap_or(0),
        },
        mpi_library: Mpi::library_version(),
        env: report::allowed_env(),
        config: cli.config_json(),
        iters: cli.iters,
        warmup: cli.warmup_iters,
        check: cli.check_enabled(),
        time_reduction: cli.average.to_string(),
        chunk: cli.chunk,
        channels: cli.channels,
        window: cli.window,
        notes: Vec::new(),
        placement: PlacementReport::default(),
        cpu: None,
        nccl: None,
    }
}

fn progress_bar(cli: &Cli, rank: usize, total: usize) -> Option<indicatif::ProgressBar> {
    if rank != 0 || !cli.progress_enabled(std::io::stderr().is_terminal()) {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} iterations {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Measures one size: warm-up, timed iterations with the data check, reductions over ranks.
#[allow(clippy::too_many_arguments)]
fn measure(
    cli: &Cli,
    mpi: &Mpi,
    engine: &Engine,
    topo: &Topology,
    probe: &WireProbe,
    plan: &Arc<Plan>,
    pattern_iter: &mut u32,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<SizeResult, Fatal> {
    let check = cli.check_enabled();
    engine.prepare(plan.clone()).map_err(Fatal::Here)?;
    if let Some(bar) = progress {
        bar.set_message(format!("size {}", crate::cli::format_size(plan.size)));
    }
    let mut times = Vec::with_capacity(cli.iters);
    let mut delivered = Delivered::default();
    let mut peers_in_flight = [0.0f64; 2];
    let (mut cpu, mut cpu_window) = (crate::cputime::CpuTime::default(), 0.0f64);
    let mut wire_before = None;
    let mut wrong = 0u64;
    for i in 0..cli.warmup_iters + cli.iters {
        let timed = i >= cli.warmup_iters;
        if i == cli.warmup_iters {
            wire_before = Some(probe.snapshot());
        }
        *pattern_iter = pattern_iter.wrapping_add(1);
        if check || i == 0 {
            engine.fill(*pattern_iter).map_err(Fatal::Here)?;
        }
        let it = engine.run(mpi, timed).map_err(|e| {
            if engine.shared().stalled.load(std::sync::atomic::Ordering::Relaxed) {
                Fatal::Stalled(e)
            } else {
                Fatal::Here(e)
            }
        })?;
        if timed {
            times.push(it.elapsed.as_secs_f64() * 1e6);
            delivered.add(&it.delivered);
            peers_in_flight[0] = peers_in_flight[0].max(it.peers_in_flight.0 as f64);
            peers_in_flight[1] = peers_in_flight[1].max(it.peers_in_flight.1 as f64);
            cpu.add(it.cpu);
            cpu_window += it.window.as_secs_f64();
            if check {
                wrong += engine.verify(*pattern_iter).map_err(Fatal::Here)?;
            }
        }
        if let Some(bar) = progress {
            bar.inc(1);
        }
    }

    // Reductions over ranks.
    let all = mpi.gather_f64(&times);
    let ranks = mpi.size();
    let samples_us: Vec<f64> = (0..cli.iters)
        .map(|i| {
            let per_rank: Vec<f64> = (0..ranks).map(|r| all[r * cli.iters + i]).collect();
            stats::reduce(&per_rank, cli.average)
        })
        .collect();
    let wire_after = probe.snapshot();
    let everyone = mpi.gather_f64(&peers_in_flight);
    let peer_max = |k: usize| everyone.iter().skip(k).step_by(2).fold(0.0f64, |a, &b| a.max(b)) as u32;
    let peers_in_flight = (peer_max(0), peer_max(1));
    let cpu = CpuCost::from_ranks(
        &mpi.gather_f64(&CpuCost::local(cpu, cpu_window)),
        plan.network_bytes() * cli.iters as u64,
    );
    let mut counters = [wrong];
    mpi.sum_u64(&mut counters);
    let [wrong] = counters;
    let mut sums = delivered.to_array();
    mpi.sum_u64(&mut sums);
    let delivered = Delivered::from_array(sums);
    let wire = probe.exchange(
        mpi,
        topo,
        &wire_before.expect("at least one timed iteration"),
        &wire_after,
    );
    let mut flow_sums = vec![0.0; plan.flows.len()];
    for totals in engine.totals().map_err(Fatal::Here)? {
        for (flow, sum) in totals.flow_time_sum {
            flow_sums[flow as usize] += sum;
        }
    }
    mpi.sum_f64(&mut flow_sums);

    let bytes = delivery::check(plan, topo, cli.iters as u64, &delivered, wire).map_err(Fatal::Everywhere)?;
    if probe.devmem_required {
        let errors = bytes.devmem_errors();
        if !errors.is_empty() {
            return Err(Fatal::Everywhere(format!("size {}: {}", plan.size, errors.join("; "))));
        }
    }
    let stats = stats::summarize(&samples_us);
    // nccl-tests' -a: each rank's mean time over the iterations, then reduced over ranks.
    let rank_means: Vec<f64> = all
        .chunks(cli.iters)
        .map(|t| t.iter().sum::<f64>() / t.len() as f64)
        .collect();
    let time_us = stats::reduce(&rank_means, cli.average);
    let algbw = report::gbps(plan.size, time_us);
    let factor = plan.busbw_factor();
    let netbw = algbw * plan.netbw_factor();
    let pairs = pair_results(plan, topo, &flow_sums, cli.iters);
    Ok(SizeResult {
        size_bytes: plan.size,
        count: plan.size / 4,
        iters: cli.iters,
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * factor,
        wrong: check.then_some(wrong),
        stats,
        bytes_planned: plan.network_bytes(),
        bytes,
        samples_us,
        busbw_factor: factor,
        netbw_gbps: netbw,
        peers_in_flight,
        cpu,
        rank_samples_us: all,
        pairs,
        nccl: None,
    })
}

/// The link matrix: per directed network pair, bytes per iteration and the receiver's mean time.
fn pair_results(plan: &Plan, topo: &Topology, flow_sums: &[f64], iters: usize) -> Vec<PairResult> {
    let mut pairs: Vec<((usize, usize), u64, f64)> = Vec::new();
    for (i, f) in plan.flows.iter().enumerate().filter(|(_, f)| !f.is_local()) {
        let time = flow_sums[i] / iters as f64;
        match pairs.iter_mut().find(|p| p.0 == (f.src, f.dst)) {
            Some(p) => {
                p.1 += f.len;
                p.2 = p.2.max(time);
            }
            None => pairs.push(((f.src, f.dst), f.len, time)),
        }
    }
    pairs
        .into_iter()
        .map(|((src, dst), bytes, secs)| {
            let (s, d) = (&topo.endpoints[src], &topo.endpoints[dst]);
            let time_us = secs * 1e6;
            PairResult {
                src_rank: s.rank,
                src_gpu: s.gpu,
                src_host: topo.hostnames[s.rank].clone(),
                dst_rank: d.rank,
                dst_gpu: d.gpu,
                dst_host: topo.hostnames[d.rank].clone(),
                bytes,
                time_us,
                gbps: report::gbps(bytes, time_us),
            }
        })
        .collect()
}
