//! The plugin and the memory a run uses, and the run's description for the header and summary.

use super::*;

pub(super) fn plugin_source(cli: &Cli) -> Result<PluginSource, String> {
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

pub(super) fn open_plugin(cli: &Cli) -> Result<Arc<Plugin>, String> {
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
pub(super) fn run_info(
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
