//! The link-matrix heatmap (`links.svg`, `tcpx-analyze heatmap`): a cell per directed pair, rows
//! and columns grouped by node and NIC and labelled so, a colour bar of round distinct ticks, and
//! every text laid out inside the canvas by [`text_width`]'s estimate (titles and notes wrapped,
//! label areas as wide as their labels).

use crate::check::text_width;
use crate::scale::ColourScale;
use crate::{draw_err, save};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One cell of the link matrix: a directed pair and its bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub src: u32,
    pub dst: u32,
    pub gbps: f64,
}

/// A link-matrix heatmap: source on the y axis, destination on the x axis.
#[derive(Debug, Clone, Default)]
pub struct Heatmap<'a> {
    pub title: String,
    /// What the indices are (`rank`, `endpoint`): the axes read "source <axis>".
    pub axis: &'a str,
    /// One cell per directed pair (a pair given twice keeps the last).
    pub cells: &'a [Cell],
    /// Cells outlined in red, with the rule that flagged them (a note under the picture).
    pub flagged: &'a [(u32, u32)],
    pub flag_rule: Option<String>,
    /// Cells outlined thin and inset in orange: another view's (robust z), with its rule.
    pub marked: &'a [(u32, u32)],
    pub mark_rule: Option<String>,
    /// How values map to colours and print in the cells.
    pub scale: Scale,
    /// Groups of indices (a node's endpoints): (first index, label), in index order; a line
    /// separates each group from the next and its label stands at its first index.
    pub groups: Vec<(u32, String)>,
    /// Groups within those (a node's endpoints on one NIC): (first index, NIC), labelled beside
    /// the node where there is room, a faint line between them where cells are 16 px or wider.
    pub subgroups: Vec<(u32, String)>,
    /// Pairs measured without a rate (above their link): drawn grey, marked `x`.
    pub unrated: &'a [(u32, u32)],
    /// Lines under the picture (e.g. the run's node verdicts), wrapped to its width.
    pub notes: Vec<String>,
}

/// The colour scale of a [`Heatmap`].
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Scale {
    /// GB/s from the lowest cell to the highest.
    #[default]
    Gbps,
    /// Each cell's value is a share of the median pair: a fixed scale from 0 to
    /// [`SHARE_MAX`], so an outlier cannot wash out the others (the title says the median);
    /// shares above it take a scale of their own above the bar's top, to the highest.
    ShareOfMedian,
}

/// The top of the share scale's viridis part: cells above it take [`crate::above_scale`]'s.
pub const SHARE_MAX: f64 = 1.5;

/// Matrices wider than this draw touching cells of one colour as one shape ([`RUN_LEVELS`]).
const RUN_MERGE_FROM: i32 = 64;
/// Colour steps of such a matrix: a share's colour within 1.5 / 32 of its own.
const RUN_LEVELS: u32 = 32;

/// The outline of the other view's cells (robust z), apart from the red of the rule's.
const ORANGE: RGBColor = RGBColor(230, 120, 0);

/// Font sizes as given to plotters (the SVG writes them / 1.24).
const TITLE_FONT: f64 = 18.0;
const LABEL_FONT: f64 = 12.0;
/// The size an SVG text of plotters' font `f` has.
fn svg_px(f: f64) -> f64 {
    f / 1.24
}

/// Endpoints placed for display: by node (first appearance in key order), then NIC, then key;
/// the node groups and, within them, the NIC groups where NICs are known. One node: key order,
/// no groups (nccl-tests' global ranks).
#[derive(Debug, Clone, PartialEq)]
pub struct Axes<K> {
    pub order: Vec<K>,
    pub groups: Vec<(u32, String)>,
    pub subgroups: Vec<(u32, String)>,
}

/// [`Axes`] of endpoints given as (key, node, NIC); a key given twice counts once.
pub fn by_node_and_nic<K: Ord + Copy>(ends: &[(K, &str, &str)]) -> Axes<K> {
    let mut ends: Vec<(K, &str, &str)> = ends.to_vec();
    ends.sort_by_key(|e| e.0);
    ends.dedup_by_key(|e| e.0);
    let mut nodes: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for e in &ends {
        let next = nodes.len();
        nodes.entry(e.1).or_insert(next);
    }
    let mut groups = Vec::new();
    let mut subgroups = Vec::new();
    if nodes.len() > 1 {
        ends.sort_by_key(|e| (nodes[e.1], e.2, e.0));
        for (i, e) in ends.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| ends[p]);
            if prev.is_none_or(|p| p.1 != e.1) {
                groups.push((i as u32, e.1.to_string()));
            }
            if !e.2.is_empty() && prev.is_none_or(|p| p.1 != e.1 || p.2 != e.2) {
                subgroups.push((i as u32, e.2.to_string()));
            }
        }
    }
    Axes {
        order: ends.iter().map(|e| e.0).collect(),
        groups,
        subgroups,
    }
}

