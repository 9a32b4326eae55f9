//! `history export` / `history import` between the backends (a team moving its history from a
//! file to a server): the same `history detect` output, to the byte, and the same export back;
//! a cut-off export is refused whole. An export is text anyone can edit (issue 53): import admits
//! each run as `history add` does, reads the header's schema version, imports concatenated
//! exports whole, bounds standard input and never writes the database it reads. And the report's
//! axes, read from its SVG: busbw ticks at round values, a date axis placing each run at its
//! start time, counts in words that fit.

mod backends;
mod common;

use backends::Backend;
use common::{edit_summary_json, hosts_json, node_verdict, run_analyze, run_analyze_within, tmpdir, write_run, Spec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A history with something in it: 16 runs of one configuration a day apart with a 15% step at
/// the ninth, node verdicts on two of them, the 12 real runs of another, and an nccl-tests log.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let step = dir.join("step");
    for i in 0..16u64 {
        let run = write_run(
            &step.join(format!("run{i:02}")),
            &Spec {
                seed: 100 + i,
                scale: if i < 8 { 1.0 } else { 0.85 },
                ..Spec::default()
            },
        );
        let path = run.join("summary.json");
        let mut sum: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        sum["start_time"] = serde_json::json!(format!("2026-11-{:02}T05:{:02}:00Z", 5 + i, 7 * i % 60));
        if i % 8 == 3 {
            // Verdicts are for the run's own nodes (admission refuses others).
            sum["hosts"] = common::hosts_json(&["node1", "node2"]);
            sum["node_verdicts"] = serde_json::json!([
                {"host": "node1", "verdict": "healthy", "evidence": "-"},
                {"host": "node2", "verdict": "suspect", "evidence": format!("slow in run {i}")}
            ]);
        }
        std::fs::write(&path, serde_json::to_string(&sum).unwrap()).unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        step,
        root.join("tests/runs/ci-sendrecv-identical"),
        root.join("tests/fixtures/nccl-tests/nccl_sendrecv_socket_np4.txt"),
    ]
}

fn detect(db: &str) -> (String, String) {
    let (code, table) = run_analyze(&["history", "detect", "--db", db]);
    assert!(code == 0 || code == 1, "{table}");
    let (_, json) = run_analyze(&["history", "detect", "--db", db, "--json"]);
    (table, json)
}

