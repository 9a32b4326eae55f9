//! The change-point detector on synthetic series with known changes (`history detect`'s
//! engine: E-Divisive with Means, then the segment means and their interval), and against the
//! reference implementation (MongoDB's `signal-processing-algorithms`, PyPI, checked with 2.1.6).

use tcpx_analyze::history::detect::{analyse, Point, SeriesData, SeriesResult};
use tcpx_analyze::history::edm::{e_divisive, split_statistics, EdmSettings};
use tcpx_analyze::stats::Rng;

/// A series of `n` runs: `level(i)` times a multiplicative noise of relative sd `noise(i)`.
fn series(n: usize, seed: u64, level: impl Fn(usize) -> f64, noise: impl Fn(usize) -> f64) -> Vec<f64> {
    let mut r = Rng::new(seed);
    (0..n).map(|i| level(i) * (1.0 + noise(i) * r.normal())).collect()
}

fn as_series(v: &[f64]) -> SeriesData {
    SeriesData {
        config_id: 1,
        config_key: "tool=synthetic".into(),
        size: Some(1 << 20),
        sizes: Vec::new(),
        points: v
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                run_id: i as i64 + 1,
                source: format!("run{i}"),
                start_time: format!("2026-01-01T00:00:{i:02}Z"),
                git_commit: None,
                value,
                nccl: None,
            })
            .collect(),
    }
}

fn detect(v: &[f64], seed: u64) -> SeriesResult {
    analyse(
        as_series(v),
        &EdmSettings {
            seed,
            ..EdmSettings::default()
        },
    )
}

/// The issue's case: a 10% drop at run 12 of 30 under 5% noise. `noise_sd` is the relative sd
/// of a normal noise; `uniform` draws it uniform in +-5% instead (sd 2.9%). Returns per draw the
/// change points found, and prints the first draw's change.
fn drop_at_12(draws: u64, noise_sd: f64, uniform: bool) -> Vec<(u64, SeriesResult)> {
    (1..=draws)
        .map(|seed| {
            let v: Vec<f64> = if uniform {
                let mut r = Rng::new(seed);
                (0..30)
                    .map(|i| if i < 12 { 10.0 } else { 9.0 } * (1.0 + noise_sd * (2.0 * r.uniform() - 1.0)))
                    .collect()
            } else {
                series(30, seed, |i| if i < 12 { 10.0 } else { 9.0 }, |_| noise_sd)
            };
            (seed, detect(&v, seed))
        })
        .collect()
}

