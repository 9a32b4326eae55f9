//! The gate's test. The unit of replication is the run: each run contributes one number per
//! comparison, the log of its performance (oriented so that higher is better), already combined
//! over the sizes of the comparison. The iterations of one run describe that run only.
//!
//! The claim tested is the gate's claim: "the candidate is slower than the reference by more
//! than the threshold", i.e. `ratio < 1 - threshold` with `ratio = exp(mean_c - mean_r)` (the
//! geometric-mean performance ratio). Two one-sided t tests on the log scale, against the
//! margin `m = ln(1 - threshold)`:
//!
//! - regression when `P(T <= (d - m) / se) < alpha` (the upper `1 - alpha` bound of the ratio
//!   lies below `1 - threshold`); alpha is 0.01 by default: the gate runs on every change, and
//!   on real noisy runs 0.05 called 1.9% of identical 5-vs-5 splits a regression (README);
//! - pass when `P(T >= (d - m) / se) < pass_alpha` (the lower `1 - pass_alpha` bound lies at or
//!   above it; 0.05 by default);
//! - otherwise inconclusive, with the runs per side that would decide (80% power).
//!
//! `se` and the degrees of freedom are Welch's when both sides have >= 2 runs; when one side
//! has a single run, the other side's run-to-run spread stands for both (pooled, df = n - 1).

use crate::stats::{mean, t_cdf, t_quantile, var};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};

/// The power at which "runs needed" and "resolves" are stated.
pub const POWER: f64 = 0.8;

/// Larger run counts are reported as "more than this".
pub const MAX_RUNS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Regression,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Regression => "REGRESSION",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// The reference side, on the log scale.
#[derive(Debug, Clone, Copy)]
pub enum RefLogs<'a> {
    /// One value per reference run.
    Runs(&'a [f64]),
    /// A constant whose spread is unknown (a baseline value that records no run count).
    Constant(f64),
}

/// Settings of the test.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Practical threshold: a slowdown smaller than this is "no change".
    pub threshold: f64,
    /// One-sided level of the regression test (the false-alarm rate).
    pub alpha: f64,
    /// One-sided level of the pass test (the rate at which a real slowdown passes).
    pub pass_alpha: f64,
    /// Treat a constant of unknown spread as exact (`--allow-point-estimates`).
    pub constant_is_exact: bool,
}

/// The outcome for one comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub n_candidate: usize,
    /// Reference runs (None: a constant).
    pub n_reference: Option<usize>,
    /// Geometric-mean performance ratio candidate / reference (> 1 is better).
    pub ratio: f64,
    /// Interval of the ratio: lower bound one-sided at `pass_alpha`, upper at `alpha`.
    pub ci: Option<(f64, f64)>,
    /// Run-to-run standard deviation of the log performance (about the coefficient of
    /// variation of a run's figure); the pooled one with two sampled sides.
    pub spread: Option<f64>,
    pub df: Option<f64>,
    /// One-sided p of "slower by more than the threshold" (before any multiplicity correction).
    pub p_regression: Option<f64>,
    /// One-sided p of "not slower by more than the threshold".
    pub p_pass: Option<f64>,
    /// The ratios the present run counts decide with 80% power: below `.0` a regression,
    /// above `.1` a pass.
    pub resolves: Option<(f64, f64)>,
    /// Runs per side that would decide, at the observed spread and ratio, with 80% power
    /// (None with `more_than_max`, or when no spread is known).
    pub runs_needed: Option<usize>,
    pub verdict: Verdict,
    pub reason: String,
}

/// The standard error and degrees of freedom of `mean_c - mean_r`, with a note on how.
fn standard_error(c: &[f64], r: &[f64]) -> Option<(f64, f64, &'static str)> {
    let (nc, nr) = (c.len() as f64, r.len() as f64);
    match (c.len(), r.len()) {
        (a, b) if a >= 2 && b >= 2 => {
            let (vc, vr) = (var(c) / nc, var(r) / nr);
            let se2 = vc + vr;
            let df = if se2 > 0.0 {
                se2 * se2 / (vc * vc / (nc - 1.0) + vr * vr / (nr - 1.0))
            } else {
                nc + nr - 2.0
            };
            Some((se2.sqrt(), df, "Welch"))
        }
        (1, b) if b >= 2 => Some((var(r).sqrt() * (1.0 / nc + 1.0 / nr).sqrt(), nr - 1.0, "pooled")),
        (a, 1) if a >= 2 => Some((var(c).sqrt() * (1.0 / nc + 1.0 / nr).sqrt(), nc - 1.0, "pooled")),
        _ => None,
    }
}

