//! SVG plots (plotters, SVG backend only; text is emitted as SVG `<text>`, no font library needed).

use crate::baseline::{Baseline, Statistic, Unit};
use crate::compare::GIB_PER_GB;
use crate::model::{fmt_size, Metric, PairLink, Run};
use crate::stats;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];
const BASE_COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(90, 90, 90),
    RGBColor(160, 30, 90),
    RGBColor(0, 100, 0),
];

/// (size, headline figure, optional p10-p90 band of the run's iterations)
pub type Point = (u64, f64, Option<(f64, f64)>);

/// Per-size baseline points: label, colour, points.
type PointSet = (String, RGBColor, Vec<(f64, f64)>);

/// How a baseline line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkStyle {
    /// A per-size floor over a range: long dashes.
    Floor,
    /// A mean over sizes (one number for the whole range, not a per-size value): dots.
    MeanOverSizes,
}

/// A baseline mark: label, colour, end points, style.
type Mark = (String, RGBColor, Vec<(f64, f64)>, MarkStyle);

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

/// One line of the bandwidth plot.
#[derive(Debug, Clone)]
pub struct Line {
    pub label: String,
    pub points: Vec<Point>,
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
                let band = (v.len() >= 5).then(|| (stats::quantile_sorted(&v, 0.1), stats::quantile_sorted(&v, 0.9)));
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

fn size_label(x: f64) -> String {
    let r = x.round();
    if (x - r).abs() > 1e-6 || !(0.0..63.0).contains(&r) {
        return String::new();
    }
    fmt_size(1u64 << (r as u32))
}

/// Labels for a log10 axis: the value 10^v with three significant digits.
fn log_label(v: f64) -> String {
    let x = 10f64.powf(v);
    let d = (2 - x.log10().floor() as i32).max(0) as usize;
    format!("{x:.d$}")
}

/// Bandwidth (or time) vs size, log2 x axis, runs and baselines overlaid, CI bands; with
/// `log_y` the y axis is log10 (small sizes and large ones readable on one plot).
pub fn plot_bandwidth(
    out: &Path,
    title: &str,
    metric: Metric,
    lines: &[Line],
    baselines: &[Baseline],
    convert_units: bool,
    log_y: bool,
) -> Result<(), String> {
    let ty = |y: f64| if log_y { y.max(1e-12).log10() } else { y };
    let mut xs: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| (p.0 as f64).log2()))
        .collect();
    let mut ymax: f64 = 0.0;
    let mut ymin = f64::INFINITY;
    for l in lines {
        for p in &l.points {
            ymax = ymax.max(p.1).max(p.2.map(|c| c.1).unwrap_or(0.0));
            ymin = ymin.min(p.1.min(p.2.map_or(p.1, |c| c.0)));
        }
    }
    let mut marks: Vec<Mark> = Vec::new();
    // Per-size points of one baseline share one legend entry.
    let mut points: Vec<PointSet> = Vec::new();
    for (bi, b) in baselines.iter().enumerate() {
        let color = BASE_COLORS[bi % BASE_COLORS.len()];
        for e in b.entries.iter().filter(|e| e.metric == metric) {
            if e.unit == Unit::GiBps && !convert_units {
                return Err(format!(
                    "{}: entry in GiB/s; pass --convert-units to plot it in GB/s",
                    b.file
                ));
            }
            let f = if e.unit == Unit::GiBps { GIB_PER_GB } else { 1.0 };
            let v = stats::median(&e.values) * f;
            let (x0, x1) = ((e.size_min as f64).log2(), (e.size_max as f64).log2());
            xs.push(x0);
            xs.push(x1);
            ymax = ymax.max(v);
            ymin = ymin.min(v);
            let (label, style) = match e.statistic {
                Statistic::MeanOverSizes => (
                    format!(
                        "{}: mean {} over {}..{} = {v:.3}",
                        b.name,
                        e.metric,
                        fmt_size(e.size_min),
                        fmt_size(e.size_max)
                    ),
                    MarkStyle::MeanOverSizes,
                ),
                Statistic::PerSize if e.size_min == e.size_max => {
                    match points.iter_mut().find(|p| p.0.starts_with(&format!("{}:", b.name))) {
                        Some(p) => p.2.push((x0, v)),
                        None => points.push((format!("{}: {} per size", b.name, e.metric), color, vec![(x0, v)])),
                    }
                    continue;
                }
                Statistic::PerSize => (
                    format!(
                        "{}: {} floor {}..{} = {v:.3}",
                        b.name,
                        e.metric,
                        fmt_size(e.size_min),
                        fmt_size(e.size_max)
                    ),
                    MarkStyle::Floor,
                ),
            };
            marks.push((label, color, vec![(x0, v), (x1, v)], style));
        }
    }
    if xs.is_empty() {
        return Err("nothing to plot".into());
    }
    let xmin = xs.iter().cloned().fold(f64::INFINITY, f64::min).floor() - 0.5;
    let xmax = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max).ceil() + 0.5;
    // Head room for the legend (upper right).
    let n_legend = lines.len() + marks.len() + points.len();
    let head = 1.1 + 0.07 * n_legend as f64;
    let (y0, y1) = if log_y {
        let lo = if ymin.is_finite() && ymin > 0.0 { ymin } else { 1e-3 };
        let hi = if ymax > lo { ymax } else { lo * 10.0 };
        let span = (hi / lo).log10().max(0.5);
        (lo.log10() - 0.05 * span, hi.log10() + span * (head - 1.0))
    } else if ymax > 0.0 {
        (0.0, ymax * head)
    } else {
        (0.0, 1.0)
    };
    let root = SVGBackend::new(out, (1000, 620)).into_drawing_area();
    let e = |x: DrawingAreaErrorKind<std::io::Error>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(xmin..xmax, y0..y1)
        .map_err(e)?;
    let nx = ((xmax - xmin).round() as usize).clamp(2, 40);
    let step = nx.div_ceil(16).max(1);
    chart
        .configure_mesh()
        .x_labels(nx + 1)
        .x_label_formatter(&|x| {
            let r = x.round() as i64;
            if r % step as i64 == 0 {
                size_label(*x)
            } else {
                String::new()
            }
        })
        .x_desc("message size (bytes per rank, log2 scale)")
        .y_label_formatter(&|v| if log_y { log_label(*v) } else { format!("{v:.1}") })
        .y_desc(
            match metric {
                Metric::Time => "time (us)".to_string(),
                m => format!("{} (GB/s, 1 GB = 10^9 B)", m.name()),
            } + if log_y { ", log scale" } else { "" },
        )
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(e)?;
    for (i, l) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let band: Vec<(f64, f64, f64)> = l
            .points
            .iter()
            .filter_map(|p| p.2.map(|ci| ((p.0 as f64).log2(), ty(ci.0), ty(ci.1))))
            .collect();
        if band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = band.iter().map(|b| (b.0, b.2)).collect();
            poly.extend(band.iter().rev().map(|b| (b.0, b.1)));
            chart
                .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.2).filled())))
                .map_err(e)?;
        }
        let pts: Vec<(f64, f64)> = l.points.iter().map(|p| ((p.0 as f64).log2(), ty(p.1))).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(e)?
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(e)?;
    }
    for (label, c, pts, style) in marks {
        let pts: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, ty(p.1))).collect();
        let (dash, gap, width) = match style {
            MarkStyle::Floor => (8, 5, 2),
            MarkStyle::MeanOverSizes => (2, 5, 3),
        };
        chart
            .draw_series(DashedLineSeries::new(pts, dash, gap, c.stroke_width(width)))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                // Legend glyph: two long dashes (floor) or three dots (mean over sizes).
                let seg: [(i32, i32); 3] = match style {
                    MarkStyle::Floor => [(0, 7), (12, 20), (20, 20)],
                    MarkStyle::MeanOverSizes => [(0, 2), (8, 10), (16, 18)],
                };
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(seg[0].0, 0), (seg[0].1, 0)], c.stroke_width(width))
                    + PathElement::new(vec![(seg[1].0, 0), (seg[1].1, 0)], c.stroke_width(width))
                    + PathElement::new(vec![(seg[2].0, 0), (seg[2].1, 0)], c.stroke_width(width))
            });
    }
    for (label, c, pts) in points {
        let pts: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, ty(p.1))).collect();
        chart
            .draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 8, c.filled())))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
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

