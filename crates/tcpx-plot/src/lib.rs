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

fn draw_err(x: DrawingAreaErrorKind<std::io::Error>) -> String {
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
fn save(out: &Path, svg: &str) -> Result<(), String> {
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

/// One cell of the link matrix: a directed pair and its bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub src: u32,
    pub dst: u32,
    pub gbps: f64,
}

/// A link-matrix heatmap: source on the y axis, destination on the x axis.
#[derive(Debug, Clone)]
pub struct Heatmap<'a> {
    pub title: String,
    /// What the indices are (`rank`, `endpoint`): the axes read "source <axis>".
    pub axis: &'a str,
    /// One cell per directed pair (a pair given twice keeps the last).
    pub cells: &'a [Cell],
    /// Cells outlined in red, with the rule that flagged them (shown under the colour bar).
    pub flagged: &'a [(u32, u32)],
    pub flag_rule: Option<String>,
    /// How values map to colours and print in the cells.
    pub scale: Scale,
    /// Groups of indices (a node's endpoints): (first index, label), in index order; a line
    /// separates each group from the next and its label stands at its first index.
    pub groups: Vec<(u32, String)>,
    /// Pairs measured without a rate (above their link): drawn grey, marked `x`.
    pub unrated: &'a [(u32, u32)],
}

/// The colour scale of a [`Heatmap`].
#[derive(Debug, Clone, PartialEq)]
pub enum Scale {
    /// GB/s from the lowest cell to the highest.
    Gbps,
    /// Each cell's value is a share of the median pair: a fixed scale from 0 to
    /// [`SHARE_MAX`], so an outlier cannot wash out the others (the title says the median).
    ShareOfMedian,
}

/// The top of the share scale: cells above it take its colour.
pub const SHARE_MAX: f64 = 1.5;

/// Matrices wider than this draw touching cells of one colour as one shape ([`RUN_LEVELS`]).
const RUN_MERGE_FROM: i32 = 64;
/// Colour steps of such a matrix: a share's colour within 1.5 / 32 of its own.
const RUN_LEVELS: u32 = 32;

