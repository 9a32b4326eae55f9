//! A cluster in a box (`launch/cluster.sh`): nodes x NICs as network namespaces, real ranks in
//! them, real sockets over veths. Checks that tcpx-perf sees the nodes, that every NIC carries
//! the bytes its placement plans (counted by each node's kernel), that a dead NIC and an MTU
//! mismatch are found before any data moves, that slow NICs and nodes are named, and that a
//! killed rank or a dying NIC is the culprit. The rig script's own behaviour (`up`, `down`,
//! shaping) is `cluster_script.rs`'s.
//!
//! Needs root, iproute2 and network namespaces; where the rig cannot exist (`cluster.sh` exits
//! 77) each test says so on stderr and passes without checking anything. Each test has its own
//! rig id (`CLUSTER_RIG`).

mod common;
mod rig;

use common::show;
use rig::{csv_rows, rank_pid_below, scratch, summary_of, NodeLists, Rig, BIN};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// 4 ranks on 2 nodes x 2 NICs: 2 nodes seen; each NIC received (and its node's NIC of that rail
/// sent) the payload the link matrix and placement put on it, no less and at most 5% more
/// (headers, acknowledgements of the other direction); every NIC carries a share; a second
/// `down` finds nothing to do, and a rig whose state file is lost (a crash) is still removed.
#[test]
fn every_nic_carries_its_planned_bytes_on_two_nodes() {
    let Some(rig) = Rig::up(11, "--nodes 2 --nics 2") else {
        return;
    };
    let out = scratch("bytes");
    let o = rig.cmd(&format!(
        "run -np 4 -- --pattern pairs -b 1M -e 4M -f 4 -n 5 -w 1 -T 60 --out {}",
        out.display()
    ));
    assert!(o.status.success(), "{}", show(&o));
    let summary = summary_of(&out, &o);
    assert_eq!(summary["nodes"], 2, "ranks in two UTS namespaces are two nodes");
    assert_eq!(summary["scope"], "inter-node", "2 nodes: pairs cross between them");
    let iters = summary["iters"].as_u64().unwrap();
    // Endpoint (rank, gpu) -> (host, NIC) as placement chose.
    let mut nic_of = BTreeMap::new();
    for row in summary["placement"]["rows"].as_array().unwrap() {
        let key = (row["rank"].to_string(), row["gpu"].to_string());
        nic_of.insert(
            key,
            (
                row["host"].as_str().unwrap().to_string(),
                row["nic"].as_str().unwrap().to_string(),
            ),
        );
    }
    let placed: std::collections::BTreeSet<_> = nic_of.values().cloned().collect();
    assert_eq!(placed.len(), 4, "the 4 endpoints use all 4 NICs: {nic_of:?}");

    let results = summary["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let flows = csv_rows(&out.join("pairs.csv"));
    for result in results {
        let size = result["size_bytes"].as_u64().unwrap();
        // A flow crosses the rail of its receiver's NIC (rail-aligned: one subnet per rail).
        let mut rx_plan: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut tx_plan: BTreeMap<(String, String), u64> = BTreeMap::new();
        for f in flows.iter().filter(|f| f["size_bytes"] == size.to_string()) {
            let (dst_host, nic) = &nic_of[&(f["dst_rank"].clone(), f["dst_gpu"].clone())];
            let bytes: u64 = f["bytes"].parse::<u64>().unwrap() * iters;
            *rx_plan.entry((dst_host.clone(), nic.clone())).or_default() += bytes;
            *tx_plan.entry((f["src_host"].clone(), nic.clone())).or_default() += bytes;
        }
        let wire = result["bytes"]["wire"].as_array().unwrap();
        assert_eq!(wire.len(), 4, "counters of 2 NICs on each of 2 nodes: {wire:?}");
        for w in wire {
            let key = (
                w["host"].as_str().unwrap().to_string(),
                w["iface"].as_str().unwrap().to_string(),
            );
            for (what, plan, seen) in [
                ("received", rx_plan.get(&key), w["rx_bytes"].as_u64().unwrap()),
                ("sent", tx_plan.get(&key), w["tx_bytes"].as_u64().unwrap()),
            ] {
                let plan = *plan.unwrap_or_else(|| panic!("{key:?} has no planned share: {rx_plan:?}"));
                assert!(
                    seen >= plan && seen <= plan + plan / 20 + (64 << 10),
                    "size {size}: {key:?} {what} {seen} bytes, planned {plan}"
                );
            }
        }
    }

    let up = rig.leftovers();
    for made in [
        "netns r11-node0",
        "netns r11-node1",
        "link cx11m",
        "link cx11r2",
        "link cx11n1e2",
    ] {
        assert!(up.iter().any(|l| l.starts_with(made)), "{made} missing from {up:?}");
    }
    assert!(rig.down().status.success());
    assert_eq!(rig.leftovers(), Vec::<String>::new(), "down leaves nothing");
    assert!(rig.down().status.success(), "down again: nothing to do, still fine");
    // A lost state file: nothing records what the rig made, so down removes nothing and names
    // what carries the rig's names, for a person to judge.
    rig.ok("up --nodes 2 --nics 1 --rate 100mbit");
    std::fs::remove_dir_all(&rig.state_dir).unwrap();
    let o = rig.down();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        err.contains("removed nothing") && err.contains("r11-node0") && err.contains("cx11m"),
        "{err}"
    );
    let left = rig.leftovers();
    assert!(left.iter().any(|l| l.starts_with("netns r11-node1")), "{left:?}");
    for what in left {
        let mut words = what.split_whitespace();
        let (kind, name) = (words.next().unwrap(), words.next().unwrap());
        if kind == "netns" || kind == "link" {
            let _ = Command::new("ip").args([kind, "del", name]).output();
        }
    }
    assert_eq!(rig.leftovers(), Vec::<String>::new(), "removed by hand");
}

