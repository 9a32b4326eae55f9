//! No pair faster than its link: each pair figure against what its path can carry.
//!
//! A pair's bytes leave the sender on its NIC in the receiver NIC's rail ([`crate::slow_nic`]'s
//! path of a flow) and enter the receiver's NIC. The path's rate is the lower of the two NICs'
//! link speeds and of the sender NIC's egress shaper (the rig's tbf); an endpoint spread over
//! several NICs adds its rails. A pair figure above that rate is not a rate of the link: it is
//! marked `above_link`, written without a rate, and judged by nothing. Two causes: a shaper's
//! bucket, which lets a burst through at once after an idle spell (the rig's tbf holds at least
//! 128 KiB: a small pair can ride it), and an error of measurement (the two ends' clocks: a
//! barrier apart across kernels). A figure faster even than the rate plus the bucket allows
//! can only be the second, and the run says so ([`impossible_line`]).

use crate::placement::dry_run::Row;
use crate::report::{PairResult, SizeResult};
use std::collections::HashMap;

/// How far above its rate tbf lets a flow run: its rate tables round by about 1% (a pair at
/// 1.01 of its 400mbit link, issue 53). Only an *impossible* figure gets it: any figure above its
/// link's rate is flagged `above_link`, however little.
const TBF_ROUNDING: f64 = 1.02;

/// One rail of a path: bytes per second, and the bytes its shaper lets through at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rail {
    rate: f64,
    burst: f64,
}

/// What the NIC `nic` of `host` carries out (its shaper, at most its link speed), or None where
/// no row of that host uses the NIC or its speed is unknown.
fn egress(rows: &[Row], host: &str, nic: &str) -> Option<Rail> {
    let row = rows
        .iter()
        .find(|r| r.host == host && r.nic.split('+').any(|n| n == nic))?;
    egress_of(row, nic)
}

/// What `row`'s NIC `nic` carries out.
fn egress_of(row: &Row, nic: &str) -> Option<Rail> {
    let line = (row.speed_gbps > 0.0).then_some(row.speed_gbps * 1e9 / 8.0);
    let shaped = row.shapers.iter().find(|s| s.nic == nic).map(|s| s.shaper);
    match (line, shaped) {
        (Some(l), Some(s)) => Some(Rail {
            rate: l.min(s.rate_bytes_per_s),
            burst: s.burst_bytes,
        }),
        (None, Some(s)) => Some(Rail {
            rate: s.rate_bytes_per_s,
            burst: s.burst_bytes,
        }),
        (Some(l), None) => Some(Rail { rate: l, burst: 0.0 }),
        (None, None) => None,
    }
}

/// What NIC `nic` of `host` carries out, bytes per second (its shaper, at most its link
/// speed), or None where unknown.
pub fn egress_rate(rows: &[Row], host: &str, nic: &str) -> Option<f64> {
    egress(rows, host, nic).map(|r| r.rate)
}

/// The placement rows indexed once, so that a size's links are checked in time proportional to
/// them (a 64 x 8 x 4 job has 512 rows and 16128 NIC links a size).
struct Paths<'a> {
    /// (rank, GPU) -> the endpoint's row.
    endpoint: HashMap<(usize, usize), &'a Row>,
    /// (host, NIC) -> the first row of that host using the NIC (its egress).
    nic: HashMap<(&'a str, &'a str), &'a Row>,
    /// Host -> its NICs, each with the link speed of the first row using it (ingress).
    host_nics: HashMap<&'a str, Vec<(&'a str, f64)>>,
}

