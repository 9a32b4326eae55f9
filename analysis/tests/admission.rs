//! Issue 29: the gate, make-baseline and history add accept only complete, consistent runs,
//! count one run once however it was copied, and admit forced, unchecked, below-MIN_BW and
//! summary-less runs only where a flag names them. The hostile inputs are real runs (the
//! fixtures' real tcpx-perf directories, and real small runs made here) edited one way each.

mod common;

use common::{hosts_json, node_verdict, real_run, run_analyze, tcpx_perf_run, tmpdir, write_run, Spec};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A real schema-3 run (ring, 2 ranks, checked).
fn ring() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tcpx-perf/ring-2ranks-c1"
    ))
}

/// Real schema-1 runs of one configuration (`tests/runs/README.md`), `runNN`.
fn real(n: usize) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical")).join(format!("run{n:02}"))
}

/// Copies a result directory's files to `to`.
fn copy_dir(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    to.to_path_buf()
}

fn edit_summary(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("summary.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Rewrites results.csv's cells: `f(column, value)` gives the new value.
fn map_cells(dir: &Path, f: impl Fn(&str, &str) -> String) {
    let p = dir.join("results.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    let header: Vec<&str> = first.split(',').collect();
    let mut out = format!("{first}\n");
    for l in lines {
        let cells: Vec<String> = header.iter().zip(l.split(',')).map(|(h, v)| f(h, v)).collect();
        out += &(cells.join(",") + "\n");
    }
    std::fs::write(&p, out).unwrap();
}

/// Removes one column from results.csv.
fn drop_column(dir: &Path, col: &str) {
    let p = dir.join("results.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    let at = text.lines().next().unwrap().split(',').position(|h| h == col).unwrap();
    let out: String = text
        .lines()
        .map(|l| {
            let mut c: Vec<&str> = l.split(',').collect();
            c.remove(at);
            c.join(",") + "\n"
        })
        .collect();
    std::fs::write(&p, out).unwrap();
}

/// Whether `out` says `text`, in any case (the Markdown title is upper case).
fn says(out: &str, text: &str) -> bool {
    out.to_lowercase().contains(&text.to_lowercase())
}

fn show(dir: &Path) -> (i32, String) {
    run_analyze(&["show", s(dir)])
}

#[test]
fn the_real_fixtures_are_admitted() {
    for d in [ring(), real(1)] {
        let (code, out) = show(&d);
        assert_eq!(code, 0, "{out}");
    }
}

#[test]
fn every_column_of_its_schema_is_required() {
    let d = tmpdir("admit-columns");
    let cols = [
        "bytes_moved",
        "ranks",
        "endpoints",
        "nodes",
        "iters",
        "plugin",
        "netbw_gbps",
        "time_p99_us",
    ];
    for col in cols {
        let run = copy_dir(&ring(), &d.join(col));
        drop_column(&run, col);
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{col}: {out}");
        assert!(out.contains(&format!("results.csv:1: {col}: missing")), "{col}: {out}");
    }
    // Schema 4 (tcpx-perf since the tcp_* columns): the real run rewritten as schema 4 is
    // admitted, and without tcp_timeouts refused.
    let v4 = copy_dir(&ring(), &d.join("v4"));
    for f in ["results.csv", "samples.csv", "pairs.csv", "rank_samples.csv"] {
        let t = std::fs::read_to_string(v4.join(f)).unwrap();
        let mut lines: Vec<String> = t.lines().map(|l| l.replacen("3,", "4,", 1)).collect();
        lines[0] = t.lines().next().unwrap().to_string();
        if f == "results.csv" {
            for (i, l) in lines.iter_mut().enumerate() {
                l.push_str(if i == 0 {
                    ",tcp_retrans_segs,tcp_timeouts"
                } else {
                    ",0,0"
                });
            }
        }
        std::fs::write(v4.join(f), lines.join("\n") + "\n").unwrap();
    }
    edit_summary(&v4, |v| v["schema_version"] = 4.into());
    let (code, out) = show(&v4);
    assert_eq!(code, 0, "{out}");
    drop_column(&v4, "tcp_timeouts");
    let (code, out) = show(&v4);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("tcp_timeouts: missing"), "{out}");
    // Schema 1 too (a real schema-1 run without its iters column).
    let run = copy_dir(&real(1), &d.join("v1-iters"));
    drop_column(&run, "iters");
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("iters: missing"), "{out}");
}

#[test]
fn figures_must_be_finite_and_non_negative() {
    let d = tmpdir("admit-figures");
    for (col, bad) in [
        ("time_cv_pct", "NaN"),
        ("time_p99_us", "-1"),
        ("wire_payload_ratio", "inf"),
    ] {
        let run = copy_dir(&ring(), &d.join(col));
        map_cells(&run, |h, v| if h == col { bad.to_string() } else { v.to_string() });
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{col}: {out}");
        assert!(out.contains(&format!("results.csv:2: {col}:")), "{col}: {out}");
    }
    let run = copy_dir(&ring(), &d.join("summary-negative"));
    edit_summary(&run, |v| v["results"][1]["time_p99_us"] = (-1.0).into());
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("results[1].time_p99_us"), "{out}");
}

#[test]
fn summary_json_must_agree_with_the_csv_files() {
    let d = tmpdir("admit-summary");
    type Edit = fn(&mut Value);
    let rows = ring_rows();
    let cases: [(&str, Edit, &str); 7] = [
        ("wrong", |v| v["results"][0]["wrong"] = 5.into(), "results[0].wrong"),
        ("wrong-total", |v| v["wrong_total"] = 5.into(), "wrong_total"),
        (
            "no-status",
            |v| drop(v.as_object_mut().unwrap().remove("status")),
            "status: missing",
        ),
        (
            "no-results",
            |v| drop(v.as_object_mut().unwrap().remove("results")),
            "results: missing",
        ),
        (
            "interrupted",
            |v| v["status"] = "interrupted".into(),
            "\"interrupted\" with \"complete\": true",
        ),
        ("sizes-done", |v| v["sizes_done"] = 1.into(), "sizes_done"),
        (
            "min-bw-unsaid",
            |v| v["min_bw"] = serde_json::json!({"min_bw_gbps": 100.0, "avg_busbw_gbps": 0.4, "passed": false}),
            "the summary contradicts itself",
        ),
    ];
    for (name, edit, why) in cases {
        let run = copy_dir(&ring(), &d.join(name));
        edit_summary(&run, edit);
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{name}: {out}");
        assert!(out.contains(why), "{name}: {out}");
    }
    // 3 of 7 sizes done, yet "complete": true.
    let run = copy_dir(&ring(), &d.join("sizes-planned"));
    edit_summary(&run, |v| {
        v["sizes_planned"] = (rows + 4).into();
        v["sizes_done"] = rows.into();
    });
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("sizes_planned") && out.contains("did not finish"), "{out}");
    // A shortfall summary.json shows, with or without results.csv's bytes_moved column.
    for drop_col in [false, true] {
        let run = copy_dir(&real(1), &d.join(format!("short-{drop_col}")));
        edit_summary(&run, |v| {
            let planned = v["results"][2]["bytes_planned"].as_u64().unwrap();
            v["results"][2]["bytes_moved"] = (planned - 1000).into();
        });
        if drop_col {
            drop_column(&run, "bytes_moved");
        }
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{out}");
        assert!(out.contains("bytes_moved"), "{out}");
    }
}

