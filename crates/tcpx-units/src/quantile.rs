//! Medians and quantiles of samples. The median of an even count is the mean of the two middle
//! samples (the textbook median, what regression tooling expects).

/// Median of `x` in any order; NaN for an empty slice.
pub fn median(x: &[f64]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

/// Median of samples sorted ascending; NaN for an empty slice.
pub fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Quantile `q` (clamped to 0..=1) of samples sorted ascending, with linear interpolation
/// between order statistics (Hyndman-Fan type 7); NaN for an empty slice.
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// The `pct` percentile (0 < pct <= 100) of samples sorted ascending by the nearest rank, as
/// nccl-tests' `-I` summary: `sorted[min(n-1, ceil(pct/100 * n) - 1)]`, the ceiling taken in
/// integers; NaN for an empty slice.
pub fn nearest_rank(v: &[f64], pct: usize) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    let rank = (n * pct).div_ceil(100);
    v[(rank.max(1) - 1).min(n - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert!(median_sorted(&[]).is_nan());
    }

    #[test]
    fn type7_quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&v, 0.25), 2.0);
        assert_eq!(quantile_sorted(&v, 0.1), 1.4);
        assert_eq!(quantile_sorted(&v, 2.0), 5.0);
        assert!(quantile_sorted(&[], 0.5).is_nan());
    }

    #[test]
    fn nearest_rank_p99() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 99.0);
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 20.0);
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 100.0);
        assert_eq!(nearest_rank(&[7.0], 99), 7.0);
        assert!(nearest_rank(&[], 99).is_nan());
    }
}