impl<'a> Paths<'a> {
    fn new(rows: &'a [Row]) -> Paths<'a> {
        let mut p = Paths {
            endpoint: HashMap::new(),
            nic: HashMap::new(),
            host_nics: HashMap::new(),
        };
        for r in rows {
            p.endpoint.insert((r.rank, r.gpu), r);
            for nic in r.nic.split('+') {
                p.nic.entry((r.host.as_str(), nic)).or_insert(r);
                let nics = p.host_nics.entry(r.host.as_str()).or_default();
                if !nics.iter().any(|(n, _)| *n == nic) {
                    nics.push((nic, r.speed_gbps));
                }
            }
        }
        p
    }

    /// The rail `nic` from `src_host` into a receiver NIC of link speed `into_gbps`.
    fn rail(&self, src_host: &str, nic: &str, into_gbps: f64) -> Option<Rail> {
        let out = egress_of(self.nic.get(&(src_host, nic))?, nic)?;
        // The receiving NIC's link speed bounds the rail too (a shaper is egress only).
        let into = (into_gbps > 0.0).then_some(into_gbps * 1e9 / 8.0);
        Some(Rail {
            rate: into.map_or(out.rate, |i| i.min(out.rate)),
            burst: out.burst,
        })
    }

    /// The path of link `p`: its rails summed (an endpoint spread over NICs: each of them; a
    /// node pair: every NIC of the receiving node), or None when any is unknown.
    fn of(&self, p: &PairResult) -> Option<Rail> {
        let nics: Vec<(&str, f64)> = match (p.dst_rank.zip(p.dst_gpu), &p.rail) {
            (Some(end), _) => {
                let dst = self.endpoint.get(&end)?;
                dst.nic.split('+').map(|n| (n, dst.speed_gbps)).collect()
            }
            (None, Some(rail)) => {
                let nics = self.host_nics.get(p.dst_host.as_str())?;
                vec![*nics.iter().find(|(n, _)| n == rail)?]
            }
            (None, None) => self.host_nics.get(p.dst_host.as_str())?.clone(),
        };
        let mut sum = Rail { rate: 0.0, burst: 0.0 };
        for (nic, speed) in nics {
            let rail = self.rail(&p.src_host, nic, speed)?;
            sum.rate += rail.rate;
            sum.burst += rail.burst;
        }
        Some(sum)
    }
}

/// Marks every pair of `result` above its path's rate (`above_link`) and those faster than even
/// the rate and the shaper's bucket allow (`impossible`), and sets each pair's `link_gbps`
/// where the path is known. Pairs within one host (loopback) are not checked.
pub fn mark(rows: &[Row], result: &mut SizeResult) {
    let paths = Paths::new(rows);
    for p in &mut result.pairs {
        if p.src_host == p.dst_host {
            continue;
        }
        let Some(rail) = paths.of(p) else { continue };
        p.link_gbps = Some(rail.rate / 1e9);
        let seconds = p.time_us * 1e-6;
        p.above_link = seconds < p.bytes as f64 / rail.rate;
        p.impossible = seconds * TBF_ROUNDING < ((p.bytes as f64 - rail.burst) / rail.rate).max(0.0);
    }
}

/// The run's account of pairs above their link, one line each: those within a shaper's bucket
/// (a note: the figure is a burst, not the link's rate) and those beyond it (a warning: an
/// error of measurement). Empty when no pair is above its link.
pub fn lines(results: &[SizeResult]) -> Vec<String> {
    let count = |f: fn(&PairResult) -> bool| {
        let sizes: Vec<String> = results
            .iter()
            .filter(|r| r.pairs.iter().any(f))
            .map(|r| {
                format!(
                    "{} of {} at {}",
                    r.pairs.iter().filter(|p| f(p)).count(),
                    r.pairs.len(),
                    tcpx_units::format_size_label(r.size_bytes)
                )
            })
            .collect();
        sizes.join(", ")
    };
    let mut out = Vec::new();
    let burst = count(|p| p.above_link && !p.impossible);
    if !burst.is_empty() {
        out.push(format!(
            "# note: pairs faster than their link's rate but within its shaper's bucket (a burst, not the link's rate): {burst}; in pairs.csv without a rate (above_link)"
        ));
    }
    let impossible = count(|p| p.impossible);
    if !impossible.is_empty() {
        out.push(format!(
            "# warning: pairs faster than their link allows even with its shaper's bucket, an error of measurement (the two ends' clocks?): {impossible}; in pairs.csv without a rate (above_link)"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::dry_run::NicShaper;
    use crate::shaper::Shaper;

    /// 2 nodes x 2 NICs at 10 Gbit/s, each NIC shaped to 10 Mbit/s with a 128 KiB bucket.
    fn rows() -> Vec<Row> {
        let mut rows = crate::slow_nic::tests::placement_rows(2, 2);
        for r in &mut rows {
            r.shapers = vec![NicShaper {
                nic: r.nic.clone(),
                shaper: Shaper {
                    rate_bytes_per_s: 1.25e6,
                    burst_bytes: 131_072.0,
                },
            }];
        }
        rows
    }

    /// node0's rank 0 to node1's rank 2: `bytes` in `time_us`.
    fn pair(bytes: u64, time_us: f64) -> PairResult {
        crate::slow_nic::tests::pair(0, 2, bytes, tcpx_units::gbps(bytes, time_us))
    }

    /// 10 Mbit/s with a 128 KiB bucket: 1 MiB takes 839 ms at the rate, and at least (1 MiB -
    /// 128 KiB) / 1.25 MB/s = 734 ms with the bucket full. 103 us (issue 46's pair) is above the
    /// link and impossible; 800 ms is above the rate but within the bucket; 900 ms is a rate;
    /// 64 KiB in 103 us fits in the bucket.
    #[test]
    fn a_pair_faster_than_its_shaped_link_is_marked() {
        let mut size = crate::export::fixtures::size(1 << 20, 1000.0, Some(0));
        size.pairs = vec![
            pair(1 << 20, 103.0),
            pair(1 << 20, 800_000.0),
            pair(1 << 20, 900_000.0),
            pair(65_536, 103.0),
        ];
        mark(&rows(), &mut size);
        let marks: Vec<(bool, bool)> = size.pairs.iter().map(|p| (p.above_link, p.impossible)).collect();
        assert_eq!(marks, [(true, true), (true, false), (false, false), (true, false)]);
        assert_eq!(size.pairs[0].link_gbps, Some(0.00125));
        let lines = lines(std::slice::from_ref(&size));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("within its shaper's bucket") && lines[0].contains("2 of 4 at 1 MiB"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("# warning:") && lines[1].contains("1 of 4 at 1 MiB"),
            "{lines:?}"
        );
    }

    /// Issue 53: a pair 1% above its link's rate (tbf's rounding) is flagged above it, not passed
    /// as a rate (on 1dfe633 a 2% slack let it through unflagged); it is no error of measurement.
    #[test]
    fn a_pair_one_percent_above_its_link_is_flagged() {
        let mut size = crate::export::fixtures::size(1 << 20, 1000.0, Some(0));
        // 10 Mbit/s: 1 MiB in 838.9 ms at the rate; 1% faster.
        size.pairs = vec![pair(1 << 20, 838_861.0 / 1.01), pair(1 << 20, 838_861.0 * 1.001)];
        mark(&rows(), &mut size);
        let marks: Vec<(bool, bool)> = size.pairs.iter().map(|p| (p.above_link, p.impossible)).collect();
        assert_eq!(marks, [(true, false), (false, false)]);
    }

    /// Without a shaper the link speed bounds the pair: 10 Gbit/s carries 1 MiB in 839 us.
    #[test]
    fn the_link_speed_bounds_an_unshaped_pair() {
        let mut rows = rows();
        for r in &mut rows {
            r.shapers.clear();
        }
        let mut size = crate::export::fixtures::size(1 << 20, 1000.0, Some(0));
        size.pairs = vec![pair(1 << 20, 500.0), pair(1 << 20, 900.0)];
        mark(&rows, &mut size);
        assert_eq!(
            size.pairs.iter().map(|p| p.above_link).collect::<Vec<_>>(),
            [true, false]
        );
        assert!(size.pairs[0].impossible, "no bucket: above the speed is impossible");
    }
}
