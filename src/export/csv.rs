//! `results.csv`, `samples.csv`, `pairs.csv` (and `nccl_samples.csv` with `--baseline
//! nccl`), exactly as `results/README.md` specifies: the row types and the schema version are
//! tcpx-schema's, which tcpx-analyze admits with, and headers are written from them (even for a
//! file without rows) so names and order cannot drift from the values. Numbers are plain (bytes,
//! microseconds, GB/s with GB = 10^9), and an unchecked `wrong` is empty. A `results.csv` row
//! is the run's columns around [`SizeRow`], the per-size row `summary.json` holds too.

use std::io;
use std::path::Path;

use serde::Serialize;
use tcpx_schema::{NcclSampleRow, PairRow, RankSampleRow, ResultRow, SampleRow, SCHEMA_VERSION, UNVERIFIED};

use super::row::{significant, whole_ns, SizeRow, RATE_DIGITS};
use crate::report::{RunInfo, SizeResult};

/// File names in the result directory.
pub const RESULTS_CSV: &str = "results.csv";
/// See [`RESULTS_CSV`].
pub const SAMPLES_CSV: &str = "samples.csv";
/// See [`RESULTS_CSV`].
pub const PAIRS_CSV: &str = "pairs.csv";
/// Every rank's time of every timed iteration: what `-a` reduces.
pub const RANK_SAMPLES_CSV: &str = "rank_samples.csv";
/// NCCL's per-iteration times, both timings (`--baseline nccl` only).
pub const NCCL_SAMPLES_CSV: &str = "nccl_samples.csv";

/// Writes the three CSV files into `dir` (which must exist), replacing files of the same
/// names. `samples.csv` bandwidths are computed per iteration from the sample time with the
/// row's `busbw_factor`, the same way as the row's own algbw/busbw.
pub fn write_all(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    write_results_csv(dir, info, results)?;
    write_samples_csv(dir, info, results)?;
    write_rank_samples_csv(dir, info, results)?;
    write_pairs_csv(dir, info, results)?;
    write_nccl_samples_csv(dir, info, results)
}

/// Only when the baseline ran (a run without it has no such file).
fn write_nccl_samples_csv(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    if info.nccl.is_none() {
        return Ok(());
    }
    let rows = results
        .iter()
        .filter_map(|r| r.nccl.as_ref().map(|n| (r, n)))
        .flat_map(|(r, n)| {
            let timed = [("barrier", &n.samples_us), ("batch", &n.batch_samples_us)];
            timed.into_iter().flat_map(move |(timing, samples)| {
                samples.iter().enumerate().map(move |(iter, &t)| {
                    let algbw = tcpx_units::gbps(n.size_bytes, t);
                    NcclSampleRow {
                        schema_version: SCHEMA_VERSION,
                        pattern: &info.settings.pattern,
                        size_bytes: r.size_bytes,
                        timing,
                        iter,
                        time_us: t,
                        algbw_gbps: algbw,
                        busbw_gbps: algbw * r.busbw_factor,
                    }
                })
            })
        });
    write_rows(&dir.join(NCCL_SAMPLES_CSV), rows)
}

/// Writes `rows` under the header of `T`'s fields (the header alone when there are none: serde
/// writes it with the first row, and a file with a header is easier for readers than an empty
/// one).
fn write_rows<T: Serialize + Default>(path: &Path, rows: impl Iterator<Item = T>) -> io::Result<()> {
    super::write_atomically(path, |out| {
        let mut w = ::csv::Writer::from_writer(out);
        let mut rows = rows.peekable();
        if rows.peek().is_none() {
            w.write_record(header::<T>()?)?;
        }
        for row in rows {
            w.serialize(row)?;
        }
        w.flush()
    })
}

/// The column names of row type `T`, in order: the header serde writes before a first row.
fn header<T: Serialize + Default>() -> io::Result<Vec<String>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.serialize(T::default())?;
    let bytes = w.into_inner().map_err(|e| io::Error::other(e.to_string()))?;
    let mut r = ::csv::Reader::from_reader(bytes.as_slice());
    Ok(r.headers()?.iter().map(String::from).collect())
}

fn write_results_csv(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    let rows = results.iter().map(|r| result_row(info, &SizeRow::of(r)));
    write_rows(&dir.join(RESULTS_CSV), rows)
}

