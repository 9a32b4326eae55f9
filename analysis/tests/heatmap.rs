//! `tcpx-analyze heatmap` on a run whose node verdicts name a node (issue 55): the heatmap says
//! what the verdicts say (the same nodes, the same NIC sides outlined), keeps robust z only as
//! another view said to be one, labels its axes by node and NIC, and its texts stay inside the
//! picture with a colour bar of distinct values.
//!
//! The run is synthesized (no rig here, no shaping on loopback): `common::write_run`'s result
//! directory with pairs.csv rewritten as a 4 x 2 rig's (4 nodes, 2 ranks a node, one NIC each,
//! eth1 and eth2; fullmesh at the rig's few Mbit/s with the spread of a loaded rig, 0.6 to 1.4
//! of the median) with node2's eth1 sending at a quarter, and summary.json given the hosts,
//! the placement and the node verdicts tcpx-perf writes for such a run (node2 bad by the probe).

mod common;

use common::{edit_summary_json, node_verdict, run_analyze, tmpdir, write_run, Spec};
use std::fmt::Write;
use std::path::{Path, PathBuf};

const SIZES: [u64; 2] = [1 << 20, 1 << 22];

/// The spread of a loaded rig's pairs (0.6 to 1.4 of the median), node2's eth1 sending at a
/// quarter of it: every flow leaving node2 for an eth1 endpoint (ranks 4 and 5 alike: a flow
/// leaves on the NIC of the receiver's rail, src/slow_nic).
fn share(src: u32, dst: u32) -> f64 {
    let spread = 0.6 + 0.8 * f64::from((src * 7 + dst * 3) % 10) / 9.0;
    if src / 2 == 2 && dst.is_multiple_of(2) {
        0.25 * spread
    } else {
        spread
    }
}

fn rig_run(dir: &Path) -> PathBuf {
    let run = write_run(
        dir,
        &Spec {
            pattern: "fullmesh",
            sizes: SIZES.to_vec(),
            ranks: 8,
            ..Spec::default()
        },
    );
    let mut pairs = String::from(
        "schema_version,pattern,size_bytes,src_rank,src_gpu,src_host,dst_rank,dst_gpu,dst_host,bytes,time_us,gbps,level,rail\n",
    );
    for size in SIZES {
        for src in 0..8u32 {
            for dst in (0..8u32).filter(|d| d / 2 != src / 2) {
                // 5 Mbit/s = 0.000625 GB/s a pair at the median.
                let gbps = 0.000625 * share(src, dst);
                let bytes = size / 8;
                let time_us = bytes as f64 / gbps / 1e3;
                writeln!(
                    pairs,
                    "1,fullmesh,{size},{src},{},node{},{dst},{},node{},{bytes},{time_us:.3},{:.9},endpoint,eth{}",
                    src % 2,
                    src / 2,
                    dst % 2,
                    dst / 2,
                    bytes as f64 / time_us / 1e3,
                    dst % 2 + 1
                )
                .unwrap();
            }
        }
    }
    std::fs::write(run.join("pairs.csv"), pairs).unwrap();
    edit_summary_json(&run, |s| {
        s["hosts"] = (0..8)
            .map(|r| serde_json::json!({"rank": r, "hostname": format!("node{}", r / 2), "node": r / 2, "gpus": [r % 2]}))
            .collect();
        s["placement"] = serde_json::json!({
            "rows": (0..8).map(|r| serde_json::json!({
                "rank": r, "host": format!("node{}", r / 2), "gpu": r % 2, "nic": format!("eth{}", r % 2 + 1)
            })).collect::<Vec<_>>()
        });
        let mut verdicts: Vec<serde_json::Value> = ["node0", "node1", "node3"]
            .iter()
            .map(|h| node_verdict(h, "healthy"))
            .collect();
        verdicts.insert(
            2,
            serde_json::json!({
                "host": "node2",
                "verdict": "bad",
                "evidence": "eth1 sending at 0.24 of the median in the probe, slow in 3 of 3 rounds (with 3 peers, each fast with the others)",
                "decided_by": "probe",
                "lowest_share": 0.24,
                "slow_sides": [{"nic": "eth1", "sending": true, "share": 0.24, "slow_sizes": 3, "judged_sizes": 3,
                                "flows": 6, "peers": ["node0", "node1", "node3"], "peers_fast": 3}],
            }),
        );
        s["node_verdicts"] = serde_json::Value::Array(verdicts);
    });
    run
}

/// `tcpx-analyze heatmap` of the rig's run in a fresh directory `name`: its console output
/// and the picture.
fn heatmap_of(name: &str) -> (String, String) {
    let d = tmpdir(name);
    let run = rig_run(&d.join("run"));
    let svg = d.join("heat.svg");
    let (code, out) = run_analyze(&["heatmap", "-o", svg.to_str().unwrap(), run.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    (out, std::fs::read_to_string(&svg).unwrap())
}

/// Issue 55: the run called node2 bad, the heatmap said "no outliers (|robust z| <= 3.5)". Now
/// it names node2 bad with its NIC side (the run's verdict, not a rule of its own), outlines
/// that side's flows (ranks 4 and 5 to the other nodes' eth1 endpoints: 6 cells), and gives robust z
/// as another view, saying so.
#[test]
fn the_heatmap_shows_the_runs_node_verdicts() {
    let (out, svg) = heatmap_of("heatmap-verdicts");
    assert!(out.contains("node2 bad"), "the verdict is shown: {out}");
    assert!(out.contains("eth1 sending at 0.24"), "with its NIC side: {out}");
    let z: Vec<&str> = out.lines().filter(|l| l.contains("robust z")).collect();
    assert!(
        !z.is_empty() && z.iter().all(|l| l.contains("another view")),
        "robust z is only another view: {out}"
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let red = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#FF0000"))
        .count();
    assert_eq!(red, 6, "node2 eth1's 6 flows outlined in red");
    let texts: Vec<String> = tcpx_plot::check::texts(&svg)
        .unwrap()
        .1
        .into_iter()
        .map(|t| t.text)
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("node2") && t.contains("bad")),
        "the picture names node2 bad: {texts:?}"
    );
}

/// Issue 55: the axes read nodes and NICs (they read rank numbers), every text stays inside
/// the canvas, and the colour bar's ticks are distinct after rounding (they read "0.01, 0.01,
/// 0.01" at a rig's rates).
#[test]
fn the_heatmap_labels_nodes_and_nics_inside_its_canvas() {
    let (_, svg) = heatmap_of("heatmap-labels");
    let outside = tcpx_plot::check::outside_canvas(&svg);
    assert!(outside.is_empty(), "texts outside the canvas:\n{}", outside.join("\n"));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    for label in ["node0 eth1", "node2 eth1", "eth2"] {
        assert!(texts.contains(&label), "no axis label {label:?}: {texts:?}");
    }
    let ticks = tcpx_plot::check::bar_ticks(&svg);
    let distinct: std::collections::BTreeSet<&String> = ticks.iter().collect();
    assert!(ticks.len() >= 3 && distinct.len() == ticks.len(), "{ticks:?}");
}
