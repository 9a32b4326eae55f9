//! The in-memory model shared by all input formats.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A metric that can be compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    Busbw,
    Algbw,
    Time,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::Busbw, Metric::Algbw, Metric::Time];

    /// Bandwidths are "higher is better", time is "lower is better".
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Metric::Time)
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::Time => "us",
            _ => "GB/s",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Busbw => "busbw",
            Metric::Algbw => "algbw",
            Metric::Time => "time",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        match s.trim().to_ascii_lowercase().as_str() {
            "busbw" | "bus_bw" | "busbw_gbps" => Some(Metric::Busbw),
            "algbw" | "alg_bw" | "algbw_gbps" => Some(Metric::Algbw),
            "time" | "time_us" => Some(Metric::Time),
            _ => None,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Comparable pattern families. tcpx-perf and nccl-tests names map onto these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// tcpx-perf `sendrecv` ~ nccl-tests `sendrecv_perf`.
    Sendrecv,
    /// tcpx-perf `ring` busbw ~ nccl-tests `all_reduce_perf` busbw.
    Allreduce,
    /// tcpx-perf `fullmesh` ~ nccl-tests `alltoall_perf`.
    Alltoall,
    /// tcpx-perf `pairs` (no nccl-tests equivalent).
    Pairs,
}

impl Family {
    /// Maps a pattern or collective name (tcpx-perf or nccl-tests) onto a family.
    pub fn from_name(name: &str) -> Option<Family> {
        let n = name.trim().to_ascii_lowercase();
        // nccl-tests built with MPI=1 may be installed as `all_reduce_perf_mpi`.
        let n = n.strip_suffix("_mpi").unwrap_or(&n);
        let n = n.strip_suffix("_perf").unwrap_or(n);
        match n {
            "sendrecv" => Some(Family::Sendrecv),
            "ring" | "all_reduce" | "allreduce" => Some(Family::Allreduce),
            "fullmesh" | "alltoall" | "all_to_all" => Some(Family::Alltoall),
            "pairs" => Some(Family::Pairs),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Sendrecv => "sendrecv (tcpx-perf sendrecv ~ nccl-tests sendrecv_perf)",
            Family::Allreduce => "all-reduce (tcpx-perf ring ~ nccl-tests all_reduce_perf)",
            Family::Alltoall => "all-to-all (tcpx-perf fullmesh ~ nccl-tests alltoall_perf)",
            Family::Pairs => "pairs (tcpx-perf only)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Family::Sendrecv => "sendrecv",
            Family::Allreduce => "allreduce",
            Family::Alltoall => "alltoall",
            Family::Pairs => "pairs",
        }
    }
}

/// One timed iteration (or one per-run value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
}

impl Sample {
    pub fn get(&self, m: Metric) -> f64 {
        match m {
            Metric::Busbw => self.busbw,
            Metric::Algbw => self.algbw,
            Metric::Time => self.time_us,
        }
    }
}

/// One size of one series: the run's summary value plus per-iteration samples when known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub size: u64,
    /// The run's headline value for this size (tcpx-perf results.csv, nccl-tests table/JSON).
    pub summary: Sample,
    /// Bytes that failed the data check (None: not checked).
    pub wrong: Option<f64>,
    /// The largest absolute error of the data check, as nccl-tests before 2.13 printed it in
    /// its `error` column (e.g. 2e-07): a magnitude, not a count (None: not reported).
    pub max_error: Option<f64>,
    /// Per-iteration samples (empty when the format has none).
    pub samples: Vec<Sample>,
}

/// One pattern within one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// The pattern or collective name as the input wrote it.
    pub pattern: String,
    /// Its family, when known.
    pub family: Option<Family>,
    /// Extra distinguishing fields (tcpx-perf scope/dir/mem), empty for nccl-tests.
    pub variant: String,
    /// Rows keyed by size.
    pub rows: BTreeMap<u64, Row>,
}

/// One pair-link measurement (tcpx-perf pairs.csv).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairLink {
    pub pattern: String,
    pub size: u64,
    pub src_rank: u32,
    /// GPU index on the node (`local_rank * g + i`), where pairs.csv has it.
    pub src_gpu: Option<u32>,
    pub src_host: String,
    pub dst_rank: u32,
    pub dst_gpu: Option<u32>,
    pub dst_host: String,
    pub gbps: f64,
    /// The receiver's NIC (`rail`, the NIC both ends of the flow use), where pairs.csv has it.
    pub rail: Option<String>,
}

/// The input format of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    TcpxPerfDir,
    TcpxPerfCsv,
    NcclTestsText,
    NcclTestsJson,
    /// tcpx-perf's own stdout table.
    TcpxPerfText,
    /// rccl-tests `-x FILE -Z json` output (JSON lines, or a JSON list since 2025-07).
    RcclTestsJson,
}

