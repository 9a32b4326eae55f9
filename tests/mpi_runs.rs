//! End-to-end runs: real `mpirun`, real ranks exchanging plugin handles over MPI, real sockets
//! through the tcpx-emu plugin built next to the binary. Each run writes a result directory
//! that the assertions read back, so they check what a user would get.
//!
//! Needs `mpirun` (Open MPI) and the release build of the workspace (`launch/build.sh`).

mod common;

use common::{csv_rows, mpirun_command, output_within, show, summary};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-perf-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Tests that judge by the loopback counters take this exclusively: other tests' traffic on `lo`
/// would hide a shortfall. Every other run holds it shared.
static LOOPBACK: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    static HOLDS_LOOPBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with `lo` to itself (no other test's ranks running).
fn with_quiet_loopback<T>(f: impl FnOnce() -> T) -> T {
    let _only = LOOPBACK.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    HOLDS_LOOPBACK.with(|h| h.set(true));
    let out = f();
    HOLDS_LOOPBACK.with(|h| h.set(false));
    out
}

/// Runs `mpirun` with the given per-app arguments (MPMD `:` separated apps allowed), killing it
/// after `limit`: a hang fails the test instead of hanging CI.
fn mpirun(apps: &[(usize, Vec<String>)], env: &[(&str, &str)], limit: Duration) -> Output {
    let _shared = (!HOLDS_LOOPBACK.with(std::cell::Cell::get))
        .then(|| LOOPBACK.read().unwrap_or_else(std::sync::PoisonError::into_inner));
    let mut cmd = mpirun_command();
    for (i, (np, args)) in apps.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.arg("-np").arg(np.to_string()).arg(BIN).args(args);
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd.env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, limit, "mpirun")
}

fn args(list: &str) -> Vec<String> {
    list.split_whitespace().map(String::from).collect()
}

fn run(np: usize, extra: &str, out: &Path, env: &[(&str, &str)]) -> Output {
    let mut a = args(extra);
    a.push("--out".into());
    a.push(out.display().to_string());
    mpirun(&[(np, a)], env, Duration::from_secs(120))
}

/// A clean run: exit 0, one row per size, every byte planned moved, no wrong byte.
fn assert_clean(o: &Output, dir: &Path, sizes: usize, endpoints: usize) {
    assert_eq!(o.status.code(), Some(0), "{}", show(o));
    let rows = csv_rows(dir, "results.csv");
    assert_eq!(rows.len(), sizes, "{}", show(o));
    for r in &rows {
        assert_eq!(r["wrong"], "0", "{r:?}");
        // tcpx-emu (TCPX-like) reports no sizes and host memory has no unpack descriptors: the
        // loopback counters are the witness, and they must have seen at least the payload.
        assert!(
            r["bytes_moved"] == "unverified" || r["bytes_moved"] == r["bytes_planned"],
            "{r:?}"
        );
        assert!(r["bytes_verified_by"].contains("wire"), "{r:?}");
        let ratio: f64 = r["wire_payload_ratio"].parse().unwrap();
        assert!(ratio >= 1.0, "lo saw less than the payload: {r:?}");
        assert!(r["wire_by_iface"].contains(":lo="), "{r:?}");
        assert!(r["busbw_gbps"].parse::<f64>().unwrap() > 0.0, "{r:?}");
        assert_eq!(r["endpoints"], endpoints.to_string(), "{r:?}");
    }
    let s = summary(dir);
    assert_eq!(s["complete"], true);
    assert_eq!(s["status"], "ok");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("# Avg bus bandwidth"), "{stdout}");
}

const SWEEP: &str = "-b 64K -e 1M -f 4 -n 3 -w 1 --progress never";

