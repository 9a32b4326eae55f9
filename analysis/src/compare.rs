//! Comparison engine: pairs the candidate with the references (runs or baseline files), refuses
//! apples-to-oranges, builds one observation per run and comparison (see [`crate::decision`])
//! and the verdicts; per-size figures are kept as diagnostics.

use crate::baseline::{Baseline, Statistic, Unit};
use crate::decision::{self, Outcome, RefLogs, Rule, Verdict};
use crate::model::{fmt_size, Family, Format, Metric, Run, Series};
use crate::stats;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

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

/// One run's headline figures of one metric, by size.
type Figures = BTreeMap<u64, f64>;

/// The reference side of a group.
enum GroupRef {
    /// Reference runs: each is combined like a candidate run.
    Runs(Vec<Figures>),
    /// Per-size constants: candidate figures are divided by them; reference log 0.
    Constants(Figures),
    /// One value per reference run of an arithmetic mean over sizes.
    MeanRuns(Vec<f64>),
    /// One constant for an arithmetic mean over sizes.
    MeanConstant(f64),
}

/// Work list entry: everything one comparison needs.
struct Group {
    pattern: String,
    label: String,
    reference: String,
    metric: Metric,
    combine: Combine,
    sizes: Vec<u64>,
    cand: Vec<Figures>,
    refr: GroupRef,
    /// The reference records no run count or spread.
    spread_unknown: bool,
}

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
fn evaluate(g: &Group, s: &Settings) -> (Comparison, Vec<SizeRow>) {
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
                    Combine::Minimum => format!("{} (floor)", fmt_size(z)),
                    _ => fmt_size(z),
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
            });
        }
    }
    let c = Comparison {
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
                let here: Vec<&Series> = run
                    .series
                    .iter()
                    .filter(|x| s.variant.as_ref().is_none_or(|v| x.variant.contains(v.as_str())))
                    .collect();
                if here.len() == 1 {
                    let c = here[0];
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

/// The job shape a run reports: endpoints (GPUs, NCCL ranks), MPI ranks and nodes.
/// nccl-tests' "ranks" are NCCL ranks, i.e. endpoints; its MPI layout and nodes are not parsed.
pub fn shape(run: &Run) -> BTreeMap<&'static str, String> {
    let l = |k: &str| run.labels.get(k).cloned();
    let mut out = BTreeMap::new();
    let pairs = match run.format {
        Format::TcpxPerfDir | Format::TcpxPerfCsv => [
            ("endpoints", l("endpoints")),
            ("MPI ranks", l("ranks")),
            ("nodes", l("nodes")),
        ],
        Format::NcclTestsText | Format::NcclTestsJson => {
            [("endpoints", l("ranks")), ("MPI ranks", None), ("nodes", None)]
        }
    };
    for (k, v) in pairs {
        if let Some(v) = v {
            out.insert(k, v);
        }
    }
    out
}

/// Refuses sides whose job shapes differ (a side's runs must agree among themselves too).
fn check_shapes(
    sides: &[(String, Vec<BTreeMap<&'static str, String>>)],
    refusals: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    for key in ["endpoints", "MPI ranks", "nodes"] {
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (side, shapes) in sides {
            for sh in shapes {
                if let Some(v) = sh.get(key) {
                    seen.entry(v.clone()).or_default().insert(side.clone());
                }
            }
        }
        if seen.len() > 1 {
            let list: Vec<String> = seen
                .iter()
                .map(|(v, who)| format!("{v} ({})", who.iter().cloned().collect::<Vec<_>>().join(", ")))
                .collect();
            refusals.push(format!("different {key} counts: {}", list.join(" vs ")));
        }
    }
    for (side, shapes) in sides {
        if shapes.iter().any(|s| !s.contains_key("endpoints")) {
            warnings.push(format!(
                "{side} records no endpoint count: the job shape was not checked against it"
            ));
        }
    }
}

/// Headline figures of one metric for each series, restricted to `sizes`.
fn figures(series: &[&Series], sizes: &[u64], m: Metric) -> Vec<Figures> {
    series
        .iter()
        .map(|s| sizes.iter().map(|z| (*z, s.rows[z].summary.get(m))).collect())
        .collect()
}

fn in_range(s: &Settings, z: u64) -> bool {
    s.sizes.is_none_or(|(lo, hi)| (lo..=hi).contains(&z))
}

fn sizes_label(sizes: &[u64], what: &str) -> String {
    match (sizes.first(), sizes.last()) {
        (Some(a), Some(b)) if a != b => format!("{}..{} ({} sizes, {what})", fmt_size(*a), fmt_size(*b), sizes.len()),
        (Some(a), _) => fmt_size(*a),
        _ => "no sizes".into(),
    }
}

/// Groups against reference runs: one per metric over the reference's sizes.
fn groups_vs_runs(
    cands: &[Run],
    refs: &[Run],
    s: &Settings,
    out: &mut Vec<Group>,
    refusals: &mut Vec<String>,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let desc = format!("{} run(s): {}", refs.len(), sources(refs));
    let fams: BTreeSet<Option<Family>> = refs.iter().flat_map(|r| r.series.iter().map(|x| x.family)).collect();
    for fam in fams {
        let ref_series: Vec<&Series> = refs
            .iter()
            .filter_map(|r| {
                pick(r, fam, &s.variant).unwrap_or_else(|e| {
                    problems.push(e);
                    None
                })
            })
            .collect();
        if ref_series.len() != refs.len() {
            problems.push(format!("not every reference run has pattern {}", fam_name(fam, "?")));
            continue;
        }
        let ref_pattern = ref_series[0].pattern.clone();
        let cs = select_candidates(cands, fam, &ref_pattern, s, refusals, problems);
        if cs.len() != cands.len() || cs.is_empty() {
            continue;
        }
        let all: BTreeSet<u64> = sizes_of(&ref_series);
        let mut sizes = Vec::new();
        for &z in all.iter().filter(|&&z| in_range(s, z)) {
            if ref_series.iter().any(|r| !r.rows.contains_key(&z)) {
                problems.push(format!("size {} missing from some reference run", fmt_size(z)));
            } else if cs.iter().any(|c| !c.rows.contains_key(&z)) {
                problems.push(format!(
                    "missing size: {} ({z} B) is in the reference but not in every candidate run",
                    fmt_size(z)
                ));
            } else {
                sizes.push(z);
            }
        }
        let extra: Vec<String> = sizes_of(&cs)
            .difference(&all)
            .filter(|&&z| in_range(s, z))
            .map(|&x| fmt_size(x))
            .collect();
        if !extra.is_empty() {
            warnings.push(format!(
                "candidate sizes not in the reference (not compared): {}",
                extra.join(", ")
            ));
        }
        if sizes.is_empty() {
            problems.push("no size in common (within --sizes)".into());
            continue;
        }
        for &m in &s.metrics {
            out.push(Group {
                pattern: fam_name(fam, &ref_pattern),
                label: sizes_label(&sizes, "geometric mean"),
                reference: desc.clone(),
                metric: m,
                combine: Combine::GeometricMean,
                sizes: sizes.clone(),
                cand: figures(&cs, &sizes, m),
                refr: GroupRef::Runs(figures(&ref_series, &sizes, m)),
                spread_unknown: false,
            });
        }
    }
}

fn sources(runs: &[Run]) -> String {
    runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>().join(", ")
}

/// Groups against a baseline file.
fn groups_vs_baseline(
    cands: &[Run],
    b: &Baseline,
    s: &Settings,
    out: &mut Vec<Group>,
    refusals: &mut Vec<String>,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let cs = select_candidates(cands, b.family, &b.pattern, s, refusals, problems);
    if b.placement.as_deref() == Some("both") {
        warnings.push(format!(
            "baseline {}: its means include in-place measurements (nccl-tests footer); the candidate uses one placement",
            b.name
        ));
    }
    let known_runs = b.runs.filter(|&r| r >= 2);
    if known_runs.is_none() {
        warnings.push(format!(
            "baseline {} records {}: its values have no known spread, so the gate cannot judge significance against them (--allow-point-estimates treats them as exact)",
            b.name,
            match b.runs {
                Some(1) => "a single run".to_string(),
                _ => "no run count".to_string(),
            }
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
    if cs.len() != cands.len() || cs.is_empty() {
        return;
    }
    let pname = fam_name(b.family, &b.pattern);
    let desc = format!("baseline {} ({})", b.name, b.file);
    let have = sizes_of(&cs);
    let missing = |z: u64, problems: &mut Vec<String>| {
        let ok = cs.iter().all(|c| c.rows.contains_key(&z));
        if !ok {
            problems.push(format!(
                "missing size: {} ({z} B) is in baseline {} but not in every candidate run",
                fmt_size(z),
                b.name
            ));
        }
        ok
    };
    // Per-size single values of one metric form one comparison; run-aligned lists (runs >= 2)
    // rebuild the reference runs.
    let mut per_size: BTreeMap<Metric, Vec<(u64, Vec<f64>)>> = BTreeMap::new();
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
        let runs_aligned = known_runs.is_some_and(|r| vals.len() == r);
        let constant = stats::median(&vals);
        match e.statistic {
            Statistic::PerSize if e.size_min == e.size_max => {
                if in_range(s, e.size_min) && missing(e.size_min, problems) {
                    let v = if runs_aligned { vals } else { vec![constant] };
                    per_size.entry(e.metric).or_default().push((e.size_min, v));
                }
            }
            Statistic::PerSize => {
                let sizes: Vec<u64> = have
                    .range(e.size_min..=e.size_max)
                    .copied()
                    .filter(|&z| in_range(s, z))
                    .filter(|&z| missing(z, problems))
                    .collect();
                if sizes.is_empty() {
                    problems.push(format!(
                        "missing sizes: the candidate has no size in {}..{} (baseline {} {})",
                        fmt_size(e.size_min),
                        fmt_size(e.size_max),
                        b.name,
                        e.metric
                    ));
                    continue;
                }
                out.push(Group {
                    pattern: pname.clone(),
                    label: format!(
                        "floor {constant} over {}..{} ({} sizes, slowest size)",
                        fmt_size(e.size_min),
                        fmt_size(e.size_max),
                        sizes.len()
                    ),
                    reference: desc.clone(),
                    metric: e.metric,
                    combine: Combine::Minimum,
                    cand: figures(&cs, &sizes, e.metric),
                    refr: GroupRef::Constants(sizes.iter().map(|&z| (z, constant)).collect()),
                    sizes,
                    spread_unknown: true,
                });
            }
            Statistic::MeanOverSizes => {
                let want: Vec<u64> = e.sizes();
                let mut other_range = false;
                let label = format!(
                    "mean over {}..{} ({} sizes)",
                    fmt_size(e.size_min),
                    fmt_size(e.size_max),
                    want.len()
                );
                for ser in &cs {
                    let present: BTreeSet<u64> = ser
                        .rows
                        .keys()
                        .copied()
                        .filter(|z| (e.size_min..=e.size_max).contains(z))
                        .collect();
                    if present != want.iter().copied().collect() {
                        other_range = true;
                        let (lo, hi) = (have.first().copied().unwrap_or(0), have.last().copied().unwrap_or(0));
                        refusals.push(format!(
                            "baseline {} {} is a mean over {} sizes {}..{} (step x{}); the candidate covers {}..{} ({} of those sizes present): a mean over a different size range is not comparable",
                            b.name, e.metric, want.len(), fmt_size(e.size_min), fmt_size(e.size_max), e.step_factor,
                            fmt_size(lo), fmt_size(hi), want.iter().filter(|z| present.contains(z)).count()
                        ));
                    }
                }
                if other_range {
                    continue;
                }
                out.push(Group {
                    pattern: pname.clone(),
                    label,
                    reference: desc.clone(),
                    metric: e.metric,
                    combine: Combine::ArithmeticMean,
                    cand: figures(&cs, &want, e.metric),
                    refr: if runs_aligned {
                        GroupRef::MeanRuns(vals)
                    } else {
                        GroupRef::MeanConstant(constant)
                    },
                    sizes: want,
                    spread_unknown: !runs_aligned,
                });
            }
        }
    }
    for (m, list) in per_size {
        let sizes: Vec<u64> = list.iter().map(|x| x.0).collect();
        let aligned = known_runs.filter(|&r| list.iter().all(|(_, v)| v.len() == r));
        let refr = match aligned {
            Some(r) => GroupRef::Runs((0..r).map(|i| list.iter().map(|(z, v)| (*z, v[i])).collect()).collect()),
            None => GroupRef::Constants(list.iter().map(|(z, v)| (*z, stats::median(v))).collect()),
        };
        out.push(Group {
            pattern: pname.clone(),
            label: sizes_label(&sizes, "geometric mean"),
            reference: desc.clone(),
            metric: m,
            combine: Combine::GeometricMean,
            cand: figures(&cs, &sizes, m),
            refr,
            sizes,
            spread_unknown: aligned.is_none(),
        });
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
    let mut shapes = vec![("candidate".to_string(), cands.iter().map(shape).collect::<Vec<_>>())];
    let mut ref_desc = Vec::new();
    for r in references {
        match r {
            Reference::Runs(refs) => {
                ref_desc.push(format!("{} run(s): {}", refs.len(), sources(refs)));
                check_runs(refs, "reference", &mut problems);
                shapes.push(("reference runs".into(), refs.iter().map(shape).collect()));
                groups_vs_runs(cands, refs, s, &mut groups, &mut refusals, &mut problems, &mut warnings);
            }
            Reference::Baseline(b) => {
                ref_desc.push(format!("baseline {} ({})", b.name, b.file));
                shapes.push((format!("baseline {}", b.name), vec![b.shape()]));
                groups_vs_baseline(cands, b, s, &mut groups, &mut refusals, &mut problems, &mut warnings);
            }
        }
    }
    check_shapes(&shapes, &mut refusals, &mut warnings);
    refusals.sort();
    refusals.dedup();
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
