//! Statistics: medians, a seeded percentile bootstrap, Welch's t, Mann-Whitney U (statrs),
//! one-sample t (statrs), an exact sign test, Holm-Bonferroni, robust z-scores.

use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, StudentsT};
use statrs::stats_tests::mannwhitneyu::{mannwhitneyu, MannWhitneyUMethod};
use statrs::stats_tests::ttest_onesample::ttest_onesample;
use statrs::stats_tests::{Alternative, NaNPolicy};

/// SplitMix64: a tiny deterministic generator (the bootstrap must be reproducible from its seed).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform index in `0..n` (n > 0), by the multiply-shift method.
    pub fn index(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// Derives a per-comparison seed from the run seed and a key, so results do not depend on
/// the order in which comparisons are evaluated.
pub fn derive_seed(seed: u64, key: &str) -> u64 {
    // FNV-1a over the key, mixed with the seed.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in key.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Rng::new(h).next_u64()
}

/// Median (mean of the two middle values for even n). NaN for an empty slice.
pub fn median(x: &[f64]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

pub fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Sample variance (n - 1).
pub fn var(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return f64::NAN;
    }
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64
}

/// Quantile with linear interpolation between order statistics (Hyndman-Fan type 7).
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

fn resample_median(x: &[f64], rng: &mut Rng, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..x.len()).map(|_| x[rng.index(x.len())]));
    buf.sort_by(f64::total_cmp);
    median_sorted(buf)
}

/// Percentile bootstrap CI of `median(a) / median(b)` (or `median(a) / c` when `b` is None and
/// `c` is the constant). Each side is resampled independently, with replacement.
pub fn bootstrap_ratio_ci(
    a: &[f64],
    b: Option<&[f64]>,
    c: f64,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> (f64, f64) {
    let mut rng = Rng::new(seed);
    let mut ratios = Vec::with_capacity(resamples);
    let mut buf = Vec::new();
    for _ in 0..resamples.max(1) {
        let ma = resample_median(a, &mut rng, &mut buf);
        let mb = match b {
            Some(b) => resample_median(b, &mut rng, &mut buf),
            None => c,
        };
        ratios.push(ma / mb);
    }
    ratios.sort_by(f64::total_cmp);
    let alpha = 1.0 - confidence;
    (
        quantile_sorted(&ratios, alpha / 2.0),
        quantile_sorted(&ratios, 1.0 - alpha / 2.0),
    )
}

/// Percentile bootstrap CI of the median of one sample (used for plot bands).
pub fn bootstrap_median_ci(x: &[f64], resamples: usize, confidence: f64, seed: u64) -> (f64, f64) {
    bootstrap_ratio_ci(x, None, 1.0, resamples, confidence, seed)
}

/// Result of a hypothesis test.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Test {
    pub statistic: f64,
    pub p: f64,
    /// Degrees of freedom (t tests only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub df: Option<f64>,
}

/// The direction of the one-sided alternative: "the candidate is worse".
/// `worse_is_less` is true for higher-is-better metrics (candidate values smaller).
fn alt(worse_is_less: bool) -> Alternative {
    if worse_is_less {
        Alternative::Less
    } else {
        Alternative::Greater
    }
}