/// The colour of level `t` in 0..=1 (viridis; out of range clamps, NaN is 0).
pub fn viridis(t: f64) -> RGBColor {
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

/// Heatmap of a link matrix with a GB/s colour bar; values printed in the cells up to 16 x 16.
/// Written as [`bandwidth`] is.
pub fn heatmap(out: &Path, h: &Heatmap) -> Result<(), String> {
    let mut svg = String::new();
    draw_heatmap(&mut svg, h)?;
    save(out, &svg)
}

fn draw_heatmap(svg: &mut String, h: &Heatmap) -> Result<(), String> {
    if h.cells.is_empty() {
        return Err("no links to plot".into());
    }
    let n = h.cells.iter().map(|c| c.src.max(c.dst)).max().unwrap_or(0) as i32 + 1;
    let (lo, hi, unit) = match &h.scale {
        Scale::Gbps => (
            h.cells.iter().map(|c| c.gbps).fold(f64::INFINITY, f64::min),
            h.cells.iter().map(|c| c.gbps).fold(f64::NEG_INFINITY, f64::max),
            "GB/s".to_string(),
        ),
        Scale::ShareOfMedian => (0.0, SHARE_MAX, "share of median".to_string()),
    };
    let span = if hi > lo { hi - lo } else { 1.0 };
    let level = |v: f64| ((v - lo) / span).clamp(0.0, 1.0);
    let side = (60 * n as u32).clamp(300, 900);
    let root = SVGBackend::with_string(svg, (side + 300, side + 120)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (left, right) = root.split_horizontally(side + 110);
    let mut chart = ChartBuilder::on(&left)
        .caption(&h.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(if h.groups.is_empty() { 50 } else { 70 })
        .build_cartesian_2d(-0.5..(f64::from(n) - 0.5), -0.5..(f64::from(n) - 0.5))
        .map_err(draw_err)?;
    let fmt = |v: &f64| {
        if (v - v.round()).abs() > 1e-6 || *v < 0.0 {
            return String::new();
        }
        let i = v.round() as u32;
        if h.groups.is_empty() {
            return i.to_string();
        }
        h.groups
            .iter()
            .find(|g| g.0 == i)
            .map_or(String::new(), |g| g.1.clone())
    };
    // Every index up to 64 (a node's endpoints), else about 16 ticks (hundreds of nodes).
    let labels = if h.groups.is_empty() {
        (n as usize + 1).min(if n > RUN_MERGE_FROM { 17 } else { usize::MAX })
    } else {
        2 * n as usize + 1
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(format!("destination {}", h.axis))
        .y_desc(format!("source {}", h.axis))
        .x_labels(labels)
        .y_labels(labels)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .draw()
        .map_err(draw_err)?;
    let sv = |i: u32| f64::from(i) - 0.5;
    let square = |src: u32, dst: u32| [(sv(dst), sv(src)), (sv(dst + 1), sv(src + 1))];
    let unrated_set: std::collections::HashSet<(u32, u32)> = h.unrated.iter().copied().collect();
    let unrated = |c: &Cell| unrated_set.contains(&(c.src, c.dst));
    // A large matrix (a node pair per cell at hundreds of nodes) in fewer shapes: its colours
    // in RUN_LEVELS steps, and the cells of a row that touch and share one drawn as one
    // rectangle, so that 512 x 512 cells stay a file of a few MB.
    let quantum = if n > RUN_MERGE_FROM { f64::from(RUN_LEVELS) } else { 0.0 };
    let fill_of = |c: &Cell| {
        if unrated(c) {
            RGBColor(200, 200, 200)
        } else if quantum > 0.0 {
            viridis((level(c.gbps) * quantum).round() / quantum)
        } else {
            viridis(level(c.gbps))
        }
    };
    let mut ordered: Vec<&Cell> = h.cells.iter().collect();
    if quantum > 0.0 {
        ordered.sort_by_key(|c| (c.src, c.dst));
    }
    let mut runs: Vec<(u32, u32, u32, RGBColor)> = Vec::with_capacity(ordered.len());
    for c in ordered {
        let fill = fill_of(c);
        match runs.last_mut() {
            Some(r) if quantum > 0.0 && r.0 == c.src && r.2 + 1 == c.dst && r.3 == fill => r.2 = c.dst,
            _ => runs.push((c.src, c.dst, c.dst, fill)),
        }
    }
    chart
        .draw_series(runs.iter().map(|&(src, first, last, fill)| {
            Rectangle::new([(sv(first), sv(src)), (sv(last + 1), sv(src + 1))], fill.filled())
        }))
        .map_err(draw_err)?;
    // Group separators (between nodes).
    let edge = f64::from(n) - 0.5;
    chart
        .draw_series(h.groups.iter().skip(1).flat_map(|g| {
            let at = sv(g.0);
            [
                PathElement::new(vec![(at, -0.5), (at, edge)], BLACK.stroke_width(1)),
                PathElement::new(vec![(-0.5, at), (edge, at)], BLACK.stroke_width(1)),
            ]
        }))
        .map_err(draw_err)?;
    chart
        .draw_series(
            h.flagged
                .iter()
                .map(|&(s, d)| Rectangle::new(square(s, d), RED.stroke_width(4))),
        )
        .map_err(draw_err)?;
    if n <= 16 {
        // Three significant digits for the usual range (0.31, 12.4, 123); shares with two.
        let digits = match h.scale {
            Scale::ShareOfMedian => 2,
            Scale::Gbps if hi < 10.0 => 2,
            Scale::Gbps => usize::from(hi < 100.0),
        };
        chart
            .draw_series(h.cells.iter().map(|c| {
                let color = if unrated(c) || level(c.gbps) > 0.6 {
                    BLACK
                } else {
                    WHITE
                };
                let flag = if h.flagged.contains(&(c.src, c.dst)) { "!" } else { "" };
                let text = if unrated(c) {
                    "x".to_string()
                } else {
                    format!("{:.digits$}{flag}", c.gbps)
                };
                Text::new(
                    text,
                    (f64::from(c.dst) - 0.2, f64::from(c.src) + 0.1),
                    ("sans-serif", 12).into_font().color(&color),
                )
            }))
            .map_err(draw_err)?;
    }
    // Colour bar with its unit and the flagging rule.
    let mut bar = ChartBuilder::on(&right)
        .margin_top(40)
        .margin_bottom(60)
        .margin_right(10)
        .y_label_area_size(60)
        .caption(&unit, ("sans-serif", 12))
        .build_cartesian_2d(0.0..1.0, lo..(lo + span))
        .map_err(draw_err)?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()
        .map_err(draw_err)?;
    let steps = 64;
    bar.draw_series((0..steps).map(|i| {
        let a = lo + span * f64::from(i) / f64::from(steps);
        let b = lo + span * f64::from(i + 1) / f64::from(steps);
        Rectangle::new(
            [(0.0, a), (1.0, b)],
            viridis(f64::from(i) / f64::from(steps - 1)).filled(),
        )
    }))
    .map_err(draw_err)?;
    let mut notes = Vec::new();
    if let Some(rule) = &h.flag_rule {
        notes.push((format!("red: {rule}"), RED));
    }
    if !h.unrated.is_empty() {
        notes.push(("grey x: above its link's rate, no rate".to_string(), BLACK));
    }
    for (i, (text, color)) in notes.into_iter().enumerate() {
        right
            .draw(&Text::new(
                text,
                (10, side as i32 + 80 + 16 * i as i32),
                ("sans-serif", 12).into_font().color(&color),
            ))
            .map_err(draw_err)?;
    }
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
        };
        assert!(heatmap(&dir.join("b.svg"), &h).is_err());
        assert!(!dir.join("b.svg").exists());
    }
}
