//! `-J FILE`: the run as nccl-tests 2.19 writes its JSON (`JSON_FILE_VERSION 3`, nccl-tests'
//! `src/util.cu`), key for key and in the same order, so that tools written for nccl-tests
//! (its `tools/analyze_perf_json.py`, tcpx-analyze, users' scripts) read tcpx-perf's runs.
//!
//! How tcpx-perf's run maps onto nccl-tests' record (docs/nccl-tests.md says why):
//! - one measurement per size: `out_of_place` and `out_of_place_per_iter`; `in_place` is `null`
//!   (nccl-tests itself writes a placement it did not measure as `null`);
//! - `time`, `alg_bw`, `bus_bw`: the table's (each rank's mean, reduced with `-a`);
//! - `times_us`: each timed iteration's slowest rank, as nccl-tests `-I 1`
//!   ("i_* uses max over process rows"), and `per_process_max_times_us` every rank's times; the
//!   statistics are computed from `times_us` as nccl-tests does (p50 = `sorted[n/2]`, nearest-rank
//!   p95/p99, population stdev);
//! - `env`: the allow-listed variables only (nccl-tests dumps the whole environment);
//! - `devices`: one per endpoint, `pid` -1 and `device_hex`/`device_info` empty (not recorded);
//! - `nccl_version`: NCCL's version code with `--baseline nccl`, else 0 (no NCCL involved);
//! - booleans are the strings `"true"`/`"false"` and NaN is `"nan"`, as nccl-tests writes them;
//!   times are UTC (nccl-tests: local time).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

use super::avg_busbw;
use super::table::{redop, ROOT};
use crate::report::{RunInfo, SizeResult};

/// nccl-tests' `JSON_FILE_VERSION`.
pub const VERSION: u32 = 3;

/// The whole file, in nccl-tests' key order.
#[derive(Debug, Serialize, JsonSchema)]
pub struct NcclTestsJson {
    /// Always 3.
    pub version: u32,
    /// `YYYY-mm-dd HH:MM:SS` (UTC).
    pub start_time: String,
    /// argv as launched.
    pub args: Vec<String>,
    /// `NAME=value` of the allow-listed environment.
    pub env: Vec<String>,
    /// NCCL's version code (e.g. 22809) with `--baseline nccl`, else 0.
    pub nccl_version: i64,
    pub config: Config,
    pub results: Vec<Record>,
    pub out_of_bounds: OutOfBounds,
    pub average_bus_bandwidth: AverageBusBandwidth,
    /// Why the run failed; `[""]` when it did not (as nccl-tests).
    pub errors: Vec<String>,
    /// `YYYY-mm-dd HH:MM:SS` (UTC).
    pub end_time: String,
}

/// nccl-tests' `config` object.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Config {
    pub nthreads: u32,
    /// Endpoints per rank (`-g`).
    pub ngpus: usize,
    pub minimum_bytes: u64,
    pub maximum_bytes: u64,
    /// `-f` when above 1 (else `step_bytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_factor: Option<u64>,
    /// `-i` when `-f` is 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_bytes: Option<u64>,
    pub warmup_iters: usize,
    pub iterations: usize,
    pub aggregated_iterations: u32,
    /// 1 with the data check, else 0.
    pub validation: u32,
    pub graph: u32,
    pub blocking_collectives: CBool,
    pub per_iter_timing: CBool,
    pub per_iter_skip: u32,
    pub parallel_init: CBool,
    pub devices: Vec<Device>,
}

/// One GPU rank (tcpx-perf: one endpoint).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Device {
    pub rank: usize,
    pub group: u32,
    /// -1: not recorded.
    pub pid: i64,
    pub hostname: String,
    pub device: usize,
    pub device_hex: String,
    pub device_info: String,
}

/// One size.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Record {
    pub size: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub type_: String,
    pub redop: String,
    /// `"%6i"` of the root, as nccl-tests (`"    -1"`).
    pub root: String,
    pub out_of_place: Placement,
    pub out_of_place_per_iter: PerIteration,
    /// Always null: tcpx-perf has no in-place variant.
    pub in_place: Option<Placement>,
    pub actual_iterations: usize,
    pub experiment_name: String,
}

/// One placement's summary.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Placement {
    /// Microseconds.
    #[serde(serialize_with = "c_double")]
    pub time: f64,
    /// GB/s.
    #[serde(serialize_with = "c_double")]
    pub alg_bw: f64,
    /// GB/s.
    #[serde(serialize_with = "c_double")]
    pub bus_bw: f64,
    /// Wrong elements; null when unchecked.
    pub nwrong: Option<f64>,
}

