//! Plots for `tcpx-analyze plot` and `heatmap`: turns runs and baselines into the shared
//! plotting crate's lines, reference levels and cells (`tcpx-plot` draws; tcpx-perf draws each
//! run's own pictures with the same code).

use crate::baseline::{Baseline, Statistic, Unit};
use crate::compare::GIB_PER_GB;
use crate::model::{Metric, PairLink, Run};
use crate::stats;
use std::path::Path;
use tcpx_plot::{BandwidthChart, Cell, Heatmap, Level, LevelStyle, Reference};
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

/// A cell flagged by the robust z-score.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outlier {
    pub src_rank: u32,
    pub dst_rank: u32,
    pub src_host: String,
    pub dst_host: String,
    pub gbps: f64,
    pub robust_z: f64,
}

/// Selects the pair links of one size (the largest when `size` is None).
pub fn select_pairs(runs: &[Run], size: Option<u64>, pattern: Option<&str>) -> Result<(u64, Vec<PairLink>), String> {
    let all: Vec<&PairLink> = runs
        .iter()
        .flat_map(|r| r.pairs.iter())
        .filter(|p| pattern.is_none_or(|x| p.pattern == x))
        .collect();
    if all.is_empty() {
        return Err(
            "no endpoint pairs in pairs.csv of the input(s) (for the selected pattern; a job past 65536 endpoint pairs writes NIC links or node pairs instead, which its own links.svg draws)"
                .into(),
        );
    }
    let pats: std::collections::BTreeSet<&str> = all.iter().map(|p| p.pattern.as_str()).collect();
    if pats.len() > 1 {
        return Err(format!(
            "pairs.csv holds several patterns ({}): choose one with --pattern",
            pats.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let size = size.unwrap_or_else(|| all.iter().map(|p| p.size).max().unwrap_or(0));
    let v: Vec<PairLink> = all.into_iter().filter(|p| p.size == size).cloned().collect();
    if v.is_empty() {
        return Err(format!("no pair data at size {size}"));
    }
    Ok((size, v))
}

/// Flags links whose robust z-score `(x - median) / (1.4826 MAD)` exceeds `z` in absolute value.
pub fn outliers(links: &[PairLink], z: f64) -> Vec<Outlier> {
    let v: Vec<f64> = links.iter().map(|p| p.gbps).collect();
    let zs = stats::robust_z(&v);
    links
        .iter()
        .zip(zs)
        .filter(|(_, s)| s.abs() > z)
        .map(|(p, s)| Outlier {
            src_rank: p.src_rank,
            dst_rank: p.dst_rank,
            src_host: p.src_host.clone(),
            dst_host: p.dst_host.clone(),
            gbps: p.gbps,
            robust_z: s,
        })
        .collect()
}

/// Heatmap of the per-pair link matrix (source rank x destination rank), outliers outlined in red.
pub fn plot_heatmap(out: &Path, title: &str, links: &[PairLink], z: f64) -> Result<Vec<Outlier>, String> {
    // Links measured several times (several runs) are averaged per cell.
    let mut cells: std::collections::BTreeMap<(u32, u32), Vec<f64>> = std::collections::BTreeMap::new();
    for p in links {
        cells.entry((p.src_rank, p.dst_rank)).or_default().push(p.gbps);
    }
    let merged: Vec<PairLink> = cells
        .iter()
        .map(|(&(s, d), v)| {
            let first = links.iter().find(|p| p.src_rank == s && p.dst_rank == d);
            PairLink {
                pattern: String::new(),
                size: 0,
                src_rank: s,
                src_host: first.map(|p| p.src_host.clone()).unwrap_or_default(),
                dst_rank: d,
                dst_host: first.map(|p| p.dst_host.clone()).unwrap_or_default(),
                gbps: tcpx_units::median(v),
            }
        })
        .collect();
    let flagged = outliers(&merged, z);
    let cells: Vec<Cell> = merged
        .iter()
        .map(|p| Cell {
            src: p.src_rank,
            dst: p.dst_rank,
            gbps: p.gbps,
        })
        .collect();
    let marks: Vec<(u32, u32)> = flagged.iter().map(|o| (o.src_rank, o.dst_rank)).collect();
    tcpx_plot::heatmap(
        out,
        &Heatmap {
            title: title.to_string(),
            axis: "rank",
            cells: &cells,
            flagged: &marks,
            flag_rule: Some(format!("|robust z| > {z}")),
            scale: tcpx_plot::Scale::Gbps,
            groups: Vec::new(),
            unrated: &[],
        },
    )?;
    Ok(flagged)
}
