//! Consistency checks of what the loader read (issue 21): figures that contradict each other,
//! schema versions mixed in one result directory, a summary.json that disagrees with its CSV
//! files, nccl-tests `error` columns beyond the tolerance of their data type, one run counted
//! twice, and runs whose bytes nobody checked. Each refusal is one line naming the file, the row
//! and the field (exit 3); nothing here panics.
//!
//! The checks run inside the loader ([`crate::parse::load_path`], [`crate::parse::load_paths`],
//! [`crate::parse::tcpx::load_dir`]), so every command that reads runs gets them. Whether an
//! unchecked run may be used is the caller's policy ([`unchecked_policy`]).

use crate::error::Failure;
use crate::model::{Format, Run};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::path::Path;

mod columns;
mod config;
mod summary;

use columns::{check_figures, check_header};
pub use summary::check_node_verdicts;

/// `1 to 4`: the schema versions admitted ([`tcpx_schema::SCHEMA_VERSIONS`]), for messages.
pub fn admitted_versions() -> String {
    let v = tcpx_schema::SCHEMA_VERSIONS;
    format!("{} to {}", v[0], v[v.len() - 1])
}

/// One refusal: `file:line: field: why` on one line (exit 3).
fn refuse(file: &str, line: Option<usize>, field: &str, why: impl Display) -> Failure {
    let at = line.map_or(String::new(), |l| format!(":{l}"));
    Failure::Input(format!("{file}{at}: {field}: {why}"))
}

/// The rounding a printed figure is excused, relative to its value: 4 significant digits. A
/// figure printed with fewer (a hand-edited `2` where 1.890 was measured) is checked as if it
/// had them, so an edit cannot widen its own tolerance; tcpx-perf prints every figure in full.
const EXCUSED_RELATIVE: f64 = 5e-4;

/// A number as printed, with half a unit of its last printed digit (what rounding may hide).
#[derive(Debug, Clone, Copy)]
struct Printed {
    value: f64,
    half_ulp: f64,
}

impl Printed {
    fn parse(s: &str) -> Option<Printed> {
        let s = s.trim();
        let value: f64 = s.parse().ok().filter(|v: &f64| v.is_finite())?;
        let (mantissa, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
            None => (s, 0),
        };
        let decimals = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
        Some(Printed {
            value,
            half_ulp: 0.5 * 10f64.powi(exp - decimals),
        })
    }

    /// What its rounding may have hidden, as far as that is excused: half a unit of its last
    /// printed digit, at most [`EXCUSED_RELATIVE`] of its value.
    fn excused(self) -> f64 {
        self.half_ulp.min(EXCUSED_RELATIVE * self.value.abs())
    }
}

/// Whether `v` equals `expected` (itself uncertain by `expected_err`, from the printed precision
/// of the columns it derives from) within `v`'s own excused rounding.
fn agrees(v: Printed, expected: f64, expected_err: f64) -> bool {
    let slack = v.excused() + expected_err + 1e-9 * expected.abs().max(v.value.abs());
    (v.value - expected).abs() <= slack
}

/// busbw / algbw of a tcpx-perf pattern over `n` endpoints (README "Patterns"); `None` for a
/// pattern this reader does not know.
pub fn busbw_factor(pattern: &str, n: f64) -> Option<f64> {
    match pattern {
        "sendrecv" | "pairs" => Some(1.0),
        "ring" => Some(2.0 * (n - 1.0) / n),
        "fullmesh" => Some((n - 1.0) / n),
        _ => None,
    }
}

/// GB/s (GB = 10^9 bytes) of `bytes` in a printed time, with the error its rounding allows.
fn gbps(bytes: f64, time_us: Printed) -> (f64, f64) {
    let at = |t: f64| bytes / t / 1e3;
    // The time is an input here: its whole printed rounding counts (it is checked as a figure
    // itself against samples.csv and summary.json, to its excused rounding).
    let (t, h) = (time_us.value, time_us.half_ulp);
    let v = at(t);
    // The time's true value lies in [t - h, t + h]; the bandwidth's, in the image of that.
    let err = if t > h { at(t - h) - v } else { f64::INFINITY };
    (v, err)
}