/// Faults found before any data moves: an MTU that differs on a rail is a warning naming both
/// nodes' MTUs; a NIC whose cable is pulled is an error naming node and NIC, and `--dry-run`
/// exits 1.
#[test]
fn a_dead_nic_and_an_mtu_mismatch_are_found_before_the_run() {
    let Some(rig) = Rig::up(12, "--nodes 2 --nics 2") else {
        return;
    };
    let dry = "run -np 4 -- --pattern pairs -b 1M -e 1M --dry-run";
    let clean = rig.cmd(dry);
    assert!(clean.status.success(), "{}", show(&clean));
    let clean = String::from_utf8_lossy(&clean.stdout).into_owned();
    assert!(clean.contains("# ranks: 4 endpoints: 4 nodes: 2"), "{clean}");
    assert!(!clean.contains("# warning:") && !clean.contains("# error:"), "{clean}");

    rig.ok("mtu node1 eth2 9000");
    let o = rig.cmd(dry);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "a warning alone does not fail: {}", show(&o));
    assert!(
        text.contains("# warning: eth2 MTU differs between nodes on its rail (1500 on node0; 9000 on node1)"),
        "{text}"
    );
    rig.ok("mtu node1 eth2 1500");

    rig.ok("link node1 eth2 down");
    let o = rig.cmd(dry);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let error = text
        .lines()
        .find(|l| l.starts_with("# error:"))
        .unwrap_or_else(|| panic!("no error finding: {text}"));
    assert!(
        error.contains("eth2 link is down") && error.ends_with("[node1]"),
        "{error}"
    );
    assert!(text.contains("no comm opened, no data moved"), "{text}");
    rig.ok("link node1 eth2 up");
    assert!(rig.cmd(dry).status.success(), "the link is back: clean again");
}

/// One run on the rig, expected to succeed: its stdout and summary.json.
fn run_ok(rig: &Rig, name: &str, args: &str) -> (String, serde_json::Value, PathBuf) {
    let out = scratch(name);
    let o = rig.cmd(&format!("run -np 4 -- {args} --out {}", out.display()));
    assert!(o.status.success(), "{}", show(&o));
    let summary = summary_of(&out, &o);
    (String::from_utf8_lossy(&o.stdout).into_owned(), summary, out)
}