/// One run: one launch of tcpx-perf or nccl-tests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub source: String,
    pub format: Format,
    pub series: Vec<Series>,
    pub pairs: Vec<PairLink>,
    /// Total wrong bytes/elements reported by the run's footer or summary (None: unknown).
    pub wrong_total: Option<f64>,
    /// Status string (tcpx-perf summary.json `status`), when known.
    pub status: Option<String>,
    /// Plugin or NCCL version, ranks, hosts: free-form labels for reports.
    pub labels: BTreeMap<String, String>,
    /// Sizes whose bytes were neither data-checked nor verified by a witness that sees payload
    /// exactly, one line each naming file and row ([`crate::validate`]); empty for a checked run.
    pub unverified: Vec<String>,
    /// Why the run may not be judged without an `--allow-*` flag naming it (a forced run, one
    /// below `NCCL_TESTS_MIN_BW`, a results.csv whose completion is unknown), one line each;
    /// [`crate::admit::policy`] refuses or marks them.
    pub waivers: Vec<(Waiver, String)>,
    /// The configuration that changes a figure, as the run records it (tcpx-perf: summary.json;
    /// empty where a format records none): [`crate::comparable`].
    pub config: crate::comparable::Configuration,
}

/// What a run lacks that only a flag naming it lets the gate, `make-baseline` and `history add`
/// accept: each such run is refused by default and marked in every verdict when allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Waiver {
    /// A results.csv without its summary.json: whether the run completed is unknown.
    Incomplete,
    /// `tcpx-perf --force`: the run went on despite preflight's error findings.
    Forced,
    /// Sizes neither data-checked nor verified (`-c 0`).
    Unchecked,
    /// The average busbw was below 90% of `NCCL_TESTS_MIN_BW` (tcpx-perf exit 7).
    BelowMinBw,
}

impl Waiver {
    /// Every waiver, in the order verdicts name them.
    pub const ALL: [Waiver; 4] = [
        Waiver::Incomplete,
        Waiver::Forced,
        Waiver::Unchecked,
        Waiver::BelowMinBw,
    ];

    /// The flag that allows it.
    pub fn flag(self) -> &'static str {
        match self {
            Waiver::Incomplete => "--allow-incomplete",
            Waiver::Forced => "--allow-forced",
            Waiver::Unchecked => "--allow-unchecked",
            Waiver::BelowMinBw => "--allow-below-min-bw",
        }
    }

    /// The waiver a verdict's label names ([`Waiver::label`]).
    pub fn from_label(l: &str) -> Option<Waiver> {
        Waiver::ALL.into_iter().find(|w| w.label() == l.trim())
    }

    /// How a verdict names it.
    pub fn label(self) -> &'static str {
        match self {
            Waiver::Incomplete => "INCOMPLETE",
            Waiver::Forced => "FORCED",
            Waiver::Unchecked => "UNCHECKED",
            Waiver::BelowMinBw => "BELOW-MIN-BW",
        }
    }
}

impl Run {
    pub fn new(source: &str, format: Format) -> Run {
        Run {
            source: source.to_string(),
            format,
            series: Vec::new(),
            pairs: Vec::new(),
            wrong_total: None,
            status: None,
            labels: BTreeMap::new(),
            unverified: Vec::new(),
            waivers: Vec::new(),
            config: BTreeMap::default(),
        }
    }

    /// Sum of `wrong` over all rows plus the footer total; > 0 means wrong data.
    pub fn wrong_count(&self) -> f64 {
        let rows: f64 = self
            .series
            .iter()
            .flat_map(|s| s.rows.values())
            .filter_map(|r| r.wrong)
            .filter(|w| w.is_finite())
            .sum();
        rows.max(self.wrong_total.unwrap_or(0.0))
    }

    /// The job shape a run reports: endpoints (GPUs, NCCL ranks), MPI ranks and nodes.
    /// nccl-tests' "ranks" are NCCL ranks, i.e. endpoints; its MPI layout and nodes are not parsed.
    pub fn shape(&self) -> BTreeMap<&'static str, String> {
        let l = |k: &str| self.labels.get(k).cloned();
        let mut out = BTreeMap::new();
        let pairs = match self.format {
            Format::TcpxPerfDir | Format::TcpxPerfCsv | Format::TcpxPerfText => [
                ("endpoints", l("endpoints")),
                ("MPI ranks", l("ranks")),
                ("nodes", l("nodes")),
            ],
            Format::NcclTestsText | Format::NcclTestsJson | Format::RcclTestsJson => {
                [("endpoints", l("ranks")), ("MPI ranks", None), ("nodes", None)]
            }
        };
        for (k, v) in pairs {
            if let Some(v) = v {
                out.insert(k, v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(Family::from_name("sendrecv_perf"), Some(Family::Sendrecv));
        assert_eq!(Family::from_name("ring"), Some(Family::Allreduce));
        assert_eq!(Family::from_name("all_reduce_perf"), Some(Family::Allreduce));
        assert_eq!(Family::from_name("fullmesh"), Some(Family::Alltoall));
        assert_eq!(Family::from_name("all_reduce_perf_mpi"), Some(Family::Allreduce));
        assert_eq!(Family::from_name("AllReduce"), Some(Family::Allreduce));
        assert_eq!(Family::from_name("all_gather_perf_mpi"), None);
        assert_eq!(Family::from_name("broadcast_perf"), None);
    }
}
