//! The one home of the result files' schema (`results/README.md`): tcpx-perf writes its CSV
//! files with the row types below and tcpx-analyze admits `results.csv` by [`RESULTS_COLUMNS`],
//! which the same declaration produces. Adding a column to `results.csv` is one line in
//! [`results_csv!`]'s invocation: the row gains the field (the compiler then asks tcpx-perf for
//! its value) and admission learns its type and the schema version that added it.

use serde::Serialize;

/// The schema version tcpx-perf writes.
pub const SCHEMA_VERSION: u32 = 4;

/// Every schema version tcpx-analyze admits, oldest first: schema 1 (`bytes_moved` copied the
/// completions), 2 (`bytes_moved` measured or `unverified`, with the witnesses beside it), 3
/// (`--baseline nccl`'s `nccl_*` columns), 4 (the `tcp_*` loss counters).
pub const SCHEMA_VERSIONS: [u32; 4] = [1, 2, 3, 4];

/// The verdicts summary.json's `node_verdicts` may hold (docs/drain.md), mildest first.
pub const NODE_VERDICTS: [&str; 3] = ["healthy", "suspect", "bad"];

/// `bytes_moved` where no witness saw the payload exactly.
pub const UNVERIFIED: &str = "unverified";

/// What a cell holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// One of [`SCHEMA_VERSIONS`].
    Version,
    /// A word or a list (`pattern`, `plugin`, `wire_by_iface`).
    Text,
    /// A whole number >= 0 (bytes, counts).
    Count,
    /// A count, or [`UNVERIFIED`] (`bytes_moved`).
    CountOrUnverified,
    /// A finite number >= 0 (times, bandwidths, ratios, CPU seconds).
    Figure,
}

/// Which files of a schema version have a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Every file of its version and later: a file without it was cut or edited.
    Required,
    /// [`Header::Required`], and no file of an earlier version has it: its presence dates a file.
    Dates,
    /// Added later within its version: not every file of that version has it.
    Optional,
}

/// Whether a row may leave the cell empty (a figure not measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    /// Every row has it.
    Refused,
    /// Empty where not measured (`wrong` with `-c 0`, `nccl_*` without the baseline), or where
    /// earlier writers left it so.
    Allowed,
}

/// One column of `results.csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub cell: Cell,
    /// The schema version that added it.
    pub since: u32,
    pub header: Header,
    pub empty: Empty,
}

impl Column {
    /// A count or a figure (what admission checks to be a finite number >= 0).
    pub fn is_number(&self) -> bool {
        matches!(self.cell, Cell::Count | Cell::CountOrUnverified | Cell::Figure)
    }
}