/// The slow-NIC warnings of a run's summary.json.
fn slow_nic_findings(summary: &serde_json::Value) -> Vec<serde_json::Value> {
    summary["placement"]["findings"]
        .as_array()
        .expect("placement.findings")
        .iter()
        .filter(|f| f["level"] == "warning" && f["text"].as_str().unwrap_or("").contains(" is slow "))
        .cloned()
        .collect()
}

/// Every NIC at 400mbit: no NIC is slow. node1's eth2 shaped to a quarter: a warning names node1
/// and eth2 (sending) with its share, in summary.json and the footer, and links.svg marks its
/// flow.
#[test]
fn a_nic_at_a_quarter_rate_is_named_with_its_share() {
    let Some(rig) = Rig::up(7, "--nodes 2 --nics 2 --rate 400mbit") else {
        return;
    };
    let args = "--pattern pairs -b 2M -e 4M -n 4 -w 1 -T 60";
    let (stdout, summary, _) = run_ok(&rig, "even", args);
    assert_eq!(slow_nic_findings(&summary), Vec::<serde_json::Value>::new(), "{stdout}");
    assert!(!stdout.contains(" is slow "), "{stdout}");

    rig.ok("shape node1 eth2 100mbit");
    let (stdout, summary, out) = run_ok(&rig, "slow", args);
    let found = slow_nic_findings(&summary);
    assert_eq!(found.len(), 1, "one slow NIC: {found:?}");
    let text = found[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("node1 eth2 is slow sending: its flows ran at 0."),
        "{text}"
    );
    assert_eq!(found[0]["hosts"], serde_json::json!(["node1"]));
    // The share: 100 of 400mbit, measured (TCP's share of a tbf queue is not exact).
    let share: f64 = text["node1 eth2 is slow sending: its flows ran at ".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no share in {text}"));
    assert!((0.15..0.40).contains(&share), "{text}");
    // The footer line is the same finding, cut at 200 characters where the hosts make it longer
    // (its first 80 kept whatever the length of the summary.json path it names).
    let head = &text[..text.len().min(80)];
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("# warning: {head}")) && l.chars().count() <= 200),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(out.join("links.svg")).expect("links.svg");
    assert!(
        svg.contains("flows of a slow NIC: node1 eth2 at"),
        "links.svg marks the NIC"
    );
}

/// Cluster scale in CI: 8 nodes x 2 ranks x 2 NICs (16 ranks on the 2-core runner), fullmesh with
/// default flags, one NIC at a quarter of the rate: the run completes, the NIC is named in one
/// short line (node, NIC, direction), every finding line stays readable, and results.csv carries
/// the TCP loss counters of every size.
#[test]
fn eight_nodes_with_default_flags_name_a_slow_nic_in_one_short_line() {
    let Some(rig) = Rig::up(6, "--nodes 8 --nics 2 --rate 50mbit") else {
        return;
    };
    rig.ok("shape node5 eth2 12mbit");
    let out = scratch("eight-nodes");
    let o = rig.cmd(&format!(
        "run -np 16 -- --pattern fullmesh -b 1M -e 2M -n 4 -w 1 -T 120 --out {}",
        out.display()
    ));
    // 5: node5 is bad (its share below --bad-share); 0: suspect.
    assert!(matches!(o.status.code(), Some(0 | 5)), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let summary = summary_of(&out, &o);
    assert_eq!(
        (summary["nodes"].as_u64(), summary["ranks"].as_u64()),
        (Some(8), Some(16))
    );
    assert_eq!(summary["complete"], true);
    let found = slow_nic_findings(&summary);
    assert_eq!(found.len(), 1, "one slow NIC: {found:?}");
    let text = found[0]["text"].as_str().unwrap();
    assert!(text.starts_with("node5 eth2 is slow sending"), "{text}");
    for line in stdout
        .lines()
        .filter(|l| l.starts_with("# warning") || l.starts_with("# error"))
    {
        assert!(line.chars().count() <= 220, "{} chars: {line}", line.chars().count());
    }
    let rows = csv_rows(&out.join("results.csv"));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        for col in ["tcp_retrans_segs", "tcp_timeouts"] {
            assert!(row[col].parse::<u64>().is_ok(), "{col} = {:?}", row[col]);
        }
    }
}