/// `row` as a line of `results.csv`: the run's columns around it, each value spelled for CSV.
fn result_row<'a>(info: &'a RunInfo, row: &SizeRow<'_>) -> ResultRow<'a> {
    let nccl = row.nccl;
    ResultRow {
        schema_version: SCHEMA_VERSION,
        pattern: &info.settings.pattern,
        scope: &info.settings.scope,
        dir: &info.settings.dir,
        mem: &info.settings.mem,
        size_bytes: row.size_bytes,
        count: row.count,
        type_: row.type_,
        iters: row.iters,
        time_us: row.time_us,
        algbw_gbps: row.algbw_gbps,
        busbw_gbps: row.busbw_gbps,
        netbw_gbps: row.netbw_gbps,
        wrong: row.wrong,
        send_peers_in_flight: row.peers_in_flight[0],
        recv_peers_in_flight: row.peers_in_flight[1],
        time_min_us: row.time_min_us,
        time_median_us: row.time_median_us,
        time_p99_us: row.time_p99_us,
        time_cv_pct: row.time_cv_pct,
        bytes_planned: row.bytes_planned,
        bytes_moved: row
            .bytes_moved
            .map_or_else(|| UNVERIFIED.to_string(), |b| b.to_string()),
        bytes_verified_by: row.verified_by(),
        wire_rx_bytes: row.bytes.wire_rx_bytes,
        wire_payload_ratio: row.bytes.wire_ratio(),
        wire_by_iface: row.bytes.wire_cell(),
        ranks: info.settings.ranks,
        endpoints: info.settings.endpoints,
        nodes: info.settings.nodes,
        plugin: &info.plugin.name,
        abi: info.plugin.abi,
        // CPU times are read in microseconds (getrusage, clock_gettime's thread clocks).
        cpu_user_s: whole_us_in_s(row.cpu.user_s),
        cpu_sys_s: whole_us_in_s(row.cpu.sys_s),
        cpu_max_rank_s: whole_us_in_s(row.cpu.max_rank_s),
        cpu_cores_per_rank: significant(row.cpu.cores_per_rank, RATE_DIGITS),
        cpu_s_per_gb: row.cpu.cpu_s_per_gb.map(|c| significant(c, RATE_DIGITS)),
        nccl_time_us: nccl.map(|n| n.time_us),
        nccl_algbw_gbps: nccl.map(|n| n.algbw_gbps),
        nccl_busbw_gbps: nccl.map(|n| n.busbw_gbps),
        nccl_ratio: nccl.map(|n| n.ratio),
        nccl_batch_time_us: nccl.map(|n| n.batch_time_us),
        nccl_batch_algbw_gbps: nccl.map(|n| n.batch_algbw_gbps),
        nccl_batch_busbw_gbps: nccl.map(|n| n.batch_busbw_gbps),
        nccl_wrong: nccl.and_then(|n| n.wrong),
        tcp_retrans_segs: row.tcp.map(|t| t.total.retrans_segs),
        tcp_timeouts: row.tcp.map(|t| t.total.timeouts),
    }
}

/// Seconds read at a microsecond's resolution, written at it.
fn whole_us_in_s(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

fn write_samples_csv(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    let rows = results.iter().flat_map(|r| {
        r.samples_us.iter().enumerate().map(move |(iter, &t)| {
            let algbw = r.size_bytes as f64 / t / 1e3;
            SampleRow {
                schema_version: SCHEMA_VERSION,
                pattern: &info.settings.pattern,
                size_bytes: r.size_bytes,
                iter,
                time_us: whole_ns(t),
                algbw_gbps: significant(algbw, RATE_DIGITS),
                busbw_gbps: significant(algbw * r.busbw_factor, RATE_DIGITS),
            }
        })
    });
    write_rows(&dir.join(SAMPLES_CSV), rows)
}

fn write_rank_samples_csv(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    let rows = results.iter().flat_map(|r| {
        let iters = r.iters.max(1);
        r.rank_samples_us.iter().enumerate().map(move |(i, &t)| RankSampleRow {
            schema_version: SCHEMA_VERSION,
            pattern: &info.settings.pattern,
            size_bytes: r.size_bytes,
            iter: i % iters,
            rank: i / iters,
            time_us: whole_ns(t),
        })
    });
    write_rows(&dir.join(RANK_SAMPLES_CSV), rows)
}

/// The most rows pairs.csv holds: the largest sizes' links, down to the size that would cross
/// it (the largest always). At a 64 x 8 x 4 fullmesh's 16128 NIC links a size, 32 sizes; at a
/// 512-node one's 261632 node pairs, the two largest (about 40 MB). Small sizes, where a link's
/// figure is latency more than rate, go first; the file is rewritten after every size, so its
/// cost per size stays bounded too.
pub const PAIRS_ROWS_MAX: usize = 1 << 19;

/// The sizes (indices into `results`) whose links pairs.csv holds: from the largest down while
/// within [`PAIRS_ROWS_MAX`] rows, in the results' order.
pub fn pairs_sizes(results: &[SizeResult]) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..results.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(results[i].size_bytes));
    let mut rows = 0;
    let mut kept: Vec<usize> = Vec::new();
    for i in by_size {
        let n = results[i].pairs.len();
        if !kept.is_empty() && rows + n > PAIRS_ROWS_MAX {
            break;
        }
        rows += n;
        kept.push(i);
    }
    kept.sort_unstable();
    kept
}

