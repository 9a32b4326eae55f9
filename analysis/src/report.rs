//! Markdown (CI logs, PR comments) and JSON renderings of a [`Report`].

use crate::compare::{Comparison, Kind, Report, Verdict};
use std::fmt::Write;

fn g(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.4}")
    }
}

fn p(x: Option<f64>) -> String {
    match x {
        Some(v) if v < 1e-4 => format!("{v:.1e}"),
        Some(v) => format!("{v:.4}"),
        None => "-".into(),
    }
}

fn ci(c: Option<(f64, f64)>) -> String {
    match c {
        Some((a, b)) => format!("[{a:.3}, {b:.3}]"),
        None => "-".into(),
    }
}

fn row(c: &Comparison) -> String {
    let (rank, t) = match c.kind {
        Kind::TwoSample => ("MWU", "Welch"),
        _ => ("sign", "t"),
    };
    let verdict = match c.verdict {
        Verdict::Pass => "pass".to_string(),
        Verdict::Regression => "**REGRESSION**".to_string(),
        Verdict::Inconclusive => "inconclusive".to_string(),
    };
    format!(
        "| {} | {} | {} | {} / {} | {} | {} | {} ({:+.1}%) | {} | {} {} | {} {} | {} | {} | {} |",
        c.pattern,
        c.label,
        c.metric,
        c.n_candidate,
        if c.n_reference == 0 {
            "const".to_string()
        } else {
            c.n_reference.to_string()
        },
        g(c.median_candidate),
        g(c.median_reference),
        format_args!("{:.3}", c.ratio),
        (c.ratio - 1.0) * 100.0,
        ci(c.ratio_ci),
        rank,
        p(c.rank_test.map(|x| x.p)),
        t,
        p(c.t_test.map(|x| x.p)),
        p(c.p_adjusted),
        verdict,
        c.reason
    )
}

/// The Markdown summary.
pub fn markdown(r: &Report, title: &str) -> String {
    let s = &r.settings;
    let mut o = String::new();
    let _ = writeln!(o, "## {title}: {}\n", r.verdict.to_uppercase());
    let _ = writeln!(o, "- exit code: {}", r.exit_code);
    let _ = writeln!(o, "- candidate: {}", r.candidate.join(", "));
    let _ = writeln!(o, "- reference: {}", r.reference);
    let _ = writeln!(
        o,
        "- rule: regression if the {:.0}% bootstrap CI of the performance ratio lies below {:.3} (threshold {:.1}%) and the Holm-adjusted one-sided p < {}; pass if the CI lower bound >= {:.3}; otherwise inconclusive{}",
        s.confidence * 100.0,
        1.0 - s.threshold,
        s.threshold * 100.0,
        s.alpha,
        1.0 - s.threshold,
        if s.allow_inconclusive { " (allowed)" } else { " (fails the gate)" }
    );
    let _ = writeln!(
        o,
        "- bootstrap: {} resamples of the ratio of medians, seed {:#x}; min samples {}; replication {:?}",
        s.resamples, s.seed, s.min_samples, s.replication
    );
    let counts = |v: Verdict| r.comparisons.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        o,
        "- comparisons: {} ({} pass, {} regression, {} inconclusive)\n",
        r.comparisons.len(),
        counts(Verdict::Pass),
        counts(Verdict::Regression),
        counts(Verdict::Inconclusive)
    );
    if !r.problems.is_empty() {
        let _ = writeln!(o, "### Invalid or missing input\n");
        for x in &r.problems {
            let _ = writeln!(o, "- {x}");
        }
        o.push('\n');
    }
    if !r.refusals.is_empty() {
        let _ = writeln!(o, "### Refused (apples-to-oranges; `--force` to override)\n");
        for x in &r.refusals {
            let _ = writeln!(o, "- {x}");
        }
        o.push('\n');
    }
    if !r.comparisons.is_empty() {
        let _ = writeln!(
            o,
            "| pattern | size | metric | n cand / ref | median cand | median ref | ratio cand/ref | {:.0}% CI | rank p | t p | p (Holm) | verdict | why |",
            s.confidence * 100.0
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for c in &r.comparisons {
            let _ = writeln!(o, "{}", row(c));
        }
        o.push('\n');
        let _ = writeln!(
            o,
            "Units: bandwidths in GB/s (10^9 B/s), time in us. For time, lower is better: the decision uses 1/ratio. p-values are one-sided (H1: candidate worse)."
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\n### Warnings\n");
        for x in &r.warnings {
            let _ = writeln!(o, "- {x}");
        }
    }
    o
}

/// The JSON verdict.
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
