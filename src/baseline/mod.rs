//! `--baseline nccl`: NCCL itself, in the same job, on the same GPUs and through the same net
//! plugin, measured size by size beside tcpx-perf.
//!
//! A fixed baseline figure measured elsewhere cannot tell a regression from a slower machine
//! (our hosts differ by 10-40% from one loan to the next). After tcpx-perf has measured a size,
//! the same ranks run NCCL's equivalent operation ([`ops`]) on the same GPUs, with NCCL loading
//! the plugin file tcpx-perf loaded (`NCCL_NET_PLUGIN`, `NCCL_NET`) and NVLink P2P, shared
//! memory, NVLS and CollNet off, so every byte between GPUs goes through the plugin. NCCL's own
//! log (read back from `NCCL_DEBUG_FILE`) must say that it loaded and used that plugin, or the
//! run fails. Order per size: tcpx-perf, then NCCL (A B A B ...: drift hits both alike).
//!
//! Two timings per size, both reported: tcpx-perf's (an MPI barrier before every iteration, the
//! clock from the enqueue to the last stream's completion; the figure the ratio uses) and
//! nccl-tests' (CUDA events around `-n` operations back to back).
//!
//! Layers: [`nccl_sys`] (the C API, `dlopen`ed), [`nccl`] (communicators, buffers, timings),
//! [`ops`] (pattern to NCCL calls), this module (flags, environment, the plugin proof, the
//! figures).

#[cfg(test)]
mod export_tests;
pub mod nccl;
pub mod nccl_sys;
pub mod ops;

use crate::engine::watchdog::Watchdog;
use crate::mpi_boot::Mpi;
use crate::plan::{Iterations, Plan};
use crate::report::{Block, NcclFigures, NcclInfo};
use crate::stats;
use crate::topology::Topology;
use nccl::{RankTimes, Session};
use nccl_sys::NcclLib;
use ops::EndpointOp;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcpx_units::TimeReduction;

use crate::collectives::Collectives;

/// `--baseline nccl`'s settings, typed once from the flags by `crate::run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaselineSettings {
    /// libnccl.so.2 to load (`--nccl-lib`); `None`: the dynamic loader's search.
    pub nccl_lib: Option<std::path::PathBuf>,
}

/// NCCL settings forced for the baseline: the plugin's path and name come from the loaded
/// plugin; these keep every byte on the plugin.
const FORCED: [(&str, &str); 4] = [
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_SHM_DISABLE", "1"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NCCL_COLLNET_ENABLE", "0"),
];

/// What [`prepare`] found on this rank: NCCL is loadable and every endpoint has a GPU.
pub struct Prepared {
    lib: Arc<NcclLib>,
    gpus: Vec<(usize, usize, String)>,
    info: NcclInfo,
    plugin_name: String,
}

impl Prepared {
    /// The NCCL version, for the check that every rank runs the same plan.
    pub fn version(&self) -> &str {
        &self.info.version
    }

    /// What to put in `RunInfo` before the header is printed.
    pub fn info(&self) -> &NcclInfo {
        &self.info
    }

    /// Notes where NCCL's operation moves other traffic than `plan` on `topo` (the ring at
    /// `--scope inter-node`: [`ops::ring_note`]), for the header and summary.json.
    pub fn compare_with(&mut self, plan: &Plan, topo: &Topology) {
        self.info.baseline_note = ops::ring_note(plan, topo);
    }
}