/// kill -9 of one rank of 16 (8 nodes x 2 ranks x 2 NICs) mid-sweep: it has no chance to
/// speak; the ranks whose connections it held blame it, the others answer mpirun's SIGTERM, so
/// summary.json names it, with its node, as the culprit (`killed` or `silent`), never one of
/// its victims (before: a victim, or `interrupted by SIGTERM from mpirun`).
#[test]
fn a_rank_killed_among_sixteen_is_the_culprit_in_summary_json() {
    let Some(rig) = Rig::up(13, "--nodes 8 --nics 2 --rate 400mbit") else {
        return;
    };
    let out = scratch("killed-of-16");
    let mut c = rig.script();
    c.args([
        "run",
        "-np",
        "16",
        "--",
        "--pattern",
        "fullmesh",
        "-b",
        "64K",
        "-e",
        "4M",
    ])
    .args(["-n", "20", "-w", "1", "-T", "20", "--progress", "never", "--out"])
    .arg(&out)
    .env("TCPXEMU_FAULT", "slow");
    let mut child = common::spawn_piped(&mut c, "cluster.sh run");
    let start = std::time::Instant::now();
    while !out.join("results.csv").exists() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before its first size"
        );
        assert!(start.elapsed() < Duration::from_secs(90), "no size measured in 90 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let victim = 11;
    let pid = rank_pid_below(child.id() as i32, victim).expect("rank 11's process");
    // SAFETY: SIGKILL to a process this test started (through cluster.sh and mpirun).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let o = common::wait_within(child, Duration::from_secs(60), "cluster.sh run");
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let summary = summary_of(&out, &o);
    assert_eq!(summary["status"], "failed", "{summary}\n{}", show(&o));
    let culprit = &summary["failure"]["culprit"];
    assert_eq!(culprit["rank"], victim, "{summary}\n{}", show(&o));
    assert_eq!(culprit["host"], summary["hosts"][victim]["hostname"], "{summary}");
    let reason = culprit["reason"].as_str().unwrap_or_default();
    assert!(["killed", "silent"].contains(&reason), "{summary}");
    let error = summary["error"].as_str().unwrap_or_default();
    let host = summary["hosts"][victim]["hostname"].as_str().unwrap_or("?");
    assert!(error.starts_with(&format!("rank 11 ({host}")), "{error}");
    // The failed run judges its nodes too: the culprit's node suspect by the failure, every
    // other node healthy by the sizes measured before it.
    let verdicts = summary["node_verdicts"].as_array().expect("node_verdicts");
    assert_eq!(verdicts.len(), 8, "{summary}");
    for v in verdicts {
        if v["host"] == host {
            assert_eq!(v["verdict"], "suspect", "{v}");
            assert_eq!(v["decided_by"], "failure", "{v}");
            assert!(v["evidence"].as_str().unwrap_or_default().contains("rank 11"), "{v}");
        } else {
            assert_eq!(v["verdict"], "healthy", "{v}");
        }
    }
}

