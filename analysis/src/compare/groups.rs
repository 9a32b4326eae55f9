//! Builds the comparisons' work list: for each reference, the candidate's and the
//! reference's figures per run and size, grouped the way they are combined.

use super::{Combine, Settings, GIB_PER_GB};
use crate::baseline::{Baseline, Statistic, Unit};
use crate::model::{Family, Metric, Run, Series};
use std::collections::{BTreeMap, BTreeSet};
use tcpx_units::format_size_label;

/// One run's headline figures of one metric, by size.
pub(super) type Figures = BTreeMap<u64, f64>;

/// The reference side of a group.
pub(super) enum GroupRef {
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
pub(super) struct Group {
    pub(super) pattern: String,
    pub(super) label: String,
    pub(super) reference: String,
    pub(super) metric: Metric,
    pub(super) combine: Combine,
    pub(super) sizes: Vec<u64>,
    pub(super) cand: Vec<Figures>,
    pub(super) refr: GroupRef,
    /// The reference records no run count or spread.
    pub(super) spread_unknown: bool,
}

/// Picks the series of `fam` in a run (filtered by `--variant`).
fn pick<'a>(run: &'a Run, fam: Option<Family>, variant: Option<&str>) -> Result<Option<&'a Series>, String> {
    let hits: Vec<&Series> = run
        .series
        .iter()
        .filter(|s| s.family == fam)
        .filter(|s| variant.is_none_or(|v| s.variant.contains(v)))
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

pub(super) fn sizes_of(series: &[&Series]) -> BTreeSet<u64> {
    series.iter().flat_map(|s| s.rows.keys().copied()).collect()
}

pub(super) fn fam_name(f: Option<Family>, fallback: &str) -> String {
    f.map_or_else(|| format!("unknown ({fallback})"), |f| f.short().to_string())
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
            pick(run, fam, s.variant.as_deref())
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
        (Some(a), Some(b)) if a != b => format!(
            "{}..{} ({} sizes, {what})",
            format_size_label(*a),
            format_size_label(*b),
            sizes.len()
        ),
        (Some(a), _) => format_size_label(*a),
        _ => "no sizes".into(),
    }
}

/// Groups against reference runs: one per metric over the reference's sizes.
pub(super) fn groups_vs_runs(
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
                pick(r, fam, s.variant.as_deref()).unwrap_or_else(|e| {
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
                problems.push(format!("size {} missing from some reference run", format_size_label(z)));
            } else if cs.iter().any(|c| !c.rows.contains_key(&z)) {
                problems.push(format!(
                    "missing size: {} ({z} B) is in the reference but not in every candidate run",
                    format_size_label(z)
                ));
            } else {
                sizes.push(z);
            }
        }
        let extra: Vec<String> = sizes_of(&cs)
            .difference(&all)
            .filter(|&&z| in_range(s, z))
            .map(|&x| format_size_label(x))
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

pub(super) fn sources(runs: &[Run]) -> String {
    runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>().join(", ")
}

/// Groups against a baseline file.
pub(super) fn groups_vs_baseline(
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
                format_size_label(z),
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
                for v in &mut vals {
                    *v *= GIB_PER_GB;
                }
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
        let constant = tcpx_units::median(&vals);
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
                        format_size_label(e.size_min),
                        format_size_label(e.size_max),
                        b.name,
                        e.metric
                    ));
                    continue;
                }
                out.push(Group {
                    pattern: pname.clone(),
                    label: format!(
                        "floor {constant} over {}..{} ({} sizes, slowest size)",
                        format_size_label(e.size_min),
                        format_size_label(e.size_max),
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
                    format_size_label(e.size_min),
                    format_size_label(e.size_max),
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
                            "different sizes: baseline {} {} is a mean over {} sizes {}..{} (step x{}: tcpx-perf -b {} -e {} -f {}); the candidate covers {}..{} ({} of those sizes present): a mean over a different size range is not comparable",
                            b.name, e.metric, want.len(), format_size_label(e.size_min), format_size_label(e.size_max), e.step_factor,
                            tcpx_units::format_size(e.size_min), tcpx_units::format_size(e.size_max), e.step_factor,
                            format_size_label(lo), format_size_label(hi), want.iter().filter(|z| present.contains(z)).count()
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
            None => GroupRef::Constants(list.iter().map(|(z, v)| (*z, tcpx_units::median(v))).collect()),
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
