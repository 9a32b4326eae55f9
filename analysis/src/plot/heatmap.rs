//! `tcpx-analyze heatmap`: the link matrix of one size, endpoints grouped and labelled by node
//! and NIC, with the run's own node verdicts (summary.json `node_verdicts`, tcpx-perf's rule:
//! a NIC side's share of the median side, measured by the probe; docs/drain.md) named beside
//! it and their NIC sides' flows outlined in red. The robust z-score of the pair rates is
//! another view, said to be one: it compares pairs with pairs at one size of the sweep, where
//! the verdicts compare NIC sides in rounds that load every NIC alike; it flags nothing of its
//! own in red and decides nothing.

use crate::model::{PairLink, Run};
use crate::stats;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tcpx_plot::{Cell, Heatmap};

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

/// One node's verdict as tcpx-perf writes it (summary.json `node_verdicts`, results/README.md);
/// the loader has checked its types ([`crate::validate::check_node_verdicts`]).
#[derive(Debug, Clone, Deserialize)]
pub struct NodeVerdict {
    pub host: String,
    pub verdict: String,
    pub evidence: String,
    #[serde(default)]
    pub decided_by: Option<String>,
    #[serde(default)]
    pub slow_sides: Vec<SlowSide>,
}

/// A NIC side a verdict names: its flows leave (`sending`) or enter the node on `nic`.
#[derive(Debug, Clone, Deserialize)]
pub struct SlowSide {
    pub nic: String,
    pub sending: bool,
    pub share: f64,
}

/// What a run's summary.json says beside its pairs: the node verdicts (None: the run has none,
/// an older run or one node) and each endpoint's NIC (placement, by rank and GPU).
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    pub source: String,
    pub verdicts: Option<Vec<NodeVerdict>>,
    pub nic_of: HashMap<(u32, u32), String>,
}

#[derive(Deserialize)]
struct Placement {
    #[serde(default)]
    rows: Vec<PlacementRow>,
}

#[derive(Deserialize)]
struct PlacementRow {
    rank: u32,
    gpu: u32,
    nic: String,
}

