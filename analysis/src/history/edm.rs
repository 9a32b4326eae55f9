//! E-Divisive with Means (Matteson & James, "A Nonparametric Approach for Multiple Change Point
//! Analysis of Multivariate Data", JASA 2014), in the form MongoDB's performance CI uses
//! (Daly et al., "The Use of Change Point Detection to Identify Software Performance
//! Regressions in a Continuous Integration System", ICPE 2020; PyPI `signal-processing-algorithms`
//! 2.1.6, `energy_statistics.e_divisive`):
//!
//! * divergence of the two sides of a split `tau` of a window of `n` values: the energy distance
//!   `e = 2 mean|x-y|^a - mean|x-x'|^a - mean|y-y'|^a` (means over all ordered pairs, the
//!   V-statistic form of the reference implementation), scaled to `q = tau (n-tau) / n * e`;
//! * the best split of each window between the change points found so far is the `tau` with the
//!   largest `q`; the window whose best `q` is largest offers the next candidate;
//! * the candidate is kept when a permutation test says its `q` is unusually large: the values of
//!   every window are shuffled within the window, each window's best `q` recomputed, and
//!   `p = (1 + #{permuted max >= observed}) / (1 + permutations)` (the reference divides the
//!   count without the `+1` by `permutations + 1`, which can give 0: ours is the usual
//!   conservative estimate, never below `1 / (permutations + 1)`);
//! * recursive bisection: repeat until a candidate is not significant.
//!
//! Additions to the reference: the exponent `alpha` in (0, 2) (1 = the reference's plain
//! distance), a minimum segment length (the reference allows segments of one value), and a
//! seeded generator so that a series gives the same answer on every run.

use crate::stats::Rng;

/// Settings of the detector.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct EdmSettings {
    /// Exponent of the distance, in (0, 2): 1 compares whole distributions, means included.
    pub alpha: f64,
    /// Significance level of the permutation test.
    pub significance: f64,
    /// Permutations per test.
    pub permutations: usize,
    /// Fewest values a segment may hold.
    pub min_segment: usize,
    /// Seed of the permutations.
    pub seed: u64,
}

impl Default for EdmSettings {
    fn default() -> Self {
        EdmSettings {
            alpha: 1.0,
            significance: 0.01,
            permutations: 499,
            min_segment: 3,
            seed: 1,
        }
    }
}

/// One accepted change point: the index of the first value of the new segment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChangePoint {
    pub index: usize,
    /// The scaled divergence `q` of the split.
    pub q: f64,
    /// The permutation test's p-value when it was accepted.
    pub p_value: f64,
}

/// Fisher-Yates with the crate's seeded generator (reproducible permutations).
fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.index(i + 1);
        v.swap(i, j);
    }
}

/// The best split of the values `idx` (positions into `d`, a full distance matrix of side `n`):
/// `(tau, q)` with `min_segment <= tau <= len - min_segment`, or None when the window is too short.
fn best_split(d: &[f64], n: usize, idx: &[usize], min_segment: usize) -> Option<(usize, f64)> {
    let m = idx.len();
    if m < 2 * min_segment.max(1) {
        return None;
    }
    let at = |i: usize, j: usize| d[idx[i] * n + idx[j]];
    // x: sum over ordered pairs left of tau; y: right of tau; xy: across (one order).
    let (mut x, mut xy) = (0.0, 0.0);
    let mut y = 0.0;
    for i in 0..m {
        for j in i + 1..m {
            y += 2.0 * at(i, j);
        }
    }
    let mut best: Option<(usize, f64)> = None;
    for tau in 1..m {
        // Move value tau-1 from the right side to the left.
        let k = tau - 1;
        let to_left: f64 = (0..k).map(|i| at(i, k)).sum();
        let to_right: f64 = (k + 1..m).map(|j| at(k, j)).sum();
        x += 2.0 * to_left;
        y -= 2.0 * to_right;
        xy += to_right - to_left;
        if tau < min_segment || m - tau < min_segment {
            continue;
        }
        let (a, b) = (tau as f64, (m - tau) as f64);
        let e = 2.0 * xy / (a * b) - x / (a * a) - y / (b * b);
        let q = a * b / (a + b) * e;
        if best.is_none_or(|(_, bq)| q > bq) {
            best = Some((tau, q));
        }
    }
    best
}