fn ring_rows() -> u64 {
    std::fs::read_to_string(ring().join("results.csv"))
        .unwrap()
        .lines()
        .count() as u64
        - 1
}

/// Five real runs' directories, their summaries saying the run was interrupted.
fn interrupted(d: &Path) -> Vec<PathBuf> {
    (1..=5)
        .map(|i| {
            let run = copy_dir(&real(i), &d.join(format!("int{i}")));
            edit_summary(&run, |v| {
                v["complete"] = false.into();
                v["status"] = "interrupted".into();
            });
            run
        })
        .collect()
}

#[test]
fn a_bare_results_csv_needs_its_complete_summary() {
    let d = tmpdir("admit-bare");
    let csvs: Vec<String> = interrupted(&d)
        .iter()
        .map(|r| r.join("results.csv").display().to_string())
        .collect();
    let out_toml = d.join("b.toml");
    let mut args = vec!["make-baseline", "--name", "x", "-o", s(&out_toml)];
    args.extend(csvs.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("\"complete\" is not true"), "{out}");
    // Without any summary.json: refused, unless --allow-incomplete, which the verdict names.
    let bare: Vec<String> = (1..=5)
        .map(|i| {
            let b = d.join(format!("bare{i}"));
            std::fs::create_dir_all(&b).unwrap();
            std::fs::copy(real(i).join("results.csv"), b.join("results.csv")).unwrap();
            b.join("results.csv").display().to_string()
        })
        .collect();
    let refs: Vec<String> = (6..=10).map(|i| real(i).display().to_string()).collect();
    let mut args = vec!["gate"];
    args.extend(bare.iter().map(String::as_str));
    args.push("-B");
    args.extend(refs.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("no summary.json beside it") && out.contains("--allow-incomplete"),
        "{out}"
    );
    args.extend(["--allow-incomplete", "--allow-inconclusive"]);
    let (code, out) = run_analyze(&args);
    assert!(code == 0 || code == 1, "{out}");
    assert!(says(&out, "INCOMPLETE runs allowed"), "{out}");
}

