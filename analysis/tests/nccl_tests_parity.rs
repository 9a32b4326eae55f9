//! tcpx-perf's output, from real `mpirun` runs over the tcpx-emu plugin, read by what reads
//! nccl-tests' (issue 22): its table by position (`awk '{print $8}'`) and by header (the awk that
//! launch/vs-nccl-tests.sh runs on nccl-tests' own tables), tcpx-analyze's nccl-tests text and
//! JSON parsers, and the `-J` file by nccl-tests' `tools/analyze_perf_json.py` where a checkout
//! is at hand (`NCCL_TESTS=path`; nccl-tests is never shipped here). `NCCL_TESTS_MIN_BW` gates
//! the exit status as in nccl-tests.
//!
//! Needs `mpirun` and the release build of the workspace (`launch/build.sh`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tcpx_analyze::model::Family;
use tcpx_analyze::parse::{nccl_json, nccl_text, ParseOptions};

fn tcpx_perf() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_tcpx-analyze")).with_file_name("tcpx-perf");
    assert!(
        p.exists(),
        "{} missing: build the workspace first (bash launch/build.sh --all)",
        p.display()
    );
    p
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nccl-parity-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch");
    d
}

/// One real run of `np` ranks with `args` (a hang is killed by `timeout`).
fn run(np: usize, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "mpirun", "--oversubscribe", "--bind-to", "none"])
        .args([
            "--mca",
            "btl_vader_single_copy_mechanism",
            "none",
            "-np",
            &np.to_string(),
        ])
        .arg(tcpx_perf())
        .args([
            "-b",
            "64K",
            "-e",
            "1M",
            "-f",
            "4",
            "-n",
            "3",
            "-w",
            "1",
            "--progress",
            "never",
        ])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("NCCL_TESTS_MIN_BW");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("mpirun")
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `size_bytes -> busbw_gbps` from the run's results.csv.
fn csv_busbw(dir: &Path) -> HashMap<u64, f64> {
    let mut r = csv::Reader::from_path(dir.join("results.csv")).expect("results.csv");
    let h = r.headers().expect("header").clone();
    let col = |name: &str| h.iter().position(|c| c == name).expect(name);
    let (size, busbw) = (col("size_bytes"), col("busbw_gbps"));
    r.records()
        .map(|rec| {
            let rec = rec.expect("record");
            (rec[size].parse().expect("size"), rec[busbw].parse().expect("busbw"))
        })
        .collect()
}