/// Declares `results.csv`: the row type, its fields in column order, and [`RESULTS_COLUMNS`].
/// Each line: `field: Rust type => "column", Cell, since version, Header, Empty;`.
macro_rules! results_csv {
    ($( $(#[$doc:meta])* $field:ident : $ty:ty => $name:literal, $cell:ident, since $since:literal, $header:ident, $empty:ident; )*) => {
        /// One row of `results.csv`: the run's columns around the per-size figures, each value
        /// spelled as the file holds it (serde writes the fields in this order, named as below).
        #[derive(Debug, Serialize, Default)]
        pub struct ResultRow<'a> {
            $( $(#[$doc])* #[serde(rename = $name)] pub $field: $ty, )*
        }

        /// `results.csv`'s columns in file order.
        pub const RESULTS_COLUMNS: &[Column] = &[
            $( Column { name: $name, cell: Cell::$cell, since: $since, header: Header::$header, empty: Empty::$empty }, )*
        ];
    };
}

results_csv! {
    schema_version: u32 => "schema_version", Version, since 1, Required, Refused;
    pattern: &'a str => "pattern", Text, since 1, Required, Refused;
    scope: &'a str => "scope", Text, since 1, Required, Refused;
    dir: &'a str => "dir", Text, since 1, Required, Refused;
    mem: &'a str => "mem", Text, since 1, Required, Refused;
    size_bytes: u64 => "size_bytes", Count, since 1, Required, Refused;
    count: u64 => "count", Count, since 1, Required, Refused;
    type_: &'a str => "type", Text, since 1, Required, Refused;
    iters: usize => "iters", Count, since 1, Required, Refused;
    time_us: f64 => "time_us", Figure, since 1, Required, Refused;
    algbw_gbps: f64 => "algbw_gbps", Figure, since 1, Required, Refused;
    busbw_gbps: f64 => "busbw_gbps", Figure, since 1, Required, Refused;
    netbw_gbps: f64 => "netbw_gbps", Figure, since 3, Required, Refused;
    /// Empty when the data check was off (`-c 0`).
    wrong: Option<u64> => "wrong", Count, since 1, Required, Allowed;
    send_peers_in_flight: u32 => "send_peers_in_flight", Count, since 3, Required, Allowed;
    recv_peers_in_flight: u32 => "recv_peers_in_flight", Count, since 3, Required, Allowed;
    time_min_us: f64 => "time_min_us", Figure, since 1, Required, Refused;
    time_median_us: f64 => "time_median_us", Figure, since 1, Required, Refused;
    time_p99_us: f64 => "time_p99_us", Figure, since 1, Required, Refused;
    time_cv_pct: f64 => "time_cv_pct", Figure, since 1, Required, Refused;
    bytes_planned: u64 => "bytes_planned", Count, since 1, Required, Refused;
    /// A measured figure, or [`UNVERIFIED`] where no source sees payload exactly.
    bytes_moved: String => "bytes_moved", CountOrUnverified, since 1, Required, Refused;
    /// `data`, `plugin (claim)`, `unpack (claim)`, `wire (lower bound)` joined by `+`; `none`.
    bytes_verified_by: String => "bytes_verified_by", Text, since 2, Dates, Refused;
    wire_rx_bytes: Option<u64> => "wire_rx_bytes", Count, since 2, Required, Allowed;
    wire_payload_ratio: Option<f64> => "wire_payload_ratio", Figure, since 2, Required, Allowed;
    wire_by_iface: String => "wire_by_iface", Text, since 2, Required, Allowed;
    ranks: usize => "ranks", Count, since 1, Required, Refused;
    endpoints: usize => "endpoints", Count, since 1, Required, Refused;
    nodes: usize => "nodes", Count, since 1, Required, Refused;
    plugin: &'a str => "plugin", Text, since 1, Required, Refused;
    abi: u32 => "abi", Count, since 1, Required, Allowed;
    /// CPU time of the timed iterations per rank (mean over ranks), every thread of the rank.
    cpu_user_s: f64 => "cpu_user_s", Figure, since 3, Optional, Allowed;
    cpu_sys_s: f64 => "cpu_sys_s", Figure, since 3, Optional, Allowed;
    cpu_max_rank_s: f64 => "cpu_max_rank_s", Figure, since 3, Optional, Allowed;
    cpu_cores_per_rank: f64 => "cpu_cores_per_rank", Figure, since 3, Optional, Allowed;
    /// User + system seconds over all ranks per GB of network bytes moved; empty without bytes.
    cpu_s_per_gb: Option<f64> => "cpu_s_per_gb", Figure, since 3, Optional, Allowed;
    /// `--baseline nccl`: NCCL's figures beside tcpx-perf's; empty without it.
    nccl_time_us: Option<f64> => "nccl_time_us", Figure, since 3, Dates, Allowed;
    nccl_algbw_gbps: Option<f64> => "nccl_algbw_gbps", Figure, since 3, Required, Allowed;
    nccl_busbw_gbps: Option<f64> => "nccl_busbw_gbps", Figure, since 3, Required, Allowed;
    nccl_ratio: Option<f64> => "nccl_ratio", Figure, since 3, Required, Allowed;
    nccl_batch_time_us: Option<f64> => "nccl_batch_time_us", Figure, since 3, Required, Allowed;
    nccl_batch_algbw_gbps: Option<f64> => "nccl_batch_algbw_gbps", Figure, since 3, Required, Allowed;
    nccl_batch_busbw_gbps: Option<f64> => "nccl_batch_busbw_gbps", Figure, since 3, Required, Allowed;
    nccl_wrong: Option<u64> => "nccl_wrong", Count, since 3, Required, Allowed;
    /// TCP loss counters of the hosts' network namespaces over the timed iterations; empty
    /// where no host could read them.
    tcp_retrans_segs: Option<u64> => "tcp_retrans_segs", Count, since 4, Required, Allowed;
    tcp_timeouts: Option<u64> => "tcp_timeouts", Count, since 4, Dates, Allowed;
}

/// The columns every `results.csv` of schema `version` has, by the version that added them
/// (then in file order).
pub fn required_columns(version: u32) -> Vec<&'static Column> {
    let mut cols: Vec<&Column> = RESULTS_COLUMNS
        .iter()
        .filter(|c| c.since <= version && c.header != Header::Optional)
        .collect();
    cols.sort_by_key(|c| c.since);
    cols
}

/// The columns whose presence says a file is of their version or later.
pub fn dating_columns() -> impl Iterator<Item = &'static Column> {
    RESULTS_COLUMNS.iter().filter(|c| c.header == Header::Dates)
}

/// The column called `name`.
pub fn column(name: &str) -> Option<&'static Column> {
    RESULTS_COLUMNS.iter().find(|c| c.name == name)
}