fn describe(r: &SeriesResult) -> String {
    r.changes
        .iter()
        .map(|c| {
            format!(
                "run {} ({:.3} -> {:.3} GB/s, {:+.1}%, 95% CI [{:+.1}%, {:+.1}%], p {:.3})",
                c.index,
                c.mean_before,
                c.mean_after,
                c.relative_change * 100.0,
                c.ci_low * 100.0,
                c.ci_high * 100.0,
                c.p_value
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// 10% drop at run 12 of 30, normal noise of sd 5% (2 noise sd): exactly one change point, a
/// regression, in every draw but at most one of 50; within +-1 of run 12 in most (the
/// localisation is the statistic's, the reference implementation places them alike: see
/// `agrees_with_mongodb_signal_processing_algorithms`), never further than 5 runs off; its
/// interval holds the true -10% in most.
#[test]
fn ten_percent_drop_at_run_12_of_30() {
    let all = drop_at_12(50, 0.05, false);
    println!("seed 1: {}", describe(&all[0].1));
    let one = all.iter().filter(|(_, r)| r.changes.len() == 1 && r.regression).count();
    let near = |d: usize| {
        all.iter()
            .filter(|(_, r)| r.changes.len() == 1 && r.changes[0].index.abs_diff(12) <= d)
            .count()
    };
    let covered = all
        .iter()
        .filter(|(_, r)| r.changes.len() == 1 && r.changes[0].ci_low <= -0.1 && -0.1 <= r.changes[0].ci_high)
        .count();
    println!(
        "10% drop at 12/30, 5% sd noise, 50 draws: one change point (a regression) in {one}; at 12+-1 in {}, 12+-2 in {}, 12+-5 in {}; 95% CI holds -10% in {covered}",
        near(1),
        near(2),
        near(5)
    );
    assert!(one >= 49, "{one}");
    assert!(near(1) >= 35, "{}", near(1));
    assert_eq!(near(5), one);
    assert!(covered >= 40, "{covered}");
}

/// The same drop under uniform +-5% noise (sd 2.9%): one change point at 12 +- 1 in 48 or more
/// of 50 draws.
#[test]
fn ten_percent_drop_under_uniform_noise() {
    let all = drop_at_12(50, 0.05, true);
    let bad: Vec<_> = all
        .iter()
        .filter(|(_, r)| !(r.changes.len() == 1 && r.changes[0].index.abs_diff(12) <= 1 && r.regression))
        .map(|(s, r)| (*s, describe(r)))
        .collect();
    println!(
        "10% drop at 12/30, uniform +-5% noise: {} of 50 draws not exactly one change at 12+-1: {bad:?}",
        bad.len()
    );
    println!("seed 1: {}", describe(&all[0].1));
    assert!(bad.len() <= 2, "{bad:?}");
}

/// No change at all: the false-alarm rate over 300 draws of 30 runs at 5% noise stays near the
/// significance level (0.01): at most 3%.
#[test]
fn no_change_false_alarm_rate() {
    let draws = 300u64;
    let alarms = (1..=draws)
        .filter(|&seed| {
            !detect(&series(30, 1000 + seed, |_| 10.0, |_| 0.05), seed)
                .changes
                .is_empty()
        })
        .count();
    let rate = alarms as f64 / draws as f64;
    println!(
        "no change, 30 runs, 5% noise: {alarms} of {draws} series had a change point ({:.1}%)",
        rate * 100.0
    );
    assert!(rate <= 0.03, "false-alarm rate {rate}");
}

/// A slow drift of 3% over 30 runs: under 0.5% noise it is found (one change point or more,
/// every one a drop, the newest segment a regression, the total close to -3%); under 5% noise
/// it is below what 30 runs can show, and the rate at which it is seen is reported.
#[test]
fn three_percent_drift() {
    for seed in 1..=10u64 {
        let v = series(30, seed, |i| 10.0 * (1.0 - 0.03 * i as f64 / 29.0), |_| 0.005);
        let r = detect(&v, seed);
        assert!(!r.changes.is_empty(), "seed {seed}: drift not found");
        assert!(
            r.changes.iter().all(|c| c.relative_change < 0.0),
            "seed {seed}: {:?}",
            r.changes
        );
        assert!(r.regression, "seed {seed}");
        let first = r.changes[0].mean_before;
        let last = r.changes.last().unwrap().mean_after;
        let total = last / first - 1.0;
        // Segment means of a linear drift: the first and last segments' centres are a few runs in.
        assert!((-0.035..=-0.012).contains(&total), "seed {seed}: total {total}");
    }
    let seen = (1..=50u64)
        .filter(|&seed| {
            let v = series(30, 500 + seed, |i| 10.0 * (1.0 - 0.03 * i as f64 / 29.0), |_| 0.05);
            !detect(&v, seed).changes.is_empty()
        })
        .count();
    println!("3% drift over 30 runs under 5% noise: seen in {seen} of 50 draws");
}

/// A change in spread only (sd 1% -> 8% at run 30 of 60, same mean): the energy distance sees
/// the distribution change, and it is not called a regression (the means do not differ). With
/// alpha 1 (the default, the reference's) 30 runs are too few for it (2 of 20 draws seen in a
/// trial); alpha 0.5 weighs small differences more and sees more of them at 30 runs. A change in
/// spread also moves the segment means a little by chance, so a few are read as mean changes.
#[test]
fn change_in_spread_only() {
    let count = |n: usize, alpha: f64| {
        let (mut found, mut as_mean, mut regressions) = (0, 0, Vec::new());
        for seed in 1..=20u64 {
            let v = series(n, 2000 + seed, |_| 10.0, |i| if i < n / 2 { 0.01 } else { 0.08 });
            let r = analyse(
                as_series(&v),
                &EdmSettings {
                    alpha,
                    seed,
                    ..EdmSettings::default()
                },
            );
            if let Some(c) = r.changes.iter().find(|c| c.index.abs_diff(n / 2) <= 2) {
                found += 1;
                // The segments' means differ by chance too: a 95% interval misses 0 now and then.
                if c.ci_low > 0.0 || c.ci_high < 0.0 {
                    as_mean += 1;
                }
            }
            if r.regression {
                regressions.push((seed, describe(&r)));
            }
        }
        (found, as_mean, regressions)
    };
    let (a60, m60, r60) = count(60, 1.0);
    let (b30, m30, r30) = count(30, 0.5);
    println!("spread 1% -> 8% halfway: found (+-2) in {a60} of 20 draws of 60 runs (alpha 1), {b30} of 20 of 30 runs (alpha 0.5); interval of the mean change excluding 0: {m60} and {m30}; called a regression: {r60:?} {r30:?}");
    assert!(a60 >= 13, "{a60}");
    assert!(b30 >= 8, "{b30}");
    assert!(m60 + m30 <= 3, "{m60} {m30}");
    assert!(r60.len() + r30.len() <= 3, "{r60:?} {r30:?}");
}

/// Same seed, same answer; a regression is only called on a drop.
#[test]
fn reproducible_and_directional() {
    let v = series(30, 7, |i| if i < 12 { 10.0 } else { 11.0 }, |_| 0.03);
    let a = detect(&v, 3);
    let b = detect(&v, 3);
    assert_eq!(
        a.changes.iter().map(|c| (c.index, c.p_value)).collect::<Vec<_>>(),
        b.changes.iter().map(|c| (c.index, c.p_value)).collect::<Vec<_>>()
    );
    assert_eq!(a.changes.len(), 1);
    assert!(!a.regression, "a speed-up is not a regression");
}

fn python_has_reference() -> bool {
    std::process::Command::new("python3")
        .args([
            "-c",
            "import signal_processing_algorithms.energy_statistics.energy_statistics",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The reference: per series its `_calculate_t_stats` profile and `e_divisive` change points.
fn reference(all: &[Vec<f64>], pvalue: f64, permutations: usize) -> serde_json::Value {
    let script = format!(
        r#"
import json, sys
import numpy as np
import importlib.metadata as md
from signal_processing_algorithms.energy_statistics import energy_statistics as es
np.random.seed(12345)
out = {{"version": md.version("signal-processing-algorithms"), "series": []}}
for s in json.load(sys.stdin):
    d = es._get_distance_matrix(es._get_valid_input(s))
    out["series"].append({{
        "stats": [float(x) for x in es._calculate_t_stats(d)],
        "cps": sorted(int(c) for c in es.e_divisive(s, pvalue={pvalue}, permutations={permutations})),
    }})
print(json.dumps(out))
"#
    );
    let mut child = std::process::Command::new("timeout")
        .args(["300", "python3", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(all).unwrap().as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "reference failed: {o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Our detector and MongoDB's `signal-processing-algorithms` (pip install
/// signal-processing-algorithms; checked with 2.1.6) on the same series: the divergence of every
/// split equal to 1e-9, and the same change points (ours with min segment 1, as the reference
/// has none). Skips, saying so, where the package is not installed.
#[test]
fn agrees_with_mongodb_signal_processing_algorithms() {
    if !python_has_reference() {
        eprintln!("SKIP agrees_with_mongodb_signal_processing_algorithms: python3 module signal_processing_algorithms not installed (pip install signal-processing-algorithms)");
        return;
    }
    let all = vec![
        series(30, 1, |i| if i < 12 { 10.0 } else { 9.0 }, |_| 0.05),
        series(30, 2, |i| if i < 12 { 10.0 } else { 9.0 }, |_| 0.05),
        series(
            40,
            3,
            |i| {
                if i < 10 {
                    10.0
                } else if i < 25 {
                    8.0
                } else {
                    9.5
                }
            },
            |_| 0.02,
        ),
        series(30, 4, |_| 10.0, |_| 0.05),
        series(30, 5, |i| 10.0 * (1.0 - 0.03 * i as f64 / 29.0), |_| 0.005),
        series(30, 6, |_| 10.0, |i| if i < 15 { 0.01 } else { 0.08 }),
    ];
    let (pvalue, permutations) = (0.01, 499);
    let r = reference(&all, pvalue, permutations);
    println!("reference: signal-processing-algorithms {}", r["version"]);
    for (k, s) in all.iter().enumerate() {
        let theirs: Vec<f64> = serde_json::from_value(r["series"][k]["stats"].clone()).unwrap();
        let ours = split_statistics(s, 1.0);
        assert_eq!(theirs.len(), ours.len());
        for (t, (a, b)) in theirs.iter().zip(&ours).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                "series {k} tau {t}: reference {a}, ours {b}"
            );
        }
        let their_cps: Vec<usize> = serde_json::from_value(r["series"][k]["cps"].clone()).unwrap();
        let our_cps: Vec<usize> = e_divisive(
            s,
            &EdmSettings {
                min_segment: 1,
                significance: pvalue,
                permutations,
                ..EdmSettings::default()
            },
        )
        .iter()
        .map(|c| c.index)
        .collect();
        println!("series {k}: reference {their_cps:?}, ours {our_cps:?}");
        assert_eq!(our_cps, their_cps, "series {k}");
    }
}
