//! tcpx-perf result directories (`results/README.md`): `results.csv` (schema versions 1-3),
//! `samples.csv`, `pairs.csv`, `summary.json`, and with `--baseline nccl` the `nccl_*` columns
//! and `nccl_samples.csv` ([`nccl_reference`]: NCCL of the same run, as a reference).

use super::{int, num, ParseOptions};
use crate::error::{Failure, ParseError};
use crate::model::{Family, Format, PairLink, Row, Run, Sample, Series};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A CSV table with named columns and 1-based line numbers.
struct Table {
    cols: HashMap<String, usize>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn parse(file: &str, text: &str, required: &[&str]) -> Result<Table, ParseError> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = rdr
            .headers()
            .map_err(|e| ParseError::new(file, Some(1), format!("bad CSV header: {e}")))?
            .clone();
        let cols: HashMap<String, usize> = headers.iter().enumerate().map(|(i, h)| (h.to_string(), i)).collect();
        for r in required {
            if !cols.contains_key(*r) {
                return Err(ParseError::new(
                    file,
                    Some(1),
                    format!("missing column `{r}` in the header"),
                ));
            }
        }
        let mut rows = Vec::new();
        for rec in rdr.records() {
            match rec {
                Ok(r) => {
                    let line = r.position().map_or(0, |p| p.line() as usize);
                    rows.push((line, r.iter().map(str::to_string).collect()));
                }
                Err(e) => {
                    let line = e.position().map(|p| p.line() as usize);
                    return Err(ParseError::new(file, line, format!("bad CSV record: {e}")));
                }
            }
        }
        Ok(Table { cols, rows })
    }

    fn get<'a>(&self, row: &'a [String], col: &str) -> Option<&'a str> {
        self.cols.get(col).and_then(|&i| row.get(i)).map(String::as_str)
    }
}

/// Schema 1: `bytes_moved` copied the completions. Schema 2: `bytes_moved` is a measurement or
/// `unverified`, with `bytes_verified_by` and the wire columns beside it. Schema 3: the `nccl_*`
/// columns (`--baseline nccl`). Schema 4: the `tcp_*` columns.
fn check_schema(file: &str, line: usize, v: Option<&str>) -> Result<(), ParseError> {
    let admitted = |v: &str| tcpx_schema::SCHEMA_VERSIONS.iter().any(|s| s.to_string() == v);
    match v {
        Some(v) if admitted(v) => Ok(()),
        Some(other) => Err(ParseError::new(
            file,
            Some(line),
            format!(
                "schema_version {other:?} is not supported ({} expected)",
                crate::validate::admitted_versions()
            ),
        )),
        None => Err(ParseError::new(file, Some(line), "missing schema_version")),
    }
}