/// `run` with every figure of results.csv's and summary.json's times scaled by `1 + k * 1e-12`
/// (the bandwidths follow within their rounding): the same run, not byte-equal.
fn nudged(run: &Path, to: &Path, k: f64) -> PathBuf {
    let c = copy_dir(run, to);
    let f = 1.0 + k * 1e-12;
    map_cells(&c, |h, v| {
        if h == "time_us" {
            format!("{}", v.parse::<f64>().unwrap() * f)
        } else {
            v.to_string()
        }
    });
    edit_summary(&c, |v| {
        for r in v["results"].as_array_mut().unwrap() {
            r["time_us"] = (r["time_us"].as_f64().unwrap() * f).into();
        }
    });
    c
}

#[test]
fn copies_are_one_run_however_they_were_made() {
    let d = tmpdir("admit-copies");
    let refs: Vec<String> = (6..=10).map(|i| real(i).display().to_string()).collect();
    let copies: Vec<PathBuf> = (0..5)
        .map(|k| nudged(&real(1), &d.join(format!("n{k}")), f64::from(k)))
        .collect();
    let crlf = copy_dir(&real(1), &d.join("crlf"));
    for f in ["results.csv", "summary.json"] {
        let t = std::fs::read_to_string(crlf.join(f)).unwrap();
        std::fs::write(crlf.join(f), t.replace('\n', "\r\n")).unwrap();
    }
    let restarted = copy_dir(&real(1), &d.join("restarted"));
    edit_summary(&restarted, |v| v["start_time"] = "2026-11-24T09:00:00Z".into());
    let baseline = d.join("b.toml");
    for (what, list) in [
        ("nudged by 1e-12", copies.clone()),
        ("CRLF", vec![real(1), crlf.clone()]),
        ("start_time", vec![real(1), restarted.clone()]),
    ] {
        let names: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        let mut args = vec!["gate"];
        args.extend(names.iter().map(String::as_str));
        args.push("-B");
        args.extend(refs.iter().map(String::as_str));
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 3, "{what}: {out}");
        assert!(out.contains("a copy of one run"), "{what}: {out}");
        let mut args = vec!["make-baseline", "--name", "x", "-o", s(&baseline)];
        args.extend(names.iter().map(String::as_str));
        args.extend(refs.iter().take(4).map(String::as_str));
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 3, "{what}: {out}");
        assert!(out.contains("a copy of one run"), "{what}: {out}");
    }
    // history add stores one of them.
    let db = d.join("h.sqlite");
    let mut args = vec!["history", "add", "--db", s(&db), s(&crlf), s(&restarted)];
    let names: Vec<String> = copies.iter().map(|p| p.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("0 run(s) added") || out.contains("1 run(s) added, 6 already stored, 1 in all"),
        "{out}"
    );
    assert!(out.contains("1 in all"), "{out}");
    // Different real runs of the configuration are no copies.
    let mut args = vec!["gate"];
    let cands: Vec<String> = (1..=5).map(|i| real(i).display().to_string()).collect();
    args.extend(cands.iter().map(String::as_str));
    args.push("-B");
    args.extend(refs.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_ne!(code, 3, "{out}");
}

/// A real run and its stdout log (`run1.log` beside `run1/`), written by tcpx-perf here.
fn run_with_log(d: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = d.join(name);
    let log = d.join(format!("{name}.log"));
    std::fs::write(&log, real_run(&dir, &[])).unwrap();
    (dir, log)
}

#[test]
fn a_runs_own_stdout_log_is_that_run() {
    let d = tmpdir("admit-log");
    let (run1, log1) = run_with_log(&d, "run1");
    let (run2, log2) = run_with_log(&d, "run2");
    // A BOM and CRLF copy of the log is the log.
    let bom = d.join("run1-bom.log");
    let text = std::fs::read_to_string(&log1).unwrap();
    std::fs::write(&bom, format!("\u{feff}{}", text.replace('\n', "\r\n"))).unwrap();
    let (code, out) = run_analyze(&["gate", s(&run1), s(&log1), "-B", s(&run2), s(&log2)]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("stdout log of result directory"), "{out}");
    // In the history, in either order, one run each.
    for (i, order) in [[&run1, &log1, &bom], [&bom, &log1, &run1]].iter().enumerate() {
        let db = d.join(format!("h{i}.sqlite"));
        let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(order[0]), s(order[1]), s(order[2])]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("1 run(s) added, 2 already stored, 1 in all"), "{out}");
    }
}

