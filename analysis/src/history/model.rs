//! What the history stores: a run's provenance, its configuration key, per size its figures and
//! per-iteration samples.

use serde::{Deserialize, Serialize};

pub use crate::model::Sample;
use crate::model::{Family, Format, Row, Run, Series, Waiver};

/// The configuration a series belongs to: runs compare only within one. Fields a format does not
/// record are None and left out of the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Config {
    /// `tcpx-perf` or the benchmark that wrote the log (`nccl-tests`, `rccl-tests`).
    pub tool: String,
    pub pattern: String,
    /// The series' distinguishing fields as the parser names them (tcpx-perf scope/dir/mem,
    /// nccl-tests type/redop when a log holds several, the placement when not out-of-place).
    pub variant: String,
    pub scope: Option<String>,
    pub dir: Option<String>,
    pub mem: Option<String>,
    pub ranks: Option<i64>,
    pub endpoints: Option<i64>,
    pub nodes: Option<i64>,
    pub plugin: Option<String>,
    pub chunk: Option<i64>,
    pub channels: Option<i64>,
    pub window: Option<i64>,
}

impl Config {
    /// The key: `field=value` pairs in a fixed order, unknown fields left out.
    pub fn key(&self) -> String {
        let mut parts = vec![format!("tool={}", self.tool), format!("pattern={}", self.pattern)];
        // tcpx-perf's variant is its scope/dir/mem, which follow as fields of their own.
        let shape: Vec<String> = [("scope", &self.scope), ("dir", &self.dir), ("mem", &self.mem)]
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
            .collect();
        if !self.variant.is_empty() && self.variant != shape.join(",") {
            parts.push(format!("variant={}", self.variant));
        }
        parts.extend(shape);
        parts.extend(self.plugin.as_ref().map(|v| format!("plugin={v}")));
        let nums = [
            ("ranks", self.ranks),
            ("endpoints", self.endpoints),
            ("nodes", self.nodes),
            ("chunk", self.chunk),
            ("channels", self.channels),
            ("window", self.window),
        ];
        for (k, v) in nums {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        }
        parts.join(" ")
    }

    /// The fields it keys on as [`crate::comparable`] names them, the job shape left out
    /// ([`Config::shape`]): what every comparison checks.
    pub fn configuration(&self) -> crate::comparable::Configuration {
        let text = [
            ("scope", &self.scope),
            ("dir", &self.dir),
            ("mem", &self.mem),
            ("plugin", &self.plugin),
        ];
        let nums = [
            ("chunk", self.chunk),
            ("channels", self.channels),
            ("window", self.window),
        ];
        text.into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .chain(
                nums.into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string()))),
            )
            .collect()
    }

    /// The job shape in the keys of [`Run::shape`].
    pub fn shape(&self) -> std::collections::BTreeMap<&'static str, String> {
        [
            ("MPI ranks", self.ranks),
            ("endpoints", self.endpoints),
            ("nodes", self.nodes),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v.to_string())))
        .collect()
    }
}

/// One size of one series as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredRow {
    pub size: u64,
    pub summary: Sample,
    pub wrong: Option<f64>,
    /// NCCL of the same run (`tcpx-perf --baseline nccl`), when the run has it.
    pub nccl: Option<Sample>,
    pub samples: Vec<Sample>,
    pub nccl_samples: Vec<Sample>,
}

/// One series of a run to store: its configuration and rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesRecord {
    pub config: Config,
    pub rows: Vec<StoredRow>,
}

/// Where a run came from and what it ran with: stored once per run, read back with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// SHA-256 of the run's files (a log holding several runs: of the file, then `#` and the
    /// run's place in it): the same run added twice is recognised by it.
    pub content_sha256: String,
    /// Where it was read from (absolute path; `PATH#N` for the N-th run of a log).
    pub source: String,
    pub format: String,
    pub tool: String,
    /// RFC 3339 UTC, the series' order.
    pub start_time: String,
    /// Where the start time came from: `summary.json`, `--start-time`, or `file mtime`.
    pub time_from: String,
    pub git_commit: Option<String>,
    pub plugin_sha256: Option<String>,
    pub hosts: Option<String>,
    pub nccl_version: Option<String>,
    /// A stdout log: the result directory it says it wrote (that directory is the same run).
    pub result_dir: Option<String>,
}

