//! Declarative baseline files (TOML). See `analysis/README.md` ("Baseline files").

use crate::error::ParseError;
use crate::model::{parse_size, Family, Metric};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeSpec {
    Int(u64),
    Str(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    metric: String,
    #[serde(default)]
    statistic: Option<String>,
    #[serde(default)]
    size: Option<SizeSpec>,
    #[serde(default)]
    size_min: Option<SizeSpec>,
    #[serde(default)]
    size_max: Option<SizeSpec>,
    #[serde(default)]
    step_factor: Option<u64>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    values: Option<Vec<f64>>,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBaseline {
    schema_version: u32,
    name: String,
    #[serde(default)]
    description: String,
    pattern: String,
    unit: String,
    #[serde(default)]
    placement: Option<String>,
    #[serde(default)]
    provenance: BTreeMap<String, toml::Value>,
    #[serde(default)]
    entry: Vec<RawEntry>,
}

/// What an entry's value summarises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Statistic {
    /// A reference for each size in `size_min..=size_max` (one size when equal).
    PerSize,
    /// The arithmetic mean over the sizes `size_min, size_min*step, .., size_max`
    /// (nccl-tests' "Avg bus bandwidth" footer).
    MeanOverSizes,
}

/// The unit of a baseline value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// 10^9 bytes per second.
    #[serde(rename = "GB/s")]
    GBps,
    /// 2^30 bytes per second (must be converted explicitly: `--convert-units`).
    #[serde(rename = "GiB/s")]
    GiBps,
    /// Microseconds.
    #[serde(rename = "us")]
    Us,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        match s.trim() {
            "GB/s" => Some(Unit::GBps),
            "GiB/s" => Some(Unit::GiBps),
            "us" => Some(Unit::Us),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::GBps => "GB/s",
            Unit::GiBps => "GiB/s",
            Unit::Us => "us",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub metric: Metric,
    pub statistic: Statistic,
    pub size_min: u64,
    pub size_max: u64,
    pub step_factor: u64,
    /// One value (a constant) or several (a distribution, e.g. R runs).
    pub values: Vec<f64>,
    pub unit: Unit,
    pub note: String,
}

impl Entry {
    /// The sizes a mean-over-sizes entry averages over.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = vec![self.size_min];
        if self.step_factor < 2 {
            return v;
        }
        let mut s = self.size_min;
        while let Some(n) = s.checked_mul(self.step_factor).filter(|&n| n <= self.size_max) {
            v.push(n);
            s = n;
        }
        v
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    pub file: String,
    pub name: String,
    pub description: String,
    pub pattern: String,
    pub family: Option<Family>,
    pub placement: Option<String>,
    pub provenance: BTreeMap<String, String>,
    pub entries: Vec<Entry>,
}

fn size(file: &str, what: &str, s: &SizeSpec) -> Result<u64, ParseError> {
    match s {
        SizeSpec::Int(n) => Ok(*n),
        SizeSpec::Str(t) => parse_size(t).ok_or_else(|| {
            ParseError::new(
                file,
                None,
                format!("{what}: cannot parse size {t:?} (use bytes or 1K/64M/1G)"),
            )
        }),
    }
}

/// Parses a baseline TOML text.
pub fn parse(file: &str, text: &str) -> Result<Baseline, ParseError> {
    let raw: RawBaseline = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        ParseError::new(file, line, format!("invalid baseline TOML: {}", e.message()))
    })?;
    if raw.schema_version != 1 {
        return Err(ParseError::new(
            file,
            None,
            format!("schema_version {} not supported (1 expected)", raw.schema_version),
        ));
    }
    let top_unit = Unit::parse(&raw.unit).ok_or_else(|| {
        ParseError::new(
            file,
            None,
            format!("unit {:?}: use \"GB/s\", \"GiB/s\" or \"us\"", raw.unit),
        )
    })?;
    if raw.entry.is_empty() {
        return Err(ParseError::new(file, None, "no [[entry]] tables"));
    }
    let mut entries = Vec::new();
    for (i, e) in raw.entry.iter().enumerate() {
        let what = format!("entry #{}", i + 1);
        let err = |m: String| ParseError::new(file, None, format!("{what}: {m}"));
        let metric =
            Metric::parse(&e.metric).ok_or_else(|| err(format!("metric {:?}: use busbw, algbw or time", e.metric)))?;
        let statistic = match e.statistic.as_deref().unwrap_or("per-size") {
            "per-size" => Statistic::PerSize,
            "mean-over-sizes" => Statistic::MeanOverSizes,
            s => return Err(err(format!("statistic {s:?}: use per-size or mean-over-sizes"))),
        };
        let (lo, hi) = match (&e.size, &e.size_min, &e.size_max) {
            (Some(s), None, None) => {
                let s = size(file, &what, s)?;
                (s, s)
            }
            (None, Some(a), Some(b)) => (size(file, &what, a)?, size(file, &what, b)?),
            _ => return Err(err("give either `size` or both `size_min` and `size_max`".into())),
        };
        if lo == 0 || lo > hi {
            return Err(err(format!("bad size range {lo}..{hi}")));
        }
        let values = match (&e.value, &e.values) {
            (Some(v), None) => vec![*v],
            (None, Some(v)) if !v.is_empty() => v.clone(),
            _ => return Err(err("give either `value` or a non-empty `values` list".into())),
        };
        if values.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err(err("values must be finite and > 0".into()));
        }
        let unit = match &e.unit {
            Some(u) => Unit::parse(u).ok_or_else(|| err(format!("unit {u:?}")))?,
            None => top_unit,
        };
        if (metric == Metric::Time) != (unit == Unit::Us) {
            return Err(err(format!("unit {} does not fit metric {metric}", unit.as_str())));
        }
        let step = e.step_factor.unwrap_or(2);
        if statistic == Statistic::MeanOverSizes {
            if metric == Metric::Time {
                return Err(err("a mean over sizes of time is meaningless; use a bandwidth".into()));
            }
            if step < 2 {
                return Err(err("step_factor must be >= 2".into()));
            }
        }
        entries.push(Entry {
            metric,
            statistic,
            size_min: lo,
            size_max: hi,
            step_factor: step,
            values,
            unit,
            note: e.note.clone().unwrap_or_default(),
        });
    }
    let provenance = raw
        .provenance
        .iter()
        .map(|(k, v)| {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect();
    Ok(Baseline {
        file: file.to_string(),
        name: raw.name,
        description: raw.description,
        family: Family::from_name(&raw.pattern),
        pattern: raw.pattern,
        placement: raw.placement,
        provenance,
        entries,
    })
}

/// Loads a baseline file from disk.
pub fn load(path: &std::path::Path) -> Result<Baseline, crate::error::Failure> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| crate::error::Failure::Input(format!("{name}: {e}")))?;
    Ok(parse(&name, &text)?)
}