/// Three history runs and twelve copies of the fastest (CRLF, start_time edited, times nudged):
/// counted once each, the candidates (three runs like the references) are no regression.
#[test]
fn twelve_copies_in_the_history_make_no_regression() {
    let d = tmpdir("admit-history-copies");
    let spec = |scale: f64, seed: u64| Spec {
        scale,
        seed,
        noise: 0.01,
        ..Spec::default()
    };
    let refs: Vec<PathBuf> = [(1.15, 1), (1.0, 2), (0.9, 3)]
        .iter()
        .enumerate()
        .map(|(i, (sc, seed))| {
            let r = write_run(&d.join(format!("ref{i}")), &spec(*sc, *seed));
            edit_summary(&r, |v| v["start_time"] = format!("2026-11-20T0{i}:00:00Z").into());
            r
        })
        .collect();
    let mut copies = Vec::new();
    for k in 0..12 {
        let c = copy_dir(&refs[0], &d.join(format!("copy{k}")));
        edit_summary(&c, |v| v["start_time"] = format!("2026-11-20T05:{k:02}:00Z").into());
        if k % 2 == 0 {
            for f in ["results.csv", "samples.csv", "pairs.csv"] {
                let t = std::fs::read_to_string(c.join(f)).unwrap();
                std::fs::write(c.join(f), t.replace('\n', "\r\n")).unwrap();
            }
        }
        copies.push(c);
    }
    let cands: Vec<PathBuf> = [(0.95, 11), (0.94, 12), (0.96, 13)]
        .iter()
        .enumerate()
        .map(|(i, (sc, seed))| write_run(&d.join(format!("cand{i}")), &spec(*sc, *seed)))
        .collect();
    let db = d.join("h.sqlite");
    let names: Vec<String> = refs.iter().chain(&copies).map(|p| p.display().to_string()).collect();
    let mut args = vec!["history", "add", "--db", s(&db)];
    args.extend(names.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("3 run(s) added, 12 already stored, 3 in all"), "{out}");
    let c: Vec<String> = cands.iter().map(|p| p.display().to_string()).collect();
    let mut args = vec!["gate", "--history", s(&db)];
    args.extend(c.iter().map(String::as_str));
    let (code, out) = run_analyze(&args);
    assert_ne!(code, 1, "{out}");
    assert!(!out.contains("REGRESSION"), "{out}");
}