/// Parses `results.csv` into series (one per pattern and scope/dir/mem variant).
pub fn parse_results_csv(file: &str, text: &str) -> Result<(Vec<Series>, BTreeMap<String, String>), ParseError> {
    let req = [
        "schema_version",
        "pattern",
        "size_bytes",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
    ];
    let t = Table::parse(file, text, &req)?;
    let mut series: Vec<Series> = Vec::new();
    let mut labels = BTreeMap::new();
    for (ln, r) in &t.rows {
        let ln = *ln;
        check_schema(file, ln, t.get(r, "schema_version"))?;
        let pattern = t.get(r, "pattern").unwrap_or("").to_string();
        if pattern.is_empty() {
            return Err(ParseError::new(file, Some(ln), "empty pattern"));
        }
        let variant = ["scope", "dir", "mem"]
            .iter()
            .filter_map(|c| t.get(r, c).filter(|v| !v.is_empty()).map(|v| format!("{c}={v}")))
            .collect::<Vec<_>>()
            .join(",");
        let size = int(file, ln, "size_bytes", t.get(r, "size_bytes").unwrap_or(""))?;
        let time = num(file, ln, "time_us", t.get(r, "time_us").unwrap_or(""))?;
        if time <= 0.0 {
            return Err(ParseError::new(file, Some(ln), "time_us must be > 0"));
        }
        let algbw = num(file, ln, "algbw_gbps", t.get(r, "algbw_gbps").unwrap_or(""))?;
        let busbw = num(file, ln, "busbw_gbps", t.get(r, "busbw_gbps").unwrap_or(""))?;
        let wrong = match t.get(r, "wrong").unwrap_or("") {
            "" => None,
            w => Some(num(file, ln, "wrong", w)?),
        };
        if let (Some(p), Some(m)) = (t.get(r, "bytes_planned"), t.get(r, "bytes_moved")) {
            // "unverified": nothing saw the payload exactly (tcpx-perf's own check already failed
            // the run where a source saw a shortfall).
            if !p.is_empty() && !m.is_empty() && m != tcpx_schema::UNVERIFIED && p != m {
                return Err(ParseError::new(
                    file,
                    Some(ln),
                    format!("bytes_planned ({p}) != bytes_moved ({m}): the run lost or duplicated data"),
                ));
            }
        }
        for c in ["plugin", "abi", "ranks", "endpoints", "nodes"] {
            if let Some(v) = t.get(r, c).filter(|v| !v.is_empty()) {
                labels.entry(c.to_string()).or_insert_with(|| v.to_string());
            }
        }
        let idx = if let Some(i) = series.iter().position(|s| s.pattern == pattern && s.variant == variant) {
            i
        } else {
            series.push(Series {
                family: Family::from_name(&pattern),
                pattern: pattern.clone(),
                variant: variant.clone(),
                rows: BTreeMap::new(),
            });
            series.len() - 1
        };
        let row = Row {
            size,
            summary: Sample {
                time_us: time,
                algbw,
                busbw,
            },
            wrong,
            max_error: None,
            samples: Vec::new(),
        };
        if series[idx].rows.insert(size, row).is_some() {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!("duplicate row for pattern {pattern} ({variant}) size {size}"),
            ));
        }
    }
    if series.is_empty() {
        return Err(ParseError::new(file, None, "no result rows"));
    }
    Ok((series, labels))
}

/// Attaches `samples.csv` rows to the series of their pattern.
pub fn parse_samples_csv(file: &str, text: &str, series: &mut [Series]) -> Result<(), ParseError> {
    let req = [
        "schema_version",
        "pattern",
        "size_bytes",
        "iter",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
    ];
    let t = Table::parse(file, text, &req)?;
    for (ln, r) in &t.rows {
        let ln = *ln;
        check_schema(file, ln, t.get(r, "schema_version"))?;
        let pattern = t.get(r, "pattern").unwrap_or("");
        let size = int(file, ln, "size_bytes", t.get(r, "size_bytes").unwrap_or(""))?;
        int(file, ln, "iter", t.get(r, "iter").unwrap_or(""))?;
        let s = Sample {
            time_us: num(file, ln, "time_us", t.get(r, "time_us").unwrap_or(""))?,
            algbw: num(file, ln, "algbw_gbps", t.get(r, "algbw_gbps").unwrap_or(""))?,
            busbw: num(file, ln, "busbw_gbps", t.get(r, "busbw_gbps").unwrap_or(""))?,
        };
        if s.time_us <= 0.0 {
            return Err(ParseError::new(file, Some(ln), "time_us must be > 0"));
        }
        let mut hits = series.iter_mut().filter(|x| x.pattern == pattern);
        let (Some(ser), None) = (hits.next(), hits.next()) else {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!("pattern {pattern:?} matches no single series of results.csv"),
            ));
        };
        let Some(row) = ser.rows.get_mut(&size) else {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!("size {size} of pattern {pattern} is not in results.csv"),
            ));
        };
        row.samples.push(s);
    }
    Ok(())
}