/// nccl-tests `-I 1`'s per-iteration record.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PerIteration {
    pub skipped_iterations: u32,
    pub min_us: f64,
    pub max_us: f64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub stdev_us: f64,
    pub cv_pct: f64,
    /// Each iteration's slowest rank.
    pub times_us: Vec<f64>,
    /// Every rank's time of every iteration (absent with one rank, as nccl-tests).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_process_max_times_us: Vec<Vec<f64>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct OutOfBounds {
    pub count: u64,
    pub okay: CBool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct AverageBusBandwidth {
    /// GB/s; `"nan"` without rows.
    #[serde(serialize_with = "c_double")]
    #[schemars(with = "serde_json::Value")]
    pub bandwidth: f64,
    /// `"unchecked"` without `NCCL_TESTS_MIN_BW`, else `"true"`/`"false"`.
    pub okay: String,
}

/// nccl-tests' booleans: the strings `"true"` and `"false"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CBool {
    True,
    False,
}

impl From<bool> for CBool {
    fn from(b: bool) -> CBool {
        if b {
            CBool::True
        } else {
            CBool::False
        }
    }
}

/// nccl-tests' `jsonDouble`: a number, or the string `"nan"` for what is not finite.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's serialize_with passes a reference
fn c_double<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_str("nan")
    }
}

/// RFC 3339 (`2026-11-21T05:00:00Z`) as nccl-tests' `%Y-%m-%d %H:%M:%S`.
fn c_time(rfc3339: &str) -> String {
    rfc3339.get(..19).unwrap_or(rfc3339).replacen('T', " ", 1)
}

/// `2.28.9` as NCCL's version code 22809 (`major * 10000 + minor * 100 + patch`); 0 if unreadable.
fn version_code(version: &str) -> i64 {
    let mut parts = version.split(['.', '-', '+']).map(|p| p.parse::<i64>().ok());
    match (parts.next().flatten(), parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b), Some(c)) => a * 10000 + b * 100 + c,
        _ => 0,
    }
}

/// nccl-tests' `computeIterStats` over `times`: p50 = `sorted[n/2]`, p95/p99 nearest rank
/// (`min(n-1, ceil(n p / 100) - 1)`), population standard deviation.
fn per_iteration(times_us: Vec<f64>, per_process: Vec<Vec<f64>>) -> PerIteration {
    let mut sorted = times_us.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let at = |p: usize| sorted[(n - 1).min((n * p).div_ceil(100).saturating_sub(1))];
    let avg = sorted.iter().sum::<f64>() / n as f64;
    let stdev = (sorted.iter().map(|t| (t - avg) * (t - avg)).sum::<f64>() / n as f64).sqrt();
    PerIteration {
        skipped_iterations: 0,
        min_us: sorted[0],
        max_us: sorted[n - 1],
        avg_us: avg,
        p50_us: sorted[n / 2],
        p95_us: at(95),
        p99_us: at(99),
        stdev_us: stdev,
        cv_pct: if avg > 0.0 { stdev / avg * 100.0 } else { 0.0 },
        times_us,
        per_process_max_times_us: if per_process.len() > 1 { per_process } else { Vec::new() },
    }
}

fn record(r: &SizeResult, pattern: &str) -> Record {
    let iters = r.iters.max(1);
    let per_process: Vec<Vec<f64>> = r.rank_samples_us.chunks(iters).map(<[f64]>::to_vec).collect();
    let slowest: Vec<f64> = (0..iters)
        .map(|i| {
            per_process
                .iter()
                .filter_map(|p| p.get(i))
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b))
        })
        .collect();
    // A run without per-rank samples (none in practice) falls back to the reduced ones.
    let times = if per_process.is_empty() {
        r.samples_us.clone()
    } else {
        slowest
    };
    Record {
        size: r.size_bytes,
        count: r.count,
        type_: "float".into(),
        redop: redop(pattern).into(),
        root: ROOT.into(),
        out_of_place: Placement {
            time: r.time_us,
            alg_bw: r.algbw_gbps,
            bus_bw: r.busbw_gbps,
            nwrong: r.wrong.map(|w| w as f64),
        },
        out_of_place_per_iter: per_iteration(times, per_process),
        in_place: None,
        actual_iterations: r.iters,
        experiment_name: String::new(),
    }
}

fn config(info: &RunInfo) -> Config {
    let flag = |k: &str| info.config.get(k).and_then(serde_json::Value::as_u64);
    let step_factor = flag("stepfactor").unwrap_or(2);
    let mut devices = Vec::new();
    for h in &info.hosts {
        for &gpu in &h.gpus {
            devices.push(Device {
                rank: devices.len(),
                group: 0,
                pid: -1,
                hostname: h.hostname.clone(),
                device: gpu,
                device_hex: String::new(),
                device_info: String::new(),
            });
        }
    }
    Config {
        nthreads: 1,
        ngpus: info.settings.gpus_per_rank,
        minimum_bytes: flag("minbytes").unwrap_or(0),
        maximum_bytes: flag("maxbytes").unwrap_or(0),
        step_factor: (step_factor > 1).then_some(step_factor),
        step_bytes: (step_factor <= 1).then(|| flag("stepbytes").unwrap_or(0)),
        warmup_iters: info.settings.warmup,
        iterations: info.settings.iters,
        aggregated_iterations: 1,
        validation: u32::from(info.settings.check),
        graph: 0,
        blocking_collectives: CBool::False,
        per_iter_timing: CBool::True,
        per_iter_skip: 0,
        parallel_init: CBool::False,
        devices,
    }
}

