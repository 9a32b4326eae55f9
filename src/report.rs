//! The result model: what a run measured and the provenance needed to trust and reproduce
//! it. The engine fills these structs on rank 0; the exporters in [`crate::export`] turn
//! them into the stdout table and the files described in `results/README.md`.
//!
//! Units everywhere: bytes, microseconds, GB/s with GB = 10^9 bytes.

use std::io::{self, Read};
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

// The parts of the result model that their producers define, re-exported so that the exporters
// (`crate::export`) read the model from this module alone.
pub use crate::cputime::CpuCost;
pub use crate::delivery::{ByteCheck, WireBytes};
pub use crate::placement::dry_run::PlacementReport;
pub use crate::placement::preflight::Level as FindingLevel;
pub use crate::stats::SampleStats;

/// This tool's version (the crate version).
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything about a run except the per-size measurements.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// tcpx-perf version ([`TOOL_VERSION`]).
    pub tool_version: String,
    /// Source commit, if the build recorded one ([`git_commit`]).
    pub git_commit: Option<String>,
    /// argv as launched.
    pub command: Vec<String>,
    /// RFC 3339 UTC ([`now_rfc3339`]).
    pub start_time: String,
    /// The resolved settings and the job's shape (flattened: summary.json lists them at its top level).
    #[serde(flatten)]
    pub settings: RunSettings,
    /// One entry per rank.
    pub hosts: Vec<HostInfo>,
    /// The plugin as loaded.
    pub plugin: PluginInfo,
    /// MPI library version string.
    pub mpi_library: String,
    /// Allow-listed environment ([`allowed_env`]).
    pub env: Vec<(String, String)>,
    /// Every CLI option ([`crate::cli::Cli::config_json`]).
    pub config: serde_json::Value,
    /// Choices tcpx-perf made for the user and limits it warns about (one line each).
    pub notes: Vec<String>,
    /// NIC and CPUs per endpoint, preflight findings, connection setup time.
    pub placement: crate::placement::dry_run::PlacementReport,
    /// `--force`: run despite error findings of preflight.
    pub force: bool,
    /// The whole run's CPU cost (every thread of every rank, from MPI up to the end); set once
    /// the sweep completed.
    pub cpu: Option<crate::cputime::CpuCost>,
    /// `--baseline nccl`: NCCL's library, settings, the log lines that prove it used the
    /// plugin, the alternation of the blocks.
    pub nccl: Option<NcclInfo>,
    /// `NCCL_TESTS_MIN_BW`'s verdict, set once the sweep completed with the variable set.
    pub bandwidth_gate: Option<BandwidthGate>,
    /// The slow NIC sides the measurements found, with every flow through each (the findings
    /// say each in one line).
    pub slow_nics: Vec<SlowNic>,
    /// A verdict per node ([`crate::verdict`]), every node of a multi-node run once a size was
    /// judged or a finding names a node; empty otherwise.
    pub node_verdicts: Vec<NodeVerdict>,
    /// The node verdicts' probe ([`crate::verdict::probe`]), once the sweep ended well.
    pub probe: Option<ProbeRun>,
}

/// The node verdicts' probe: rounds of node pairs after the sweep, reported apart from it.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ProbeRun {
    /// Why the job ran no probe (one node, `--probe-rounds 0`, sizes below 1 MiB); null when it
    /// ran.
    pub skipped: Option<String>,
    /// Bytes each endpoint sent its partner per iteration (the sweep's largest size).
    pub size_bytes: u64,
    /// Wall time of the whole probe (connects, warm-up, timed iterations), seconds.
    pub seconds: f64,
    /// Network bytes the probe moved, warm-up included.
    pub bytes: u64,
    /// Wrong bytes its rounds' data check found over their timed iterations (as the sweep's
    /// `wrong`: counted in the footer's "Out of bounds values", exit 2); `None` unchecked (-c 0)
    /// or not run. A probe with wrong data decides no verdict.
    pub wrong: Option<u64>,
    pub rounds: Vec<ProbeRound>,
}

impl ProbeRun {
    /// One line for the console: what the probe did, and what it cost.
    pub fn line(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("probe: none ({why})");
        }
        let wrong = match self.wrong {
            Some(w) if w > 0 => format!("; {w} wrong bytes: it decides no verdict"),
            _ => String::new(),
        };
        format!(
            "probe: {} round(s) of node pairs at {}, each node with a new partner per round, one way then the other: {:.1} s, {:.2} GB{wrong} (node verdicts: docs/drain.md)",
            self.rounds.len(),
            tcpx_units::format_size_label(self.size_bytes),
            self.seconds,
            self.bytes as f64 / 1e9
        )
    }
}

