//! summary.json against the CSV files (issue 29): the two must describe one run, whole. The
//! shape, sizes and times agree; so do each size's `wrong` and `bytes_moved`, `wrong_total`,
//! `sizes_done` and the `status` that `complete` claims; `force` and a failed
//! `NCCL_TESTS_MIN_BW` become waivers ([`crate::admit`]) that only a flag naming them allows.

use super::{refuse, Csv, SizeRow};
use crate::error::Failure;
use crate::model::{Run, Waiver};
use serde_json::Value;
use std::collections::BTreeMap;

/// The statuses of a run that ran to the end (`complete: true`).
const COMPLETE_STATUSES: [&str; 4] = ["ok", "unchecked", "wrong-data", "below-min-bw"];

/// A summary.json number or null, or a CSV cell: equal when both are absent or both the same
/// number (`unverified` is bytes_moved's null).
fn same_count(json: Option<&Value>, cell: Option<&str>) -> bool {
    let j = json.filter(|v| !v.is_null()).and_then(Value::as_f64);
    let c = cell
        .filter(|c| !c.is_empty() && *c != tcpx_schema::UNVERIFIED)
        .and_then(|c| c.parse::<f64>().ok());
    j == c
}

/// One size: summary.json's `wrong` and `bytes_moved` equal results.csv's, and its own
/// `bytes_moved` equals its `bytes_planned` (a shortfall is lost data whichever file shows it).
fn agree_size(sum_name: &str, i: usize, r: &Value, res: &Csv, row: &SizeRow) -> Result<(), Failure> {
    for (k, v) in r.as_object().into_iter().flatten() {
        if v.as_f64().is_some_and(|x| x < 0.0) {
            return Err(refuse(
                sum_name,
                None,
                &format!("results[{i}].{k}"),
                format!("{v} is negative: no count or figure of a run is"),
            ));
        }
    }
    let cells = res.rows.iter().find(|(l, _)| *l == row.line).map(|(_, c)| c.as_slice());
    let cell = |col: &str| cells.and_then(|c| res.get(c, col));
    for field in ["wrong", "bytes_moved"] {
        let json = r.get(field);
        if !same_count(json, cell(field)) {
            return Err(refuse(
                sum_name,
                None,
                &format!("results[{i}].{field}"),
                format!(
                    "{} but {}:{} says {:?}: the files describe different runs",
                    json.map_or("missing".into(), Value::to_string),
                    res.name,
                    row.line,
                    cell(field).unwrap_or("(no such column)")
                ),
            ));
        }
    }
    if let (Some(planned), Some(moved)) = (
        r.get("bytes_planned").and_then(Value::as_u64),
        r.get("bytes_moved").and_then(Value::as_u64),
    ) {
        if planned != moved {
            return Err(refuse(
                sum_name,
                None,
                &format!("results[{i}].bytes_moved"),
                format!("{moved} but bytes_planned is {planned}: the run lost or duplicated data"),
            ));
        }
    }
    Ok(())
}

