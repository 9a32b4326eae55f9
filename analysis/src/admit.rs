//! Which runs may be judged (issue 29): one run counted once, however it was copied, and runs
//! that lack something (a forced run, one below `NCCL_TESTS_MIN_BW`, an unchecked one, a
//! results.csv whose completion is unknown) only where a flag names it. `gate`,
//! `make-baseline` and `history add` all decide through this module, so they accept and refuse
//! alike. A baseline made from such runs keeps their waivers (issue 34): a gate against it needs
//! the same flags and names them; and no run is compared with itself, whether it stands on both
//! sides, a copy among the candidates, or among the runs a baseline was made from.

use crate::baseline::{Baseline, Statistic, Unit};
use crate::error::Failure;
use crate::model::{Format, Run, Sample, Waiver};
use std::collections::BTreeMap;
use std::path::Path;

/// The `--allow-*` flags of a command: which [`Waiver`]s it accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct Allow {
    /// Accept a results.csv given without its summary.json (whether the run completed is
    /// unknown); the verdict says so.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Accept runs forced past preflight's error findings (tcpx-perf --force); the verdict says so.
    #[arg(long)]
    pub allow_forced: bool,
    /// Accept runs whose bytes were neither data-checked nor verified exactly (-c 0 with only
    /// the wire counters, a lower bound); the verdict says so.
    #[arg(long)]
    pub allow_unchecked: bool,
    /// Accept runs whose average busbw failed NCCL_TESTS_MIN_BW (tcpx-perf exit 7); the verdict
    /// says so.
    #[arg(long)]
    pub allow_below_min_bw: bool,
}

impl Allow {
    /// Every waiver (`compare`, which only reports, names them in its warnings).
    pub const ALL: Allow = Allow {
        allow_incomplete: true,
        allow_forced: true,
        allow_unchecked: true,
        allow_below_min_bw: true,
    };

    fn allows(self, w: Waiver) -> bool {
        match w {
            Waiver::Incomplete => self.allow_incomplete,
            Waiver::Forced => self.allow_forced,
            Waiver::Unchecked => self.allow_unchecked,
            Waiver::BelowMinBw => self.allow_below_min_bw,
        }
    }
}

/// What the run is and what fixes it, for the refusal line.
fn advice(w: Waiver) -> &'static str {
    match w {
        Waiver::Incomplete => "whether the run completed is unknown; give its result directory (its summary.json says), or pass --allow-incomplete",
        Waiver::Forced => "a run forced past preflight's error findings (tcpx-perf --force); fix the findings and rerun, or pass --allow-forced",
        Waiver::Unchecked => "an unchecked run (its bytes were neither data-checked nor verified by a witness that sees payload exactly); rerun with -c 1, or pass --allow-unchecked",
        Waiver::BelowMinBw => "the run failed NCCL_TESTS_MIN_BW (tcpx-perf exit 7); pass --allow-below-min-bw to judge it anyway",
    }
}

/// Every waiver a run needs, one line each: its own [`Run::waivers`] and, for unchecked sizes
/// or a summary saying `unchecked`, [`Waiver::Unchecked`].
pub fn waivers(r: &Run) -> Vec<(Waiver, String)> {
    let mut out = r.waivers.clone();
    if !r.unverified.is_empty() || r.status.as_deref() == Some("unchecked") {
        let first = r
            .unverified
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{}: status is \"unchecked\"", r.source));
        let more = r.unverified.len().saturating_sub(1);
        let what = if more > 0 {
            format!("{first} (and {more} more size(s))")
        } else {
            first
        };
        out.push((Waiver::Unchecked, what));
    }
    out.sort_by_key(|(w, _)| *w);
    out
}

/// The policy of `gate`, `make-baseline` and `history add`: a run needing a waiver its command
/// was not given is refused (one line naming the file and the flag); allowed ones come back as
/// notes for the verdict, and their status (`unchecked`, `below-min-bw`) counts as `ok`.
pub fn policy(runs: &mut [Run], allow: Allow) -> Result<Vec<String>, Failure> {
    let mut notes = Vec::new();
    for r in runs.iter_mut() {
        let needed = waivers(r);
        if let Some((w, what)) = needed.iter().find(|(w, _)| !allow.allows(*w)) {
            return Err(Failure::Input(format!("{what}: {}", advice(*w))));
        }
        for (w, what) in &needed {
            notes.push(format!("{} run allowed by {}: {what}", w.label(), w.flag()));
        }
        if !needed.is_empty() && matches!(r.status.as_deref(), Some("unchecked" | "below-min-bw")) {
            r.status = Some("ok".into());
        }
    }
    Ok(notes)
}