/// Heatmap of a link matrix with its colour bar; values printed in the cells up to 16 x 16.
/// Written as [`crate::bandwidth`] is.
pub fn heatmap(out: &Path, h: &Heatmap) -> Result<(), String> {
    let mut svg = String::new();
    draw_heatmap(&mut svg, h)?;
    save(out, &svg)
}

/// `text` in lines of at most `width` pixels at plotters' font `font`, broken at spaces (a
/// word longer than a line is cut into lines of its own).
fn wrap(text: &str, font: f64, width: f64) -> Vec<String> {
    let max = ((width / text_width("m", svg_px(font))).floor() as usize).max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..max).collect());
        }
        let word: String = word.into_iter().collect();
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The axis labels, by index: every index numbered (or about 16 of a large matrix) without
/// groups; with groups the node at its first index and, where `room` (pixels between an index
/// and the next) lets every label stand apart, the NIC beside it and at each NIC's first index;
/// where even the nodes' do not, every k-th node.
fn tick_labels(h: &Heatmap, n: u32, room: &dyn Fn(&str) -> f64, px_per_index: f64) -> Vec<(u32, String)> {
    if h.groups.is_empty() {
        let every = if n as i32 > RUN_MERGE_FROM { n.div_ceil(16) } else { 1 };
        return (0..n).step_by(every as usize).map(|i| (i, i.to_string())).collect();
    }
    let spans = |starts: &[u32]| -> Vec<f64> {
        starts
            .iter()
            .zip(starts.iter().skip(1).chain(std::iter::once(&n)))
            .map(|(a, b)| f64::from(b - a) * px_per_index)
            .collect()
    };
    let node_at = |i: u32| h.groups.iter().find(|g| g.0 == i).map(|g| g.1.as_str());
    let with_nics: Vec<(u32, String)> = h
        .subgroups
        .iter()
        .map(|(i, nic)| (*i, node_at(*i).map_or(nic.clone(), |node| format!("{node} {nic}"))))
        .collect();
    let sub_starts: Vec<u32> = h.subgroups.iter().map(|g| g.0).collect();
    let fits = |labels: &[(u32, String)], spans: &[f64]| labels.iter().zip(spans).all(|(l, s)| room(&l.1) + 4.0 <= *s);
    if !with_nics.is_empty() && fits(&with_nics, &spans(&sub_starts)) {
        return with_nics;
    }
    let node_starts: Vec<u32> = h.groups.iter().map(|g| g.0).collect();
    let node_spans = spans(&node_starts);
    let widest = h.groups.iter().map(|g| room(&g.1)).fold(0.0, f64::max) + 4.0;
    let narrowest = node_spans.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9);
    let every = (widest / narrowest).ceil().max(1.0) as usize;
    h.groups.iter().step_by(every).cloned().collect()
}