/// This rank's preparation: sets NCCL's environment (before any NCCL call reads it), loads
/// NCCL, and finds the GPU of every local endpoint. `None` without `--baseline`.
pub fn prepare(
    settings: Option<&BaselineSettings>,
    plugin: &nccl_net::Plugin,
    props: &nccl_net::Properties,
    topo: &Topology,
    rank: usize,
) -> Result<Option<Prepared>, String> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    let log_file = std::env::temp_dir().join(format!("tcpx-perf-nccl-{}.log", std::process::id()));
    let mut env: Vec<(String, String)> = vec![
        ("NCCL_NET_PLUGIN".into(), plugin.path().display().to_string()),
        ("NCCL_NET".into(), plugin.name().to_string()),
    ];
    env.extend(FORCED.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.push(("NCCL_DEBUG".into(), "INFO".into()));
    env.push(("NCCL_DEBUG_SUBSYS".into(), "INIT,NET".into()));
    env.push(("NCCL_DEBUG_FILE".into(), log_file.display().to_string()));
    // Defaults that only apply when the user left them unset.
    let mut defaults = Vec::new();
    if plugin.name().starts_with("tcpx-emu") {
        // lo has no PCI path: without this NCCL would stage receives through host memory and
        // never use the plugin's device-unpack path that tcpx-perf drives.
        defaults.push(("NCCL_NET_GDR_LEVEL", "SYS"));
    }
    if props.net_device_type == nccl_net::abi::NCCL_NET_DEVICE_UNPACK {
        // Device unpack works with NCCL's Simple protocol (as the TCPX deployments set it).
        defaults.push(("NCCL_PROTO", "Simple"));
    }
    for (k, v) in defaults {
        if std::env::var_os(k).is_none() {
            env.push((k.into(), v.into()));
        }
    }
    let mut replaced = Vec::new();
    for (k, v) in &env {
        if let Ok(old) = std::env::var(k) {
            if &old != v {
                replaced.push(format!("{k}={old}"));
            }
        }
        // The environment is read by NCCL at its first call, after this; tcpx-perf's own
        // threads do not read it concurrently (the engine has not started).
        std::env::set_var(k, v);
    }
    let lib = Arc::new(NcclLib::open(settings.nccl_lib.as_deref())?);
    let probe = tcpx_gpu::Gpu::probe().map_err(|e| format!("--baseline nccl: {e}"))?;
    let Some(found) = probe.filter(|g| g.count() > 0) else {
        return Err("--baseline nccl runs NCCL on a GPU per endpoint, and this host has no CUDA driver or no visible GPU: run on a GPU host or drop --baseline".into());
    };
    let mut gpus = Vec::new();
    for e in topo.endpoints_of(rank) {
        let ordinal = topo.endpoints[e].gpu;
        let Some(dev) = found.devices.get(ordinal) else {
            return Err(format!(
                "--baseline nccl: endpoint {e} needs GPU {ordinal} but {} GPU(s) are visible: launch one endpoint per visible GPU",
                found.count()
            ));
        };
        gpus.push((e, ordinal, dev.pci_bus_id.clone()));
    }
    Ok(Some(Prepared {
        info: NcclInfo {
            library: lib.path().display().to_string(),
            version: lib.version_string(),
            env,
            env_replaced: replaced,
            log_file: log_file.display().to_string(),
            ..NcclInfo::default()
        },
        lib,
        gpus,
        plugin_name: plugin.name().to_string(),
    }))
}

/// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU"): a clear error
/// before it does. `buses[r]` lists rank r's endpoints' PCI bus ids.
pub fn duplicate_gpu(topo: &Topology, buses: &[Vec<String>]) -> Option<String> {
    let mut seen: Vec<(&str, &str, usize)> = Vec::new();
    for (rank, list) in buses.iter().enumerate() {
        let host = topo.hostnames.get(rank).map_or("?", String::as_str);
        for (i, bus) in list.iter().enumerate() {
            let e = topo.endpoints_of(rank).start + i;
            if let Some(&(_, _, other)) = seen.iter().find(|(h, b, _)| *h == host && *b == bus.as_str()) {
                return Some(format!(
                    "--baseline nccl: endpoints {other} and {e} both use GPU {bus} on host {host}, and NCCL refuses two ranks of one communicator on one GPU (\"Duplicate GPU\"): run one endpoint per GPU (fewer ranks per node or a lower -g) or drop --baseline"
                ));
            }
            seen.push((host, bus, e));
        }
    }
    None
}

/// Gathers every rank's GPUs and refuses a job that puts two endpoints on one GPU.
pub fn check_distinct_gpus(mpi: &Mpi, topo: &Topology, prep: &Prepared) -> Result<(), String> {
    let mine: Vec<&str> = prep.gpus.iter().map(|(_, _, b)| b.as_str()).collect();
    let all = mpi.gather_strings(&mine.join(","));
    let buses: Vec<Vec<String>> = all
        .iter()
        .map(|s| s.split(',').filter(|b| !b.is_empty()).map(String::from).collect())
        .collect();
    duplicate_gpu(topo, &buses).map_or(Ok(()), Err)
}