fn viridis(t: f64) -> RGBColor {
    const S: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 } * 4.0;
    let i = (t.floor() as usize).min(3);
    let f = t - i as f64;
    let l = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    RGBColor(l(S[i].0, S[i + 1].0), l(S[i].1, S[i + 1].1), l(S[i].2, S[i + 1].2))
}

/// Selects the pair links of one size (the largest when `size` is None).
pub fn select_pairs(runs: &[Run], size: Option<u64>, pattern: Option<&str>) -> Result<(u64, Vec<PairLink>), String> {
    let all: Vec<&PairLink> = runs
        .iter()
        .flat_map(|r| r.pairs.iter())
        .filter(|p| pattern.is_none_or(|x| p.pattern == x))
        .collect();
    if all.is_empty() {
        return Err("no pairs.csv data in the input(s) (for the selected pattern)".into());
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
    let n = links.iter().map(|p| p.src_rank.max(p.dst_rank)).max().unwrap_or(0) as i32 + 1;
    // Links measured several times (several runs) are averaged per cell.
    let mut cells: std::collections::BTreeMap<(u32, u32), Vec<f64>> = Default::default();
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
                gbps: stats::median(v),
            }
        })
        .collect();
    let flagged = outliers(&merged, z);
    let lo = merged.iter().map(|p| p.gbps).fold(f64::INFINITY, f64::min);
    let hi = merged.iter().map(|p| p.gbps).fold(f64::NEG_INFINITY, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    let side = (60 * n as u32).clamp(300, 900);
    let root = SVGBackend::new(out, (side + 260, side + 120)).into_drawing_area();
    let e = |x: DrawingAreaErrorKind<std::io::Error>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (left, right) = root.split_horizontally(side + 110);
    let mut chart = ChartBuilder::on(&left)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), -0.5..(n as f64 - 0.5))
        .map_err(e)?;
    let fmt = |v: &f64| {
        if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("destination rank")
        .y_desc("source rank")
        .x_labels(n as usize + 1)
        .y_labels(n as usize + 1)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .draw()
        .map_err(e)?;
    let sv = |i: u32| i as f64 - 0.5;
    chart
        .draw_series(merged.iter().map(|p| {
            Rectangle::new(
                [
                    (sv(p.dst_rank), sv(p.src_rank)),
                    (sv(p.dst_rank + 1), sv(p.src_rank + 1)),
                ],
                viridis((p.gbps - lo) / span).filled(),
            )
        }))
        .map_err(e)?;
    chart
        .draw_series(flagged.iter().map(|o| {
            Rectangle::new(
                [
                    (sv(o.dst_rank), sv(o.src_rank)),
                    (sv(o.dst_rank + 1), sv(o.src_rank + 1)),
                ],
                RED.stroke_width(4),
            )
        }))
        .map_err(e)?;
    if n <= 16 {
        chart
            .draw_series(merged.iter().map(|p| {
                let bright = (p.gbps - lo) / span > 0.6;
                let color = if bright { BLACK } else { WHITE };
                let flag = if flagged
                    .iter()
                    .any(|o| o.src_rank == p.src_rank && o.dst_rank == p.dst_rank)
                {
                    "!"
                } else {
                    ""
                };
                Text::new(
                    format!("{:.1}{flag}", p.gbps),
                    (p.dst_rank as f64 - 0.2, p.src_rank as f64 + 0.1),
                    ("sans-serif", 12).into_font().color(&color),
                )
            }))
            .map_err(e)?;
    }
    // Colour bar with its unit and the outlier rule.
    let mut bar = ChartBuilder::on(&right)
        .margin_top(40)
        .margin_bottom(60)
        .margin_right(10)
        .y_label_area_size(60)
        .caption("GB/s", ("sans-serif", 14))
        .build_cartesian_2d(0.0..1.0, lo..(lo + span))
        .map_err(e)?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()
        .map_err(e)?;
    let steps = 64;
    bar.draw_series((0..steps).map(|i| {
        let a = lo + span * i as f64 / steps as f64;
        let b = lo + span * (i + 1) as f64 / steps as f64;
        Rectangle::new([(0.0, a), (1.0, b)], viridis(i as f64 / (steps - 1) as f64).filled())
    }))
    .map_err(e)?;
    right
        .draw(&Text::new(
            format!("red: |robust z| > {z}"),
            (10, side as i32 + 80),
            ("sans-serif", 12).into_font().color(&RED),
        ))
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(flagged)
}
