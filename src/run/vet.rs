//! The vet-plugin phase: the plugin a run uses, checked against the settings before any comm
//! exists (its request and chunk limits, the memory path, TCPX's environment), and the run's
//! description for the header and summary.

use super::settings::{PluginSettings, Settings};
use super::{agree, Fatal, Job, EMU_PLUGIN_FILES};
use crate::baseline;
use crate::cli::Mem;
use crate::collectives::Collectives;
use crate::contracts;
use crate::delivery::WireProbe;
use crate::engine::gpu::CudaPath;
use crate::engine::MemKind;
use crate::mpi_boot::Mpi;
use crate::placement::dry_run::PlacementReport;
use crate::report::{self, HostInfo, PluginInfo, RunInfo, RunSettings};
use crate::topology::Topology;
use nccl_net::{OpenOptions, Plugin, PluginSource};
use std::path::Path;
use std::sync::Arc;

/// What vetting the plugin established: the plugin and the facts every later phase uses.
pub(super) struct Vetted {
    pub plugin: Arc<Plugin>,
    /// Device 0's properties.
    pub props: nccl_net::Properties,
    pub sha256: String,
    pub probe: WireProbe,
    /// What the connect phase consumes.
    pub resources: Resources,
}

/// The vetted choices the connect phase turns into the engine and the baseline.
pub(super) struct Resources {
    pub plugin: Arc<Plugin>,
    pub mem: MemKind,
    /// Largest single registration (the ABI's and `--max-reg`'s).
    pub reg_segment: u64,
    /// `--baseline nccl` prepared on this rank.
    pub nccl: Option<baseline::Prepared>,
}

impl Vetted {
    pub fn mem(&self) -> MemKind {
        self.resources.mem
    }
}

/// Opens the plugin and checks it against the settings; notes for the header go to `notes`.
pub(super) fn vet_plugin(settings: &Settings, mpi: &Mpi, job: &Job, notes: &mut Vec<String>) -> Result<Vetted, Fatal> {
    let (topo, rank) = (&job.topo, mpi.rank());
    let transport = &settings.transport;
    let plugin = agree(mpi, open_plugin(&settings.plugin))?;
    crate::trace::trace("plugin opened");
    check_limits(&plugin, transport.window)?;
    let props = agree(mpi, plugin.properties(0).map_err(|e| e.to_string()))?;
    let mem = agree(mpi, resolve_mem(transport.mem, topo, rank, &props, notes))?;
    let direct = mem == MemKind::Cuda(CudaPath::Direct);
    let cuda_unpack = direct && props.net_device_type == nccl_net::abi::NCCL_NET_DEVICE_UNPACK;
    notes
        .extend(contracts::check_chunk(transport.chunk, plugin.abi(), &props, cuda_unpack).map_err(Fatal::Everywhere)?);
    let reg_segment = contracts::registration_segment(plugin.abi(), transport.max_reg);
    if direct
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
    let first = &job.plans[0];
    if (first.netbw_factor() - first.busbw_factor()).abs() > 1e-9 {
        notes.push(format!(
            "--scope {}: same-node blocks stay off the network; busbw uses alltoall's (n-1)/n as nccl-tests does, results.csv's netbw_gbps counts network bytes alone ({:.3} x algbw)",
            job.scope,
            first.netbw_factor()
        ));
    }
    let mut probe = WireProbe::new(&device_names, topo, rank);
    probe.devmem_required = cuda_unpack && crate::placement::preflight::is_real_tcpx(plugin.name());
    notes.push(format!(
        "bytes checked by: {}interface counters of {} on every host (a lower bound: other traffic inflates them), the plugin's own unpack descriptor totals{} and reported sizes where it reports them (its claims, not witnesses)",
        if settings.iterations.check { "the data check (-c 1, every byte), " } else { "no data check (-c 0: sizes are unverified), " },
        probe.ifaces().join(","),
        if cuda_unpack { "" } else { " (not in this memory mode)" }
    ));
    if props.ptr_support & nccl_net::abi::NCCL_PTR_HOST == 0 && !direct {
        return Err(Fatal::Everywhere(format!(
            "plugin '{}' does not take host memory (ptrSupport {}); use --mem cuda on a GPU host",
            plugin.name(),
            ptr_support_str(props.ptr_support)
        )));
    }
    let sha256 = report::sha256_file(plugin.path()).unwrap_or_else(|_| "unreadable".into());
    let mut nccl = agree(
        mpi,
        baseline::prepare(settings.baseline.as_ref(), &plugin, &props, topo, rank),
    )?;
    if let Some(p) = &nccl {
        baseline::check_distinct_gpus(mpi, topo, p).map_err(Fatal::Everywhere)?;
    }
    if let Some(p) = nccl.as_mut() {
        p.compare_with(&job.plans[0], topo);
    }
    Ok(Vetted {
        resources: Resources {
            plugin: plugin.clone(),
            mem,
            reg_segment,
            nccl,
        },
        plugin,
        props,
        sha256,
        probe,
    })
}

