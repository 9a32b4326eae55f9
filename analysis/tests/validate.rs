//! The loader's consistency checks (issue 21, `src/validate.rs`) on tampered copies of real
//! tcpx-perf result directories (`tests/fixtures/tcpx-perf/`) and of a real nccl-tests log: each
//! tampering is refused by `gate` with exit 3 and one line naming the file, the row and the
//! field, while the untouched copy passes the same checks.

mod common;
use common::{run_analyze as analyze, tmpdir};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tcpx-perf")).join(name)
}

/// A fresh copy of a fixture directory.
fn copy(name: &str, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to.to_path_buf()
}

/// Replaces the `col` cell of data row `row` (1-based, after the header) of a CSV file.
fn set_cell(file: &Path, row: usize, col: &str, value: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines[0].split(',').position(|c| c == col).unwrap();
    let mut cells: Vec<String> = lines[row].split(',').map(str::to_string).collect();
    cells[at] = value.to_string();
    lines[row] = cells.join(",");
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
}

fn cell(file: &Path, row: usize, col: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines[0].split(',').position(|c| c == col).unwrap();
    lines[row].split(',').nth(at).unwrap().to_string()
}

fn edit_summary(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("summary.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Gate of `cand` against the untouched ring fixture: the exit status and the output.
fn gate(cand: &Path, extra: &[&str]) -> (i32, String) {
    let base = fixture("ring-2ranks-c1");
    let mut args = vec!["gate", s(cand), "-B", s(&base)];
    args.extend_from_slice(extra);
    analyze(&args)
}

/// Exit 3 with one error line that names `file_and_row` and `field`.
fn assert_refused(out: (i32, String), file_and_row: &str, field: &str) {
    let (code, text) = out;
    assert_eq!(code, 3, "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("tcpx-analyze:")).collect();
    assert_eq!(lines.len(), 1, "one line: {text}");
    assert!(
        lines[0].contains(file_and_row) && lines[0].contains(&format!(": {field}: ")),
        "expected {file_and_row} and {field} in: {text}"
    );
}

/// A copy that another commit's build measured with the same figures: not a copy of one run
/// (`admit::same_run` compares provenance), so it may stand against the untouched fixture.
fn another_commit(dir: &Path) {
    edit_summary(dir, |v| v["tool"]["git_commit"] = "0123456789ab".into());
}

#[test]
fn the_untouched_real_run_passes_the_checks() {
    let d = copy("ring-2ranks-c1", &tmpdir("valid-ok").join("r"));
    let (code, out) = analyze(&["show", s(&d)]);
    assert_eq!(code, 0, "{out}");
    // Against itself (issue 34): refused as a run compared with itself, not judged.
    let (code, out) = gate(&d, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("the same run on both sides"), "{out}");
    // Another run with those figures: one run per side, inconclusive (2), never invalid (3).
    another_commit(&d);
    let (code, out) = gate(&d, &[]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn busbw_that_size_and_time_cannot_give_is_refused() {
    let d = copy("ring-2ranks-c1", &tmpdir("valid-busbw").join("r"));
    set_cell(&d.join("results.csv"), 1, "busbw_gbps", "1e308");
    assert_refused(gate(&d, &[]), "results.csv:2", "busbw_gbps");
    let d = copy("ring-2ranks-c1", &tmpdir("valid-algbw").join("r"));
    // 1% off: far beyond the rounding of a figure printed with 16 digits.
    let a: f64 = cell(&d.join("results.csv"), 3, "algbw_gbps").parse().unwrap();
    set_cell(&d.join("results.csv"), 3, "algbw_gbps", &format!("{}", a * 1.01));
    assert_refused(gate(&d, &[]), "results.csv:4", "algbw_gbps");
}

#[test]
fn samples_whose_mean_is_not_the_results_time_are_refused() {
    let d = copy("ring-2ranks-c1", &tmpdir("valid-samples").join("r"));
    // A consistent sample (bandwidths recomputed from its new time) that moves the mean.
    let f = d.join("samples.csv");
    let size: f64 = cell(&f, 1, "size_bytes").parse().unwrap();
    let t: f64 = cell(&f, 1, "time_us").parse::<f64>().unwrap() * 0.5;
    let bw = size / t / 1e3;
    set_cell(&f, 1, "time_us", &t.to_string());
    set_cell(&f, 1, "algbw_gbps", &bw.to_string());
    set_cell(&f, 1, "busbw_gbps", &bw.to_string());
    assert_refused(gate(&d, &[]), "samples.csv", "time_us");
    // A sample whose bandwidth its own time cannot give.
    let d = copy("ring-2ranks-c1", &tmpdir("valid-sample-bw").join("r"));
    set_cell(&d.join("samples.csv"), 2, "busbw_gbps", "99");
    assert_refused(gate(&d, &[]), "samples.csv:3", "busbw_gbps");
}

#[test]
fn mixed_and_unknown_schema_versions_are_refused() {
    let d = copy("ring-2ranks-c1", &tmpdir("valid-schema").join("r"));
    set_cell(&d.join("results.csv"), 2, "schema_version", "2");
    set_cell(&d.join("results.csv"), 3, "schema_version", "1");
    assert_refused(gate(&d, &[]), "results.csv:3", "schema_version");
    let d = copy("ring-2ranks-c1", &tmpdir("valid-schema-samples").join("r"));
    set_cell(&d.join("samples.csv"), 4, "schema_version", "1");
    assert_refused(gate(&d, &[]), "samples.csv:5", "schema_version");
    let d = copy("ring-2ranks-c1", &tmpdir("valid-schema-99").join("r"));
    edit_summary(&d, |v| v["schema_version"] = 99.into());
    assert_refused(gate(&d, &[]), "summary.json", "schema_version");
}

#[test]
fn a_summary_that_contradicts_the_csv_files_is_refused() {
    let d = copy("ring-2ranks-c1", &tmpdir("valid-pattern").join("r"));
    edit_summary(&d, |v| v["pattern"] = "fullmesh".into());
    assert_refused(gate(&d, &[]), "results.csv:2", "pattern");
    let d = copy("ring-2ranks-c1", &tmpdir("valid-scope").join("r"));
    edit_summary(&d, |v| v["scope"] = "inter-node".into());
    assert_refused(gate(&d, &[]), "results.csv:2", "scope");
    let d = copy("ring-2ranks-c1", &tmpdir("valid-sizes").join("r"));
    edit_summary(&d, |v| {
        v["results"].as_array_mut().unwrap().pop();
    });
    assert_refused(gate(&d, &[]), "results.csv:4", "size_bytes");
}

#[test]
fn copies_of_one_run_are_refused() {
    let top = tmpdir("valid-copies");
    for i in 0..5 {
        copy("ring-2ranks-c1", &top.join(format!("copy{i}")));
    }
    let (code, out) = gate(&top, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("copy1: content: every figure equals those of") && out.contains("same start_time"),
        "{out}"
    );
    // Given one by one, too.
    let (code, out) = analyze(&[
        "gate",
        s(&top.join("copy0")),
        s(&top.join("copy3")),
        "-B",
        s(&fixture("ring-2ranks-c1")),
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("copy3: content:"), "{out}");
}

#[test]
fn nccl_tests_error_column_beyond_the_tolerance_is_refused() {
    // A real pre-2.13 log (16 ranks, float): errors up to 5e-07, below 1e-5 x 15.
    let src = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/wild"))
        .join("aws_efa_eks_tag_output_error_column.log");
    let text = std::fs::read_to_string(&src).unwrap();
    let d = tmpdir("valid-nccl-error");
    let ok = d.join("ok_all_reduce.log");
    std::fs::write(&ok, &text).unwrap();
    let (code, out) = analyze(&["show", s(&ok)]);
    assert_eq!(code, 0, "{out}");
    // The same log with one in-place error of 3e+02 (the last column of the 1 MiB row).
    let row = text
        .lines()
        .find(|l| l.split_whitespace().any(|t| t == "1048576"))
        .unwrap();
    let last = row.split_whitespace().last().unwrap();
    let bad_row = format!("{}3e+02", &row[..row.len() - last.len()]);
    let bad = d.join("bad_all_reduce.log");
    std::fs::write(&bad, text.replacen(row, &bad_row, 1)).unwrap();
    let (code, out) = analyze(&["show", s(&bad)]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(
            "bad_all_reduce.log: row of size 1048576: error: 3e2 exceeds nccl-tests' tolerance for float over 16 ranks"
        ),
        "{out}"
    );
}

#[test]
fn runs_needed_refuses_a_spread_that_is_no_fraction() {
    for bad in ["nan", "-0.1", "0", "inf"] {
        let (code, out) = analyze(&["runs-needed", &format!("--spread={bad}")]);
        assert_eq!(code, 64, "--spread {bad}: {out}");
        assert!(out.contains("--spread") && !out.contains("runs per side"), "{out}");
    }
    let (code, out) = analyze(&["runs-needed", "--spread", "0.05"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn unchecked_runs_are_refused_unless_allowed_and_the_verdict_says_so() {
    let d = tmpdir("valid-unchecked");
    let c0 = copy("sendrecv-2ranks-c0", &d.join("c0"));
    let reference = copy("sendrecv-2ranks-c0", &d.join("ref"));
    // Make the reference a checked run of the same shape (wrong = 0).
    for row in 1..=3 {
        set_cell(&reference.join("results.csv"), row, "wrong", "0");
    }
    // ... in summary.json too, which must agree with results.csv.
    let sum = reference.join("summary.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&sum).unwrap()).unwrap();
    for r in v["results"].as_array_mut().unwrap() {
        r["wrong"] = 0.into();
    }
    v["check"] = true.into();
    std::fs::write(&sum, v.to_string()).unwrap();
    another_commit(&reference);
    let (code, out) = analyze(&["gate", s(&c0), "-B", s(&reference)]);
    assert_refused((code, out.clone()), "c0/results.csv:2", "size 1048576 (sendrecv)");
    assert!(
        out.contains("witness: wire, a lower bound") && out.contains("--allow-unchecked"),
        "{out}"
    );
    let json = d.join("v.json");
    let (code, out) = analyze(&[
        "gate",
        s(&c0),
        "-B",
        s(&reference),
        "--allow-unchecked",
        "--json",
        s(&json),
    ]);
    assert_eq!(code, 2, "one run each: inconclusive\n{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["verdict"].as_str().unwrap().contains("UNCHECKED runs allowed"), "{v}");
    assert!(out.contains("UNCHECKED run allowed by --allow-unchecked"), "{out}");
    // An unchecked reference run is refused as well.
    let (code, out) = analyze(&["gate", s(&reference), "-B", s(&c0)]);
    assert_eq!(code, 3, "{out}");

    // make-baseline: refused, or written with the label.
    let base = d.join("b.toml");
    let (code, out) = analyze(&["make-baseline", s(&c0), "--name", "x", "-o", s(&base)]);
    assert_eq!(code, 3, "{out}");
    assert!(!base.exists());
    let (code, out) = analyze(&[
        "make-baseline",
        s(&c0),
        "--name",
        "x",
        "-o",
        s(&base),
        "--allow-unchecked",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(std::fs::read_to_string(&base).unwrap().contains("UNCHECKED"));

    // What tcpx-perf will write for such runs: status "unchecked", per size verified = false.
    let st = copy("ring-2ranks-c1", &d.join("status"));
    edit_summary(&st, |v| v["status"] = "unchecked".into());
    another_commit(&st);
    assert_refused(gate(&st, &[]), "summary.json", "status is \"unchecked\"");
    let (code, out) = gate(&st, &["--allow-unchecked"]);
    assert_eq!(code, 2, "{out}");
    let ver = copy("ring-2ranks-c1", &d.join("verified"));
    edit_summary(&ver, |v| v["results"][1]["verified"] = false.into());
    assert_refused(
        gate(&ver, &[]),
        "summary.json: results[1] (size 2097152)",
        "verified is false",
    );
}
