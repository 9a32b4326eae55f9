//! The run's configuration (issue 34): summary.json's settings are what `history` stores as the
//! configuration a run belongs to, so each must be a whole number in the range tcpx-perf
//! accepts (`--channels 1..64`, `--window 1..32`, at least one rank, node and iteration) and
//! equal to results.csv's where both files hold it (ranks, endpoints, nodes, iterations, whether
//! the data was checked). Each size's figures in summary.json are results.csv's, to the printed
//! precision of the CSV.

use super::{refuse, Csv};
use crate::error::Failure;
use serde_json::Value;

/// NCCL's bound on requests in flight per communicator (`NCCL_NET_MAX_REQUESTS`), which
/// tcpx-perf's `--window` accepts at most.
const MAX_WINDOW: u64 = 32;

/// summary.json's settings (top level and the `config` flag record) and their ranges, inclusive.
const SETTINGS: [(&str, u64, u64); 15] = [
    ("ranks", 1, u64::MAX),
    ("endpoints", 1, u64::MAX),
    ("nodes", 1, u64::MAX),
    ("gpus_per_rank", 1, u64::MAX),
    ("iters", 1, u64::MAX),
    ("warmup", 0, u64::MAX),
    ("chunk", 1, u64::MAX),
    ("channels", 1, 64),
    ("window", 1, MAX_WINDOW),
    ("config.iters", 1, u64::MAX),
    ("config.warmup_iters", 0, u64::MAX),
    ("config.ngpus", 1, u64::MAX),
    ("config.chunk", 1, u64::MAX),
    ("config.channels", 1, 64),
    ("config.window", 1, MAX_WINDOW),
];

/// The time reductions of `-a`.
const REDUCTIONS: [&str; 4] = ["rank0", "avg", "min", "max"];

/// A setting by its dotted name (`config.window`), absent when missing or null.
fn setting<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    name.split('.')
        .try_fold(summary, |v, k| v.get(k))
        .filter(|v| !v.is_null())
}

/// A whole number >= 0, or the refusal naming `field`.
fn whole(file: &str, field: &str, v: &Value) -> Result<u64, Failure> {
    v.as_u64()
        .ok_or_else(|| refuse(file, None, field, format!("{v} is not a whole number >= 0: a count")))
}

/// Every setting of [`SETTINGS`] a whole number in its range; `check` a boolean;
/// `time_reduction` one of `-a`'s.
fn check_ranges(file: &str, summary: &Value) -> Result<(), Failure> {
    for (name, lo, hi) in SETTINGS {
        let Some(v) = setting(summary, name) else { continue };
        let n = whole(file, name, v)?;
        if !(lo..=hi).contains(&n) {
            let range = if hi == u64::MAX {
                format!("at least {lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return Err(refuse(
                file,
                None,
                name,
                format!("{n} is out of range ({range}): no run has it"),
            ));
        }
    }
    if let Some(c) = setting(summary, "check").filter(|c| !c.is_boolean()) {
        return Err(refuse(file, None, "check", format!("{c} is not true or false")));
    }
    if let Some(t) = setting(summary, "time_reduction") {
        if !t.as_str().is_some_and(|t| REDUCTIONS.contains(&t)) {
            return Err(refuse(
                file,
                None,
                "time_reduction",
                format!("{t} is not one of {REDUCTIONS:?}"),
            ));
        }
    }
    Ok(())
}

/// The shape's counts among themselves: nodes <= ranks, endpoints = ranks x gpus_per_rank.
fn check_relations(file: &str, summary: &Value) -> Result<(), Failure> {
    let get = |k: &str| setting(summary, k).and_then(Value::as_u64);
    if let (Some(nodes), Some(ranks)) = (get("nodes"), get("ranks")) {
        if nodes > ranks {
            return Err(refuse(
                file,
                None,
                "nodes",
                format!("{nodes} but ranks is {ranks}: every node runs a rank"),
            ));
        }
    }
    if let (Some(e), Some(r), Some(g)) = (get("endpoints"), get("ranks"), get("gpus_per_rank")) {
        if r.checked_mul(g) != Some(e) {
            return Err(refuse(
                file,
                None,
                "endpoints",
                format!("{e} but ranks x gpus_per_rank = {r} x {g}: the summary contradicts itself"),
            ));
        }
    }
    Ok(())
}