/// The run as a whole: `status` present and one a complete run has; `sizes_done` equal to the
/// rows and to `sizes_planned`; `wrong_total` the CSV's sum and the status saying so; `force`
/// and a failed `NCCL_TESTS_MIN_BW` recorded as waivers.
pub(super) fn check_state(
    sum_name: &str,
    summary: &Value,
    res: &Csv,
    sizes: &BTreeMap<(String, u64), SizeRow>,
    run: &mut Run,
) -> Result<(), Failure> {
    let status = summary.get("status").and_then(Value::as_str).ok_or_else(|| {
        refuse(
            sum_name,
            None,
            "status",
            "missing: the summary does not say how the run ended",
        )
    })?;
    if !COMPLETE_STATUSES.contains(&status) {
        return Err(refuse(
            sum_name,
            None,
            "status",
            format!("{status:?} with \"complete\": true: a run that ran to the end is one of {COMPLETE_STATUSES:?}"),
        ));
    }
    let rows = sizes.len() as u64;
    let count = |k: &str| summary.get(k).filter(|v| !v.is_null());
    if let Some(done) = count("sizes_done") {
        if done.as_u64() != Some(rows) {
            return Err(refuse(
                sum_name,
                None,
                "sizes_done",
                format!(
                    "{done} but {} has {rows} size(s): the files describe different runs",
                    res.name
                ),
            ));
        }
    }
    if let Some(planned) = count("sizes_planned") {
        if planned.as_u64() != Some(rows) {
            return Err(refuse(
                sum_name,
                None,
                "sizes_planned",
                format!("{planned} but {rows} size(s) were done, with \"complete\": true: the sweep did not finish"),
            ));
        }
    }
    let mut csv_wrong = 0.0;
    for (line, r) in &res.rows {
        if let Some(w) = res.number(*line, r, "wrong")? {
            csv_wrong += w.value;
        }
    }
    if let Some(total) = count("wrong_total") {
        if total.as_f64() != Some(csv_wrong) {
            return Err(refuse(
                sum_name,
                None,
                "wrong_total",
                format!("{total} but the wrong column of {} sums to {csv_wrong}", res.name),
            ));
        }
    }
    if (status == "wrong-data") != (csv_wrong > 0.0) {
        return Err(refuse(
            sum_name,
            None,
            "status",
            format!("{status:?} but {} counts {csv_wrong} wrong byte(s)", res.name),
        ));
    }
    if summary.get("force").and_then(Value::as_bool) == Some(true) {
        run.waivers.push((
            Waiver::Forced,
            format!("{sum_name}: force is true (the run went on despite preflight's error findings)"),
        ));
    }
    let min_bw = summary.get("min_bw").filter(|v| !v.is_null());
    let failed = min_bw.and_then(|m| m.get("passed")).and_then(Value::as_bool) == Some(false);
    if failed != (status == "below-min-bw") {
        return Err(refuse(
            sum_name,
            None,
            "status",
            format!(
                "{status:?} but min_bw is {}: the summary contradicts itself",
                min_bw.map_or("absent".into(), Value::to_string)
            ),
        ));
    }
    if failed {
        let figure = |k: &str| min_bw.and_then(|m| m.get(k)).map_or("?".into(), Value::to_string);
        run.waivers.push((
            Waiver::BelowMinBw,
            format!(
                "{sum_name}: status is \"below-min-bw\" (average busbw {} GB/s, NCCL_TESTS_MIN_BW {} GB/s)",
                figure("avg_busbw_gbps"),
                figure("min_bw_gbps")
            ),
        ));
    }
    Ok(())
}

/// Checks that summary.json and results.csv describe the same run: pattern, scope, dir, mem,
/// endpoints, the sizes and each size's time; records sizes the summary calls unverified.
pub(super) fn check_summary_agrees(
    sum_name: &str,
    summary: &Value,
    res: &Csv,
    sizes: &BTreeMap<(String, u64), SizeRow>,
    run: &mut Run,
) -> Result<(), Failure> {
    for field in ["pattern", "scope", "dir", "mem", "endpoints"] {
        let Some(want) = summary.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let want = match want {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for (line, r) in &res.rows {
            if let Some(got) = res.get(r, field).filter(|g| *g != want) {
                return Err(refuse(
                    &res.name,
                    Some(*line),
                    field,
                    format!("{got:?} but {sum_name} says {want:?}: the files describe different runs"),
                ));
            }
        }
    }
    let Some(results) = summary.get("results").and_then(Value::as_array) else {
        return Err(refuse(
            sum_name,
            None,
            "results",
            "missing or not a list: tcpx-perf writes every measured size there; the file is not a whole summary",
        ));
    };
    let pattern = summary.get("pattern").and_then(Value::as_str);
    let mut seen = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let field = format!("results[{i}].size_bytes");
        let size = r
            .get("size_bytes")
            .and_then(Value::as_u64)
            .ok_or_else(|| refuse(sum_name, None, &field, "missing or not a byte count"))?;
        seen.push(size);
        let row = sizes
            .iter()
            .find(|((p, s), _)| *s == size && pattern.is_none_or(|q| q == p))
            .map(|(_, row)| row)
            .ok_or_else(|| refuse(sum_name, None, &field, format!("size {size} is not in {}", res.name)))?;
        if let Some(t) = r.get("time_us").and_then(Value::as_f64) {
            let slack = row.time_us.excused() + 1e-9 * t.abs();
            if (t - row.time_us.value).abs() > slack {
                return Err(refuse(
                    sum_name,
                    None,
                    &format!("results[{i}].time_us"),
                    format!("{t} but {}:{} says {} us", res.name, row.line, row.time_us.value),
                ));
            }
        }
        agree_size(sum_name, i, r, res, row)?;
        super::config::agree_figures(sum_name, i, r, res, row.line)?;
        if r.get("verified").and_then(Value::as_bool) == Some(false) {
            run.unverified
                .push(format!("{sum_name}: results[{i}] (size {size}): verified is false"));
        }
    }
    for ((_, size), row) in sizes {
        if !seen.contains(size) {
            return Err(refuse(
                &res.name,
                Some(row.line),
                "size_bytes",
                format!("size {size} is not in {sum_name}'s results: the files describe different runs"),
            ));
        }
    }
    Ok(())
}