fn pattern_run(pattern: &str, np: usize) {
    let dir = scratch(&format!("{pattern}-{np}"));
    let o = run(np, &format!("--pattern {pattern} {SWEEP}"), &dir, &[]);
    assert_clean(&o, &dir, 3, np);
    let pairs = csv_rows(&dir, "pairs.csv");
    assert!(!pairs.is_empty());
    assert_pictures(&dir, np);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The run's pictures: `bandwidth.svg` always, `links.svg` for more than two endpoints; each a
/// well-formed SVG document carrying its axis labels.
fn assert_pictures(dir: &Path, endpoints: usize) {
    let texts = |file: &str| -> Vec<String> {
        let svg = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{file}");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_string()))
            .collect()
    };
    let bw = texts("bandwidth.svg");
    for label in [
        "size (bytes per endpoint, log2 scale)",
        "bandwidth (GB/s, 1 GB = 10^9 B)",
        "64 KiB",
        "1 MiB",
    ] {
        assert!(bw.iter().any(|t| t == label), "bandwidth.svg lacks {label:?}: {bw:?}");
    }
    assert!(
        bw.iter().any(|t| t.starts_with("busbw")) && bw.iter().any(|t| t.starts_with("algbw")),
        "{bw:?}"
    );
    let links = dir.join("links.svg");
    if endpoints > 2 {
        let t = texts("links.svg");
        assert!(
            t.iter().any(|t| t == "destination endpoint") && t.iter().any(|t| t == "source endpoint"),
            "{t:?}"
        );
        // Endpoints are numbered 0..n-1 (rank x endpoints per rank + index), no gaps.
        let last = (endpoints - 1).to_string();
        assert!(t.contains(&last) && !t.contains(&endpoints.to_string()), "{t:?}");
    } else {
        assert!(!links.exists(), "links.svg for {endpoints} endpoints");
    }
}

/// Every figure recomputed from the run's own files, as nccl-tests defines it: time = each rank's
/// mean over the timed iterations (rank_samples.csv), reduced over ranks by -a; algbw = size /
/// time; busbw = algbw x the operation's factor; netbw = network bytes per sender / time; and
/// samples.csv = each iteration reduced over ranks by -a.
#[test]
fn figures_recompute_from_the_runs_own_files() {
    let reduce = |v: &[f64], a: u32| match a {
        0 => v[0],
        1 => v.iter().sum::<f64>() / v.len() as f64,
        2 => v.iter().copied().fold(f64::INFINITY, f64::min),
        _ => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    };
    // Times are written to the nanosecond, rates to 6 significant digits (issue 55).
    let close = |a: f64, b: f64| (a - b).abs() <= 5e-4 + 1e-9 * a.abs().max(b.abs());
    let close_rate = |a: f64, b: f64| (a - b).abs() <= 1e-5 * a.abs().max(b.abs());
    let f = |r: &std::collections::HashMap<String, String>, k: &str| -> f64 { r[k].parse().unwrap() };
    // (pattern, -a, extra flags, busbw factor, netbw factor) for 4 endpoints.
    let cases = [
        ("sendrecv", 0, "", 1.0, 1.0),
        ("pairs", 1, "", 1.0, 1.0),
        ("ring", 2, "", 1.5, 1.5),
        ("fullmesh", 3, "", 0.75, 0.75),
        // Two "nodes" of two: same-node blocks stay off the network.
        ("fullmesh", 1, "--ranks-per-node 2", 0.75, 0.5),
    ];
    for (pattern, a, extra, busbw_factor, netbw_factor) in cases {
        let dir = scratch(&format!("figures-{pattern}-{a}"));
        let o = run(
            4,
            &format!("--pattern {pattern} -a {a} {extra} -b 64K -e 1M -f 4 -n 4 -w 1 --progress never"),
            &dir,
            &[],
        );
        assert_clean(&o, &dir, 3, 4);
        let ranks = csv_rows(&dir, "rank_samples.csv");
        let samples = csv_rows(&dir, "samples.csv");
        for r in csv_rows(&dir, "results.csv") {
            let size = r["size_bytes"].clone();
            let mine: Vec<_> = ranks.iter().filter(|x| x["size_bytes"] == size).collect();
            assert_eq!(mine.len(), 4 * 4, "4 ranks x 4 iterations");
            let time = |rank: usize, iter: usize| {
                let x = mine
                    .iter()
                    .find(|x| x["rank"] == rank.to_string() && x["iter"] == iter.to_string())
                    .expect("every rank and iteration");
                f(x, "time_us")
            };
            let means: Vec<f64> = (0..4).map(|k| (0..4).map(|i| time(k, i)).sum::<f64>() / 4.0).collect();
            let t = reduce(&means, a);
            let what = format!("{pattern} -a {a} {extra} size {size}");
            assert!(close(f(&r, "time_us"), t), "{what}: time {} vs {t}", r["time_us"]);
            let algbw = f(&r, "size_bytes") / t / 1e3;
            assert!(close_rate(f(&r, "algbw_gbps"), algbw), "{what}: algbw");
            assert!(close_rate(f(&r, "busbw_gbps"), algbw * busbw_factor), "{what}: busbw");
            assert!(close_rate(f(&r, "netbw_gbps"), algbw * netbw_factor), "{what}: netbw");
            for (i, s) in samples.iter().filter(|x| x["size_bytes"] == size).enumerate() {
                let per_rank: Vec<f64> = (0..4).map(|k| time(k, i)).collect();
                assert!(close(f(s, "time_us"), reduce(&per_rank, a)), "{what}: sample {i}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn sendrecv_2_and_4_ranks() {
    pattern_run("sendrecv", 2);
    pattern_run("sendrecv", 4);
}

#[test]
fn pairs_2_and_4_ranks() {
    pattern_run("pairs", 2);
    pattern_run("pairs", 4);
}

#[test]
fn ring_2_and_4_ranks() {
    pattern_run("ring", 2);
    pattern_run("ring", 4);
}

#[test]
fn fullmesh_2_and_4_ranks() {
    pattern_run("fullmesh", 2);
    pattern_run("fullmesh", 4);
}

#[test]
fn zero_copy_sends_ring_and_fullmesh() {
    // Every send spliced and acknowledged per chunk (the GPU path's default splices only its
    // staging; on host memory `all` is the way to run the protocol without a GPU), with two
    // sockets per comm and 256 KiB chunks: several chunks per request, data checked.
    let env = [
        ("TCPXEMU_ZEROCOPY", "all"),
        ("NCCL_NSOCKS_PERTHREAD", "2"),
        ("NCCL_DYNAMIC_CHUNK_SIZE", "262144"),
    ];
    for pattern in ["ring", "fullmesh"] {
        let dir = scratch(&format!("zc-{pattern}"));
        let o = run(4, &format!("--pattern {pattern} {SWEEP} --plugin-log info"), &dir, &env);
        assert_clean(&o, &dir, 3, 4);
        // The send comms' close lines prove the chunks really went zero-copy.
        assert!(show(&o).contains("chunks sent zero-copy"), "{}", show(&o));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Issue 11's first failure on real TCPX: a 1 GiB sendrecv needs a 2 GiB buffer, which an ABI v7
/// `regMr` (int size) cannot register in one call. tcpx-perf registers 1 GiB segments. The
/// built-in plugin is tcpx-emu as TCPX presents itself: only the v7 table exists to pick.
#[test]
fn v7_only_plugin_sendrecv_of_one_gib() {
    let dir = scratch("abi7-1g");
    let o = run(
        2,
        "--pattern sendrecv -b 1G -e 1G -n 1 -w 0 --mem host --progress never",
        &dir,
        &[],
    );
    assert_clean(&o, &dir, 1, 2);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("name tcpx-emu_v7 ABI v7"), "{}", show(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The build with every table (v7..v12): tcpx-perf picks the newest, and every pattern still
/// keeps the contracts strict tcpx-emu enforces.
#[test]
fn every_pattern_over_the_newest_abi() {
    for pattern in ["sendrecv", "ring", "fullmesh"] {
        let dir = scratch(&format!("v12-{pattern}"));
        let o = run(
            4,
            &format!("--plugin tcpxemu --pattern {pattern} {SWEEP}"),
            &dir,
            &[("NCCL_DYNAMIC_CHUNK_SIZE", "524288")],
        );
        assert_clean(&o, &dir, 3, 4);
        assert!(String::from_utf8_lossy(&o.stdout).contains("ABI v12"), "{}", show(&o));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Registrations of 64 KiB: odd block sizes cross segment boundaries on one side or both, so
/// requests are cut there (ring forwarding waits for the right pieces); data checked.
#[test]
fn small_registration_segments_cut_requests() {
    for pattern in ["ring", "fullmesh"] {
        let dir = scratch(&format!("maxreg-{pattern}"));
        let o = run(
            3,
            &format!(
                "--pattern {pattern} --max-reg 64K --chunk 48K -b 100003 -e 400012 -f 4 -n 2 -w 1 --progress never"
            ),
            &dir,
            &[],
        );
        assert_clean(&o, &dir, 2, 3);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--max-peers P` bounds how many peers an endpoint has requests posted to at once; without it
/// a fullmesh endpoint talks to all its peers at once. Observed by the engine, per size.
#[test]
fn max_peers_bounds_the_peers_in_flight() {
    for (flag, bound) in [("--max-peers 1", 1u32), ("--max-peers 2", 2), ("", 4)] {
        let dir = scratch(&format!("maxpeers-{bound}"));
        let o = run(
            5,
            &format!("--pattern fullmesh {flag} -b 640K -e 5M -f 8 -n 3 -w 1 --chunk 64K --progress never"),
            &dir,
            &[],
        );
        assert_clean(&o, &dir, 2, 5);
        for r in csv_rows(&dir, "results.csv") {
            let send: u32 = r["send_peers_in_flight"].parse().unwrap();
            let recv: u32 = r["recv_peers_in_flight"].parse().unwrap();
            assert!(
                send <= bound && recv <= bound,
                "{flag}: {send}/{recv} peers in flight: {r:?}"
            );
            assert!(send >= 1 && recv >= 1, "{r:?}");
            if flag.is_empty() {
                // Without a bound, endpoints post to several peers at once (4 is the most).
                assert!(send >= 2, "no concurrency without --max-peers: {r:?}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--connect rounds`: fullmesh runs round by round, each `--max-peers` round on its own comms
/// (connected before its warm-up, closed after it); the same bytes as `--connect all`, every
/// byte checked, one peer in flight, and fewer fds held at the peak (closing frees them: a round's
/// comms that stayed open would pile up to `all`'s).
#[test]
fn connect_rounds_moves_the_same_bytes_on_fewer_fds() {
    let mut runs = Vec::new();
    for mode in ["all", "rounds"] {
        let dir = scratch(&format!("connect-{mode}"));
        let o = run(
            4,
            &format!("--pattern fullmesh --connect {mode} --connect-peers 1 --max-peers 1 -b 64K -e 1M -f 16 -n 3 -w 1 --chunk 64K --progress never"),
            &dir,
            &[],
        );
        assert_clean(&o, &dir, 2, 4);
        let rows = csv_rows(&dir, "results.csv");
        for r in &rows {
            assert_eq!(r["recv_peers_in_flight"], "1", "{mode}: {r:?}");
        }
        let setup = summary(&dir)["placement"]["setup"].clone();
        assert_eq!(setup["connect"], mode, "{setup}");
        assert!(setup["first_timed_s"].as_f64().is_some_and(|s| s > 0.0), "{setup}");
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(stdout.contains("first timed iteration"), "{stdout}");
        let pairs = csv_rows(&dir, "pairs.csv");
        runs.push((rows, setup, pairs));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let (all, rounds) = (&runs[0], &runs[1]);
    for (a, r) in all.0.iter().zip(&rounds.0) {
        assert_eq!(a["bytes_planned"], r["bytes_planned"], "{a:?} {r:?}");
        assert_eq!(r["bytes_moved"], r["bytes_planned"], "{r:?}");
    }
    // 4 ranks, one peer at a time: 3 rounds; the second size walks them backwards from the one
    // the first size ended with (kept open): 3 + 2 connects.
    let per_round = rounds.1["rounds"].as_array().expect("rounds").clone();
    assert_eq!(per_round.len(), 3, "{}", rounds.1);
    let connects: Vec<u64> = per_round.iter().map(|r| r["connects"].as_u64().unwrap()).collect();
    assert_eq!(connects, [2, 2, 1], "{}", rounds.1);
    for r in &per_round {
        assert_eq!(r["comms"], 4 * 2 * 2, "one peer each way, 2 channels: {r}");
    }
    assert_eq!(all.1["rounds"].as_array().map(Vec::len), Some(1), "{}", all.1);
    // Every pair measured, from its own round.
    assert_eq!(all.2.len(), rounds.2.len());
    assert!(rounds.2.iter().all(|p| p["gbps"].parse::<f64>().unwrap() > 0.0));
    let fds = |s: &serde_json::Value| -> Vec<u64> {
        s["fds_peak"]
            .as_array()
            .expect("fds_peak")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    for (rank, (a, r)) in fds(&all.1).iter().zip(fds(&rounds.1)).enumerate() {
        assert!(
            r < *a,
            "rank {rank}: {r} fds at the peak with --connect rounds, {a} with all"
        );
    }
}

/// 4 ranks of fullmesh, `--connect rounds` one peer per round (three rounds), rank 2 accepting
/// only its first `accepts` comms (tcpx-emu's accept fault fails the rest).
fn rounds_with_rank_2_accepting(accepts: u32, dir: &Path) -> Output {
    run(
        4,
        "--pattern fullmesh --connect rounds --connect-peers 1 --max-peers 1 -b 64K -e 64K -n 2 -w 1 --progress never -T 30",
        dir,
        &[
            ("TCPXEMU_FAULT", "accept"),
            ("TCPXEMU_FAULT_AFTER", &accepts.to_string()),
            ("TCPXEMU_FAULT_RANK", "2"),
        ],
    )
}

/// A comm that fails while a later round connects (`--connect rounds`): the error names the
/// round, the peer (rank, GPU and host) and the plugin's reason, and the job ends.
#[test]
fn a_failed_connect_names_the_round_and_the_peer() {
    let dir = scratch("connect-round-fails");
    // Rank 2's listen comms from the third on fail: round 0 has two (one peer, two channels),
    // round 1 (shift 2: rank 2 hears from rank 0) is the first to fail.
    let o = rounds_with_rank_2_accepting(2, &dir);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("rank 2: error:"))
        .unwrap_or_else(|| panic!("no error line from rank 2: {}", show(&o)));
    assert!(line.contains("round 1"), "{line}");
    assert!(line.contains("peer rank 0 gpu 0 ("), "{line}");
    assert!(line.contains("TCPXEMU_FAULT=accept"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that stops inside a size's later round shows on disk which rounds it had connected,
/// and how long each took: `summary.json` is rewritten after every connect of `--connect rounds`
/// (before: only the first connect, until the run's end).
#[test]
fn rounds_connected_before_a_failure_are_on_disk() {
    let dir = scratch("connect-rounds-on-disk");
    // Rank 2's listen comms from the fifth on fail: rounds 0 and 1 have two each, round 2 fails.
    let o = rounds_with_rank_2_accepting(4, &dir);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("round 2"), "{}", show(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).expect("summary.json")).expect("json");
    assert_eq!(summary["status"], "failed", "{summary}");
    let setup = &summary["placement"]["setup"];
    let rounds: Vec<u64> = setup["rounds"]
        .as_array()
        .expect("rounds")
        .iter()
        .map(|r| r["round"].as_u64().expect("round"))
        .collect();
    assert_eq!(rounds, [0, 1], "{setup}");
    for r in setup["rounds"].as_array().expect("rounds") {
        assert_eq!(r["connects"], 1, "{r}");
        assert!(r["seconds_max"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// TCPX logs a WARN on every host-memory receive (tcpx-emu presenting itself as TCPX does the
/// same): thousands of identical lines per run. They are printed three times per rank, then
/// counted, and each rank lists the count when it ends.
#[test]
fn repeated_plugin_warnings_are_counted_not_printed() {
    let o = mpirun(
        &[(2, args(&format!("--pattern sendrecv {SWEEP} --no-out --chunk 64K")))],
        &[("TCPXEMU_HOST_DEVICE_TYPE", "unpack")],
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let line = "requested receive on host mem buffer";
    // Occurrences, not lines: mpirun forwards the ranks' stderr as it comes, and two ranks'
    // lines can end up on one (this once made one line of the two counts).
    let summaries: Vec<&str> = err
        .split("plugin log repeated: ")
        .skip(1)
        .filter(|l| l.contains(line))
        .collect();
    assert_eq!(summaries.len(), 2, "one count per rank:\n{}", show(&o));
    let printed = err.matches(line).count() - summaries.len();
    assert_eq!(printed, 2 * 3, "three per rank:\n{}", show(&o));
    // 3 sizes x 4 iterations x 1..16 receives of 64K, less the three printed.
    assert!(
        summaries.iter().all(|l| l.contains("more times like it, not printed")),
        "{summaries:?}"
    );
}

#[test]
fn one_rank_drives_two_endpoints() {
    let dir = scratch("g2");
    let o = run(2, &format!("--pattern fullmesh -g 2 --channels 2 {SWEEP}"), &dir, &[]);
    assert_clean(&o, &dir, 3, 4);
    assert_pictures(&dir, 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_per_node_makes_inter_node_scope() {
    let dir = scratch("rpn");
    let o = run(4, &format!("--pattern fullmesh --ranks-per-node 2 {SWEEP}"), &dir, &[]);
    assert_clean(&o, &dir, 3, 4);
    for r in csv_rows(&dir, "results.csv") {
        assert_eq!(r["scope"], "inter-node");
        assert_eq!(r["nodes"], "2");
    }
    // Only pairs on different nodes (ranks 0,1 | 2,3) carry traffic.
    for p in csv_rows(&dir, "pairs.csv") {
        let (s, d): (usize, usize) = (p["src_rank"].parse().unwrap(), p["dst_rank"].parse().unwrap());
        assert_ne!(s / 2, d / 2, "{p:?}");
    }
    // Verdicts judge hosts, and the two nodes are one: no probe runs (on c22480e one ran,
    // 0.07 GB, then the footer said it had nothing to judge by), and the footer says why.
    let probe = &summary(&dir)["probe"];
    assert!(
        probe["skipped"].as_str().is_some_and(|w| w.contains("one host")),
        "{probe}"
    );
    assert_eq!(probe["bytes"], 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("# probe:"), "{out}");
    assert!(
        out.contains("# Node verdicts: none: the 2 nodes are one host (--ranks-per-node)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupting_plugin_is_caught() {
    let dir = scratch("corrupt");
    let o = run(
        2,
        &format!("--pattern sendrecv {SWEEP}"),
        &dir,
        &[("TCPXEMU_FAULT", "corrupt")],
    );
    assert_eq!(o.status.code(), Some(2), "wrong data must exit 2\n{}", show(&o));
    let rows = csv_rows(&dir, "results.csv");
    assert!(rows.iter().all(|r| r["wrong"].parse::<u64>().unwrap() > 0), "{rows:?}");
    assert_eq!(summary(&dir)["status"], "wrong-data");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plugin that sends half of every message and reports success: no data check (-c 0), no
/// sizes from `test`; only the interface counters can tell, and they must fail the run.
#[test]
fn short_sends_fail_the_run_without_the_data_check() {
    let dir = scratch("short");
    let o = with_quiet_loopback(|| {
        run(
            2,
            &format!("--pattern sendrecv {SWEEP} -c 0"),
            &dir,
            &[("TCPXEMU_FAULT", "short")],
        )
    });
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("did not put the data on the wire"), "{}", show(&o));
    assert_eq!(summary(&dir)["status"], "failed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Receives that complete while the buffer keeps the previous iteration's bytes: wrong data
/// (exit 2) on every pattern.
#[test]
fn stale_receives_are_wrong_data_on_every_pattern() {
    for pattern in ["sendrecv", "pairs", "ring", "fullmesh"] {
        let dir = scratch(&format!("stale-{pattern}"));
        let o = run(
            2,
            &format!("--pattern {pattern} {SWEEP}"),
            &dir,
            &[("TCPXEMU_FAULT", "stale"), ("TCPXEMU_FAULT_AFTER", "2")],
        );
        assert_eq!(o.status.code(), Some(2), "{pattern}: {}", show(&o));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A receive that never completes while its peer goes on: a stall, reported within -T. One comm
/// per peer: its fourth request (iteration 2 of 3, two 512 KiB requests each) is dropped.
#[test]
fn a_dropped_receive_is_a_stall() {
    let start = Instant::now();
    let o = mpirun(
        &[(
            2,
            args("--pattern sendrecv -b 1M -e 1M -n 3 -w 0 -T 2 --no-out --progress never --channels 1"),
        )],
        &[("TCPXEMU_FAULT", "drop"), ("TCPXEMU_FAULT_AFTER", "3")],
        Duration::from_secs(90),
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("stalled: no completion for"),
        "{}",
        show(&o)
    );
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
}

/// Ranks launched with different flags: every check made from a rank's own flags would be made
/// differently, so the command lines are compared first. The job ends at once (well within -T),
/// with one line naming the flag, each value and its ranks.
#[test]
fn disagreeing_ranks_end_naming_the_flag() {
    let common = "--pattern sendrecv -e 256K -w 1 -T 5 --no-out --progress never";
    for (a, b, needle) in [
        ("-b 64K -n 3", "-b 64K -n 4", "--iters: 3 on rank 0; 4 on rank 1"),
        (
            "-b 64K --window 8",
            "-b 64K --window 17",
            "--window: 8 on rank 0; 17 on rank 1",
        ),
        (
            "-n 3 -b 64K",
            "-n 3 -b 128K",
            "--minbytes: 65536 on rank 0; 131072 on rank 1",
        ),
        (
            "-b 64K --ranks-per-node 1",
            "-b 64K",
            "--ranks-per-node: 1 on rank 0; (unset) on rank 1",
        ),
    ] {
        let start = Instant::now();
        let o = mpirun(
            &[(1, args(&format!("{common} {a}"))), (1, args(&format!("{common} {b}")))],
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(o.status.code(), Some(64), "{a} | {b}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("tcpx-perf")).collect();
        assert!(ours.len() == 1 && ours[0].contains(needle), "{a} | {b}: {}", show(&o));
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{a} | {b}: took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn stalling_plugin_hits_the_timeout_with_a_state_dump() {
    let start = Instant::now();
    let o = mpirun(
        &[(
            2,
            args("--pattern sendrecv -b 1M -e 1M -n 3 -w 0 -T 3 --no-out --progress never"),
        )],
        &[("TCPXEMU_FAULT", "stall"), ("TCPXEMU_FAULT_AFTER", "2")],
        Duration::from_secs(90),
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "a stall exits with the timeout status\n{}",
        show(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stalled: no completion for"), "{}", show(&o));
    assert!(
        err.contains("posted") && err.contains("completed") && err.contains("oldest request"),
        "{}",
        show(&o)
    );
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
}

/// The stall clock counts from the last completion: an iteration longer than -T that completes
/// requests steadily is not a stall.
#[test]
fn slow_but_steady_iterations_are_not_stalls() {
    let time_us = slow_but_steady_run("slow-steady", "-n 1 -w 0");
    assert!(
        time_us > 1.0e6,
        "the iteration must outlast -T 1 to test anything: {time_us} us"
    );
}

/// 2 ranks, one 8 MiB sendrecv in 64 KiB chunks whose every request tcpx-emu's `slow` fault
/// delays (over a second an iteration), -T 1, with `flags`: a clean run's time per iteration.
fn slow_but_steady_run(name: &str, flags: &str) -> f64 {
    let dir = scratch(name);
    let o = run(
        2,
        &format!("--pattern sendrecv -b 8M -e 8M --chunk 64K -T 1 --progress never {flags}"),
        &dir,
        &[
            ("TCPXEMU_FAULT", "slow"),
            ("NCCL_DYNAMIC_CHUNK_SIZE", "4096"),
            ("NCCL_NSOCKS_PERTHREAD", "1"),
        ],
    );
    assert_clean(&o, &dir, 1, 2);
    let time_us = csv_rows(&dir, "results.csv")[0]["time_us"].parse().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    time_us
}

/// `--timing back-to-back` (issue 54) is nccl-tests' pace: one start signal for a size's timed
/// iterations, each rank's time its total over the iterations (rank 0's samples sum to the
/// span from that signal to its last completion, the crew's barrier and replies aside); the
/// default starts each timed iteration alone. Both check the data and move every byte.
#[test]
fn back_to_back_timing_is_one_start_and_the_total_over_iterations() {
    for (timing, starts) in [("per-iteration", 6), ("back-to-back", 1)] {
        let dir = scratch(&format!("timing-{timing}"));
        let flags = format!("--pattern sendrecv -b 1M -e 1M -n 6 -w 1 --timing {timing} --progress never");
        let o = run(2, &flags, &dir, &[("TCPX_PERF_TRACE", "1")]);
        assert_clean(&o, &dir, 1, 2);
        assert_eq!(summary(&dir)["timing"], timing, "{}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("timing: {timing} (")),
            "the header names it: {out}"
        );
        let prefix = format!("size 1048576 iterations done: 6 timed from {starts} start(s) in ");
        let span: f64 = out
            .lines()
            .find_map(|l| l.split_once(&prefix).map(|(_, rest)| rest))
            .and_then(|rest| rest.trim_end_matches(" s").parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix}` trace line:\n{out}"));
        let rank0: f64 = csv_rows(&dir, "rank_samples.csv")
            .iter()
            .filter(|r| r["rank"] == "0")
            .map(|r| r["time_us"].parse::<f64>().unwrap())
            .sum::<f64>()
            / 1e6;
        assert!(
            rank0 <= span * 1.001,
            "{timing}: samples {rank0} s past the span {span} s"
        );
        if timing == "back-to-back" {
            assert!(
                rank0 >= 0.5 * span,
                "total over iterations: samples {rank0} s of a {span} s span"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Back to back, a size's timed iterations are one phase: the watchdog spans all of them, each
/// iteration still bounded by -T through its completions. 12 iterations of over a second
/// each outlast -T 1 plus the watchdog's 10 s; before, the watchdog fired at 11 s.
#[test]
fn back_to_back_iterations_outlast_one_iterations_watchdog() {
    let time_us = slow_but_steady_run("back-to-back-slow", "-n 12 -w 0 --timing back-to-back");
    assert!(
        time_us * 12.0 > 11.0e6,
        "the iterations must outlast the watchdog of one to test anything: {time_us} us each"
    );
}

/// A rank whose requests are in flight but whose peer is slow waits without spinning: with
/// `--poll adaptive` its CPU use during the timed iterations stays small, where `--poll spin` keeps
/// a core busy per endpoint (the same run shape, one after the other). Every run reports its CPU
/// cost per size in results.csv, summary.json and the table footer.
#[test]
fn waiting_ranks_sleep_instead_of_spinning() {
    // Rank 0's helper thread sleeps 1 ms per 256 KiB chunk: 128 ms per 32 MiB iteration (one
    // request), during which both progress loops have nothing to do but wait.
    let env = [
        ("TCPXEMU_FAULT", "slow"),
        ("TCPXEMU_FAULT_RANK", "0"),
        ("NCCL_DYNAMIC_CHUNK_SIZE", "262144"),
        ("NCCL_NSOCKS_PERTHREAD", "1"),
    ];
    let cores = |poll: &str| {
        let dir = scratch(&format!("poll-{poll}"));
        let o = run(
            2,
            &format!("--pattern pairs --dir uni -b 32M -e 32M --chunk 32M -n 2 -w 1 --poll {poll} --progress never"),
            &dir,
            &env,
        );
        assert_clean(&o, &dir, 1, 2);
        let row = &csv_rows(&dir, "results.csv")[0];
        let s = summary(&dir);
        assert!(s["cpu"]["cpu_s_per_gb"].as_f64().is_some_and(|v| v > 0.0), "{s}");
        let get = |k: &str| row[k].parse::<f64>().unwrap();
        let json = s["results"][0]["cpu"]["cores_per_rank"]
            .as_f64()
            .expect("cores_per_rank");
        // results.csv writes it to 6 significant digits.
        assert!(
            (json - get("cpu_cores_per_rank")).abs() <= 1e-5 * json.abs(),
            "{json} in summary.json vs {row:?}"
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(stdout.contains("# CPU of the whole run:"), "{stdout}");
        let _ = std::fs::remove_dir_all(&dir);
        (get("cpu_cores_per_rank"), get("cpu_user_s"))
    };
    // Alone among the MPI tests: other tests' ranks would take the cores a spinning loop spins on.
    let ((adaptive, adaptive_user), (spin, spin_user)) = with_quiet_loopback(|| (cores("adaptive"), cores("spin")));
    assert!(
        adaptive < 0.3,
        "a waiting rank kept {adaptive:.2} cores busy with --poll adaptive"
    );
    // The helpers' copies are system time in both runs; a spinning loop is user time. On an idle
    // machine it costs a core per rank; on the shared 2-core CI machine it gets what the other
    // processes leave, still many times the user time of a loop that sleeps.
    assert!(
        spin_user > 3.0 * adaptive_user,
        "spinning ({spin_user:.4} s user, {spin:.2} cores per rank) should cost far more than waiting ({adaptive_user:.4} s user, {adaptive:.2} cores)"
    );
}

/// Flags tcpx-perf does not accept: exit 64 (EX_USAGE; 2 means wrong data), one line for the
/// whole job, from rank 0, prefixed `tcpx-perf:`.
#[test]
fn usage_errors_exit_64_with_one_line() {
    for (flags, needle) in [
        ("--pattern nonsense", "nonsense"),
        ("--abi 6", "6"),
        ("-n abc", "abc"),
        ("-b 2M -e 1M", "-b"),
        (
            "--suspect-share 0.3 --bad-share 0.4",
            "--bad-share 0.4 and --suspect-share 0.3",
        ),
    ] {
        let o = mpirun(&[(2, args(&format!("{flags} --no-out")))], &[], Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(64), "{flags}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("tcpx-perf")).collect();
        assert_eq!(ours.len(), 1, "{flags}: one line per job\n{}", show(&o));
        assert!(
            ours[0].starts_with("tcpx-perf: usage error:") && ours[0].contains(needle),
            "{flags}: {}",
            show(&o)
        );
    }
}

#[test]
fn bad_input_is_one_clear_line() {
    let mut cases = vec![
        ("-b 2M -e 1M", "-b"),
        ("--window 17", "--window 16"),
        ("--pattern pairs -b 1M -e 1M", "even number"),
        ("--plugin /etc/passwd", "cannot load net plugin '/etc/passwd'"),
        ("--plugin nosuchplugin", "nosuchplugin"),
        ("--abi 7 --chunk 2G", "--chunk 1G or less"),
        ("--max-reg 1K", "--max-reg 4K"),
    ];
    if !matches!(tcpx_gpu::Gpu::probe(), Ok(Some(_))) {
        cases.push(("--mem cuda", "--mem host"));
    }
    for (flags, needle) in cases {
        let np = if flags.contains("pairs") { 3 } else { 2 };
        let o = mpirun(
            &[(np, args(&format!("{flags} --no-out")))],
            &[],
            Duration::from_secs(60),
        );
        assert_ne!(o.status.code(), Some(0), "{flags}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("tcpx-perf")).collect();
        assert!(
            !ours.is_empty() && ours.iter().all(|l| l.contains(needle)),
            "{flags}: {}",
            show(&o)
        );
        assert!(!err.contains("panicked"), "{flags}: {}", show(&o));
    }
}

#[test]
fn dry_run_prints_the_placement_and_moves_no_data() {
    let dir = scratch("dry-run");
    let o = run(2, "--dry-run --pattern fullmesh", &dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "--dry-run: plugin",
        "# placement on ",
        "lo[0]",
        "# ok: plugin sha256 identical on all 2 ranks",
        "# ok: open files limit",
        "# dry run: 0 error(s)",
        "no comm opened, no data moved",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
    // One table row per endpoint, with its CPUs.
    assert_eq!(stdout.lines().filter(|l| l.contains("lo[0]")).count(), 2, "{stdout}");
    assert!(!stdout.contains("# Avg bus bandwidth"), "{stdout}");
    assert!(!dir.exists(), "a dry run writes no result directory");
}

#[test]
fn dry_run_fails_on_an_error_finding() {
    let dir = scratch("dry-run-error");
    // 16 sockets per comm: TCPX's MAX_SOCKETS is 8 (tcpx-emu clamps and loads anyway).
    let o = run(2, "--dry-run", &dir, &[("NCCL_NSOCKS_PERTHREAD", "16")]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("# error: NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS = 16"),
        "{stdout}"
    );
    assert!(stdout.contains("# dry run: 1 error(s)"), "{stdout}");
}

/// Runs `args` on `np` ranks in scratch folder `name`, which must exit 0; summary.json's
/// `placement` (the folder removed) and the run's output.
fn placement_after(np: usize, name: &str, args: &str, env: &[(&str, &str)]) -> (serde_json::Value, Output) {
    let dir = scratch(name);
    let o = run(np, args, &dir, env);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let placement = summary(&dir)["placement"].clone();
    let _ = std::fs::remove_dir_all(&dir);
    (placement, o)
}

/// Setup time of an 8-rank fullmesh whose plugin blocks in connect/accept for 200 ms
/// (`TCPXEMU_SETUP_BLOCKING`, 1 socket: (1+1) x 100 ms; one comm per peer and direction): serial with one setup thread, about one
/// latency with the default pool. Compared within the test, as ratios.
#[test]
fn blocking_connects_are_set_up_concurrently() {
    let env = [("TCPXEMU_CONNECT_MS", "100"), ("TCPXEMU_SETUP_BLOCKING", "1")];
    let setup = |threads: &str| {
        let (s, o) = placement_after(
            8,
            &format!("setup-{}", threads.len()),
            &format!("--pattern fullmesh -b 64K -e 64K -n 1 -w 0 --channels 1 {threads}"),
            &env,
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("# setup: "), "{}", show(&o));
        assert_eq!(s["comms"], 8 * 7 * 2, "{s}");
        assert_eq!(s["rows"].as_array().map(Vec::len), Some(8), "{s}");
        assert!(s["rows"][0]["cpus"].is_string(), "{s}");
        (
            s["setup"]["seconds"].as_f64().unwrap(),
            s["setup"]["max_setup_threads"].as_u64().unwrap(),
        )
    };
    let (serial, one) = setup("--setup-threads 1");
    let (pooled, many) = setup("");
    assert_eq!(one, 1);
    assert!(many > 1, "the pool grew while calls blocked");
    // 14 blocking calls of 0.2 s in a row on each endpoint.
    assert!(serial > 14.0 * 0.2 * 0.8, "serial setup {serial:.3} s");
    assert!(pooled < serial / 4.0, "pooled {pooled:.3} s vs serial {serial:.3} s");
}

/// The other side of the pool: a plugin whose calls do not block (tcpx-emu as it is) keeps it
/// small even when its calls now and then wait in the kernel. 4 ranks x 8 endpoints start 992
/// connects at once on this host, each a thread whose stack `mmap` queues behind the others'
/// (in `D`) or a lock: before, one such wait grew an endpoint's pool to all 64 threads (4 of 4
/// runs on the 2-core VM), and the 8000 threads made setup 10 times slower (3.1-5.7 s against
/// 0.30-0.35 s).
#[test]
fn a_pool_whose_calls_do_not_block_stays_small() {
    let (s, o) = placement_after(
        4,
        "setup-nonblocking",
        "--pattern fullmesh -g 8 -b 64K -e 64K -n 2 -w 1 --channels 1",
        &[],
    );
    assert_eq!(s["comms"], 32 * 31 * 2, "{s}");
    let threads = s["setup"]["max_setup_threads"].as_u64().unwrap();
    assert!(
        threads <= 16,
        "an endpoint's pool grew to {threads} setup threads though no call blocked\n{}",
        show(&o)
    );
}

/// Whether `line` of a run's console (stdout and stderr in one stream) is whole: a trace line of
/// rank 0, a `#` line, a table row, a `tcpx-perf` line, Open MPI's `[host:pid]` lines, or empty.
fn whole_line(line: &str) -> bool {
    if let Some(rest) = line.strip_prefix("trace ") {
        let f: Vec<&str> = rest.splitn(3, ' ').collect();
        return f.len() == 3 && f[0].parse::<u32>().is_ok() && f[1].parse::<f64>().is_ok() && !f[2].contains("trace ");
    }
    let row = line.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok());
    !line.contains("trace ")
        && (line.is_empty() || line.starts_with('#') || row || line.starts_with("tcpx-perf") || line.starts_with('['))
}

/// `TCPX_PERF_TRACE=1` (issue 51): rank 0's trace lines come on its stdout, in order among its
/// header and rows (each after what it marks), and no other rank's on any stream; so that with
/// stdout and stderr in one file (`> log 2>&1`, how traced runs are kept) every line is whole,
/// 4 runs of 16 ranks out of 16. Before, the trace was on every rank's stderr, and mpirun
/// forwards a rank's pty stdout 4096 bytes at a time: a placement row was cut by rank 0's own
/// `trace 0 0.910 header printed` on the 2-core VM, and by other ranks' lines at 512 ranks.
#[test]
fn trace_lines_are_rank_0s_in_order_on_stdout_and_every_line_is_whole() {
    let flags =
        "--pattern fullmesh -b 1M -e 2M -n 1 -w 0 --ranks-per-node 2 --probe-rounds 0 --no-out --progress never";
    let o = mpirun(
        &[(8, args(flags))],
        &[("TCPX_PERF_TRACE", "1")],
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!err.contains("trace "), "no trace line on stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    let at = |what: &str| {
        lines
            .iter()
            .position(|l| l.starts_with("trace 0 ") && l.ends_with(what))
            .unwrap_or_else(|| panic!("no `trace 0 ... {what}` on stdout:\n{out}"))
    };
    assert!(lines
        .iter()
        .filter(|l| l.starts_with("trace "))
        .all(|l| l.starts_with("trace 0 ")));
    // The header ends with the table's column lines, then its trace.
    let columns = lines
        .iter()
        .position(|l| l.starts_with("#       size"))
        .expect("the table's header");
    assert_eq!(at("header printed"), columns + 2, "{out}");
    for size in [1048576u64, 2097152] {
        let row = lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some(&size.to_string()))
            .unwrap_or_else(|| panic!("no row of {size}:\n{out}"));
        assert!(
            at(&format!("size {size} done")) > row,
            "the trace of a size follows its row:\n{out}"
        );
    }
    // One stream for both, as `> log 2>&1`.
    for run in 0..4 {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg("exec \"$@\" 2>&1").arg("bash").arg("mpirun");
        let mpi = mpirun_command();
        cmd.args(mpi.get_args());
        cmd.args(["-np", "16", BIN]).args(args(flags));
        cmd.env("TCPX_PERF_TRACE", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        let o = {
            let _shared = LOOPBACK.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            output_within(&mut cmd, Duration::from_secs(180), "mpirun 2>&1")
        };
        assert_eq!(o.status.code(), Some(0), "run {run}: {}", show(&o));
        let console = String::from_utf8_lossy(&o.stdout);
        let cut: Vec<&str> = console.lines().filter(|l| !whole_line(l)).collect();
        assert!(cut.is_empty(), "run {run}: lines cut or mixed: {cut:#?}");
        assert!(console.contains("size 2097152 done"), "run {run}: {console}");
    }
}