/// `--connect rounds --connect-peers 2` on the CI rig (8 nodes x 2 ranks x 2 NICs, fullmesh,
/// `--max-peers 2`): a process holds only the round in flight, at most 60% of the fds (at their peak, every round's
/// connect and iterations sampled) that `--connect all` holds; both complete, 0 wrong, the same
/// bytes planned and moved.
#[test]
fn connect_rounds_holds_fewer_fds_on_eight_nodes() {
    let Some(rig) = Rig::up(14, "--nodes 8 --nics 2") else {
        return;
    };
    let mut peaks = Vec::new();
    // `--connect-peers 2`: a connect per `--max-peers 2` round (the default 64 would take all
    // of this rig's 14 peers in one connect).
    for (mode, part) in [("all", ""), ("rounds", "--connect-peers 2")] {
        let out = scratch(&format!("connect-{mode}"));
        let o = rig.cmd(&format!(
            "run -np 16 -- --pattern fullmesh --connect {mode} {part} --max-peers 2 -b 256K -e 256K -n 2 -w 1 -T 120 --progress never --out {}",
            out.display()
        ));
        assert!(o.status.success(), "{mode}: {}", show(&o));
        let summary = summary_of(&out, &o);
        assert_eq!(summary["complete"], true);
        let rows = csv_rows(&out.join("results.csv"));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["wrong"], "0", "{mode}: {:?}", rows[0]);
        assert_eq!(
            rows[0]["bytes_moved"], rows[0]["bytes_planned"],
            "{mode}: {:?}",
            rows[0]
        );
        let setup = &summary["placement"]["setup"];
        assert_eq!(setup["connect"], mode);
        let fds: Vec<u64> = setup["fds_peak"]
            .as_array()
            .expect("fds_peak")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(fds.len(), 16);
        peaks.push((fds.into_iter().max().unwrap(), rows[0]["bytes_planned"].clone()));
        let _ = std::fs::remove_dir_all(&out);
    }
    let ((all, planned_all), (rounds, planned_rounds)) = (&peaks[0], &peaks[1]);
    assert_eq!(planned_all, planned_rounds);
    assert!(
        *rounds as f64 <= 0.6 * *all as f64,
        "fds per process at the peak: {rounds} with --connect rounds, {all} with all"
    );
}

/// The node verdicts of a run's summary.json that are not healthy: (host, verdict, evidence).
fn unhealthy_nodes(summary: &serde_json::Value) -> Vec<(String, String, String)> {
    let verdicts = summary["node_verdicts"].as_array().expect("node_verdicts");
    assert_eq!(verdicts.len(), 8, "a verdict per node: {verdicts:?}");
    verdicts
        .iter()
        .filter(|v| v["verdict"] != "healthy")
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (s("host"), s("verdict"), s("evidence"))
        })
        .collect()
}