/// The verdict's mark for the waivers `notes` ([`policy`]) allowed: ` (FORCED + UNCHECKED runs
/// allowed)`, or nothing.
pub fn verdict_mark(notes: &[String]) -> String {
    let labels: Vec<&str> = Waiver::ALL
        .iter()
        .map(|w| w.label())
        .filter(|l| notes.iter().any(|n| n.starts_with(&format!("{l} run allowed"))))
        .collect();
    if labels.is_empty() {
        String::new()
    } else {
        format!(" ({} runs allowed)", labels.join(" + "))
    }
}

/// Every waiver the runs need ([`waivers`]), for the baseline made from them to record.
pub fn waived(runs: &[Run]) -> Vec<(Waiver, String)> {
    let mut out: Vec<(Waiver, String)> = runs.iter().flat_map(waivers).collect();
    out.sort();
    out
}

/// The policy of a gate against a baseline file: the waivers of the runs it was made from
/// ([`Baseline::waivers`]) need the gate's flags as the runs themselves would, and come back as
/// notes for the verdict's mark ([`verdict_mark`]).
pub fn baseline_policy(b: &Baseline, allow: Allow) -> Result<Vec<String>, Failure> {
    let mut notes = Vec::new();
    for &w in &b.waivers {
        let label = w.label();
        let which = b
            .waived
            .iter()
            .filter(|l| l.starts_with(&format!("{label}: ")))
            .cloned()
            .collect::<Vec<_>>();
        let which = if which.is_empty() {
            "the runs are not named".to_string()
        } else {
            which.join("; ")
        };
        if !allow.allows(w) {
            return Err(Failure::Input(format!(
                "{}: the baseline was made from {label} runs (make-baseline {}): a gate against it needs {} too, and its verdict says so",
                b.file,
                w.flag(),
                w.flag()
            )));
        }
        notes.push(format!(
            "{label} run allowed by {}: baseline {} was made from such runs: {which}",
            w.flag(),
            b.file
        ));
    }
    Ok(notes)
}

/// Refuses a candidate that is one of the reference runs ([`same_run`]: the same folder given on
/// both sides, or a copy of it): a run compared with itself passes whatever it measured.
pub fn disjoint(cands: &[Run], refs: &[Run]) -> Result<(), Failure> {
    for c in cands {
        if let Some((r, why)) = refs.iter().find_map(|r| same_run(r, c).map(|why| (r, why))) {
            return Err(Failure::Input(format!(
                "{}: content: {why}: the same run on both sides of the comparison (reference {}): a run compared with itself",
                c.source, r.source
            )));
        }
    }
    Ok(())
}

/// A candidate's figure for a per-size entry of baseline `b`: its series of the baseline's
/// pattern (and variant, where the baseline records one) at the entry's size.
fn figure_for(c: &Run, b: &Baseline, size: u64, metric: crate::model::Metric) -> Option<f64> {
    let variant = b.provenance.get("variant");
    c.series
        .iter()
        .filter(|s| s.pattern == b.pattern && variant.is_none_or(|v| *v == s.variant))
        .find_map(|s| s.rows.get(&size))
        .map(|row| row.summary.get(metric))
}

/// Refuses a candidate that is one of the runs baseline `b` was made from: every per-size value
/// the baseline holds for its run `i` equals the candidate's figure at full precision
/// (`make-baseline` writes each run's figure exactly). Candidates read from a stdout table
/// (2 decimals) are not judged so: equal by chance there.
pub fn not_in_baseline(cands: &[Run], b: &Baseline) -> Result<(), Failure> {
    let Some(n) = b.runs else { return Ok(()) };
    let entries: Vec<_> = b
        .entries
        .iter()
        .filter(|e| e.statistic == Statistic::PerSize && e.size_min == e.size_max && e.values.len() == n)
        .filter(|e| e.unit != Unit::GiBps)
        .collect();
    if entries.is_empty() {
        return Ok(());
    }
    for c in cands.iter().filter(|c| precise(c.format)) {
        for i in 0..n {
            let same = entries
                .iter()
                .all(|e| figure_for(c, b, e.size_min, e.metric).is_some_and(|v| equal(v, e.values[i], false)));
            if same {
                return Err(Failure::Input(format!(
                    "{}: content: its {} figure(s) equal those of run {} of the {n} baseline {} was made from: the same run on both sides of the comparison: a run compared with itself",
                    c.source,
                    entries.len(),
                    i + 1,
                    b.file
                )));
            }
        }
    }
    Ok(())
}

/// Whether a format prints its figures to full precision (CSV, JSON) or rounded for reading
/// (a stdout table: 2 decimals of GB/s, about 6 digits of time).
fn precise(f: Format) -> bool {
    !matches!(f, Format::NcclTestsText | Format::TcpxPerfText)
}

/// `a` and `b` equal within what printing them may have rounded away (`loose`: one of them
/// was read from a stdout table).
fn equal(a: f64, b: f64, loose: bool) -> bool {
    let scale = a.abs().max(b.abs());
    let slack = if loose {
        1e-4 * scale + 0.006
    } else {
        1e-9 * scale + 1e-12
    };
    (a - b).abs() <= slack
}

