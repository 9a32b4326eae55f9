//! The run history end to end on real runs: 30 `tcpx-perf` runs over tcpx-emu on loopback (real
//! `mpirun`, real sockets), the last 18 with the plugin slowed (`TCPXEMU_FAULT=slow`: 1 ms after
//! every chunk; 4 and 8 MiB), then `history add`, `detect` (one change point at run 12), `report` (checked in a
//! headless chromium where installed: it renders, logs nothing to the console, and every plotted
//! value equals the database's, read with SQL here), and `gate --history`.
//!
//! Needs `mpirun` and the release build of the workspace (`launch/build.sh`): tcpx-perf and the
//! plugin next to tcpx-analyze. Each test runs on both backends (SQLite, PostgreSQL:
//! tests/backends), the thirty runs made once for both.

mod backends;
mod common;

use backends::Backend;
use common::{add_nccl, real_run, run_analyze, tmpdir, write_run, Spec};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Held by every test here for its whole length: the thirty real runs measure bandwidth, and a
/// sibling test's work ending mid-series on a 2-core host is a real step in that bandwidth
/// (once seen as +60% at run 6), which the detector rightly reports.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One real run; `slow` arms the plugin's slow fault. 128 KiB chunks for every run: the fault
/// sleeps 1 ms per chunk, so a slowed run is 4-8x slower and mostly asleep, a step far above the
/// 2-core host's run-to-run spread. With 512 KiB chunks the step was -30% to -55% and the slowed
/// runs as noisy as the host: one run in four found a second change among them, or a step under
/// the asserted third (issue 43's second session, main and its successor alike).
fn run_tcpx_perf(out: &Path, slow: bool) {
    real_run(
        out,
        &[
            ("TCPXEMU_FAULT", if slow { "slow" } else { "" }),
            ("NCCL_DYNAMIC_CHUNK_SIZE", "131072"),
        ],
    );
}