#[test]
fn concurrent_history_adds_on_a_new_database_all_succeed() {
    let d = tmpdir("admit-concurrent");
    let runs: Vec<PathBuf> = (0..4)
        .map(|i| {
            write_run(
                &d.join(format!("r{i}")),
                &Spec {
                    seed: 40 + i,
                    ..Spec::default()
                },
            )
        })
        .collect();
    for trial in 0..10 {
        let db = d.join(format!("h{trial}.sqlite"));
        let children: Vec<_> = runs
            .iter()
            .map(|r| {
                std::process::Command::new(env!("CARGO_BIN_EXE_tcpx-analyze"))
                    .args(["history", "add", "--db", s(&db), s(r)])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "trial {trial}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let db = tcpx_analyze::history::db::Db::open(&db, false).unwrap();
        assert_eq!(db.run_count().unwrap(), 4, "trial {trial}");
    }
}

/// The tables of an SQLite file, by name.
fn tables(p: &Path) -> Vec<String> {
    let c = rusqlite::Connection::open(p).unwrap();
    let mut st = c.prepare("SELECT name FROM sqlite_master ORDER BY name").unwrap();
    st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn gate_history_never_writes_into_a_file_it_did_not_create() {
    let d = tmpdir("admit-foreign");
    let cand = write_run(&d.join("cand"), &Spec::default());
    let empty = d.join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap();
    let (code, out) = run_analyze(&["gate", "--history", s(&empty), s(&cand)]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("an empty file, not a tcpx-analyze history"), "{out}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    let foreign = d.join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);")
        .unwrap();
    for args in [
        vec!["gate", "--history", s(&foreign), s(&cand)],
        vec!["history", "detect", "--db", s(&foreign)],
        vec!["history", "add", "--db", s(&foreign), s(&cand)],
    ] {
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 3, "{args:?}: {out}");
        assert!(out.contains("another program"), "{args:?}: {out}");
        assert_eq!(tables(&foreign), ["notes"], "{args:?} wrote into it");
    }
}

#[test]
fn forced_and_below_min_bw_runs_need_their_flag_and_are_marked() {
    let d = tmpdir("admit-waivers");
    let make = |name: &str, seed: u64, edit: fn(&mut Value)| {
        let r = write_run(
            &d.join(name),
            &Spec {
                seed,
                noise: 0.01,
                ..Spec::default()
            },
        );
        edit_summary(&r, edit);
        r
    };
    let refs: Vec<PathBuf> = (0..5).map(|i| make(&format!("ref{i}"), 10 + i, |_| {})).collect();
    let refs: Vec<String> = refs.iter().map(|p| p.display().to_string()).collect();
    let forced: Vec<PathBuf> = (0..3)
        .map(|i| make(&format!("forced{i}"), 20 + i, |v| v["force"] = true.into()))
        .collect();
    let slow: Vec<PathBuf> = (0..3)
        .map(|i| {
            make(&format!("minbw{i}"), 30 + i, |v| {
                v["status"] = "below-min-bw".into();
                v["min_bw"] = serde_json::json!({"min_bw_gbps": 100.0, "avg_busbw_gbps": 4.2, "passed": false});
            })
        })
        .collect();
    for (runs, flag, label) in [
        (&forced, "--allow-forced", "FORCED runs allowed"),
        (&slow, "--allow-below-min-bw", "BELOW-MIN-BW runs allowed"),
    ] {
        let names: Vec<String> = runs.iter().map(|p| p.display().to_string()).collect();
        let mut args = vec!["gate"];
        args.extend(names.iter().map(String::as_str));
        args.push("-B");
        args.extend(refs.iter().map(String::as_str));
        args.push("--allow-inconclusive");
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 3, "{flag}: {out}");
        assert!(out.contains(flag), "{flag}: {out}");
        let json = d.join("v.json");
        args.extend([flag, "--json", s(&json)]);
        let (code, out) = run_analyze(&args);
        assert!(code == 0 || code == 1, "{flag}: {out}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(says(v["verdict"].as_str().unwrap(), label), "{flag}: {v}");
        // make-baseline and history add alike; the history keeps the mark for its gates.
        let toml = d.join("b.toml");
        let mut mb = vec!["make-baseline", "--name", "x", "-o", s(&toml)];
        mb.extend(names.iter().map(String::as_str));
        mb.extend(refs.iter().take(2).map(String::as_str));
        assert_eq!(run_analyze(&mb).0, 3, "{flag}");
        mb.push(flag);
        assert_eq!(run_analyze(&mb).0, 0, "{flag}");
        assert!(std::fs::read_to_string(&toml)
            .unwrap()
            .contains(label.split(' ').next().unwrap()));
        let db = d.join(format!("h{}.sqlite", &flag[8..]));
        let mut add = vec!["history", "add", "--db", s(&db)];
        add.extend(names.iter().map(String::as_str));
        let (code, out) = run_analyze(&add);
        assert_eq!(code, 3, "{flag}: {out}");
        add.push(flag);
        let (code, out) = run_analyze(&add);
        assert_eq!(code, 0, "{flag}: {out}");
        let (code, out) = run_analyze(&["gate", "--history", s(&db), &refs[0]]);
        assert_eq!(code, 3, "{flag}: {out}");
        assert!(out.contains(flag), "{flag}: {out}");
        let (code, out) = run_analyze(&["gate", "--history", s(&db), &refs[0], flag, "--allow-inconclusive"]);
        assert!(code == 0 || code == 1, "{flag}: {out}");
        assert!(says(&out, label), "{flag}: {out}");
    }
    // -c 0 runs: history add refuses them as the gate does.
    let c0 = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tcpx-perf/sendrecv-2ranks-c0"
    ));
    let db = d.join("c0.sqlite");
    let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&c0)]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("--allow-unchecked"), "{out}");
}

