//! End-to-end tests of `tcpx-analyze` (binary): verdicts and exit codes.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpx-analyze"))
        .args(args)
        .output()
        .expect("run tcpx-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn p(x: &Path) -> &str {
    x.to_str().unwrap()
}

fn gate(cand: &Path, base: &Path, extra: &[&str]) -> (i32, String) {
    let mut a = vec!["gate", p(cand), "--baseline", p(base), "--resamples", "2000"];
    a.extend_from_slice(extra);
    run(&a)
}

#[test]
fn identical_runs_pass() {
    let d = tmpdir("identical");
    let a = write_run(&d.join("a"), &Spec::default());
    let (code, out) = gate(&a, &a, &["--metric", "busbw,algbw,time"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PASS"), "{out}");
    // Two independent runs with the same distribution also pass.
    let b = write_run(
        &d.join("b"),
        &Spec {
            seed: 99,
            ..Spec::default()
        },
    );
    let (code, out) = gate(&b, &a, &[]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn scaled_by_0_8_is_a_regression() {
    let d = tmpdir("scaled");
    let base = write_run(&d.join("base"), &Spec::default());
    let cand = write_run(
        &d.join("cand"),
        &Spec {
            scale: 0.8,
            seed: 7,
            ..Spec::default()
        },
    );
    let json = d.join("verdict.json");
    let md = d.join("summary.md");
    let (code, out) = gate(
        &cand,
        &base,
        &["--metric", "busbw,time", "--json", p(&json), "--markdown", p(&md)],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("**REGRESSION**"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["verdict"], "regression");
    let comps = v["comparisons"].as_array().unwrap();
    assert_eq!(comps.len(), 14);
    for c in comps {
        assert_eq!(c["verdict"], "regression", "{c}");
        let r = c["ratio"].as_f64().unwrap();
        match c["metric"].as_str().unwrap() {
            "busbw" => assert!((r - 0.8).abs() < 0.03, "{r}"),
            "time" => assert!((r - 1.25).abs() < 0.05, "{r}"),
            m => panic!("{m}"),
        }
    }
    assert!(std::fs::read_to_string(&md).unwrap().contains("REGRESSION"));
    // The same data against a 30% threshold is not a regression (and the CI clears 0.7).
    let (code, out) = gate(&cand, &base, &["--threshold", "0.3"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn two_samples_are_inconclusive() {
    let d = tmpdir("two");
    let s = Spec {
        iters: 2,
        ..Spec::default()
    };
    let base = write_run(&d.join("base"), &s);
    let cand = write_run(&d.join("cand"), &Spec { seed: 5, ..s });
    let (code, out) = gate(&cand, &base, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("too few samples"), "{out}");
    // Relaxed explicitly:
    let (code, _) = gate(&cand, &base, &["--allow-inconclusive"]);
    assert_eq!(code, 0);
    // Even a 20% drop with 2 samples is not called a regression.
    let cand2 = write_run(
        &d.join("cand2"),
        &Spec {
            scale: 0.8,
            iters: 2,
            ..Spec::default()
        },
    );
    let (code, out) = gate(&cand2, &base, &[]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn baseline_over_another_size_range_is_refused() {
    let d = tmpdir("range");
    // A ring run over 1 MiB..1 GiB against the A3 mean over 1 KiB..1 GiB.
    let sizes: Vec<u64> = (20..=30).map(|k| 1u64 << k).collect();
    let ring = write_run(
        &d.join("ring"),
        &Spec {
            pattern: "ring",
            sizes,
            ranks: 16,
            ..Spec::default()
        },
    );
    let a3 = baselines().join("a3high-nccl-tcpx-allreduce.toml");
    let (code, out) = gate(&ring, &a3, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("mean over a different size range"), "{out}");
    assert!(
        !out.contains("| busbw |"),
        "numbers of a refused comparison are withheld: {out}"
    );
    // Forced: the refusal becomes a warning; the mean is over one run (inconclusive) and the
    // emulated link is far below 78.35 GB/s at 1 GiB (regression).
    let (code, out) = gate(&ring, &a3, &["--force"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FORCED despite"), "{out}");
    // A ring run that lacks 1 GiB: the per-size point is missing -> invalid input (3).
    let short = write_run(
        &d.join("short"),
        &Spec {
            pattern: "ring",
            ..Spec::default()
        },
    );
    let (code, out) = gate(&short, &a3, &["--force"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("missing size"), "{out}");
}

#[test]
fn full_range_ring_run_against_a3_baseline() {
    let d = tmpdir("a3full");
    // 1 KiB..1 GiB, step 2 (21 sizes), 16 ranks, five runs: one value per run.
    let sizes: Vec<u64> = (10..=30).map(|k| 1u64 << k).collect();
    let runs: Vec<_> = (0..5)
        .map(|i| {
            write_run(
                &d.join(format!("r{i}")),
                &Spec {
                    pattern: "ring",
                    sizes: sizes.clone(),
                    iters: 5,
                    ranks: 16,
                    seed: i + 10,
                    ..Spec::default()
                },
            )
        })
        .collect();
    let a3 = baselines().join("a3high-nccl-tcpx-allreduce.toml");
    // The directory of runs is one input holding five runs.
    let (code, out) = gate(&d, &a3, &[]);
    // The emulated 5 GB/s link (busbw ~9.4) is far below the A3 figures: a regression.
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("mean over 1 KiB..1 GiB"), "{out}");
    assert!(out.contains("5 / const"), "{out}");
    assert_eq!(runs.len(), 5);
}

#[test]
fn pattern_mismatch_and_unknown_collective_are_refused() {
    let d = tmpdir("pattern");
    let ring = write_run(
        &d.join("ring"),
        &Spec {
            pattern: "ring",
            ..Spec::default()
        },
    );
    let sr = write_run(&d.join("sr"), &Spec::default());
    let (code, out) = gate(&sr, &ring, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("different patterns"), "{out}");
    // A table without "Collective test starting" and a neutral file name: unknown collective.
    let txt = std::fs::read_to_string(fixtures().join("nccl_sendrecv_socket_tuned_np4.txt")).unwrap();
    let stripped: String = txt
        .lines()
        .filter(|l| !l.contains("Collective test"))
        .map(|l| format!("{l}\n"))
        .collect();
    let f = d.join("table.txt");
    std::fs::write(&f, stripped).unwrap();
    let lb = baselines().join("h200x4-loopback-socket-tuned-sendrecv.toml");
    let (code, out) = gate(&f, &lb, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("collective is unknown"), "{out}");
    // --pattern names it.
    let (code, out) = gate(&f, &lb, &["--pattern", "sendrecv_perf", "--allow-point-estimates"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn wrong_data_missing_sizes_incomplete_and_missing_files_fail_closed() {
    let d = tmpdir("closed");
    let base = write_run(&d.join("base"), &Spec::default());
    let wrong = write_run(
        &d.join("wrong"),
        &Spec {
            wrong: Some(4096),
            ..Spec::default()
        },
    );
    let (code, out) = gate(&wrong, &base, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("wrong data"), "{out}");

    let short = write_run(
        &d.join("short"),
        &Spec {
            sizes: vec![1 << 20, 1 << 21],
            ..Spec::default()
        },
    );
    let (code, out) = gate(&short, &base, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("missing size"), "{out}");

    let inc = write_run(
        &d.join("inc"),
        &Spec {
            complete: false,
            ..Spec::default()
        },
    );
    let (code, out) = gate(&inc, &base, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("did not finish"), "{out}");

    let (code, out) = gate(&d.join("nope"), &base, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("no such file"), "{out}");

    let (code, _) = run(&["gate", p(&base)]);
    assert_eq!(code, 64);
    let (code, _) = run(&["gate", p(&base), "-B", p(&base), "--metric", "speed"]);
    assert_eq!(code, 64);
}

#[test]
fn gib_baseline_is_refused_unless_converted() {
    let d = tmpdir("gib");
    let run_dir = write_run(&d.join("r"), &Spec::default());
    let b = d.join("gib.toml");
    std::fs::write(
        &b,
        "schema_version = 1\nname = \"gib\"\npattern = \"sendrecv\"\nunit = \"GiB/s\"\n[[entry]]\nmetric = \"busbw\"\nsize = \"64M\"\nvalue = 4.5\n",
    )
    .unwrap();
    let (code, out) = gate(&run_dir, &b, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("GiB/s"), "{out}");
    // 4.5 GiB/s = 4.83 GB/s; the run does ~4.96 GB/s at 64 MiB: within 5%.
    let (code, out) = gate(&run_dir, &b, &["--convert-units"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4.832"), "{out}");
}

#[test]
fn nccl_tests_fixtures_against_shipped_baselines() {
    let f = fixtures();
    let lb = baselines().join("h200x4-loopback-socket-sendrecv.toml");
    // JSON with 20 per-iteration samples: one-sample tests against the constants.
    let (code, out) = gate(&f.join("nccl_sendrecv_socket_np4.json"), &lb, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("20 / const"), "{out}");
    // The text table of the same run has n = 1: inconclusive unless point estimates are allowed.
    let txt = f.join("nccl_sendrecv_socket_np4.txt");
    let (code, out) = gate(&txt, &lb, &[]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = gate(&txt, &lb, &["--allow-point-estimates"]);
    assert_eq!(code, 0, "{out}");
    // The default-socket run against the tuned baseline is a (point) regression.
    let tuned = baselines().join("h200x4-loopback-socket-tuned-sendrecv.toml");
    let (code, out) = gate(&txt, &tuned, &["--allow-point-estimates"]);
    assert_eq!(code, 1, "{out}");
    // The log with NCCL INFO lines parses and compares.
    let (code, out) = run(&[
        "compare",
        p(&f.join("nccl_sendrecv_socket_g4_single_process_debug.log")),
        "-B",
        p(&txt),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("too few samples"), "{out}");
}

#[test]
fn compare_reports_all_metrics_and_exits_zero_on_regression() {
    let d = tmpdir("cmp");
    let base = write_run(&d.join("base"), &Spec::default());
    let cand = write_run(
        &d.join("cand"),
        &Spec {
            scale: 0.8,
            ..Spec::default()
        },
    );
    let (code, out) = run(&["compare", p(&cand), "-B", p(&base), "--resamples", "1000"]);
    assert_eq!(code, 0, "{out}");
    for m in ["busbw", "algbw", "time"] {
        assert!(out.contains(&format!("| {m} |")), "{out}");
    }
}

#[test]
fn plots_render_with_text() {
    let d = tmpdir("plots");
    let r = write_run(&d.join("r"), &Spec::default());
    let svg = d.join("bw.svg");
    let lb = baselines().join("h200x4-loopback-socket-sendrecv.toml");
    let (code, out) = run(&[
        "plot",
        p(&r),
        p(&fixtures().join("nccl_sendrecv_socket_np4.json")),
        "-B",
        p(&lb),
        "-o",
        p(&svg),
    ]);
    assert_eq!(code, 0, "{out}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("<text"), "no text in SVG");
    assert!(s.contains("busbw (GB/s"), "y label");
    assert!(s.contains("message size"), "x label");
    assert!(s.contains("1 MiB"), "size ticks");
    assert!(s.contains("h200x4-loopback-socket-sendrecv"), "legend");
    assert!(s.contains("<polygon"), "CI band");

    let hm = d.join("pairs.svg");
    let (code, out) = run(&["heatmap", p(&r), "-o", p(&hm), "--size", "64M"]);
    assert_eq!(code, 0, "{out}");
    // The synthetic 1 -> 2 link runs at half speed: flagged.
    assert!(out.contains("| 1 (host0) | 2 (host1) |"), "{out}");
    let s = std::fs::read_to_string(&hm).unwrap();
    assert!(s.contains("destination rank") && s.contains("GB/s"));
}

#[test]
fn show_prints_tables() {
    let (code, out) = run(&["show", p(&fixtures().join("nccl_sendrecv_socket_np4.json"))]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| 1 GiB |"), "{out}");
    let (code, out) = run(&["show", p(&baselines().join("a3high-nccl-tcpx-allreduce.toml"))]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("19.176"), "{out}");
}

#[test]
fn shipped_baselines_parse() {
    for e in std::fs::read_dir(baselines()).unwrap() {
        let path = e.unwrap().path();
        tcpx_analyze::baseline::load(&path).unwrap_or_else(|f| panic!("{}: {f}", path.display()));
    }
    let b = tcpx_analyze::baseline::load(&baselines().join("a3high-nccl-tcpx-allreduce.toml")).unwrap();
    assert_eq!(b.entries[0].sizes().len(), 21);
    assert_eq!(b.entries[0].values, vec![19.176]);
    assert_eq!(b.entries[1].values, vec![78.35]);
}

#[test]
fn make_baseline_then_gate() {
    let d = tmpdir("mkbase");
    let trusted = write_run(&d.join("trusted"), &Spec::default());
    let toml = d.join("ci.toml");
    let (code, out) = run(&["make-baseline", p(&trusted), "--name", "ci-sendrecv", "-o", p(&toml)]);
    assert_eq!(code, 0, "{out}");
    let same = write_run(
        &d.join("same"),
        &Spec {
            seed: 3,
            ..Spec::default()
        },
    );
    let (code, out) = gate(&same, &toml, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("20 / 20"),
        "two-sample against the stored distribution: {out}"
    );
    let slow = write_run(
        &d.join("slow"),
        &Spec {
            seed: 4,
            scale: 0.8,
            ..Spec::default()
        },
    );
    let (code, out) = gate(&slow, &toml, &[]);
    assert_eq!(code, 1, "{out}");
}
