//! End-to-end tests of `tcpx-analyze` (binary): verdicts and exit codes.

mod common;
use common::run_analyze as run;
use common::*;
use std::path::Path;

fn p(x: &Path) -> &str {
    x.to_str().unwrap()
}

fn gate(cand: &Path, base: &Path, extra: &[&str]) -> (i32, String) {
    let mut a = vec!["gate", p(cand), "--baseline", p(base)];
    a.extend_from_slice(extra);
    run(&a)
}

/// Writes `n` runs under `dir/name/r<i>` whose bandwidth is `scale` times a run-level factor
/// exp(spread * z) (z standard normal, seeded): runs that differ from run to run, as real
/// ones do, each with its own per-iteration noise. Returns `dir/name` (one input, n runs).
fn runs(dir: &Path, name: &str, n: usize, scale: f64, spread: f64, seed: u64, spec: &Spec) -> std::path::PathBuf {
    let mut rng = tcpx_analyze::stats::Rng::new(seed);
    let top = dir.join(name);
    for i in 0..n {
        let s = Spec {
            scale: scale * (spread * rng.normal()).exp(),
            seed: seed * 100 + i as u64,
            sizes: spec.sizes.clone(),
            ..*spec
        };
        write_run(&top.join(format!("r{i}")), &s);
    }
    top
}