/// Runs per side (equal counts) for a one-sided t test at `alpha` to reach `power` when the
/// true log ratio is `delta` away from the margin and the run-to-run spread is `sigma`.
pub fn runs_needed(sigma: f64, delta: f64, alpha: f64, power: f64) -> Option<usize> {
    let delta = delta.abs();
    if !(sigma.is_finite() && sigma >= 0.0 && delta > 0.0) {
        return None;
    }
    let reach = |n: usize| {
        let df = 2.0 * n as f64 - 2.0;
        (t_quantile(1.0 - alpha, df) + t_quantile(power, df)) * sigma * (2.0 / n as f64).sqrt() <= delta
    };
    // The normal approximation is a lower bound (t quantiles exceed normal ones): start there
    // and step up; t approaches the normal quickly, so a few steps suffice.
    let z = |p: f64| Normal::standard().inverse_cdf(p);
    let n0 = 2.0 * (sigma * (z(1.0 - alpha) + z(power)) / delta).powi(2);
    if !n0.is_finite() || n0 > MAX_RUNS as f64 || !reach(MAX_RUNS) {
        return None;
    }
    ((n0.floor() as usize).max(2)..=MAX_RUNS).find(|&n| reach(n))
}

fn fmt_need(n: Option<usize>) -> String {
    match n {
        Some(n) => format!("need {n} runs per side"),
        None => format!("need more than {MAX_RUNS} runs per side"),
    }
}