/// The lines of NCCL's log that prove it ran on the plugin `name`; an error naming what is
/// missing otherwise.
pub fn plugin_evidence(log: &str, name: &str) -> Result<Vec<String>, String> {
    let find = |needle: &str| {
        log.lines().find(|l| l.contains(needle)).map(|l| {
            l.split_once("NCCL INFO ")
                .map_or(l, |(_, rest)| rest)
                .trim()
                .to_string()
        })
    };
    let loaded = find(&format!("Loaded net plugin {name}"));
    let using = find(&format!("Using network {name}"));
    match (loaded, using) {
        (Some(l), Some(u)) => {
            let mut lines = vec![l, u];
            lines.extend(find("NCCL_NET_DEVICE_UNPACK"));
            lines.extend(find("NCCL version"));
            Ok(lines)
        }
        (l, _) => Err(format!(
            "NCCL's log does not show it {} plugin '{name}': traffic may not have gone through the plugin; check NCCL_NET_PLUGIN and the log",
            if l.is_none() { "loaded the" } else { "used the network of the" }
        )),
    }
}

/// The baseline while it runs: communicators, the alternation record, a watchdog.
pub struct NcclBaseline {
    session: Session,
    info: NcclInfo,
    plugin_name: String,
    watchdog: Watchdog,
    timeout: Duration,
    epoch: Instant,
    iter: u32,
}

impl NcclBaseline {
    /// Creates one communicator per endpoint (every rank, together) and checks NCCL's log for
    /// the plugin. `plans` size the buffers.
    pub fn start<C: Collectives + ?Sized>(
        prep: Prepared,
        mpi: &C,
        plans: &[Arc<Plan>],
        timeout: Duration,
    ) -> Result<NcclBaseline, String> {
        let mut b = Self::init(prep, mpi, plans, timeout)?;
        b.verify_plugin()?;
        Ok(b)
    }

    /// [`start`](Self::start) without the log check (for a probe that reports it separately).
    pub fn init<C: Collectives + ?Sized>(
        prep: Prepared,
        mpi: &C,
        plans: &[Arc<Plan>],
        timeout: Duration,
    ) -> Result<NcclBaseline, String> {
        let rank = mpi.rank();
        let watchdog = Watchdog::start(|| "  (NCCL baseline: NCCL owns its comms)".to_string(), rank);
        watchdog.arm("NCCL baseline: communicator setup", timeout);
        let local: Vec<(usize, usize)> = prep.gpus.iter().map(|&(e, g, _)| (e, g)).collect();
        let buffer_len = plans
            .iter()
            .flat_map(|p| ops::for_plan(p).into_iter().map(|o| o.buffer_len()))
            .max()
            .unwrap_or(0);
        let t0 = Instant::now();
        let nranks = plans.first().map_or(0, |p| p.buffer_len.len());
        let session = Session::init(prep.lib.clone(), mpi, nranks, &local, buffer_len)?;
        let all = mpi.gather_f64(&[t0.elapsed().as_secs_f64()]);
        watchdog.disarm();
        let mut info = prep.info;
        info.init_seconds = all.iter().copied().fold(0.0, f64::max);
        if let Some(p) = plans.first() {
            info.operation = ops::nccl_call(p.pattern).to_string();
        }
        Ok(NcclBaseline {
            session,
            info,
            plugin_name: prep.plugin_name,
            watchdog,
            timeout,
            epoch: t0,
            iter: 0,
        })
    }

    /// Reads this rank's NCCL log: NCCL must have loaded the plugin file and used its network.
    pub fn verify_plugin(&mut self) -> Result<(), String> {
        let log = std::fs::read_to_string(&self.info.log_file).map_err(|e| {
            format!(
                "NCCL baseline: cannot read NCCL's log {} ({e}), which must show that NCCL used the plugin",
                self.info.log_file
            )
        })?;
        self.info.evidence = plugin_evidence(&log, &self.plugin_name)?;
        Ok(())
    }

