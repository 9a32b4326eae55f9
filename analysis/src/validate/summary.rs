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

/// What decided a node's verdict, as tcpx-perf names it (`src/verdict`): the probe, the sweep's
/// partners, a pair the run cannot separate, a preflight finding, the failure that ended the run.
const DECIDED_BY: [&str; 5] = ["probe", "partners", "cannot-separate", "finding", "failure"];

/// Whether `text` holds a control character (a line break in a host name forges a row of
/// `history nodes`); `tab` lets a tab through (evidence is free text on one line).
fn has_control(text: &str, tab: bool) -> bool {
    text.chars().any(|c| c.is_control() && !(tab && c == '\t'))
}

/// The run's nodes: the distinct host names of summary.json's `hosts` (one entry per rank), as
/// tcpx-perf judges them; a name with a control character is refused.
fn run_hosts(sum_name: &str, summary: &Value) -> Result<Vec<String>, Failure> {
    let mut hosts: Vec<String> = Vec::new();
    for (i, h) in summary
        .get("hosts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(name) = h.get("hostname").and_then(Value::as_str) else {
            continue;
        };
        if has_control(name, false) {
            return Err(refuse(
                sum_name,
                None,
                &format!("hosts[{i}].hostname"),
                format!(
                    "{} holds a control character: no host name does",
                    shown(h.get("hostname"))
                ),
            ));
        }
        if !hosts.iter().any(|x| x == name) {
            hosts.push(name.to_string());
        }
    }
    Ok(hosts)
}

/// Whether the run's probe judged its nodes: it ran rounds, was not skipped and received no
/// wrong data; then tcpx-perf writes a verdict for every node (`verdict::verdicts`).
fn probe_judged(summary: &Value) -> bool {
    let Some(p) = summary.get("probe").filter(|p| p.is_object()) else {
        return false;
    };
    let skipped = p.get("skipped").is_some_and(|s| !s.is_null());
    let rounds = p.get("rounds").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
    let wrong = p.get("wrong").and_then(Value::as_f64).is_some_and(|w| w > 0.0);
    !skipped && rounds && !wrong
}

/// A finite number >= 0 (a share of the median).
fn share(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0)
}

/// One `slow_sides` entry as tcpx-perf types it (`SlowSide`), or what is wrong with it.
fn slow_side_error(v: &Value) -> Option<String> {
    let Some(o) = v.as_object() else {
        return Some(format!("{} is not a NIC side (an object)", shown(Some(v))));
    };
    let text = |k: &str| o.get(k).and_then(Value::as_str).is_some_and(|t| !has_control(t, false));
    let count = |k: &str| o.get(k).is_some_and(|x| x.as_u64().is_some());
    let peers = o
        .get("peers")
        .and_then(Value::as_array)
        .is_some_and(|p| p.iter().all(|x| x.as_str().is_some_and(|t| !has_control(t, false))));
    let bad = [
        ("nic", text("nic")),
        ("sending", o.get("sending").is_some_and(Value::is_boolean)),
        ("share", o.get("share").is_some_and(share)),
        ("slow_sizes", count("slow_sizes")),
        ("judged_sizes", count("judged_sizes")),
        ("flows", count("flows")),
        ("peers", peers),
        ("peers_fast", count("peers_fast")),
    ]
    .into_iter()
    .find(|(_, ok)| !ok)?;
    Some(format!(
        ".{} is {}: tcpx-perf writes text, true/false, a finite share or a count there",
        bad.0,
        shown(o.get(bad.0))
    ))
}

