//! rccl-tests result files (`-x FILE -Z json`, ROCm/rccl-tests#93, 2024-10): one JSON object
//! per line and placement, e.g.
//! `{"#wrong":"0","algBw":0.053,"busBw":0.080,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":1024,"time":19.18,"type":"float"}`;
//! since ROCm/rccl-tests#140 (2025-07) the same objects in one JSON list.

use super::{resolve_collective, ParseOptions, Placement};
use crate::error::ParseError;
use crate::model::{Format, Row, Run, Sample, Series};
use serde_json::Value;
use std::collections::BTreeMap;

/// True when the text looks like rccl-tests JSON (a `busBw` key in the first object).
pub fn detect(text: &str) -> bool {
    let t = text.trim_start();
    (t.starts_with('{') || t.starts_with('[')) && t.lines().next().is_some_and(|l| l.contains("\"busBw\""))
}

/// The objects with the line each starts on.
fn objects(file: &str, text: &str) -> Result<Vec<(usize, Value)>, ParseError> {
    if text.trim_start().starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            ParseError::new(
                file,
                Some(e.line()),
                format!("invalid JSON (column {}): {e}", e.column()),
            )
        })?;
        let list = v.as_array().cloned().unwrap_or_default();
        return Ok(list.into_iter().map(|o| (0, o)).collect());
    }
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim().trim_end_matches(',');
        if t.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(t).map_err(|e| {
            ParseError::new(
                file,
                Some(i + 1),
                format!("not a JSON object (column {}): {e}; a cut-off last line means the run died or the file is truncated", e.column()),
            )
        })?;
        out.push((i + 1, v));
    }
    Ok(out)
}

fn field<'a>(file: &str, ln: usize, o: &'a Value, k: &str) -> Result<&'a Value, ParseError> {
    o.get(k).ok_or_else(|| {
        ParseError::new(
            file,
            Some(ln),
            format!("missing key {k:?} (rccl-tests JSON has size, time, algBw, busBw, inPlace, name)"),
        )
    })
}

/// A non-negative finite number, or a numeric string (rccl-tests writes `#wrong` as "0").
fn number(file: &str, ln: usize, o: &Value, k: &str) -> Result<f64, ParseError> {
    let v = field(file, ln, o, k)?;
    let x = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match x {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(ParseError::new(
            file,
            Some(ln),
            format!("{k}: {v} is not a finite non-negative number"),
        )),
    }
}

pub fn parse(file: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    let want_in_place = matches!(opts.placement, Placement::InPlace);
    let mut series: Vec<(String, String, BTreeMap<u64, Row>)> = Vec::new();
    let mut wrong: BTreeMap<(String, String, u64), f64> = BTreeMap::new();
    let mut ranks = None;
    for (ln, o) in objects(file, text)? {
        if !o.is_object() {
            return Err(ParseError::new(file, Some(ln), "expected a JSON object per result"));
        }
        let name = field(file, ln, &o, "name")?.as_str().unwrap_or("").to_string();
        let key = format!(
            "{}{}",
            o.get("type").and_then(Value::as_str).unwrap_or(""),
            o.get("redop")
                .and_then(Value::as_str)
                .map(|r| format!(",{r}"))
                .unwrap_or_default()
        );
        let size_f = number(file, ln, &o, "size")?;
        if size_f.fract() != 0.0 || size_f > 1e18 {
            return Err(ParseError::new(file, Some(ln), "size: not an integer byte count"));
        }
        let size = size_f as u64;
        if o.get("#wrong").is_some_and(|w| w.as_str() != Some("N/A")) {
            *wrong.entry((name.clone(), key.clone(), size)).or_default() += number(file, ln, &o, "#wrong")?;
        }
        ranks = o.get("gpus").and_then(Value::as_u64).or(ranks);
        let in_place = number(file, ln, &o, "inPlace")? != 0.0;
        if in_place != want_in_place {
            continue;
        }
        let time = number(file, ln, &o, "time")?;
        if time <= 0.0 {
            return Err(ParseError::new(file, Some(ln), "time must be > 0"));
        }
        let row = Row {
            size,
            summary: Sample {
                time_us: time,
                algbw: number(file, ln, &o, "algBw")?,
                busbw: number(file, ln, &o, "busBw")?,
            },
            wrong: None,
            max_error: None,
            samples: Vec::new(),
        };
        let i = if let Some(i) = series.iter().position(|(n, k, _)| *n == name && *k == key) {
            i
        } else {
            series.push((name.clone(), key.clone(), BTreeMap::new()));
            series.len() - 1
        };
        if series[i].2.insert(size, row).is_some() {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!("size {size} of {name} {key} appears twice"),
            ));
        }
    }
    if series.iter().all(|s| s.2.is_empty()) {
        return Err(ParseError::new(
            file,
            None,
            "no rccl-tests results for the chosen placement",
        ));
    }
    let mut run = Run::new(file, Format::RcclTestsJson);
    let several = series.len() > 1;
    for (name, key, mut rows) in series {
        for (size, row) in &mut rows {
            row.wrong = wrong.get(&(name.clone(), key.clone(), *size)).copied();
        }
        let (pattern, family) = resolve_collective(file, Some(&name), opts, true)?;
        run.series.push(Series {
            pattern,
            family,
            variant: if several { key } else { String::new() },
            rows,
        });
    }
    run.labels.insert("tool".into(), "rccl-tests".into());
    if let Some(r) = ranks {
        run.labels.insert("ranks".into(), r.to_string());
    }
    Ok(run)
}
