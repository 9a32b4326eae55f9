//! The report's axes, by the rules a reader expects of a chart (those plotters, and so tcpx-plot,
//! follows too): ticks at round values (1, 2 or 5 times a power of ten) from 0 to a round top
//! above the data, and a time axis whose ticks fall on round instants (whole seconds, minutes,
//! hours, days, weeks starting on Monday, months or years, UTC) labelled as dates.

/// The smallest step of 1, 2 or 5 times a power of ten that is at least `raw` (> 0): the
/// pictures' rule, one for every chart.
pub use tcpx_plot::nice_step as round_step;

/// A value axis from 0: its top (a tick, above `top` by at least 5%) and its ticks, about
/// `target` steps of a round size.
pub fn value_ticks(top: f64, target: usize) -> (f64, Vec<f64>) {
    let top = if top.is_finite() && top > 0.0 { top * 1.05 } else { 1.0 };
    let step = round_step(top / target.max(1) as f64);
    let n = (top / step - 1e-9).ceil().max(1.0) as usize;
    let ticks = (0..=n).map(|k| step * k as f64).collect();
    (step * n as f64, ticks)
}

/// A tick's label: as many decimals as the step needs, no more.
pub fn value_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.frac]Z` (what the history stores).
pub fn parse_time(t: &str) -> Option<f64> {
    if !super::model::valid_time(t) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?);
    let secs = days * 86_400 + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?;
    let frac: f64 = t
        .get(19..t.len() - 1)
        .filter(|f| !f.is_empty())
        .map_or(Some(0.0), |f| format!("0{f}").parse().ok())?;
    Some(secs as f64 + frac)
}

/// A tick of the time axis: where, its label, and the date to show under it (the first tick's,
/// and where the day changes) when the label is a time of day.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeTick {
    pub at: f64,
    pub label: String,
    pub date: Option<String>,
}

/// Steps below a month, in seconds.
const STEPS: [i64; 21] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800, 604_800,
    1_209_600,
];

/// The month steps, then years.
const MONTHS: [i64; 9] = [1, 2, 3, 6, 12, 24, 60, 120, 240];

/// (year, month) of a time.
fn year_month(t: f64) -> (i64, i64) {
    let s = super::model::rfc3339(t.floor() as i64);
    (s[0..4].parse().unwrap_or(1970), s[5..7].parse().unwrap_or(1))
}

/// Ticks on round instants within [t0, t1] (seconds), about `target` of them; at least one.
pub fn time_ticks(t0: f64, t1: f64, target: usize) -> Vec<TimeTick> {
    let span = (t1 - t0).max(0.0);
    let target = target.max(1) as f64;
    let mut ats: Vec<(f64, i64)> = Vec::new();
    if let Some(&step) = STEPS.iter().find(|s| span / **s as f64 <= target) {
        // Days from midnight UTC; weeks from a Monday (the epoch was a Thursday).
        let offset = if step >= 604_800 { 4 * 86_400 } else { 0 };
        let first = ((t0 - offset as f64) / step as f64).ceil() as i64 * step + offset;
        let mut at = first;
        while at as f64 <= t1 {
            ats.push((at as f64, step));
            at += step;
        }
    } else {
        let months = span / (30.44 * 86_400.0);
        let step = MONTHS
            .iter()
            .copied()
            .find(|m| months / *m as f64 <= target)
            .unwrap_or(480);
        let (y, m) = year_month(t0);
        let mut k = (y * 12 + m - 1).div_euclid(step) * step;
        loop {
            let at = days_from_civil(k.div_euclid(12), k.rem_euclid(12) + 1, 1) as f64 * 86_400.0;
            if at > t1 {
                break;
            }
            if at >= t0 {
                ats.push((at, step * 2_629_746));
            }
            k += step;
        }
    }
    if ats.is_empty() {
        ats.push((t0, 1));
    }
    let mut last_day = String::new();
    ats.into_iter()
        .map(|(at, step)| {
            let s = super::model::rfc3339(at.floor() as i64);
            let day = s[0..10].to_string();
            let (label, date) = if step >= 365 * 86_400 && s[5..10] == *"01-01" {
                (s[0..4].to_string(), None)
            } else if step >= 28 * 86_400 && s[8..10] == *"01" {
                (s[0..7].to_string(), None)
            } else if step >= 86_400 {
                (day.clone(), None)
            } else {
                let time = if step < 60 { &s[11..19] } else { &s[11..16] };
                (time.to_string(), (day != last_day).then(|| day.clone()))
            };
            last_day = day;
            TimeTick { at, label, date }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_ticks_are_round() {
        assert_eq!(round_step(0.37), 0.5);
        assert_eq!(round_step(0.5), 0.5);
        assert_eq!(round_step(1.2), 2.0);
        assert_eq!(round_step(3.0), 5.0);
        assert_eq!(round_step(7.0), 10.0);
        // The axis: a top of 1.777 drew 0, 0.4887, 0.9775, 1.466, 1.955.
        let (top, ticks) = value_ticks(1.777, 5);
        assert_eq!(ticks, [0.0, 0.5, 1.0, 1.5, 2.0]);
        assert_eq!(top, 2.0);
        assert_eq!(value_label(1.5, 0.5), "1.5");
        assert_eq!(value_label(20.0, 5.0), "20");
        assert_eq!(value_ticks(12.3, 5).1, [0.0, 5.0, 10.0, 15.0]);
        assert_eq!(value_ticks(0.0, 5).0, 1.0);
    }

    #[test]
    fn time_ticks_fall_on_round_instants_labelled_as_dates() {
        let t = |s: &str| parse_time(s).unwrap();
        assert_eq!(t("1970-01-02T00:00:01Z"), 86_401.0);
        assert_eq!(t("2026-11-24T03:31:49.25Z"), 1_795_491_109.25);
        assert_eq!(
            super::super::model::rfc3339(t("2024-02-29T12:00:00Z") as i64),
            "2024-02-29T12:00:00Z"
        );
        // 30 runs a minute apart: ticks every 5 minutes, the date under the first.
        let ticks = time_ticks(t("2026-11-24T04:00:00Z"), t("2026-11-24T04:29:00Z"), 6);
        let labels: Vec<&str> = ticks.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(labels, ["04:00", "04:05", "04:10", "04:15", "04:20", "04:25"]);
        assert_eq!(ticks[0].date.as_deref(), Some("2026-11-24"));
        assert!(ticks[1..].iter().all(|x| x.date.is_none()));
        // Across midnight: the new day named where it starts.
        let ticks = time_ticks(t("2026-11-24T22:10:00Z"), t("2026-11-25T03:00:00Z"), 6);
        assert!(
            ticks
                .iter()
                .any(|x| x.label == "00:00" && x.date.as_deref() == Some("2026-11-25")),
            "{ticks:?}"
        );
        // Weeks of runs: days; months: the first of a month; years.
        let days = time_ticks(t("2026-11-02T10:00:00Z"), t("2026-11-08T10:00:00Z"), 6);
        assert_eq!(days[0].label, "2026-11-03");
        let months = time_ticks(t("2026-01-15T00:00:00Z"), t("2026-09-15T00:00:00Z"), 6);
        assert_eq!(
            months.iter().map(|x| x.label.as_str()).collect::<Vec<_>>(),
            ["2026-03", "2026-05", "2026-07", "2026-09"]
        );
        let years = time_ticks(t("2020-06-01T00:00:00Z"), t("2026-06-01T00:00:00Z"), 6);
        assert_eq!(years[0].label, "2021");
        // One instant: one tick there.
        let one = time_ticks(t("2026-11-24T04:00:07Z"), t("2026-11-24T04:00:07Z"), 6);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].date.as_deref(), Some("2026-11-24"));
    }
}
