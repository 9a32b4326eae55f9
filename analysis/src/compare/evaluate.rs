//! One group becomes one comparison: each run's log performance over the group's sizes (see
//! [`crate::decision`]), and the per-size diagnostics.

use super::groups::{Figures, Group, GroupRef};
use super::{Combine, Comparison, Settings, SizeRow, NEAR_ZERO_GBPS};
use crate::decision::{self, Outcome, RefLogs, Rule};
use crate::model::Metric;
use crate::stats;
use tcpx_units::format_size_label;

/// Performance (higher is better) of a figure.
fn perf(m: Metric, x: f64) -> f64 {
    if m.higher_is_better() {
        x
    } else {
        1.0 / x
    }
}

fn near_zero(m: Metric, x: f64) -> bool {
    !x.is_finite() || x <= 0.0 || (m.higher_is_better() && x < NEAR_ZERO_GBPS)
}

/// Log performance of one run over `sizes`, relative to per-size denominators.
fn run_log(g: &Group, fig: &Figures, sizes: &[u64], den: Option<&Figures>) -> f64 {
    let rel = |z: &u64| {
        let p = perf(g.metric, fig[z]);
        let d = den.map_or(1.0, |d| perf(g.metric, d[z]));
        (p / d).ln()
    };
    match g.combine {
        Combine::GeometricMean => sizes.iter().map(rel).sum::<f64>() / sizes.len() as f64,
        Combine::Minimum => sizes.iter().map(rel).fold(f64::INFINITY, f64::min),
        Combine::ArithmeticMean => {
            let m: Vec<f64> = sizes.iter().map(|z| perf(g.metric, fig[z])).collect();
            stats::mean(&m).ln()
        }
    }
}

fn log_spread(x: &[f64]) -> Option<f64> {
    (x.len() >= 2).then(|| {
        let l: Vec<f64> = x.iter().map(|v| v.ln()).collect();
        stats::var(&l).sqrt()
    })
}

fn geomean(x: &[f64]) -> f64 {
    (x.iter().map(|v| v.ln()).sum::<f64>() / x.len() as f64).exp()
}

