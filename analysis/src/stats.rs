//! Statistical primitives: moments, Student's t (statrs), Holm-Bonferroni, robust z-scores. The
//! seeded generator, medians and quantiles are tcpx-units', shared with tcpx-perf and tcpx-gpu.
//! The gate's run-level test is in [`crate::decision`].

use statrs::distribution::{ContinuousCDF, StudentsT};
use tcpx_units::median;

/// The workspace's one seeded generator (splitmix64): simulations and the fuzz loop must be
/// reproducible from their seed.
pub use tcpx_units::Rng;

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

/// Student's t distribution with `df` degrees of freedom (None when df is not positive).
fn students_t(df: f64) -> Option<StudentsT> {
    if df.is_finite() && df > 0.0 {
        StudentsT::new(0.0, 1.0, df).ok()
    } else {
        None
    }
}

/// The `q` quantile of Student's t with `df` degrees of freedom (NaN when df <= 0).
pub fn t_quantile(q: f64, df: f64) -> f64 {
    students_t(df).map_or(f64::NAN, |d| d.inverse_cdf(q))
}

/// `P(T <= t)` for Student's t with `df` degrees of freedom (NaN when df <= 0).
pub fn t_cdf(t: f64, df: f64) -> f64 {
    match students_t(df) {
        Some(d) if t.is_finite() => d.cdf(t),
        Some(_) if t > 0.0 => 1.0,
        Some(_) if t < 0.0 => 0.0,
        _ => f64::NAN,
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
    fn holm_matches_reference() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02
        let a = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{a:?}");
        }
    }

    #[test]
    fn t_quantiles_match_r() {
        // R: qt(0.95, 8) = 1.859548; qt(0.8, 8) = 0.8888895 (checked by numerical integration); pt(-2, 4) = 0.05805826
        assert!((t_quantile(0.95, 8.0) - 1.859548).abs() < 1e-5);
        assert!((t_quantile(0.8, 8.0) - 0.8888895).abs() < 1e-5);
        assert!((t_cdf(-2.0, 4.0) - 0.05805826).abs() < 1e-7);
        assert!(t_quantile(0.95, 0.0).is_nan());
        assert_eq!(t_cdf(f64::NEG_INFINITY, 3.0), 0.0);
    }

    #[test]
    fn normal_generator_moments() {
        let mut r = Rng::new(3);
        let x: Vec<f64> = (0..20000).map(|_| r.normal()).collect();
        assert!(mean(&x).abs() < 0.03, "{}", mean(&x));
        assert!((var(&x) - 1.0).abs() < 0.04, "{}", var(&x));
    }

    #[test]
    fn robust_z_flags_outlier() {
        let z = robust_z(&[10.0, 10.2, 9.9, 10.1, 3.0]);
        assert!(z[4] < -3.5);
        assert!(z[0].abs() < 1.0);
    }
}
