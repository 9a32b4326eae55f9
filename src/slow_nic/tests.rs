use super::*;
use crate::placement::Choice;
use crate::report::WireBytes;

/// `nodes` nodes x `nics` NICs, one rank per NIC: rank r on node r / nics with GPU r % nics on
/// eth(r % nics + 1) (the rig's layout with one GPU per rank).
pub(crate) fn placement_rows(nodes: usize, nics: usize) -> Vec<Row> {
    (0..nodes * nics)
        .map(|r| Row {
            endpoint: r,
            rank: r,
            host: format!("node{}", r / nics),
            gpu: r % nics,
            gpu_pci: "-".into(),
            gpu_numa: "-".into(),
            nic: format!("eth{}", r % nics + 1),
            nic_dev: r % nics,
            nic_pci: "-".into(),
            nic_numa: "-".into(),
            speed_gbps: 10.0,
            shapers: Vec::new(),
            mtu: Some(1500),
            distance: "unknown".into(),
            choice: Choice::Arithmetic,
            cpus: "0-1".into(),
            cpus_why: String::new(),
        })
        .collect()
}

/// 2 nodes x 2 NICs (the rig's layout).
fn rows() -> Vec<Row> {
    placement_rows(2, 2)
}

/// The flow from rank `src` to rank `dst` (two ranks a node, GPU = rank % 2) moving `size`
/// bytes at `gbps`.
pub(crate) fn pair(src: usize, dst: usize, size: u64, gbps: f64) -> PairResult {
    PairResult {
        src_rank: Some(src),
        src_gpu: Some(src % 2),
        src_host: format!("node{}", src / 2),
        dst_rank: Some(dst),
        dst_gpu: Some(dst % 2),
        dst_host: format!("node{}", dst / 2),
        rail: None,
        endpoint_pairs: 1,
        bytes: size,
        time_us: size as f64 / gbps / 1e3,
        gbps,
        link_gbps: None,
        above_link: false,
        impossible: false,
    }
}

/// Pairs at one size: `rates` of the flows 0->2, 1->3, 2->0, 3->1.
fn pairs_size(size: u64, rates: [f64; 4]) -> SizeResult {
    let mut r = crate::export::fixtures::size(size, 1000.0, Some(0));
    r.pairs = [(0, 2), (1, 3), (2, 0), (3, 1)]
        .iter()
        .zip(rates)
        .map(|(&(s, d), g)| pair(s, d, size, g))
        .collect();
    r.bytes.wire = ["eth1", "eth2"]
        .iter()
        .flat_map(|nic| {
            (0..2).map(move |n| WireBytes {
                host: format!("node{n}"),
                iface: (*nic).to_string(),
                rx_bytes: 3 * size + 1000,
                tx_bytes: 3 * size + 2000,
                devmem_pkts: None,
            })
        })
        .collect();
    r
}

/// `cluster.sh up --nodes 2 --nics 2 --rate 400mbit; shape node1 eth2 100mbit`, pairs 4-16 MiB
/// on the 2-core VM (pairs.csv): 3 -> 1 leaves node1's eth2.
fn shaped() -> Vec<SizeResult> {
    vec![
        pairs_size(4 << 20, [0.0496, 0.0396, 0.0470, 0.0119]),
        pairs_size(8 << 20, [0.0468, 0.0333, 0.0441, 0.0120]),
        pairs_size(16 << 20, [0.0454, 0.0298, 0.0438, 0.0120]),
    ]
}

#[test]
fn the_shaped_nic_is_named_sending_with_its_share_and_twin() {
    let found = find(&rows(), &shaped());
    assert_eq!(found.len(), 1, "{found:?}");
    let s = &found[0];
    assert_eq!(
        s.side,
        Side {
            host: "node1".into(),
            nic: "eth2".into(),
            sending: true
        }
    );
    assert_eq!(s.flows, vec![(3, 1, 1, 1)]);
    assert_eq!((s.slow_sizes, s.judged_sizes, s.size), (3, 3, 16 << 20));
    // Reference: the median of the 8 sides = (0.0298 + 0.0438) / 2.
    assert!((s.reference_gbps - 0.0368).abs() < 1e-9, "{}", s.reference_gbps);
    assert!((s.share - 0.0120 / 0.0368).abs() < 1e-9);
    assert_eq!(s.wire_bytes, Some((3 * (16 << 20) + 2000) / 3));
    assert_eq!(
        s.twin.as_ref().map(Side::describe).as_deref(),
        Some("node0 eth2 receiving")
    );
    let f = s.finding();
    assert_eq!(f.level, Level::Warning);
    assert_eq!(f.hosts, vec!["node1".to_string()]);
    assert!(
        f.text
            == "node1 eth2 is slow sending: its flows ran at 0.33 of the median NIC at 16 MiB (96.0 Mbit/s vs 294 Mbit/s), slow at 3 of 3 sizes; 1 flow from rank 3, counters 16.8 MB/iteration; same flows as node0 eth2 receiving",
        "{}",
        f.text
    );
}

