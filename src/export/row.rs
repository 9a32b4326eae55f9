//! The one per-size row: every figure that `results.csv` and `summary.json` print for a size,
//! typed, taken from the result model ([`SizeResult`]) in this one place. `summary.json`
//! serializes it as it is; `results.csv` is a flat rendering of it (see [`super::csv`]) that
//! only changes how a value is spelled: `peers_in_flight` as two columns, an unverified
//! `bytes_moved` as the word `unverified` instead of null, the byte and CPU accounts as columns.

use serde::Serialize;

use crate::cputime::CpuCost;
use crate::delivery::ByteCheck;
use crate::report::{NcclFigures, SizeResult};
use crate::tcp_stats::TcpActivity;

/// The element type every size is counted in (as nccl-tests' `float`).
pub const DTYPE: &str = "float";

/// One size, as `summary.json`'s `results` holds it and `results.csv` flattens it.
#[derive(Serialize, schemars::JsonSchema)]
pub struct SizeRow<'a> {
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub iters: usize,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub busbw_factor: f64,
    pub netbw_gbps: f64,
    /// [sends, receives]: the most distinct peers one endpoint had requests posted to at once.
    pub peers_in_flight: [u32; 2],
    pub wrong: Option<u64>,
    pub time_min_us: f64,
    pub time_median_us: f64,
    pub time_p99_us: f64,
    pub time_max_us: f64,
    pub time_stdev_us: f64,
    pub time_cv_pct: f64,
    pub bytes_planned: u64,
    /// Payload per iteration seen by an exact witness; null = unverified.
    pub bytes_moved: Option<u64>,
    /// False when neither the data check nor an exact witness saw this size's bytes (`-c 0`).
    pub verified: bool,
    /// Every source's view of the bytes (wire counters per host and interface included).
    pub bytes: &'a ByteCheck,
    /// CPU time of the timed iterations.
    pub cpu: &'a CpuCost,
    /// TCP retransmitted segments and retransmission timeouts over the timed iterations, summed
    /// over the hosts' network namespaces, with each namespace's own counts (null: unread).
    pub tcp: Option<&'a TcpActivity>,
    /// `--baseline nccl`: NCCL's figures at this size (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<&'a NcclFigures>,
}

/// Significant digits of a rate or ratio: a time read to the nanosecond over tens of
/// microseconds or more resolves 1 in 10^4 at worst; 6 keep every digit a rate can carry.
pub const RATE_DIGITS: i32 = 6;

/// `v` to `digits` significant digits (a figure written at its precision, not at f64's:
/// `1632.1661499999998` is a sum's rounding error, not a measurement).
pub fn significant(v: f64, digits: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(digits - 1 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// Microseconds at the clock's resolution, the nanosecond.
pub fn whole_ns(us: f64) -> f64 {
    if us.is_finite() {
        (us * 1e3).round() / 1e3
    } else {
        us
    }
}

impl<'a> SizeRow<'a> {
    /// The row of one measured size.
    pub fn of(r: &'a SizeResult) -> Self {
        SizeRow {
            size_bytes: r.size_bytes,
            count: r.count,
            type_: DTYPE,
            iters: r.iters,
            time_us: whole_ns(r.time_us),
            algbw_gbps: significant(r.algbw_gbps, RATE_DIGITS),
            busbw_gbps: significant(r.busbw_gbps, RATE_DIGITS),
            busbw_factor: r.busbw_factor,
            netbw_gbps: significant(r.netbw_gbps, RATE_DIGITS),
            peers_in_flight: [r.peers_in_flight.0, r.peers_in_flight.1],
            wrong: r.wrong,
            time_min_us: whole_ns(r.stats.min),
            time_median_us: whole_ns(r.stats.median),
            time_p99_us: whole_ns(r.stats.p99),
            time_max_us: whole_ns(r.stats.max),
            time_stdev_us: whole_ns(r.stats.stdev),
            time_cv_pct: significant(r.stats.cv_pct, RATE_DIGITS),
            bytes_planned: r.bytes_planned,
            bytes_moved: r.bytes.measured,
            verified: r.verified(),
            bytes: &r.bytes,
            cpu: &r.cpu,
            tcp: r.tcp.as_ref(),
            nccl: r.nccl.as_ref(),
        }
    }

    /// The sources that saw this size's bytes, joined by `+` (`none` when nothing could).
    pub fn verified_by(&self) -> String {
        if self.bytes.sources.is_empty() {
            "none".to_string()
        } else {
            self.bytes.sources.join("+")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures, write_results, RunStatus};

    /// Both files print one row per size: every figure they share reads the same in each
    /// (an unverified `bytes_moved` is the word in the CSV and null in the JSON).
    #[test]
    fn results_csv_and_summary_json_say_the_same() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut results = fixtures::results();
        results[1].wrong = None;
        results[1].bytes.measured = Some(4096);
        write_results(tmp.path(), &fixtures::info(), &results, 2, &RunStatus::Ok).expect("write");
        let text = std::fs::read_to_string(tmp.path().join("summary.json")).expect("summary");
        let summary: serde_json::Value = serde_json::from_str(&text).expect("json");
        let mut csv = ::csv::Reader::from_path(tmp.path().join("results.csv")).expect("csv");
        let header = csv.headers().expect("header").clone();
        let rows: Vec<_> = csv.records().map(|r| r.expect("row")).collect();
        let json_rows = summary["results"].as_array().expect("results");
        assert_eq!(rows.len(), json_rows.len());
        let mut compared = 0;
        for (row, json) in rows.iter().zip(json_rows) {
            for (name, cell) in header.iter().zip(row.iter()) {
                let Some(value) = json.get(name) else { continue };
                match value {
                    serde_json::Value::Null if name == "bytes_moved" => assert_eq!(cell, "unverified"),
                    serde_json::Value::Null => assert_eq!(cell, "", "{name}"),
                    serde_json::Value::String(s) => assert_eq!(cell, s, "{name}"),
                    // serde_json's reader may be one ulp off the written figure.
                    serde_json::Value::Number(n) => {
                        let (csv, json) = (cell.parse::<f64>().expect(name), n.as_f64().expect(name));
                        assert!((csv - json).abs() <= json.abs() * 1e-15, "{name}: {cell} vs {n}");
                    }
                    other => panic!("{name}: {other} is not a row value"),
                }
                compared += 1;
            }
            assert_eq!(
                row[header.iter().position(|c| c == "send_peers_in_flight").expect("column")],
                json["peers_in_flight"][0].to_string()
            );
        }
        assert!(compared >= 2 * 15, "only {compared} shared cells");
    }
}