/// 8 nodes x 2 ranks x 2 NICs, one rig, several runs: a healthy rig gives 8 healthy
/// nodes (exit 0) twice; node5's eth2 at a quarter of the rate makes node5 bad or suspect,
/// naming eth2 sending, every other node healthy, the healthy hostfile the other 7 with their 2
/// slots and the drain list node5 alone (exit 5 when bad); node3's eth1 and node6's eth2 at a
/// quarter are both named, nobody else; with `pairs` (one partner each) node5 slowed is named by
/// the probe, its partner cleared by it. Shares are of the median side measured in the same
/// run.
#[test]
fn node_verdicts_name_the_slowed_nodes_and_nobody_else() {
    let Some(rig) = Rig::up(4, "--nodes 8 --nics 2 --rate 50mbit") else {
        return;
    };
    let lists = NodeLists::new("verdict-lists");
    let (hostfile, drain) = (&lists.hostfile, &lists.drain);
    let run = |name: &str| {
        rig.judged(
            name,
            "-np 16 -- --pattern fullmesh -b 1M -e 2M -n 4 -w 1 -T 120",
            &lists,
        )
    };
    for i in 0..2 {
        let (o, summary) = run(&format!("verdict-healthy-{i}"));
        assert_eq!(unhealthy_nodes(&summary), vec![], "{}", show(&o));
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("# Node verdicts: 8 healthy "),
            "{}",
            show(&o)
        );
        assert_eq!(std::fs::read_to_string(drain).expect("drain list"), "");
    }

    rig.ok("shape node5 eth2 12500kbit");
    let (o, summary) = run("verdict-node5");
    let named = unhealthy_nodes(&summary);
    assert_eq!(named.len(), 1, "node5 alone: {named:?}");
    let (host, verdict, evidence) = &named[0];
    assert_eq!(host, "node5", "{named:?}");
    assert!(evidence.starts_with("eth2 sending at 0."), "{evidence}");
    let hostfile_text = std::fs::read_to_string(hostfile).expect("healthy hostfile");
    let listed: Vec<&str> = hostfile_text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        listed,
        [0, 1, 2, 3, 4, 6, 7].map(|n| format!("node{n} slots=2")),
        "{hostfile_text}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    if verdict == "bad" {
        assert_eq!(o.status.code(), Some(5), "{}", show(&o));
        let drained = std::fs::read_to_string(drain).expect("drain list");
        assert!(
            drained.starts_with("node5 tcpx-perf: eth2 sending at 0.") && drained.lines().count() == 1,
            "{drained}"
        );
        assert!(stdout.contains("#   node5  bad      eth2 sending at 0."), "{stdout}");
    } else {
        assert_eq!(
            (verdict.as_str(), o.status.code()),
            ("suspect", Some(0)),
            "{}",
            show(&o)
        );
    }

    rig.ok("shape node5 eth2 off");
    rig.ok("shape node3 eth1 12500kbit");
    rig.ok("shape node6 eth2 12500kbit");
    let (o, summary) = run("verdict-node3-node6");
    let named = unhealthy_nodes(&summary);
    let hosts: Vec<&str> = named.iter().map(|(h, _, _)| h.as_str()).collect();
    assert_eq!(hosts, ["node3", "node6"], "{named:?}\n{}", show(&o));
    assert!(named[0].2.starts_with("eth1 sending"), "{named:?}");
    assert!(named[1].2.starts_with("eth2 sending"), "{named:?}");

    // `pairs` gives node5 one partner (node1) in the sweep; the probe pairs it with three.
    rig.ok("shape node3 eth1 off");
    rig.ok("shape node6 eth2 off");
    rig.ok("shape node5 eth2 12500kbit");
    let out = scratch("verdict-pairs");
    let o = rig.cmd(&format!(
        "run -np 16 -- --pattern pairs -b 1M -e 2M -n 4 -w 1 -T 120 --out {}",
        out.display()
    ));
    let summary = summary_of(&out, &o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("# probe: 3 round(s) of node pairs at 2 MiB"),
        "{}",
        show(&o)
    );
    let named = unhealthy_nodes(&summary);
    assert_eq!(named.len(), 1, "node5 alone: {named:?}\n{}", show(&o));
    assert_eq!(named[0].0, "node5", "{named:?}");
    assert!(
        named[0].2.starts_with("eth2 sending at 0.")
            && named[0].2.contains("of the median in the probe, slow in 3 of 3 rounds"),
        "{named:?}"
    );
    let verdicts = summary["node_verdicts"].as_array().expect("verdicts");
    assert!(verdicts.iter().all(|v| v["decided_by"] == "probe"), "{verdicts:?}");
    assert_eq!(summary["probe"]["rounds"].as_array().map(Vec::len), Some(3));
}

