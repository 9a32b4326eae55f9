//! The colour scale of a heatmap: where a value stands on its colour bar, the colour there, and
//! the bar's ticks, rounded to the fewest digits that keep them distinct.

use plotters::style::RGBColor;

/// The colour of level `t` in 0..=1 (viridis; out of range clamps, NaN is 0).
pub fn viridis(t: f64) -> RGBColor {
    ramp(
        &[
            (68.0, 1.0, 84.0),
            (59.0, 82.0, 139.0),
            (33.0, 145.0, 140.0),
            (94.0, 201.0, 98.0),
            (253.0, 231.0, 37.0),
        ],
        t,
    )
}

/// The colour of level `t` in 0..=1 above the scale's top (orange to deep red: apart from every
/// viridis colour, so a value above the top never reads as one within it).
pub fn above_scale(t: f64) -> RGBColor {
    ramp(&[(253.0, 174.0, 97.0), (215.0, 48.0, 39.0), (103.0, 0.0, 31.0)], t)
}

fn ramp(stops: &[(f64, f64, f64)], t: f64) -> RGBColor {
    let last = stops.len() - 1;
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 } * last as f64;
    let i = (t.floor() as usize).min(last - 1);
    let f = t - i as f64;
    let l = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    let (a, b) = (stops[i], stops[i + 1]);
    RGBColor(l(a.0, b.0), l(a.1, b.1), l(a.2, b.2))
}

/// The part of the bar that values above the top take, when some do.
const ABOVE_PART: f64 = 0.25;

/// Values from `lo` to `hi` in viridis over the bar (or its lower part), and where values pass
/// `hi` (a share scale's fixed top), an upper part of the bar from `hi` to `above` in
/// [`above_scale`]'s colours.
#[derive(Debug, Clone, PartialEq)]
pub struct ColourScale {
    pub lo: f64,
    pub hi: f64,
    pub above: Option<f64>,
}

impl ColourScale {
    /// A scale from the lowest value to the highest (a flat matrix: around its one value).
    pub fn spanning(values: &[f64]) -> ColourScale {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if !lo.is_finite() || !hi.is_finite() {
            (0.0, 1.0)
        } else if hi > lo {
            (lo, hi)
        } else if lo > 0.0 {
            (lo * 0.9, lo * 1.1)
        } else {
            (lo - 1.0, lo + 1.0)
        };
        ColourScale { lo, hi, above: None }
    }

    /// A fixed scale from 0 to `top`; values above it get the upper part of the bar up to the
    /// highest, rounded up.
    pub fn fixed(top: f64, values: &[f64]) -> ColourScale {
        let max = values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
        ColourScale {
            lo: 0.0,
            hi: top,
            above: (max > top).then(|| round_up(max)),
        }
    }

    /// Where `v` stands on the bar, 0 (bottom) to 1 (top).
    pub fn position(&self, v: f64) -> f64 {
        let within = ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0);
        match self.above {
            Some(top) if v > self.hi => {
                (1.0 - ABOVE_PART) + ABOVE_PART * ((v - self.hi) / (top - self.hi)).clamp(0.0, 1.0)
            }
            Some(_) => within * (1.0 - ABOVE_PART),
            None => within,
        }
    }

    /// The colour at a bar position (0..=1).
    pub fn colour_at(&self, pos: f64) -> RGBColor {
        match self.above {
            Some(_) if pos > 1.0 - ABOVE_PART => above_scale((pos - (1.0 - ABOVE_PART)) / ABOVE_PART),
            Some(_) => viridis(pos / (1.0 - ABOVE_PART)),
            None => viridis(pos),
        }
    }

    pub fn colour(&self, v: f64) -> RGBColor {
        self.colour_at(self.position(v))
    }

    /// Decimals that tell the ticks apart: those of the step between them.
    pub fn decimals(&self) -> usize {
        decimals(nice_step((self.hi - self.lo) / 5.0))
    }

    /// The bar's ticks, (position, label): round values 1, 2 or 5 x 10^k apart from `lo` to
    /// `hi`, then the top of the upper part; labels with [`Self::decimals`] digits, none twice.
    pub fn ticks(&self) -> Vec<(f64, String)> {
        let step = nice_step((self.hi - self.lo) / 5.0);
        let d = decimals(step);
        let first = (self.lo / step - 1e-9).ceil() as i64;
        let last = (self.hi / step + 1e-9).floor() as i64;
        let mut values: Vec<f64> = (first..=last).map(|k| k as f64 * step).collect();
        values.extend(self.above);
        let mut out: Vec<(f64, String)> = Vec::new();
        for v in values {
            let label = format!("{v:.d$}");
            if out.iter().all(|t| t.1 != label) {
                out.push((self.position(v), label));
            }
        }
        out
    }
}

/// The round step (1, 2 or 5 x 10^k) at or above `raw`, for every chart (the history report's
/// axes too).
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// Digits after the point that show multiples of `step` apart.
fn decimals(step: f64) -> usize {
    (-step.log10().floor()).max(0.0) as usize
}

/// `v` rounded up to a round step of a tenth of it or more, at least 0.5 (3.1 to 3.5, 17 to 18).
fn round_up(v: f64) -> f64 {
    let step = nice_step(v / 10.0).max(0.5);
    (v / step).ceil() * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_distinct() {
        let s = ColourScale::spanning(&[0.0048, 0.0052]);
        let labels: Vec<String> = s.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.0048", "0.0049", "0.0050", "0.0051", "0.0052"]);
        let share = ColourScale::fixed(1.5, &[0.25, 1.0, 3.1]);
        let labels: Vec<String> = share.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.0", "0.5", "1.0", "1.5", "3.5"]);
        assert_ne!(share.colour(1.6), share.colour(3.1));
        assert_ne!(share.colour(1.6), share.colour(1.5));
        // Without values above the top, the whole bar is viridis from 0 to 1.5.
        assert_eq!(ColourScale::fixed(1.5, &[1.0]).colour(1.0), viridis(1.0 / 1.5));
    }
}
