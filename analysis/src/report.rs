//! Markdown (CI logs, PR comments) and JSON renderings of a [`Report`].

use crate::compare::{Comparison, Report, SizeRow};
use crate::decision::{Verdict, POWER};
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

fn pair(c: Option<(f64, f64)>) -> String {
    match c {
        Some((a, b)) => format!("[{a:.3}, {b:.3}]"),
        None => "-".into(),
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// A ratio and its change in percent ("-" when there is none, e.g. no size left to compare).
fn ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.3} ({:+.1}%)", (r - 1.0) * 100.0)
    } else {
        "-".into()
    }
}

/// Text from the input (folder names, patterns, reasons) as Markdown shows it literally: a `<`
/// that could open HTML (a tag, `</`, `<!--`, `<?`, an autolink: a letter, `/`, `!` or `?`
/// follows) and an `&` that could start an entity become entities, so a name holding `<!--` or
/// a tag cannot hide or restyle the rest of a PR comment. Prose such as `bandwidth < 0.01` stays
/// as it is, readable in a terminal.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied().unwrap_or(' ');
        match c {
            '<' if next.is_ascii_alphabetic() || matches!(next, '/' | '!' | '?') => out.push_str("&lt;"),
            '&' if next.is_ascii_alphanumeric() || next == '#' => out.push_str("&amp;"),
            _ => out.push(c),
        }
    }
    out
}

/// [`text`] for a table cell: a `|` would end the cell, a line break the row.
pub fn cell(s: &str) -> String {
    text(s).replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn n_ref(n: Option<usize>) -> String {
    n.map_or("const".into(), |n| n.to_string())
}

fn comparison_row(c: &Comparison) -> String {
    let o = &c.outcome;
    let verdict = match o.verdict {
        Verdict::Regression => "**REGRESSION**",
        v => v.as_str(),
    };
    format!(
        "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |",
        cell(&c.pattern),
        cell(&c.label),
        c.metric,
        o.n_candidate,
        n_ref(o.n_reference),
        ratio(o.ratio),
        pair(o.ci),
        pct(o.spread),
        p(c.p_adjusted),
        pair(o.resolves),
        verdict,
        cell(&o.reason)
    )
}

fn size_row(r: &SizeRow, with_reference: bool) -> String {
    let note = if with_reference {
        format!("{} vs {}", r.note, r.compared_with).trim().to_string()
    } else {
        r.note.clone()
    };
    let note = cell(&note);
    format!(
        "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {note} |",
        cell(&r.pattern),
        cell(&r.label),
        r.metric,
        r.n_candidate,
        n_ref(r.n_reference),
        g(r.candidate),
        g(r.reference),
        ratio(r.ratio),
        pct(r.spread_candidate),
        pct(r.spread_reference),
    )
}

/// The Markdown summary.
pub fn markdown(r: &Report, title: &str) -> String {
    let s = &r.settings;
    let floor = 1.0 - s.threshold;
    let mut o = String::new();
    let _ = writeln!(o, "## {title}: {}\n", text(&r.verdict.to_uppercase()));
    let _ = writeln!(o, "- exit code: {}", r.exit_code);
    let _ = writeln!(o, "- candidate: {}", text(&r.candidate.join(", ")));
    for x in &r.references {
        let _ = writeln!(o, "- reference: {}", text(x));
    }
    let _ = writeln!(
        o,
        "- unit of replication: the run. Each run gives one observation per comparison: the geometric mean over the sizes of its headline figure (bytes / mean time, as results.csv and nccl-tests report it), or its slowest size against a floor, or its mean over sizes against a mean-over-sizes baseline"
    );
    let _ = writeln!(
        o,
        "- rule: performance ratio (> 1 better; time inverted) tested on the log scale against {floor:.3} (threshold {:.1}%) by one-sided t tests: regression if the {:.0}% upper bound is below {floor:.3} (alpha {}, Holm over the comparisons), pass if the {:.0}% lower bound is at or above it; otherwise inconclusive{}, with the runs per side that would decide ({:.0}% power). \"resolves\": true ratios the present run counts decide with {:.0}% power (below: regression, above: pass)",
        s.threshold * 100.0,
        (1.0 - s.alpha) * 100.0,
        s.alpha,
        (1.0 - s.pass_alpha) * 100.0,
        if s.allow_inconclusive { " (allowed)" } else { " (fails the gate)" },
        POWER * 100.0,
        POWER * 100.0
    );
    let counts = |v: Verdict| r.comparisons.iter().filter(|c| c.verdict() == v).count();
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
            let _ = writeln!(o, "- {}", text(x));
        }
        o.push('\n');
    }
    if !r.refusals.is_empty() {
        let _ = writeln!(o, "### Refused (apples-to-oranges; `--force` to override)\n");
        for x in &r.refusals {
            let _ = writeln!(o, "- {}", text(x));
        }
        o.push('\n');
    }
    if !r.comparisons.is_empty() {
        let _ = writeln!(
            o,
            "| pattern | sizes | metric | runs cand / ref | ratio cand/ref | bounds ({:.0}% lower, {:.0}% upper) | run-to-run spread | p regression (Holm) | resolves | verdict | why |",
            (1.0 - s.pass_alpha) * 100.0,
            (1.0 - s.alpha) * 100.0
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
        for c in &r.comparisons {
            let _ = writeln!(o, "{}", comparison_row(c));
        }
        o.push('\n');
        let noise: Vec<String> = r
            .comparisons
            .iter()
            .flat_map(|c| {
                c.noise
                    .iter()
                    .map(move |n| format!("- {} {} {}: {}", c.pattern, c.metric, c.label, text(n)))
            })
            .collect();
        if !noise.is_empty() {
            let _ = writeln!(o, "### Noise\n\n{}\n", noise.join("\n"));
        }
    }
    if !r.sizes.is_empty() {
        let _ = writeln!(
            o,
            "Per size (diagnostics, not tested: the sizes of one run are not independent evidence; geometric means over runs):\n"
        );
        let _ = writeln!(
            o,
            "| pattern | size | metric | runs cand / ref | cand | ref | ratio cand/ref | spread cand | spread ref | note |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for x in &r.sizes {
            let _ = writeln!(o, "{}", size_row(x, r.references.len() > 1));
        }
        o.push('\n');
        let _ = writeln!(
            o,
            "Units: bandwidths in GB/s (10^9 B/s), time in us. Spread: run-to-run standard deviation of the log (about the coefficient of variation)."
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\n### Warnings\n");
        for x in &r.warnings {
            let _ = writeln!(o, "- {}", text(x));
        }
    }
    o
}

/// The JSON verdict.
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::{cell, text};

    #[test]
    fn input_text_cannot_open_html_but_prose_stays_readable() {
        assert_eq!(text("run<!--x"), "run&lt;!--x");
        assert_eq!(
            text("<b>bold</b> <?x <https://e>"),
            "&lt;b>bold&lt;/b> &lt;?x &lt;https://e>"
        );
        assert_eq!(text("&amp; &#60; &lt;"), "&amp;amp; &amp;#60; &amp;lt;");
        assert_eq!(
            text("bandwidth < 0.01 GB/s & more, a<3"),
            "bandwidth < 0.01 GB/s & more, a<3"
        );
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
