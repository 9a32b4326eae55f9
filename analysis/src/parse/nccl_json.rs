//! nccl-tests JSON output (`-J`, `JSON_FILE_VERSION 3`, peers.md §1.9), including the `-I`
//! per-iteration samples (`times_us`). Booleans are strings and NaN is the string `"nan"`.

use super::{resolve_collective, ParseOptions, Placement};
use crate::error::ParseError;
use crate::model::{Format, Row, Run, Sample, Series};
use serde_json::Value;
use std::collections::BTreeMap;

fn err(file: &str, path: &str, msg: impl Into<String>) -> ParseError {
    ParseError::new(file, None, format!("at {path}: {}", msg.into()))
}

/// A number, or the string "nan"/a numeric string (nccl-tests writes NaN as "nan").
fn f(file: &str, path: &str, v: Option<&Value>) -> Result<Option<f64>, ParseError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("nan") => Ok(Some(f64::NAN)),
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map(Some)
            .map_err(|_| err(file, path, format!("expected a number, found string {s:?}"))),
        Some(other) => Err(err(file, path, format!("expected a number, found {other}"))),
    }
}

fn req(file: &str, path: &str, v: Option<&Value>) -> Result<f64, ParseError> {
    match f(file, path, v)? {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Some(x) => Err(err(
            file,
            path,
            format!("value {x} is not a finite non-negative number"),
        )),
        None => Err(err(file, path, "missing")),
    }
}

/// tcpx-perf's `--pattern` in its argv (`--pattern X` or `--pattern=X`; default `sendrecv`).
fn tcpx_pattern(args: &[&str]) -> String {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if *a == "--pattern" {
            if let Some(v) = it.next() {
                return (*v).to_string();
            }
        } else if let Some(v) = a.strip_prefix("--pattern=") {
            return v.to_string();
        }
    }
    "sendrecv".into()
}

