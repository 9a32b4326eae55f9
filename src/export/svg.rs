//! A picture of every run: `bandwidth.svg` (busbw and algbw vs size; netbw too where it
//! differs) and, for more than two endpoints, `links.svg` (the link matrix at the largest
//! size). Drawn by `tcpx-plot`, the code behind `tcpx-analyze plot` and `heatmap`.

use std::path::Path;

use tcpx_plot::{BandwidthChart, Cell, Heatmap, Line, Point};

use crate::report::{RunInfo, SizeResult};

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

/// The link matrix at the largest size, endpoints numbered as nccl-tests' global ranks.
fn links(path: &Path, info: &RunInfo, results: &[SizeResult]) -> Result<(), String> {
    let Some(last) = results
        .iter()
        .filter(|r| !r.pairs.is_empty())
        .max_by_key(|r| r.size_bytes)
    else {
        return Err("no per-pair data".into());
    };
    // `src_gpu` is the GPU index on the node (`local_rank * g + i`): `i` is its remainder.
    let g = info.settings.gpus_per_rank.max(1);
    let endpoint = |rank: usize, gpu: usize| (rank * g + gpu % g) as u32;
    let cells: Vec<Cell> = last
        .pairs
        .iter()
        .map(|p| Cell {
            src: endpoint(p.src_rank, p.src_gpu),
            dst: endpoint(p.dst_rank, p.dst_gpu),
            gbps: p.gbps,
        })
        .collect();
    // The flows of the slow NICs the run's findings name, where judged at this size.
    let slow: Vec<_> = info.slow_nics.iter().filter(|s| s.size == last.size_bytes).collect();
    let flagged: Vec<(u32, u32)> = slow
        .iter()
        .flat_map(|s| {
            s.flows
                .iter()
                .map(|&(sr, sg, dr, dg)| (endpoint(sr, sg), endpoint(dr, dg)))
        })
        .collect();
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
                "{}: per-pair bandwidth (GB/s) at {}",
                info.settings.pattern,
                tcpx_plot::fmt_size(last.size_bytes)
            ),
            axis: "endpoint",
            cells: &cells,
            flagged: &flagged,
            flag_rule,
        },
    )
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