/// A CSV file as named columns and rows with their 1-based line numbers.
struct Csv {
    name: String,
    cols: HashMap<String, usize>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Csv {
    fn parse(name: &str, text: &str) -> Result<Csv, Failure> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let bad = |e: csv::Error| refuse(name, e.position().map(|p| p.line() as usize), "CSV", e);
        let cols = rdr
            .headers()
            .map_err(bad)?
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), i))
            .collect();
        let mut rows = Vec::new();
        for rec in rdr.records() {
            let r = rec.map_err(bad)?;
            let line = r.position().map_or(0, |p| p.line() as usize);
            rows.push((line, r.iter().map(str::to_string).collect()));
        }
        Ok(Csv {
            name: name.to_string(),
            cols,
            rows,
        })
    }

    fn read(path: &Path) -> Result<Option<Csv>, Failure> {
        if !path.exists() {
            return Ok(None);
        }
        let name = path.display().to_string();
        let text = crate::input::read_text(path)?;
        Csv::parse(&name, &text).map(Some)
    }

    fn get<'a>(&self, row: &'a [String], col: &str) -> Option<&'a str> {
        self.cols.get(col).and_then(|&i| row.get(i)).map(String::as_str)
    }

    fn number(&self, line: usize, row: &[String], col: &str) -> Result<Option<Printed>, Failure> {
        match self.get(row, col).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => Printed::parse(v)
                .map(Some)
                .ok_or_else(|| refuse(&self.name, Some(line), col, format!("{v:?} is not a finite number"))),
        }
    }

    /// A number the row must have.
    fn need(&self, line: usize, row: &[String], col: &str) -> Result<Printed, Failure> {
        self.number(line, row, col)?
            .ok_or_else(|| refuse(&self.name, Some(line), col, "missing"))
    }

    /// The rows with their line numbers, each row's schema version seen by `schema` first (one
    /// version per directory) and a refusal in its place where it is not.
    fn rows_seen<'a>(
        &'a self,
        schema: &'a mut Schema,
    ) -> impl Iterator<Item = Result<(usize, &'a [String]), Failure>> + 'a {
        self.rows.iter().map(move |(line, row)| {
            schema
                .see(&self.name, Some(*line), self.get(row, "schema_version"))
                .map(|()| (*line, row.as_slice()))
        })
    }

    /// The row's size and its time, which must be > 0 (every figure is derived from the two).
    fn size_and_time(&self, line: usize, row: &[String]) -> Result<(Printed, Printed), Failure> {
        let size = self.need(line, row, "size_bytes")?;
        let time = self.need(line, row, "time_us")?;
        if time.value <= 0.0 {
            return Err(refuse(&self.name, Some(line), "time_us", "must be > 0"));
        }
        Ok((size, time))
    }
}

/// algbw must be size / time, within the rounding of the printed figures (results.csv and
/// samples.csv rows alike).
fn check_algbw(file: &str, line: usize, size: Printed, time: Printed, algbw: Printed) -> Result<(), Failure> {
    let (expect, err) = gbps(size.value, time);
    if agrees(algbw, expect, err) {
        return Ok(());
    }
    Err(refuse(
        file,
        Some(line),
        "algbw_gbps",
        format!(
            "{} but size_bytes / time_us = {} / {} us = {expect:.6} GB/s: the figures contradict each other",
            algbw.value, size.value, time.value
        ),
    ))
}