/// True when the path looks like a baseline file.
pub fn is_baseline_path(p: &std::path::Path) -> bool {
    p.extension().is_some_and(|e| e == "toml")
}

/// Writes a baseline TOML from runs: one `per-size` entry per pattern x size x metric.
/// With one run the per-iteration samples become the `values` (a distribution: two-sample
/// tests); with several runs, one value per run (the runs are the unit of replication).
pub fn from_runs(
    name: &str,
    runs: &[crate::model::Run],
    metrics: &[Metric],
    description: &str,
) -> Result<String, String> {
    use std::fmt::Write;
    let first = runs.first().ok_or("no runs")?;
    let ser = match first.series.as_slice() {
        [s] => s,
        _ => {
            return Err(format!(
                "{}: one pattern per baseline file (found {})",
                first.source,
                first.series.len()
            ))
        }
    };
    let mut o = String::new();
    let q = |s: &str| format!("{s:?}");
    let _ = writeln!(
        o,
        "# Generated by tcpx-analyze {} from {} run(s).",
        env!("CARGO_PKG_VERSION"),
        runs.len()
    );
    let _ = writeln!(o, "schema_version = 1");
    let _ = writeln!(o, "name = {}", q(name));
    let _ = writeln!(o, "description = {}", q(description));
    let _ = writeln!(o, "pattern = {}", q(&ser.pattern));
    let _ = writeln!(o, "unit = \"GB/s\"");
    let _ = writeln!(o, "\n[provenance]");
    let srcs: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
    let _ = writeln!(o, "source = {}", q(&srcs.join(", ")));
    for (k, v) in &first.labels {
        let _ = writeln!(o, "{k} = {}", q(v));
    }
    for (size, row) in &ser.rows {
        for &m in metrics {
            let values: Vec<f64> = if runs.len() == 1 {
                if row.samples.is_empty() {
                    vec![row.summary.get(m)]
                } else {
                    row.samples.iter().map(|s| s.get(m)).collect()
                }
            } else {
                let mut v = Vec::new();
                for r in runs {
                    let s = r
                        .series
                        .iter()
                        .find(|s| s.pattern == ser.pattern && s.variant == ser.variant)
                        .ok_or_else(|| format!("{}: no pattern {}", r.source, ser.pattern))?;
                    let row = s
                        .rows
                        .get(size)
                        .ok_or_else(|| format!("{}: no size {size}", r.source))?;
                    v.push(row.summary.get(m));
                }
                v
            };
            let _ = writeln!(o, "\n[[entry]]\nmetric = \"{}\"\nsize = {size}", m.name());
            if m == Metric::Time {
                let _ = writeln!(o, "unit = \"us\"");
            }
            let vals: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
            if vals.len() == 1 {
                let _ = writeln!(o, "value = {}", vals[0]);
            } else {
                let _ = writeln!(o, "values = [{}]", vals.join(", "));
            }
        }
    }
    // Round-trip check: the file must parse.
    parse("generated", &o).map_err(|e| e.to_string())?;
    Ok(o)
}