/// A run's figures by (pattern, variant, size); the variant is left out when `loose` (a stdout
/// table names it differently from the CSV).
fn figures(r: &Run, loose: bool) -> BTreeMap<(String, String, u64), Sample> {
    let mut out = BTreeMap::new();
    for s in &r.series {
        let variant = if loose { String::new() } else { s.variant.clone() };
        for row in s.rows.values() {
            out.insert((s.pattern.clone(), variant.clone(), row.size), row.summary);
        }
    }
    out
}

/// The result directory a run is, or that its stdout log says it wrote (`# Results written
/// to DIR`).
fn result_dir(r: &Run) -> Option<&str> {
    r.labels
        .get("result_dir")
        .map(String::as_str)
        .or_else(|| (r.format == Format::TcpxPerfDir).then_some(r.source.as_str()))
}

/// Whether two paths name one result directory: the same directory where both exist here,
/// else the same last component (a log written on another host, a history moved).
fn same_dir(a: &str, b: &str) -> bool {
    if let (Ok(x), Ok(y)) = (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        return x == y;
    }
    let last = |p: &str| {
        Path::new(p.trim_end_matches('/'))
            .file_name()
            .map(std::ffi::OsStr::to_os_string)
    };
    last(a).is_some() && last(a) == last(b)
}

/// Labels that say who ran what: two runs that differ in any they both record are not copies.
const PROVENANCE: [&str; 5] = ["git_commit", "plugin", "ranks", "endpoints", "nodes"];

/// Why `b` is the same run as `a`, or `None`: every figure equal within print rounding, the
/// same provenance, and, where one is a stdout log and the other a result directory, the log
/// naming that directory. Bytes, line endings, a BOM and `start_time` do not matter.
pub fn same_run(a: &Run, b: &Run) -> Option<String> {
    for k in PROVENANCE {
        if let (Some(x), Some(y)) = (a.labels.get(k), b.labels.get(k)) {
            if x != y {
                return None;
            }
        }
    }
    let loose = precise(a.format) != precise(b.format);
    if loose {
        let (log, other) = if precise(a.format) { (b, a) } else { (a, b) };
        match (log.labels.get("result_dir"), result_dir(other)) {
            (Some(x), Some(y)) if same_dir(x, y) => {}
            _ => return None,
        }
    }
    let (fa, fb) = (figures(a, loose), figures(b, loose));
    if fa.is_empty() || !fa.keys().eq(fb.keys()) {
        return None;
    }
    let all = fa.values().zip(fb.values()).all(|(x, y)| {
        equal(x.time_us, y.time_us, loose) && equal(x.algbw, y.algbw, loose) && equal(x.busbw, y.busbw, loose)
    });
    if !all {
        return None;
    }
    let start = |x: &Run| x.labels.get("start_time").cloned();
    let how = match (start(a), start(b)) {
        (Some(x), Some(y)) if x == y => format!(", same start_time {x}"),
        (Some(_), Some(_)) => ", only start_time differs".to_string(),
        _ => String::new(),
    };
    Some(if loose {
        format!(
            "the stdout log of result directory {}{how}",
            result_dir(if precise(a.format) { a } else { b }).unwrap_or("?")
        )
    } else {
        format!("every figure equals those of {} within print rounding{how}", a.source)
    })
}

/// Refuses runs that are copies of another run of the same list (a result directory copied
/// five times, re-saved with other line endings, its start_time edited, or given with its own
/// stdout log): counted several times they would fake a run-to-run spread of zero.
pub fn distinct(runs: &[Run]) -> Result<(), Failure> {
    for (i, b) in runs.iter().enumerate() {
        for a in &runs[..i] {
            if let Some(why) = same_run(a, b) {
                return Err(Failure::Input(format!(
                    "{}: content: {why}: a copy of one run ({}), which would count twice",
                    b.source, a.source
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_marks() {
        // Full-precision files: 1e-12 apart is one figure, 1e-6 apart is not.
        assert!(equal(1018.608025, 1018.608025 * (1.0 + 1e-12), false));
        assert!(!equal(1018.608025, 1018.608025 * (1.0 + 1e-6), false));
        // A stdout table's 2 decimals against the CSV's figure.
        assert!(equal(3.31, 3.3148, true) && !equal(3.31, 3.33, true));
        let notes = vec![
            "UNCHECKED run allowed by --allow-unchecked: x".to_string(),
            "FORCED run allowed by --allow-forced: y".to_string(),
        ];
        assert_eq!(verdict_mark(&notes), " (FORCED + UNCHECKED runs allowed)");
        assert_eq!(verdict_mark(&[]), "");
        assert!(same_dir("/a/b/run1/", "/elsewhere/run1") && !same_dir("/a/run1", "/a/run2"));
    }
}
