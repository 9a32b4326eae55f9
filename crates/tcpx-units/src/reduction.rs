//! nccl-tests' `-a`: how per-rank times are reduced to one number before bandwidth is computed.

use std::fmt;
use std::str::FromStr;

/// How per-rank times are reduced to one number (nccl-tests `-a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeReduction {
    /// `-a 0`: rank 0's time.
    Rank0,
    /// `-a 1`: the mean over ranks (default).
    Avg,
    /// `-a 2`: the fastest rank.
    Min,
    /// `-a 3`: the slowest rank.
    Max,
}

impl TimeReduction {
    /// The name used in reports: `rank0`, `avg`, `min`, `max`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeReduction::Rank0 => "rank0",
            TimeReduction::Avg => "avg",
            TimeReduction::Min => "min",
            TimeReduction::Max => "max",
        }
    }

    /// nccl-tests' `-a` number.
    pub fn code(self) -> u32 {
        match self {
            TimeReduction::Rank0 => 0,
            TimeReduction::Avg => 1,
            TimeReduction::Min => 2,
            TimeReduction::Max => 3,
        }
    }
}

impl fmt::Display for TimeReduction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TimeReduction {
    type Err = String;

    /// nccl-tests' numbers 0..=3, or the names rank0, avg, min, max (case-insensitive).
    fn from_str(s: &str) -> Result<TimeReduction, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "0" | "rank0" => Ok(TimeReduction::Rank0),
            "1" | "avg" => Ok(TimeReduction::Avg),
            "2" | "min" => Ok(TimeReduction::Min),
            "3" | "max" => Ok(TimeReduction::Max),
            _ => Err(format!(
                "invalid time reduction '{s}': use 0 (rank0), 1 (avg), 2 (min) or 3 (max)"
            )),
        }
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

    #[test]
    fn reductions() {
        let v = [3.0, 1.0, 2.0, 6.0];
        assert_eq!(reduce(&v, TimeReduction::Rank0), 3.0);
        assert_eq!(reduce(&v, TimeReduction::Avg), 3.0);
        assert_eq!(reduce(&v, TimeReduction::Min), 1.0);
        assert_eq!(reduce(&v, TimeReduction::Max), 6.0);
        assert!(reduce(&[], TimeReduction::Avg).is_nan());
    }

    #[test]
    fn names_and_codes_round_trip() {
        for how in [
            TimeReduction::Rank0,
            TimeReduction::Avg,
            TimeReduction::Min,
            TimeReduction::Max,
        ] {
            assert_eq!(how.as_str().parse::<TimeReduction>(), Ok(how));
            assert_eq!(how.code().to_string().parse::<TimeReduction>(), Ok(how));
        }
        assert_eq!(" MAX ".parse::<TimeReduction>(), Ok(TimeReduction::Max));
        assert_eq!(
            "4".parse::<TimeReduction>().unwrap_err(),
            "invalid time reduction '4': use 0 (rank0), 1 (avg), 2 (min) or 3 (max)"
        );
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