#[test]
fn runs_needed_refuses_a_slowdown_the_gate_never_calls_a_regression() {
    for slow in ["0", "0.05", "0.03"] {
        let (code, out) = run_analyze(&["runs-needed", "--spread", "0.05", "--slowdown", slow]);
        assert_eq!(code, 64, "{slow}: {out}");
        assert!(out.contains("at or below the gate's --threshold"), "{slow}: {out}");
    }
    let (code, out) = run_analyze(&["runs-needed", "--spread", "0.05", "--slowdown", "0.06"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run_analyze(&[
        "runs-needed",
        "--spread",
        "0.05",
        "--slowdown",
        "0.06",
        "--threshold",
        "0.1",
    ]);
    assert_eq!(code, 64, "{out}");
}

/// tcpx-perf itself: a failed NCCL_TESTS_MIN_BW (exit 7) is status `below-min-bw` in
/// summary.json with the figures, which the gate then refuses unless allowed by name; `-J` that
/// cannot be written ends the run before it measures; a `-J` in a directory that does not exist
/// is refused so too, the directory not made (issue 44: no directory is made for a file), and
/// one in a directory that exists is written.
#[test]
fn tcpx_perf_records_min_bw_and_probes_j_first() {
    let d = tmpdir("admit-tcpx-perf");
    let run = d.join("slow");
    let o = tcpx_perf_run(&run, &[("NCCL_TESTS_MIN_BW", "1000000")], &[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(v["status"], "below-min-bw", "{v}");
    assert_eq!(v["complete"], true);
    assert_eq!(v["min_bw"]["passed"], false);
    assert_eq!(v["min_bw"]["min_bw_gbps"], 1e6);
    assert!(v["min_bw"]["avg_busbw_gbps"].as_f64().unwrap() > 0.0);
    let (code, out) = run_analyze(&["gate", s(&run), "-B", s(&run)]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("--allow-below-min-bw") && out.contains("average busbw"),
        "{out}"
    );
    // -J in a directory that takes no file (/proc, even for root): refused before any size is
    // measured.
    let bad = PathBuf::from("/proc/tcpx-perf-admission.json");
    let o = tcpx_perf_run(&d.join("j-bad"), &[], &["-J", s(&bad)]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains(&format!("-J {}", bad.display())), "{text}");
    assert!(!text.contains("Avg bus bandwidth"), "measured before refusing: {text}");
    let missing = d.join("new-dir").join("run.json");
    let o = tcpx_perf_run(&d.join("j-missing"), &[], &["-J", s(&missing)]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && text.contains("does not exist"), "{text}");
    assert!(!text.contains("Avg bus bandwidth"), "measured before refusing: {text}");
    assert!(!d.join("new-dir").exists(), "a directory was made for -J");
    let good = d.join("run.json");
    let o = tcpx_perf_run(&d.join("j-good"), &[], &["-J", s(&good)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(good.is_file());
}

/// Sets one results.csv cell (data row `row`, 0-based) of column `col`.
fn set_cell(dir: &Path, file: &str, row: usize, col: &str, value: &str) {
    let p = dir.join(file);
    let text = std::fs::read_to_string(&p).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines[0].split(',').position(|h| h == col).unwrap();
    let mut cells: Vec<String> = lines[row + 1].split(',').map(str::to_string).collect();
    cells[at] = value.to_string();
    lines[row + 1] = cells.join(",");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
}

/// Issue 34 item 4: a figure edited to a round number (0.4449 -> `0.4`, -10%) hid in its own
/// printed precision (`0.4` is 0.35..0.45); netbw was not checked at all. A figure is checked to
/// the printed precision of the columns it derives from, and its own rounding counts only to 4
/// significant digits, so an edit beyond the real figure's rounding is refused by `show`, the
/// gate and `history add` alike.
#[test]
fn a_hand_edited_round_figure_is_refused() {
    let d = tmpdir("admit-round");
    for col in ["algbw_gbps", "busbw_gbps", "netbw_gbps"] {
        let run = copy_dir(&ring(), &d.join(col));
        set_cell(&run, "results.csv", 0, col, "0.4");
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{col}: {out}");
        assert!(out.contains(&format!("results.csv:2: {col}:")), "{col}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{col}: one line: {out}");
        let db = d.join(format!("{col}.sqlite"));
        let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&run)]);
        assert_eq!(code, 3, "{col}: {out}");
    }
    // netbw must be bytes_planned / sending endpoints / time: doubled, it claims half the senders.
    let run = copy_dir(&ring(), &d.join("netbw-double"));
    let nb: f64 = std::fs::read_to_string(run.join("results.csv"))
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .nth(12)
        .unwrap()
        .parse()
        .unwrap();
    set_cell(&run, "results.csv", 0, "netbw_gbps", &format!("{}", nb * 2.0));
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("results.csv:2: netbw_gbps:"), "{out}");
    // samples.csv: a last number cut short (0.751904475972307 -> 0.75) and a file cut before its
    // last size.
    let run = copy_dir(&ring(), &d.join("samples-cut"));
    let p = run.join("samples.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    let cut = text.trim_end().rsplit_once(',').unwrap().0.to_string() + ",0.75\n";
    std::fs::write(&p, cut).unwrap();
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("samples.csv:") && out.contains("busbw_gbps"), "{out}");
    let run = copy_dir(&ring(), &d.join("samples-short"));
    let p = run.join("samples.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    let last_size = text.lines().last().unwrap().split(',').nth(2).unwrap().to_string();
    let kept: String = text
        .lines()
        .filter(|l| l.split(',').nth(2) != Some(last_size.as_str()))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&p, kept).unwrap();
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(&format!("size {last_size}")) && out.contains("0 samples"),
        "{out}"
    );
    // The real runs, untouched, still pass: the check does not reject true figures.
    let c0 = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tcpx-perf/sendrecv-2ranks-c0"
    ));
    for r in [ring(), c0].into_iter().chain((1..=12).map(real)) {
        let (code, out) = show(&r);
        assert_eq!(code, 0, "{}: {out}", r.display());
    }
}