/// netbw is network bytes sent per sending endpoint / time (README "Patterns"): with scope
/// `all`, busbw itself; in any scope, `bytes_planned` (network bytes per iteration) / time is a
/// whole number of sending endpoints, 1 to `endpoints`, times netbw.
fn check_netbw(csv: &Csv, line: usize, r: &[String], time: Printed, busbw: Printed) -> Result<(), Failure> {
    let Some(net) = csv.number(line, r, "netbw_gbps")? else {
        return Ok(());
    };
    let bad = |why: String| Err(refuse(&csv.name, Some(line), "netbw_gbps", why));
    if csv.get(r, "scope") == Some("all") && !agrees(net, busbw.value, busbw.excused()) {
        return bad(format!(
            "{} but busbw_gbps is {} and scope is all, where netbw is busbw: the figures contradict each other",
            net.value, busbw.value
        ));
    }
    let (Some(planned), Some(endpoints)) = (csv.number(line, r, "bytes_planned")?, csv.number(line, r, "endpoints")?)
    else {
        return Ok(());
    };
    let (all, err) = gbps(planned.value, time);
    if net.value == 0.0 || all == 0.0 {
        return if net.value == all {
            Ok(())
        } else {
            bad(format!("{} but bytes_planned is {}", net.value, planned.value))
        };
    }
    let senders = all / net.value;
    let tolerance = senders * (err / all + net.excused() / net.value + 1e-9);
    let whole = senders.round();
    if (senders - whole).abs() > tolerance || whole < 1.0 || whole > endpoints.value {
        return bad(format!(
            "{} but bytes_planned / time_us = {} / {} us = {all:.6} GB/s, {senders:.4} times that: no whole number of sending endpoints (1 to {}): the figures contradict each other",
            net.value, planned.value, time.value, endpoints.value
        ));
    }
    Ok(())
}

/// The one schema version of a result directory: every row of every CSV and summary.json.
#[derive(Default)]
struct Schema {
    first: Option<(u64, String)>,
}

impl Schema {
    fn see(&mut self, file: &str, line: Option<usize>, v: Option<&str>) -> Result<(), Failure> {
        let at = match line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        };
        let Some(v) = v
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|v| u32::try_from(*v).is_ok_and(|v| tcpx_schema::SCHEMA_VERSIONS.contains(&v)))
        else {
            return Err(refuse(
                file,
                line,
                "schema_version",
                format!(
                    "{:?} is not a supported version ({})",
                    v.unwrap_or(""),
                    admitted_versions()
                ),
            ));
        };
        match &self.first {
            None => self.first = Some((v, at)),
            Some((w, first)) if *w != v => {
                return Err(refuse(
                    file,
                    line,
                    "schema_version",
                    format!(
                        "{v} where {first} has {w}: one result directory holds one schema version (files of different tcpx-perf versions were mixed)"
                    ),
                ))
            }
            Some(_) => {}
        }
        Ok(())
    }

    fn version(&self) -> Option<u64> {
        self.first.as_ref().map(|(v, _)| *v)
    }
}

/// What results.csv says about one size, for the other files' checks.
struct SizeRow {
    line: usize,
    time_us: Printed,
    iters: Option<u64>,
    factor: Option<f64>,
}