/// Parses `pairs.csv` (the per-pair link matrix).
pub fn parse_pairs_csv(file: &str, text: &str) -> Result<Vec<PairLink>, ParseError> {
    let req = [
        "schema_version",
        "pattern",
        "size_bytes",
        "src_rank",
        "dst_rank",
        "gbps",
    ];
    let t = Table::parse(file, text, &req)?;
    let mut out = Vec::new();
    for (ln, r) in &t.rows {
        let ln = *ln;
        check_schema(file, ln, t.get(r, "schema_version"))?;
        // A pair above its link rate carries no rate (an error of measurement): nothing to draw.
        if t.get(r, "above_link") == Some("true") && t.get(r, "gbps").unwrap_or("").is_empty() {
            continue;
        }
        // A NIC's link or a node pair (a job past 65536 endpoint pairs): no endpoint to place.
        if t.get(r, "level").is_some_and(|l| l != "endpoint") {
            continue;
        }
        let rank = |c: &str| -> Result<u32, ParseError> {
            let v = int(file, ln, c, t.get(r, c).unwrap_or(""))?;
            u32::try_from(v).map_err(|_| ParseError::new(file, Some(ln), format!("{c}: {v} is too large")))
        };
        // Columns of later schemas: absent or empty is unknown.
        let given = |c: &str| t.get(r, c).filter(|v| !v.is_empty());
        let gpu = |c: &str| given(c).map(|_| rank(c)).transpose();
        out.push(PairLink {
            pattern: t.get(r, "pattern").unwrap_or("").to_string(),
            size: int(file, ln, "size_bytes", t.get(r, "size_bytes").unwrap_or(""))?,
            src_rank: rank("src_rank")?,
            src_gpu: gpu("src_gpu")?,
            src_host: t.get(r, "src_host").unwrap_or("").to_string(),
            dst_rank: rank("dst_rank")?,
            dst_gpu: gpu("dst_gpu")?,
            dst_host: t.get(r, "dst_host").unwrap_or("").to_string(),
            gbps: num(file, ln, "gbps", t.get(r, "gbps").unwrap_or(""))?,
            rail: given("rail").map(str::to_string),
        });
    }
    Ok(out)
}

/// A `results.csv` given on its own (no summary.json, no samples).
pub fn parse_results_only(file: &str, text: &str, _opts: &ParseOptions) -> Result<Run, ParseError> {
    let (series, labels) = parse_results_csv(file, text)?;
    let mut run = Run::new(file, Format::TcpxPerfCsv);
    run.series = series;
    run.labels = labels;
    Ok(run)
}

fn read(path: &Path) -> Result<String, Failure> {
    crate::input::read_text(path)
}

/// Loads a complete tcpx-perf result directory. Incomplete runs (no summary.json or
/// `"complete": false`) are refused as invalid input.
pub fn load_dir(dir: &Path, opts: &ParseOptions) -> Result<Run, Failure> {
    let _ = opts;
    let sum_path = dir.join("summary.json");
    let sum_name = sum_path.display().to_string();
    if !sum_path.exists() {
        return Err(Failure::Input(format!(
            "{sum_name}: missing: the run is incomplete (summary.json is written last)"
        )));
    }
    let sum_text = read(&sum_path)?;
    let summary: serde_json::Value = serde_json::from_str(&sum_text)
        .map_err(|e| Failure::from(ParseError::new(&sum_name, Some(e.line()), format!("invalid JSON: {e}"))))?;
    if summary.get("complete").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(Failure::Input(format!(
            "{sum_name}: \"complete\" is not true: the run did not finish"
        )));
    }
    let res_path = dir.join("results.csv");
    let res_name = res_path.display().to_string();
    if !res_path.exists() {
        return Err(Failure::Input(format!("{res_name}: missing")));
    }
    let (mut series, labels) = parse_results_csv(&res_name, &read(&res_path)?)?;
    let samp_path = dir.join("samples.csv");
    if samp_path.exists() {
        parse_samples_csv(&samp_path.display().to_string(), &read(&samp_path)?, &mut series)?;
    }
    let mut run = Run::new(&dir.display().to_string(), Format::TcpxPerfDir);
    let pairs_path = dir.join("pairs.csv");
    if pairs_path.exists() {
        run.pairs = parse_pairs_csv(&pairs_path.display().to_string(), &read(&pairs_path)?)?;
    }
    run.series = series;
    run.labels = labels;
    run.status = summary
        .get("status")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    run.wrong_total = summary.get("wrong_total").and_then(serde_json::Value::as_f64);
    if let Some(v) = summary
        .get("tool")
        .and_then(|t| t.get("git_commit"))
        .and_then(serde_json::Value::as_str)
    {
        run.labels.insert("git_commit".into(), v.to_string());
    }
    crate::validate::tcpx_dir(dir, &summary, &mut run)?;
    run.config = crate::comparable::of_summary(&summary);
    Ok(run)
}