/// One round of the probe: which nodes were paired, and what it measured.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ProbeRound {
    /// (node, partner) host names.
    pub pairs: Vec<(String, String)>,
    /// The round's mean iteration time, microseconds.
    pub time_us: f64,
    #[serde(skip)]
    #[schemars(skip)]
    pub result: SizeResult,
}

/// nccl-tests' pass/fail gate (`NCCL_TESTS_MIN_BW=X`): the run fails when the average busbw over
/// the rows is below 90% of X (nccl-tests' own margin).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BandwidthGate {
    /// `NCCL_TESTS_MIN_BW`, GB/s.
    pub min_bw_gbps: f64,
    /// The average busbw the gate judged (the footer's "Avg bus bandwidth"), GB/s.
    pub avg_busbw_gbps: Option<f64>,
    /// `avg_busbw_gbps >= 0.9 * min_bw_gbps`.
    pub passed: bool,
}

impl BandwidthGate {
    /// nccl-tests' margin: the run passes at 90% of `NCCL_TESTS_MIN_BW`.
    pub const MARGIN: f64 = 0.9;

    /// The verdict on `avg_busbw` (`None`: no row measured, which fails).
    pub fn judge(min_bw_gbps: f64, avg_busbw_gbps: Option<f64>) -> BandwidthGate {
        BandwidthGate {
            min_bw_gbps,
            avg_busbw_gbps,
            passed: avg_busbw_gbps.is_some_and(|a| a >= Self::MARGIN * min_bw_gbps),
        }
    }
}

/// A run's resolved settings and its job's shape, in the order summary.json lists them: the
/// field names are summary.json's keys (the summary serializes this struct, no hand-kept copy).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunSettings {
    /// `sendrecv`, `pairs`, `ring`, `fullmesh`.
    pub pattern: String,
    /// Resolved scope: `all` or `inter-node` (never `auto`).
    pub scope: String,
    /// `uni` or `bi`.
    pub dir: String,
    /// Resolved memory kind: `host` or `cuda` (never `auto`).
    pub mem: String,
    /// How data reaches the plugin, e.g. `host`, `cuda (NCCL_PTR_CUDA)`,
    /// `cuda via pinned host staging`.
    pub mem_path: String,
    /// MPI ranks.
    pub ranks: usize,
    /// Endpoints (GPU workers) over all ranks.
    pub endpoints: usize,
    /// Nodes (after `--ranks-per-node`).
    pub nodes: usize,
    /// Endpoints per rank (`-g`).
    pub gpus_per_rank: usize,
    /// Timed iterations per size.
    pub iters: usize,
    /// Warmup iterations per size.
    pub warmup: usize,
    /// Whether the data check ran.
    pub check: bool,
    /// `-a` reduction name: `rank0`, `avg`, `min`, `max`.
    pub time_reduction: String,
    /// Request size in bytes.
    pub chunk: u64,
    /// Communicators per peer.
    pub channels: usize,
    /// Requests outstanding per communicator.
    pub window: usize,
    /// `--connect`: `all` (every comm before the first byte) or `rounds` (the `--max-peers`
    /// round in flight only).
    pub connect: String,
    /// `--timing`: `per-iteration` (each timed iteration after a barrier, alone) or
    /// `back-to-back` (nccl-tests': the iterations back to back, time = total / iterations).
    pub timing: String,
}

/// Where one rank ran.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HostInfo {
    /// MPI rank.
    pub rank: usize,
    /// Hostname as the rank reported it.
    pub hostname: String,
    /// Node index (0-based, after `--ranks-per-node`).
    pub node: usize,
    /// Local GPU indices of the rank's endpoints.
    pub gpus: Vec<usize>,
}

/// The net plugin as loaded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PluginInfo {
    /// Path of the loaded shared object.
    pub path: String,
    /// SHA-256 of that file, lowercase hex ([`sha256_file`]).
    pub sha256: String,
    /// The name the plugin reports (`tcpx-emu`, `GPUDirectTCPX_v7`, ...).
    pub name: String,
    /// ABI version in use (7..=12).
    pub abi: u32,
    /// The device's `ptrSupport`, rendered (e.g. `host|cuda`).
    pub ptr_support: String,
    /// Device type as reported (e.g. `host`, `unpack`).
    pub device_type: String,
    /// Number of plugin devices.
    pub devices: usize,
}

