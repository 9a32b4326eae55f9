//! `history detect`: the stored runs as series (per configuration, per size, and the run's mean
//! busbw over the sizes every run of the configuration has), their change points by
//! E-Divisive with Means ([`super::edm`]), each with the segment means on either side, the
//! relative change and its confidence interval, and the exit status CI acts on.

use super::db::Db;
use super::edm::{e_divisive, EdmSettings};
use super::model::{Config, StoredRun};
use crate::compare::NEAR_ZERO_GBPS;
use crate::error::{exit, Failure};
use crate::stats;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Write;
use tcpx_units::format_size_label as fmt_size;

/// Level of the change's confidence interval.
pub const CI_LEVEL: f64 = 0.95;

/// One run's value in a series.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub run_id: i64,
    pub source: String,
    pub start_time: String,
    pub git_commit: Option<String>,
    /// busbw (GB/s).
    pub value: f64,
    /// NCCL's busbw in the same run (`tcpx-perf --baseline nccl`), when it has one.
    pub nccl: Option<f64>,
}

/// One series: a configuration at one size (`size` None: the mean busbw over `sizes`).
#[derive(Debug, Clone, Serialize)]
pub struct SeriesData {
    pub config_id: i64,
    pub config_key: String,
    pub size: Option<u64>,
    /// The sizes a mean series averages (empty for a per-size series).
    pub sizes: Vec<u64>,
    pub points: Vec<Point>,
}

impl SeriesData {
    pub fn label(&self) -> String {
        match self.size {
            Some(s) => fmt_size(s),
            None => format!("avg busbw ({} sizes)", self.sizes.len()),
        }
    }
}

/// A detected change.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// Position in the series (0-based) of the first run of the new segment.
    pub index: usize,
    pub run_id: i64,
    pub source: String,
    pub start_time: String,
    pub git_commit: Option<String>,
    pub runs_before: usize,
    pub runs_after: usize,
    /// Means of the adjacent segments (GB/s).
    pub mean_before: f64,
    pub mean_after: f64,
    /// Ratio of the segments' geometric means minus 1 (-0.1: 10% slower).
    pub relative_change: f64,
    /// Its confidence interval (level [`CI_LEVEL`]).
    pub ci_low: f64,
    pub ci_high: f64,
    /// The permutation test's p-value.
    pub p_value: f64,
}

/// A series with its changes.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesResult {
    #[serde(flatten)]
    pub data: SeriesData,
    pub changes: Vec<Change>,
    /// The newest segment is slower than the one before it, beyond its interval.
    pub regression: bool,
    /// Why the series was not analysed (too few runs, a bandwidth near zero).
    pub skipped: Option<String>,
}

/// A configuration: its database id, key and fields.
pub type ConfigEntry = (i64, String, Config);

/// Everything `detect` found.
#[derive(Debug, Clone, Serialize)]
pub struct Detection {
    pub tool: String,
    pub settings: EdmSettings,
    pub ci_level: f64,
    pub configs: Vec<ConfigEntry>,
    pub series: Vec<SeriesResult>,
    pub regressions: usize,
    pub exit_code: i32,
}

/// Per configuration, its series: each size, then the mean over the sizes all its runs have.
pub fn series_of(db: &Db) -> Result<(Vec<ConfigEntry>, Vec<SeriesData>), Failure> {
    let mut configs = Vec::new();
    let mut out = Vec::new();
    for (cid, c) in db.configs()? {
        let runs = db.runs_of(cid, false)?;
        let key = c.key();
        out.extend(config_series(cid, &key, &runs));
        configs.push((cid, key, c));
    }
    Ok((configs, out))
}

fn point(r: &StoredRun, value: f64, nccl: Option<f64>) -> Point {
    Point {
        run_id: r.id,
        source: r.provenance.source.clone(),
        start_time: r.provenance.start_time.clone(),
        git_commit: r.provenance.git_commit.clone(),
        value,
        nccl,
    }
}