fn draw_heatmap(svg: &mut String, h: &Heatmap) -> Result<(), String> {
    if h.cells.is_empty() {
        return Err("no links to plot".into());
    }
    let n = h.cells.iter().map(|c| c.src.max(c.dst)).max().unwrap_or(0) + 1;
    let unrated_set: std::collections::HashSet<(u32, u32)> = h.unrated.iter().copied().collect();
    let unrated = |c: &Cell| unrated_set.contains(&(c.src, c.dst));
    let rated: Vec<f64> = h.cells.iter().filter(|c| !unrated(c)).map(|c| c.gbps).collect();
    let (scale, unit) = match &h.scale {
        Scale::Gbps => (ColourScale::spanning(&rated), "GB/s"),
        Scale::ShareOfMedian => (ColourScale::fixed(SHARE_MAX, &rated), "share of median"),
    };
    let label_px = svg_px(LABEL_FONT);
    let side = (80 * n).clamp(360, 900);
    let px_per_index = f64::from(side) / f64::from(n);
    let x_labels = tick_labels(h, n, &|l| text_width(l, label_px), px_per_index);
    let y_labels = tick_labels(h, n, &|_| label_px * 1.2, px_per_index);
    let widest_y = y_labels.iter().map(|l| text_width(&l.1, label_px)).fold(0.0, f64::max);
    let y_area = (widest_y + 40.0).max(50.0).ceil() as u32;
    let ticks = scale.ticks();
    let widest_tick = ticks.iter().map(|t| text_width(&t.1, label_px)).fold(0.0, f64::max);
    let tick_area = (widest_tick + 15.0).ceil() as u32;
    let left_w = 10 + y_area + side + 20;
    let right_w = (tick_area + 70).max(text_width(unit, label_px).ceil() as u32 + 30);
    let width = left_w + right_w;
    let text_room = f64::from(width) - 20.0;
    let title = wrap(&h.title, TITLE_FONT, text_room);
    let title_h = 10 + 22 * title.len() as u32;
    let mut notes: Vec<(String, RGBColor)> = Vec::new();
    let mut note = |text: &str, color: RGBColor| {
        notes.extend(wrap(text, LABEL_FONT, text_room).into_iter().map(|l| (l, color)));
    };
    if let Some(rule) = &h.flag_rule {
        note(&format!("red: {rule}"), RED);
    }
    if let Some(rule) = &h.mark_rule {
        note(&format!("orange, inset: {rule}"), ORANGE);
    }
    if !h.unrated.is_empty() {
        note("grey x: above its link's rate, no rate", BLACK);
    }
    if scale.above.is_some() {
        note(
            &format!("orange to red on the bar: above {} (its own scale)", scale.hi),
            BLACK,
        );
    }
    for line in &h.notes {
        note(line, BLACK);
    }
    let notes_h = 10 + 16 * notes.len() as u32;
    let middle_h = side + 70;
    let height = title_h + middle_h + notes_h;
    let root = SVGBackend::with_string(svg, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (top, rest) = root.split_vertically(title_h);
    let (middle, bottom) = rest.split_vertically(middle_h);
    for (i, line) in title.iter().enumerate() {
        top.draw(&Text::new(
            line.clone(),
            (width as i32 / 2, 10 + 22 * i as i32),
            ("sans-serif", TITLE_FONT)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(draw_err)?;
    }
    let (left, right) = middle.split_horizontally(left_w);
    let mut chart = ChartBuilder::on(&left)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(50)
        .y_label_area_size(y_area)
        .build_cartesian_2d(-0.5..(f64::from(n) - 0.5), -0.5..(f64::from(n) - 0.5))
        .map_err(draw_err)?;
    // The axes' own lines and descriptions; their labels are drawn below, where they belong
    // (plotters places ticks at round values of its own choosing).
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc(format!("destination {}", h.axis))
        .y_desc(format!("source {}", h.axis))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(draw_err)?;
    let label_style = |h: HPos, v: VPos| ("sans-serif", LABEL_FONT).into_font().color(&BLACK).pos(Pos::new(h, v));
    for (i, text) in &x_labels {
        let (x, y) = chart.backend_coord(&(f64::from(*i), -0.5));
        root.draw(&PathElement::new(vec![(x, y), (x, y + 4)], BLACK))
            .map_err(draw_err)?;
        root.draw(&Text::new(
            text.clone(),
            (x, y + 6),
            label_style(HPos::Center, VPos::Top),
        ))
        .map_err(draw_err)?;
    }
    // A tick and its label left of a vertical axis (the matrix' rows, the colour bar).
    let left_label = |(x, y): (i32, i32), text: &str| -> Result<(), String> {
        root.draw(&PathElement::new(vec![(x - 4, y), (x, y)], BLACK))
            .map_err(draw_err)?;
        root.draw(&Text::new(
            text.to_string(),
            (x - 6, y),
            label_style(HPos::Right, VPos::Center),
        ))
        .map_err(draw_err)
    };
    for (i, text) in &y_labels {
        left_label(chart.backend_coord(&(-0.5, f64::from(*i))), text)?;
    }
    let sv = |i: u32| f64::from(i) - 0.5;
    // A large matrix (a node pair per cell at hundreds of nodes) in fewer shapes: its colours
    // in RUN_LEVELS steps, and the cells of a row that touch and share one drawn as one
    // rectangle, so that 512 x 512 cells stay a file of a few MB.
    let quantum = if n as i32 > RUN_MERGE_FROM {
        f64::from(RUN_LEVELS)
    } else {
        0.0
    };
    let fill_of = |c: &Cell| {
        if unrated(c) {
            RGBColor(200, 200, 200)
        } else if quantum > 0.0 {
            scale.colour_at((scale.position(c.gbps) * quantum).round() / quantum)
        } else {
            scale.colour(c.gbps)
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
    // Separators: a line between nodes, a faint one between a node's NICs.
    let edge = f64::from(n) - 0.5;
    let lines = |starts: &[(u32, String)], style: ShapeStyle| -> Vec<PathElement<(f64, f64)>> {
        starts
            .iter()
            .filter(|g| g.0 > 0)
            .flat_map(|g| {
                let at = sv(g.0);
                [
                    PathElement::new(vec![(at, -0.5), (at, edge)], style),
                    PathElement::new(vec![(-0.5, at), (edge, at)], style),
                ]
            })
            .collect()
    };
    // NIC lines only where a NIC's cells are wide enough to be seen between them.
    if px_per_index >= 16.0 {
        chart
            .draw_series(lines(&h.subgroups, BLACK.mix(0.25).stroke_width(1)))
            .map_err(draw_err)?;
    }
    chart
        .draw_series(lines(&h.groups, BLACK.stroke_width(1)))
        .map_err(draw_err)?;
    chart
        .draw_series(
            h.flagged
                .iter()
                .map(|&(s, d)| Rectangle::new([(sv(d), sv(s)), (sv(d + 1), sv(s + 1))], RED.stroke_width(4))),
        )
        .map_err(draw_err)?;
    let inset = 0.15;
    chart
        .draw_series(h.marked.iter().map(|&(s, d)| {
            Rectangle::new(
                [(sv(d) + inset, sv(s) + inset), (sv(d + 1) - inset, sv(s + 1) - inset)],
                ORANGE.stroke_width(2),
            )
        }))
        .map_err(draw_err)?;
    if n <= 16 {
        // Shares with two digits; GB/s with one more than the bar's ticks (cells apart).
        let digits = match h.scale {
            Scale::ShareOfMedian => 2,
            Scale::Gbps => scale.decimals() + 1,
        };
        let flagged: std::collections::HashSet<(u32, u32)> = h.flagged.iter().copied().collect();
        chart
            .draw_series(h.cells.iter().map(|c| {
                let fill = fill_of(c);
                let light = 0.299 * f64::from(fill.0) + 0.587 * f64::from(fill.1) + 0.114 * f64::from(fill.2) > 140.0;
                let color = if light { BLACK } else { WHITE };
                let flag = if flagged.contains(&(c.src, c.dst)) { "!" } else { "" };
                let text = if unrated(c) {
                    "x".to_string()
                } else {
                    format!("{:.digits$}{flag}", c.gbps)
                };
                Text::new(
                    text,
                    (f64::from(c.dst), f64::from(c.src)),
                    ("sans-serif", LABEL_FONT)
                        .into_font()
                        .color(&color)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                )
            }))
            .map_err(draw_err)?;
    }
    // The colour bar: its ticks where round values stand, its unit above.
    let mut bar = ChartBuilder::on(&right)
        .margin_top(10)
        .margin_bottom(60)
        .margin_right(20)
        .y_label_area_size(tick_area)
        .caption(unit, ("sans-serif", LABEL_FONT))
        .build_cartesian_2d(0.0..1.0, 0.0..1.0)
        .map_err(draw_err)?;
    for (pos, text) in &ticks {
        left_label(bar.backend_coord(&(0.0, *pos)), text)?;
    }
    let steps = 64;
    bar.draw_series((0..steps).map(|i| {
        let a = f64::from(i) / f64::from(steps);
        let b = f64::from(i + 1) / f64::from(steps);
        Rectangle::new([(0.0, a), (1.0, b)], scale.colour_at(f64::midpoint(a, b)).filled())
    }))
    .map_err(draw_err)?;
    for (i, (text, color)) in notes.into_iter().enumerate() {
        bottom
            .draw(&Text::new(
                text,
                (10, 16 * i as i32),
                ("sans-serif", LABEL_FONT)
                    .into_font()
                    .color(&color)
                    .pos(Pos::new(HPos::Left, VPos::Top)),
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
    fn wrapping_keeps_lines_within_the_width() {
        let lines = wrap(
            "red: flows of a slow NIC: node2 eth1 at 0.25 of the median NIC",
            12.0,
            120.0,
        );
        assert!(lines.len() > 1, "{lines:?}");
        for l in &lines {
            assert!(text_width(l, svg_px(12.0)) <= 120.0, "{l:?}");
        }
        assert_eq!(
            lines.join(" "),
            "red: flows of a slow NIC: node2 eth1 at 0.25 of the median NIC"
        );
    }

    #[test]
    fn endpoints_group_by_node_then_nic() {
        let ends = [(3, "b", "eth1"), (0, "a", "eth2"), (1, "a", "eth1"), (2, "b", "eth1")];
        let a = by_node_and_nic(&ends);
        assert_eq!(a.order, [1, 0, 2, 3]);
        assert_eq!(a.groups, [(0, "a".to_string()), (2, "b".to_string())]);
        assert_eq!(
            a.subgroups,
            [
                (0, "eth1".to_string()),
                (1, "eth2".to_string()),
                (2, "eth1".to_string())
            ]
        );
    }
}
