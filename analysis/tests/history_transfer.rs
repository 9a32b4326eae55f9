//! `history export` / `history import` between the backends (a team moving its history from a
//! file to a server): the same `history detect` output, to the byte, and the same export back;
//! a cut-off export is refused whole. And the report's axes, read from its SVG: busbw ticks at
//! round values, a date axis placing each run at its start time, counts in words that fit.

mod backends;
mod common;

use backends::Backend;
use common::{run_analyze, tmpdir, write_run, Spec};
use std::path::{Path, PathBuf};

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