/// Issue 34 item 4: summary.json's configuration was stored as it stood: `channels: -2`,
/// `window: 0`, `nodes: 0`, `ranks: 3` beside a results.csv of 2 ranks, `ranks: 1.5`, and
/// its per-size figures were never compared with results.csv's. Each is refused in one line
/// naming the file and the field.
#[test]
fn summary_json_config_is_in_range_and_agrees_with_the_csv() {
    let d = tmpdir("admit-config");
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 13] = [
        ("channels", |v| v["channels"] = (-2).into(), "channels"),
        ("window", |v| v["window"] = 0.into(), "window"),
        ("nodes", |v| v["nodes"] = 0.into(), "nodes"),
        ("ranks", |v| v["ranks"] = 3.into(), "ranks"),
        ("ranks-frac", |v| v["ranks"] = 1.5.into(), "ranks"),
        ("iters", |v| v["iters"] = 4.into(), "iters"),
        ("check", |v| v["check"] = false.into(), "check"),
        (
            "config-channels",
            |v| v["config"]["channels"] = (-2).into(),
            "config.channels",
        ),
        (
            "busbw",
            |v| v["results"][0]["busbw_gbps"] = 0.5.into(),
            "results[0].busbw_gbps",
        ),
        (
            "algbw",
            |v| v["results"][1]["algbw_gbps"] = 0.5.into(),
            "results[1].algbw_gbps",
        ),
        (
            "netbw",
            |v| v["results"][0]["netbw_gbps"] = 0.5.into(),
            "results[0].netbw_gbps",
        ),
        ("res-iters", |v| v["results"][0]["iters"] = 4.into(), "results[0].iters"),
        (
            "res-size",
            |v| v["results"][0]["bytes_planned"] = 2097152.5.into(),
            "results[0].bytes_planned",
        ),
    ];
    for (name, edit, field) in cases {
        let run = copy_dir(&ring(), &d.join(name));
        edit_summary(&run, edit);
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{name}: {out}");
        assert!(out.contains(&format!("summary.json: {field}:")), "{name}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{name}: one line: {out}");
    }
    // results.csv: integers are integers, and its shape is summary.json's.
    for (name, col, bad) in [
        ("csv-ranks-frac", "ranks", "1.5"),
        ("csv-ranks", "ranks", "3"),
        ("csv-iters", "iters", "5.0"),
    ] {
        let run = copy_dir(&ring(), &d.join(name));
        map_cells(&run, |h, v| if h == col { bad.to_string() } else { v.to_string() });
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{name}: {out}");
        assert!(out.contains(&format!("results.csv:2: {col}:")), "{name}: {out}");
        let db = d.join(format!("{name}.sqlite"));
        let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&run)]);
        assert_eq!(code, 3, "{name}: {out}");
    }
}

/// A result directory of a run on three nodes whose probe judged them, with a verdict for each
/// as tcpx-perf writes it (node2 bad).
fn judged_run(dir: &Path) -> PathBuf {
    let run = write_run(
        dir,
        &Spec {
            sizes: vec![1 << 20, 2 << 20],
            iters: 5,
            ranks: 3,
            ..Spec::default()
        },
    );
    edit_summary(&run, |s| {
        s["hosts"] = hosts_json(&["node0", "node1", "node2"]);
        s["probe"] = serde_json::json!({"skipped": null, "size_bytes": 2 << 20, "seconds": 1.5,
            "bytes": 25165824, "wrong": 0, "rounds": [{"pairs": [["node0", "node1"]]}]});
        s["node_verdicts"] = serde_json::json!([
            node_verdict("node0", "healthy"),
            node_verdict("node1", "healthy"),
            node_verdict("node2", "bad")
        ]);
    });
    run
}

/// `judged_run` edited by `edit` (in `d/name`) is refused by `show` and by `history add` in one
/// line naming `field` and saying `why`, and no history is made; before issue 53 each was
/// admitted and stored.
fn verdicts_refused(d: &Path, name: &str, edit: impl FnOnce(&mut Value), field: &str, why: &str) {
    let run = judged_run(&d.join(name));
    edit_summary(&run, edit);
    let (code, out) = show(&run);
    assert_eq!(code, 3, "{name}: {out}");
    assert!(
        out.contains(&format!("summary.json: {field}: ")) && out.contains(why),
        "{name}: {out}"
    );
    assert_eq!(out.trim_end().lines().count(), 1, "{name}: one line: {out}");
    let db = d.join(format!("{name}.sqlite"));
    let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&run)]);
    assert_eq!(code, 3, "{name}: {out}");
    assert!(!db.exists(), "{name}: a refused run made the history");
}

/// The well-formed run is admitted and `history nodes` shows its three nodes (the baseline of
/// the refusals below).
#[test]
fn verdicts_as_tcpx_perf_writes_them_are_admitted() {
    let d = tmpdir("admit-verdicts-ok");
    let run = judged_run(&d.join("run"));
    let db = d.join("h.sqlite");
    let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&run)]);
    assert_eq!(code, 0, "{out}");
    let (code, table) = run_analyze(&["history", "nodes", "--db", s(&db)]);
    assert_eq!(code, 0, "{table}");
    for host in ["node0", "node1", "node2"] {
        assert_eq!(table.lines().filter(|l| l.starts_with(host)).count(), 1, "{table}");
    }
    // No verdict where none was judged: a skipped probe, or none at all.
    for (name, probe) in [
        (
            "skipped",
            serde_json::json!({"skipped": "--probe-rounds 0", "size_bytes": 0, "seconds": 0.0,
            "bytes": 0, "wrong": null, "rounds": []}),
        ),
        ("none", Value::Null),
    ] {
        let run = judged_run(&d.join(name));
        edit_summary(&run, |s| {
            s["probe"] = probe;
            s["node_verdicts"] = serde_json::json!([]);
        });
        let (code, out) = show(&run);
        assert_eq!(code, 0, "{name}: {out}");
    }
}