/// The settings results.csv repeats on every row: equal to summary.json's; and `check`: a
/// checked run has a `wrong` count on every row, an unchecked one on none.
fn check_against_csv(file: &str, summary: &Value, res: &Csv) -> Result<(), Failure> {
    // summary.json's `field` (shown as `want`) against `column` on every row, `differs` judging.
    let every_row = |field: &str, column: &str, want: &dyn std::fmt::Display, differs: &dyn Fn(&str) -> bool| {
        for (line, r) in &res.rows {
            if let Some(got) = res.get(r, column).filter(|g| differs(g)) {
                return Err(refuse(
                    file,
                    None,
                    field,
                    format!(
                        "{want} but {}:{line} says {got:?}: the files describe different runs",
                        res.name
                    ),
                ));
            }
        }
        Ok(())
    };
    for field in ["ranks", "nodes", "iters"] {
        if let Some(want) = setting(summary, field).and_then(Value::as_u64) {
            every_row(field, field, &want, &|g| g.parse::<u64>().ok() != Some(want))?;
        }
    }
    // The plugin: summary.json's name and ABI are results.csv's on every row. An empty cell
    // is a value like any other (tcpx-perf writes both on every row): skipping it let a row
    // claim no plugin beside a summary that names one.
    for (field, column) in [("plugin.name", "plugin"), ("plugin.abi", "abi")] {
        if let Some(want) = setting(summary, field) {
            let text = want.as_str().map_or_else(|| want.to_string(), str::to_string);
            every_row(field, column, want, &|g| g != text)?;
        }
    }
    if let Some(check) = setting(summary, "check").and_then(Value::as_bool) {
        for (line, r) in &res.rows {
            let counted = res.get(r, "wrong").is_some_and(|w| !w.is_empty());
            if counted != check {
                return Err(refuse(
                    file,
                    None,
                    "check",
                    format!(
                        "{check} but {}:{line} {}: the files describe different runs",
                        res.name,
                        if counted {
                            "counts wrong bytes (the data was checked)"
                        } else {
                            "has no wrong count (-c 0)"
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// summary.json's settings: in range, and the same as results.csv's.
pub(super) fn check_config(file: &str, summary: &Value, res: &Csv) -> Result<(), Failure> {
    check_ranges(file, summary)?;
    check_against_csv(file, summary, res)?;
    check_relations(file, summary)
}

/// Figures of a size that summary.json and results.csv both print and a gate or history reads
/// (`time_us` is compared in [`super::summary`]).
const SHARED_FIGURES: [&str; 3] = ["algbw_gbps", "busbw_gbps", "netbw_gbps"];

/// Counts of a size that summary.json and results.csv both print.
const SHARED_COUNTS: [&str; 3] = ["count", "iters", "bytes_planned"];

/// `results[i]` of summary.json against its results.csv row (`line`): every shared figure equal
/// within the CSV's printed precision, every shared count a whole number and equal.
pub(super) fn agree_figures(file: &str, i: usize, r: &Value, res: &Csv, line: usize) -> Result<(), Failure> {
    let Some((_, cells)) = res.rows.iter().find(|(l, _)| *l == line) else {
        return Ok(());
    };
    let differ = |field: &str, json: &Value, cell: &str| {
        refuse(
            file,
            None,
            &format!("results[{i}].{field}"),
            format!(
                "{json} but {}:{line} says {cell}: the files describe different runs",
                res.name
            ),
        )
    };
    for field in SHARED_COUNTS {
        let Some(json) = r.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let n = whole(file, &format!("results[{i}].{field}"), json)?;
        if let Some(cell) = res.get(cells, field).filter(|c| c.parse::<u64>().ok() != Some(n)) {
            return Err(differ(field, json, cell));
        }
    }
    for field in SHARED_FIGURES {
        let (Some(json), Some(csv)) = (r.get(field).and_then(Value::as_f64), res.number(line, cells, field)?) else {
            continue;
        };
        let slack = csv.excused() + 1e-9 * json.abs().max(csv.value.abs());
        if (json - csv.value).abs() > slack {
            return Err(differ(field, &r[field], res.get(cells, field).unwrap_or("")));
        }
    }
    Ok(())
}

/// A results.csv row's shape: at least one rank, endpoint, node and iteration, and no more
/// nodes than ranks or ranks than endpoints (the counts themselves are whole numbers:
/// [`super::columns`]).
pub(super) fn check_shape_row(csv: &Csv, line: usize, r: &[String]) -> Result<(), Failure> {
    let count = |col: &str| csv.get(r, col).and_then(|v| v.parse::<u64>().ok());
    for col in ["ranks", "endpoints", "nodes", "iters"] {
        if count(col) == Some(0) {
            return Err(refuse(&csv.name, Some(line), col, "0: every run has at least 1"));
        }
    }
    for (fewer, more) in [("nodes", "ranks"), ("ranks", "endpoints")] {
        if let (Some(a), Some(b)) = (count(fewer), count(more)) {
            if a > b {
                return Err(refuse(
                    &csv.name,
                    Some(line),
                    fewer,
                    format!("{a} but {more} is {b}: each of the {fewer} has at least one"),
                ));
            }
        }
    }
    Ok(())
}