/// Runs an awk program on `file`; its output lines split into fields.
fn awk(program: &str, file: &Path) -> Vec<Vec<String>> {
    let o = Command::new("awk").arg(program).arg(file).output().expect("awk");
    assert!(o.status.success(), "awk: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// A table cell (2 decimals, or fewer for large values) against the full-precision figure.
fn close(cell: &str, exact: f64) -> bool {
    cell.parse::<f64>()
        .is_ok_and(|v| (v - exact).abs() <= 0.0051 + exact * 1e-3)
}

/// nccl-tests' own `-J` reader, from a checkout named by `NCCL_TESTS` (not shipped here).
fn analyze_perf_json() -> Option<PathBuf> {
    let script = PathBuf::from(std::env::var_os("NCCL_TESTS")?).join("tools/analyze_perf_json.py");
    script.exists().then_some(script)
}

/// Where `value` breaks `schema` (the subset of JSON Schema that schemars writes: `$ref`, `type`,
/// `properties`/`required`/`additionalProperties`, `items`, `minItems`/`maxItems`, `anyOf`/`oneOf`,
/// `enum`, `const`, `minimum`).
fn schema_errors(
    root: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        return schema_errors(root, &root["$defs"][name], value, at, out);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let fits = alts.iter().filter(|a| {
                let mut e = Vec::new();
                schema_errors(root, a, value, at, &mut e);
                e.is_empty()
            });
            if fits.count() == 0 {
                out.push(format!("{at}: fits no alternative of {key}: {value}"));
            }
        }
    }
    if let Some(t) = schema.get("type") {
        let kinds: Vec<&str> = t.as_array().map_or_else(
            || vec![t.as_str().unwrap_or("")],
            |a| a.iter().filter_map(Value::as_str).collect(),
        );
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        if !kinds
            .iter()
            .any(|k| *k == kind || (*k == "number" && kind == "integer"))
        {
            out.push(format!("{at}: {kind} where the schema says {kinds:?}"));
            return;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(value) {
            out.push(format!("{at}: {value} not in {e:?}"));
        }
    }
    if let Some(c) = schema.get("const") {
        if c != value {
            out.push(format!("{at}: {value} is not {c}"));
        }
    }
    if let (Some(min), Some(v)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if v < min {
            out.push(format!("{at}: {v} below {min}"));
        }
    }
    if let Value::Object(o) = value {
        let props = schema.get("properties").and_then(Value::as_object);
        for req in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !o.contains_key(req.as_str().unwrap_or("")) {
                out.push(format!("{at}: required {req} missing"));
            }
        }
        for (k, v) in o {
            match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                (Some(s), _) | (None, Some(s)) if s.is_object() => schema_errors(root, s, v, &format!("{at}.{k}"), out),
                (None, Some(Value::Bool(false))) => out.push(format!("{at}: unexpected key {k}")),
                (None, None) if props.is_some() => out.push(format!("{at}: key {k} not in the schema")),
                _ => {}
            }
        }
    }
    if let Value::Array(a) = value {
        if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
            for (i, v) in a.iter().enumerate() {
                schema_errors(root, items, v, &format!("{at}[{i}]"), out);
            }
        }
        if let Some(prefix) = schema.get("prefixItems").and_then(Value::as_array) {
            for (i, (s, v)) in prefix.iter().zip(a).enumerate() {
                schema_errors(root, s, v, &format!("{at}[{i}]"), out);
            }
        }
        let n = a.len() as u64;
        if schema.get("minItems").and_then(Value::as_u64).is_some_and(|m| n < m)
            || schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| n > m)
        {
            out.push(format!("{at}: {n} items out of the schema's bounds"));
        }
    }
}

/// `file` against the committed schema `docs/schema/NAME`.
fn assert_fits_schema(name: &str, file: &Path) {
    let schema_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema").join(name);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_file).expect("schema")).expect("schema json");
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).expect("file")).expect("json");
    let mut errors = Vec::new();
    schema_errors(&schema, &schema, &value, "$", &mut errors);
    assert!(errors.is_empty(), "{} against {name}: {errors:#?}", file.display());
}