/// NCCL of the same run (`tcpx-perf --baseline nccl`) as a run of its own: per size NCCL's
/// figures with tcpx-perf's timing (`nccl_time_us`, `nccl_algbw_gbps`, `nccl_busbw_gbps`) and
/// its per-iteration samples (`nccl_samples.csv`, timing `barrier`), under the same pattern and
/// variant as the candidate's rows. `None` when the directory has no NCCL figures.
pub fn nccl_reference(run: &Run) -> Result<Option<Run>, Failure> {
    if run.format != Format::TcpxPerfDir {
        return Ok(None);
    }
    let dir = Path::new(&run.source);
    let res_path = dir.join("results.csv");
    let res_name = res_path.display().to_string();
    let t = Table::parse(&res_name, &read(&res_path)?, &["pattern", "size_bytes"])?;
    let mut out = Run::new(&format!("{} (NCCL, same run)", run.source), Format::TcpxPerfDir);
    out.labels = run.labels.clone();
    out.labels
        .insert("tool".into(), "NCCL (tcpx-perf --baseline nccl)".into());
    for (ln, r) in &t.rows {
        let ln = *ln;
        let Some(time) = t.get(r, "nccl_time_us").filter(|v| !v.is_empty()) else {
            continue;
        };
        let pattern = t.get(r, "pattern").unwrap_or("").to_string();
        let variant = ["scope", "dir", "mem"]
            .iter()
            .filter_map(|c| t.get(r, c).filter(|v| !v.is_empty()).map(|v| format!("{c}={v}")))
            .collect::<Vec<_>>()
            .join(",");
        let size = int(&res_name, ln, "size_bytes", t.get(r, "size_bytes").unwrap_or(""))?;
        let figure = |c: &str| num(&res_name, ln, c, t.get(r, c).unwrap_or(""));
        let summary = Sample {
            time_us: num(&res_name, ln, "nccl_time_us", time)?,
            algbw: figure("nccl_algbw_gbps")?,
            busbw: figure("nccl_busbw_gbps")?,
        };
        let wrong = match t.get(r, "nccl_wrong").unwrap_or("") {
            "" => None,
            w => Some(num(&res_name, ln, "nccl_wrong", w)?),
        };
        let idx = if let Some(i) = out
            .series
            .iter()
            .position(|s| s.pattern == pattern && s.variant == variant)
        {
            i
        } else {
            out.series.push(Series {
                family: Family::from_name(&pattern),
                pattern: pattern.clone(),
                variant,
                rows: BTreeMap::new(),
            });
            out.series.len() - 1
        };
        out.series[idx].rows.insert(
            size,
            Row {
                size,
                summary,
                wrong,
                max_error: None,
                samples: Vec::new(),
            },
        );
    }
    if out.series.is_empty() {
        return Ok(None);
    }
    let samp_path = dir.join("nccl_samples.csv");
    if samp_path.exists() {
        let name = samp_path.display().to_string();
        let req = ["pattern", "size_bytes", "timing", "time_us", "algbw_gbps", "busbw_gbps"];
        let t = Table::parse(&name, &read(&samp_path)?, &req)?;
        for (ln, r) in &t.rows {
            if t.get(r, "timing") != Some("barrier") {
                continue;
            }
            let ln = *ln;
            let size = int(&name, ln, "size_bytes", t.get(r, "size_bytes").unwrap_or(""))?;
            let pattern = t.get(r, "pattern").unwrap_or("");
            let s = Sample {
                time_us: num(&name, ln, "time_us", t.get(r, "time_us").unwrap_or(""))?,
                algbw: num(&name, ln, "algbw_gbps", t.get(r, "algbw_gbps").unwrap_or(""))?,
                busbw: num(&name, ln, "busbw_gbps", t.get(r, "busbw_gbps").unwrap_or(""))?,
            };
            if let Some(row) = out
                .series
                .iter_mut()
                .filter(|x| x.pattern == pattern)
                .find_map(|x| x.rows.get_mut(&size))
            {
                row.samples.push(s);
            }
        }
    }
    Ok(Some(out))
}