/// Checks `results.csv`: every row's algbw and busbw against size, time and the pattern's
/// factor; records the sizes neither checked nor verified in `run.unverified`.
fn check_results(
    csv: &Csv,
    schema: &mut Schema,
    summary_endpoints: Option<f64>,
    run: &mut Run,
) -> Result<BTreeMap<(String, u64), SizeRow>, Failure> {
    let f = csv.name.as_str();
    let mut sizes = BTreeMap::new();
    for row in csv.rows_seen(schema) {
        let (line, r) = row?;
        let pattern = csv.get(r, "pattern").unwrap_or("").to_string();
        let need = |col: &str| csv.need(line, r, col);
        let (size, time) = csv.size_and_time(line, r)?;
        let algbw = need("algbw_gbps")?;
        let busbw = need("busbw_gbps")?;
        check_figures(csv, line, r)?;
        check_algbw(f, line, size, time, algbw)?;
        let n = csv.number(line, r, "endpoints")?.map(|p| p.value).or(summary_endpoints);
        // sendrecv and pairs need no endpoint count; ring and fullmesh are checked where known.
        let factor = busbw_factor(&pattern, n.unwrap_or(f64::NAN)).filter(|k| k.is_finite());
        if let Some(k) = factor {
            if !agrees(busbw, algbw.value * k, algbw.excused() * k) {
                return Err(refuse(
                    f,
                    Some(line),
                    "busbw_gbps",
                    format!(
                        "{} but algbw_gbps x {pattern}'s factor = {} x {k} = {:.6} GB/s: the figures contradict each other",
                        busbw.value,
                        algbw.value,
                        algbw.value * k
                    ),
                ));
            }
        }
        check_netbw(csv, line, r, time, busbw)?;
        config::check_shape_row(csv, line, r)?;
        if let Some(why) = unverified_row(csv, r) {
            run.unverified
                .push(format!("{f}:{line}: size {} ({pattern}): {why}", size.value));
        }
        let iters = csv.number(line, r, "iters")?.map(|p| p.value as u64);
        sizes.insert(
            (pattern, size.value as u64),
            SizeRow {
                line,
                time_us: time,
                iters,
                factor,
            },
        );
    }
    Ok(sizes)
}

/// Why a results.csv row's bytes are neither checked nor verified, or `None` when they are: the
/// data check ran (`wrong` is a number), or a witness that sees payload exactly measured them
/// (`bytes_moved` a number in schema 2 and later: plugin sizes, unpack descriptors). The wire
/// counters alone are a lower bound (other traffic inflates them), so they do not verify. A
/// `verified` column, when present, is taken at its word when it says `false`.
fn unverified_row(csv: &Csv, r: &[String]) -> Option<String> {
    if csv.get(r, "verified").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
        return Some("verified is false".into());
    }
    if csv.get(r, "wrong").is_some_and(|w| !w.is_empty()) {
        return None;
    }
    let schema = csv.get(r, "schema_version").unwrap_or("");
    let moved = csv.get(r, "bytes_moved").unwrap_or("");
    if schema != "1" && moved.parse::<u64>().is_ok() {
        return None;
    }
    let by = csv
        .get(r, "bytes_verified_by")
        .filter(|b| !b.is_empty())
        .unwrap_or("none");
    Some(format!(
        "no data check (wrong is empty: -c 0) and bytes_moved {} (witness: {by}{})",
        if moved.is_empty() { "not recorded" } else { moved },
        if by.contains("wire") && !by.contains("lower bound") {
            ", a lower bound"
        } else {
            ""
        }
    ))
}

