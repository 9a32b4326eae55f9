//! The vocabulary tcpx-perf and tcpx-analyze share, so each fact has one home:
//! - [`size`]: the one size grammar (`parse_size`) and its two spellings (`format_size` for
//!   flags and tables, `format_size_label` for prose and plot axes).
//! - [`gbps`]: GB/s with GB = 10^9 bytes.
//! - [`quantile`]: the median and quantiles of samples.
//! - [`reduction`]: nccl-tests' `-a`, reducing per-rank times to one number.
//! - [`rng`]: the one pseudo-random generator (splitmix64) and its mixer.
//!
//! Only `std`: every crate of the workspace may depend on this one.

pub mod quantile;
pub mod reduction;
pub mod rng;
pub mod size;

pub use quantile::{median, median_sorted, nearest_rank, quantile_sorted};
pub use reduction::{rank_means, reduce, reduce_each_iteration, TimeReduction};
pub use rng::Rng;
pub use size::{format_size, format_size_label, parse_size};

/// GB/s (GB = 10^9 bytes) for `bytes` moved in `time_us` microseconds.
pub fn gbps(bytes: u64, time_us: f64) -> f64 {
    bytes as f64 / time_us / 1e3
}

/// The first `max` of `items` joined by `, `, and `and N more` for the rest: a list in one
/// line however long it is.
pub fn shorten(items: &[String], max: usize) -> String {
    let shown = items.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > max {
        format!("{shown} and {} more", items.len() - max)
    } else {
        shown
    }
}

/// A rate for prose: GB/s with three decimals from 0.1 GB/s up, else Mbit/s (10^6 bits), so a
/// shaped or slow link never reads `0.000 GB/s`.
pub fn format_rate(gbps: f64) -> String {
    if gbps >= 0.1 {
        format!("{gbps:.3} GB/s")
    } else {
        let mbit = gbps * 8e3;
        let digits = if mbit >= 100.0 {
            0
        } else if mbit >= 10.0 {
            1
        } else {
            2
        };
        format!("{mbit:.digits$} Mbit/s")
    }
}

#[cfg(test)]
mod tests {
    use super::{format_rate, gbps};

    #[test]
    fn slow_rates_read_in_mbit() {
        assert_eq!(format_rate(12.5), "12.500 GB/s");
        assert_eq!(format_rate(0.25), "0.250 GB/s");
        assert_eq!(format_rate(0.0625), "500 Mbit/s");
        assert_eq!(format_rate(0.00125), "10.0 Mbit/s");
        assert_eq!(format_rate(0.0003125), "2.50 Mbit/s");
    }

    #[test]
    fn gbps_is_decimal() {
        // 1e9 bytes in one second is 1 GB/s; 1 GiB in one second is 1.073741824 GB/s.
        assert_eq!(gbps(1_000_000_000, 1e6), 1.0);
        assert!((gbps(1 << 30, 1e6) - 1.073741824).abs() < 1e-12);
    }
}
