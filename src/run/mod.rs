//! One benchmark run, from parsed flags to the result directory.
//!
//! Order of business: MPI and the topology; the plan for every size (identical on every rank);
//! the plugin; the check that all ranks agree on all of it; connections; the sweep; the report.
//! Errors that every rank hits identically (a plan that cannot work) are printed once by rank 0;
//! errors of one rank (a plugin that fails to load there) are printed by that rank, which then
//! ends the whole job so that no other rank waits for it.

use crate::baseline::{self, NcclBaseline};
use crate::cli::{Cli, Mem, PluginLog, Scope as ScopeArg};
use crate::collectives::Collectives;
use crate::contracts;
use crate::cputime::{CpuCost, CpuTime};
use crate::delivery::{self, WireProbe};
use crate::engine::gpu::CudaPath;
use crate::engine::progress::Delivered;
use crate::engine::watchdog::{self, Watchdog};
use crate::engine::{Engine, EngineConfig, MemKind};
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

mod measure;
mod place;
mod plugin;
use measure::{measure, progress_bar};
use place::{dry_run_report, gather_placement, place_rank};
use plugin::{open_plugin, ptr_support_str, resolve_mem, run_info};

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