/// A NIC that dies mid-run: the run ends within its -T deadline of the last completion (exit 3),
/// with a one-line diagnosis naming the NIC, the nodes and the peer, and keeps the rows it
/// measured. Once results survive a timeout (branch `endings`: partial results and an atomic
/// summary.json), the summary says `complete: false`; until then it may be missing.
#[test]
fn a_nic_that_dies_mid_run_is_named_within_the_deadline() {
    use std::io::{BufRead, BufReader};
    let Some(rig) = Rig::up(8, "--nodes 2 --nics 2 --rate 400mbit") else {
        return;
    };
    let deadline_s = 6;
    let out = scratch("dies");
    let mut c = rig.script();
    c.args([
        "run",
        "-np",
        "4",
        "--",
        "--pattern",
        "pairs",
        "-b",
        "1M",
        "-e",
        "4M",
        "-n",
        "50",
        "-w",
        "1",
    ])
    .args(["-T", &deadline_s.to_string(), "--out", &out.display().to_string()])
    .env("CLUSTER_RIG", rig.id.to_string())
    .env("CLUSTER_STATE_DIR", &rig.state_dir)
    .env("TCPX_PERF", BIN)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("cluster.sh run");
    let stderr = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    // Pull the cable once the first size's row is out (data is moving).
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stdout = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        stdout.push_str(&line);
        stdout.push('\n');
        if line.trim_start().starts_with("1048576 ") {
            break;
        }
    }
    assert!(stdout.contains("1048576 "), "no first row: {stdout}");
    rig.ok("link node1 eth2 down");
    let pulled = std::time::Instant::now();
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let limit = Duration::from_secs(deadline_s + 30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if pulled.elapsed() > limit {
            let _ = child.kill();
            panic!("still running {limit:?} after the NIC died: {stdout}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = pulled.elapsed();
    stdout.push_str(&rest.join().unwrap_or_default());
    let stderr = err_reader.join().unwrap_or_default();
    let all = format!("status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", status.code());
    assert_eq!(status.code(), Some(3), "the timeout's exit status: {all}");
    // The stall clock runs from the last completion, which came before the cable was pulled.
    assert!(
        took < Duration::from_secs(deadline_s + 5),
        "ended {took:?} after the NIC died (-T {deadline_s}): {all}"
    );
    let diagnosis = stderr
        .lines()
        .find(|l| l.contains(": timeout: ") && l.contains(" stalled: "))
        .unwrap_or_else(|| panic!("no stall diagnosis: {all}"));
    assert!(
        diagnosis.contains(" over eth2") && diagnosis.contains("node1") && diagnosis.contains("node0"),
        "the diagnosis names the NIC, its node and the peer's: {diagnosis}"
    );
    if diagnosis.contains("on node1)") {
        assert!(diagnosis.ends_with("; eth2 on node1 is down"), "{diagnosis}");
    }
    assert!(stdout.contains("1048576 "), "the measured row stays on stdout: {all}");
    // Partial results (branch `endings`): checked where this build writes them.
    if let Ok(text) = std::fs::read_to_string(out.join("summary.json")) {
        let summary: serde_json::Value = serde_json::from_str(&text).expect("summary.json parses");
        assert_eq!(summary["complete"], false, "{text}");
        let error = summary["error"].as_str().unwrap_or("");
        assert!(
            error.contains(" over eth2"),
            "the summary's error names the NIC: {error}"
        );
        assert!(
            !summary["results"].as_array().expect("results").is_empty(),
            "the 1 MiB size was measured: {text}"
        );
    } else {
        eprintln!("note: no summary.json after a timeout yet (partial results come with branch `endings`)");
    }
}

/// Issue 41's mechanism at CI's size: 6 nodes x 4 ranks x 2 NICs at 100mbit (two ranks on each
/// NIC, fullmesh in `--max-peers` rounds), one NIC at a quarter of the rate, chosen by a fixed
/// seed (41: node0 eth2). The fullmesh's flows wait on each other: fdd6c3b's verdicts from them
/// said only `suspect` (0.31-0.32, exit 0, 2 of 2 runs) for node0 eth2 on this rig, and `6
/// healthy` for node0 eth1; the probe measures each NIC alone and names the node `bad` with its
/// NIC (0.25), nobody else. A healthy run first: every node healthy, by the probe.
#[test]
fn the_probe_names_a_quarter_rate_nic_that_the_fullmesh_masks() {
    let Some(rig) = Rig::up(9, "--nodes 6 --nics 2 --rate 100mbit") else {
        return;
    };
    let run = |name: &str| {
        let out = scratch(name);
        let o = rig.cmd(&format!(
            "run -np 24 -- --pattern fullmesh -b 1M -e 4M -n 3 -w 1 -T 120 --out {}",
            out.display()
        ));
        let summary = summary_of(&out, &o);
        (o, summary)
    };
    let (o, summary) = run("mask-healthy");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let verdicts = summary["node_verdicts"].as_array().expect("verdicts");
    assert_eq!(verdicts.len(), 6, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .all(|v| v["verdict"] == "healthy" && v["decided_by"] == "probe"),
        "{verdicts:?}"
    );

    let seed = 41;
    let mut rng = tcpx_units::Rng::new(seed);
    let (node, nic) = (rng.below(6), 1 + rng.below(2));
    eprintln!("seed {seed}: node{node} eth{nic} at a quarter of the rate");
    rig.ok(&format!("shape node{node} eth{nic} 25mbit"));
    let (o, summary) = run("mask-slow");
    let bad: Vec<(String, String, String)> = summary["node_verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["verdict"] != "healthy")
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (s("host"), s("verdict"), s("evidence"))
        })
        .collect();
    assert_eq!(bad.len(), 1, "node{node} alone: {bad:?}\n{}", show(&o));
    let (host, verdict, evidence) = &bad[0];
    assert_eq!(
        (host.as_str(), verdict.as_str()),
        (format!("node{node}").as_str(), "bad"),
        "{bad:?}"
    );
    assert!(
        evidence.starts_with(&format!("eth{nic} sending at 0.")) && evidence.contains("in the probe"),
        "{evidence}"
    );
    assert_eq!(o.status.code(), Some(5), "{}", show(&o));
}

/// Issue 46: a pair's time runs from the sender's first post to the receiver's last byte, so no
/// pair is faster than its link. 8 nodes x 1 rank x 2 NICs at 20mbit, node3's eth1 at 5mbit,
/// fullmesh one peer at a time (`--max-peers 1`), 256 KiB pairs (twice the shaper's 128 KiB
/// bucket): every pair takes at least (bytes - bucket) / rate of its sender's NIC, and carries
/// that rate as `link_gbps`; a figure above it has no rate. fdd6c3b timed a pair from the
/// receiver's start of its round: 9 of 56 pairs beyond rate and bucket, one 867x its link.
#[test]
fn no_pair_is_faster_than_its_link() {
    let Some(rig) = Rig::up(3, "--nodes 8 --nics 2 --rate 20mbit") else {
        return;
    };
    rig.ok("shape node3 eth1 5mbit");
    let out = scratch("pairs-vs-link");
    let o = rig.cmd(&format!(
        "run -np 8 -- --pattern fullmesh -b 2M -e 2M -n 3 -w 1 --max-peers 1 --probe-rounds 0 -T 120 --out {}",
        out.display()
    ));
    assert!(matches!(o.status.code(), Some(0 | 5)), "{}", show(&o));
    let bucket = 131_072.0;
    let pairs = csv_rows(&out.join("pairs.csv"));
    assert_eq!(pairs.len(), 56);
    for p in &pairs {
        let mbit = if p["src_host"] == "node3" { 5.0 } else { 20.0 };
        let rate = mbit * 1e6 / 8.0;
        let (bytes, seconds): (f64, f64) = (p["bytes"].parse().unwrap(), p["time_us"].parse::<f64>().unwrap() * 1e-6);
        assert!(
            seconds >= (bytes - bucket) / rate,
            "{} -> {}: {bytes} B in {:.1} ms, faster than {mbit} Mbit/s allows with its bucket",
            p["src_host"],
            p["dst_host"],
            seconds * 1e3
        );
        assert_eq!(p["link_gbps"].parse::<f64>().ok(), Some(rate / 1e9), "{p:?}");
        // Any figure above the rate is flagged (issue 53: no undocumented 2% slack).
        let above = bytes / seconds > rate;
        assert_eq!(p["above_link"], above.to_string(), "{p:?}");
        assert_eq!(
            p["gbps"].is_empty(),
            above,
            "a figure above its link has no rate: {p:?}"
        );
    }
    let svg = std::fs::read_to_string(out.join("links.svg")).expect("links.svg");
    assert!(
        svg.contains("share of the median pair"),
        "links.svg is on the share scale"
    );
}