/// One size of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Bytes per endpoint (the nccl-tests "size"; see `results/README.md`).
    pub size_bytes: u64,
    /// The size asked for, before ring and fullmesh round it to whole blocks (`-e 1M` over 3
    /// endpoints is 1048575 B): what the thresholds of the rules compare.
    #[serde(skip)]
    pub requested_bytes: u64,
    /// `size_bytes / 4` (float elements, as nccl-tests).
    pub count: u64,
    /// Timed iterations.
    pub iters: usize,
    /// Each rank's mean time over the timed iterations, reduced over ranks with `-a` (as
    /// nccl-tests), microseconds.
    pub time_us: f64,
    /// `size_bytes / time`, GB/s.
    pub algbw_gbps: f64,
    /// `algbw * busbw_factor`, GB/s.
    pub busbw_gbps: f64,
    /// Network bytes sent per sending endpoint / time (`algbw * netbw_factor`), GB/s: busbw
    /// except for fullmesh with `--scope inter-node`, where same-node blocks stay off the network.
    pub netbw_gbps: f64,
    /// The most distinct peers any endpoint had sends (receives) posted to at once during the
    /// timed iterations: bounded by `--max-peers`.
    pub peers_in_flight: (u32, u32),
    /// CPU time of the timed iterations (start signal to last completion, every thread of each
    /// rank), per rank and per GB of network bytes moved.
    pub cpu: crate::cputime::CpuCost,
    /// Wrong bytes over all timed iterations and ranks; `None` when unchecked.
    pub wrong: Option<u64>,
    /// Statistics of `samples_us`.
    pub stats: SampleStats,
    /// Network bytes per iteration over all endpoints, as planned.
    pub bytes_planned: u64,
    /// Bytes per iteration as each source saw them (the data check, the plugin's claims,
    /// interface counters).
    pub bytes: crate::delivery::ByteCheck,
    /// Per-iteration times (each iteration reduced over ranks with `-a`), microseconds: the
    /// spread columns (t_min, t_med, t_p99, cv%) describe these.
    pub samples_us: Vec<f64>,
    /// busbw / algbw for this pattern and n (nccl-tests' factor).
    pub busbw_factor: f64,
    /// Per-rank times of every timed iteration (rank-major: rank r's iterations are
    /// `[r * iters, (r + 1) * iters)`), microseconds: what `-a` reduces.
    pub rank_samples_us: Vec<f64>,
    /// The link matrix: one entry per directed pair.
    pub pairs: Vec<PairResult>,
    /// TCP retransmissions and timeouts during the timed iterations, per network namespace of
    /// the job's hosts; `None` where no host could read them.
    pub tcp: Option<crate::tcp_stats::TcpActivity>,
    /// NCCL's figures at this size (`--baseline nccl`).
    pub nccl: Option<NcclFigures>,
}

impl SizeResult {
    /// Whether this size's bytes can be trusted: the data check compared them (`-c 1`, whatever
    /// it found), or an exact witness independent of the plugin measured them. With `-c 0`
    /// neither holds: the plugin's own sizes and descriptors are claims and the interface
    /// counters a lower bound, so the size is unverified.
    pub fn verified(&self) -> bool {
        self.wrong.is_some() || self.bytes.measured.is_some()
    }
}

/// What one link of the matrix moved in one size: a directed endpoint pair, or in a job past
/// 65536 endpoint pairs a NIC's or a node pair's link ([`Level`]: ranks and GPUs are then
/// `None`; the matrix module decides).
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    /// Sender rank.
    pub src_rank: Option<usize>,
    /// Sender GPU index on its node.
    pub src_gpu: Option<usize>,
    /// Sender hostname.
    pub src_host: String,
    /// Receiver rank.
    pub dst_rank: Option<usize>,
    /// Receiver GPU index on its node.
    pub dst_gpu: Option<usize>,
    /// Receiver hostname.
    pub dst_host: String,
    /// The receiver's NIC, the rail every byte of the link crosses (`None` for a node pair, or
    /// where placement did not name it).
    pub rail: Option<String>,
    /// Directed endpoint pairs the link carries (1 for an endpoint pair).
    pub endpoint_pairs: u64,
    /// Bytes per iteration.
    pub bytes: u64,
    /// Mean time from the sender's first post of the pair's bytes to the receiver's last byte in
    /// its buffer, microseconds (docs/measurements.md#per-pair-figures).
    pub time_us: f64,
    /// `bytes / time_us / 1000`, GB/s; not a rate when `above_link`.
    pub gbps: f64,
    /// What the pair's path can carry, GB/s: the sender's NIC on the receiver's rail, at its
    /// shaped rate or link speed, with the shaper's burst allowed for; `None` when unknown.
    pub link_gbps: Option<f64>,
    /// Faster than the path's rate: not a rate of the link (a shaper's burst, or an error of
    /// measurement), written without a rate and left out of every judgement
    /// ([`crate::link_check`]).
    pub above_link: bool,
    /// Faster than even the rate plus the shaper's bucket allow: an error of measurement.
    #[serde(skip)]
    pub impossible: bool,
}

