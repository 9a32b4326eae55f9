//! The columns of results.csv per schema version (`results/README.md`): each version's
//! columns required, none a later version added, and every figure finite and >= 0.

use super::{refuse, Csv};
use crate::error::Failure;

/// The columns of results.csv in schema 1, which every later version keeps.
const COLUMNS_V1: [&str; 24] = [
    "schema_version",
    "pattern",
    "scope",
    "dir",
    "mem",
    "size_bytes",
    "count",
    "type",
    "iters",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "time_min_us",
    "time_median_us",
    "time_p99_us",
    "time_cv_pct",
    "bytes_planned",
    "bytes_moved",
    "ranks",
    "endpoints",
    "nodes",
    "plugin",
    "abi",
];

/// Added in schema 2 (the witnesses of bytes_moved).
const COLUMNS_V2: [&str; 4] = [
    "bytes_verified_by",
    "wire_rx_bytes",
    "wire_payload_ratio",
    "wire_by_iface",
];

/// Added in schema 3 (`--baseline nccl`), with netbw and the peers in flight that every writer
/// of schema 3 has; the `cpu_*` columns came later within it and are not required.
const COLUMNS_V3: [&str; 11] = [
    "netbw_gbps",
    "send_peers_in_flight",
    "recv_peers_in_flight",
    "nccl_time_us",
    "nccl_algbw_gbps",
    "nccl_busbw_gbps",
    "nccl_ratio",
    "nccl_batch_time_us",
    "nccl_batch_algbw_gbps",
    "nccl_batch_busbw_gbps",
    "nccl_wrong",
];

/// Added in schema 4 (TCP retransmissions and timeouts around each size).
const COLUMNS_V4: [&str; 2] = ["tcp_retrans_segs", "tcp_timeouts"];

/// Every column results.csv of schema `v` has (a file missing one was cut or edited; the
/// figures it held, such as `bytes_moved`, would go unchecked).
fn required_columns(v: u64) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&str, u64)> = COLUMNS_V1.iter().map(|c| (*c, 1)).collect();
    if v >= 2 {
        out.extend(COLUMNS_V2.iter().map(|c| (*c, 2)));
    }
    if v >= 3 {
        out.extend(COLUMNS_V3.iter().map(|c| (*c, 3)));
    }
    if v >= 4 {
        out.extend(COLUMNS_V4.iter().map(|c| (*c, 4)));
    }
    out
}

/// The columns a schema version's results.csv must (not) have: every column of its version
/// ([`required_columns`]); none that a later version added (`bytes_verified_by` since 2,
/// `nccl_time_us` since 3, `tcp_timeouts` since 4).
pub(super) fn check_header(res: &Csv, version: Option<u64>) -> Result<(), Failure> {
    let Some(v) = version else { return Ok(()) };
    for (col, since) in required_columns(v) {
        if !res.cols.contains_key(col) {
            return Err(refuse(
                &res.name,
                Some(1),
                col,
                format!("missing: schema_version {v} requires this column (since schema {since})"),
            ));
        }
    }
    for (col, since) in [("bytes_verified_by", 2), ("nccl_time_us", 3), ("tcp_timeouts", 4)] {
        if v < since && res.cols.contains_key(col) {
            return Err(refuse(
                &res.name,
                Some(1),
                col,
                format!("schema_version {v} predates this column (added in schema {since})"),
            ));
        }
    }
    Ok(())
}

/// Columns holding a count or a figure: empty (not measured) or a finite number >= 0
/// (`bytes_moved` may say `unverified`). A NaN or a negative time is a broken file.
const FIGURES: [&str; 35] = [
    "count",
    "iters",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "netbw_gbps",
    "wrong",
    "send_peers_in_flight",
    "recv_peers_in_flight",
    "time_min_us",
    "time_median_us",
    "time_p99_us",
    "time_cv_pct",
    "bytes_planned",
    "bytes_moved",
    "wire_rx_bytes",
    "wire_payload_ratio",
    "ranks",
    "endpoints",
    "nodes",
    "abi",
    "cpu_user_s",
    "cpu_sys_s",
    "cpu_max_rank_s",
    "cpu_cores_per_rank",
    "cpu_s_per_gb",
    "nccl_time_us",
    "nccl_algbw_gbps",
    "nccl_busbw_gbps",
    "nccl_ratio",
    "nccl_batch_time_us",
    "nccl_batch_algbw_gbps",
    "nccl_batch_busbw_gbps",
    "tcp_retrans_segs",
    "tcp_timeouts",
];

/// Figures every row has (the others may be empty: `wrong` with -c 0, `nccl_*` without the
/// baseline, the wire columns where no counter was read).
const FIGURES_NEEDED: [&str; 12] = [
    "count",
    "iters",
    "time_min_us",
    "time_median_us",
    "time_p99_us",
    "time_cv_pct",
    "bytes_planned",
    "bytes_moved",
    "ranks",
    "endpoints",
    "nodes",
    "netbw_gbps",
];

/// Columns that count (bytes, iterations, ranks, wrong elements): whole numbers where not
/// empty (`bytes_moved` may say `unverified`).
const COUNTS: [&str; 16] = [
    "size_bytes",
    "count",
    "iters",
    "wrong",
    "send_peers_in_flight",
    "recv_peers_in_flight",
    "bytes_planned",
    "bytes_moved",
    "wire_rx_bytes",
    "ranks",
    "endpoints",
    "nodes",
    "abi",
    "nccl_wrong",
    "tcp_retrans_segs",
    "tcp_timeouts",
];

/// Refuses a row whose figures are not finite and non-negative ([`FIGURES`]), or that lacks
/// one every row has ([`FIGURES_NEEDED`]), or whose counts are not whole numbers ([`COUNTS`]).
pub(super) fn check_figures(csv: &Csv, line: usize, r: &[String]) -> Result<(), Failure> {
    for col in FIGURES {
        let Some(v) = csv.get(r, col) else { continue };
        if v.is_empty() {
            if FIGURES_NEEDED.contains(&col) {
                return Err(refuse(&csv.name, Some(line), col, "empty: every row has this figure"));
            }
            continue;
        }
        if col == "bytes_moved" && v == "unverified" {
            continue;
        }
        if !v.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0) {
            return Err(refuse(
                &csv.name,
                Some(line),
                col,
                format!("{v:?} is not a finite number >= 0"),
            ));
        }
    }
    for col in COUNTS {
        let Some(v) = csv.get(r, col).filter(|v| !v.is_empty() && *v != "unverified") else {
            continue;
        };
        if v.parse::<u64>().is_err() {
            return Err(refuse(
                &csv.name,
                Some(line),
                col,
                format!("{v:?} is not a whole number: a count"),
            ));
        }
    }
    Ok(())
}
