//! Per-iteration statistics, defined as nccl-tests' `-I` summary so numbers compare:
//! p99 is the nearest rank, the standard deviation is the population one (divided by n),
//! and the coefficient of variation is `stdev / mean * 100`. The median for an even count
//! is the mean of the two middle samples (nccl-tests' p50 takes `sorted[n/2]`; the mean of
//! the middle pair is the textbook median and is what regression tooling expects).

use serde::Serialize;

use crate::cli::TimeReduction;

/// Summary of a set of samples (microseconds in practice, but unit-agnostic).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    // ceil(n * 0.99) in integers, as nccl-tests: (n*99 + 99) / 100.
    let rank = (n * 99).div_ceil(100);
    let p99 = sorted[(rank.max(1) - 1).min(n - 1)];
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

/// Reduces one value per rank (indexed by rank) to one number as nccl-tests' `-a`:
/// rank 0's value, the mean, the minimum or the maximum. An empty slice gives NaN.
pub fn reduce(values: &[f64], how: TimeReduction) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    match how {
        TimeReduction::Rank0 => values[0],
        TimeReduction::Avg => values.iter().sum::<f64>() / values.len() as f64,
        TimeReduction::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        TimeReduction::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

/// Per-rank samples gathered rank-major (`all[r * iters + i]`, as MPI's allgather lays them
/// out), each iteration reduced over ranks with `-a`.
pub fn reduce_each_iteration(all: &[f64], iters: usize, how: TimeReduction) -> Vec<f64> {
    let ranks = all.len().checked_div(iters).unwrap_or(0);
    (0..iters)
        .map(|i| {
            let per_rank: Vec<f64> = (0..ranks).map(|r| all[r * iters + i]).collect();
            reduce(&per_rank, how)
        })
        .collect()
}

/// Each rank's mean over its iterations, from samples gathered rank-major.
pub fn rank_means(all: &[f64], iters: usize) -> Vec<f64> {
    all.chunks(iters.max(1))
        .map(|t| t.iter().sum::<f64>() / t.len() as f64)
        .collect()
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
        assert!(reduce(&[], TimeReduction::Avg).is_nan());
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
    fn reductions() {
        let v = [3.0, 1.0, 2.0, 6.0];
        assert_eq!(reduce(&v, TimeReduction::Rank0), 3.0);
        assert_eq!(reduce(&v, TimeReduction::Avg), 3.0);
        assert_eq!(reduce(&v, TimeReduction::Min), 1.0);
        assert_eq!(reduce(&v, TimeReduction::Max), 6.0);
    }

    #[test]
    fn serializes_nan_as_null() {
        let v = serde_json::to_value(summarize(&[])).expect("serialize");
        assert!(v["mean"].is_null());
        assert_eq!(v["n"], 0);
    }

    #[test]
    fn rank_major_samples_reduce_per_iteration_and_per_rank() {
        // 2 ranks x 3 iterations: rank 0 = 1, 2, 3; rank 1 = 5, 4, 9.
        let all = [1.0, 2.0, 3.0, 5.0, 4.0, 9.0];
        assert_eq!(reduce_each_iteration(&all, 3, TimeReduction::Max), vec![5.0, 4.0, 9.0]);
        assert_eq!(
            reduce_each_iteration(&all, 3, TimeReduction::Rank0),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!(rank_means(&all, 3), vec![2.0, 6.0]);
    }
}