#[test]
fn nccl_tests_readers_read_tcpx_perfs_table_and_json() {
    let cases = [
        (2, "sendrecv", Family::Sendrecv, "sum"),
        (4, "fullmesh", Family::Alltoall, "none"),
        (4, "ring", Family::Allreduce, "sum"),
    ];
    for (np, pattern, family, redop) in cases {
        let dir = scratch(pattern);
        let json = dir.join("run.json");
        let out = dir.join("out");
        let o = run(
            np,
            &[
                "--pattern",
                pattern,
                "-J",
                json.to_str().expect("utf-8"),
                "--out",
                out.to_str().expect("utf-8"),
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let log = dir.join("stdout.log");
        std::fs::write(&log, &stdout).expect("log");
        let want = csv_busbw(&out);
        assert_eq!(want.len(), 3, "{}", show(&o));
        assert!(
            stdout.contains(&format!("# Collective test starting: {pattern}\n")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("# Collective test concluded: {pattern}\n")),
            "{stdout}"
        );

        // By position, as nccl-tests users do: $8 is busbw, $4 $5 redop and root.
        let rows = awk("!/^#/ && NF { print $1, $4, $5, $8 }", &log);
        assert_eq!(rows.len(), want.len(), "{stdout}");
        for r in &rows {
            let size: u64 = r[0].parse().expect("size");
            assert_eq!((r[1].as_str(), r[2].as_str()), (redop, "-1"), "{stdout}");
            assert!(
                close(&r[3], want[&size]),
                "{pattern} size {size}: $8 = {} vs busbw {}",
                r[3],
                want[&size]
            );
        }
        // By header, as launch/vs-nccl-tests.sh reads nccl-tests: the first `busbw` column.
        let by_header = awk(
            r#"!c && /^#/ && / busbw / { sub(/^#/, ""); for (i = 1; i <= NF; i++) if ($i == "busbw" && !c) c = i; next }
               c && $1 ~ /^[0-9]+$/ { print $1, $c }"#,
            &log,
        );
        assert_eq!(by_header.len(), want.len(), "{stdout}");
        for r in &by_header {
            assert!(
                close(&r[1], want[&r[0].parse().expect("size")]),
                "{pattern}: header busbw {r:?}"
            );
        }

        // The committed JSON Schemas (generated from the Rust types) describe the real files.
        assert_fits_schema("summary.schema.json", &out.join("summary.json"));
        assert_fits_schema("nccl-tests-json.schema.json", &json);

        // tcpx-analyze's nccl-tests parsers: the text and the -J file.
        let text = nccl_text::parse(log.to_str().expect("utf-8"), &stdout, &ParseOptions::default())
            .unwrap_or_else(|e| panic!("{pattern}: text: {e}"));
        let doc = std::fs::read_to_string(&json).expect("-J file");
        let from_json = nccl_json::parse("run.json", &doc, &ParseOptions::default())
            .unwrap_or_else(|e| panic!("{pattern}: -J: {e}"));
        for (what, parsed) in [("text", &text), ("-J", &from_json)] {
            assert_eq!(
                parsed.labels.get("tool").map(String::as_str),
                Some("tcpx-perf"),
                "{what}"
            );
            assert_eq!(parsed.series.len(), 1, "{what}");
            let s = &parsed.series[0];
            assert_eq!((s.pattern.as_str(), s.family), (pattern, Some(family)), "{what}");
            assert_eq!(s.rows.len(), want.len(), "{what}");
            for (size, row) in &s.rows {
                // results.csv's busbw has 6 significant digits; -J keeps the full figure.
                let tolerance = if what == "-J" {
                    1e-5 * want[size]
                } else {
                    0.0051 + want[size] * 1e-3
                };
                assert!(
                    (row.summary.busbw - want[size]).abs() <= tolerance,
                    "{pattern} {what} size {size}"
                );
                assert_eq!(row.wrong, Some(0.0), "{what}");
            }
        }
        if let Some(script) = analyze_perf_json() {
            let a = Command::new("python3")
                .arg(&script)
                .arg(&json)
                .arg("--all")
                .output()
                .expect("python3");
            let text = String::from_utf8_lossy(&a.stdout);
            assert!(
                a.status.success() && text.contains("PER-ITERATION STATS"),
                "{}\n{text}",
                script.display()
            );
        } else {
            eprintln!("note: NCCL_TESTS unset or without tools/analyze_perf_json.py: nccl-tests' own reader not run");
        }
    }
}

#[test]
fn nccl_tests_min_bw_sets_the_exit_status_as_nccl_tests() {
    let dir = scratch("min-bw");
    // Far above anything loopback does: FAILED, exit 7 (nccl-tests' testNumResults), -J says so.
    let json = dir.join("gate.json");
    let o = run(
        2,
        &["--no-out", "-J", json.to_str().expect("utf-8")],
        &[("NCCL_TESTS_MIN_BW", "100000")],
    );
    assert_eq!(o.status.code(), Some(7), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let avg = stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth"))
        .expect("footer");
    assert!(avg.ends_with(" FAILED"), "{avg}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("-J")).expect("json");
    assert_eq!(doc["average_bus_bandwidth"]["okay"], "false");
    // Far below: OK, exit 0.
    let o = run(2, &["--no-out"], &[("NCCL_TESTS_MIN_BW", "0.000001")]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("# Avg bus bandwidth") && l.ends_with(" OK")),
        "{stdout}"
    );
    // A value that is not a bandwidth: one usage line, exit 64 (nccl-tests' atof would make it 0).
    let o = run(2, &["--no-out"], &[("NCCL_TESTS_MIN_BW", "fast")]);
    assert_eq!(o.status.code(), Some(64), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("NCCL_TESTS_MIN_BW")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("tcpx-perf: usage error: NCCL_TESTS_MIN_BW=\"fast\""),
        "{err}"
    );
}
