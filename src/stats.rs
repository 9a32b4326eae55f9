//! Per-iteration statistics, defined as nccl-tests' `-I` summary so numbers compare:
//! p99 is the nearest rank, the standard deviation is the population one (divided by n),
//! and the coefficient of variation is `stdev / mean * 100`. The median for an even count
//! is the mean of the two middle samples (nccl-tests' p50 takes `sorted[n/2]`; the mean of
//! the middle pair is the textbook median and is what regression tooling expects).

use serde::Serialize;

use tcpx_units::{median_sorted, nearest_rank};

/// The fewest samples whose nearest-rank p99 is not their largest: below it `t_p99` is `t_max`.
pub const P99_SAMPLES: usize = 100;

/// Summary of a set of samples (microseconds in practice, but unit-agnostic).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SampleStats {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Median (mean of the two middle samples for even `n`).
    pub median: f64,
    /// 99th percentile, nearest rank: `sorted[min(n-1, ceil(0.99 n) - 1)]`.
    pub p99: f64,
    /// Population standard deviation (divided by `n`).
    pub stdev: f64,
    /// Coefficient of variation in percent: `stdev / mean * 100`.
    pub cv_pct: f64,
}

impl SampleStats {
    /// The statistics of no samples: `n = 0` and every value NaN (serialized as `null`).
    pub fn empty() -> SampleStats {
        SampleStats {
            n: 0,
            mean: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            median: f64::NAN,
            p99: f64::NAN,
            stdev: f64::NAN,
            cv_pct: f64::NAN,
        }
    }
}

/// Summarizes `samples` (in any order). An empty slice gives [`SampleStats::empty`].
pub fn summarize(samples: &[f64]) -> SampleStats {
    let n = samples.len();
    if n == 0 {
        return SampleStats::empty();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / n as f64;
    let var = sorted.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
    let stdev = var.sqrt();
    let median = median_sorted(&sorted);
    let p99 = nearest_rank(&sorted, 99);
    SampleStats {
        n,
        mean,
        min: sorted[0],
        max: sorted[n - 1],
        median,
        p99,
        stdev,
        cv_pct: stdev / mean * 100.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn empty_is_nan() {
        let s = summarize(&[]);
        assert_eq!(s.n, 0);
        for v in [s.mean, s.min, s.max, s.median, s.p99, s.stdev, s.cv_pct] {
            assert!(v.is_nan());
        }
    }

    #[test]
    fn single_sample() {
        let s = summarize(&[5.0]);
        assert_eq!(
            (s.n, s.mean, s.min, s.max, s.median, s.p99),
            (1, 5.0, 5.0, 5.0, 5.0, 5.0)
        );
        assert_eq!((s.stdev, s.cv_pct), (0.0, 0.0));
    }

    #[test]
    fn known_values() {
        // Unsorted on purpose.
        let s = summarize(&[4.0, 2.0, 9.0, 4.0, 5.0, 4.0, 7.0, 5.0]);
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert!(close(s.median, 4.5));
        assert!(close(s.stdev, 2.0)); // the classic population-stdev example
        assert!(close(s.cv_pct, 40.0));
        assert_eq!(s.p99, 9.0);
        let odd = summarize(&[3.0, 1.0, 2.0]);
        assert_eq!(odd.median, 2.0);
    }

    #[test]
    fn p99_is_the_largest_below_p99_samples_only() {
        for n in [20, P99_SAMPLES - 1, P99_SAMPLES, 1000] {
            let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            let s = summarize(&v);
            assert_eq!(s.p99 == s.max, n < P99_SAMPLES, "{n} samples: p99 {}", s.p99);
        }
    }

    #[test]
    fn p99_nearest_rank() {
        // n = 100: ceil(99) - 1 = index 98, the second largest.
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(summarize(&v).p99, 99.0);
        // n = 20 (the default -n): ceil(19.8) - 1 = 19, the largest.
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(summarize(&v).p99, 20.0);
        // n = 200: ceil(198) - 1 = 197.
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(summarize(&v).p99, 198.0);
        // n = 101: ceil(99.99) - 1 = 99.
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(summarize(&v).p99, 100.0);
    }

    #[test]
    fn serializes_nan_as_null() {
        let v = serde_json::to_value(summarize(&[])).expect("serialize");
        assert!(v["mean"].is_null());
        assert_eq!(v["n"], 0);
    }
}
