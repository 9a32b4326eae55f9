//! Comparison engine: pairs the candidate with the references (runs or baseline files), refuses
//! apples-to-oranges, builds one observation per run and comparison (see [`crate::decision`])
//! and the verdicts; per-size figures are kept as diagnostics.

mod evaluate;
mod groups;

use crate::baseline::Baseline;
use crate::comparable;
use crate::decision::{Outcome, Verdict};
use crate::model::{Metric, Run};
use crate::stats;
use evaluate::evaluate;
use groups::{groups_vs_baseline, groups_vs_runs, sources, Group};
use serde::Serialize;

/// GiB/s to GB/s.
pub const GIB_PER_GB: f64 = 1.073_741_824;

/// Bandwidths below this (GB/s) are excluded from ratios: nccl-tests prints two decimals, so
/// such a value carries 50% or more rounding error, and 0.00 has no logarithm.
pub const NEAR_ZERO_GBPS: f64 = 0.01;

/// Settings of a comparison (all reported in the output).
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub metrics: Vec<Metric>,
    /// Practical threshold: a slowdown smaller than this fraction is "no change".
    pub threshold: f64,
    /// One-sided level of the regression test (Holm-adjusted over the comparisons).
    pub alpha: f64,
    /// One-sided level of the pass test.
    pub pass_alpha: f64,
    /// Only sizes in this range are gated (mean-over-sizes baselines keep their own range).
    pub sizes: Option<(u64, u64)>,
    pub force: bool,
    pub convert_units: bool,
    pub allow_point_estimates: bool,
    pub allow_inconclusive: bool,
    pub variant: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            metrics: Metric::ALL.to_vec(),
            threshold: 0.05,
            alpha: 0.01,
            pass_alpha: 0.05,
            sizes: None,
            force: false,
            convert_units: false,
            allow_point_estimates: false,
            allow_inconclusive: false,
            variant: None,
        }
    }
}

/// One reference: runs (all run inputs of `-B` together) or one baseline file.
pub enum Reference {
    Runs(Vec<Run>),
    Baseline(Box<Baseline>),
}

/// How a run's per-size figures become its one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Combine {
    /// Geometric mean over sizes of the figure (of its ratio to a per-size constant).
    GeometricMean,
    /// The slowest size relative to a floor.
    Minimum,
    /// Arithmetic mean over sizes (nccl-tests' "Avg bus bandwidth").
    ArithmeticMean,
}

/// One gate-level comparison: one pattern x metric x reference (group of sizes).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub pattern: String,
    pub label: String,
    pub reference: String,
    pub metric: Metric,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub combine: Combine,
    /// Sizes that entered each run's observation.
    pub sizes: Vec<u64>,
    /// Sizes left out because a bandwidth was (near) zero.
    pub excluded_sizes: Vec<u64>,
    /// Geometric-mean ratio candidate / reference of the metric itself (time: > 1 is slower).
    pub metric_ratio: f64,
    /// The test on the performance ratio `ratio` (> 1 better; for time 1/metric_ratio).
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Holm-adjusted p of "regression" over the comparisons of the report.
    pub p_adjusted: Option<f64>,
    /// What the runs' noise means for the verdict: a noisy reference, candidate runs outside
    /// the reference runs' range ([`evaluate`]).
    pub noise: Vec<String>,
}

impl Comparison {
    pub fn verdict(&self) -> Verdict {
        self.outcome.verdict
    }
}

/// Per-size figures (diagnostics only: the sizes of one run are not independent evidence).
#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    pub pattern: String,
    pub size: u64,
    pub label: String,
    pub metric: Metric,
    pub n_candidate: usize,
    /// None: a constant.
    pub n_reference: Option<usize>,
    /// Geometric mean over runs of the run's headline figure.
    pub candidate: f64,
    pub reference: f64,
    pub ratio: f64,
    /// Run-to-run coefficient of variation (sd of logs).
    pub spread_candidate: Option<f64>,
    pub spread_reference: Option<f64>,
    pub note: String,
    /// The reference compared with (several `-B` references give several rows per size).
    pub compared_with: String,
}

/// The outcome of an analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: String,
    pub settings: Settings,
    pub candidate: Vec<String>,
    pub references: Vec<String>,
    pub comparisons: Vec<Comparison>,
    pub sizes: Vec<SizeRow>,
    /// Invalid/missing input, missing sizes, wrong data: exit 3.
    pub problems: Vec<String>,
    /// Apples-to-oranges reasons (exit 4 unless forced; then listed as warnings).
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
    pub verdict: String,
    pub exit_code: i32,
}

/// The gate's refusals of a run that is not fit to judge (wrong data, a failed run); `history add`
/// refuses with the same reasons.
pub fn check_runs(runs: &[Run], side: &str, problems: &mut Vec<String>) {
    for r in runs {
        let w = r.wrong_count();
        if w > 0.0 {
            problems.push(format!("{side} {}: wrong data (#wrong = {w})", r.source));
        }
        if let Some(st) = &r.status {
            if st != "ok" {
                problems.push(format!("{side} {}: run status is {st:?} (not \"ok\")", r.source));
            }
        }
    }
}