pub fn parse(file: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        ParseError::new(
            file,
            Some(e.line()),
            format!("invalid JSON (column {}): {e}", e.column()),
        )
    })?;
    let obj = root
        .as_object()
        .ok_or_else(|| err(file, "$", "top level is not an object"))?;
    match obj.get("version").and_then(Value::as_i64) {
        Some(3) => {}
        Some(v) => {
            return Err(err(
                file,
                "$.version",
                format!("unsupported nccl-tests JSON version {v} (3 supported)"),
            ))
        }
        None => return Err(err(file, "$.version", "missing: not nccl-tests JSON")),
    }
    let results = obj
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| err(file, "$.results", "missing or not an array"))?;
    let (key, iter_key) = match opts.placement {
        Placement::OutOfPlace => ("out_of_place", "out_of_place_per_iter"),
        Placement::InPlace => ("in_place", "in_place_per_iter"),
    };
    let mut rows = BTreeMap::new();
    let mut wrong_sum: Option<f64> = None;
    for (i, r) in results.iter().enumerate() {
        let p = format!("$.results[{i}]");
        let size_f = req(file, &format!("{p}.size"), r.get("size"))?;
        if size_f.fract() != 0.0 || size_f > 1e18 {
            return Err(err(file, &format!("{p}.size"), "not an integer byte count"));
        }
        let size = size_f as u64;
        let place = r.get(key).ok_or_else(|| err(file, &format!("{p}.{key}"), "missing"))?;
        let tp = format!("{p}.{key}");
        let time = match place.get("time") {
            Some(v) => req(file, &format!("{tp}.time"), Some(v))?,
            None => req(file, &format!("{tp}.cpu_time"), place.get("cpu_time"))?,
        };
        if time <= 0.0 {
            return Err(err(file, &format!("{tp}.time"), "time must be > 0"));
        }
        let algbw = req(file, &format!("{tp}.alg_bw"), place.get("alg_bw"))?;
        let busbw = req(file, &format!("{tp}.bus_bw"), place.get("bus_bw"))?;
        // nwrong of both placements counts (in-place is null when unchecked).
        for k in ["out_of_place", "in_place"] {
            if let Some(w) = f(file, &format!("{p}.{k}.nwrong"), r.get(k).and_then(|o| o.get("nwrong")))? {
                // NaN wrong counts are treated as wrong data (fail closed).
                let w = if w.is_nan() { f64::INFINITY } else { w };
                *wrong_sum.get_or_insert(0.0) += w;
            }
        }
        let wrong =
            f(file, &format!("{tp}.nwrong"), place.get("nwrong"))?.map(|w| if w.is_nan() { f64::INFINITY } else { w });
        // Per-iteration samples: algbw_i = algbw * time / t_i keeps nccl-tests' own bytes
        // definition; busbw_i = algbw_i * (busbw / algbw).
        let mut samples = Vec::new();
        if let Some(pi) = r.get(iter_key) {
            if let Some(ts) = pi.get("times_us") {
                let arr = ts
                    .as_array()
                    .ok_or_else(|| err(file, &format!("{p}.{iter_key}.times_us"), "not an array"))?;
                let bw_factor = if algbw > 0.0 { busbw / algbw } else { 1.0 };
                let bytes_per_us = if algbw > 0.0 { algbw * time * 1e3 } else { size as f64 };
                // `-K k` excludes the first k iterations from nccl-tests' own statistics but
                // keeps them in `times_us`: they are warm-up, not samples.
                let skip_path = format!("{p}.{iter_key}.skipped_iterations");
                let skip = f(file, &skip_path, pi.get("skipped_iterations"))?.unwrap_or(0.0);
                if skip.fract() != 0.0 || skip < 0.0 || skip >= arr.len().max(1) as f64 {
                    return Err(err(
                        file,
                        &skip_path,
                        format!("{skip} is not a count below the {} iterations", arr.len()),
                    ));
                }
                let mut times = Vec::with_capacity(arr.len());
                for (j, t) in arr.iter().enumerate().skip(skip as usize) {
                    let ti = req(file, &format!("{p}.{iter_key}.times_us[{j}]"), Some(t))?;
                    if ti <= 0.0 {
                        return Err(err(file, &format!("{p}.{iter_key}.times_us[{j}]"), "time must be > 0"));
                    }
                    times.push(ti);
                }
                // Calibration: `-I` times are CUDA-event times of single iterations, max over
                // processes; the headline `time` is the wall-clock mean over all iterations,
                // averaged over ranks. The two differ by a roughly constant offset (e.g. 466 vs
                // 401 us), so the samples are scaled to the headline (mean(t_i') = time): they keep
                // their relative spread and become comparable with headline-based baselines.
                let k = if times.is_empty() {
                    1.0
                } else {
                    time / (times.iter().sum::<f64>() / times.len() as f64)
                };
                for ti in times {
                    let ti = ti * k;
                    let a = bytes_per_us / ti / 1e3;
                    samples.push(Sample {
                        time_us: ti,
                        algbw: a,
                        busbw: a * bw_factor,
                    });
                }
            }
        }
        let row = Row {
            size,
            summary: Sample {
                time_us: time,
                algbw,
                busbw,
            },
            wrong,
            max_error: None,
            samples,
        };
        if rows.insert(size, row).is_some() {
            return Err(err(
                file,
                &p,
                format!("size {size} appears twice (several data types/ops are not supported)"),
            ));
        }
    }
    if rows.is_empty() {
        return Err(err(file, "$.results", "no results"));
    }
    let mut run = Run::new(file, Format::NcclTestsJson);
    let oob = f(
        file,
        "$.out_of_bounds.count",
        obj.get("out_of_bounds").and_then(|o| o.get("count")),
    )?;
    run.wrong_total = match (oob, wrong_sum) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0).max(b.unwrap_or(0.0))),
    };
    // The collective: from argv[0] (e.g. ".../sendrecv_perf"), else the file name, else --pattern.
    // tcpx-perf's -J file: its `--pattern` (default sendrecv).
    let args: Vec<&str> = obj
        .get("args")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let argv0 = args.first().map(|s| s.rsplit('/').next().unwrap_or(s).to_string());
    let from_tcpx = argv0.as_deref() == Some("tcpx-perf");
    let named = if from_tcpx { Some(tcpx_pattern(&args)) } else { argv0 };
    let (pattern, family) = resolve_collective(file, named.as_deref(), opts, true)?;
    if from_tcpx {
        run.labels.insert("tool".into(), "tcpx-perf".into());
    }
    if let Some(v) = obj.get("nccl_version").and_then(Value::as_i64) {
        run.labels.insert("nccl_version".into(), v.to_string());
    }
    if let Some(d) = obj
        .get("config")
        .and_then(|c| c.get("devices"))
        .and_then(Value::as_array)
    {
        run.labels.insert("ranks".into(), d.len().to_string());
    }
    run.series.push(Series {
        pattern,
        family,
        variant: String::new(),
        rows,
    });
    Ok(run)
}
