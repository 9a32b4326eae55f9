//! SVG plots of benchmark results, the one implementation behind `tcpx-perf`'s per-run
//! pictures (`bandwidth.svg`, `links.svg`) and `tcpx-analyze plot` / `heatmap`.
//!
//! Plotters' SVG backend only: text is written as SVG `<text>`, so no font library is needed
//! and the files stay small and diffable. Callers turn their own data model into [`Line`]s,
//! [`Reference`]s and [`Cell`]s; this crate only draws. GB = 10^9 bytes throughout.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("tcpx-plot-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let busbw = tcpx_plot::Line {
//!     label: "busbw".into(),
//!     points: vec![(1 << 20, 3.1, None), (1 << 26, 11.7, Some((11.2, 12.0)))],
//! };
//! let chart = tcpx_plot::BandwidthChart {
//!     title: "sendrecv, 4 endpoints".into(),
//!     x_desc: "size (bytes per endpoint, log2 scale)".into(),
//!     y_desc: "GB/s (1 GB = 10^9 B)".into(),
//!     log_y: false,
//! };
//! tcpx_plot::bandwidth(&dir.join("bw.svg"), &chart, &[busbw], &[]).unwrap();
//! assert!(std::fs::read_to_string(dir.join("bw.svg")).unwrap().contains("64 MiB"));
//! ```

pub mod check;
mod heatmap;
mod scale;

pub use heatmap::{by_node_and_nic, heatmap, Axes, Cell, Heatmap, Scale, SHARE_MAX};
pub use scale::{above_scale, nice_step, viridis, ColourScale};

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
const REFERENCE_COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(90, 90, 90),
    RGBColor(160, 30, 90),
    RGBColor(0, 100, 0),
];

/// The size label of axes and titles. src/export/svg.rs still names it `tcpx_plot::fmt_size`;
/// new code calls `tcpx_units::format_size_label` (the one size grammar).
pub use tcpx_units::format_size_label as fmt_size;

/// (size in bytes, value, optional band drawn around the line, e.g. the iterations' p10-p90)
pub type Point = (u64, f64, Option<(f64, f64)>);

/// One measured line of the bandwidth plot: a solid line with a dot per size.
#[derive(Debug, Clone)]
pub struct Line {
    pub label: String,
    pub points: Vec<Point>,
}

/// How a reference level is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelStyle {
    /// A per-size floor over a range: long dashes.
    Floor,
    /// A mean over sizes (one number for the whole range, not a per-size value): dots.
    MeanOverSizes,
}

/// A horizontal reference line from `size_min` to `size_max`.
#[derive(Debug, Clone)]
pub struct Level {
    pub label: String,
    pub size_min: u64,
    pub size_max: u64,
    pub value: f64,
    pub style: LevelStyle,
}

/// One reference (a baseline file): its levels and its per-size points share one colour; the
/// per-size points share one legend entry.
#[derive(Debug, Clone, Default)]
pub struct Reference {
    pub levels: Vec<Level>,
    /// Legend label and (size, value) points, drawn as triangles.
    pub per_size: Option<(String, Vec<(u64, f64)>)>,
}

/// Titles of a bandwidth chart.
#[derive(Debug, Clone)]
pub struct BandwidthChart {
    pub title: String,
    pub x_desc: String,
    /// The y axis' quantity and unit; `, log scale` is appended when `log_y`.
    pub y_desc: String,
    /// log10 y axis (small and large sizes readable on one plot).
    pub log_y: bool,
}

fn x_of(size: u64) -> f64 {
    (size as f64).log2()
}

fn size_label(x: f64) -> String {
    let r = x.round();
    if (x - r).abs() > 1e-6 || !(0.0..63.0).contains(&r) {
        return String::new();
    }
    tcpx_units::format_size_label(1u64 << (r as u32))
}

/// Labels for a log10 axis: the value 10^v with three significant digits.
fn log_label(v: f64) -> String {
    let x = 10f64.powf(v);
    let d = (2 - x.log10().floor() as i32).max(0) as usize;
    format!("{x:.d$}")
}