/// Runs the whole analysis against every reference.
pub fn analyze(cands: &[Run], references: &[Reference], s: &Settings) -> Report {
    let mut problems = Vec::new();
    let mut refusals = Vec::new();
    let mut warnings = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    check_runs(cands, "candidate", &mut problems);
    if cands.is_empty() {
        problems.push("no candidate input".into());
    }
    if references.is_empty() {
        problems.push("no reference".into());
    }
    let configuration = |r: &Run| comparable::with_shape(r.config.clone(), &r.shape());
    let mut sides = vec![(
        "candidate".to_string(),
        cands.iter().map(configuration).collect::<Vec<_>>(),
    )];
    let mut ref_desc = Vec::new();
    for r in references {
        match r {
            Reference::Runs(refs) => {
                ref_desc.push(format!("{} run(s): {}", refs.len(), sources(refs)));
                check_runs(refs, "reference", &mut problems);
                sides.push(("reference runs".into(), refs.iter().map(configuration).collect()));
                groups_vs_runs(cands, refs, s, &mut groups, &mut refusals, &mut problems, &mut warnings);
            }
            Reference::Baseline(b) => {
                ref_desc.push(format!("baseline {} ({})", b.name, b.file));
                sides.push((
                    format!("baseline {}", b.name),
                    vec![comparable::with_shape(b.config.clone(), &b.shape())],
                ));
                groups_vs_baseline(cands, b, s, &mut groups, &mut refusals, &mut problems, &mut warnings);
            }
        }
    }
    // One rule for every comparison (`compare`, `gate -B`, `gate --history`): each field that
    // changes a figure, the job shape included, the same on every side or refused by name.
    let found = comparable::check(&sides);
    refusals.extend(found.refusals.iter().cloned());
    warnings.extend(found.warnings.iter().cloned());
    refusals.sort();
    refusals.dedup();
    dedup_unordered(&mut problems);
    if !refusals.is_empty() {
        warnings.extend(found.hint());
    }
    warnings.dedup();

    let mut comparisons = Vec::new();
    let mut sizes = Vec::new();
    for g in &groups {
        let (c, rows) = evaluate(g, s);
        comparisons.push(c);
        sizes.extend(rows);
    }
    adjust(&mut comparisons, s);
    if comparisons.iter().any(|c| !c.excluded_sizes.is_empty()) {
        warnings.push(format!(
            "sizes with a bandwidth below {NEAR_ZERO_GBPS} GB/s are excluded from the ratios (listed in the per-size table)"
        ));
    }

    let forced = s.force && !refusals.is_empty();
    if forced {
        for r in refusals.drain(..) {
            warnings.push(format!("FORCED despite: {r}"));
        }
    }
    if !refusals.is_empty() {
        // Refused: numbers of an apples-to-oranges comparison are not reported.
        comparisons.clear();
        sizes.clear();
    }
    let any = |v: Verdict| comparisons.iter().any(|c| c.verdict() == v);
    let (verdict, exit_code) = if !problems.is_empty() {
        ("invalid input", crate::error::exit::INVALID_INPUT)
    } else if !refusals.is_empty() {
        ("refused", crate::error::exit::REFUSED)
    } else if comparisons.is_empty() {
        problems.push("nothing to compare".into());
        ("invalid input", crate::error::exit::INVALID_INPUT)
    } else if any(Verdict::Regression) {
        ("regression", crate::error::exit::REGRESSION)
    } else if any(Verdict::Inconclusive) {
        if s.allow_inconclusive {
            ("pass (inconclusive allowed)", crate::error::exit::PASS)
        } else {
            ("inconclusive", crate::error::exit::INCONCLUSIVE)
        }
    } else {
        ("pass", crate::error::exit::PASS)
    };
    Report {
        tool: format!("tcpx-analyze {}", env!("CARGO_PKG_VERSION")),
        settings: s.clone(),
        candidate: cands.iter().map(|r| r.source.clone()).collect(),
        references: ref_desc,
        comparisons,
        sizes,
        problems,
        refusals,
        warnings,
        verdict: verdict.to_string(),
        exit_code,
    }
}

/// Drops repeated lines, keeping the first of each in place.
fn dedup_unordered(lines: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    lines.retain(|l| seen.insert(l.clone()));
}

/// Holm-Bonferroni over the regression p-values of the report's comparisons: a regression
/// stands only when its adjusted p is below alpha.
fn adjust(cs: &mut [Comparison], s: &Settings) {
    let idx: Vec<usize> = (0..cs.len())
        .filter(|&i| cs[i].outcome.p_regression.is_some())
        .collect();
    let ps: Vec<f64> = idx.iter().map(|&i| cs[i].outcome.p_regression.unwrap_or(1.0)).collect();
    for (k, adj) in stats::holm(&ps).into_iter().enumerate() {
        let c = &mut cs[idx[k]];
        c.p_adjusted = Some(adj);
        if c.outcome.verdict == Verdict::Regression && adj >= s.alpha {
            c.outcome.verdict = Verdict::Inconclusive;
            c.outcome.reason = format!(
                "{} but the Holm-adjusted p {adj:.3} over {} comparisons is >= {}",
                c.outcome.reason,
                idx.len(),
                s.alpha
            );
        }
    }
}