#[test]
fn even_links_have_no_slow_nic() {
    let even = vec![
        pairs_size(4 << 20, [0.0496, 0.0396, 0.0470, 0.0419]),
        pairs_size(16 << 20, [0.0454, 0.0298, 0.0438, 0.0420]),
    ];
    assert!(find(&rows(), &even).is_empty());
}

#[test]
fn one_slow_size_small_sizes_and_few_flows_are_not_enough() {
    // Slow at the largest size only, of three.
    let mut once = shaped();
    once[0] = pairs_size(4 << 20, [0.0496, 0.0396, 0.0470, 0.0419]);
    once[1] = pairs_size(8 << 20, [0.0468, 0.0333, 0.0441, 0.0420]);
    assert!(find(&rows(), &once).is_empty());
    // Below 1 MiB nothing is judged.
    let small = vec![pairs_size(512 << 10, [0.0496, 0.0396, 0.0470, 0.0119])];
    assert!(find(&rows(), &small).is_empty());
    // Three flows between hosts: too few for a median.
    let mut few = shaped();
    for r in &mut few {
        r.pairs.remove(0);
    }
    assert!(find(&rows(), &few).is_empty());
    // Flows within a host and spread NICs do not count.
    let mut spread = rows();
    spread[1].nic = "eth1+eth2".into();
    assert!(find(&spread, &shaped()).is_empty());
}

#[test]
fn a_nic_slow_on_every_flow_through_it_is_named_alone() {
    // Fullmesh across the nodes: the rail is the receiver's, so both node1 ranks' flows to rank 1
    // leave node1 on eth2 (rank 2's too, though its own NIC is eth1), and only those are slow.
    let size = 16u64 << 20;
    let mut r = pairs_size(size, [0.045, 0.044, 0.043, 0.012]);
    r.pairs.push(pair(2, 1, size, 0.011));
    r.pairs.push(pair(0, 3, size, 0.040));
    r.pairs.push(pair(3, 0, size, 0.041));
    r.pairs.push(pair(1, 2, size, 0.046));
    let found = find(&rows(), &[r]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].side.describe(), "node1 eth2 sending");
    assert_eq!(found[0].flows, vec![(2, 0, 1, 1), (3, 1, 1, 1)]);
}

#[test]
fn rank_lists_become_short_ranges() {
    assert_eq!(rank_ranges(&[3]), "rank 3");
    assert_eq!(rank_ranges(&[47, 40, 41, 42, 43, 44, 45, 46, 40, 52]), "ranks 40-47,52");
    let scattered: Vec<usize> = (0..200).step_by(2).collect();
    let text = rank_ranges(&scattered);
    assert!(
        text.starts_with("ranks 0,2,4,") && text.ends_with("... (100 ranks)"),
        "{text}"
    );
    assert!(text.len() < 60, "{text}");
}