/// Welch's unequal-variance t test, one-sided (H1: candidate worse). None when n < 2 on a side.
pub fn welch(cand: &[f64], base: &[f64], worse_is_less: bool) -> Option<Test> {
    if cand.len() < 2 || base.len() < 2 {
        return None;
    }
    let (m1, m2) = (mean(cand), mean(base));
    let (v1, v2) = (var(cand) / cand.len() as f64, var(base) / base.len() as f64);
    let se2 = v1 + v2;
    if se2 <= 0.0 || !se2.is_finite() {
        // Both samples constant: the difference is certain.
        let worse = if worse_is_less { m1 < m2 } else { m1 > m2 };
        let t = if m1 == m2 {
            0.0
        } else {
            (m1 - m2).signum() * f64::INFINITY
        };
        return Some(Test {
            statistic: t,
            p: if worse { 0.0 } else { 1.0 },
            df: None,
        });
    }
    let t = (m1 - m2) / se2.sqrt();
    let df = se2 * se2 / (v1 * v1 / (cand.len() - 1) as f64 + v2 * v2 / (base.len() - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = if worse_is_less { dist.cdf(t) } else { dist.sf(t) };
    Some(Test {
        statistic: t,
        p: clean_p(p),
        df: Some(df),
    })
}

/// Exact upper tail `P(U >= u)` of the Mann-Whitney U null distribution for sizes `m`, `n`
/// (no ties), by the counting recurrence `N(u; m, n) = N(u - n; m - 1, n) + N(u; m, n - 1)`.
pub fn mwu_exact_sf(u: f64, m: usize, n: usize) -> f64 {
    let max = m * n;
    // dp[j][k]: number of arrangements of i x-values and j y-values with U = k (i grows).
    let mut dp: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect();
    for _i in 1..=m {
        let mut next: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        next.push(vec![1.0]);
        for j in 1..=n {
            // N(k; i, j) = N(k - j; i - 1, j) + N(k; i, j - 1)
            let a = &dp[j];
            let b = &next[j - 1];
            let len = (a.len() + j).max(b.len());
            let mut v = vec![0.0; len];
            for (k, x) in a.iter().enumerate() {
                v[k + j] += x;
            }
            for (k, x) in b.iter().enumerate() {
                v[k] += x;
            }
            next.push(v);
        }
        dp = next;
    }
    let dist = &dp[n];
    let total: f64 = dist.iter().sum();
    let from = u.ceil().max(0.0) as usize;
    if from > max {
        return 0.0;
    }
    dist.iter().skip(from).sum::<f64>() / total
}

/// Mann-Whitney U, one-sided (H1: candidate stochastically worse). Exact null distribution
/// (own implementation) without ties and up to 50 x 50 observations, otherwise statrs'
/// normal approximation with tie and continuity corrections. (statrs 0.19.1's `Exact` method
/// returns the complement of the p-value when `x.len() <= y.len()`, so it is not used.)
pub fn mann_whitney(cand: &[f64], base: &[f64], worse_is_less: bool) -> Option<Test> {
    if cand.is_empty() || base.is_empty() {
        return None;
    }
    let (n1, n2) = (cand.len(), base.len());
    // U1 counts pairs (cand > base) + 0.5 ties.
    let mut u1 = 0.0;
    for a in cand {
        for b in base {
            u1 += if a > b {
                1.0
            } else if a == b {
                0.5
            } else {
                0.0
            };
        }
    }
    let u = if worse_is_less { (n1 * n2) as f64 - u1 } else { u1 };
    let mut all: Vec<f64> = cand.iter().chain(base).copied().collect();
    all.sort_by(f64::total_cmp);
    let ties = all.windows(2).any(|w| w[0] == w[1]);
    let p = if !ties && n1 <= 50 && n2 <= 50 {
        mwu_exact_sf(u, n1, n2)
    } else {
        mannwhitneyu(
            cand,
            base,
            MannWhitneyUMethod::AsymptoticInclContinuityCorrection,
            alt(worse_is_less),
        )
        .ok()?
        .1
    };
    Some(Test {
        statistic: u1,
        p: clean_p(p),
        df: None,
    })
}

/// One-sample t test against a constant (statrs), one-sided (H1: candidate worse).
pub fn t_onesample(cand: &[f64], c: f64, worse_is_less: bool) -> Option<Test> {
    if cand.len() < 2 {
        return None;
    }
    if var(cand) == 0.0 {
        let m = mean(cand);
        let worse = if worse_is_less { m < c } else { m > c };
        return Some(Test {
            statistic: if m == c { 0.0 } else { (m - c).signum() * f64::INFINITY },
            p: if worse { 0.0 } else { 1.0 },
            df: Some((cand.len() - 1) as f64),
        });
    }
    let (t, p) = ttest_onesample(cand.to_vec(), c, alt(worse_is_less), NaNPolicy::Error).ok()?;
    Some(Test {
        statistic: t,
        p: clean_p(p),
        df: Some((cand.len() - 1) as f64),
    })
}

/// Exact sign test of the median against a constant, one-sided (H1: candidate worse).
/// The statistic is the number of observations on the "worse" side; ties are dropped.
pub fn sign_test(cand: &[f64], c: f64, worse_is_less: bool) -> Option<Test> {
    let worse = cand
        .iter()
        .filter(|&&x| if worse_is_less { x < c } else { x > c })
        .count();
    let n = cand.iter().filter(|&&x| x != c).count();
    if n == 0 {
        return Some(Test {
            statistic: 0.0,
            p: 1.0,
            df: None,
        });
    }
    let b = Binomial::new(0.5, n as u64).ok()?;
    // P(K >= worse) = 1 - P(K <= worse - 1)
    let p = if worse == 0 { 1.0 } else { b.sf(worse as u64 - 1) };
    Some(Test {
        statistic: worse as f64,
        p: clean_p(p),
        df: None,
    })
}

fn clean_p(p: f64) -> f64 {
    if p.is_nan() {
        1.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

/// Holm-Bonferroni step-down adjusted p-values (same order as the input).
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut idx: Vec<usize> = (0..m).collect();
    idx.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![0.0; m];
    let mut run_max: f64 = 0.0;
    for (rank, &i) in idx.iter().enumerate() {
        let adj = ((m - rank) as f64 * p[i]).min(1.0);
        run_max = run_max.max(adj);
        out[i] = run_max;
    }
    out
}

/// Robust z-scores `(x - median) / (1.4826 * MAD)`; all zeros when MAD is 0
/// (then any value different from the median gets +-inf).
pub fn robust_z(x: &[f64]) -> Vec<f64> {
    let med = median(x);
    let dev: Vec<f64> = x.iter().map(|v| (v - med).abs()).collect();
    let mad = median(&dev) * 1.4826;
    x.iter()
        .map(|v| {
            let d = v - med;
            if mad > 0.0 {
                d / mad
            } else if d == 0.0 {
                0.0
            } else {
                d.signum() * f64::INFINITY
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(quantile_sorted(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
    }

    #[test]
    fn holm_matches_reference() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02
        let a = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{a:?}");
        }
    }

    #[test]
    fn welch_matches_scipy() {
        // scipy.stats.ttest_ind([1,2,3,4,5],[2,4,6,8,10], equal_var=False, alternative='less')
        // statistic=-1.8973665961010275, pvalue=0.05310..., df=5.882352941176471
        let t = welch(&[1., 2., 3., 4., 5.], &[2., 4., 6., 8., 10.], true).unwrap();
        assert!((t.statistic + 1.8973665961010275).abs() < 1e-9);
        assert!((t.df.unwrap() - 5.882352941176471).abs() < 1e-9);
        assert!((t.p - 0.0531).abs() < 1e-3, "{}", t.p);
    }

    #[test]
    fn mwu_direction() {
        let lo = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let hi = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0];
        assert!(mann_whitney(&lo, &hi, true).unwrap().p < 0.01);
        assert!(mann_whitney(&hi, &lo, true).unwrap().p > 0.9);
        // scipy.stats.mannwhitneyu([1..6], [10..15], alternative='less', method='exact') = 1/924
        assert!((mann_whitney(&lo, &hi, true).unwrap().p - 1.0 / 924.0).abs() < 1e-12);
        // scipy: mannwhitneyu([1,3,5,7,9],[2,4,6,8,10,12], alternative='less').pvalue = 0.2142857
        let t = mann_whitney(&[1., 3., 5., 7., 9.], &[2., 4., 6., 8., 10., 12.], true).unwrap();
        assert!((t.p - 0.21428571428571427).abs() < 1e-9, "{}", t.p);
        assert_eq!(mwu_exact_sf(0.0, 3, 4), 1.0);
        // all ties: p is clean
        assert_eq!(mann_whitney(&[1.0; 5], &[1.0; 5], true).unwrap().p, 1.0);
    }

    #[test]
    fn sign_test_exact() {
        // 5 of 5 below: p = 1/32
        let t = sign_test(&[1., 2., 3., 4., 5.], 10.0, true).unwrap();
        assert!((t.p - 1.0 / 32.0).abs() < 1e-12);
        assert_eq!(sign_test(&[11., 12.], 10.0, true).unwrap().p, 1.0);
    }

    #[test]
    fn bootstrap_deterministic() {
        let a: Vec<f64> = (0..20).map(|i| 10.0 + i as f64 * 0.1).collect();
        let c1 = bootstrap_ratio_ci(&a, Some(&a), 0.0, 2000, 0.95, 7);
        let c2 = bootstrap_ratio_ci(&a, Some(&a), 0.0, 2000, 0.95, 7);
        assert_eq!(c1, c2);
        assert!(c1.0 < 1.0 && c1.1 > 1.0);
    }

    #[test]
    fn robust_z_flags_outlier() {
        let z = robust_z(&[10.0, 10.2, 9.9, 10.1, 3.0]);
        assert!(z[4] < -3.5);
        assert!(z[0].abs() < 1.0);
    }
}