/// A summary.json value as a refusal shows it: its JSON, cut at 60 characters; `missing`.
fn shown(v: Option<&Value>) -> String {
    let Some(v) = v else { return "missing".into() };
    let text = v.to_string();
    if text.chars().count() > 60 {
        format!("{}...", text.chars().take(57).collect::<String>())
    } else {
        text
    }
}

/// `node_verdicts` (tcpx-perf's verdict per node, docs/drain.md), where present and not null: a
/// list of objects, each with a host (a non-empty string, no node twice), a verdict of
/// [`tcpx_schema::NODE_VERDICTS`] and its evidence (a string). What `history nodes` shows and
/// drains by is then what tcpx-perf can have written.
pub(super) fn check_node_verdicts(sum_name: &str, summary: &Value) -> Result<(), Failure> {
    let Some(list) = summary.get("node_verdicts").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(list) = list.as_array() else {
        return Err(refuse(
            sum_name,
            None,
            "node_verdicts",
            format!("{} is not a list of node verdicts", shown(Some(list))),
        ));
    };
    let mut hosts = std::collections::BTreeSet::new();
    for (i, v) in list.iter().enumerate() {
        let field = |k: &str| format!("node_verdicts[{i}].{k}");
        let Some(o) = v.as_object() else {
            return Err(refuse(
                sum_name,
                None,
                &format!("node_verdicts[{i}]"),
                format!(
                    "{} is not a node's verdict (an object with host, verdict and evidence)",
                    shown(Some(v))
                ),
            ));
        };
        let host = match o.get("host").and_then(Value::as_str) {
            Some(h) if !h.trim().is_empty() => h,
            _ => {
                return Err(refuse(
                    sum_name,
                    None,
                    &field("host"),
                    format!("{} is not a host name", shown(o.get("host"))),
                ))
            }
        };
        if !hosts.insert(host) {
            return Err(refuse(
                sum_name,
                None,
                &field("host"),
                format!("{} has a verdict already: one verdict per node", shown(o.get("host"))),
            ));
        }
        if !o
            .get("verdict")
            .and_then(Value::as_str)
            .is_some_and(|v| tcpx_schema::NODE_VERDICTS.contains(&v))
        {
            return Err(refuse(
                sum_name,
                None,
                &field("verdict"),
                format!(
                    "{} is not one of {:?}",
                    shown(o.get("verdict")),
                    tcpx_schema::NODE_VERDICTS
                ),
            ));
        }
        if !o.get("evidence").is_some_and(Value::is_string) {
            return Err(refuse(
                sum_name,
                None,
                &field("evidence"),
                format!("{} is not text: a verdict's evidence is", shown(o.get("evidence"))),
            ));
        }
    }
    Ok(())
}