/// The series of one configuration's runs (in time order).
pub fn config_series(cid: i64, key: &str, runs: &[StoredRun]) -> Vec<SeriesData> {
    let sizes: BTreeSet<u64> = runs.iter().flat_map(|r| r.rows.iter().map(|x| x.size)).collect();
    let mut out = Vec::new();
    for &size in &sizes {
        let points = runs
            .iter()
            .filter_map(|r| {
                let row = r.rows.iter().find(|x| x.size == size)?;
                Some(point(r, row.summary.busbw, row.nccl.map(|n| n.busbw)))
            })
            .collect();
        out.push(SeriesData {
            config_id: cid,
            config_key: key.to_string(),
            size: Some(size),
            sizes: Vec::new(),
            points,
        });
    }
    let common: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|s| runs.iter().all(|r| r.rows.iter().any(|x| x.size == *s)))
        .collect();
    if common.len() > 1 {
        let points = runs
            .iter()
            .map(|r| {
                let rows: Vec<_> = r.rows.iter().filter(|x| common.contains(&x.size)).collect();
                let v = rows.iter().map(|x| x.summary.busbw).sum::<f64>() / rows.len() as f64;
                let n: Option<Vec<f64>> = rows.iter().map(|x| x.nccl.map(|n| n.busbw)).collect();
                let n = n.map(|n| n.iter().sum::<f64>() / n.len() as f64);
                point(r, v, n)
            })
            .collect();
        out.push(SeriesData {
            config_id: cid,
            config_key: key.to_string(),
            size: None,
            sizes: common,
            points,
        });
    }
    out
}

/// A seed per series, so that a series' answer does not depend on what else the database holds.
fn series_seed(seed: u64, key: &str, size: Option<u64>) -> u64 {
    // FNV-1a over the key and size.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(size.unwrap_or(u64::MAX).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    seed ^ h
}

/// The relative change between two adjacent segments and its interval.
///
/// Why Welch's t on the logarithms: a series holds one figure per run, and runs are the
/// independent units (the iterations of one run share its host, placement and warm-up, so they
/// would overstate the evidence); the run-to-run spread of bandwidth is multiplicative (a
/// slower host slows every figure by a factor), so the log makes it additive and the interval of
/// the difference of mean logs becomes, through `exp(.) - 1`, an interval of the relative change
/// of the geometric means; the two segments may differ in spread (a change in spread is one of
/// the things the detector finds), hence Welch rather than a pooled variance. The same model as
/// the gate's run-level test ([`crate::decision`]). Caveat: the split was chosen where the
/// divergence is largest, so the interval is conditional on that choice and slightly narrower
/// than an interval for a split fixed in advance; a bootstrap of the segment means would share
/// that bias and needs more runs per segment than the 3-10 a history usually has.
pub fn relative_change_ci(before: &[f64], after: &[f64], level: f64) -> (f64, f64, f64) {
    let lb: Vec<f64> = before.iter().map(|x| x.ln()).collect();
    let la: Vec<f64> = after.iter().map(|x| x.ln()).collect();
    let d = stats::mean(&la) - stats::mean(&lb);
    let (va, vb) = (stats::var(&la) / la.len() as f64, stats::var(&lb) / lb.len() as f64);
    let se2 = va + vb;
    if se2.is_nan() || se2 <= 0.0 {
        let r = d.exp() - 1.0;
        return (r, r, r);
    }
    let df = se2 * se2 / (va * va / (la.len() as f64 - 1.0) + vb * vb / (lb.len() as f64 - 1.0));
    let t = stats::t_quantile(0.5 + level / 2.0, df);
    let half = t * se2.sqrt();
    (d.exp() - 1.0, (d - half).exp() - 1.0, (d + half).exp() - 1.0)
}