/// Checks `samples.csv`: each sample's bandwidths from its time, the number of samples per size
/// (`iters`), and their mean against results.csv's time (`-a` avg and rank0: equal within
/// rounding; min: results.csv's time is at least the mean; max: at most).
fn check_samples(
    csv: &Csv,
    schema: &mut Schema,
    sizes: &BTreeMap<(String, u64), SizeRow>,
    reduction: &str,
) -> Result<(), Failure> {
    let f = csv.name.as_str();
    let mut times: BTreeMap<(String, u64), (Vec<f64>, f64)> = BTreeMap::new();
    let mut iters_seen: BTreeMap<(String, u64), Vec<u64>> = BTreeMap::new();
    for row in csv.rows_seen(schema) {
        let (line, r) = row?;
        let pattern = csv.get(r, "pattern").unwrap_or("").to_string();
        let need = |col: &str| csv.need(line, r, col);
        let (size, time) = csv.size_and_time(line, r)?;
        let key = (pattern.clone(), size.value as u64);
        let Some(row) = sizes.get(&key) else {
            return Err(refuse(
                f,
                Some(line),
                "size_bytes",
                format!("size {} of pattern {pattern} is not in results.csv", size.value),
            ));
        };
        let algbw = need("algbw_gbps")?;
        check_algbw(f, line, size, time, algbw)?;
        if let Some(k) = row.factor {
            let busbw = need("busbw_gbps")?;
            if !agrees(busbw, algbw.value * k, algbw.excused() * k) {
                return Err(refuse(
                    f,
                    Some(line),
                    "busbw_gbps",
                    format!("{} but algbw_gbps x {k} = {:.6} GB/s", busbw.value, algbw.value * k),
                ));
            }
        }
        sample_iter(csv, line, r, row, iters_seen.entry(key.clone()).or_default())?;
        let e = times.entry(key).or_insert((Vec::new(), 0.0));
        e.0.push(time.value);
        e.1 = e.1.max(time.excused());
    }
    // A size of results.csv without its samples: the file was cut.
    for ((pattern, size), row) in sizes {
        if let (Some(n), false) = (row.iters, times.contains_key(&(pattern.clone(), *size))) {
            return Err(refuse(
                f,
                None,
                "iter",
                format!(
                    "0 samples of {pattern} size {size}, but results.csv line {} says iters = {n}: the file is cut short",
                    row.line
                ),
            ));
        }
    }
    for ((pattern, size), (ts, half_ulp)) in &times {
        let row = &sizes[&(pattern.clone(), *size)];
        if let Some(n) = row.iters.filter(|n| *n != ts.len() as u64) {
            return Err(refuse(
                f,
                None,
                "iter",
                format!(
                    "{} samples of {pattern} size {size}, but results.csv line {} says iters = {n}",
                    ts.len(),
                    row.line
                ),
            ));
        }
        let mean = ts.iter().sum::<f64>() / ts.len() as f64;
        let res = row.time_us;
        let slack = half_ulp + res.excused() + 1e-9 * mean.abs().max(res.value);
        let ok = match reduction {
            "min" => res.value >= mean - slack,
            "max" => res.value <= mean + slack,
            _ => (res.value - mean).abs() <= slack,
        };
        if !ok {
            return Err(refuse(
                f,
                None,
                "time_us",
                format!(
                    "the mean of {pattern} size {size}'s {} samples is {mean:.4} us, results.csv line {} says {} us (time reduction {reduction}): the files contradict each other",
                    ts.len(),
                    row.line,
                    res.value
                ),
            ));
        }
    }
    Ok(())
}

/// A samples.csv row's `iter`: a whole number below the size's `iters` (when known), each once.
fn sample_iter(csv: &Csv, line: usize, r: &[String], row: &SizeRow, seen: &mut Vec<u64>) -> Result<(), Failure> {
    let cell = csv.get(r, "iter").unwrap_or("");
    let bad = |why: String| Err(refuse(&csv.name, Some(line), "iter", why));
    let Ok(i) = cell.parse::<u64>() else {
        return bad(format!("{cell:?} is not a whole number"));
    };
    if row.iters.is_some_and(|n| i >= n) {
        return bad(format!(
            "{i} but results.csv line {} says iters = {}: iterations count from 0",
            row.line,
            row.iters.unwrap_or(0)
        ));
    }
    if seen.contains(&i) {
        return bad(format!("iteration {i} of this size appears twice"));
    }
    seen.push(i);
    Ok(())
}

/// Checks `pairs.csv`: each link's GB/s from its bytes and time.
fn check_pairs(csv: &Csv, schema: &mut Schema) -> Result<(), Failure> {
    let f = csv.name.as_str();
    for row in csv.rows_seen(schema) {
        let (line, r) = row?;
        let (Some(bytes), Some(time), Some(g)) = (
            csv.number(line, r, "bytes")?,
            csv.number(line, r, "time_us")?,
            csv.number(line, r, "gbps")?,
        ) else {
            continue;
        };
        if time.value <= 0.0 {
            continue;
        }
        let (expect, err) = gbps(bytes.value, time);
        if !agrees(g, expect, err) {
            return Err(refuse(
                f,
                Some(line),
                "gbps",
                format!("{} but bytes / time_us = {expect:.6} GB/s", g.value),
            ));
        }
    }
    Ok(())
}

