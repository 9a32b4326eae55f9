//! The columns of results.csv per schema version (`results/README.md`), as tcpx-schema declares
//! them for tcpx-perf's writer: each version's columns required, none a later version added, and
//! every figure finite and >= 0.

use tcpx_schema::{dating_columns, required_columns, Empty, RESULTS_COLUMNS, UNVERIFIED};

use super::{refuse, Csv};
use crate::error::Failure;

/// The columns a schema version's results.csv must (not) have: every column of its version
/// ([`required_columns`]: a file missing one was cut or edited, and the figures it held, such as
/// `bytes_moved`, would go unchecked); none that dates a later version (`bytes_verified_by`
/// since 2, `nccl_time_us` since 3, `tcp_timeouts` since 4).
pub(super) fn check_header(res: &Csv, version: Option<u64>) -> Result<(), Failure> {
    let Some(v) = version else { return Ok(()) };
    for col in required_columns(u32::try_from(v).unwrap_or(u32::MAX)) {
        if !res.cols.contains_key(col.name) {
            return Err(refuse(
                &res.name,
                Some(1),
                col.name,
                format!(
                    "missing: schema_version {v} requires this column (since schema {})",
                    col.since
                ),
            ));
        }
    }
    for col in dating_columns() {
        if v < u64::from(col.since) && res.cols.contains_key(col.name) {
            return Err(refuse(
                &res.name,
                Some(1),
                col.name,
                format!(
                    "schema_version {v} predates this column (added in schema {})",
                    col.since
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a row whose counts and figures are not finite and non-negative (empty where not
/// measured; `bytes_moved` may say `unverified`), or that leaves one empty that every row has
/// ([`Empty::Refused`]), or whose counts are not whole numbers. A NaN or a negative time is a
/// broken file.
pub(super) fn check_figures(csv: &Csv, line: usize, r: &[String]) -> Result<(), Failure> {
    for col in RESULTS_COLUMNS.iter().filter(|c| c.is_number()) {
        let Some(v) = csv.get(r, col.name) else { continue };
        if v.is_empty() {
            if col.empty == Empty::Refused {
                return Err(refuse(
                    &csv.name,
                    Some(line),
                    col.name,
                    "empty: every row has this figure",
                ));
            }
            continue;
        }
        if col.cell == tcpx_schema::Cell::CountOrUnverified && v == UNVERIFIED {
            continue;
        }
        if !v.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0) {
            return Err(refuse(
                &csv.name,
                Some(line),
                col.name,
                format!("{v:?} is not a finite number >= 0"),
            ));
        }
    }
    let counts = RESULTS_COLUMNS
        .iter()
        .filter(|c| matches!(c.cell, tcpx_schema::Cell::Count | tcpx_schema::Cell::CountOrUnverified));
    for col in counts {
        let Some(v) = csv.get(r, col.name).filter(|v| !v.is_empty() && *v != UNVERIFIED) else {
            continue;
        };
        if v.parse::<u64>().is_err() {
            return Err(refuse(
                &csv.name,
                Some(line),
                col.name,
                format!("{v:?} is not a whole number: a count"),
            ));
        }
    }
    Ok(())
}