    /// The header lines rank 0 prints once NCCL is up.
    pub fn header_lines(&self) -> String {
        let mut s = format!(
            "# NCCL baseline: NCCL {} ({}) on plugin {}, {}; communicators up in {:.2} s\n",
            self.info.version, self.info.library, self.plugin_name, self.info.operation, self.info.init_seconds
        );
        for line in &self.info.evidence {
            s.push_str(&format!("# NCCL log: {line}\n"));
        }
        s
    }

    /// Runs NCCL's operation for `plan` right after tcpx-perf measured it (its block started
    /// at `tcpx_started`, its busbw `tcpx_busbw`): warm-up, the batch timing, the barrier
    /// timing, one checked operation.
    pub fn measure<C: Collectives + ?Sized>(
        &mut self,
        iterations: &Iterations,
        mpi: &C,
        plan: &Plan,
        tcpx_busbw: f64,
        tcpx_started: Instant,
    ) -> Result<NcclFigures, String> {
        let start = Instant::now();
        self.watchdog
            .arm(&format!("NCCL baseline: size {}", plan.size), self.timeout);
        let all_ops = ops::for_plan(plan);
        let ids = self.session.endpoint_ids();
        let mine: Vec<&EndpointOp> = ids.iter().map(|&e| &all_ops[e]).collect();
        self.session.warm_up(&mine, iterations.warmup)?;
        let batch = self.session.time_batch(mpi, &mine, iterations.iters)?;
        let barrier = self.session.time_barrier(mpi, &mine, iterations.iters)?;
        let wrong = if iterations.check {
            self.checked_operation(mpi, plan, &mine)?
        } else {
            None
        };
        self.watchdog.disarm();
        let (samples, time_us) = reduce(mpi, &barrier, iterations.average);
        let (batch_samples, batch_time_us) = reduce(mpi, &batch, iterations.average);
        let bytes = ops::nccl_size(plan);
        let factor = plan.busbw_factor();
        let algbw = tcpx_units::gbps(bytes, time_us);
        let batch_algbw = tcpx_units::gbps(bytes, batch_time_us);
        let end = Instant::now();
        let offset = |t: Instant| t.saturating_duration_since(self.epoch).as_secs_f64();
        self.info.blocks.push(Block {
            size_bytes: plan.size,
            tool: "tcpx-perf",
            start_s: offset(tcpx_started),
            seconds: (start - tcpx_started).as_secs_f64(),
        });
        self.info.blocks.push(Block {
            size_bytes: plan.size,
            tool: "nccl",
            start_s: offset(start),
            seconds: (end - start).as_secs_f64(),
        });
        Ok(NcclFigures {
            size_bytes: bytes,
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: algbw * factor,
            ratio: tcpx_busbw / (algbw * factor),
            batch_time_us,
            batch_algbw_gbps: batch_algbw,
            batch_busbw_gbps: batch_algbw * factor,
            wrong,
            stats: stats::summarize(&samples),
            samples_us: samples,
            batch_samples_us: batch_samples,
        })
    }

    /// One more operation with the data pattern, every received byte compared (summed over
    /// ranks); `None` for the all-reduce.
    fn checked_operation<C: Collectives + ?Sized>(
        &mut self,
        mpi: &C,
        plan: &Plan,
        mine: &[&EndpointOp],
    ) -> Result<Option<u64>, String> {
        if mine.iter().any(|o| matches!(o, EndpointOp::AllReduce { .. })) {
            return Ok(None);
        }
        self.iter = self.iter.wrapping_add(1);
        let ids = self.session.endpoint_ids();
        for (i, &e) in ids.iter().enumerate() {
            for f in &plan.fills[e] {
                self.session.fill(i, f.off, f.len, self.iter, f.origin_off)?;
            }
        }
        self.session.synchronize()?;
        mpi.barrier();
        self.session.enqueue(mine)?;
        self.session.synchronize()?;
        let mut wrong = [0u64];
        for (i, &e) in ids.iter().enumerate() {
            for f in plan.flows.iter().filter(|f| f.dst == e && f.len > 0) {
                wrong[0] += self
                    .session
                    .wrong_bytes(i, f.dst_off, f.len, f.origin, self.iter, f.origin_off)?;
            }
        }
        mpi.sum_u64(&mut wrong);
        Ok(Some(wrong[0]))
    }