/// What one link of the link matrix is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// A directed endpoint pair.
    Endpoint,
    /// Sender node to receiver node on one rail (the receiver's NIC).
    Nic,
    /// Sender node to receiver node.
    Node,
}

impl Level {
    /// As pairs.csv's `level` column writes it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Endpoint => "endpoint",
            Level::Nic => "nic",
            Level::Node => "node",
        }
    }
}

impl PairResult {
    /// What kind of link this is: an endpoint pair (ranks known), a NIC's link (a rail, no
    /// ranks) or a node pair.
    pub fn level(&self) -> Level {
        match (self.src_rank, &self.rail) {
            (Some(_), _) => Level::Endpoint,
            (None, Some(_)) => Level::Nic,
            (None, None) => Level::Node,
        }
    }
}

/// Whether an environment variable may be recorded. An allow-list, never the whole
/// environment: launch environments carry tokens and credentials. The Slurm variables name the
/// job and step a run came from (for `sacct`, and to tell runs of one reservation apart); only
/// those every rank shares, so rank 0's record speaks for the job.
fn env_allowed(name: &str) -> bool {
    const PREFIXES: [&str; 3] = ["NCCL_", "TCPXEMU_", "UCCL_"];
    const EXACT: [&str; 10] = [
        "CUDA_VISIBLE_DEVICES",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "SLURM_CLUSTER_NAME",
        "SLURM_JOB_ID",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION",
        "SLURM_NTASKS",
        "SLURM_STEP_ID",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || EXACT.contains(&name)
}

/// Keeps the allow-listed variables of `vars`, sorted by name.
pub fn filter_env<I>(vars: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut out: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| env_allowed(k)).collect();
    out.sort();
    out
}

/// The allow-listed part of this process's environment, sorted by name: `NCCL_*`,
/// `TCPXEMU_*`, `UCCL_*`, `CUDA_VISIBLE_DEVICES`, `OMPI_COMM_WORLD_SIZE`,
/// `OMPI_COMM_WORLD_LOCAL_SIZE` and the Slurm job's identity (`SLURM_JOB_ID`, ...). Non-UTF-8 names are skipped, values rendered lossily.
pub fn allowed_env() -> Vec<(String, String)> {
    filter_env(
        std::env::vars_os().filter_map(|(k, v)| k.into_string().ok().map(|k| (k, v.to_string_lossy().into_owned()))),
    )
}

