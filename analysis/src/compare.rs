//! Comparison engine: pairs the candidate with the reference (runs or a baseline file),
//! refuses apples-to-oranges, computes per-size statistics and the verdicts.

use crate::baseline::{Baseline, Statistic, Unit};
use crate::model::{fmt_size, Family, Metric, Run, Series};
use crate::stats;
use serde::Serialize;
use std::collections::BTreeSet;

/// GiB/s to GB/s.
pub const GIB_PER_GB: f64 = 1.073_741_824;

/// What one observation stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replication {
    /// Per-run values when a side has >= 2 runs, else that run's per-iteration samples.
    #[default]
    Auto,
    /// One value per run (the run's own figure for the size: total bytes / total time).
    Runs,
    /// Per-iteration samples, pooled over the runs of a side.
    Iterations,
}

/// Settings of a comparison (all reported in the output).
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub metrics: Vec<Metric>,
    /// Practical threshold delta: a change smaller than this is "no change".
    pub threshold: f64,
    pub alpha: f64,
    pub confidence: f64,
    pub resamples: usize,
    pub seed: u64,
    pub min_samples: usize,
    pub replication: Replication,
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
            alpha: 0.05,
            confidence: 0.95,
            resamples: 5000,
            seed: 0x7C9C_5EED,
            min_samples: 5,
            replication: Replication::Auto,
            force: false,
            convert_units: false,
            allow_point_estimates: false,
            allow_inconclusive: false,
            variant: None,
        }
    }
}

/// The reference side of a comparison.
pub enum Reference {
    Runs(Vec<Run>),
    Baseline(Baseline),
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Candidate sample vs reference sample: Mann-Whitney U + Welch t, bootstrap of the ratio of medians.
    TwoSample,
    /// Candidate sample vs a constant: sign test + one-sample t, bootstrap of median / constant.
    OneSample,
    /// A single candidate value vs a constant (`--allow-point-estimates`): no uncertainty.
    Point,
}

/// One comparison: one pattern x size (or size range) x metric.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub pattern: String,
    /// The size in bytes (None for a mean over sizes).
    pub size: Option<u64>,
    pub label: String,
    pub metric: Metric,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub kind: Kind,
    pub n_candidate: usize,
    pub n_reference: usize,
    pub candidate_unit: String,
    pub reference_unit: String,
    pub median_candidate: f64,
    pub median_reference: f64,
    /// median(candidate) / median(reference).
    pub ratio: f64,
    /// Bootstrap CI of `ratio`.
    pub ratio_ci: Option<(f64, f64)>,
    /// Oriented so that > 1 is better: `ratio` for bandwidths, `1/ratio` for time.
    pub perf_ratio: f64,
    pub perf_ratio_ci: Option<(f64, f64)>,
    /// Mann-Whitney U (two-sample) or exact sign test (one-sample), one-sided "candidate worse".
    pub rank_test: Option<stats::Test>,
    /// Welch's t (two-sample) or one-sample t, one-sided "candidate worse".
    pub t_test: Option<stats::Test>,
    /// Holm-adjusted decision p-value (Mann-Whitney U for two samples, one-sample t vs a constant).
    pub p_adjusted: Option<f64>,
    pub verdict: Verdict,
    pub reason: String,
}

/// The outcome of an analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: String,
    pub settings: Settings,
    pub candidate: Vec<String>,
    pub reference: String,
    pub comparisons: Vec<Comparison>,
    /// Invalid/missing input, missing sizes, wrong data: exit 3.
    pub problems: Vec<String>,
    /// Apples-to-oranges reasons (exit 4 unless forced; then listed as warnings).
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
    pub verdict: String,
    pub exit_code: i32,
}

struct Obs {
    values: Vec<f64>,
    unit: String,
}

/// Picks the series of `fam` in a run (filtered by `--variant`).
fn pick<'a>(run: &'a Run, fam: Option<Family>, variant: &Option<String>) -> Result<Option<&'a Series>, String> {
    let hits: Vec<&Series> = run
        .series
        .iter()
        .filter(|s| s.family == fam)
        .filter(|s| variant.as_ref().is_none_or(|v| s.variant.contains(v.as_str())))
        .collect();
    match hits.len() {
        0 => Ok(None),
        1 => Ok(Some(hits[0])),
        _ => Err(format!(
            "{}: several series of pattern {} ({}); choose one with --variant",
            run.source,
            hits[0].pattern,
            hits.iter().map(|s| s.variant.as_str()).collect::<Vec<_>>().join(" | ")
        )),
    }
}