#[test]
fn a_host_name_with_a_line_break_forges_no_node() {
    let d = tmpdir("admit-verdicts-newline");
    verdicts_refused(
        &d,
        "verdict",
        |s| s["node_verdicts"][0]["host"] = "node0\nnode7".into(),
        "node_verdicts[0].host",
        "no control character",
    );
    verdicts_refused(
        &d,
        "both",
        |s| {
            s["hosts"][0]["hostname"] = "node0\nnode7".into();
            s["node_verdicts"][0]["host"] = "node0\nnode7".into();
        },
        "hosts[0].hostname",
        "control character",
    );
}

#[test]
fn a_verdict_for_a_host_not_in_the_run_is_refused() {
    let d = tmpdir("admit-verdicts-stranger");
    verdicts_refused(
        &d,
        "stranger",
        |s| {
            let list = s["node_verdicts"].as_array_mut().unwrap();
            list.push(node_verdict("node9", "bad"));
        },
        "node_verdicts[3].host",
        "\"node9\" is not a node of this run",
    );
}

#[test]
fn a_nodes_missing_verdict_is_refused() {
    let d = tmpdir("admit-verdicts-missing");
    verdicts_refused(
        &d,
        "missing",
        |s| {
            s["node_verdicts"].as_array_mut().unwrap().remove(1);
        },
        "node_verdicts",
        "no verdict for node \"node1\"",
    );
}

#[test]
fn no_verdicts_where_the_probe_judged_the_nodes_is_refused() {
    let d = tmpdir("admit-verdicts-none");
    verdicts_refused(
        &d,
        "empty",
        |s| s["node_verdicts"] = serde_json::json!([]),
        "node_verdicts",
        "[], but the probe judged the run's 3 nodes",
    );
}

#[test]
fn a_null_verdict_list_is_refused() {
    let d = tmpdir("admit-verdicts-null");
    verdicts_refused(
        &d,
        "null",
        |s| s["node_verdicts"] = Value::Null,
        "node_verdicts",
        "null is not a list of node verdicts",
    );
}

#[test]
fn a_share_that_is_not_a_number_is_refused() {
    let d = tmpdir("admit-verdicts-nan");
    verdicts_refused(
        &d,
        "lowest",
        |s| s["node_verdicts"][2]["lowest_share"] = "NaN".into(),
        "node_verdicts[2].lowest_share",
        "\"NaN\" is not null or a finite share >= 0",
    );
    verdicts_refused(
        &d,
        "side",
        |s| {
            s["node_verdicts"][2]["slow_sides"] = serde_json::json!([{"nic": "eth1", "sending": true,
                "share": "NaN", "slow_sizes": 2, "judged_sizes": 2, "flows": 4, "peers": ["node0"],
                "peers_fast": 1}]);
        },
        "node_verdicts[2].slow_sides[0]",
        ".share is \"NaN\"",
    );
}

#[test]
fn an_unknown_decided_by_is_refused() {
    let d = tmpdir("admit-verdicts-decided");
    verdicts_refused(
        &d,
        "oracle",
        |s| s["node_verdicts"][2]["decided_by"] = "oracle".into(),
        "node_verdicts[2].decided_by",
        "\"oracle\" is not null or one of [\"probe\", \"partners\", \"cannot-separate\", \"finding\", \"failure\"]",
    );
}

/// results.csv's `plugin` or `abi` left empty beside a summary.json that names them: refused as
/// any other value that differs (before: an empty cell was not compared).
#[test]
fn an_empty_plugin_or_abi_cell_is_compared_with_summary_json() {
    let d = tmpdir("admit-plugin-empty");
    for (col, field) in [("plugin", "plugin.name"), ("abi", "plugin.abi")] {
        let run = copy_dir(&ring(), &d.join(col));
        map_cells(&run, |h, v| if h == col { String::new() } else { v.to_string() });
        let (code, out) = show(&run);
        assert_eq!(code, 3, "{col}: {out}");
        assert!(
            out.contains(&format!("summary.json: {field}: ")) && out.contains("says \"\""),
            "{col}: {out}"
        );
        let db = d.join(format!("{col}.sqlite"));
        let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&run)]);
        assert_eq!(code, 3, "{col}: {out}");
    }
}
