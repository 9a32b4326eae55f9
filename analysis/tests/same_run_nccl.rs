//! `tcpx-analyze compare|gate` without `-B` on runs of `tcpx-perf --baseline nccl`: the
//! reference is NCCL of the same runs (results.csv's `nccl_*` columns, `nccl_samples.csv`).

mod common;
use common::run_analyze as analyze;
use common::*;
use std::path::PathBuf;

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