fn observations(series: &[&Series], size: u64, metric: Metric, repl: Replication) -> Option<Obs> {
    let rows: Option<Vec<_>> = series.iter().map(|s| s.rows.get(&size)).collect();
    let rows = rows?;
    let use_runs = match repl {
        Replication::Runs => true,
        Replication::Iterations => false,
        Replication::Auto => rows.len() >= 2,
    };
    if !use_runs {
        let v: Vec<f64> = rows
            .iter()
            .flat_map(|r| r.samples.iter().map(|s| s.get(metric)))
            .collect();
        if !v.is_empty() {
            return Some(Obs {
                values: v,
                unit: format!("iterations of {} run(s)", rows.len()),
            });
        }
    }
    let v: Vec<f64> = rows.iter().map(|r| r.summary.get(metric)).collect();
    let unit = if v.len() == 1 {
        "single value".to_string()
    } else {
        "runs".to_string()
    };
    Some(Obs { values: v, unit })
}

enum RefObs {
    Sample(Obs),
    Constant(f64),
}

struct Pending {
    c: Comparison,
    cand: Vec<f64>,
    refv: Option<Vec<f64>>,
    constant: f64,
}

fn new_comparison(
    pattern: &str,
    size: Option<u64>,
    label: String,
    metric: Metric,
    cand: Obs,
    refr: RefObs,
    s: &Settings,
) -> Pending {
    let hib = metric.higher_is_better();
    let mc = stats::median(&cand.values);
    let (mr, n_ref, ref_unit, refv, constant) = match &refr {
        RefObs::Sample(o) => (
            stats::median(&o.values),
            o.values.len(),
            o.unit.clone(),
            Some(o.values.clone()),
            f64::NAN,
        ),
        RefObs::Constant(c) => (*c, 0, "constant".to_string(), None, *c),
    };
    let ratio = mc / mr;
    let perf = if hib { ratio } else { 1.0 / ratio };
    let kind = if refv.is_some() {
        Kind::TwoSample
    } else {
        Kind::OneSample
    };
    Pending {
        c: Comparison {
            pattern: pattern.to_string(),
            size,
            label,
            metric,
            unit: metric.unit(),
            higher_is_better: hib,
            kind,
            n_candidate: cand.values.len(),
            n_reference: n_ref,
            candidate_unit: cand.unit.clone(),
            reference_unit: ref_unit,
            median_candidate: mc,
            median_reference: mr,
            ratio,
            ratio_ci: None,
            perf_ratio: perf,
            perf_ratio_ci: None,
            rank_test: None,
            t_test: None,
            p_adjusted: None,
            verdict: Verdict::Inconclusive,
            reason: String::new(),
        },
        cand: cand.values,
        refv,
        constant,
    }
    .with_settings(s)
}

impl Pending {
    fn with_settings(mut self, s: &Settings) -> Pending {
        let c = &mut self.c;
        let hib = c.higher_is_better;
        let too_few = c.n_candidate < s.min_samples || (self.refv.is_some() && c.n_reference < s.min_samples);
        if too_few {
            if self.refv.is_none() && s.allow_point_estimates {
                c.kind = Kind::Point;
            }
            return self;
        }
        let key = format!("{}|{}|{}", c.pattern, c.label, c.metric);
        let seed = stats::derive_seed(s.seed, &key);
        let ci = stats::bootstrap_ratio_ci(
            &self.cand,
            self.refv.as_deref(),
            self.constant,
            s.resamples,
            s.confidence,
            seed,
        );
        c.ratio_ci = Some(ci);
        c.perf_ratio_ci = Some(if hib { ci } else { (1.0 / ci.1, 1.0 / ci.0) });
        match &self.refv {
            Some(r) => {
                c.rank_test = stats::mann_whitney(&self.cand, r, hib);
                c.t_test = stats::welch(&self.cand, r, hib);
            }
            None => {
                c.rank_test = stats::sign_test(&self.cand, self.constant, hib);
                c.t_test = stats::t_onesample(&self.cand, self.constant, hib);
            }
        }
        self
    }

    /// The decision p-value: Mann-Whitney U for two samples (robust, no normality needed);
    /// the one-sample t test against a constant (the sign test is reported alongside: with
    /// n = 5 its smallest p is 1/32, too coarse for a Holm-corrected gate).
    fn primary_p(&self) -> Option<f64> {
        match self.c.kind {
            Kind::TwoSample => self.c.rank_test.or(self.c.t_test).map(|t| t.p),
            _ => self.c.t_test.or(self.c.rank_test).map(|t| t.p),
        }
    }
}