/// One row of `samples.csv`: one timed iteration, its time reduced over ranks.
#[derive(Debug, Serialize, Default)]
pub struct SampleRow<'a> {
    pub schema_version: u32,
    pub pattern: &'a str,
    pub size_bytes: u64,
    pub iter: usize,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
}

/// One row of `rank_samples.csv`: one rank's time of one timed iteration.
#[derive(Debug, Serialize, Default)]
pub struct RankSampleRow<'a> {
    pub schema_version: u32,
    pub pattern: &'a str,
    pub size_bytes: u64,
    pub iter: usize,
    pub rank: usize,
    pub time_us: f64,
}

/// One row of `pairs.csv`: one link of the matrix at one size: a directed endpoint pair, or in a
/// job past 65536 endpoint pairs a NIC's link or a node pair (`level`; ranks and GPUs empty).
#[derive(Debug, Serialize, Default)]
pub struct PairRow<'a> {
    pub schema_version: u32,
    pub pattern: &'a str,
    pub size_bytes: u64,
    pub src_rank: Option<usize>,
    pub src_gpu: Option<usize>,
    pub src_host: &'a str,
    pub dst_rank: Option<usize>,
    pub dst_gpu: Option<usize>,
    pub dst_host: &'a str,
    pub bytes: u64,
    /// From the sender's first post of the pair's bytes to the receiver's last byte in its
    /// buffer (results/README.md).
    pub time_us: f64,
    /// `bytes / time_us`; empty where `above_link` (not a rate).
    pub gbps: Option<f64>,
    /// What the pair's path carries (the sender's NIC on the receiver's rail: its shaper or
    /// link speed), GB/s; empty when unknown.
    pub link_gbps: Option<f64>,
    /// The time is shorter than the link allows for the bytes: an error of measurement.
    pub above_link: bool,
    /// `endpoint`, `nic` or `node`: what the row's link is.
    pub level: &'a str,
    /// The receiver's NIC (the link's rail); empty for a node pair.
    pub rail: &'a str,
    /// Directed endpoint pairs the link carries (1 for an endpoint pair).
    pub endpoint_pairs: u64,
}

/// One row of `nccl_samples.csv` (`--baseline nccl`): one of NCCL's timed iterations.
#[derive(Debug, Serialize, Default)]
pub struct NcclSampleRow<'a> {
    pub schema_version: u32,
    pub pattern: &'a str,
    pub size_bytes: u64,
    /// `barrier` (tcpx-perf's timing) or `batch` (nccl-tests').
    pub timing: &'static str,
    pub iter: usize,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
}

#[cfg(test)]
mod tests;