/// 8 hosts of 8 ranks (one GPU each) on 4 rails (two ranks a NIC), with names as long as a
/// cloud's, fullmesh between hosts: every NIC side carries 112 flows; host 5's eth3 sends at a
/// quarter. Its finding is one line of at most 200 characters, its every flow in the evidence.
#[test]
fn a_slow_nic_among_32_is_one_short_line_with_every_flow_in_the_evidence() {
    let host = |h: usize| format!("a3-high-node-{h:02}.us-central1-a.c.example-project.internal");
    let rows: Vec<Row> = (0..64)
        .map(|r| Row {
            endpoint: r,
            rank: r,
            host: host(r / 8),
            gpu: 0,
            nic: format!("eth{}", r % 8 / 2),
            nic_dev: r % 8 / 2,
            ..rows()[0].clone()
        })
        .collect();
    let mut size = crate::export::fixtures::size(64 << 20, 1000.0, Some(0));
    size.pairs.clear();
    for s in 0..64 {
        for d in (0..64).filter(|d| d / 8 != s / 8) {
            let slow = s / 8 == 5 && d % 8 / 2 == 3;
            let gbps = if slow { 1.0 } else { 4.0 + (s + d) as f64 % 3.0 * 0.01 };
            size.pairs.push(PairResult {
                src_rank: Some(s),
                src_gpu: Some(0),
                src_host: host(s / 8),
                dst_rank: Some(d),
                dst_gpu: Some(0),
                dst_host: host(d / 8),
                rail: None,
                endpoint_pairs: 1,
                bytes: 64 << 20,
                time_us: 1.0,
                gbps,
                link_gbps: None,
                above_link: false,
                impossible: false,
            });
        }
    }
    let found = find(&rows, &[size]);
    assert_eq!(found.len(), 1, "{found:?}");
    let slow = &found[0];
    assert_eq!(slow.side.describe(), format!("{} eth3 sending", host(5)));
    assert_eq!(slow.flows.len(), 8 * 2 * 7, "every flow stays in the evidence");
    let f = slow.finding();
    assert!(f.text.contains("112 flows from ranks 40-47"), "{}", f.text);
    let line = crate::placement::dry_run::finding_line(&f, Some(std::path::Path::new("summary.json")));
    assert!(
        line.chars().count() <= 200,
        "{} characters: {line}",
        line.chars().count()
    );
    assert!(!line.contains('\n'));
    // The evidence goes to summary.json whole.
    let json = serde_json::to_value(slow).expect("json");
    assert_eq!(json["flows"].as_array().map(Vec::len), Some(112));
    assert_eq!(json["flows"][0], serde_json::json!([40, 0, 6, 0]));
    // Any finding's line, however long its text or many its hosts, keeps the bound.
    let long = NodeFinding {
        level: Level::Error,
        text: "x ".repeat(500),
        hosts: (0..32).map(host).collect(),
    };
    let line = crate::placement::dry_run::finding_line(&long, Some(std::path::Path::new("summary.json")));
    assert!(line.chars().count() <= 200, "{line}");
    assert!(
        line.contains("... (in full: summary.json)") && line.ends_with("(32 hosts)]"),
        "{line}"
    );
}

/// 4 hosts of 3 ranks over 2 NICs (ranks 0 and 1 of a host on eth0, rank 2 on eth1), fullmesh
/// between hosts, each flow at its fair share of both its NICs: every eth0 side carries 18 flows
/// and every eth1 side 9, each twice as fast. Host 2's eth1 sends at a quarter. The rate a side
/// gets is its NIC's, so the healthy sides read alike and the slow one reads a quarter of them.
#[test]
fn a_side_s_rate_counts_the_flows_sharing_its_nic() {
    let hosts = 4;
    let host = |r: usize| format!("node{}", r / 3);
    let nic = |r: usize| if r % 3 < 2 { "eth0" } else { "eth1" };
    let rows: Vec<Row> = (0..hosts * 3)
        .map(|r| Row {
            endpoint: r,
            rank: r,
            host: host(r),
            gpu: 0,
            nic: nic(r).into(),
            nic_dev: usize::from(nic(r) == "eth1"),
            ..rows()[0].clone()
        })
        .collect();
    let size = 16u64 << 20;
    let mut result = crate::export::fixtures::size(size, 1000.0, Some(0));
    result.pairs.clear();
    let remote = |s: usize, d: usize| s / 3 != d / 3;
    let ranks = 0..hosts * 3;
    // The flows through one side: those between hosts leaving (or entering) `h` on `rail`.
    let through = |h: usize, rail: &str, sending: bool| {
        ranks
            .clone()
            .flat_map(|s| ranks.clone().map(move |d| (s, d)))
            .filter(|&(s, d)| remote(s, d) && (if sending { s } else { d }) / 3 == h && nic(d) == rail)
            .count()
    };
    for s in ranks.clone() {
        for d in ranks.clone().filter(|&d| remote(s, d)) {
            let rail = nic(d);
            let send_cap = if s / 3 == 2 && rail == "eth1" { 0.25 } else { 1.0 };
            let gbps = (send_cap / through(s / 3, rail, true) as f64).min(1.0 / through(d / 3, rail, false) as f64);
            result.pairs.push(PairResult {
                src_rank: Some(s),
                src_gpu: Some(0),
                src_host: host(s),
                dst_rank: Some(d),
                dst_gpu: Some(0),
                dst_host: host(d),
                ..pair(0, 2, size, gbps)
            });
        }
    }
    assert_eq!((through(0, "eth0", true), through(0, "eth1", true)), (18, 9));
    let found = find(&rows, &[result]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].side.describe(), "node2 eth1 sending");
    assert!((found[0].share - 0.25).abs() < 0.01, "share {}", found[0].share);
}