/// The document for a run; `error` is why it failed (None: it completed).
pub fn document(info: &RunInfo, results: &[SizeResult], error: Option<&str>, end_time: &str) -> NcclTestsJson {
    let pattern = info.settings.pattern.as_str();
    let wrong = super::run_wrong(info, results).unwrap_or(0);
    let avg = avg_busbw(results);
    let okay = match &info.bandwidth_gate {
        None => "unchecked".to_string(),
        Some(g) => if g.passed { "true" } else { "false" }.to_string(),
    };
    NcclTestsJson {
        version: VERSION,
        start_time: c_time(&info.start_time),
        args: info.command.clone(),
        env: info.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        nccl_version: info.nccl.as_ref().map_or(0, |n| version_code(&n.version)),
        config: config(info),
        results: results.iter().map(|r| record(r, pattern)).collect(),
        out_of_bounds: OutOfBounds {
            count: wrong,
            okay: (wrong == 0).into(),
        },
        average_bus_bandwidth: AverageBusBandwidth {
            bandwidth: avg.unwrap_or(f64::NAN),
            okay,
        },
        errors: vec![error.unwrap_or_default().to_string()],
        end_time: c_time(end_time),
    }
}

/// The JSON Schema of the `-J` file, generated from these types (committed as
/// `docs/schema/nccl-tests-json.schema.json`).
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(NcclTestsJson)).unwrap_or_default()
}

/// Proves before measuring, as `--out` is proved, that `-J` can be written: claims it as an
/// output of the run ([`tcpx_files::claim_output`]: its directory exists, no other output is at
/// its path) and writes, syncs and removes a probe file beside it (a read-only or missing place
/// is found before the sweep, not after it). Every error names the path and the flag.
pub fn check_destination(path: &Path) -> io::Result<()> {
    check_writable("-J", path)?;
    // Where the file will land (`path.N` when `path` exists, as [`write`] picks it) is an output
    // too: another output given that name is refused now, before anything is measured (on
    // 1dfe633, `-J j --drain-list j.1` was refused after the whole run).
    let landing = (0..=1000)
        .map(|n| PathBuf::from(format!("{}.{n}", path.display())))
        .find(|p| fs::symlink_metadata(p).is_err());
    match (fs::symlink_metadata(path).is_ok(), landing) {
        (true, Some(landing)) => tcpx_files::claim_output(&landing, "-J").map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("-J {} (lands on {}): {e}", path.display(), landing.display()),
            )
        }),
        _ => Ok(()),
    }
}

/// The checks of [`check_destination`] for any file a flag names (`--drain-list`, ...): the
/// claim, then the probe. No directory is made.
pub(crate) fn check_writable(flag: &str, path: &Path) -> io::Result<()> {
    tcpx_files::claim_output(path, flag)
        .map_err(|e| io::Error::new(e.kind(), format!("{flag} {}: {e}", path.display())))?;
    let dir = tcpx_files::parent_of(path);
    let probe = dir.join(format!(".tcpx-perf-json-probe.{}", std::process::id()));
    let written = tcpx_files::create_new(&probe).and_then(|mut f| {
        let r = f
            .write_all(b"tcpx-perf checks that -J can be written\n")
            .and_then(|()| f.sync_all())
            .and(tcpx_files::close(f));
        // Removed only once this job made it.
        let _ = fs::remove_file(&probe);
        r
    });
    written.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "{flag} {}: cannot write in {}: {e}; choose another file",
                path.display(),
                dir.display()
            ),
        )
    })
}

/// Writes the document to `path`, never replacing a file (nor a link): if `path` exists, to the first free
/// `path.0`, `path.1`, ... as nccl-tests. Written whole to a temporary file first, then linked
/// into place (a link never replaces a file), so a reader never finds half a document. The path
/// written.
pub fn write(path: &Path, doc: &NcclTestsJson) -> io::Result<PathBuf> {
    let text = serde_json::to_string(doc).map_err(io::Error::other)?;
    // Created exclusively, never through a link; a name is linked to it below, so a link at
    // `path` is passed over as any existing file is, never written through.
    let (tmp, mut file) =
        tcpx_files::create_temporary(path).map_err(|e| io::Error::new(e.kind(), format!("-J {e}")))?;
    let written = (|| {
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        tcpx_files::close(file)?;
        let mut candidate = path.to_path_buf();
        for n in 0..=1000 {
            match fs::hard_link(&tmp, &candidate) {
                Ok(()) => return Ok(candidate),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    candidate = PathBuf::from(format!("{}.{n}", path.display()));
                }
                Err(e) => return Err(io::Error::new(e.kind(), format!("-J {}: {e}", candidate.display()))),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "-J {}: it and {0}.0 to {0}.1000 exist: choose another file",
                path.display()
            ),
        ))
    })();
    let _ = fs::remove_file(&tmp);
    written
}

#[cfg(test)]
#[path = "nccl_json_tests.rs"]
mod tests;