fn write_pairs_csv(dir: &Path, info: &RunInfo, results: &[SizeResult]) -> io::Result<()> {
    let rows = pairs_sizes(results).into_iter().map(|i| &results[i]).flat_map(|r| {
        r.pairs.iter().map(move |p| PairRow {
            schema_version: SCHEMA_VERSION,
            pattern: &info.settings.pattern,
            size_bytes: r.size_bytes,
            src_rank: p.src_rank,
            src_gpu: p.src_gpu,
            src_host: &p.src_host,
            dst_rank: p.dst_rank,
            dst_gpu: p.dst_gpu,
            dst_host: &p.dst_host,
            bytes: p.bytes,
            // The clocks read nanoseconds; a rate is known to 6 digits at most.
            time_us: (p.time_us * 1e3).round() / 1e3,
            gbps: (!p.above_link).then_some(significant(p.gbps, RATE_DIGITS)),
            link_gbps: p.link_gbps.map(|g| significant(g, RATE_DIGITS)),
            above_link: p.above_link,
            level: p.level().name(),
            rail: p.rail.as_deref().unwrap_or(""),
            endpoint_pairs: p.endpoint_pairs,
        })
    });
    write_rows(&dir.join(PAIRS_CSV), rows)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures;
    use super::*;

    /// results.csv's columns as tcpx-schema declares them (what tcpx-analyze admits by).
    fn result_columns() -> Vec<String> {
        tcpx_schema::RESULTS_COLUMNS
            .iter()
            .map(|c| c.name.to_string())
            .collect()
    }

    fn columns<T: Serialize + Default>() -> Vec<String> {
        header::<T>().expect("header")
    }

    fn read(path: &Path) -> (Vec<String>, Vec<::csv::StringRecord>) {
        let mut r = ::csv::Reader::from_path(path).expect("open");
        let headers = r.headers().expect("headers").iter().map(String::from).collect();
        let rows = r.records().map(|x| x.expect("record")).collect();
        (headers, rows)
    }

    #[test]
    fn files_match_the_schema() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let info = fixtures::info();
        let mut results = fixtures::results();
        results[1].wrong = None;
        write_all(tmp.path(), &info, &results).expect("write");

        let (h, rows) = read(&tmp.path().join(RESULTS_CSV));
        assert_eq!(h, result_columns());
        assert_eq!(rows.len(), 2);
        let row = &rows[0];
        let get = |name: &str| row.get(h.iter().position(|c| c == name).expect(name)).expect(name);
        assert_eq!(get("schema_version"), "4");
        assert_eq!(get("pattern"), "sendrecv");
        assert_eq!(get("scope"), "inter-node");
        assert_eq!(get("mem"), "host");
        assert_eq!(get("size_bytes"), "256");
        assert_eq!(get("count"), "64");
        assert_eq!(get("type"), "float");
        assert_eq!(get("time_us"), "34.24");
        assert_eq!(get("wrong"), "0");
        assert_eq!(get("plugin"), "tcpx-emu");
        assert_eq!(get("abi"), "8");
        assert_eq!(get("cpu_user_s"), results[0].cpu.user_s.to_string());
        assert_eq!(get("cpu_s_per_gb"), "0.5");
        assert_eq!(get("cpu_cores_per_rank"), results[0].cpu.cores_per_rank.to_string());
        assert_eq!(get("bytes_planned"), "512");
        assert_eq!(
            get("bytes_moved"),
            "unverified",
            "wire counters bound the bytes; they do not measure them"
        );
        assert_eq!(get("bytes_verified_by"), "wire (lower bound)");
        assert_eq!(get("wire_rx_bytes"), "612");
        assert_eq!(get("wire_by_iface"), "a:lo=1836/1836");
        let ratio: f64 = get("wire_payload_ratio").parse().expect("float");
        assert!((ratio - 612.0 / 512.0).abs() < 1e-9);
        let busbw: f64 = get("busbw_gbps").parse().expect("float");
        assert_eq!(busbw, significant(results[0].busbw_gbps, RATE_DIGITS));
        let p99: f64 = get("time_p99_us").parse().expect("float");
        assert_eq!(p99, whole_ns(results[0].stats.p99));
        // Unchecked: empty cell.
        assert_eq!(&rows[1][h.iter().position(|c| c == "wrong").expect("wrong")], "");

        let (h, rows) = read(&tmp.path().join(SAMPLES_CSV));
        assert_eq!(h, columns::<SampleRow>());
        assert_eq!(rows.len(), 6);
        assert_eq!(&rows[3][2], "1048576");
        assert_eq!(&rows[3][3], "0");
        let t: f64 = rows[4][4].parse().expect("float");
        let algbw: f64 = rows[4][5].parse().expect("float");
        assert_eq!(t, 100.0);
        assert_eq!(algbw, significant(1048576.0 / 100.0 / 1e3, RATE_DIGITS));

        let (h, rows) = read(&tmp.path().join(PAIRS_CSV));
        assert_eq!(h, columns::<PairRow>());
        assert_eq!(rows.len(), 4);
        // Hostnames with commas and quotes survive the round trip.
        assert_eq!(&rows[0][8], "b, \"quoted\"");
        assert_eq!(&rows[1][5], "b, \"quoted\"");
    }

    /// Figures at their precision (issue 55): a time at the nanosecond, a rate or ratio at 6
    /// significant digits, CPU seconds at the microsecond; never f64's rounding noise
    /// (`1632.1661499999998`, `0.17569327882595198`, seen in results.csv on c22480e).
    #[test]
    fn figures_are_written_at_their_precision() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut results = fixtures::results();
        let r = &mut results[0];
        r.time_us = 1632.1661499999998;
        r.stats.min = 49.016000000000005;
        r.algbw_gbps = 0.17569327882595198;
        r.busbw_gbps = 0.17569327882595198;
        r.cpu.user_s = 0.0018115000000000006;
        r.cpu.cores_per_rank = 0.9649912982981744;
        r.samples_us[0] = 49.016000000000005;
        write_all(tmp.path(), &fixtures::info(), &results).expect("write");
        let (h, rows) = read(&tmp.path().join(RESULTS_CSV));
        let get = |name: &str| {
            rows[0]
                .get(h.iter().position(|c| c == name).expect(name))
                .expect(name)
                .to_string()
        };
        assert_eq!(get("time_us"), "1632.166");
        assert_eq!(get("time_min_us"), "49.016");
        assert_eq!(get("algbw_gbps"), "0.175693");
        assert_eq!(get("busbw_gbps"), "0.175693");
        assert_eq!(get("cpu_user_s"), "0.001812");
        assert_eq!(get("cpu_cores_per_rank"), "0.964991");
        let (_, rows) = read(&tmp.path().join(SAMPLES_CSV));
        assert_eq!(&rows[0][4], "49.016");
    }

    #[test]
    fn empty_run_still_has_headers() {
        let tmp = tempfile::tempdir().expect("tempdir");
        write_all(tmp.path(), &fixtures::info(), &[]).expect("write");
        for (name, cols) in [
            (RESULTS_CSV, result_columns()),
            (SAMPLES_CSV, columns::<SampleRow>()),
            (RANK_SAMPLES_CSV, columns::<RankSampleRow>()),
            (PAIRS_CSV, columns::<PairRow>()),
        ] {
            let (h, rows) = read(&tmp.path().join(name));
            assert_eq!(h, cols, "{name}");
            assert!(rows.is_empty());
        }
    }
}