    /// The run-level record so far (for summary.json, also of a failed run).
    pub fn info(&self) -> &NcclInfo {
        &self.info
    }

    /// Destroys the communicators; returns the record for summary.json.
    pub fn finish(self) -> Result<NcclInfo, String> {
        self.watchdog.arm("NCCL baseline: communicator teardown", self.timeout);
        let r = self.session.close();
        self.watchdog.disarm();
        r.map(|()| self.info)
    }
}

/// Per-iteration samples reduced over ranks with -a, and the time as tcpx-perf reduces it
/// (each rank's mean, reduced over ranks).
fn reduce<C: Collectives + ?Sized>(mpi: &C, mine: &RankTimes, average: TimeReduction) -> (Vec<f64>, f64) {
    let all = mpi.gather_f64(&mine.samples_us);
    let means = mpi.gather_f64(&[mine.mean_us]);
    let samples = tcpx_units::reduce_each_iteration(&all, mine.samples_us.len(), average);
    (samples, tcpx_units::reduce(&means, average))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(ranks: usize, per_node: usize, g: usize, hosts: &[&str]) -> Topology {
        Topology::with_ranks_per_node(
            ranks,
            per_node,
            g,
            hosts.iter().map(std::string::ToString::to_string).collect(),
        )
    }

    #[test]
    fn two_endpoints_on_one_gpu_are_refused_before_nccl_sees_them() {
        let t = topo(2, 2, 1, &["a", "a"]);
        let buses = vec![vec!["0000:19:00.0".to_string()], vec!["0000:19:00.0".to_string()]];
        let msg = duplicate_gpu(&t, &buses).expect("duplicate");
        assert!(
            msg.contains("endpoints 0 and 1 both use GPU 0000:19:00.0 on host a"),
            "{msg}"
        );
        assert!(msg.contains("Duplicate GPU") && !msg.contains('\n'));
        // The same bus id on two hosts is two GPUs.
        let t = topo(2, 1, 1, &["a", "b"]);
        assert_eq!(duplicate_gpu(&t, &buses), None);
        // -g 2: endpoint ids count the rank's endpoints.
        let t = topo(2, 2, 2, &["a", "a"]);
        let buses = vec![
            vec!["0000:19:00.0".to_string(), "0000:2a:00.0".to_string()],
            vec!["0000:2a:00.0".to_string(), "0000:3b:00.0".to_string()],
        ];
        let msg = duplicate_gpu(&t, &buses).expect("duplicate");
        assert!(msg.contains("endpoints 1 and 2"), "{msg}");
    }

    #[test]
    fn the_plugin_must_show_in_nccls_log() {
        let log = "\
h:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda12.9
h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin tcpx-emu (v7)
h:1:1 [0] NCCL INFO Using network tcpx-emu
h:1:1 [0] NCCL INFO Using NCCL_NET_DEVICE_UNPACK net plugin version 7
";
        let ev = plugin_evidence(log, "tcpx-emu").expect("evidence");
        assert_eq!(ev[0], "NET/Plugin: Loaded net plugin tcpx-emu (v7)");
        assert_eq!(ev[1], "Using network tcpx-emu");
        assert_eq!(ev.len(), 4);
        // NCCL fell back to its own socket transport: refused.
        let fallback = "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin tcpx-emu (v7)\nh:1:1 [0] NCCL INFO Using network Socket\n";
        let err = plugin_evidence(fallback, "tcpx-emu").unwrap_err();
        assert!(err.contains("used the network of the plugin 'tcpx-emu'"), "{err}");
        let err = plugin_evidence("", "GPUDirectTCPX_v7").unwrap_err();
        assert!(err.contains("loaded the plugin 'GPUDirectTCPX_v7'"), "{err}");
    }
}