/// Rows of the other CSV files only need their schema version to agree.
fn check_schema_only(csv: &Csv, schema: &mut Schema) -> Result<(), Failure> {
    csv.rows_seen(schema).try_for_each(|row| row.map(drop))
}

/// Checks a tcpx-perf result directory that [`crate::parse::tcpx::load_dir`] read into `run`
/// (its summary.json already parsed): one schema version, figures that agree with each other
/// and with summary.json. Records `start_time` as a label and unverified sizes in `run`.
pub fn tcpx_dir(dir: &Path, summary: &Value, run: &mut Run) -> Result<(), Failure> {
    let sum_name = dir.join("summary.json").display().to_string();
    let mut schema = Schema::default();
    let v = summary.get("schema_version").map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    schema.see(&sum_name, None, v.as_deref())?;
    if let Some(t) = summary.get("start_time").and_then(Value::as_str) {
        run.labels.insert("start_time".into(), t.to_string());
    }
    summary::check_node_verdicts(&sum_name, summary)?;
    let Some(res) = Csv::read(&dir.join("results.csv"))? else {
        return Ok(());
    };
    let endpoints = summary.get("endpoints").and_then(Value::as_f64);
    let sizes = check_results(&res, &mut schema, endpoints, run)?;
    check_header(&res, schema.version())?;
    summary::check_summary_agrees(&sum_name, summary, &res, &sizes, run)?;
    config::check_config(&sum_name, summary, &res)?;
    summary::check_state(&sum_name, summary, &res, &sizes, run)?;
    if let Some(s) = Csv::read(&dir.join("samples.csv"))? {
        let reduction = summary.get("time_reduction").and_then(Value::as_str).unwrap_or("avg");
        check_samples(&s, &mut schema, &sizes, reduction)?;
    }
    if let Some(p) = Csv::read(&dir.join("pairs.csv"))? {
        check_pairs(&p, &mut schema)?;
    }
    for other in ["rank_samples.csv", "nccl_samples.csv"] {
        if let Some(c) = Csv::read(&dir.join(other))? {
            check_schema_only(&c, &mut schema)?;
        }
    }
    if summary.get("status").and_then(Value::as_str) == Some("unchecked") && run.unverified.is_empty() {
        run.unverified.push(format!("{sum_name}: status is \"unchecked\""));
    }
    Ok(())
}

/// Checks a text input after parsing: a results.csv on its own gets the results.csv checks; the
/// runs of an nccl-tests log get the `error` column check ([`nccl_errors`]) and their rows
/// without any data check are recorded as unverified.
pub fn text(name: &str, text: &str, runs: &mut [Run]) -> Result<(), Failure> {
    for run in runs.iter_mut() {
        match run.format {
            Format::TcpxPerfCsv => {
                let csv = Csv::parse(name, text)?;
                let mut schema = Schema::default();
                check_results(&csv, &mut schema, None, run)?;
                check_header(&csv, schema.version())?;
            }
            Format::NcclTestsText | Format::NcclTestsJson | Format::RcclTestsJson | Format::TcpxPerfText => {
                nccl_errors(run)?;
                for s in &run.series {
                    for r in s.rows.values() {
                        if r.wrong.is_none() && r.max_error.is_none() {
                            let why = format!(
                                "{}: size {} ({}): no data check (#wrong N/A: -c 0)",
                                run.source, r.size, s.pattern
                            );
                            run.unverified.push(why);
                        }
                    }
                }
            }
            Format::TcpxPerfDir => {}
        }
    }
    Ok(())
}

