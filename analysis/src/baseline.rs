//! Declarative baseline files (TOML). See `analysis/README.md` ("Baseline files").

use crate::error::ParseError;
pub use crate::input::is_baseline_path;
use crate::model::{Family, Metric, Waiver};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tcpx_units::parse_size;

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
    /// Run-to-run spread (sd of the logs of `values`), written by make-baseline for readers;
    /// the gate recomputes it from `values`.
    #[serde(default)]
    spread: Option<f64>,
}

/// The job shape the baseline was measured with (refused against another shape).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// Endpoints: GPUs, i.e. NCCL ranks (nccl-tests' "ranks").
    #[serde(default)]
    pub endpoints: Option<u64>,
    /// MPI processes (tcpx-perf `ranks`).
    #[serde(default)]
    pub ranks: Option<u64>,
    #[serde(default)]
    pub nodes: Option<u64>,
    /// The plugin or transport (reported, not refused: comparing plugins is the point).
    #[serde(default)]
    pub plugin: Option<String>,
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
    /// How many runs the values come from (each `values` list holds one value per run, in
    /// run order). Absent: unknown, and the gate cannot judge significance from the values.
    #[serde(default)]
    runs: Option<usize>,
    #[serde(default)]
    shape: Shape,
    /// The configuration that changes a figure ([`crate::comparable`]); `"n/a"` where the
    /// figure has no such setting.
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    #[serde(default)]
    provenance: BTreeMap<String, toml::Value>,
    /// The waivers its runs were admitted under (`make-baseline --allow-forced`: `["FORCED"]`).
    #[serde(default)]
    waivers: Vec<String>,
    /// Which runs needed them, one line each.
    #[serde(default)]
    waived: Vec<String>,
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
    /// The spread recorded by make-baseline (informative; the gate uses `values`).
    pub spread: Option<f64>,
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
    /// Runs the values come from (None: unknown).
    pub runs: Option<usize>,
    pub job: Shape,
    /// The configuration its figures were made with (`[config]`; empty in older files: nothing
    /// checked, which a comparison says).
    pub config: crate::comparable::Configuration,
    pub provenance: BTreeMap<String, String>,
    /// The waivers of the runs it was made from (forced, unchecked, ...): every gate against it
    /// needs their flags and names them ([`crate::admit::baseline_policy`]).
    pub waivers: Vec<Waiver>,
    /// Which runs needed them (`waived`), one line each.
    pub waived: Vec<String>,
    pub entries: Vec<Entry>,
}

impl Baseline {
    /// The job shape in the keys of [`Run::shape`](crate::model::Run::shape).
    pub fn shape(&self) -> BTreeMap<&'static str, String> {
        let mut m = BTreeMap::new();
        for (k, v) in [
            ("endpoints", self.job.endpoints),
            ("MPI ranks", self.job.ranks),
            ("nodes", self.job.nodes),
        ] {
            if let Some(v) = v {
                m.insert(k, v.to_string());
            }
        }
        m
    }
}

