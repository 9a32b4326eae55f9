//! A picture of every run: `bandwidth.svg` (busbw and algbw vs size; netbw too where it
//! differs) and, for more than two endpoints, `links.svg` (the link matrix at the largest
//! size). Drawn by `tcpx-plot`, the code behind `tcpx-analyze plot` and `heatmap`.

use std::path::Path;

use tcpx_plot::{BandwidthChart, Cell, Heatmap, Line, Point, Scale};

use crate::matrix::Level;
use crate::report::{RunInfo, SizeResult};
use std::collections::HashMap;

/// File names inside a result directory.
pub const BANDWIDTH_SVG: &str = "bandwidth.svg";
pub const LINKS_SVG: &str = "links.svg";

/// Writes the run's pictures into `dir`; nothing when no size was measured. An error names
/// the file; the caller warns and keeps the CSVs.
pub fn write_plots(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> Result<(), String> {
    if results.is_empty() {
        return Ok(());
    }
    // tcpx-plot writes each whole or not at all, never through a link.
    let bandwidth = dir.join(BANDWIDTH_SVG);
    tcpx_plot::bandwidth(&bandwidth, &chart(info), &lines(results), &[]).map_err(|e| naming(&bandwidth, e))?;
    if info.settings.endpoints > 2 {
        let path = dir.join(LINKS_SVG);
        links(&path, info, results).map_err(|e| naming(&path, e))?;
    }
    Ok(())
}

/// A drawing error with the file it was for (a write error names it already).
fn naming(path: &Path, e: String) -> String {
    if e.contains(&*path.to_string_lossy()) {
        e
    } else {
        format!("cannot write {}: {e}", path.display())
    }
}

fn chart(info: &RunInfo) -> BandwidthChart {
    let nodes = if info.settings.nodes == 1 { "node" } else { "nodes" };
    BandwidthChart {
        title: format!(
            "{} ({}), {} endpoints on {} {nodes}, {}, {} memory",
            info.settings.pattern,
            info.settings.scope,
            info.settings.endpoints,
            info.settings.nodes,
            info.plugin.name,
            info.settings.mem
        ),
        x_desc: "size (bytes per endpoint, log2 scale)".into(),
        y_desc: "bandwidth (GB/s, 1 GB = 10^9 B)".into(),
        log_y: false,
    }
}

/// busbw and algbw per size, each with the band its fastest and slowest iterations span;
/// netbw where it is not busbw (fullmesh with `--scope inter-node`).
fn lines(results: &[SizeResult]) -> Vec<Line> {
    // figure(r) = algbw x factor; the band takes the same factor over the iterations' times.
    let line = |label: &str, factor: &dyn Fn(&SizeResult) -> f64| Line {
        label: format!("{label} (band: fastest..slowest iteration)"),
        points: results
            .iter()
            .map(|r| -> Point {
                let f = factor(r);
                let band = (r.stats.n >= 2).then(|| {
                    let bw = |t_us: f64| r.size_bytes as f64 / t_us / 1e3 * f;
                    (bw(r.stats.max), bw(r.stats.min))
                });
                (r.size_bytes, r.algbw_gbps * f, band)
            })
            .collect(),
    };
    let ratio = |num: f64, r: &SizeResult| if r.algbw_gbps > 0.0 { num / r.algbw_gbps } else { 0.0 };
    let mut out = vec![line("busbw", &|r| ratio(r.busbw_gbps, r)), line("algbw", &|_| 1.0)];
    let differs = results
        .iter()
        .any(|r| (r.netbw_gbps - r.busbw_gbps).abs() > 1e-3 * r.busbw_gbps.abs().max(1e-9));
    if differs {
        out.push(line("netbw (network bytes only)", &|r| ratio(r.netbw_gbps, r)));
    }
    out
}

/// The link matrix at the largest size, for an operator: each pair's rate as a share of the
/// median pair on a fixed scale (0 to 1.5: an outlier cannot wash out the rest, and a slow
/// row or column shows whether or not a rule fired; shares above 1.5 on a scale of their own
/// above it), endpoints grouped by node and, within a node, by NIC (placement's), labelled
/// `node eth` where there is room, else by node (one node: numbered in order); pairs above
/// their link (no rate) grey. A job judged by NIC links or node pairs (past
/// [`crate::matrix::LINKS_MAX`] endpoint pairs) is drawn node by node.
fn links(path: &Path, info: &RunInfo, results: &[SizeResult]) -> Result<(), String> {
    let Some(last) = results
        .iter()
        .filter(|r| !r.pairs.is_empty())
        .max_by_key(|r| r.size_bytes)
    else {
        return Err("no per-pair data".into());
    };
    let matrix = if last.pairs.iter().all(|p| p.level() == Level::Endpoint) {
        endpoint_matrix(info, last)
    } else {
        node_matrix(info, last)
    };
    let rated: Vec<f64> = matrix.cells.iter().filter(|c| !c.2).map(|c| c.1).collect();
    let median = if rated.is_empty() {
        0.0
    } else {
        tcpx_units::median(&rated)
    };
    let cells: Vec<Cell> = matrix
        .cells
        .iter()
        .map(|&((src, dst), gbps, _)| Cell {
            src,
            dst,
            gbps: if median > 0.0 { gbps / median } else { 0.0 },
        })
        .collect();
    let unrated: Vec<(u32, u32)> = matrix.cells.iter().filter(|c| c.2).map(|c| c.0).collect();
    let slow: Vec<_> = info.slow_nics.iter().filter(|s| s.size == last.size_bytes).collect();
    let flag_rule = (!slow.is_empty()).then(|| {
        let named: Vec<String> = slow
            .iter()
            .map(|s| format!("{} {} at {:.2} of the median NIC", s.side.host, s.side.nic, s.share))
            .collect();
        format!("flows of a slow NIC: {}", named.join("; "))
    });
    tcpx_plot::heatmap(
        path,
        &Heatmap {
            title: format!(
                "{}: per-{} rate at {}, share of the median {} ({})",
                info.settings.pattern,
                matrix.unit,
                tcpx_plot::fmt_size(last.size_bytes),
                matrix.unit,
                tcpx_units::format_rate(median)
            ),
            axis: matrix.axis,
            cells: &cells,
            flagged: &matrix.flagged,
            flag_rule,
            scale: Scale::ShareOfMedian,
            groups: matrix.groups,
            subgroups: matrix.subgroups,
            unrated: &unrated,
            ..Heatmap::default()
        },
    )
}

/// A matrix ready to draw: cells ((row, column), GB/s, no rate), the slow NICs' cells, groups
/// (nodes) and subgroups (a node's NICs).
struct Drawn {
    cells: Vec<((u32, u32), f64, bool)>,
    flagged: Vec<(u32, u32)>,
    groups: Vec<(u32, String)>,
    subgroups: Vec<(u32, String)>,
    axis: &'static str,
    /// What one cell is, for the title.
    unit: &'static str,
}

/// Endpoint pairs: endpoints grouped by node, then NIC.
fn endpoint_matrix(info: &RunInfo, last: &SizeResult) -> Drawn {
    // `src_gpu` is the GPU index on the node (`local_rank * g + i`): `i` is its remainder.
    let g = info.settings.gpus_per_rank.max(1);
    let endpoint = |rank: usize, gpu: usize| rank * g + gpu % g;
    let end = |rank: Option<usize>, gpu: Option<usize>| endpoint(rank.unwrap_or(0), gpu.unwrap_or(0));
    let axes = display_order(info, last, &endpoint);
    let at: HashMap<usize, u32> = axes.order.iter().enumerate().map(|(i, &e)| (e, i as u32)).collect();
    let index = |e: usize| at.get(&e).copied().unwrap_or(0);
    let cells = last
        .pairs
        .iter()
        .map(|p| {
            (
                (index(end(p.src_rank, p.src_gpu)), index(end(p.dst_rank, p.dst_gpu))),
                p.gbps,
                p.above_link,
            )
        })
        .collect();
    // The flows of the slow NICs the run's findings name, where judged at this size: their
    // endpoint pairs, or (judged by NIC links) every pair of those links on that NIC's rail.
    let mut flagged: Vec<(u32, u32)> = Vec::new();
    for s in info.slow_nics.iter().filter(|s| s.size == last.size_bytes) {
        flagged.extend(
            s.flows
                .iter()
                .map(|&(sr, sg, dr, dg)| (index(endpoint(sr, sg)), index(endpoint(dr, dg)))),
        );
        let links: std::collections::HashSet<(&str, &str)> =
            s.links.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        flagged.extend(
            last.pairs
                .iter()
                .filter(|p| p.rail.as_deref() == Some(s.side.nic.as_str()))
                .filter(|p| links.contains(&(p.src_host.as_str(), p.dst_host.as_str())))
                .map(|p| (index(end(p.src_rank, p.src_gpu)), index(end(p.dst_rank, p.dst_gpu)))),
        );
    }
    Drawn {
        cells,
        flagged,
        axis: if axes.groups.is_empty() {
            "endpoint"
        } else {
            "endpoint (by node, then NIC)"
        },
        groups: axes.groups,
        subgroups: axes.subgroups,
        unit: "pair",
    }
}

/// NIC links or node pairs, drawn node by node: a cell is every byte from one node to another
/// over the time the slowest of its links took (a slow NIC's links make their node pairs slow).
fn node_matrix(info: &RunInfo, last: &SizeResult) -> Drawn {
    let mut nodes: Vec<&str> = info.hosts.iter().map(|h| h.hostname.as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    nodes.retain(|h| seen.insert(*h));
    for p in &last.pairs {
        for h in [p.src_host.as_str(), p.dst_host.as_str()] {
            if seen.insert(h) {
                nodes.push(h);
            }
        }
    }
    let at: HashMap<&str, u32> = nodes.iter().enumerate().map(|(i, &h)| (h, i as u32)).collect();
    // (bytes, slowest time, any link without a rate) per node pair.
    let mut pairs: HashMap<(u32, u32), (u64, f64, bool)> = HashMap::new();
    for p in &last.pairs {
        let e = pairs
            .entry((at[p.src_host.as_str()], at[p.dst_host.as_str()]))
            .or_insert((0, 0.0, false));
        e.0 += p.bytes;
        e.1 = e.1.max(p.time_us);
        e.2 |= p.above_link;
    }
    let mut cells: Vec<((u32, u32), f64, bool)> = pairs
        .into_iter()
        .map(|(k, (bytes, time, unrated))| (k, tcpx_units::gbps(bytes, time), unrated))
        .collect();
    cells.sort_unstable_by_key(|c| c.0);
    let flagged = info
        .slow_nics
        .iter()
        .filter(|s| s.size == last.size_bytes)
        .flat_map(|s| s.links.iter())
        .filter_map(|(a, b)| Some((*at.get(a.as_str())?, *at.get(b.as_str())?)))
        .collect();
    let groups = if nodes.len() <= 64 {
        nodes
            .iter()
            .enumerate()
            .map(|(i, h)| (i as u32, (*h).to_string()))
            .collect()
    } else {
        Vec::new()
    };
    Drawn {
        cells,
        flagged,
        groups,
        subgroups: Vec::new(),
        axis: "node (in rank order)",
        unit: "node pair",
    }
}

/// The matrix's endpoints in display order (tcpx-plot's: by node in rank order, then NIC,
/// then endpoint; one node: endpoints in their own order, numbered as nccl-tests' global ranks).
fn display_order(
    info: &RunInfo,
    last: &SizeResult,
    endpoint: &dyn Fn(usize, usize) -> usize,
) -> tcpx_plot::Axes<usize> {
    let nic_of: HashMap<(usize, usize), &str> = info
        .placement
        .rows
        .iter()
        .map(|r| ((r.rank, r.gpu), r.nic.as_str()))
        .collect();
    let ends: Vec<(usize, &str, &str)> = last
        .pairs
        .iter()
        .flat_map(|p| {
            [
                (p.src_rank, p.src_gpu, &p.src_host),
                (p.dst_rank, p.dst_gpu, &p.dst_host),
            ]
        })
        .filter_map(|(rank, gpu, host)| {
            let (rank, gpu) = (rank?, gpu?);
            let nic = nic_of.get(&(rank, gpu)).copied().unwrap_or("");
            Some((endpoint(rank, gpu), host.as_str(), nic))
        })
        .collect();
    tcpx_plot::by_node_and_nic(&ends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::fixtures;

    #[test]
    fn pictures_have_their_axes() {
        let dir = tempfile::tempdir().unwrap();
        let mut info = fixtures::info();
        info.settings.endpoints = 3;
        write_plots(dir.path(), &info, &fixtures::results()).unwrap();
        let bw = std::fs::read_to_string(dir.path().join(BANDWIDTH_SVG)).unwrap();
        assert!(bw.starts_with("<svg") && bw.trim_end().ends_with("</svg>"), "{bw}");
        for text in [
            "size (bytes per endpoint, log2 scale)",
            "GB/s, 1 GB = 10^9 B",
            "busbw",
            "algbw",
        ] {
            assert!(bw.contains(text), "bandwidth.svg lacks {text:?}");
        }
        let links = std::fs::read_to_string(dir.path().join(LINKS_SVG)).unwrap();
        assert!(links.contains("destination endpoint") && links.contains("source endpoint"));
    }

    /// 4 nodes x 2 ranks, one NIC each (eth1, eth2), fullmesh at 1 MiB: every pair at 1 Mbit/s
    /// but node2's eth1 sending at a quarter, and one pair 1000x (issue 46's impossible figure,
    /// marked above its link). Returns the SVG.
    fn matrix_with_an_outlier() -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut info = fixtures::info();
        info.settings.endpoints = 8;
        info.settings.pattern = "fullmesh".into();
        info.placement.rows = crate::slow_nic::tests::placement_rows(4, 2);
        let mut size = fixtures::size(1 << 20, 1000.0, Some(0));
        let rate = 1e6 / 8e9;
        size.pairs = (0..8)
            .flat_map(|s| (0..8).map(move |d| (s, d)))
            .filter(|(s, d)| s / 2 != d / 2)
            .map(|(s, d)| {
                let slow = s == 4 && d % 2 == 0;
                let outlier = (s, d) == (1, 6);
                let gbps = if outlier {
                    1000.0 * rate
                } else if slow {
                    rate / 4.0
                } else {
                    rate
                };
                crate::report::PairResult {
                    link_gbps: Some(rate),
                    above_link: outlier,
                    impossible: outlier,
                    ..crate::slow_nic::tests::pair(s, d, 131_072, gbps)
                }
            })
            .collect();
        write_plots(dir.path(), &info, &[size]).unwrap();
        std::fs::read_to_string(dir.path().join(LINKS_SVG)).unwrap()
    }

    /// The fill colours of the matrix's cells, in drawing order (the first 48 rects after the
    /// background are the 8 x 8 - 16 cells).
    fn cell_fills(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).expect("links.svg parses");
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter_map(|n| n.attribute("fill").map(str::to_uppercase))
            .skip(1)
            .take(48)
            .collect()
    }

    /// Colours are shares of the median pair on a fixed scale: an outlier (here 1000x, marked
    /// above its link and drawn grey) cannot wash out the others, the median pairs take the
    /// scale's 1.0 and node2's quarter-rate row a colour of its own; cells print shares, rows
    /// and columns are grouped by node. (On the GB/s scale from the lowest to the highest
    /// cell, every pair but the outlier was one dark colour.)
    #[test]
    fn links_svg_shows_a_slow_row_whatever_the_outliers() {
        let svg = matrix_with_an_outlier();
        let fills = cell_fills(&svg);
        assert_eq!(fills.len(), 48, "{fills:?}");
        let count = |c: &str| fills.iter().filter(|f| f.as_str() == c).count();
        let median = tcpx_plot_colour(1.0 / tcpx_plot::SHARE_MAX);
        let quarter = tcpx_plot_colour(0.25 / tcpx_plot::SHARE_MAX);
        // 48 pairs: 1 outlier (grey), node2's eth1 sending to the 3 other nodes' eth1 ranks
        // (rank 4 to ranks 0, 2, 6: 3 pairs), the other 44 at the median.
        assert_eq!(
            (count(&median), count(&quarter), count("#C8C8C8")),
            (44, 3, 1),
            "{fills:?}"
        );
        for text in [
            "share of the median pair (1.00 Mbit/s)",
            "share of median",
            "node2",
            "grey x: above its link",
        ] {
            assert!(svg.contains(text), "links.svg lacks {text:?}");
        }
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for share in ["0.25", "1.00", "x"] {
            assert!(texts.contains(&share), "no cell prints {share}: {texts:?}");
        }
    }

    /// Issue 55's run: 4 nodes x 2 ranks, one NIC each (eth1, eth2), fullmesh at 1 MiB, every
    /// pair at 1 Mbit/s times `share(src, dst)`, the run's finding naming node2's eth1 sending
    /// at a quarter (its flows outlined, the red note naming it). Returns links.svg.
    fn four_by_two(share: &dyn Fn(usize, usize) -> f64) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut info = fixtures::info();
        info.settings.endpoints = 8;
        info.settings.nodes = 4;
        info.settings.pattern = "fullmesh".into();
        info.placement.rows = crate::slow_nic::tests::placement_rows(4, 2);
        let rate = 1e6 / 8e9;
        let mut size = fixtures::size(1 << 20, 1000.0, Some(0));
        size.pairs = (0..8)
            .flat_map(|s| (0..8).map(move |d| (s, d)))
            .filter(|(s, d)| s / 2 != d / 2)
            .map(|(s, d)| crate::report::PairResult {
                link_gbps: Some(rate * 4.0),
                ..crate::slow_nic::tests::pair(s, d, 131_072, rate * share(s, d))
            })
            .collect();
        let flows: Vec<_> = size
            .pairs
            .iter()
            .filter(|p| p.src_rank == Some(4) && p.dst_gpu == Some(0))
            .map(|p| (4, 0, p.dst_rank.unwrap(), 0))
            .collect();
        info.slow_nics = vec![crate::report::SlowNic {
            side: crate::report::Side {
                host: "node2".into(),
                nic: "eth1".into(),
                sending: true,
            },
            share: 0.25,
            gbps: rate / 4.0,
            reference_gbps: rate,
            size: 1 << 20,
            slow_sizes: 1,
            judged_sizes: 1,
            flows,
            links: Vec::new(),
            wire_bytes: None,
            twin: None,
        }];
        write_plots(dir.path(), &info, &[size]).unwrap();
        std::fs::read_to_string(dir.path().join(LINKS_SVG)).unwrap()
    }

    /// node2's eth1 (rank 4) sending at a quarter, the rest at the median.
    fn quarter(s: usize, d: usize) -> f64 {
        if s == 4 && d.is_multiple_of(2) {
            0.25
        } else {
            1.0
        }
    }

    /// Issue 55: every text of links.svg inside its canvas: the title (was centred at x=205 on
    /// a 600 px canvas, its start cut), the red note naming the slow NIC (was cut at "node2
    /// eth1 a"), the axis labels. Each text's box is estimated at 0.6 em a character.
    #[test]
    fn links_svg_keeps_every_text_inside_its_canvas() {
        let svg = four_by_two(&quarter);
        let outside = tcpx_plot::check::outside_canvas(&svg);
        assert!(outside.is_empty(), "texts outside the canvas:\n{}", outside.join("\n"));
        let (_, texts) = tcpx_plot::check::texts(&svg).unwrap();
        let all: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        assert!(
            all.iter().any(|t| t.contains("node2 eth1 at 0.25 of the median NIC")),
            "the red note names the slow NIC whole: {all:?}"
        );
    }

    /// links.svg of `nodes` nodes with `per_node` endpoints (one NIC each, long host names: a
    /// cluster's), every pair at the median but the first node's first NIC sending at a
    /// quarter; with `nic_links`, the rows a job past 65536 endpoint pairs writes (a NIC's link
    /// per node pair and rail), drawn node by node.
    fn shape_svg(nodes: usize, per_node: usize, nic_links: bool) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut info = fixtures::info();
        info.settings.endpoints = nodes * per_node;
        info.settings.nodes = nodes;
        info.settings.pattern = "fullmesh".into();
        let host = |e: usize| format!("a3high-cluster-node-{:03}", e / per_node);
        info.placement.rows = crate::slow_nic::tests::placement_rows(nodes, per_node);
        for r in &mut info.placement.rows {
            r.host = host(r.rank);
        }
        let rate = 1e6 / 8e9;
        let mut size = fixtures::size(1 << 20, 1000.0, Some(0));
        let ends = nodes * per_node;
        size.pairs = (0..ends)
            .flat_map(|s| (0..ends).map(move |d| (s, d)))
            .filter(|(s, d)| s != d && (nodes == 1 || s / per_node != d / per_node))
            .filter(|(s, d)| !nic_links || (s % per_node == 0 && d % per_node == 0))
            .map(|(s, d)| {
                let gbps = if s == 0 && d % per_node == 0 { rate / 4.0 } else { rate };
                let mut p = crate::slow_nic::tests::pair(s, d, 131_072, gbps);
                (p.src_host, p.dst_host) = (host(s), host(d));
                (p.src_gpu, p.dst_gpu) = (Some(s % per_node), Some(d % per_node));
                if nic_links {
                    (p.src_rank, p.src_gpu, p.dst_rank, p.dst_gpu) = (None, None, None, None);
                    p.rail = Some("eth1".into());
                }
                p
            })
            .collect();
        write_plots(dir.path(), &info, &[size]).unwrap();
        std::fs::read_to_string(dir.path().join(LINKS_SVG)).unwrap()
    }

    /// Every shape keeps its texts inside the canvas: one node (numbered endpoints), 16 nodes
    /// of 8 NICs (labels thinned where they would touch), a job judged by NIC links (node by
    /// node), 80 nodes (more than the 64 labelled one by one), all with long host names.
    #[test]
    fn links_svg_keeps_its_texts_inside_at_every_shape() {
        for (nodes, per_node, nic_links) in [(1, 4, false), (16, 8, false), (4, 2, true), (80, 1, false)] {
            let svg = shape_svg(nodes, per_node, nic_links);
            let outside = tcpx_plot::check::outside_canvas(&svg);
            assert!(
                outside.is_empty(),
                "{nodes} x {per_node} (NIC links: {nic_links}), texts outside the canvas:\n{}",
                outside.join("\n")
            );
        }
    }

    /// Issue 55: shares above the scale's 1.5 read as such: a pair at 3.1 of the median and one
    /// at 1.6 take different colours (both wore the scale's top colour), each printed in its
    /// cell, and the median pairs keep the colour of 1.0.
    #[test]
    fn links_svg_tells_shares_above_the_scale_apart() {
        let svg = four_by_two(&|s, d| match (s, d) {
            (0, 2) => 1.6,
            (0, 4) => 3.1,
            _ => quarter(s, d),
        });
        let (_, texts) = tcpx_plot::check::texts(&svg).unwrap();
        let fill_of = |label: &str| {
            let doc = roxmltree::Document::parse(&svg).unwrap();
            let text = doc
                .descendants()
                .find(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some(label))
                .unwrap_or_else(|| panic!("no cell prints {label}: {texts:?}"));
            // The cell's rectangle is the last one drawn whose box holds the text's anchor.
            let (x, y): (f64, f64) = (
                text.attribute("x").unwrap().parse().unwrap(),
                text.attribute("y").unwrap().parse().unwrap(),
            );
            doc.descendants()
                .filter(|n| n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f != "none"))
                .rfind(|n| {
                    let f = |a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
                    let (rx, ry, rw, rh) = (f("x"), f("y"), f("width"), f("height"));
                    rw < 200.0 && rx <= x && x <= rx + rw && ry <= y && y <= ry + rh
                })
                .and_then(|n| n.attribute("fill"))
                .unwrap_or_else(|| panic!("no cell under {label}"))
                .to_uppercase()
        };
        let (high, higher) = (fill_of("1.60"), fill_of("3.10"));
        assert_ne!(high, higher, "1.6 and 3.1 of the median wear one colour");
        assert_ne!(fill_of("1.00"), high);
    }

    /// The viridis colour tcpx-plot gives a level in 0..=1, as the SVG writes it.
    fn tcpx_plot_colour(level: f64) -> String {
        let c = tcpx_plot::viridis(level);
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn two_endpoints_get_no_matrix_and_no_rows_no_pictures() {
        let dir = tempfile::tempdir().unwrap();
        write_plots(dir.path(), &fixtures::info(), &fixtures::results()).unwrap();
        assert!(dir.path().join(BANDWIDTH_SVG).exists());
        assert!(!dir.path().join(LINKS_SVG).exists());
        let empty = tempfile::tempdir().unwrap();
        write_plots(empty.path(), &fixtures::info(), &[]).unwrap();
        assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_plot_that_cannot_be_written_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir");
        let e = write_plots(&missing, &fixtures::info(), &fixtures::results()).unwrap_err();
        assert!(e.contains("bandwidth.svg"), "{e}");
    }
}