/// nccl-tests' tolerance for the largest absolute error of a data type (`DeltaMaxValue` in
/// nccl-tests' common.cu): half precision 1e-2 (5e-2 in 2.0), float 1e-5, double 1e-12,
/// integers none; since 2.x multiplied by (ranks - 1). The larger of the two rules is used, and
/// 1024 ranks when the log does not say. `None`: a type nccl-tests had no tolerance for.
pub fn error_tolerance(dtype: &str, ranks: Option<u64>) -> Option<f64> {
    let base = match dtype {
        "half" | "float16" => 5e-2,
        "bfloat16" => 1e-2,
        "float" | "float32" => 1e-5,
        "double" | "float64" => 1e-12,
        "int8" | "uint8" | "char" | "int32" | "int" | "uint32" | "int64" | "uint64" => 0.0,
        _ => return None,
    };
    let scale = ranks.unwrap_or(1024).saturating_sub(1).max(1) as f64;
    Some(base * scale)
}

/// Refuses an nccl-tests row whose `error` column (pre-2.13 logs: the largest absolute error
/// of either placement) exceeds its data type's tolerance ([`error_tolerance`]).
pub fn nccl_errors(run: &Run) -> Result<(), Failure> {
    let ranks = run.labels.get("ranks").and_then(|r| r.parse::<u64>().ok());
    for s in &run.series {
        let dtype = s
            .variant
            .split(',')
            .find_map(|kv| kv.strip_prefix("type="))
            .or(run.labels.get("type").map(String::as_str))
            .unwrap_or("float");
        for r in s.rows.values() {
            let Some(e) = r.max_error else { continue };
            let tol = error_tolerance(dtype, ranks).unwrap_or(5e-2 * 1023.0);
            if e.is_nan() || e > tol {
                return Err(refuse(
                    &format!("{}: row of size {}", run.source, r.size),
                    None,
                    "error",
                    format!(
                        "{e:e} exceeds nccl-tests' tolerance for {dtype} over {} ranks ({tol:e}): the data check failed",
                        ranks.map_or("an unknown number of (assumed 1024)".to_string(), |n| n.to_string())
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `runs-needed --spread`: a finite positive fraction.
pub fn spread(s: f64) -> Result<f64, Failure> {
    if s.is_finite() && s > 0.0 && s < 10.0 {
        Ok(s)
    } else {
        Err(Failure::Usage(format!(
            "--spread {s}: give the run-to-run spread as a fraction > 0 (e.g. 0.05 for 5%), or runs to measure it from"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_precision() {
        let p = Printed::parse("2356.5474").unwrap();
        assert_eq!((p.value, p.half_ulp), (2356.5474, 0.5e-4));
        assert_eq!(Printed::parse("3e+02").unwrap().half_ulp, 50.0);
        assert!((Printed::parse("1e308").unwrap().half_ulp / 0.5e308 - 1.0).abs() < 1e-12);
        assert_eq!(Printed::parse("12").unwrap().half_ulp, 0.5);
        assert!(Printed::parse("inf").is_none() && Printed::parse("x").is_none());
        // 1e308 is not 0.44 within any rounding.
        assert!(!agrees(Printed::parse("1e308").unwrap(), 0.44, 1e-9));
        assert!(agrees(Printed::parse("0.444963").unwrap(), 0.4449628299, 1e-9));
        // A hand-edited round figure does not widen its own tolerance: `2` is not 1.890 rounded,
        // though 1.890 rounded to no decimals is 2; 4 significant digits pass.
        assert!((Printed::parse("2").unwrap().excused() - 1e-3).abs() < 1e-15);
        assert!(!agrees(Printed::parse("2").unwrap(), 1.890, 1e-9));
        assert!(agrees(Printed::parse("1.890").unwrap(), 1.8904, 1e-9));
    }

    #[test]
    fn tolerances() {
        assert_eq!(error_tolerance("float", Some(2)), Some(1e-5));
        assert!((error_tolerance("float", Some(16)).unwrap() - 1.5e-4).abs() < 1e-15);
        assert_eq!(error_tolerance("int32", Some(16)), Some(0.0));
        assert_eq!(error_tolerance("f8e4m3", Some(16)), None);
        for bad in [f64::NAN, -0.1, 0.0, f64::INFINITY] {
            assert!(spread(bad).is_err(), "{bad}");
        }
        assert_eq!(spread(0.05).unwrap(), 0.05);
    }
}