/// The scaled divergence `q` of every split `tau` in `0..n` of the whole series (0 where a side
/// is empty): the reference implementation's `_calculate_t_stats`, for comparing with it.
pub fn split_statistics(values: &[f64], alpha: f64) -> Vec<f64> {
    let n = values.len();
    let d: Vec<f64> = (0..n * n)
        .map(|k| (values[k / n] - values[k % n]).abs().powf(alpha))
        .collect();
    let idx: Vec<usize> = (0..n).collect();
    (0..n)
        .map(|tau| {
            if tau == 0 {
                return 0.0;
            }
            let (l, r) = idx.split_at(tau);
            let sum = |a: &[usize], b: &[usize]| {
                a.iter()
                    .map(|&i| b.iter().map(|&j| d[i * n + j]).sum::<f64>())
                    .sum::<f64>()
            };
            let (a, b) = (tau as f64, (n - tau) as f64);
            let e = 2.0 * sum(l, r) / (a * b) - sum(l, l) / (a * a) - sum(r, r) / (b * b);
            a * b / (a + b) * e
        })
        .collect()
}

/// Change points of `values` (in order), sorted by index.
pub fn e_divisive(values: &[f64], s: &EdmSettings) -> Vec<ChangePoint> {
    let n = values.len();
    let mut d = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            d[i * n + j] = (values[i] - values[j]).abs().powf(s.alpha);
        }
    }
    let mut rng = Rng::new(s.seed);
    let mut found: Vec<ChangePoint> = Vec::new();
    loop {
        let mut bounds: Vec<usize> = found.iter().map(|c| c.index).collect();
        bounds.push(0);
        bounds.push(n);
        bounds.sort_unstable();
        let windows: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
        let mut best: Option<(usize, f64)> = None;
        for &(a, b) in &windows {
            let idx: Vec<usize> = (a..b).collect();
            if let Some((tau, q)) = best_split(&d, n, &idx, s.min_segment) {
                if best.is_none_or(|(_, bq)| q > bq) {
                    best = Some((a + tau, q));
                }
            }
        }
        let Some((index, q)) = best else { break };
        let mut as_large = 0usize;
        for _ in 0..s.permutations {
            let mut top = f64::NEG_INFINITY;
            for &(a, b) in &windows {
                let mut idx: Vec<usize> = (a..b).collect();
                shuffle(&mut rng, &mut idx);
                if let Some((_, pq)) = best_split(&d, n, &idx, s.min_segment) {
                    top = top.max(pq);
                }
            }
            if top >= q {
                as_large += 1;
            }
        }
        let p_value = (1 + as_large) as f64 / (1 + s.permutations) as f64;
        if p_value > s.significance {
            break;
        }
        found.push(ChangePoint { index, q, p_value });
    }
    found.sort_by_key(|c| c.index);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `best_split` against the definition computed directly.
    #[test]
    fn divergence_matches_its_definition() {
        let v: [f64; 7] = [1.0, 1.2, 0.9, 3.0, 3.3, 2.8, 3.1];
        let n = v.len();
        let d: Vec<f64> = (0..n * n).map(|k| (v[k / n] - v[k % n]).abs()).collect();
        let idx: Vec<usize> = (0..n).collect();
        let mean = |a: &[f64], b: &[f64]| {
            let mut s = 0.0;
            for x in a {
                for y in b {
                    s += (x - y).abs();
                }
            }
            s / (a.len() * b.len()) as f64
        };
        let mut best = (0, f64::NEG_INFINITY);
        for tau in 2..=n - 2 {
            let (l, r) = v.split_at(tau);
            let e = 2.0 * mean(l, r) - mean(l, l) - mean(r, r);
            let q = (tau * (n - tau)) as f64 / n as f64 * e;
            if q > best.1 {
                best = (tau, q);
            }
        }
        let (tau, q) = best_split(&d, n, &idx, 2).unwrap();
        assert_eq!(tau, best.0);
        assert!((q - best.1).abs() < 1e-12, "{q} vs {}", best.1);
        assert_eq!(tau, 3);
    }

    #[test]
    fn same_seed_same_answer() {
        let mut r = Rng::new(7);
        let v: Vec<f64> = (0..40)
            .map(|i| if i < 20 { 1.0 } else { 0.9 } + 0.05 * r.normal())
            .collect();
        let s = EdmSettings::default();
        assert_eq!(e_divisive(&v, &s), e_divisive(&v, &s));
    }
}