/// `node_verdicts` (tcpx-perf's verdict per node, docs/drain.md), as tcpx-perf writes it: absent
/// (older runs), or a list of objects each with a host of the run (no control character, no node
/// twice), a verdict of [`tcpx_schema::NODE_VERDICTS`] and its evidence (one line of text); and
/// where present, `decided_by` null or one of [`DECIDED_BY`], `lowest_share` null or a finite
/// number >= 0, `slow_sides` a list of NIC sides. A list that is not empty names every node of
/// the run (tcpx-perf judges all or none, and none on one node); an empty one is refused where
/// the probe judged the nodes ([`probe_judged`]). What `history nodes` shows and drains by is
/// then what tcpx-perf can have written. `pub` for `history import`, which admits an export's
/// verdicts by the same rule.
pub fn check_node_verdicts(sum_name: &str, summary: &Value) -> Result<(), Failure> {
    let hosts = run_hosts(sum_name, summary)?;
    let Some(list) = summary.get("node_verdicts") else {
        return none_judged(sum_name, summary, &hosts, "absent");
    };
    let Some(list) = list.as_array() else {
        return Err(refuse(
            sum_name,
            None,
            "node_verdicts",
            format!(
                "{} is not a list of node verdicts (tcpx-perf writes [] when it judged none)",
                shown(Some(list))
            ),
        ));
    };
    if list.is_empty() {
        return none_judged(sum_name, summary, &hosts, "[]");
    }
    let mut seen = std::collections::BTreeSet::new();
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
            Some(h) if !h.trim().is_empty() && !has_control(h, false) => h,
            _ => {
                return Err(refuse(
                    sum_name,
                    None,
                    &field("host"),
                    format!(
                        "{} is not a host name (text, no control character)",
                        shown(o.get("host"))
                    ),
                ))
            }
        };
        if !seen.insert(host) {
            return Err(refuse(
                sum_name,
                None,
                &field("host"),
                format!("{} has a verdict already: one verdict per node", shown(o.get("host"))),
            ));
        }
        if !hosts.iter().any(|h| h == host) {
            return Err(refuse(
                sum_name,
                None,
                &field("host"),
                format!(
                    "{} is not a node of this run (hosts: {}): a verdict is for a node the run ran on",
                    shown(o.get("host")),
                    shown(Some(&Value::from(hosts.join(","))))
                ),
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
        if o.get("evidence")
            .and_then(Value::as_str)
            .is_none_or(|e| has_control(e, true))
        {
            return Err(refuse(
                sum_name,
                None,
                &field("evidence"),
                format!(
                    "{} is not one line of text: a verdict's evidence is",
                    shown(o.get("evidence"))
                ),
            ));
        }
        if let Some(d) = o.get("decided_by").filter(|d| !d.is_null()) {
            if !d.as_str().is_some_and(|d| DECIDED_BY.contains(&d)) {
                return Err(refuse(
                    sum_name,
                    None,
                    &field("decided_by"),
                    format!("{} is not null or one of {DECIDED_BY:?}", shown(Some(d))),
                ));
            }
        }
        if let Some(l) = o.get("lowest_share").filter(|l| !l.is_null() && !share(l)) {
            return Err(refuse(
                sum_name,
                None,
                &field("lowest_share"),
                format!("{} is not null or a finite share >= 0", shown(Some(l))),
            ));
        }
        if let Some(sides) = o.get("slow_sides") {
            let Some(sides) = sides.as_array() else {
                return Err(refuse(
                    sum_name,
                    None,
                    &field("slow_sides"),
                    format!("{} is not a list of NIC sides", shown(Some(sides))),
                ));
            };
            for (j, side) in sides.iter().enumerate() {
                if let Some(why) = slow_side_error(side) {
                    return Err(refuse(sum_name, None, &field(&format!("slow_sides[{j}]")), why));
                }
            }
        }
    }
    if let Some(missing) = hosts.iter().find(|h| !seen.contains(h.as_str())) {
        return Err(refuse(
            sum_name,
            None,
            "node_verdicts",
            format!(
                "no verdict for node {}: tcpx-perf judges every node of a run or none",
                shown(Some(&Value::from(missing.as_str())))
            ),
        ));
    }
    if hosts.len() < 2 {
        return Err(refuse(
            sum_name,
            None,
            "node_verdicts",
            format!(
                "{} verdict(s) on a run of {} node(s): tcpx-perf judges nodes only among 2 or more",
                list.len(),
                hosts.len()
            ),
        ));
    }
    Ok(())
}

/// No verdict (`what`: the list `[]`, or `absent`): what tcpx-perf writes for one node, where
/// nothing was judged, or where the probe was skipped or received wrong data; not where the
/// probe judged two or more nodes.
fn none_judged(sum_name: &str, summary: &Value, hosts: &[String], what: &str) -> Result<(), Failure> {
    if hosts.len() >= 2 && probe_judged(summary) {
        return Err(refuse(
            sum_name,
            None,
            "node_verdicts",
            format!(
                "{what}, but the probe judged the run's {} nodes: tcpx-perf writes a verdict for each",
                hosts.len()
            ),
        ));
    }
    Ok(())
}
