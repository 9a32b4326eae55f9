//! Node verdicts on any shape (issue 51's matrix, issue 52): a NIC judged as a NIC however many
//! endpoints it carries, a two-node job's slow pair said to be inseparable (never healthy), the
//! probe's bytes checked as the sweep's, a rank lost in the probe named in it, and a size asked
//! as 1 MiB judged as 1 MiB. Real ranks on the rig (`launch/cluster.sh`): network namespaces,
//! veths, tbf shapers.
//!
//! Needs root, iproute2 and network namespaces; where the rig cannot exist each test says so on
//! stderr and passes without checking anything. Rig ids 1 and 2 (cluster_script.rs's too: test
//! binaries run one after another).

mod common;
mod rig;

use common::show;
use rig::{rank_pid_below, scratch, summary_of, NodeLists, Rig};
use std::time::Duration;

/// Every node's (host, verdict, evidence).
fn verdicts(summary: &serde_json::Value) -> Vec<(String, String, String)> {
    summary["node_verdicts"]
        .as_array()
        .expect("node_verdicts")
        .iter()
        .map(|v| {
            (
                v["host"].as_str().unwrap_or_default().to_string(),
                v["verdict"].as_str().unwrap_or_default().to_string(),
                v["evidence"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn not_healthy(summary: &serde_json::Value) -> Vec<(String, String, String)> {
    verdicts(summary).into_iter().filter(|v| v.1 != "healthy").collect()
}

/// 4 nodes x 3 ranks x 2 NICs at 100 Mbit/s: GPUs 0 and 1 on eth1, GPU 2 alone on eth2. A
/// healthy run: every node healthy. node2's eth2 (one endpoint) at a quarter: node2 `bad`
/// naming eth2, nobody else, exit 5. On 1dfe633 the probe compared endpoints: the lone
/// endpoint's NIC at a quarter read 0.46 of the median (an endpoint of a two-endpoint NIC gets
/// half of it), `suspect`, exit 0.
#[test]
fn a_nic_carrying_one_endpoint_of_three_is_judged_as_a_nic() {
    let Some(rig) = Rig::up(1, "--nodes 4 --nics 2 --rate 100mbit") else {
        return;
    };
    let run = |name: &str| {
        let out = scratch(name);
        let o = rig.cmd(&format!(
            "run -np 12 -- --pattern fullmesh -b 1M -e 4M -f 4 -n 3 -w 1 -T 120 --progress never --out {}",
            out.display()
        ));
        let summary = summary_of(&out, &o);
        (o, summary)
    };
    let (o, summary) = run("uneven-healthy");
    let rows = summary["placement"]["rows"].as_array().expect("rows");
    let on = |nic: &str| rows.iter().filter(|r| r["host"] == "node2" && r["nic"] == nic).count();
    assert_eq!((on("eth1"), on("eth2")), (2, 1), "the uneven layout: {rows:?}");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(not_healthy(&summary), vec![], "{}", show(&o));
    assert_eq!(verdicts(&summary).len(), 4);

    rig.ok("shape node2 eth2 25mbit");
    let (o, summary) = run("uneven-node2-eth2");
    let named = not_healthy(&summary);
    assert_eq!(named.len(), 1, "node2 alone: {named:?}\n{}", show(&o));
    let (host, verdict, evidence) = &named[0];
    assert_eq!((host.as_str(), verdict.as_str()), ("node2", "bad"), "{named:?}");
    assert!(evidence.starts_with("eth2 sending at 0."), "{evidence}");
    assert_eq!(o.status.code(), Some(5), "{}", show(&o));
}

/// 2 nodes x 1 NIC, node1's NIC at a quarter: the probe's one round cannot tell which end is
/// slow: both `suspect`, `cannot-separate`, neither in the healthy hostfile, the drain list
/// empty, exit 0 (a suspect is no reason to fail a run). On 1dfe633: "2 healthy, no flow between
/// nodes judged", both in the healthy hostfile. A healthy pair: both healthy, both listed.
#[test]
fn two_nodes_with_one_slow_are_both_cannot_separate() {
    let Some(rig) = Rig::up(2, "--nodes 2 --nics 1 --rate 200mbit") else {
        return;
    };
    let lists = NodeLists::new("two-lists");
    let drain = &lists.drain;
    let run = |name: &str| {
        rig.judged(
            name,
            "-np 2 -- --pattern sendrecv -b 1M -e 4M -f 4 -n 3 -w 1 -T 60 --progress never",
            &lists,
        )
    };
    let listed = || lists.healthy();
    let (o, summary) = run("two-healthy");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(not_healthy(&summary), vec![], "{}", show(&o));
    assert_eq!(listed(), ["node0 slots=1", "node1 slots=1"]);

    // An eighth: with two nodes the slow link is half the sides, so a quarter reads 0.40 of the
    // median, an eighth 0.22. Before the probe went one way at a time, the slow NIC's queue
    // held its partner's acknowledgements and the eighth read 0.45-0.74 (CI: 0.74, `healthy`).
    rig.ok("shape node1 eth1 25mbit");
    let (o, summary) = run("two-slow");
    assert_eq!(o.status.code(), Some(0), "suspects do not fail a run: {}", show(&o));
    let v = verdicts(&summary);
    assert_eq!(v.len(), 2, "{v:?}");
    for (host, verdict, evidence) in &v {
        assert_eq!(verdict, "suspect", "{host}: {evidence}\n{}", show(&o));
        assert!(evidence.contains("cannot separate"), "{host}: {evidence}");
    }
    let decided: Vec<&str> = summary["node_verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["decided_by"].as_str())
        .collect();
    assert_eq!(decided, ["cannot-separate", "cannot-separate"]);
    assert_eq!(listed(), Vec::<String>::new(), "neither node is listed healthy");
    assert_eq!(std::fs::read_to_string(drain).expect("drain list"), "");
}

/// A plugin that corrupts a received byte of every request from the 4th of a comm: the sweep's
/// comms see 1 request each (`-n 1 -w 0`, 256 KiB a pair), the probe's new comms 4, so only the
/// probe's data is wrong. The run reports it as the sweep's would (exit 2, "Out of bounds
/// values" counting it, summary.json `wrong-data`) and the probe decides no verdict. On 1dfe633:
/// exit 0, "0 OK", 4 verdicts `healthy` decided by the corrupted probe.
#[test]
fn wrong_data_in_the_probe_fails_the_run_and_decides_no_verdict() {
    let Some(rig) = Rig::up(2, "--nodes 4 --nics 1 --rate 400mbit") else {
        return;
    };
    let out = scratch("probe-corrupt");
    let o = rig.cmd_with(
        &format!(
            "run -np 4 -- --pattern fullmesh -b 1M -e 1M -n 1 -w 0 --chunk 128K -T 60 --progress never --out {}",
            out.display()
        ),
        &[
            ("TCPXEMU_FAULT", "corrupt"),
            ("TCPXEMU_FAULT_RANK", "1"),
            ("TCPXEMU_FAULT_AFTER", "1"),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let summary = summary_of(&out, &o);
    assert_eq!(summary["status"], "wrong-data", "{summary}");
    assert_eq!(
        summary["results"][0]["wrong"], 0,
        "the sweep's own data was right: {summary}"
    );
    let wrong = summary["probe"]["wrong"].as_u64().expect("probe.wrong");
    assert!(wrong > 0, "{summary}");
    assert_eq!(summary["wrong_total"], wrong, "{summary}");
    assert_eq!(summary["node_verdicts"], serde_json::json!([]), "{summary}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("# Out of bounds values : {wrong} FAILED")),
        "{stdout}"
    );
    assert!(stdout.contains("wrong data decides no verdict"), "{stdout}");
}

/// A rank killed while the probe runs: summary.json's failure names the phase `probe` (on
/// 1dfe633: `sweep`, and rank 0 said it failed after the timed iterations of the last size).
/// Also: `-e 1M` over 3 nodes (1048575 B a size after fullmesh's rounding) runs its probe at 1
/// MiB (on 1dfe633: "use -e 1M or more").
#[test]
fn a_rank_killed_in_the_probe_is_lost_in_the_probe() {
    let Some(rig) = Rig::up(1, "--nodes 3 --nics 1 --rate 20mbit") else {
        return;
    };
    let flags = "--pattern fullmesh -b 1M -e 1M -n 3 -w 1 -T 60 --progress never";
    let out = scratch("probe-1m");
    let o = rig.cmd(&format!("run -np 3 -- {flags} --out {}", out.display()));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("# probe: 3 round(s) of node pairs at 1 MiB"),
        "{stdout}"
    );
    let summary = summary_of(&out, &o);
    assert_eq!(summary["results"][0]["size_bytes"], 1048575, "{summary}");
    assert_eq!(verdicts(&summary).len(), 3, "{summary}");
    assert_eq!(not_healthy(&summary), vec![], "{summary}");

    let out = scratch("probe-killed");
    let mut c = rig.script();
    c.args(["run", "-np", "3", "--"])
        .args(flags.split_whitespace())
        .arg("--out")
        .arg(&out);
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
    // The probe's 3 rounds of 4 iterations of 1 MiB at 20 Mbit/s take about 5 s.
    std::thread::sleep(Duration::from_millis(800));
    let pid = rank_pid_below(child.id() as i32, 2).expect("rank 2's process");
    // SAFETY: SIGKILL to a process this test started (through cluster.sh and mpirun).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let o = common::wait_within(child, Duration::from_secs(60), "cluster.sh run");
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let summary = summary_of(&out, &o);
    assert_eq!(summary["status"], "failed", "{summary}\n{}", show(&o));
    assert_eq!(summary["failure"]["culprit"]["rank"], 2, "{summary}");
    assert_eq!(summary["failure"]["culprit"]["phase"], "probe", "{summary}");
    assert_eq!(summary["failure"]["phase"], "probe", "{summary}");
}