/// Evaluates one group: the comparison and its per-size rows.
pub(super) fn evaluate(g: &Group, s: &Settings) -> (Comparison, Vec<SizeRow>) {
    let m = g.metric;
    let ref_figs: Vec<&Figures> = match &g.refr {
        GroupRef::Runs(r) => r.iter().collect(),
        GroupRef::Constants(c) => vec![c],
        _ => Vec::new(),
    };
    let zero = |z: &u64| {
        g.cand
            .iter()
            .chain(ref_figs.iter().copied())
            .any(|f| near_zero(m, f[z]))
    };
    let (excluded, used): (Vec<u64>, Vec<u64>) = if g.combine == Combine::ArithmeticMean {
        (Vec::new(), g.sizes.clone())
    } else {
        g.sizes.iter().partition(|z| zero(z))
    };
    let rule = Rule {
        threshold: s.threshold,
        alpha: s.alpha,
        pass_alpha: s.pass_alpha,
        constant_is_exact: s.allow_point_estimates,
    };
    let den = match &g.refr {
        GroupRef::Constants(c) => Some(c),
        _ => None,
    };
    let cand: Vec<f64> = g.cand.iter().map(|f| run_log(g, f, &used, den)).collect();
    let refs: Vec<f64> = match &g.refr {
        GroupRef::Runs(r) => r.iter().map(|f| run_log(g, f, &used, None)).collect(),
        GroupRef::MeanRuns(v) => v.iter().map(|x| x.ln()).collect(),
        _ => Vec::new(),
    };
    let reference = match &g.refr {
        GroupRef::Runs(_) | GroupRef::MeanRuns(_) => RefLogs::Runs(&refs),
        GroupRef::Constants(_) => RefLogs::Constant(0.0),
        GroupRef::MeanConstant(k) => RefLogs::Constant(k.ln()),
    };
    let mut outcome = if used.is_empty() {
        Outcome {
            reason: "every size has a (near) zero bandwidth: nothing to compare".into(),
            ..decision::decide(&[], RefLogs::Constant(0.0), &rule)
        }
    } else {
        decision::decide(&cand, reference, &rule)
    };
    if g.spread_unknown && matches!(reference, RefLogs::Runs(_)) {
        outcome.reason.push_str(" [reference values of unknown run count]");
    }
    let metric_ratio = if m.higher_is_better() {
        outcome.ratio
    } else {
        1.0 / outcome.ratio
    };
    let mut rows = Vec::new();
    if g.combine != Combine::ArithmeticMean {
        for &z in &g.sizes {
            let c: Vec<f64> = g.cand.iter().map(|f| f[&z]).collect();
            let r: Vec<f64> = ref_figs.iter().map(|f| f[&z]).collect();
            let note = if excluded.contains(&z) {
                format!("excluded: bandwidth < {NEAR_ZERO_GBPS} GB/s")
            } else {
                String::new()
            };
            let (cg, rg) = if note.is_empty() {
                (geomean(&c), geomean(&r))
            } else {
                (stats::mean(&c), stats::mean(&r))
            };
            rows.push(SizeRow {
                pattern: g.pattern.clone(),
                size: z,
                label: match g.combine {
                    Combine::Minimum => format!("{} (floor)", format_size_label(z)),
                    _ => format_size_label(z),
                },
                metric: m,
                n_candidate: c.len(),
                n_reference: matches!(g.refr, GroupRef::Runs(_)).then_some(r.len()),
                candidate: cg,
                reference: rg,
                ratio: cg / rg,
                spread_candidate: log_spread(&c),
                spread_reference: if matches!(g.refr, GroupRef::Runs(_)) {
                    log_spread(&r)
                } else {
                    None
                },
                note,
                compared_with: g.reference.clone(),
            });
        }
    }
    let noise = if used.is_empty() {
        Vec::new()
    } else {
        noise(&cand, &refs, s.threshold)
    };
    let c = Comparison {
        noise,
        pattern: g.pattern.clone(),
        label: g.label.clone(),
        reference: g.reference.clone(),
        metric: m,
        unit: m.unit(),
        higher_is_better: m.higher_is_better(),
        combine: g.combine,
        sizes: used,
        excluded_sizes: excluded,
        metric_ratio,
        outcome,
        p_adjusted: None,
    };
    (c, rows)
}

/// What the runs' noise means for the verdict, said even when it passes (issue 54): a reference
/// whose run-to-run spread exceeds the threshold it is judged against (one of its runs differs
/// from another by more than the change the gate decides on), and candidate runs outside the
/// range of the reference runs, in either direction. `cand` and `refs` are log performances.
fn noise(cand: &[f64], refs: &[f64], threshold: f64) -> Vec<String> {
    let mut out = Vec::new();
    if refs.len() < 2 {
        return out;
    }
    let centre = stats::mean(refs);
    let pct = |l: f64| format!("{:+.1}%", ((l - centre).exp() - 1.0) * 100.0);
    let spread = stats::var(refs).sqrt();
    if spread > threshold {
        out.push(format!(
            "noisy reference: its {} runs spread {:.1}% run to run, more than the {:.1}% threshold it is judged against (its runs lie at {}..{} of their mean)",
            refs.len(),
            spread * 100.0,
            threshold * 100.0,
            pct(refs.iter().copied().fold(f64::INFINITY, f64::min)),
            pct(refs.iter().copied().fold(f64::NEG_INFINITY, f64::max))
        ));
    }
    let (lo, hi) = (
        refs.iter().copied().fold(f64::INFINITY, f64::min),
        refs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let below: Vec<String> = cand.iter().filter(|&&c| c < lo).map(|&c| pct(c)).collect();
    let above: Vec<String> = cand.iter().filter(|&&c| c > hi).map(|&c| pct(c)).collect();
    for (side, outside) in [("below", below), ("above", above)] {
        if !outside.is_empty() {
            out.push(format!(
                "{} of {} candidate runs {side} the reference runs' range ({}..{} of their mean): {}",
                outside.len(),
                cand.len(),
                pct(lo),
                pct(hi),
                outside.join(", ")
            ));
        }
    }
    out
}