/// SHA-256 of a file, lowercase hex. Streams the file, so large plugins cost no memory; a
/// regular file within [`tcpx_files::Bound::LIBRARY`], opened without blocking (a FIFO or a
/// device in its place is an error, not a hang).
pub fn sha256_file(path: impl AsRef<Path>) -> io::Result<String> {
    let bound = tcpx_files::Bound::LIBRARY;
    let mut file = tcpx_files::read::open_input(path.as_ref(), bound)?.take(bound.max_bytes);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The source commit recorded at build time in `TCPX_PERF_GIT_COMMIT` (set by build.rs),
/// or `None` when the build did not record one.
pub fn git_commit() -> Option<String> {
    option_env!("TCPX_PERF_GIT_COMMIT")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// Now, as RFC 3339 UTC with second precision (`2026-11-21T05:07:49Z`), for
/// `start_time` / `end_time`.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    // Formatting a UTC date with a fixed description only fails for years past 9999.
    now.format(&fmt).unwrap_or_else(|_| now.unix_timestamp().to_string())
}

// --baseline nccl: NCCL's figures beside tcpx-perf's (filled by `crate::baseline`).

/// The run-level description of the baseline (summary.json `nccl_baseline`, the header).
#[derive(Debug, Clone, Serialize, Default, schemars::JsonSchema)]
pub struct NcclInfo {
    /// The NCCL library file the loader mapped.
    pub library: String,
    /// `major.minor.patch` from `ncclGetVersion`.
    pub version: String,
    /// NCCL's operation per pattern.
    pub operation: String,
    /// Variables tcpx-perf set for NCCL (name, value), and what it replaced.
    pub env: Vec<(String, String)>,
    pub env_replaced: Vec<String>,
    /// NCCL's own log lines (rank 0) that show it loaded and used the plugin.
    pub evidence: Vec<String>,
    /// Rank 0's full NCCL log (`NCCL_DEBUG_FILE`; every rank writes its own, by pid).
    pub log_file: String,
    /// Seconds of the slowest rank's communicator creation.
    pub init_seconds: f64,
    /// How the two timings are defined.
    pub timing: Timing,
    /// The alternation: one entry per measured block, in the order they ran.
    pub blocks: Vec<Block>,
    /// What differs between the traffic tcpx-perf and NCCL moved, where it does (ring at
    /// `--scope inter-node`: the hops that cross nodes on each side); null where like for like.
    pub baseline_note: Option<String>,
}

/// Definitions of the figures, written into summary.json beside them.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Timing {
    pub time_us: &'static str,
    pub batch_time_us: &'static str,
    pub ratio: &'static str,
    pub order: &'static str,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            time_us: "tcpx-perf's definition: per iteration an MPI barrier, then the NCCL operation, the clock from the enqueue to the completion of the rank's last stream; each rank's mean reduced over ranks with -a",
            batch_time_us: "nccl-tests' definition: after -w warm-up operations, a barrier, CUDA events around -n operations back to back: (last event - first) / n, the rank's slowest GPU; reduced over ranks with -a",
            ratio: "tcpx-perf busbw / NCCL busbw (tcpx-perf's timing for both): > 1 means tcpx-perf moved the pattern faster than NCCL",
            order: "per size: A = tcpx-perf (-w warm-up, -n timed), then B = NCCL (-w warm-up, -n batch-timed, -n barrier-timed, one checked operation); sizes ascending: A B A B ...",
        }
    }
}

/// One measured block of the alternation.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Block {
    pub size_bytes: u64,
    /// `tcpx-perf` or `nccl`.
    pub tool: &'static str,
    /// Seconds from the first block's start (rank 0's clock).
    pub start_s: f64,
    pub seconds: f64,
}