fn json_of(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn identical_configurations_pass_with_enough_runs() {
    let d = tmpdir("identical");
    let spec = Spec::default();
    // Run-to-run spread 2%: 5 runs per side pass a 5% threshold.
    let a = runs(&d, "a", 5, 1.0, 0.02, 1, &spec);
    let b = runs(&d, "b", 5, 1.0, 0.02, 2, &spec);
    let (code, out) = gate(&a, &b, &["--metric", "busbw,algbw,time"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("5 / 5"), "{out}");
    assert!(out.contains("1 MiB..64 MiB (7 sizes, geometric mean)"), "{out}");
    // One comparison per metric, not one per size: sizes are not independent evidence.
    assert!(out.contains("comparisons: 3 (3 pass"), "{out}");
}

#[test]
fn a_twenty_percent_slowdown_is_a_regression() {
    let d = tmpdir("scaled");
    let spec = Spec::default();
    let base = runs(&d, "base", 5, 1.0, 0.05, 3, &spec);
    let cand = runs(&d, "cand", 5, 0.8, 0.05, 4, &spec);
    let json = d.join("verdict.json");
    let md = d.join("summary.md");
    let (code, out) = gate(
        &cand,
        &base,
        &["--metric", "busbw,time", "--json", p(&json), "--markdown", p(&md)],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("**REGRESSION**"), "{out}");
    let v = json_of(&json);
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["verdict"], "regression");
    let comps = v["comparisons"].as_array().unwrap();
    assert_eq!(comps.len(), 2);
    for c in comps {
        assert_eq!(c["verdict"], "regression", "{c}");
        assert_eq!(c["n_candidate"], 5);
        // The performance ratio (> 1 better) and the ratio of the metric itself.
        let (r, mr) = (c["ratio"].as_f64().unwrap(), c["metric_ratio"].as_f64().unwrap());
        assert!((r - 0.8).abs() < 0.06, "{r}");
        match c["metric"].as_str().unwrap() {
            "busbw" => assert_eq!(r, mr),
            "time" => assert!((mr * r - 1.0).abs() < 1e-12, "{mr}"),
            m => panic!("{m}"),
        }
    }
    assert_eq!(v["sizes"].as_array().unwrap().len(), 14, "per-size diagnostics");
    assert!(std::fs::read_to_string(&md).unwrap().contains("REGRESSION"));
    // Against a 30% threshold the same data is no regression.
    let (code, out) = gate(&cand, &base, &["--threshold", "0.3"]);
    assert_ne!(code, 1, "{out}");
}

#[test]
fn single_runs_are_inconclusive_and_say_why() {
    let d = tmpdir("single");
    let a = write_run(&d.join("a"), &Spec::default());
    let slow = write_run(
        &d.join("slow"),
        &Spec {
            scale: 0.5,
            seed: 5,
            ..Spec::default()
        },
    );
    // Even a 50% drop between two single runs is not called a regression: one run per side
    // carries no run-to-run spread (the iterations of a run describe that run only).
    let (code, out) = gate(&slow, &a, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no run-to-run spread"), "{out}");
    let (code, _) = gate(&slow, &a, &["--allow-inconclusive"]);
    assert_eq!(code, 0);
    // One candidate run against 8 reference runs: the reference's spread is used.
    let base = runs(&d, "base", 8, 1.0, 0.03, 6, &Spec::default());
    let (code, out) = gate(&slow, &base, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("assumed for both"), "{out}");
}

#[test]
fn noisy_runs_say_how_many_runs_would_decide() {
    let d = tmpdir("noisy");
    let spec = Spec::default();
    let base = runs(&d, "base", 5, 1.0, 0.25, 7, &spec);
    let cand = runs(&d, "cand", 5, 0.9, 0.25, 31, &spec);
    let json = d.join("v.json");
    let (code, out) = gate(&cand, &base, &["--json", p(&json)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("runs per side at the observed ratio"), "{out}");
    let v = json_of(&json);
    let c = &v["comparisons"][0];
    let need = c["runs_needed"].as_u64().expect("runs needed");
    assert!(need > 5, "{c}");
    // The stated number agrees with the formula at the reported spread and ratio.
    let spread = c["spread"].as_f64().unwrap();
    let ratio = c["ratio"].as_f64().unwrap();
    let level = if ratio < 0.95 { 0.01 } else { 0.05 };
    let want = tcpx_analyze::decision::runs_needed(spread, ratio.ln() - 0.95f64.ln(), level, 0.8).unwrap();
    assert_eq!(need, want as u64);
}

#[test]
fn several_references_directories_and_baselines_after_b() {
    let d = tmpdir("multi");
    let spec = Spec::default();
    let refs = runs(&d, "refs", 3, 1.0, 0.02, 9, &spec);
    let cand = runs(&d, "cand", 3, 1.0, 0.02, 10, &spec);
    // -B takes several values: all three are references (none silently becomes a candidate).
    let (code, out) = run(&[
        "compare",
        p(&cand),
        "-B",
        p(&refs.join("r0")),
        p(&refs.join("r1")),
        p(&refs.join("r2")),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("3 / 3"), "{out}");
    assert!(out.contains("reference: 3 run(s)"), "{out}");
    // A directory of runs plus a baseline file: two references, both compared.
    let lb = baselines().join("h200x4-loopback-socket-sendrecv.toml");
    let (code, out) = run(&["compare", p(&cand), "-B", p(&refs), p(&lb), "--sizes", "1M..64M"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("baseline h200x4-loopback-socket-sendrecv"), "{out}");
    assert!(out.contains("3 / const"), "{out}");
    // -B before the candidate swallows it: a usage error, never a silent swap.
    let (code, _) = run(&["gate", "-B", p(&refs), p(&cand)]);
    assert_eq!(code, 64);
}

#[test]
fn different_job_shapes_are_refused() {
    let d = tmpdir("shape");
    let two = runs(
        &d,
        "two",
        3,
        1.0,
        0.02,
        11,
        &Spec {
            ranks: 2,
            ..Spec::default()
        },
    );
    let four = runs(&d, "four", 3, 1.0, 0.02, 12, &Spec::default());
    let (code, out) = gate(&two, &four, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("different endpoints: 2 (candidate) vs 4 (reference runs)"),
        "{out}"
    );
    let (code, out) = gate(&two, &four, &["--force", "--allow-inconclusive"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("FORCED despite: different endpoints"), "{out}");
    // The runs of one side disagree among themselves: refused too (a 4-endpoint candidate that is
    // not one of the references: that would be a run compared with itself).
    let other_four = write_run(
        &d.join("other-four"),
        &Spec {
            seed: 99,
            ..Spec::default()
        },
    );
    let (code, out) = run(&["gate", p(&two.join("r0")), p(&other_four), "-B", p(&four)]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("2 (candidate) vs 4 (candidate, reference runs)"), "{out}");
    // A 2-endpoint run against the 4-GPU NCCL baseline.
    let lb = baselines().join("h200x4-loopback-socket-sendrecv.toml");
    let (code, out) = gate(&two, &lb, &["--sizes", "1M..64M"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("baseline h200x4-loopback-socket-sendrecv"), "{out}");
    // A 4-rank ring against the 16-GPU, 2-node A3 baseline.
    let ring = write_run(
        &d.join("ring"),
        &Spec {
            pattern: "ring",
            sizes: (10..=30).map(|k| 1u64 << k).collect(),
            ..Spec::default()
        },
    );
    let a3 = baselines().join("a3high-nccl-tcpx-allreduce.toml");
    let (code, out) = gate(&ring, &a3, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("different endpoints") && out.contains("different nodes"),
        "{out}"
    );
}

#[test]
fn near_zero_bandwidths_are_excluded_not_nan() {
    let d = tmpdir("zero");
    // 256 B moves at ~0.005 GB/s: below the 0.01 GB/s floor, excluded with a note.
    let spec = Spec {
        sizes: vec![256, 1 << 20, 1 << 22, 1 << 24],
        ..Spec::default()
    };
    let a = runs(&d, "a", 5, 1.0, 0.02, 13, &spec);
    let b = runs(&d, "b", 5, 1.0, 0.02, 14, &spec);
    let json = d.join("v.json");
    let (code, out) = gate(&a, &b, &["--json", p(&json)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("excluded: bandwidth < 0.01 GB/s"), "{out}");
    assert!(!out.contains("NaN"), "{out}");
    let v = json_of(&json);
    assert_eq!(v["comparisons"][0]["excluded_sizes"][0], 256);
    assert_eq!(v["comparisons"][0]["sizes"].as_array().unwrap().len(), 3);
    // Only near-zero sizes: nothing to compare, inconclusive (never a NaN verdict).
    let tiny = Spec {
        sizes: vec![128, 256],
        ..Spec::default()
    };
    let a = runs(&d, "ta", 3, 1.0, 0.02, 15, &tiny);
    let b = runs(&d, "tb", 3, 1.0, 0.02, 16, &tiny);
    let (code, out) = gate(&a, &b, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("nothing to compare") && !out.contains("NaN"), "{out}");
}

#[test]
fn sizes_option_restricts_the_gate() {
    let d = tmpdir("sizes");
    let a = runs(&d, "a", 4, 1.0, 0.02, 17, &Spec::default());
    let b = runs(&d, "b", 4, 1.0, 0.02, 18, &Spec::default());
    let (code, out) = gate(&a, &b, &["--sizes", "4M..16M", "--allow-inconclusive"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4 MiB..16 MiB (3 sizes"), "{out}");
    let (code, _) = gate(&a, &b, &["--sizes", "16M..4M"]);
    assert_eq!(code, 64);
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
    // Forced: the refusals become warnings. The baseline is a single run (no spread): the gate
    // cannot judge significance (2) unless its values are taken as exact; then the emulated
    // link is far below 78.35 GB/s at 1 GiB (regression).
    let (code, out) = gate(&ring, &a3, &["--force"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot judge significance"), "{out}");
    let (code, out) = gate(&ring, &a3, &["--force", "--allow-point-estimates"]);
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
    // The directory of runs is one input holding five runs; one node, not two: refused.
    let (code, out) = gate(&d, &a3, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("different nodes: 1 (candidate) vs 2 (baseline"), "{out}");
    // Forced, and the single-run baseline taken as exact: the emulated 5 GB/s link (busbw
    // ~9.4) is far below the A3 figures, a regression by the candidate's 5 runs.
    let (code, out) = gate(&d, &a3, &["--force", "--allow-point-estimates"]);
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
    // Another run than the base (another seed): the same figures would be the same run.
    let wrong = write_run(
        &d.join("wrong"),
        &Spec {
            wrong: Some(4096),
            seed: 2,
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
    // 4.5 GiB/s = 4.83 GB/s; the run does ~4.96 GB/s at 64 MiB: within 5% (one run against a
    // value of unknown spread: judged by the point ratio only when allowed).
    let (code, out) = gate(&run_dir, &b, &["--convert-units"]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = gate(&run_dir, &b, &["--convert-units", "--allow-point-estimates"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4.832"), "{out}");
}

#[test]
fn nccl_tests_fixtures_against_shipped_baselines() {
    let f = fixtures();
    let lb = baselines().join("h200x4-loopback-socket-sendrecv.toml");
    // The JSON has 20 per-iteration samples, but it is one run, and the baseline is one run:
    // no spread on either side, so no significance (the iterations describe that run only).
    let (code, out) = gate(&f.join("nccl_sendrecv_socket_np4.json"), &lb, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot judge significance"), "{out}");
    assert!(out.contains("1 / const"), "{out}");
    // The same run judged by the point ratio (the headline figures of the run the baseline was
    // taken from: ratio 1 at every size).
    let (code, out) = gate(
        &f.join("nccl_sendrecv_socket_np4.json"),
        &lb,
        &["--allow-point-estimates"],
    );
    assert_eq!(code, 0, "{out}");
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
    assert!(out.contains("no run-to-run spread"), "{out}");
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
    let (code, out) = run(&["compare", p(&cand), "-B", p(&base)]);
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
    assert!(s.contains("<polygon"), "iteration band");
    assert!(
        s.contains("headline, band: iterations p10-p90"),
        "legend says what the band is"
    );

    // Runs with the same directory name in different directories get distinct legends; the
    // log-y axis and both kinds of baseline line render.
    let a = write_run(&d.join("a").join("r1"), &Spec::default());
    let b = write_run(
        &d.join("b").join("r1"),
        &Spec {
            scale: 0.7,
            ..Spec::default()
        },
    );
    let a3 = baselines().join("a3high-nccl-tcpx-allreduce.toml");
    let svg2 = d.join("two.svg");
    let (code, out) = run(&["plot", p(&a), p(&b), "-B", p(&lb), p(&a3), "--log-y", "-o", p(&svg2)]);
    assert_eq!(code, 0, "{out}");
    let s = std::fs::read_to_string(&svg2).unwrap();
    assert!(
        s.contains("\na/r1: sendrecv") && s.contains("\nb/r1: sendrecv"),
        "unique legends"
    );
    assert!(s.contains("log scale"), "log y");
    assert!(
        s.contains("mean busbw over 1 KiB..1 GiB") && s.contains("busbw floor 1 MiB..1 GiB"),
        "baseline kinds"
    );

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
    assert!(
        out.contains("runs: 1;") && out.contains("\"endpoints\": \"16\""),
        "{out}"
    );
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
    let spec = Spec::default();
    let trusted = runs(&d, "trusted", 6, 1.0, 0.02, 20, &spec);
    let toml = d.join("ci.toml");
    let (code, out) = run(&["make-baseline", p(&trusted), "--name", "ci-sendrecv", "-o", p(&toml)]);
    assert_eq!(code, 0, "{out}");
    let text = std::fs::read_to_string(&toml).unwrap();
    for want in [
        "runs = 6",
        "[shape]",
        "endpoints = 4",
        "nodes = 1",
        "plugin = \"tcpx-emu\"",
        "spread = ",
        "pattern = \"sendrecv\"",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let b = tcpx_analyze::baseline::load(&toml).unwrap();
    assert_eq!(b.runs, Some(6));
    assert_eq!(b.entries[0].values.len(), 6);
    let same = runs(&d, "same", 5, 1.0, 0.02, 21, &spec);
    let (code, out) = gate(&same, &toml, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("5 / 6"), "two-sample against the stored runs: {out}");
    let slow = runs(&d, "slow", 5, 0.8, 0.02, 22, &spec);
    let (code, out) = gate(&slow, &toml, &[]);
    assert_eq!(code, 1, "{out}");
    // A baseline of one run records no spread: the gate says it cannot judge significance.
    let one = d.join("one.toml");
    let (code, out) = run(&["make-baseline", p(&trusted.join("r0")), "--name", "one", "-o", p(&one)]);
    assert_eq!(code, 0, "{out}");
    assert!(std::fs::read_to_string(&one).unwrap().contains("runs = 1"));
    let (code, out) = gate(&same, &one, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("records a single run"), "{out}");
    // A values list that does not match the run count is refused at load.
    let bad = d.join("bad.toml");
    std::fs::write(&bad, text.replacen("runs = 6", "runs = 4", 1)).unwrap();
    let (code, out) = gate(&same, &bad, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("one value per run"), "{out}");
    // Runs of another shape do not make one baseline.
    let other = write_run(
        &d.join("other"),
        &Spec {
            ranks: 2,
            ..Spec::default()
        },
    );
    let (code, out) = run(&[
        "make-baseline",
        p(&trusted.join("r0")),
        p(&other),
        "--name",
        "x",
        "-o",
        p(&d.join("x.toml")),
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("not one configuration: different endpoints"), "{out}");
}

#[test]
fn runs_needed_command() {
    let (code, out) = run(&["runs-needed", "--spread", "0.05"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("20% slowdown a regression: 4"), "{out}");
    assert!(out.contains("unchanged configuration: 13"), "{out}");
    let (code, out) = run(&["runs-needed"]);
    assert_eq!(code, 64, "{out}");
}

/// Sets summary.json's `force` (a run forced past preflight's error findings).
fn force(dir: &Path) {
    let f = dir.join("summary.json");
    let mut v = json_of(&f);
    v["force"] = true.into();
    std::fs::write(&f, v.to_string()).unwrap();
}

/// Issue 34 item 3: a baseline made with `--allow-forced` (or `--allow-unchecked`) from such runs
/// gave a plain `PASS` (or INCONCLUSIVE) later. It records the waivers and the runs that needed
/// them; a gate against it needs the same flag and names the waiver in its first line.
#[test]
fn a_baseline_remembers_its_waivers_and_every_verdict_names_them() {
    let d = tmpdir("baseline-waivers");
    let spec = Spec::default();
    let cand = runs(&d, "cand", 5, 1.0, 0.02, 31, &spec);
    let forced = runs(&d, "forced", 5, 1.0, 0.02, 32, &spec);
    for i in 0..5 {
        force(&forced.join(format!("r{i}")));
    }
    let unchecked = runs(
        &d,
        "unchecked",
        5,
        1.0,
        0.02,
        33,
        &Spec {
            wrong: None,
            ..Spec::default()
        },
    );
    for (refs, flag, label) in [
        (&forced, "--allow-forced", "FORCED"),
        (&unchecked, "--allow-unchecked", "UNCHECKED"),
    ] {
        let toml = d.join(format!("{label}.toml"));
        let (code, out) = run(&["make-baseline", p(refs), "--name", "w", "-o", p(&toml), flag]);
        assert_eq!(code, 0, "{out}");
        let text = std::fs::read_to_string(&toml).unwrap();
        assert!(text.contains(&format!("waivers = [\"{label}\"]")), "{text}");
        assert!(
            text.contains(&format!("waived = [\"{label}: ")) && text.contains("/r4/"),
            "which runs: {text}"
        );
        let b = tcpx_analyze::baseline::load(&toml).unwrap();
        assert_eq!(b.waivers.len(), 1, "{b:?}");
        // Without the flag: refused in one line naming the baseline and the flag.
        let (code, out) = gate(&cand, &toml, &["--allow-inconclusive"]);
        assert_eq!(code, 3, "{label}: {out}");
        assert!(out.contains(p(&toml)) && out.contains(flag), "{label}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{label}: {out}");
        // With it: the verdict's first line says so.
        let (code, out) = gate(&cand, &toml, &[flag, "--allow-inconclusive"]);
        assert!(code == 0 || code == 1, "{label}: {out}");
        let first = out.lines().next().unwrap();
        assert!(first.contains(label), "{label}: {first}");
        // A baseline written before the field, its waivers only in the description, counts too.
        let old = d.join(format!("{label}-old.toml"));
        let legacy: String = text
            .lines()
            .filter(|l| !l.starts_with("waive"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&old, legacy).unwrap();
        let (code, out) = gate(&cand, &old, &["--allow-inconclusive"]);
        assert_eq!(code, 3, "{label}: {out}");
        assert!(out.contains(flag), "{label}: {out}");
    }
}

/// Issue 34 item 3: `gate RUNS -B RUNS` passed: the same runs on both sides (or copies of
/// reference runs among the candidates, or the runs a baseline was made from) compare a run
/// with itself. Refused in one line, by content as `history` knows copies.
#[test]
fn the_same_run_on_both_sides_is_refused() {
    let d = tmpdir("same-both-sides");
    let spec = Spec::default();
    let a = runs(&d, "a", 5, 1.0, 0.02, 41, &spec);
    let (code, out) = gate(&a, &a, &["--allow-inconclusive"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("both sides"), "{out}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    // A copy of one reference run among otherwise new candidates, its line endings changed.
    let b = runs(&d, "b", 4, 1.0, 0.02, 42, &spec);
    let copy = b.join("r4");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["results.csv", "samples.csv", "pairs.csv", "summary.json"] {
        let t = std::fs::read_to_string(a.join("r2").join(f)).unwrap();
        std::fs::write(copy.join(f), t.replace('\n', "\r\n")).unwrap();
    }
    let (code, out) = gate(&b, &a, &["--allow-inconclusive"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("r4") && out.contains("both sides"), "{out}");
    // The runs a baseline file was made from.
    let toml = d.join("a.toml");
    let (code, out) = run(&["make-baseline", p(&a), "--name", "a", "-o", p(&toml)]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = gate(&a.join("r3"), &toml, &["--allow-inconclusive"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("both sides") && out.contains(p(&toml)), "{out}");
    // Distinct runs of one configuration still compare.
    let c = runs(&d, "c", 5, 1.0, 0.02, 43, &spec);
    let (code, out) = gate(&c, &a, &["--allow-inconclusive"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = gate(&c, &toml, &["--allow-inconclusive"]);
    assert_eq!(code, 0, "{out}");
}