fn size(file: &str, what: &str, s: &SizeSpec) -> Result<u64, ParseError> {
    match s {
        SizeSpec::Int(n) => Ok(*n),
        SizeSpec::Str(t) => parse_size(t).map_err(|_| {
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
    if raw.runs == Some(0) {
        return Err(ParseError::new(
            file,
            None,
            "runs = 0: give the number of runs the values come from",
        ));
    }
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
        if let Some(r) = raw.runs.filter(|_| values.len() > 1) {
            if values.len() != r {
                return Err(err(format!(
                    "{} values but runs = {r}: a `values` list holds one value per run",
                    values.len()
                )));
            }
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
            spread: e.spread,
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
    let waivers = waivers_of(file, &raw.waivers, &raw.description)?;
    let config = config_of(file, &raw.config)?;
    Ok(Baseline {
        config,
        file: file.to_string(),
        waivers,
        waived: raw.waived,
        name: raw.name,
        description: raw.description,
        family: Family::from_name(&raw.pattern),
        pattern: raw.pattern,
        placement: raw.placement,
        runs: raw.runs,
        job: raw.shape,
        provenance,
        entries,
    })
}

/// A baseline's `[config]`: known fields only (the job shape lives in `[shape]`), each a
/// string, a whole number or a boolean.
fn config_of(file: &str, raw: &BTreeMap<String, toml::Value>) -> Result<crate::comparable::Configuration, ParseError> {
    let shape = ["endpoints", "MPI ranks", "nodes"];
    let mut out = crate::comparable::Configuration::new();
    for (k, v) in raw {
        if !crate::comparable::is_field(k) || shape.contains(&k.as_str()) {
            let known: Vec<&str> = crate::comparable::FIELDS
                .iter()
                .map(|f| f.name)
                .filter(|n| !shape.contains(n))
                .collect();
            return Err(ParseError::new(
                file,
                None,
                format!(
                    "[config] {k:?} is not a configuration field (one of {})",
                    known.join(", ")
                ),
            ));
        }
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ParseError::new(
                    file,
                    None,
                    format!("[config] {k} = {other}: give a string, a whole number or a boolean"),
                ))
            }
        };
        out.insert(k.clone(), text);
    }
    Ok(out)
}

/// The waivers a baseline records (`waivers`), and those a baseline written before that field
/// names only in its description (`make-baseline` wrote `FORCED run allowed by --allow-forced:
/// ...` there): neither may be lost.
fn waivers_of(file: &str, labels: &[String], description: &str) -> Result<Vec<Waiver>, ParseError> {
    let mut out = Vec::new();
    for l in labels {
        let w = Waiver::from_label(l).ok_or_else(|| {
            ParseError::new(
                file,
                None,
                format!("waivers: {l:?} is not a waiver (INCOMPLETE, FORCED, UNCHECKED, BELOW-MIN-BW)"),
            )
        })?;
        out.push(w);
    }
    for w in Waiver::ALL {
        if description.contains(&format!("{} run allowed by {}", w.label(), w.flag())) {
            out.push(w);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Loads a baseline file from disk.
pub fn load(path: &std::path::Path) -> Result<Baseline, crate::error::Failure> {
    let name = path.display().to_string();
    let text = crate::input::read_text(path)?;
    Ok(parse(&name, &text)?)
}

/// Writes a baseline TOML from runs: one `per-size` entry per size x metric, `values` = one
/// headline figure per run (run order), with the run count, per-size spread and job shape.
pub fn from_runs(
    name: &str,
    runs: &[crate::model::Run],
    metrics: &[Metric],
    description: &str,
    waived: &[(Waiver, String)],
) -> Result<String, String> {
    use std::fmt::Write;
    let first = runs.first().ok_or("no runs")?;
    let [ser] = first.series.as_slice() else {
        return Err(format!(
            "{}: one pattern per baseline file (found {})",
            first.source,
            first.series.len()
        ));
    };
    let shape0 = first.shape();
    let sides: Vec<(String, Vec<crate::comparable::Configuration>)> = runs
        .iter()
        .map(|r| {
            (
                r.source.clone(),
                vec![crate::comparable::with_shape(r.config.clone(), &r.shape())],
            )
        })
        .collect();
    let found = crate::comparable::check(&sides);
    if !found.refusals.is_empty() {
        return Err(format!(
            "the runs are not one configuration: {}",
            found.refusals.join("; ")
        ));
    }
    let series: Vec<&crate::model::Series> = runs
        .iter()
        .map(|r| {
            r.series
                .iter()
                .find(|s| s.pattern == ser.pattern && s.variant == ser.variant)
                .ok_or_else(|| format!("{}: no pattern {} ({})", r.source, ser.pattern, ser.variant))
        })
        .collect::<Result<_, _>>()?;
    let mut o = String::new();
    let q = |s: &str| format!("{s:?}");
    let _ = writeln!(
        o,
        "# Generated by tcpx-analyze {} from {} run(s).",
        env!("CARGO_PKG_VERSION"),
        runs.len()
    );
    if runs.len() < 5 {
        let _ = writeln!(
            o,
            "# Fewer than 5 runs: the gate's verdicts against this file will often be inconclusive."
        );
    }
    let _ = writeln!(o, "schema_version = 1");
    let _ = writeln!(o, "name = {}", q(name));
    let _ = writeln!(o, "description = {}", q(description));
    let _ = writeln!(o, "pattern = {}", q(&ser.pattern));
    let _ = writeln!(o, "unit = \"GB/s\"");
    let _ = writeln!(o, "runs = {}", runs.len());
    if !waived.is_empty() {
        let mut labels: Vec<Waiver> = waived.iter().map(|(w, _)| *w).collect();
        labels.sort();
        labels.dedup();
        let labels: Vec<String> = labels.iter().map(|w| q(w.label())).collect();
        let lines: Vec<String> = waived
            .iter()
            .map(|(w, what)| q(&format!("{}: {what}", w.label())))
            .collect();
        let _ = writeln!(
            o,
            "# Made from runs only an --allow-* flag admits: every gate against this file needs the flag and names it."
        );
        let _ = writeln!(o, "waivers = [{}]", labels.join(", "));
        let _ = writeln!(o, "waived = [{}]", lines.join(", "));
    }
    let _ = writeln!(o, "\n[shape]");
    for (key, label) in [("endpoints", "endpoints"), ("ranks", "MPI ranks"), ("nodes", "nodes")] {
        if let Some(v) = shape0.get(label) {
            let _ = writeln!(o, "{key} = {v}");
        }
    }
    if let Some(p) = first.labels.get("plugin") {
        let _ = writeln!(o, "plugin = {}", q(p));
    }
    if !first.config.is_empty() {
        let _ = writeln!(
            o,
            "\n# What changes a figure: gate -B, compare and gate --history refuse a run that differs."
        );
        let _ = writeln!(o, "[config]");
        for (k, v) in &first.config {
            let _ = writeln!(o, "{k} = {}", q(v));
        }
    }
    let _ = writeln!(o, "\n[provenance]");
    let _ = writeln!(
        o,
        "source = {}",
        q(&runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>().join(", "))
    );
    if !ser.variant.is_empty() {
        let _ = writeln!(o, "variant = {}", q(&ser.variant));
    }
    for (k, v) in first.labels.iter().filter(|(k, _)| k.as_str() != "plugin") {
        let _ = writeln!(o, "{k} = {}", q(v));
    }
    for size in ser.rows.keys() {
        for &m in metrics {
            let values: Vec<f64> = series
                .iter()
                .zip(runs)
                .map(|(s, r)| {
                    s.rows
                        .get(size)
                        .map(|row| row.summary.get(m))
                        .ok_or_else(|| format!("{}: no size {size}", r.source))
                })
                .collect::<Result<_, _>>()?;
            if values.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                let _ = writeln!(
                    o,
                    "\n# {} at {size} B: a run reports {values:?} (zero has no ratio): not stored",
                    m.name()
                );
                continue;
            }
            let _ = writeln!(o, "\n[[entry]]\nmetric = \"{}\"\nsize = {size}", m.name());
            if m == Metric::Time {
                let _ = writeln!(o, "unit = \"us\"");
            }
            let vals: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
            if vals.len() == 1 {
                let _ = writeln!(o, "value = {}", vals[0]);
            } else {
                let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
                let _ = writeln!(o, "values = [{}]", vals.join(", "));
                let _ = writeln!(o, "spread = {:.4}", crate::stats::var(&logs).sqrt());
            }
        }
    }
    // Round-trip check: the file must parse.
    parse("generated", &o).map_err(|e| e.to_string())?;
    Ok(o)
}