fn export(db: &str, out: &Path) -> String {
    let (code, msg) = run_analyze(&["history", "export", "--db", db, "-o", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{msg}");
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn export_from_sqlite_and_import_elsewhere_give_the_same_detect_output() {
    let dir = tmpdir("history-transfer");
    let source = Backend::Sqlite.fresh(&dir, "source");
    for input in inputs(&dir) {
        let (code, out) = run_analyze(&[
            "history",
            "add",
            "--db",
            &source,
            "--start-time",
            "2026-11-01T00:00:00Z",
            input.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}");
    }
    let want = detect(&source);
    assert!(want.0.contains("REGRESSION"), "the step is found: {}", want.0);
    let file = dir.join("history.jsonl");
    let text = export(&source, &file);
    assert_eq!(text.lines().count(), 2 + 29, "a header, 29 runs, the closing line");
    for b in backends::all() {
        let db = b.fresh(&dir, "transfer-target");
        let (code, out) = run_analyze(&["history", "import", "--db", &db, file.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(": 29 runs imported, 0 already stored, 29 in all"), "{out}");
        let got = detect(&db);
        assert_eq!(got.0, want.0, "{}: detect's table differs", b.name());
        assert_eq!(got.1, want.1, "{}: detect's JSON differs", b.name());
        // Exported again: the same file (ids, figures to the bit, provenance, verdicts).
        assert_eq!(
            export(&db, &dir.join(format!("again-{}.jsonl", b.name()))),
            text,
            "{}",
            b.name()
        );
        let (_, nodes) = run_analyze(&["history", "nodes", "--db", &db]);
        assert!(nodes.contains("node2") && nodes.contains("slow in run 11"), "{nodes}");
        // Again: nothing new.
        let (code, out) = run_analyze(&["history", "import", "--db", &db, file.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(": 0 runs imported, 29 already stored, 29 in all"), "{out}");
        println!("{}: 29 runs imported, detect identical", b.name());
    }
    // Through a pipe, as docs/ci-gating.md shows it.
    let piped = Backend::Sqlite.fresh(&dir, "piped");
    let shell = format!(
        "{bin} history export --db {source} -o - | {bin} history import --db {piped} -",
        bin = env!("CARGO_BIN_EXE_tcpx-analyze")
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &shell])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(detect(&piped), want);
    // A cut-off file is refused whole, before the database is made.
    let cut = dir.join("cut.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&cut, lines[..lines.len() - 1].join("\n")).unwrap();
    let never = Backend::Sqlite.fresh(&dir, "never");
    let (code, out) = run_analyze(&["history", "import", "--db", &never, cut.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cut off after 29 run(s)"), "{out}");
    assert!(!Path::new(&never).exists(), "a refused import made the database");
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let k = format!(" {name}=\"");
    let i = tag.find(&k)? + k.len();
    Some(&tag[i..i + tag[i..].find('"')?])
}

/// The elements `<NAME ...>TEXT<` of class `class` in `svg`: (the tag, its text).
fn elements<'a>(svg: &'a str, name: &str, class: &str) -> Vec<(&'a str, &'a str)> {
    let open = format!("<{name} class=\"{class}\"");
    svg.match_indices(&open)
        .map(|(i, _)| {
            let rest = &svg[i..];
            let end = rest.find('>').unwrap();
            let body = &rest[end + 1..];
            (&rest[..end], &body[..body.find('<').unwrap()])
        })
        .collect()
}

fn num(tag: &str, name: &str) -> f64 {
    attr(tag, name).unwrap().parse().unwrap()
}

fn seconds(t: &str) -> f64 {
    tcpx_analyze::history::axis::parse_time(t).unwrap_or_else(|| panic!("not a time: {t}"))
}

#[test]
fn the_report_has_round_ticks_and_a_date_axis() {
    let dir = tmpdir("history-report-axes");
    let db = Backend::Sqlite.fresh(&dir, "axes");
    let step = inputs(&dir).remove(0);
    assert_eq!(
        run_analyze(&["history", "add", "--db", &db, step.to_str().unwrap()]).0,
        0
    );
    let page = dir.join("report.html");
    let (code, out) = run_analyze(&["history", "report", "--db", &db, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("(8 series, "), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("16 runs, 1 configuration, 8 series from"),
        "counts in words"
    );
    let charts: Vec<&str> = html.split("<svg class=\"chart\"").skip(1).collect();
    assert_eq!(charts.len(), 8);
    for chart in charts {
        let svg = &chart[..chart.find("</svg>").unwrap()];
        let ymax = num(&format!(" {}", &svg[..svg.find('>').unwrap()]), "data-ymax");
        // busbw: 0, then equal steps of 1, 2 or 5 times a power of ten, the top one a tick.
        let y: Vec<(f64, f64, &str)> = elements(svg, "text", "ytick")
            .into_iter()
            .map(|(tag, label)| (num(tag, "data-value"), num(tag, "y"), label))
            .collect();
        assert!(y.len() >= 3, "{y:?}");
        let step = y[1].0;
        let mantissa = step / 10f64.powf(step.log10().floor());
        assert!(
            [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
            "step {step}"
        );
        for (k, (v, _, label)) in y.iter().enumerate() {
            assert!((v - step * k as f64).abs() < 1e-9 * step, "{y:?}");
            assert!(
                (label.parse::<f64>().unwrap() - v).abs() < 1e-9 * step,
                "label {label} for {v}"
            );
            assert!(!label.contains('e') && label.len() <= 6, "label {label}");
        }
        assert_eq!(y.last().unwrap().0, ymax);
        // Time: each tick a round instant labelled with its date; each run at its start time.
        let x: Vec<(f64, f64, &str)> = elements(svg, "text", "xtick")
            .into_iter()
            .map(|(tag, label)| (seconds(attr(tag, "data-time").unwrap()), num(tag, "x"), label))
            .collect();
        assert!(x.len() >= 3, "{x:?}");
        for (t, _, label) in &x {
            assert_eq!(*t % 86_400.0, 0.0, "a tick at midnight UTC: {label}");
            assert_eq!(
                *label,
                &tcpx_analyze::history::model::rfc3339(*t as i64)[..10],
                "labelled as its date"
            );
        }
        let (t0, x0, _) = x[0];
        let (t1, x1, _) = x[x.len() - 1];
        let at = |t: f64| x0 + (t - t0) * (x1 - x0) / (t1 - t0);
        let points = elements(svg, "circle", "pt");
        assert_eq!(points.len(), 16);
        for (tag, _) in points {
            let t = seconds(attr(tag, "data-time").unwrap());
            assert!(
                (num(tag, "cx") - at(t)).abs() < 0.01,
                "a point off its start time: {tag}"
            );
        }
    }
}

/// A history of `n` runs (write_run, seeds from `seed`; the first judged on its two nodes, as
/// tcpx-perf writes verdicts after a probe), each added by `history add` (`--allow-unchecked`
/// and without a data check where `unchecked`): the database and its export's lines.
fn exported(dir: &Path, tag: &str, n: u64, seed: u64, unchecked: bool) -> (String, Vec<String>) {
    let db = Backend::Sqlite.fresh(dir, tag);
    for i in 0..n {
        let run = write_run(
            &dir.join(format!("{tag}-run{i}")),
            &Spec {
                seed: seed + i,
                wrong: if unchecked { None } else { Some(0) },
                ..Spec::default()
            },
        );
        if i == 0 {
            edit_summary_json(&run, |s| {
                s["hosts"] = hosts_json(&["node1", "node2"]);
                s["node_verdicts"] =
                    serde_json::json!([node_verdict("node1", "healthy"), node_verdict("node2", "bad")]);
            });
        }
        let mut args = vec!["history", "add", "--db", &db, run.to_str().unwrap()];
        if unchecked {
            args.push("--allow-unchecked");
        }
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 0, "{out}");
    }
    let text = export(&db, &dir.join(format!("{tag}.jsonl")));
    (db, text.lines().map(str::to_string).collect())
}

/// `lines` with line `at` (0: the header, 1: the first run) edited as JSON by `edit`, written to
/// `file`.
fn edited(file: &Path, lines: &[String], at: usize, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut lines = lines.to_vec();
    let mut v: Value = serde_json::from_str(&lines[at]).unwrap();
    edit(&mut v);
    lines[at] = serde_json::to_string(&v).unwrap();
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
    file.to_path_buf()
}

/// Imports `file` into a new SQLite history: refused (exit 3, one line saying `why`), and no
/// database made. Before issue 53 each of these was stored as the line said.
fn refused_import(dir: &Path, file: &Path, why: &str) {
    let db = Backend::Sqlite.fresh(dir, "refused");
    let (code, out) = run_analyze(&["history", "import", "--db", &db, file.to_str().unwrap()]);
    assert_eq!(code, 3, "{}: {out}", file.display());
    assert!(out.contains(why), "{}: wants {why:?}: {out}", file.display());
    assert_eq!(out.trim_end().lines().count(), 1, "one line: {out}");
    assert!(!Path::new(&db).exists(), "a refused import made the database");
}

#[test]
fn import_refuses_wrong_data() {
    let dir = tmpdir("import-wrong");
    let (_, lines) = exported(&dir, "wrong", 1, 300, false);
    let f = edited(&dir.join("wrong.jsonl"), &lines, 1, |r| {
        r["series"][0]["rows"][2]["wrong"] = 8.0.into();
    });
    refused_import(&dir, &f, "wrong data (#wrong = 8)");
}

#[test]
fn import_refuses_a_failed_status() {
    let dir = tmpdir("import-status");
    let (_, lines) = exported(&dir, "status", 1, 310, false);
    let f = edited(&dir.join("failed.jsonl"), &lines, 1, |r| r["status"] = "failed".into());
    refused_import(&dir, &f, "run status is \"failed\"");
    // A status only a flag admits, without its mark.
    let f = edited(&dir.join("below.jsonl"), &lines, 1, |r| {
        r["status"] = "below-min-bw".into();
    });
    refused_import(&dir, &f, "a BELOW-MIN-BW run, but its line's allowed is null");
}

#[test]
fn import_refuses_negative_or_inconsistent_figures() {
    let dir = tmpdir("import-figures");
    let (_, lines) = exported(&dir, "figures", 1, 320, false);
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 4] = [
        (
            "negative",
            |r| r["series"][0]["rows"][0]["summary"][2] = (-1.0).into(),
            "every figure finite and >= 0",
        ),
        (
            "busbw",
            |r| {
                let b = r["series"][0]["rows"][1]["summary"][2].as_f64().unwrap();
                r["series"][0]["rows"][1]["summary"][2] = (2.0 * b).into();
            },
            "busbw",
        ),
        (
            "algbw",
            |r| {
                let t = r["series"][0]["rows"][3]["summary"][0].as_f64().unwrap();
                r["series"][0]["rows"][3]["summary"][0] = (t / 2.0).into();
            },
            "the figures contradict each other",
        ),
        (
            "sample",
            |r| r["series"][0]["rows"][0]["samples"][4][0] = 0.0.into(),
            "a sample",
        ),
    ];
    for (name, edit, why) in cases {
        let f = edited(&dir.join(format!("{name}.jsonl")), &lines, 1, edit);
        refused_import(&dir, &f, why);
    }
}

#[test]
fn import_refuses_unknown_verdicts() {
    let dir = tmpdir("import-verdicts");
    let (_, lines) = exported(&dir, "verdicts", 1, 330, false);
    assert!(lines[1].contains("node2"), "the run has its verdicts: {}", lines[1]);
    let f = edited(&dir.join("excellent.jsonl"), &lines, 1, |r| {
        r["nodes"][1]["verdict"] = "excellent".into();
    });
    refused_import(&dir, &f, "is not one of [\"healthy\", \"suspect\", \"bad\"]");
    // A host the run did not run on, or one that forges a row of `history nodes`.
    let f = edited(&dir.join("elsewhere.jsonl"), &lines, 1, |r| {
        r["nodes"][1]["host"] = "node1\nnode7".into();
    });
    refused_import(&dir, &f, "node_verdicts[1].host");
}

#[test]
fn import_finds_a_copy_under_a_new_content_sha256() {
    let dir = tmpdir("import-copy");
    let (_, lines) = exported(&dir, "copy", 1, 340, false);
    let original = dir.join("original.jsonl");
    std::fs::write(&original, lines.join("\n") + "\n").unwrap();
    let copy = edited(&dir.join("copy.jsonl"), &lines, 1, |r| {
        r["provenance"]["content_sha256"] = "ab".repeat(32).into();
    });
    for b in backends::all() {
        let db = b.fresh(&dir, "copy-target");
        let (code, out) = run_analyze(&["history", "import", "--db", &db, original.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        let (code, out) = run_analyze(&["history", "import", "--db", &db, copy.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("is stored run 1, the same run"), "{}: {out}", b.name());
        assert!(
            out.contains(": 0 runs imported, 1 already stored, 1 in all"),
            "{}: {out}",
            b.name()
        );
    }
}

#[test]
fn import_needs_the_marks_a_runs_own_evidence_needs() {
    let dir = tmpdir("import-marks");
    let (_, lines) = exported(&dir, "unchecked", 2, 350, true);
    assert!(lines[1].contains(r#""allowed":"UNCHECKED""#), "{}", lines[1]);
    // As exported: imported with its mark, which a gate against the history then needs.
    let whole = dir.join("whole.jsonl");
    std::fs::write(&whole, lines.join("\n") + "\n").unwrap();
    let db = Backend::Sqlite.fresh(&dir, "marked");
    let (code, out) = run_analyze(&["history", "import", "--db", &db, whole.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        export(&db, &dir.join("again.jsonl")),
        std::fs::read_to_string(&whole).unwrap()
    );
    // `"allowed": null` on a run without a data check: refused, not stored unmarked.
    let f = edited(&dir.join("unmarked.jsonl"), &lines, 1, |r| r["allowed"] = Value::Null);
    refused_import(&dir, &f, "a UNCHECKED run, but its line's allowed is null");
    let f = edited(&dir.join("unknown.jsonl"), &lines, 1, |r| {
        r["allowed"] = "TRUSTED".into();
    });
    refused_import(&dir, &f, "allowed names \"TRUSTED\", not a mark");
    // A checked run's export says nothing of the kind, and round-trips as it did.
    let (_, checked) = exported(&dir, "checked", 1, 360, false);
    assert!(checked[1].contains(r#""allowed":null"#) && !checked[1].contains("verified"));
}

#[test]
fn import_reads_the_headers_schema_version() {
    let dir = tmpdir("import-schema");
    let (_, lines) = exported(&dir, "schema", 1, 370, false);
    let f = edited(&dir.join("newer.jsonl"), &lines, 0, |h| h["schema_version"] = 99.into());
    refused_import(&dir, &f, "schema version 99 (this tcpx-analyze reads 1 to ");
}

#[test]
fn concatenated_exports_are_imported_whole_or_refused() {
    let dir = tmpdir("import-concat");
    let (_, nine) = exported(&dir, "nine", 9, 400, false);
    let (_, one) = exported(&dir, "one", 1, 500, false);
    let (e9, e1) = (dir.join("e9.jsonl"), dir.join("e1.jsonl"));
    std::fs::write(&e9, nine.join("\n") + "\n").unwrap();
    std::fs::write(&e1, one.join("\n") + "\n").unwrap();
    let bin = env!("CARGO_BIN_EXE_tcpx-analyze");
    for b in backends::all() {
        let db = b.fresh(&dir, "concat-target");
        let o = Command::new("bash")
            .args([
                "-c",
                &format!(
                    "cat {} {} | {bin} history import --db \"$1\" -",
                    e9.display(),
                    e1.display()
                ),
                "import",
                &db,
            ])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            out.contains(": 10 runs imported, 0 already stored, 10 in all"),
            "{}: {out}",
            b.name()
        );
    }
    // Anything but another export after a closing line: refused whole.
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, nine.join("\n") + "\n" + &one[1] + "\n").unwrap();
    refused_import(&dir, &junk, "comes no header of another export");
}

#[test]
fn standard_input_is_bounded_as_a_file_is() {
    let dir = tmpdir("import-stdin");
    let db = Backend::Sqlite.fresh(&dir, "stdin");
    let args = ["history", "import", "--db", &db, "-"];
    // `- < /dev/zero`: a device, refused before a byte is read (it grew 7 GB in 24 s).
    let zero = Stdio::from(std::fs::File::open("/dev/zero").unwrap());
    let (code, out, took) = run_analyze_within(&args, zero, Duration::from_secs(10));
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("standard input is a character device"), "{out}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The same endless bytes through a pipe: refused after the bound of a header line.
    let mut cat = Command::new("cat")
        .arg("/dev/zero")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = Stdio::from(cat.stdout.take().unwrap());
    let (code, out, took) = run_analyze_within(&args, pipe, Duration::from_secs(10));
    let _ = cat.kill();
    let _ = cat.wait();
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("no line break in the first 65536 bytes"), "{out}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(out.trim_end().lines().count(), 1, "{out}");
    assert!(!Path::new(&db).exists(), "a refused import made the database");
}

#[test]
fn export_and_import_never_write_the_database_they_read() {
    let dir = tmpdir("export-into-itself");
    let (db, _) = exported(&dir, "self", 1, 600, false);
    let before = std::fs::read(&db).unwrap();
    let bin = env!("CARGO_BIN_EXE_tcpx-analyze");
    for (cmd, why) in [
        (
            format!("{bin} history export --db \"$1\" -o - >> \"$1\""),
            "standard output is",
        ),
        (
            format!("{bin} history import --db \"$1\" - < \"$1\""),
            "standard input is",
        ),
    ] {
        let o = Command::new("bash").args(["-c", &cmd, "sh", &db]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {err}");
        assert!(err.contains(why) && err.contains("the database this"), "{cmd}: {err}");
        assert_eq!(std::fs::read(&db).unwrap(), before, "{cmd} changed the database");
    }
    let (code, out) = run_analyze(&["history", "detect", "--db", &db]);
    assert!(code == 0 || code == 1, "the database still reads: {out}");
}