fn decide(c: &mut Comparison, s: &Settings) {
    let floor = 1.0 - s.threshold;
    match c.kind {
        Kind::Point => {
            if c.perf_ratio >= floor {
                c.verdict = Verdict::Pass;
                c.reason = format!(
                    "point estimate {:.3} >= {floor:.3} (no uncertainty: n={})",
                    c.perf_ratio, c.n_candidate
                );
            } else {
                c.verdict = Verdict::Regression;
                c.reason = format!(
                    "point estimate {:.3} < {floor:.3} (no uncertainty: n={})",
                    c.perf_ratio, c.n_candidate
                );
            }
        }
        _ => {
            let Some((lo, hi)) = c.perf_ratio_ci else {
                c.verdict = Verdict::Inconclusive;
                c.reason = if c.kind == Kind::TwoSample {
                    format!(
                        "too few samples (candidate n={}, reference n={}; need >= {})",
                        c.n_candidate, c.n_reference, s.min_samples
                    )
                } else {
                    format!(
                        "too few samples (candidate n={}; need >= {}; --allow-point-estimates to judge a single value)",
                        c.n_candidate, s.min_samples
                    )
                };
                return;
            };
            let p = c.p_adjusted.unwrap_or(1.0);
            if hi < floor && p < s.alpha {
                c.verdict = Verdict::Regression;
                c.reason = format!("CI upper {hi:.3} < {floor:.3} and p_holm {p:.2e} < {}", s.alpha);
            } else if lo >= floor {
                c.verdict = Verdict::Pass;
                c.reason = format!("CI lower {lo:.3} >= {floor:.3}");
            } else if hi < floor {
                c.verdict = Verdict::Inconclusive;
                c.reason = format!("CI upper {hi:.3} < {floor:.3} but p_holm {p:.2e} >= {}", s.alpha);
            } else {
                c.verdict = Verdict::Inconclusive;
                c.reason = format!("CI [{lo:.3}, {hi:.3}] straddles {floor:.3}");
            }
        }
    }
}