/// The context of a tcpx-perf result directory (nothing for other inputs: no summary.json).
pub fn context(run: &Run) -> Result<RunContext, String> {
    let mut ctx = RunContext {
        source: run.source.clone(),
        ..RunContext::default()
    };
    let path = Path::new(&run.source).join("summary.json");
    if run.format != crate::model::Format::TcpxPerfDir || !path.is_file() {
        return Ok(ctx);
    }
    let text = crate::input::read_text(&path).map_err(|e| e.to_string())?;
    let summary: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: invalid JSON: {e}", path.display()))?;
    let field = |k: &str| summary.get(k).filter(|v| !v.is_null()).cloned();
    if let Some(v) = field("node_verdicts") {
        let list: Vec<NodeVerdict> =
            serde_json::from_value(v).map_err(|e| format!("{}: node_verdicts: {e}", path.display()))?;
        ctx.verdicts = (!list.is_empty()).then_some(list);
    }
    if let Some(p) = field("placement") {
        // Placement rows of an older or foreign layout only cost the NIC labels.
        if let Ok(p) = serde_json::from_value::<Placement>(p) {
            ctx.nic_of = p.rows.into_iter().map(|r| ((r.rank, r.gpu), r.nic)).collect();
        }
    }
    Ok(ctx)
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

/// An endpoint: rank and GPU index on its node (pairs.csv without GPUs: 0).
type Endpoint = (u32, u32);

fn src_end(p: &PairLink) -> Endpoint {
    (p.src_rank, p.src_gpu.unwrap_or(0))
}

fn dst_end(p: &PairLink) -> Endpoint {
    (p.dst_rank, p.dst_gpu.unwrap_or(0))
}

/// The NIC a link crosses: pairs.csv's `rail` (the receiver's NIC), else the receiving
/// endpoint's NIC by placement (tcpx-perf's rule, src/slow_nic: a flow leaves its sender's node
/// on the NIC of the receiver's rail and enters the receiver's on it).
fn rail<'a>(p: &'a PairLink, contexts: &'a [RunContext]) -> Option<&'a str> {
    p.rail.as_deref().or_else(|| {
        contexts
            .iter()
            .find_map(|c| c.nic_of.get(&dst_end(p)).map(String::as_str))
    })
}

/// What the heatmap showed: the verdicts it drew (per run) and the robust-z outliers.
#[derive(Debug, Clone, Default)]
pub struct Drawn {
    pub contexts: Vec<RunContext>,
    pub outliers: Vec<Outlier>,
}

/// Heatmap of the per-pair link matrix at one size: endpoints by node, then NIC (labelled so),
/// the NIC sides the runs' node verdicts name outlined in red, robust-z outliers inset in
/// orange as another view, the verdicts written under the picture.
pub fn plot_heatmap(
    out: &Path,
    title: &str,
    links: &[PairLink],
    contexts: &[RunContext],
    z: f64,
) -> Result<Drawn, String> {
    // Links measured several times (several runs) are averaged per cell (their median).
    let mut merged: BTreeMap<(Endpoint, Endpoint), (Vec<f64>, &PairLink)> = BTreeMap::new();
    for p in links {
        merged
            .entry((src_end(p), dst_end(p)))
            .or_insert((Vec::new(), p))
            .0
            .push(p.gbps);
    }
    let merged: Vec<PairLink> = merged
        .values()
        .map(|(v, first)| PairLink {
            pattern: String::new(),
            size: 0,
            gbps: tcpx_units::median(v),
            ..(*first).clone()
        })
        .collect();
    // Robust z `(x - median) / (1.4826 MAD)` of each pair's rate, beyond `z`: the other view.
    let zs = stats::robust_z(&merged.iter().map(|p| p.gbps).collect::<Vec<_>>());
    let far: Vec<(&PairLink, f64)> = merged.iter().zip(zs).filter(|(_, s)| s.abs() > z).collect();
    let nic_of = |e: Endpoint| {
        contexts
            .iter()
            .find_map(|c| c.nic_of.get(&e))
            .map_or("", String::as_str)
    };
    let ends: Vec<(Endpoint, &str, &str)> = merged
        .iter()
        .flat_map(|p| [(src_end(p), p.src_host.as_str()), (dst_end(p), p.dst_host.as_str())])
        .map(|(e, host)| (e, host, nic_of(e)))
        .collect();
    let axes = tcpx_plot::by_node_and_nic(&ends);
    let at: HashMap<Endpoint, u32> = axes.order.iter().enumerate().map(|(i, &e)| (e, i as u32)).collect();
    let cell_of = |p: &PairLink| (at[&src_end(p)], at[&dst_end(p)]);
    let cells: Vec<Cell> = merged
        .iter()
        .map(|p| {
            let (src, dst) = cell_of(p);
            Cell { src, dst, gbps: p.gbps }
        })
        .collect();
    // The verdicts' NIC sides: every flow through one (its node sending or receiving on it).
    let named: Vec<(&NodeVerdict, &SlowSide)> = contexts
        .iter()
        .flat_map(|c| c.verdicts.iter().flatten())
        .filter(|v| v.verdict != "healthy")
        .flat_map(|v| v.slow_sides.iter().map(move |s| (v, s)))
        .collect();
    let through = |p: &PairLink, v: &NodeVerdict, s: &SlowSide| {
        let host = if s.sending { &p.src_host } else { &p.dst_host };
        *host == v.host && rail(p, contexts) == Some(s.nic.as_str())
    };
    let mut flagged: Vec<(u32, u32)> = merged
        .iter()
        .filter(|p| named.iter().any(|(v, s)| through(p, v, s)))
        .map(cell_of)
        .collect();
    flagged.dedup();
    let marked: Vec<(u32, u32)> = far.iter().map(|(p, _)| cell_of(p)).collect();
    let sides: Vec<String> = named
        .iter()
        .map(|(v, s)| {
            format!(
                "{} {} {} ({:.2}, {})",
                v.host,
                s.nic,
                if s.sending { "sending" } else { "receiving" },
                s.share,
                v.verdict
            )
        })
        .collect();
    // A rank of one GPU is its endpoint: the axes say rank, as nccl-tests does.
    let mut gpus: HashMap<u32, u32> = HashMap::new();
    let one_gpu = ends
        .iter()
        .all(|&((rank, gpu), _, _)| *gpus.entry(rank).or_insert(gpu) == gpu);
    let axis = match (one_gpu, axes.groups.is_empty()) {
        (true, true) => "rank",
        (true, false) => "rank (by node, then NIC)",
        (false, true) => "endpoint (rank, GPU)",
        (false, false) => "endpoint (by node, then NIC)",
    };
    tcpx_plot::heatmap(
        out,
        &Heatmap {
            title: title.to_string(),
            axis,
            cells: &cells,
            flagged: &flagged,
            flag_rule: (!sides.is_empty()).then(|| {
                format!(
                    "flows of the NIC sides the run's node verdicts name: {}",
                    sides.join("; ")
                )
            }),
            marked: &marked,
            mark_rule: Some(secondary_rule(z)),
            scale: tcpx_plot::Scale::Gbps,
            groups: axes.groups,
            subgroups: axes.subgroups,
            unrated: &[],
            notes: contexts
                .iter()
                .flat_map(|c| verdict_lines(c, contexts.len() > 1))
                .collect(),
        },
    )?;
    Ok(Drawn {
        contexts: contexts.to_vec(),
        outliers: far
            .iter()
            .map(|&(p, robust_z)| Outlier {
                src_rank: p.src_rank,
                dst_rank: p.dst_rank,
                src_host: p.src_host.clone(),
                dst_host: p.dst_host.clone(),
                gbps: p.gbps,
                robust_z,
            })
            .collect(),
    })
}

/// What robust z is beside the verdicts.
fn secondary_rule(z: f64) -> String {
    format!(
        "|robust z| > {z} of the pair rates: another view (pairs against pairs at this size), not the node verdicts' rule (a NIC side's share of the median side, docs/drain.md)"
    )
}

/// The run's node verdicts in lines: a headline, then each node not healthy with its evidence.
pub fn verdict_lines(c: &RunContext, name_run: bool) -> Vec<String> {
    let of = if name_run {
        format!(" of {}", c.source)
    } else {
        String::new()
    };
    let Some(list) = &c.verdicts else {
        return vec![format!(
            "node verdicts{of}: none in summary.json (one node, or a run before them): the robust z view only"
        )];
    };
    let count = |v: &str| list.iter().filter(|n| n.verdict == v).count();
    let mut lines = vec![format!(
        "node verdicts{of} (tcpx-perf's, summary.json; a NIC side's share of the median side, docs/drain.md): {} bad, {} suspect, {} healthy",
        count("bad"),
        count("suspect"),
        count("healthy")
    )];
    for rank in ["bad", "suspect"] {
        for v in list.iter().filter(|n| n.verdict == rank) {
            let by = v.decided_by.as_deref().map_or(String::new(), |d| format!(" ({d})"));
            lines.push(format!("  {} {}{by}: {}", v.host, v.verdict, v.evidence));
        }
    }
    lines
}

/// The console report: the verdicts first, then the robust z view and its table (host names
/// shown literally: a PR comment's Markdown cannot be broken by one).
pub fn report(drawn: &Drawn, z: f64) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in &drawn.contexts {
        for line in verdict_lines(c, drawn.contexts.len() > 1) {
            let _ = writeln!(s, "{line}");
        }
    }
    let view = "robust z of the pair rates, another view (pairs against pairs; not the verdicts' rule)";
    if drawn.outliers.is_empty() {
        let _ = writeln!(s, "{view}: no outliers (|robust z| <= {z})");
        return s;
    }
    let _ = writeln!(s, "{view}: outliers (|robust z| > {z}):");
    let _ = writeln!(s, "| src rank (host) | dst rank (host) | GB/s | robust z |");
    let _ = writeln!(s, "|---|---|---|---|");
    for o in &drawn.outliers {
        let _ = writeln!(
            s,
            "| {} ({}) | {} ({}) | {:.3} | {:.2} |",
            o.src_rank,
            crate::report::cell(&o.src_host),
            o.dst_rank,
            crate::report::cell(&o.dst_host),
            o.gbps,
            o.robust_z
        );
    }
    s
}