/// Runs the detector on one series.
pub fn analyse(data: SeriesData, s: &EdmSettings) -> SeriesResult {
    let v: Vec<f64> = data.points.iter().map(|p| p.value).collect();
    let min = 2 * s.min_segment.max(2);
    let skipped = if v.len() < min {
        Some(format!("{} runs: a change needs {min} or more", v.len()))
    } else if v.iter().any(|x| x.is_nan() || *x < NEAR_ZERO_GBPS) {
        Some(format!("a busbw below {NEAR_ZERO_GBPS} GB/s (too coarse to compare)"))
    } else {
        None
    };
    if skipped.is_some() {
        return SeriesResult {
            data,
            changes: Vec::new(),
            regression: false,
            skipped,
        };
    }
    let settings = EdmSettings {
        seed: series_seed(s.seed, &data.config_key, data.size),
        ..*s
    };
    let cps = e_divisive(&v, &settings);
    let mut bounds: Vec<usize> = vec![0];
    bounds.extend(cps.iter().map(|c| c.index));
    bounds.push(v.len());
    let changes: Vec<Change> = cps
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let (before, after) = (&v[bounds[k]..bounds[k + 1]], &v[bounds[k + 1]..bounds[k + 2]]);
            let (rel, lo, hi) = relative_change_ci(before, after, CI_LEVEL);
            let p = &data.points[c.index];
            Change {
                index: c.index,
                run_id: p.run_id,
                source: p.source.clone(),
                start_time: p.start_time.clone(),
                git_commit: p.git_commit.clone(),
                runs_before: before.len(),
                runs_after: after.len(),
                mean_before: stats::mean(before),
                mean_after: stats::mean(after),
                relative_change: rel,
                ci_low: lo,
                ci_high: hi,
                p_value: c.p_value,
            }
        })
        .collect();
    let regression = changes.last().is_some_and(|c| c.ci_high < 0.0);
    SeriesResult {
        data,
        changes,
        regression,
        skipped: None,
    }
}

/// Detects the changes of every series in the database.
pub fn detect(db: &Db, s: &EdmSettings) -> Result<Detection, Failure> {
    let (configs, series) = series_of(db)?;
    if series.is_empty() {
        return Err(Failure::Input("the history holds no runs".into()));
    }
    let series: Vec<SeriesResult> = series.into_iter().map(|d| analyse(d, s)).collect();
    let regressions = series.iter().filter(|r| r.regression).count();
    Ok(Detection {
        tool: format!("tcpx-analyze {}", env!("CARGO_PKG_VERSION")),
        settings: *s,
        ci_level: CI_LEVEL,
        configs,
        series,
        regressions,
        exit_code: if regressions > 0 { exit::REGRESSION } else { exit::PASS },
    })
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The table `detect` prints.
pub fn table(d: &Detection) -> String {
    let mut o = String::new();
    let s = &d.settings;
    let _ = writeln!(
        o,
        "E-Divisive with Means: alpha {}, significance {}, {} permutations, min segment {}, seed {}; {:.0}% intervals (Welch t on log busbw)",
        s.alpha, s.significance, s.permutations, s.min_segment, s.seed, d.ci_level * 100.0
    );
    for (cid, key, _) in &d.configs {
        let _ = writeln!(o, "\nconfiguration {key}");
        let _ = writeln!(
            o,
            "| size | runs | change at (history run, start, commit) | busbw before -> after (GB/s) | change | {:.0}% CI | p | newest segment |",
            d.ci_level * 100.0
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
        for r in d.series.iter().filter(|r| r.data.config_id == *cid) {
            let n = r.data.points.len();
            if let Some(why) = &r.skipped {
                let _ = writeln!(o, "| {} | {n} | not analysed: {why} | | | | | |", r.data.label());
                continue;
            }
            if r.changes.is_empty() {
                let _ = writeln!(o, "| {} | {n} | none | | | | | stable |", r.data.label());
            }
            for (k, c) in r.changes.iter().enumerate() {
                let last = k + 1 == r.changes.len();
                let _ = writeln!(
                    o,
                    "| {} | {n} | run {} {} {} | {:.4} -> {:.4} | {} | [{}, {}] | {:.3} | {} |",
                    r.data.label(),
                    c.run_id,
                    c.start_time,
                    c.git_commit.as_deref().unwrap_or("-"),
                    c.mean_before,
                    c.mean_after,
                    pct(c.relative_change),
                    pct(c.ci_low),
                    pct(c.ci_high),
                    c.p_value,
                    match (last, r.regression) {
                        (true, true) => "REGRESSION",
                        (true, false) => "after this change",
                        _ => "",
                    }
                );
            }
        }
    }
    let _ = writeln!(
        o,
        "\n{} series, {} with a regression in the newest segment",
        d.series.len(),
        d.regressions
    );
    o
}