/// Debian's chromium (or chromium-browser), if installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Renders the page headless; returns the DOM after its scripts ran and the console lines.
fn render(browser: &str, page: &Path) -> (String, Vec<String>) {
    let profile = tmpdir(&format!(
        "chromium-profile-{}",
        page.file_stem().unwrap().to_string_lossy()
    ));
    let o = Command::new("timeout")
        .args([
            "120",
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium");
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let console = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (String::from_utf8_lossy(&o.stdout).into_owned(), console)
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let k = format!(" {name}=\"");
    let i = tag.find(&k)? + k.len();
    Some(&tag[i..i + tag[i..].find('"')?])
}

/// Per chart (in page order): its data-size and its circles of `class` as (run id, value).
fn plotted(dom: &str, class: &str) -> Vec<(String, Vec<(i64, f64)>)> {
    dom.split("<svg class=\"chart\"")
        .skip(1)
        .map(|chart| {
            let head = &chart[..chart.find('>').unwrap()];
            let size = attr(&format!(" {head}"), "data-size").unwrap().to_string();
            let pts = chart
                .split("<circle ")
                .skip(1)
                .filter(|c| attr(&format!(" {c}"), "class") == Some(class))
                .map(|c| {
                    let c = format!(" {}", &c[..c.find('>').unwrap()]);
                    (
                        attr(&c, "data-run").unwrap().parse().unwrap(),
                        attr(&c, "data-value").unwrap().parse().unwrap(),
                    )
                })
                .collect();
            (size, pts)
        })
        .collect()
}

/// Checks a report in the browser against the database (its values read with SQL here);
/// returns the points checked.
fn check_report(page: &Path, b: &Backend, db: &str, expect_nccl: bool) -> usize {
    let Some(browser) = chromium() else {
        eprintln!("SKIP headless-browser check of {}: chromium is not installed (apt-get install chromium; launch/setup.sh --tests tries)", page.display());
        return 0;
    };
    let (dom, console) = render(browser, page);
    assert!(console.is_empty(), "console output: {console:?}");
    let values = b.results(db);
    let mut checked = 0;
    for (class, nccl) in [("pt", false), ("nccl", true)] {
        let charts = plotted(&dom, class);
        assert!(!charts.is_empty());
        for (size, pts) in charts {
            if nccl && !expect_nccl {
                assert!(pts.is_empty());
                continue;
            }
            assert!(!pts.is_empty(), "chart {size}: no {class} points");
            for (run, v) in pts {
                let want = match size.as_str() {
                    "avg" => {
                        let of: Vec<f64> = values
                            .iter()
                            .filter(|((r, _), _)| *r == run)
                            .map(|(_, (b, n))| if nccl { n.unwrap() } else { *b })
                            .collect();
                        of.iter().sum::<f64>() / of.len() as f64
                    }
                    s => {
                        let (b, n) = values[&(run, s.parse().unwrap())];
                        if nccl {
                            n.unwrap()
                        } else {
                            b
                        }
                    }
                };
                // Per size exactly; a mean within rounding of the order of summation.
                assert!(
                    (v - want).abs() <= 1e-12 * want,
                    "chart {size} run {run}: plotted {v}, database {want}"
                );
                checked += 1;
            }
        }
    }
    let status = attr(&dom[dom.find("<body").unwrap()..], "data-check").unwrap();
    assert_eq!(status.split(' ').next(), Some("ok"), "the page's own check: {status}");
    checked
}

#[test]
fn thirty_real_runs_with_a_slowed_plugin_from_run_12() {
    let _alone = alone();
    let dir = tmpdir("history-e2e");
    let runs = dir.join("runs");
    let t0 = Instant::now();
    // Two runs outside the series: the first runs after a previous test binary's work were
    // once 40% slower (a real step at run 4 that the detector rightly found).
    for i in 0..2 {
        run_tcpx_perf(&dir.join(format!("warm-up{i}")), false);
    }
    for i in 0..30 {
        run_tcpx_perf(&runs.join(format!("run{i:02}")), i >= 12);
    }
    println!("30 tcpx-perf runs: {:.1} s", t0.elapsed().as_secs_f64());
    for b in backends::all() {
        thirty_runs_on(&b, &dir, &runs);
    }
}

/// `history add`, `detect`, `report` and `gate --history` on the thirty runs, in backend `b`.
fn thirty_runs_on(b: &Backend, dir: &Path, runs: &Path) {
    let db = b.fresh(dir, "e2e-thirty");
    let dbs = db.as_str();
    let (code, out) = run_analyze(&["history", "add", "--db", dbs, runs.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("30 run(s) added"), "{out}");

    let (code, table) = run_analyze(&["history", "detect", "--db", dbs]);
    println!("{table}");
    assert_eq!(code, 1, "a regression in the newest segment: {table}");
    let (code, json) = run_analyze(&["history", "detect", "--db", dbs, "--json"]);
    assert_eq!(code, 1);
    let d: serde_json::Value = serde_json::from_str(&json).unwrap();
    let series = d["series"].as_array().unwrap();
    assert_eq!(series.len(), 3, "4 MiB, 8 MiB and their mean");
    // The planted fault is a step down by about 80% at run 12 (the slowed runs sleep 1 ms per
    // 128 KiB chunk). The 2-core host's own load steps are real too, and the detector is right
    // to see them, before the fault or after it (a quarter up through the slowed runs, seen in
    // CI); they are told from the fault by size. Every series keeps at most 3 changes; the mean
    // over sizes has the fault (a change within a run of #12, down by more than half, its
    // interval below 0); any other change from #11 on moves busbw by less than a third; a series
    // whose last change is the fault ends in a regression.
    for s in series {
        let all = s["changes"].as_array().unwrap();
        let what = format!("size {}: {all:?}", s["size"]);
        let index = |c: &serde_json::Value| c["index"].as_u64().unwrap();
        let rel = |c: &serde_json::Value| c["relative_change"].as_f64().unwrap();
        assert!(all.len() <= 3, "{what}");
        let step = all.iter().position(|c| index(c).abs_diff(12) <= 1 && rel(c) < -0.5);
        if s["size"].is_null() {
            assert!(step.is_some(), "{what}");
        }
        for (k, c) in all.iter().enumerate() {
            if Some(k) == step {
                assert!(c["ci_high"].as_f64().unwrap() < 0.0, "{what}");
            } else if index(c) >= 11 {
                assert!(rel(c).abs() < 1.0 / 3.0, "a drift, not the fault: {what}");
            }
        }
        if step.is_some_and(|k| k + 1 == all.len()) {
            assert_eq!(s["regression"], true, "{what}");
        }
    }
    let changes: usize = series.iter().map(|s| s["changes"].as_array().unwrap().len()).sum();

    let page = dir.join(format!("report-{}.html", b.name()));
    let (code, out) = run_analyze(&["history", "report", "--db", dbs, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing to fetch (the SVG namespace is a name, not a request).
    for fetch in [
        "src=",
        "<link",
        "@import",
        "url(",
        "href=\"http",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!html.contains(fetch), "the page fetches something: {fetch}");
    }
    assert_eq!(html.matches("class=\"cp\"").count(), changes, "the change points drawn");
    // Every run is a link to its directory, relative to the page beside it (issue 55).
    assert!(!html.contains("file://"), "a dead link in an artifact");
    let rel = std::fs::canonicalize(runs)
        .unwrap()
        .strip_prefix(std::fs::canonicalize(dir).unwrap())
        .unwrap()
        .to_path_buf();
    for i in [0, 12, 29] {
        let link = format!("href=\"{}\"", rel.join(format!("run{i:02}")).display());
        assert!(html.contains(&link), "no {link}");
    }
    let n = check_report(&page, b, dbs, false);
    println!("report ({}): {n} plotted values equal the database's", b.name());

    // gate --history: the newest runs against the rest of their stable segment pass, are
    // inconclusive, or show the host's drift through the slowed runs (13% down once here):
    // never a step of the fault's size ...
    let newest: Vec<String> = (27..30)
        .map(|i| runs.join(format!("run{i}")).display().to_string())
        .collect();
    let mut args = vec!["gate", "--history", dbs];
    args.extend(newest.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    println!("{out}");
    assert!((0..=2).contains(&code), "slow vs slow segment: {out}");
    if code == 1 {
        // The verdict row: `| sendrecv | 4 MiB..8 MiB (...) | busbw | 3 / N | 0.869 (-13.1%) |`.
        let row = out.lines().find(|l| l.contains("geometric mean")).unwrap_or("");
        let ratio: f64 = row
            .split('|')
            .nth(5)
            .and_then(|f| f.split_whitespace().next())
            .and_then(|r| r.parse().ok())
            .unwrap_or(0.0);
        assert!(ratio > 0.75, "slow vs slow segment, a drift at most: {out}");
    }
    // Runs named by their history ids (1..30, added in order; the candidates 28..30 left out).
    let first = out
        .split("last stable segment = history runs ")
        .nth(1)
        .and_then(|t| t.split_once("..27 ("))
        .and_then(|(n, _)| n.parse::<u32>().ok());
    assert!(first.is_some_and(|n| (12..=25).contains(&n)), "{out}");
    // ... and against a history of the fast runs only, the slowed runs are a regression.
    let fast = b.fresh(dir, "e2e-fast");
    let fast_runs: Vec<String> = (0..12)
        .map(|i| runs.join(format!("run{i:02}")).display().to_string())
        .collect();
    let mut add = vec!["history", "add", "--db", &fast];
    add.extend(fast_runs.iter().map(String::as_str));
    assert_eq!(run_analyze(&add).0, 0);
    let mut args = vec!["gate", "--history", &fast];
    args.extend(newest.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_eq!(code, 1, "{out}");
    // A configuration the history does not hold: fails closed.
    let other = write_run(&dir.join("other"), &Spec::default());
    // The same pattern in another shape: refused naming the fields, as `gate -B` refuses it.
    let (code, out) = run_analyze(&["gate", "--history", dbs, other.to_str().unwrap()]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("different MPI ranks: 4 (candidate) vs 2 (history)"),
        "{out}"
    );
    let ring = write_run(
        &dir.join("other-ring"),
        &Spec {
            pattern: "ring",
            ..Spec::default()
        },
    );
    let (code, out) = run_analyze(&["gate", "--history", dbs, ring.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("holds no run of configuration"), "{out}");
}

/// The NCCL series beside tcpx-perf's (runs with `--baseline nccl` figures), synthetic runs
/// written as tcpx-perf writes them (no GPU here to run NCCL): drawn, and equal to the database.
#[test]
fn report_draws_the_nccl_series_of_the_same_runs() {
    let _alone = alone();
    let dir = tmpdir("history-nccl-report");
    for i in 0..8u64 {
        let run = write_run(
            &dir.join(format!("runs/run{i}")),
            &Spec {
                seed: i + 1,
                ranks: 2,
                scale: if i < 4 { 1.0 } else { 0.7 },
                ..Spec::default()
            },
        );
        // What --baseline nccl adds (schema 3), NCCL a little faster in each run; a start time per run.
        add_nccl(&run, 1.1 + 0.01 * i as f64);
        let s = std::fs::read_to_string(run.join("summary.json")).unwrap();
        std::fs::write(
            run.join("summary.json"),
            s.replace("2026-11-21T05:00:00Z", &format!("2026-11-21T05:00:0{i}Z")),
        )
        .unwrap();
    }
    for b in backends::all() {
        let db = b.fresh(&dir, "e2e-nccl");
        let (code, out) = run_analyze(&["history", "add", "--db", &db, dir.join("runs").to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        let page = dir.join(format!("report-{}.html", b.name()));
        let (code, out) = run_analyze(&["history", "report", "--db", &db, "-o", page.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        let html = std::fs::read_to_string(&page).unwrap();
        assert_eq!(
            html.matches("class=\"nccl\"").count(),
            8 * 8,
            "7 sizes and their mean, 8 runs"
        );
        let n = check_report(&page, &b, &db, true);
        println!(
            "report with NCCL ({}): {n} plotted values equal the database's",
            b.name()
        );
    }
}

/// Writes run `i` of a synthetic history made from a real run (`tests/runs/ci-sendrecv-identical/
/// run01`, tcpx-perf on tcpx-emu): its figures times `factor(size)`, its start time `i` minutes on.
fn derived_run(out: &Path, i: usize, factor: impl Fn(u64) -> f64) {
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runs/ci-sendrecv-identical/run01");
    std::fs::create_dir_all(out).unwrap();
    let csv = std::fs::read_to_string(real.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (size, t, a, b) = (col("size_bytes"), col("time_us"), col("algbw_gbps"), col("busbw_gbps"));
    let mut text = format!("{}\n", head.join(","));
    for l in lines {
        let mut f: Vec<String> = l.split(',').map(str::to_string).collect();
        let k = factor(f[size].parse().unwrap());
        f[t] = format!("{}", f[t].parse::<f64>().unwrap() / k);
        f[a] = format!("{}", f[a].parse::<f64>().unwrap() * k);
        f[b] = format!("{}", f[b].parse::<f64>().unwrap() * k);
        text.push_str(&f.join(","));
        text.push('\n');
    }
    std::fs::write(out.join("results.csv"), text).unwrap();
    // summary.json carries the same figures per size (the loader checks that they agree).
    let mut sum: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(real.join("summary.json")).unwrap()).unwrap();
    let mut busbw = Vec::new();
    for r in sum["results"].as_array_mut().unwrap() {
        let k = factor(r["size_bytes"].as_u64().unwrap());
        let scale = |r: &mut serde_json::Value, key: &str, by: f64| {
            if let Some(v) = r[key].as_f64() {
                r[key] = serde_json::json!(v * by);
            }
        };
        for key in [
            "time_us",
            "time_min_us",
            "time_median_us",
            "time_p99_us",
            "time_max_us",
            "time_stdev_us",
        ] {
            scale(r, key, 1.0 / k);
        }
        scale(r, "algbw_gbps", k);
        scale(r, "busbw_gbps", k);
        busbw.push(r["busbw_gbps"].as_f64().unwrap());
    }
    sum["avg_busbw_gbps"] = serde_json::json!(busbw.iter().sum::<f64>() / busbw.len() as f64);
    sum["start_time"] = serde_json::json!(format!("2026-11-24T{:02}:{:02}:00Z", 4 + i / 60, i % 60));
    std::fs::write(out.join("summary.json"), serde_json::to_string_pretty(&sum).unwrap()).unwrap();
}

/// The acceptance case on tcpx-perf result directories. SYNTHESISED, stated plainly: a
/// 10% step is far below this host's run-to-run spread (20-30%, `tests/runs/README.md`), so the 30
/// runs are one real run's files with its figures scaled: per run a 5% (sd) factor shared by all
/// sizes, 1% per size, and 0.9 from run 12 on. One change point at run 12 +- 1 in every size and
/// the mean, about -10%; the same without the step: none. And the 12 real runs of one unchanged
/// configuration (`ci-sendrecv-identical`): none.
#[test]
fn ten_percent_step_at_run_12_in_runs_made_from_a_real_run() {
    let _alone = alone();
    for step in [true, false] {
        let dir = tmpdir(&format!("history-step-{step}"));
        let mut rng = tcpx_analyze::stats::Rng::new(if step { 12 } else { 13 });
        for i in 0..30 {
            let run = 1.0 + 0.05 * rng.normal();
            let per_size: Vec<f64> = (0..7).map(|_| 1.0 + 0.01 * rng.normal()).collect();
            let level = if step && i >= 12 { 0.9 } else { 1.0 };
            derived_run(&dir.join(format!("runs/run{i:02}")), i, |s| {
                level * run * per_size[(s.trailing_zeros() - 20) as usize]
            });
        }
        let mut tables = Vec::new();
        for b in backends::all() {
            let db = b.fresh(&dir, &format!("e2e-step-{step}"));
            let dbs = db.as_str();
            let (code, out) = run_analyze(&["history", "add", "--db", dbs, dir.join("runs").to_str().unwrap()]);
            assert_eq!(code, 0, "{out}");
            let (code, table) = run_analyze(&["history", "detect", "--db", dbs]);
            println!("step {step} ({}):\n{table}", b.name());
            let (_, json) = run_analyze(&["history", "detect", "--db", dbs, "--json"]);
            let d: serde_json::Value = serde_json::from_str(&json).unwrap();
            let series = d["series"].as_array().unwrap();
            assert_eq!(series.len(), 8, "7 sizes and their mean");
            for s in series {
                let ch = s["changes"].as_array().unwrap();
                let what = format!("size {}: {ch:?}", s["size"]);
                if step {
                    assert_eq!(ch.len(), 1, "{what}");
                    assert!(ch[0]["index"].as_u64().unwrap().abs_diff(12) <= 1, "{what}");
                    let r = ch[0]["relative_change"].as_f64().unwrap();
                    assert!((-0.15..=-0.05).contains(&r), "{what}");
                } else {
                    assert!(ch.is_empty(), "{what}");
                }
            }
            assert_eq!(code, i32::from(step), "{table}");
            tables.push((table, json));
        }
        // The same answer from either backend, to the digit.
        assert!(tables.windows(2).all(|w| w[0] == w[1]), "the backends differ");
    }
    for b in backends::all() {
        let db = b.fresh(
            &tmpdir(&format!("history-real-unchanged-{}", b.name())),
            "e2e-unchanged",
        );
        let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runs/ci-sendrecv-identical");
        assert_eq!(
            run_analyze(&["history", "add", "--db", &db, real.to_str().unwrap()]).0,
            0
        );
        let (code, table) = run_analyze(&["history", "detect", "--db", &db]);
        assert_eq!(code, 0, "{table}");
        assert!(
            !table.contains("| #"),
            "a change in 12 real runs of one configuration: {table}"
        );
    }
}

/// `history add` stores tcpx-perf's verdict per node and `history nodes` shows each node's over
/// the stored runs: node5 bad in 3 of 5 runs comes first, its letters oldest first and its newest
/// evidence. The runs are one real run's files with their figures scaled (as above) and
/// `node_verdicts` written into summary.json as tcpx-perf writes it (docs/drain.md).
#[test]
fn history_nodes_shows_a_node_bad_in_3_of_5_runs() {
    let _alone = alone();
    let dir = tmpdir("history-nodes");
    let runs = dir.join("runs");
    for (i, node5) in ["bad", "healthy", "bad", "healthy", "bad"].iter().enumerate() {
        let out = runs.join(format!("run{i}"));
        derived_run(&out, i, |_| 1.0 + 0.03 * i as f64);
        let path = out.join("summary.json");
        let mut sum: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let verdict = |host: &str, v: &str| {
            serde_json::json!({"host": host, "verdict": v, "evidence": format!("{v} in run {i}"),
                "decided_by": null, "lowest_share": 0.9, "slow_sides": []})
        };
        // Verdicts are for the run's own nodes (issue 53).
        sum["hosts"] = serde_json::json!([{"rank": 0, "hostname": "node4", "node": 0, "gpus": [0]},
            {"rank": 1, "hostname": "node5", "node": 1, "gpus": [0]}]);
        sum["node_verdicts"] = serde_json::json!([verdict("node4", "healthy"), verdict("node5", node5)]);
        std::fs::write(&path, serde_json::to_string_pretty(&sum).unwrap()).unwrap();
    }
    for b in backends::all() {
        nodes_on(&b, &dir, &runs);
    }
}

/// `history nodes` and the report's grid on the five runs, in backend `b`.
fn nodes_on(b: &Backend, dir: &Path, runs: &Path) {
    let db = b.fresh(dir, "e2e-nodes");
    let dbs = db.as_str();
    let (code, out) = run_analyze(&["history", "add", "--db", dbs, runs.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("5 run(s) added"), "{out}");
    let (code, table) = run_analyze(&["history", "nodes", "--db", dbs, "--last", "5"]);
    assert_eq!(code, 0, "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[1].starts_with("node5     5        2        0    3  B.B.B "),
        "{table}"
    );
    assert!(lines[1].ends_with("run 5: bad bad in run 4"), "{table}");
    assert!(
        lines[2].starts_with("node4     5        5        0    0  ....."),
        "{table}"
    );
    // The HTML report's node-by-run grid: node5's row, bad in the first run.
    let page = dir.join(format!("report-{}.html", b.name()));
    let (code, out) = run_analyze(&["history", "report", "--db", dbs, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<table id=\"nodes\">"), "no node grid");
    assert!(
        html.contains("<tr><td>node5</td><td class=\"bad\" style=\"background:#f99\" title=\"bad in run 0\">B</td>"),
        "node5's row"
    );
}