pub(crate) fn draw_err(x: DrawingAreaErrorKind<std::io::Error>) -> String {
    x.to_string()
}

/// Value (or time) vs size on a log2 x axis: measured lines (with their bands) and reference
/// levels and points overlaid, legend in the upper right. Written to `out` whole or not at all,
/// never through a link ([`tcpx_files::write_whole`]).
pub fn bandwidth(out: &Path, chart: &BandwidthChart, lines: &[Line], refs: &[Reference]) -> Result<(), String> {
    let mut svg = String::new();
    draw_bandwidth(&mut svg, chart, lines, refs)?;
    save(out, &svg)
}

/// The finished picture to `out`, synced; the error names `out`.
pub(crate) fn save(out: &Path, svg: &str) -> Result<(), String> {
    tcpx_files::write_bytes(out, tcpx_files::Durability::Synced, svg.as_bytes()).map_err(|e| e.to_string())
}

fn draw_bandwidth(svg: &mut String, chart: &BandwidthChart, lines: &[Line], refs: &[Reference]) -> Result<(), String> {
    let log_y = chart.log_y;
    let ty = |y: f64| if log_y { y.max(1e-12).log10() } else { y };
    let mut xs: Vec<f64> = lines.iter().flat_map(|l| l.points.iter().map(|p| x_of(p.0))).collect();
    let mut ymax: f64 = 0.0;
    let mut ymin = f64::INFINITY;
    for p in lines.iter().flat_map(|l| &l.points) {
        ymax = ymax.max(p.1).max(p.2.map_or(0.0, |c| c.1));
        ymin = ymin.min(p.1.min(p.2.map_or(p.1, |c| c.0)));
    }
    for r in refs {
        for l in &r.levels {
            xs.extend([x_of(l.size_min), x_of(l.size_max)]);
            ymax = ymax.max(l.value);
            ymin = ymin.min(l.value);
        }
        for &(size, v) in r.per_size.iter().flat_map(|p| &p.1) {
            xs.push(x_of(size));
            ymax = ymax.max(v);
            ymin = ymin.min(v);
        }
    }
    if xs.is_empty() {
        return Err("nothing to plot".into());
    }
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min).floor() - 0.5;
    let xmax = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil() + 0.5;
    // Head room for the legend (upper right).
    let n_legend = lines.len()
        + refs
            .iter()
            .map(|r| r.levels.len() + usize::from(r.per_size.is_some()))
            .sum::<usize>();
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
    let root = SVGBackend::with_string(svg, (1000, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(xmin..xmax, y0..y1)
        .map_err(draw_err)?;
    let nx = ((xmax - xmin).round() as usize).clamp(2, 40);
    let step = nx.div_ceil(16).max(1);
    ch.configure_mesh()
        .x_labels(nx + 1)
        .x_label_formatter(&|x| {
            if (x.round() as i64) % step as i64 == 0 {
                size_label(*x)
            } else {
                String::new()
            }
        })
        .x_desc(chart.x_desc.as_str())
        .y_label_formatter(&|v| if log_y { log_label(*v) } else { format!("{v:.1}") })
        .y_desc(format!("{}{}", chart.y_desc, if log_y { ", log scale" } else { "" }))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(draw_err)?;
    for (i, l) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let band: Vec<(f64, f64, f64)> = l
            .points
            .iter()
            .filter_map(|p| p.2.map(|b| (x_of(p.0), ty(b.0), ty(b.1))))
            .collect();
        if band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = band.iter().map(|b| (b.0, b.2)).collect();
            poly.extend(band.iter().rev().map(|b| (b.0, b.1)));
            ch.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.2).filled())))
                .map_err(draw_err)?;
        }
        let pts: Vec<(f64, f64)> = l.points.iter().map(|p| (x_of(p.0), ty(p.1))).collect();
        ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(draw_err)?
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(draw_err)?;
    }
    for (ri, r) in refs.iter().enumerate() {
        let c = REFERENCE_COLORS[ri % REFERENCE_COLORS.len()];
        for l in &r.levels {
            let pts = vec![(x_of(l.size_min), ty(l.value)), (x_of(l.size_max), ty(l.value))];
            let style = l.style;
            let (dash, gap, width) = match style {
                LevelStyle::Floor => (8, 5, 2),
                LevelStyle::MeanOverSizes => (2, 5, 3),
            };
            ch.draw_series(DashedLineSeries::new(pts, dash, gap, c.stroke_width(width)))
                .map_err(draw_err)?
                .label(l.label.clone())
                .legend(move |(x, y)| {
                    // Legend glyph: two long dashes (floor) or three dots (mean over sizes).
                    let seg: [(i32, i32); 3] = match style {
                        LevelStyle::Floor => [(0, 7), (12, 20), (20, 20)],
                        LevelStyle::MeanOverSizes => [(0, 2), (8, 10), (16, 18)],
                    };
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(seg[0].0, 0), (seg[0].1, 0)], c.stroke_width(width))
                        + PathElement::new(vec![(seg[1].0, 0), (seg[1].1, 0)], c.stroke_width(width))
                        + PathElement::new(vec![(seg[2].0, 0), (seg[2].1, 0)], c.stroke_width(width))
                });
        }
        if let Some((label, pts)) = &r.per_size {
            ch.draw_series(
                pts.iter()
                    .map(|&(s, v)| TriangleMarker::new((x_of(s), ty(v)), 8, c.filled())),
            )
            .map_err(draw_err)?
            .label(label.clone())
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, c.filled()));
        }
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(fmt_size(1 << 30), "1 GiB");
        assert_eq!(fmt_size(3 << 20), "3 MiB");
        assert_eq!(fmt_size(1000), "1000 B");
        assert_eq!(size_label(20.0), "1 MiB");
        assert_eq!(size_label(20.5), "");
    }

    /// Issue 55: a rig's rates (a few Mbit/s: 0.0048 to 0.0052 GB/s) read on the colour bar in
    /// distinct values (the bar read "0.01, 0.01, 0.01"), and each cell prints its own.
    #[test]
    fn colour_bar_ticks_are_distinct_after_rounding() {
        let dir = std::env::temp_dir().join(format!("tcpx-plot-ticks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cells: Vec<Cell> = (0..4u32)
            .flat_map(|s| (0..4u32).map(move |d| (s, d)))
            .filter(|(s, d)| s != d)
            .map(|(src, dst)| Cell {
                src,
                dst,
                gbps: 0.0048 + 0.0004 * f64::from(src * 4 + dst) / 15.0,
            })
            .collect();
        let h = Heatmap {
            axis: "rank",
            cells: &cells,
            ..Heatmap::default()
        };
        let out = dir.join("ticks.svg");
        heatmap(&out, &h).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        let ticks = check::bar_ticks(&svg);
        let distinct: std::collections::BTreeSet<&String> = ticks.iter().collect();
        assert!(ticks.len() >= 3 && distinct.len() == ticks.len(), "{ticks:?}");
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let cells_printed: std::collections::BTreeSet<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") != Some("end"))
            .filter_map(|n| n.text().map(str::trim))
            .filter(|t| t.contains('.') && t.parse::<f64>().is_ok())
            .collect();
        assert!(
            cells_printed.len() >= 6,
            "cells print distinct values: {cells_printed:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn empty_inputs_are_errors_not_files() {
        let dir = std::env::temp_dir().join(format!("tcpx-plot-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chart = BandwidthChart {
            title: "t".into(),
            x_desc: "x".into(),
            y_desc: "y".into(),
            log_y: false,
        };
        assert!(bandwidth(&dir.join("a.svg"), &chart, &[], &[]).is_err());
        let h = Heatmap {
            title: "t".into(),
            axis: "rank",
            cells: &[],
            flagged: &[],
            flag_rule: None,
            scale: Scale::Gbps,
            groups: Vec::new(),
            unrated: &[],
            ..Heatmap::default()
        };
        assert!(heatmap(&dir.join("b.svg"), &h).is_err());
        assert!(!dir.join("b.svg").exists());
    }
}