/// One run to store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    #[serde(flatten)]
    pub provenance: Provenance,
    pub status: Option<String>,
    /// The waivers the run was admitted under ([`crate::admit`]), e.g. `FORCED`, comma-joined.
    pub allowed: Option<String>,
    pub series: Vec<SeriesRecord>,
    /// tcpx-perf's verdict per node (`summary.json` `node_verdicts`); empty for logs and older runs.
    pub nodes: Vec<NodeVerdict>,
    /// The run as the gate reads it: what a copy is recognised by ([`crate::admit::same_run`]).
    #[serde(skip)]
    pub run: crate::model::Run,
}

/// One node's verdict in one run (tcpx-perf's `node_verdicts`, docs/drain.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub host: String,
    /// `healthy`, `suspect` or `bad`.
    pub verdict: String,
    pub evidence: String,
}

/// A stored run of one configuration, read back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredRun {
    pub id: i64,
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The waivers it was added under ([`RunRecord::allowed`]).
    pub allowed: Option<String>,
    pub rows: Vec<StoredRow>,
}

/// Formats seconds since the Unix epoch as RFC 3339 UTC (`2026-11-25T17:31:29Z`).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Accepts `YYYY-MM-DDTHH:MM:SS[.frac]Z` (what tcpx-perf writes), the form that sorts by time
/// as text.
pub fn valid_time(t: &str) -> bool {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && t.ends_with('Z')
        && (b.len() == 20 || (b[19] == b'.' && digits(20..b.len() - 1) && b.len() > 21))
}

/// Rebuilds a stored run of one configuration as the gate's [`Run`].
pub(crate) fn as_run(c: &Config, r: &StoredRun) -> Run {
    let pv = &r.provenance;
    // The format it was read from decides how precisely its figures were printed.
    let format = match pv.format.as_str() {
        "tcpx-perf-dir" => Format::TcpxPerfDir,
        "tcpx-perf-text" => Format::TcpxPerfText,
        "nccl-tests-json" => Format::NcclTestsJson,
        "rccl-tests-json" => Format::RcclTestsJson,
        _ if c.tool == "tcpx-perf" && pv.result_dir.is_none() => Format::TcpxPerfDir,
        _ => Format::NcclTestsText,
    };
    let mut run = Run::new(&format!("{} (history run {})", pv.source, r.id), format);
    let dir = if format == Format::TcpxPerfDir {
        Some(pv.source.clone())
    } else {
        pv.result_dir.clone()
    };
    for (k, v) in [
        ("git_commit", pv.git_commit.clone()),
        ("plugin", c.plugin.clone()),
        ("result_dir", dir),
        ("start_time", Some(pv.start_time.clone())),
    ] {
        if let Some(v) = v {
            run.labels.insert(k.into(), v);
        }
    }
    for w in r.allowed.iter().flat_map(|a| a.split(',')) {
        if let Some(w) = Waiver::from_label(w) {
            run.waivers.push((
                w,
                format!("{} (history run {}): added under {}", pv.source, r.id, w.flag()),
            ));
        }
    }
    let shape = if c.tool == "tcpx-perf" {
        [("ranks", c.ranks), ("endpoints", c.endpoints), ("nodes", c.nodes)]
    } else {
        [("ranks", c.endpoints), ("endpoints", None), ("nodes", None)]
    };
    for (k, v) in shape {
        if let Some(v) = v {
            run.labels.insert(k.into(), v.to_string());
        }
    }
    run.config = c.configuration();
    run.status = Some("ok".into());
    let variant = c
        .variant
        .split(',')
        .filter(|x| !x.starts_with("placement="))
        .collect::<Vec<_>>()
        .join(",");
    run.series.push(Series {
        pattern: c.pattern.clone(),
        family: Family::from_name(&c.pattern),
        variant,
        rows: r
            .rows
            .iter()
            .map(|x| {
                (
                    x.size,
                    Row {
                        size: x.size,
                        summary: x.summary,
                        wrong: x.wrong,
                        max_error: None,
                        samples: x.samples.clone(),
                    },
                )
            })
            .collect(),
    });
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1795627889), "2026-11-25T17:31:29Z");
        assert!(valid_time("2026-11-24T03:31:49Z"));
        assert!(valid_time("2026-11-24T03:31:49.25Z"));
        assert!(!valid_time("2026-11-24 03:31:49Z"));
        assert!(!valid_time("2026-11-24T03:31:49+01:00"));
    }
}