/// NCCL's figures at one size.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NcclFigures {
    /// The bytes NCCL's algbw divides (the size; whole floats for the all-reduce).
    pub size_bytes: u64,
    /// tcpx-perf's timing.
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// tcpx-perf busbw / NCCL busbw.
    pub ratio: f64,
    /// nccl-tests' timing.
    pub batch_time_us: f64,
    pub batch_algbw_gbps: f64,
    pub batch_busbw_gbps: f64,
    /// Wrong bytes of one checked operation after the timed ones (None: unchecked, or an
    /// all-reduce, whose sums the byte pattern cannot predict).
    pub wrong: Option<u64>,
    /// Statistics of `samples_us`.
    pub stats: SampleStats,
    /// Per-iteration times, tcpx-perf's timing, reduced over ranks with -a.
    #[serde(skip)]
    pub samples_us: Vec<f64>,
    /// Per-iteration times, nccl-tests' timing (CUDA event intervals), reduced over ranks.
    #[serde(skip)]
    pub batch_samples_us: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// summary.json spells each verdict as tcpx-analyze admits it (tcpx_schema::NODE_VERDICTS).
    #[test]
    fn health_is_written_as_the_schema_names_it() {
        for h in [Health::Healthy, Health::Suspect, Health::Bad] {
            assert_eq!(serde_json::to_value(h).unwrap(), h.as_str());
        }
    }

    #[test]
    fn env_allow_list() {
        let vars = [
            ("NCCL_DEBUG", "INFO"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("TCPXEMU_LOSS", "0"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("CUDA_HOME", "/usr/local/cuda"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_orte_hnp_uri", "secret"),
            ("SLURM_JOB_ID", "42"),
            ("SLURM_PROCID", "3"),
            ("SLURM_JOB_ACCOUNT", "team"),
            ("UCCL_X", "1"),
            ("HOME", "/root"),
            ("nccl_debug", "lower"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let got: Vec<String> = filter_env(vars).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            got,
            [
                "CUDA_VISIBLE_DEVICES",
                "NCCL_DEBUG",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "OMPI_COMM_WORLD_SIZE",
                "SLURM_JOB_ID",
                "TCPXEMU_LOSS",
                "UCCL_X"
            ]
        );
        // The real environment passes through the same filter.
        assert!(allowed_env().iter().all(|(k, _)| env_allowed(k)));
    }

    #[test]
    fn sha256_of_known_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").expect("write");
        assert_eq!(
            sha256_file(&p).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::write(&p, b"").expect("write");
        assert_eq!(
            sha256_file(&p).expect("hash"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(sha256_file(dir.path().join("missing")).is_err());
    }

    #[test]
    fn timestamp_shape() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T');
    }
}

// The slow-NIC rule's evidence (crate::slow_nic finds it and words its finding); defined here,
// with the rest of the result model, so that the model depends on no analysis above it.

/// A NIC of a host, in one direction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct Side {
    pub host: String,
    pub nic: String,
    /// True: the flows leaving the host on it; false: those entering.
    pub sending: bool,
}

/// A slow NIC side, as measured at the largest size judged: the whole evidence (summary.json's
/// `slow_nics`), of which the finding is one short line.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SlowNic {
    pub side: Side,
    /// The side's median flow rate over the reference, at `size`.
    pub share: f64,
    /// The side's median flow rate, GB/s.
    pub gbps: f64,
    /// The median over every side, GB/s.
    pub reference_gbps: f64,
    /// The size judged (bytes): the largest.
    pub size: u64,
    /// Sizes at which it was slow, of those judged.
    pub slow_sizes: usize,
    pub judged_sizes: usize,
    /// The flows through it at `size`: `[src rank, src gpu, dst rank, dst gpu]` each (a job
    /// judged by endpoint pairs).
    pub flows: Vec<(usize, usize, usize, usize)>,
    /// A job judged by NIC links (past 65536 endpoint pairs): the links through it at `size`,
    /// `[sender host, receiver host]` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<(String, String)>,
    /// Bytes its counters saw per timed iteration at `size`, where they were read.
    pub wire_bytes: Option<u64>,
    /// The other side of the same flows, when it is slow too and explains nothing more.
    pub twin: Option<Side>,
}

// The node verdicts (crate::verdict makes them from the slow-NIC rule's medians and the findings
// that name a node); defined here with the rest of the result model.

/// How a node came out of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Nothing measured or found against it.
    Healthy,
    /// Worth a look: a NIC side below the suspect share, or slow with a partner the run cannot
    /// tell it from, or a warning that names it (and not every node).
    Suspect,
    /// A NIC side below the bad share whose partners are fast with everyone else, an error
    /// finding or the failure that names it.
    Bad,
}

impl Health {
    /// Its word in summary.json: one of [`tcpx_schema::NODE_VERDICTS`], which tcpx-analyze
    /// admits by (mildest first, as the variants).
    pub fn as_str(self) -> &'static str {
        tcpx_schema::NODE_VERDICTS[self as usize]
    }
}

/// One node's verdict, with its evidence (summary.json's `node_verdicts`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeVerdict {
    pub host: String,
    pub verdict: Health,
    /// One line: which NIC, which direction, its share of the median, the flows and peers that
    /// show it, the findings and failure that name the node; for a healthy node its lowest share.
    pub evidence: String,
    /// What decided the verdict: `probe` (the rounds of node pairs after the sweep: whatever
    /// verdict they gave, healthy included), `partners` (without a probe: its flows with several
    /// partners are slow, theirs with everyone else are not), `cannot-separate` (its only
    /// partners are slow too: a two-node probe, or a sweep with one partner each), `finding`,
    /// `failure`; null for a node the sweep alone found healthy.
    pub decided_by: Option<String>,
    /// The lowest share of the median NIC side among this node's sides: the median over the
    /// probe's rounds, or at the sweep's largest size judged (null when nothing was judged).
    pub lowest_share: Option<f64>,
    /// Its NIC sides below the suspect share (in the probe: those at fault, with `slow_sizes`
    /// and `judged_sizes` counting its slow rounds and its rounds).
    pub slow_sides: Vec<SlowSide>,
}

/// A NIC side of a node that is slow, and what its partners say.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SlowSide {
    pub nic: String,
    /// True: the flows leaving the node on it; false: those entering.
    pub sending: bool,
    /// Its median flow rate over the median side's, at the largest size judged.
    pub share: f64,
    /// Sizes at which it was below the suspect share, of those judged.
    pub slow_sizes: usize,
    pub judged_sizes: usize,
    /// Flows through it at the largest size judged.
    pub flows: usize,
    /// The nodes at the other end of those flows.
    pub peers: Vec<String>,
    /// Of `peers`, those whose side of these flows is not slow (fast with everyone else).
    pub peers_fast: usize,
}
