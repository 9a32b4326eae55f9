//! `tcpx-analyze compare|gate` without `-B` on runs of `tcpx-perf --baseline nccl`: the
//! reference is NCCL of the same runs (results.csv's `nccl_*` columns, `nccl_samples.csv`).

mod common;
use common::run_analyze as analyze;
use common::*;
use std::path::{Path, PathBuf};

/// Adds what `--baseline nccl` writes to a result directory: NCCL `speedup` times as fast as
/// the run's own figures (schema 3 columns, `nccl_samples.csv` in both timings).
fn add_nccl(dir: &Path, speedup: f64) {
    let res = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let mut lines = res.lines();
    let header = lines.next().unwrap();
    let cols: Vec<&str> = header.split(',').collect();
    let at = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    // Schema 3 throughout (one schema version per directory): schema 2's bytes_verified_by,
    // then the nccl_* columns.
    let mut out = format!(
        "{header},bytes_verified_by,nccl_time_us,nccl_algbw_gbps,nccl_busbw_gbps,nccl_ratio,nccl_batch_time_us,nccl_batch_algbw_gbps,nccl_batch_busbw_gbps,nccl_wrong\n"
    );
    for l in lines {
        let v: Vec<&str> = l.split(',').collect();
        let f = |c: &str| v[at(c)].parse::<f64>().unwrap();
        let (t, a, b) = (
            f("time_us") / speedup,
            f("algbw_gbps") * speedup,
            f("busbw_gbps") * speedup,
        );
        let row = l.replacen("1,", "3,", 1);
        out += &format!(
            "{row},plugin,{t},{a},{b},{},{},{},{},0\n",
            1.0 / speedup,
            t * 0.9,
            a / 0.9,
            b / 0.9
        );
    }
    std::fs::write(dir.join("results.csv"), out).unwrap();
    for f in ["samples.csv", "pairs.csv"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        std::fs::write(dir.join(f), text.replace("\n1,", "\n3,")).unwrap();
    }
    let sum = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        sum.replace(r#""schema_version":1"#, r#""schema_version":3"#),
    )
    .unwrap();
    let samp = std::fs::read_to_string(dir.join("samples.csv")).unwrap();
    let mut ns = String::from("schema_version,pattern,size_bytes,timing,iter,time_us,algbw_gbps,busbw_gbps\n");
    for timing in ["barrier", "batch"] {
        for l in samp.lines().skip(1) {
            let v: Vec<&str> = l.split(',').collect();
            let t: f64 = v[4].parse::<f64>().unwrap() / speedup;
            let a: f64 = v[5].parse::<f64>().unwrap() * speedup;
            let b: f64 = v[6].parse::<f64>().unwrap() * speedup;
            ns += &format!("3,{},{},{timing},{},{t},{a},{b}\n", v[1], v[2], v[3]);
        }
    }
    std::fs::write(dir.join("nccl_samples.csv"), ns).unwrap();
}

/// `n` runs of the same machine with NCCL `speedup` times as fast in each.
fn runs(name: &str, n: usize, speedup: f64) -> Vec<PathBuf> {
    let top = tmpdir(name);
    (0..n)
        .map(|i| {
            let spec = Spec {
                seed: 10 + i as u64,
                ..Spec::default()
            };
            let d = write_run(&top.join(format!("r{i}")), &spec);
            add_nccl(&d, speedup);
            d
        })
        .collect()
}

fn strs(v: &[PathBuf]) -> Vec<&str> {
    v.iter().map(|p| p.to_str().unwrap()).collect()
}

#[test]
fn without_b_the_reference_is_nccl_of_the_same_runs() {
    let dirs = runs("same-run-equal", 5, 1.0);
    let mut a = vec!["gate"];
    a.extend(strs(&dirs));
    let (code, out) = analyze(&a);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("NCCL, same run"), "{out}");
}

#[test]
fn nccl_faster_in_the_same_runs_is_a_regression() {
    let dirs = runs("same-run-slow", 5, 1.25);
    let mut a = vec!["gate"];
    a.extend(strs(&dirs));
    let (code, out) = analyze(&a);
    assert_eq!(code, 1, "tcpx-perf 20% below NCCL of the same run: {out}");
}

#[test]
fn runs_without_nccl_figures_need_b() {
    let d = write_run(&tmpdir("same-run-none").join("r0"), &Spec::default());
    let (code, out) = analyze(&["compare", d.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}");
    assert!(out.contains("no -B given and the run has no NCCL figures"), "{out}");
}