/// The plugin's own limits that flags could break: TCPX's environment and its requests per comm.
fn check_limits(plugin: &Plugin, window: usize) -> Result<(), Fatal> {
    if contracts::is_tcpx_like(plugin.name()) {
        let value = std::env::var(contracts::DYNAMIC_CHUNK_ENV).ok();
        if let Some(problem) = contracts::dynamic_chunk_problem(value.as_deref()) {
            return Err(Fatal::Everywhere(problem));
        }
    }
    let limit = contracts::request_limit(plugin.name());
    if window > limit {
        return Err(Fatal::Everywhere(format!(
            "--window {window} exceeds the {limit} outstanding requests per comm that plugin '{}' accepts; use --window {limit} or less",
            plugin.name()
        )));
    }
    Ok(())
}

pub(super) fn plugin_source(settings: &PluginSettings) -> Result<PluginSource, String> {
    if let Some(spec) = &settings.spec {
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

/// How `--plugin`, `--abi` and `--plugin-log` open a plugin: names are looked up next to the
/// binary first.
pub(super) fn open_options(settings: &PluginSettings) -> OpenOptions {
    OpenOptions {
        force_abi: settings.force_abi,
        log_level: settings.log_level,
        search_dirs: std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .into_iter()
            .collect(),
    }
}

pub(super) fn open_plugin(settings: &PluginSettings) -> Result<Arc<Plugin>, String> {
    Plugin::open(&plugin_source(settings)?, &open_options(settings)).map_err(|e| e.to_string())
}

pub(super) fn ptr_support_str(bits: i32) -> String {
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

/// Picks host or CUDA memory (`--mem`) and, for CUDA, how buffers reach the plugin.
pub(super) fn resolve_mem(
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
        Ok(_) | Err(_) if !want_cuda => return Ok(MemKind::Host),
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

/// The run's description for the header and summary.json (placement and notes are added by
/// the place phase).
pub(super) fn run_info(settings: &Settings, job: &Job, vetted: &Vetted, start_time: String) -> RunInfo {
    let (topo, plugin, props) = (&job.topo, &vetted.plugin, &vetted.props);
    let mem = vetted.mem();
    let hosts = hosts_of(topo);
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
        settings: run_settings(
            settings,
            topo,
            job.scope.to_string(),
            if mem == MemKind::Host { "host" } else { "cuda" },
            mem_path(mem, props),
        ),
        hosts,
        plugin: PluginInfo {
            path: plugin.path().display().to_string(),
            sha256: vetted.sha256.clone(),
            name: plugin.name().into(),
            abi: plugin.abi(),
            ptr_support: ptr_support_str(props.ptr_support),
            device_type,
            devices: plugin.device_count().unwrap_or(0),
        },
        mpi_library: Mpi::library_version(),
        env: report::allowed_env(),
        config: settings.flags.clone(),
        notes: Vec::new(),
        placement: PlacementReport::default(),
        force: settings.force,
        cpu: None,
        nccl: None,
        bandwidth_gate: None,
        slow_nics: Vec::new(),
        node_verdicts: Vec::new(),
        probe: None,
    }
}

/// The run's settings as summary.json records them: the flags as this job took them, the shape
/// of `topo`, the scope as decided for it and the memory's kind and path.
pub(crate) fn run_settings(
    settings: &Settings,
    topo: &Topology,
    scope: String,
    mem: &str,
    mem_path: String,
) -> RunSettings {
    let (sweep, it, tr) = (&settings.sweep, &settings.iterations, &settings.transport);
    RunSettings {
        pattern: sweep.pattern.to_string(),
        scope,
        dir: sweep.dir.to_string(),
        mem: mem.into(),
        mem_path,
        ranks: topo.ranks(),
        endpoints: topo.len(),
        nodes: topo.nodes,
        gpus_per_rank: topo.gpus_per_rank,
        iters: it.iters,
        warmup: it.warmup,
        check: it.check,
        time_reduction: it.average.to_string(),
        chunk: tr.chunk,
        channels: tr.channels,
        window: tr.window,
        connect: match tr.connect {
            crate::cli::ConnectMode::All => "all",
            crate::cli::ConnectMode::Rounds => "rounds",
        }
        .into(),
        timing: it.timing.name().into(),
    }
}

/// Every rank's host, node and GPUs as summary.json's `hosts` lists them.
pub(crate) fn hosts_of(topo: &Topology) -> Vec<HostInfo> {
    (0..topo.ranks())
        .map(|r| HostInfo {
            rank: r,
            hostname: topo.hostnames[r].clone(),
            node: topo.endpoints[topo.endpoints_of(r).start].node,
            gpus: topo.endpoints_of(r).map(|e| topo.endpoints[e].gpu).collect(),
        })
        .collect()
}