fn check_runs(runs: &[Run], side: &str, problems: &mut Vec<String>) {
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

fn sizes_of(series: &[&Series]) -> BTreeSet<u64> {
    series.iter().flat_map(|s| s.rows.keys().copied()).collect()
}

fn fam_name(f: Option<Family>, fallback: &str) -> String {
    f.map(|f| f.short().to_string())
        .unwrap_or_else(|| format!("unknown ({fallback})"))
}

/// Selects, in each candidate run, the series comparable with the reference family.
fn select_candidates<'a>(
    cands: &'a [Run],
    fam: Option<Family>,
    ref_pattern: &str,
    s: &Settings,
    refusals: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> Vec<&'a Series> {
    let mut out = Vec::new();
    for run in cands {
        let found = if fam.is_some() {
            pick(run, fam, &s.variant)
        } else {
            Ok(None)
        };
        match found {
            Err(e) => problems.push(e),
            Ok(Some(ser)) => out.push(ser),
            Ok(None) => {
                let cands_here: Vec<&Series> = run
                    .series
                    .iter()
                    .filter(|x| s.variant.as_ref().is_none_or(|v| x.variant.contains(v.as_str())))
                    .collect();
                if cands_here.len() == 1 {
                    let c = cands_here[0];
                    let why = match (fam, c.family) {
                        (None, _) => format!(
                            "the reference pattern {ref_pattern:?} is unknown: cannot tell whether {} ({}) is comparable",
                            c.pattern, run.source
                        ),
                        (_, None) => format!(
                            "{}: the candidate's collective is unknown ({:?}); name it with --pattern",
                            run.source, c.pattern
                        ),
                        (Some(a), Some(b)) => format!(
                            "different patterns: candidate {} is {} but the reference {ref_pattern} is {}",
                            run.source,
                            b.name(),
                            a.name()
                        ),
                    };
                    refusals.push(why);
                    out.push(c);
                } else {
                    problems.push(format!(
                        "{}: no series of pattern {} (has: {})",
                        run.source,
                        fam_name(fam, ref_pattern),
                        run.series
                            .iter()
                            .map(|x| x.pattern.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
    }
    out
}

/// Runs the whole analysis.
pub fn analyze(cands: &[Run], reference: &Reference, s: &Settings) -> Report {
    let mut problems = Vec::new();
    let mut refusals = Vec::new();
    let mut warnings = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    check_runs(cands, "candidate", &mut problems);
    if cands.is_empty() {
        problems.push("no candidate input".into());
    }
    let ref_desc;
    match reference {
        Reference::Runs(refs) => {
            ref_desc = refs.iter().map(|r| r.source.clone()).collect::<Vec<_>>().join(", ");
            check_runs(refs, "reference", &mut problems);
            let fams: BTreeSet<Option<Family>> = refs.iter().flat_map(|r| r.series.iter().map(|x| x.family)).collect();
            for fam in fams {
                let ref_series: Vec<&Series> = refs
                    .iter()
                    .filter_map(|r| match pick(r, fam, &s.variant) {
                        Ok(x) => x,
                        Err(e) => {
                            problems.push(e);
                            None
                        }
                    })
                    .collect();
                if ref_series.len() != refs.len() {
                    problems.push(format!("not every reference run has pattern {}", fam_name(fam, "?")));
                    continue;
                }
                let ref_pattern = ref_series[0].pattern.clone();
                let cs = select_candidates(cands, fam, &ref_pattern, s, &mut refusals, &mut problems);
                if cs.len() != cands.len() || cs.is_empty() {
                    continue;
                }
                let pname = fam_name(fam, &ref_pattern);
                let csizes = sizes_of(&cs);
                for size in sizes_of(&ref_series) {
                    for &m in &s.metrics {
                        let Some(ro) = observations(&ref_series, size, m, s.replication) else {
                            problems.push(format!("size {} missing from some reference run", fmt_size(size)));
                            continue;
                        };
                        let Some(co) = observations(&cs, size, m, s.replication) else {
                            problems.push(format!(
                                "missing size: {} ({size} B) is in the reference but not in every candidate run",
                                fmt_size(size)
                            ));
                            continue;
                        };
                        pending.push(new_comparison(
                            &pname,
                            Some(size),
                            fmt_size(size),
                            m,
                            co,
                            RefObs::Sample(ro),
                            s,
                        ));
                    }
                }
                let extra: Vec<String> = csizes
                    .difference(&sizes_of(&ref_series))
                    .map(|&x| fmt_size(x))
                    .collect();
                if !extra.is_empty() {
                    warnings.push(format!(
                        "candidate sizes not in the reference (not compared): {}",
                        extra.join(", ")
                    ));
                }
            }
        }
        Reference::Baseline(b) => {
            ref_desc = format!("baseline {} ({})", b.name, b.file);
            let cs = select_candidates(cands, b.family, &b.pattern, s, &mut refusals, &mut problems);
            if b.placement.as_deref() == Some("both") {
                warnings.push(format!(
                    "baseline {}: its means include in-place measurements (nccl-tests footer); the candidate uses one placement",
                    b.name
                ));
            }
            let entries: Vec<_> = b.entries.iter().filter(|e| s.metrics.contains(&e.metric)).collect();
            if entries.is_empty() {
                problems.push(format!(
                    "baseline {} has no entry for the selected metric(s) {}",
                    b.name,
                    s.metrics.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")
                ));
            }
            if cs.len() == cands.len() && !cs.is_empty() {
                let pname = fam_name(b.family, &b.pattern);
                for e in entries {
                    let mut vals = e.values.clone();
                    if e.unit == Unit::GiBps {
                        if s.convert_units {
                            vals.iter_mut().for_each(|v| *v *= GIB_PER_GB);
                            warnings.push(format!(
                                "baseline {} entry {} converted from GiB/s to GB/s (x{GIB_PER_GB})",
                                b.name, e.metric
                            ));
                        } else {
                            refusals.push(format!(
                                "baseline {} gives {} in GiB/s (2^30 B/s); results are in GB/s (10^9 B/s): pass --convert-units to convert",
                                b.name, e.metric
                            ));
                        }
                    }
                    let refobs = |vals: &Vec<f64>| {
                        if vals.len() == 1 {
                            RefObs::Constant(vals[0])
                        } else {
                            RefObs::Sample(Obs {
                                values: vals.clone(),
                                unit: "baseline values".into(),
                            })
                        }
                    };
                    match e.statistic {
                        Statistic::PerSize => {
                            let sizes: Vec<u64> = if e.size_min == e.size_max {
                                vec![e.size_min]
                            } else {
                                sizes_of(&cs).range(e.size_min..=e.size_max).copied().collect()
                            };
                            if sizes.is_empty() {
                                problems.push(format!(
                                    "missing sizes: the candidate has no size in {}..{} (baseline {} {})",
                                    fmt_size(e.size_min),
                                    fmt_size(e.size_max),
                                    b.name,
                                    e.metric
                                ));
                            }
                            for size in sizes {
                                match observations(&cs, size, e.metric, s.replication) {
                                    Some(co) => {
                                        let label = if e.size_min == e.size_max {
                                            fmt_size(size)
                                        } else {
                                            format!(
                                                "{} (floor {}..{})",
                                                fmt_size(size),
                                                fmt_size(e.size_min),
                                                fmt_size(e.size_max)
                                            )
                                        };
                                        pending.push(new_comparison(
                                            &pname,
                                            Some(size),
                                            label,
                                            e.metric,
                                            co,
                                            refobs(&vals),
                                            s,
                                        ))
                                    }
                                    None => problems.push(format!(
                                        "missing size: {} ({size} B) is in baseline {} but not in every candidate run",
                                        fmt_size(size),
                                        b.name
                                    )),
                                }
                            }
                        }
                        Statistic::MeanOverSizes => {
                            let want: BTreeSet<u64> = e.sizes().into_iter().collect();
                            let label = format!("mean over {}..{}", fmt_size(e.size_min), fmt_size(e.size_max));
                            let mut per_run = Vec::new();
                            for ser in &cs {
                                let have: BTreeSet<u64> = ser.rows.keys().copied().collect();
                                let in_range: BTreeSet<u64> = have.range(e.size_min..=e.size_max).copied().collect();
                                if in_range != want {
                                    let (lo, hi) =
                                        (have.first().copied().unwrap_or(0), have.last().copied().unwrap_or(0));
                                    refusals.push(format!(
                                        "baseline {} {} is a mean over {} sizes {}..{} (step x{}); the candidate covers {}..{} ({} of those sizes present): a mean over a different size range is not comparable",
                                        b.name, e.metric, want.len(), fmt_size(e.size_min), fmt_size(e.size_max), e.step_factor,
                                        fmt_size(lo), fmt_size(hi), want.intersection(&have).count()
                                    ));
                                }
                                if in_range.is_empty() {
                                    continue;
                                }
                                let m: Vec<f64> = in_range.iter().map(|z| ser.rows[z].summary.get(e.metric)).collect();
                                per_run.push(stats::mean(&m));
                            }
                            if per_run.len() == cs.len() {
                                let unit = if per_run.len() == 1 { "single value" } else { "runs" };
                                let co = Obs {
                                    values: per_run,
                                    unit: unit.into(),
                                };
                                pending.push(new_comparison(&pname, None, label, e.metric, co, refobs(&vals), s));
                            } else {
                                problems.push(format!("{label}: a candidate run has no size in the range"));
                            }
                        }
                    }
                }
            }
        }
    }
    refusals.sort();
    refusals.dedup();

    // Holm-Bonferroni per metric across sizes.
    for &m in &Metric::ALL {
        let idx: Vec<usize> = pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.c.metric == m && p.c.ratio_ci.is_some() && p.primary_p().is_some())
            .map(|(i, _)| i)
            .collect();
        let ps: Vec<f64> = idx.iter().map(|&i| pending[i].primary_p().unwrap_or(1.0)).collect();
        for (k, adj) in stats::holm(&ps).into_iter().enumerate() {
            pending[idx[k]].c.p_adjusted = Some(adj);
        }
    }
    let mut comparisons: Vec<Comparison> = pending.into_iter().map(|p| p.c).collect();
    let unit_kind = |u: &str| u.split(' ').next().unwrap_or("").to_string();
    if comparisons.iter().any(|c| {
        c.kind == Kind::TwoSample
            && unit_kind(&c.candidate_unit) != unit_kind(&c.reference_unit)
            && c.reference_unit != "baseline values"
    }) {
        warnings.push(
            "the two sides use different units of replication (runs vs iterations): per-iteration spread understates run-to-run variance; use --replication to align them"
                .into(),
        );
    }
    for c in &mut comparisons {
        decide(c, s);
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
    }
    let (verdict, exit_code) = if !problems.is_empty() {
        ("invalid input", crate::error::exit::INVALID_INPUT)
    } else if !refusals.is_empty() {
        ("refused", crate::error::exit::REFUSED)
    } else if comparisons.is_empty() {
        problems.push("nothing to compare".into());
        ("invalid input", crate::error::exit::INVALID_INPUT)
    } else if comparisons.iter().any(|c| c.verdict == Verdict::Regression) {
        ("regression", crate::error::exit::REGRESSION)
    } else if comparisons.iter().any(|c| c.verdict == Verdict::Inconclusive) {
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
        reference: ref_desc,
        comparisons,
        problems,
        refusals,
        warnings,
        verdict: verdict.to_string(),
        exit_code,
    }
}
