//! Plots for `tcpx-analyze plot` and `heatmap`: turns runs and baselines into the shared
//! plotting crate's lines, reference levels and cells (`tcpx-plot` draws; tcpx-perf draws each
//! run's own pictures with the same code). The heatmap and the node verdicts it shows:
//! [`heatmap`].

mod heatmap;
pub use heatmap::{
    context, plot_heatmap, report, select_pairs, verdict_lines, Drawn, NodeVerdict, Outlier, RunContext, SlowSide,
};

use crate::baseline::{Baseline, Statistic, Unit};
use crate::compare::GIB_PER_GB;
use crate::model::{Metric, Run};
use std::path::Path;
use tcpx_plot::{BandwidthChart, Level, LevelStyle, Reference};
pub use tcpx_plot::{Line, Point};
use tcpx_units::format_size_label;

/// The shortest trailing path of each source that tells it apart from the others
/// (`a/r1` and `b/r1` rather than `r1` twice).
pub fn unique_names(sources: &[String]) -> Vec<String> {
    let parts: Vec<Vec<&str>> = sources
        .iter()
        .map(|s| {
            s.trim_end_matches('/')
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .collect()
        })
        .collect();
    let tail = |p: &Vec<&str>, k: usize| p[p.len().saturating_sub(k)..].join("/");
    let depth = parts.iter().map(Vec::len).max().unwrap_or(1).max(1);
    (0..sources.len())
        .map(|i| {
            (1..=depth)
                .map(|k| tail(&parts[i], k))
                .find(|name| {
                    (0..sources.len())
                        .all(|j| sources[j] == sources[i] || tail(&parts[j], name.matches('/').count() + 1) != *name)
                })
                .unwrap_or_else(|| sources[i].clone())
        })
        .collect()
}

/// Builds the lines (one per run and pattern): the run's headline figure per size (bytes /
/// mean time, the quantity the gate tests), with a band from the 10th to the 90th percentile
/// of its iterations when it has >= 5 samples per size (the spread within this run only; the
/// uncertainty of a configuration comes from several runs).
pub fn lines_from_runs(runs: &[Run], metric: Metric) -> Vec<Line> {
    let mut out = Vec::new();
    let names = unique_names(&runs.iter().map(|r| r.source.clone()).collect::<Vec<_>>());
    for (run, stem) in runs.iter().zip(names) {
        for ser in &run.series {
            let mut pts = Vec::new();
            for (size, row) in &ser.rows {
                let mut v: Vec<f64> = row.samples.iter().map(|s| s.get(metric)).collect();
                v.sort_by(f64::total_cmp);
                let band = (v.len() >= 5).then(|| {
                    (
                        tcpx_units::quantile_sorted(&v, 0.1),
                        tcpx_units::quantile_sorted(&v, 0.9),
                    )
                });
                pts.push((*size, row.summary.get(metric), band));
            }
            let what = if pts.iter().any(|p| p.2.is_some()) {
                "headline, band: iterations p10-p90"
            } else {
                "headline"
            };
            let variant = if ser.variant.is_empty() {
                String::new()
            } else {
                format!(" [{}]", ser.variant)
            };
            out.push(Line {
                label: format!("{stem}: {}{variant} ({what})", ser.pattern),
                points: pts,
            });
        }
    }
    out
}

/// Each baseline's entries for `metric` as reference levels and per-size points.
fn references(baselines: &[Baseline], metric: Metric, convert_units: bool) -> Result<Vec<Reference>, String> {
    let mut refs = Vec::new();
    for b in baselines {
        let mut r = Reference::default();
        for e in b.entries.iter().filter(|e| e.metric == metric) {
            if e.unit == Unit::GiBps && !convert_units {
                return Err(format!(
                    "{}: entry in GiB/s; pass --convert-units to plot it in GB/s",
                    b.file
                ));
            }
            let f = if e.unit == Unit::GiBps { GIB_PER_GB } else { 1.0 };
            let v = tcpx_units::median(&e.values) * f;
            let (label, style) = match e.statistic {
                Statistic::MeanOverSizes => (
                    format!(
                        "{}: mean {} over {}..{} = {v:.3}",
                        b.name,
                        e.metric,
                        format_size_label(e.size_min),
                        format_size_label(e.size_max)
                    ),
                    LevelStyle::MeanOverSizes,
                ),
                Statistic::PerSize if e.size_min == e.size_max => {
                    r.per_size
                        .get_or_insert_with(|| (format!("{}: {} per size", b.name, e.metric), Vec::new()))
                        .1
                        .push((e.size_min, v));
                    continue;
                }
                Statistic::PerSize => (
                    format!(
                        "{}: {} floor {}..{} = {v:.3}",
                        b.name,
                        e.metric,
                        format_size_label(e.size_min),
                        format_size_label(e.size_max)
                    ),
                    LevelStyle::Floor,
                ),
            };
            r.levels.push(Level {
                label,
                size_min: e.size_min,
                size_max: e.size_max,
                value: v,
                style,
            });
        }
        refs.push(r);
    }
    Ok(refs)
}

/// Bandwidth (or time) vs size, log2 x axis, runs and baselines overlaid, iteration bands;
/// with `log_y` the y axis is log10 (small sizes and large ones readable on one plot).
pub fn plot_bandwidth(
    out: &Path,
    title: &str,
    metric: Metric,
    lines: &[Line],
    baselines: &[Baseline],
    convert_units: bool,
    log_y: bool,
) -> Result<(), String> {
    let refs = references(baselines, metric, convert_units)?;
    let chart = BandwidthChart {
        title: title.to_string(),
        x_desc: "message size (bytes per rank, log2 scale)".into(),
        y_desc: match metric {
            Metric::Time => "time (us)".to_string(),
            m => format!("{} (GB/s, 1 GB = 10^9 B)", m.name()),
        },
        log_y,
    };
    tcpx_plot::bandwidth(out, &chart, lines, &refs)
}