/// Decides one comparison. `cand` holds one log-performance value per candidate run.
pub fn decide(cand: &[f64], reference: RefLogs, rule: &Rule) -> Outcome {
    let margin = (1.0 - rule.threshold).ln();
    let floor = 1.0 - rule.threshold;
    let mc = mean(cand);
    let (mr, n_ref, se) = match reference {
        RefLogs::Runs(r) => (mean(r), Some(r.len()), standard_error(cand, r)),
        RefLogs::Constant(k) => {
            // Against an exact constant: the candidate's own spread only.
            let se = (cand.len() >= 2 && rule.constant_is_exact).then(|| {
                (
                    var(cand).sqrt() / (cand.len() as f64).sqrt(),
                    cand.len() as f64 - 1.0,
                    "one-sample",
                )
            });
            (k, None, se)
        }
    };
    let d = mc - mr;
    let mut o = Outcome {
        n_candidate: cand.len(),
        n_reference: n_ref,
        ratio: d.exp(),
        ci: None,
        spread: None,
        df: None,
        p_regression: None,
        p_pass: None,
        resolves: None,
        runs_needed: None,
        verdict: Verdict::Inconclusive,
        reason: String::new(),
    };
    let Some((se, df, how)) = se else {
        o.reason = match (n_ref, rule.constant_is_exact) {
            (None, false) => format!(
                "the reference value records no run count or spread: cannot judge significance (point ratio {:.3}; --allow-point-estimates treats it as exact)",
                o.ratio
            ),
            (None, true) if cand.len() < 2 => {
                o.verdict = if o.ratio >= floor { Verdict::Pass } else { Verdict::Regression };
                format!(
                    "point ratio {:.3} {} {floor:.3} (no uncertainty: one candidate run against a value treated as exact)",
                    o.ratio,
                    if o.ratio >= floor { ">=" } else { "<" }
                )
            }
            _ => format!(
                "one run per side measures no run-to-run spread: need >= 2 runs on one side and >= 3 in all (point ratio {:.3})",
                o.ratio
            ),
        };
        return o;
    };
    o.df = Some(df);
    o.spread = Some(match (how, reference) {
        ("Welch", RefLogs::Runs(r)) => f64::midpoint(var(cand), var(r)).sqrt(),
        _ => se / (1.0 / cand.len() as f64 + n_ref.map_or(0.0, |n| 1.0 / n as f64)).sqrt(),
    });
    let spread = o.spread.unwrap_or(f64::NAN);
    if se == 0.0 {
        // No spread at all (identical values): the difference is exact.
        o.verdict = if d >= margin {
            Verdict::Pass
        } else {
            Verdict::Regression
        };
        o.reason = format!("no run-to-run spread: ratio {:.3} vs {floor:.3} exactly", o.ratio);
        return o;
    }
    let t = (d - margin) / se;
    let (q_reg, q_pass) = (t_quantile(1.0 - rule.alpha, df), t_quantile(1.0 - rule.pass_alpha, df));
    o.ci = Some(((d - q_pass * se).exp(), (d + q_reg * se).exp()));
    o.p_regression = Some(t_cdf(t, df));
    o.p_pass = Some(1.0 - t_cdf(t, df));
    let t_pow = t_quantile(POWER, df);
    o.resolves = Some((
        floor * (-(q_reg + t_pow) * se).exp(),
        floor * ((q_pass + t_pow) * se).exp(),
    ));
    let (lo, hi) = o.ci.unwrap_or((f64::NAN, f64::NAN));
    let note = if how == "pooled" {
        " (one side has a single run: the other side's spread is assumed for both)"
    } else {
        ""
    };
    if o.p_pass.is_some_and(|p| p < rule.pass_alpha) {
        o.verdict = Verdict::Pass;
        o.reason = format!("lower bound {lo:.3} >= {floor:.3}{note}");
    } else if o.p_regression.is_some_and(|p| p < rule.alpha) {
        o.verdict = Verdict::Regression;
        o.reason = format!("upper bound {hi:.3} < {floor:.3}{note}");
    } else {
        // Toward a regression call when the estimate lies below the margin, else toward a pass.
        let level = if d < margin { rule.alpha } else { rule.pass_alpha };
        o.runs_needed = runs_needed(spread, d - margin, level, POWER);
        let unchanged = runs_needed(spread, margin, rule.pass_alpha, POWER);
        o.reason = format!(
            "{} at the observed ratio; {} to pass an unchanged configuration (bounds [{lo:.3}, {hi:.3}] straddle {floor:.3}; run-to-run spread {:.1}%){note}",
            fmt_need(o.runs_needed),
            unchanged.map_or(format!("more than {MAX_RUNS}"), |n| n.to_string()),
            spread * 100.0
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Rule = Rule {
        threshold: 0.05,
        alpha: 0.01,
        pass_alpha: 0.05,
        constant_is_exact: false,
    };

    fn logs(x: &[f64]) -> Vec<f64> {
        x.iter().map(|v| v.ln()).collect()
    }

    #[test]
    fn identical_spread_passes_and_slow_fails() {
        let r = logs(&[10.0, 10.2, 9.9, 10.1, 9.8]);
        let same = decide(&logs(&[10.1, 9.9, 10.0, 10.2, 9.9]), RefLogs::Runs(&r), &RULE);
        assert_eq!(same.verdict, Verdict::Pass, "{same:?}");
        let slow = decide(&logs(&[8.1, 7.9, 8.0, 8.2, 7.9]), RefLogs::Runs(&r), &RULE);
        assert_eq!(slow.verdict, Verdict::Regression, "{slow:?}");
        assert!((slow.ratio - 0.8).abs() < 0.01);
    }

    #[test]
    fn welch_bounds_match_hand_computation() {
        // c = ln(1,2,3), r = ln(2,3,4): d = mean(ln c) - mean(ln r); Welch se, df by hand.
        let (c, r) = (logs(&[1.0, 2.0, 3.0]), logs(&[2.0, 3.0, 4.0]));
        let o = decide(&c, RefLogs::Runs(&r), &RULE);
        let (vc, vr) = (var(&c) / 3.0, var(&r) / 3.0);
        let se = (vc + vr).sqrt();
        let df = (vc + vr).powi(2) / (vc * vc / 2.0 + vr * vr / 2.0);
        assert!((o.df.unwrap() - df).abs() < 1e-12);
        let d = mean(&c) - mean(&r);
        let (qp, qr) = (t_quantile(0.95, df), t_quantile(0.99, df));
        let (lo, hi) = o.ci.unwrap();
        assert!((lo - (d - qp * se).exp()).abs() < 1e-12 && (hi - (d + qr * se).exp()).abs() < 1e-12);
        assert_eq!(o.verdict, Verdict::Inconclusive);
        assert!(o.reason.contains("need"), "{}", o.reason);
    }

    #[test]
    fn single_runs_and_unknown_constants_are_inconclusive() {
        let o = decide(&[1.0], RefLogs::Runs(&[0.5]), &RULE);
        assert_eq!(o.verdict, Verdict::Inconclusive);
        assert!(o.reason.contains("no run-to-run spread"), "{}", o.reason);
        let o = decide(&logs(&[1.0, 1.1, 0.9]), RefLogs::Constant(0.0), &RULE);
        assert_eq!(o.verdict, Verdict::Inconclusive);
        assert!(o.reason.contains("cannot judge significance"), "{}", o.reason);
        let exact = Rule {
            constant_is_exact: true,
            ..RULE
        };
        let o = decide(&logs(&[0.5]), RefLogs::Constant(0.0), &exact);
        assert_eq!(o.verdict, Verdict::Regression);
        let o = decide(&logs(&[1.0, 1.01, 0.99, 1.0]), RefLogs::Constant(0.0), &exact);
        assert_eq!(o.verdict, Verdict::Pass, "{o:?}");
    }

    #[test]
    fn one_candidate_run_against_many_reference_runs() {
        let r = logs(&[10.0, 10.3, 9.7, 10.1, 9.9, 10.2, 9.8, 10.0, 10.1, 9.9]);
        let o = decide(&logs(&[8.0]), RefLogs::Runs(&r), &RULE);
        assert_eq!(o.verdict, Verdict::Regression, "{o:?}");
        assert!(o.reason.contains("assumed for both"));
        let o = decide(&logs(&[10.05]), RefLogs::Runs(&r), &RULE);
        assert_ne!(o.verdict, Verdict::Regression, "{o:?}");
    }

    #[test]
    fn runs_needed_formula() {
        // Far from the margin: few runs; at the margin: more than MAX_RUNS.
        assert_eq!(runs_needed(0.01, 0.5, 0.05, 0.8), Some(2));
        assert_eq!(runs_needed(0.05, 0.0, 0.05, 0.8), None);
        let a = runs_needed(0.05, 0.05, 0.05, 0.8).unwrap();
        let b = runs_needed(0.10, 0.05, 0.05, 0.8).unwrap();
        // Doubling the spread needs about four times the runs.
        assert!((3.2..4.8).contains(&(b as f64 / a as f64)), "{a} {b}");
    }
}
