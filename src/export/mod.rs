//! Output formats, one small module per format (as hyperfine's `export/`):
//! - [`table`]: the nccl-tests-style stdout table (header, one row per size, footer);
//! - [`csv`]: `results.csv`, `samples.csv`, `pairs.csv`;
//! - [`svg`]: `bandwidth.svg` and `links.svg`, the run's pictures;
//! - [`json`]: `summary.json`, written last and atomically;
//! - [`nccl_json`]: `-J FILE`, the run as nccl-tests' JSON;
//! - [`nodes`]: the node verdicts' footer table, `--healthy-hostfile` and `--drain-list`;
//! - [`row`]: the one per-size row that `summary.json` holds and `results.csv` flattens;
//! - [`claim`]: one job per result directory (`.tcpx-perf-claim`, locked for the job's life).
//!
//! The file formats are specified in `results/README.md` (schema version 4).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::report::{RunInfo, SizeResult};

pub mod claim;
pub mod csv;
pub mod json;
pub mod nccl_json;
pub mod nodes;
pub mod row;
pub mod svg;
pub mod table;

pub use json::RunStatus;

/// Schema version written in every result file (tcpx-schema's, which tcpx-analyze admits by).
pub use tcpx_schema::SCHEMA_VERSION;

/// The default result directory: `results/<YYYYmmddTHHMMSSZ>-<pattern>` (UTC, relative to
/// the working directory). Second precision: two runs of one pattern started within the
/// same second collide, and [`claim`] (or, once the first has written, [`prepare_out_dir`])
/// then refuses the second instead of mixing.
pub fn default_out_dir(pattern: &str) -> PathBuf {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let stamp = now.format(&fmt).unwrap_or_else(|_| now.unix_timestamp().to_string());
    Path::new("results").join(format!("{stamp}-{pattern}"))
}

/// Creates `dir` (and its parents) for a new run, refusing one that exists and holds anything
/// but this job's claim ([`claim::CLAIM_FILE`], made first), so that results of two runs are
/// never mixed. [`probe_out_dir`] calls it before any data moves; the writers below expect the
/// directory it made.
pub fn prepare_out_dir(dir: &Path) -> io::Result<()> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            if entries.flatten().any(|e| e.file_name() != claim::CLAIM_FILE) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "result directory {} exists and is not empty: choose another --out",
                        dir.display()
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot create result directory {}: {e}; choose another --out",
                    dir.display()
                ),
            )
        }),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "cannot use result directory {}: {e}; choose another --out",
                dir.display()
            ),
        )),
    }
}

/// Writes a complete result directory into `dir` (made by [`prepare_out_dir`], perhaps holding
/// the run's own partial files): the CSV files and the pictures, then `summary.json` last,
/// stamped with the current time as `end_time`. Every file goes to a temporary sibling renamed
/// into place, so none is ever seen half-written. A picture that cannot be drawn is a
/// warning on stderr (naming the file), never a lost result; only `summary.json` says complete.
pub fn write_results(
    dir: &Path,
    info: &RunInfo,
    results: &[SizeResult],
    sizes_planned: usize,
    status: &RunStatus,
) -> io::Result<()> {
    csv::write_all(dir, info, results)?;
    if let Err(e) = svg::write_plots(dir, info, results) {
        eprintln!("# warning: plot not written: {e}");
    }
    // On disk before the summary that says they are complete.
    sync_files(dir)?;
    json::write_summary(dir, info, results, sizes_planned, status, &crate::report::now_rfc3339())?;
    sync_files(dir)
}

/// fsync of every file in `dir` and of `dir` itself (its renames). Per-size writes skip this:
/// the page cache keeps them through any end of the process, and a signal leaves about a second.
fn sync_files(dir: &Path) -> io::Result<()> {
    tcpx_files::sync_dir_files(dir)
}

/// The result directory after one more size: every CSV row so far and `summary.json` with
/// `complete: false` (`status` says why: `running`, or how the run ended early). No pictures,
/// no fsync (see [`sync_files`]).
pub fn write_partial(
    dir: &Path,
    info: &RunInfo,
    results: &[SizeResult],
    sizes_planned: usize,
    status: &RunStatus,
) -> io::Result<()> {
    csv::write_all(dir, info, results)?;
    json::write_summary(dir, info, results, sizes_planned, status, &crate::report::now_rfc3339())
}

/// Every file a run writes in its result directory (the claim and the probe included).
pub const DIR_FILES: [&str; 10] = [
    csv::RESULTS_CSV,
    csv::SAMPLES_CSV,
    csv::RANK_SAMPLES_CSV,
    csv::PAIRS_CSV,
    csv::NCCL_SAMPLES_CSV,
    json::SUMMARY_JSON,
    svg::BANDWIDTH_SVG,
    svg::LINKS_SVG,
    claim::CLAIM_FILE,
    PROBE_FILE,
];

/// Claims the result directory's files as this run's outputs ([`tcpx_files::claim_output`]), so
/// that no other output of the run (`-J`, `--drain-list`, ...) is given one of their paths.
pub fn claim_dir_files(dir: &Path) -> io::Result<()> {
    for name in DIR_FILES {
        tcpx_files::claim_output(&dir.join(name), &format!("the result directory's {name}"))?;
    }
    Ok(())
}

/// Name of the file [`probe_out_dir`] writes and removes.
const PROBE_FILE: &str = ".tcpx-perf-probe";

/// Proves `dir` takes files before any data moves: claims it for this job ([`claim::claim`]: a
/// no-op where the run claimed it already), creates it (see [`prepare_out_dir`]), writes, syncs
/// and removes a probe file. Every error names the path and the flag that fixes it.
pub fn probe_out_dir(dir: &Path) -> io::Result<()> {
    claim::claim(dir)?;
    prepare_out_dir(dir)?;
    let probe = dir.join(PROBE_FILE);
    let written = tcpx_files::create_new(&probe).and_then(|mut f| {
        let r = io::Write::write_all(&mut f, b"tcpx-perf checks that the result directory takes files\n")
            .and_then(|()| f.sync_all());
        // Removed only once this job made it: a name it could not create is not its own.
        let removed = fs::remove_file(&probe);
        r.and(tcpx_files::close(f)).and(removed)
    });
    written.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot write to result directory {}: {e}; choose another --out",
                dir.display()
            ),
        )
    })
}

/// Writes `path` whole or not at all, never through a link ([`tcpx_files::write_whole`]); the
/// page cache suffices here, [`write_results`] syncs the finished directory. An error names `path`.
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut io::BufWriter<fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    tcpx_files::write_whole(path, tcpx_files::Durability::Cached, write)
}

/// Mean of `busbw_gbps` over the rows, as nccl-tests' "Avg bus bandwidth"; `None` without
/// rows.
pub fn avg_busbw(results: &[SizeResult]) -> Option<f64> {
    if results.is_empty() {
        return None;
    }
    Some(results.iter().map(|r| r.busbw_gbps).sum::<f64>() / results.len() as f64)
}

/// Wrong bytes over all checked rows; `None` when no row was checked (`-c 0`).
pub fn wrong_total(results: &[SizeResult]) -> Option<u64> {
    results
        .iter()
        .filter_map(|r| r.wrong)
        .fold(None, |acc, w| Some(acc.unwrap_or(0) + w))
}

/// The run's wrong bytes: every checked row's and the probe's; `None` when nothing was
/// checked (`-c 0`).
pub fn run_wrong(info: &RunInfo, results: &[SizeResult]) -> Option<u64> {
    let probe = info.probe.as_ref().and_then(|p| p.wrong);
    match (wrong_total(results), probe) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! A small, fully populated run shared by the exporter tests.
    use crate::report::{HostInfo, PairResult, PluginInfo, RunInfo, RunSettings, SizeResult};
    use crate::stats::summarize;

    pub fn info() -> RunInfo {
        RunInfo {
            tool_version: "0.1.0".into(),
            git_commit: Some("abc1234".into()),
            command: vec!["tcpx-perf".into(), "-b".into(), "256".into()],
            start_time: "2026-11-21T05:00:00Z".into(),
            settings: RunSettings {
                pattern: "sendrecv".into(),
                scope: "inter-node".into(),
                dir: "bi".into(),
                mem: "host".into(),
                mem_path: "host".into(),
                ranks: 2,
                endpoints: 2,
                nodes: 2,
                gpus_per_rank: 1,
                iters: 3,
                warmup: 1,
                check: true,
                time_reduction: "avg".into(),
                chunk: 524288,
                channels: 1,
                window: 8,
                connect: "all".into(),
                timing: "per-iteration".into(),
            },
            hosts: vec![
                HostInfo {
                    rank: 0,
                    hostname: "a".into(),
                    node: 0,
                    gpus: vec![0],
                },
                HostInfo {
                    rank: 1,
                    hostname: "b, \"quoted\"".into(),
                    node: 1,
                    gpus: vec![0],
                },
            ],
            plugin: PluginInfo {
                path: "/opt/libnccl-net-tcpx-emu.so".into(),
                sha256: "00".repeat(32),
                name: "tcpx-emu".into(),
                abi: 8,
                ptr_support: "host".into(),
                device_type: "host".into(),
                devices: 1,
            },
            mpi_library: "Open MPI v4.1.6".into(),
            env: vec![("NCCL_DEBUG".into(), "WARN".into())],
            config: serde_json::json!({"minbytes": 256}),
            notes: vec!["a note".into()],
            placement: crate::report::PlacementReport::default(),
            force: false,
            cpu: Some(crate::report::CpuCost::from_ranks(
                &[2.0, 1.0, 4.0, 2.0, 3.0, 4.0],
                10_000_000_000,
            )),
            nccl: None,
            bandwidth_gate: None,
            slow_nics: Vec::new(),
            node_verdicts: Vec::new(),
            probe: None,
        }
    }

    pub fn size(size_bytes: u64, time_us: f64, wrong: Option<u64>) -> SizeResult {
        let samples = vec![time_us * 0.9, time_us, time_us * 1.1];
        let algbw = size_bytes as f64 / time_us / 1e3;
        SizeResult {
            size_bytes,
            requested_bytes: size_bytes,
            count: size_bytes / 4,
            iters: samples.len(),
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: algbw,
            wrong,
            stats: summarize(&samples),
            bytes_planned: 2 * size_bytes,
            bytes: crate::report::ByteCheck {
                measured: None,
                claimed: None,
                sources: vec![crate::delivery::SOURCE_WIRE],
                wire_rx_bytes: Some(2 * size_bytes + 100),
                wire_payload_bytes: 2 * size_bytes,
                wire: vec![crate::report::WireBytes {
                    host: "a".into(),
                    iface: "lo".into(),
                    rx_bytes: 6 * size_bytes + 300,
                    tx_bytes: 6 * size_bytes + 300,
                    devmem_pkts: None,
                }],
            },
            samples_us: samples,
            busbw_factor: 1.0,
            netbw_gbps: algbw,
            peers_in_flight: (1, 1),
            // Two ranks: 0.25 + 0.5 s user, 0.25 + 0.5 s system over 1 s each; 3 GB moved.
            cpu: crate::report::CpuCost::from_ranks(&[0.25, 0.25, 1.0, 0.5, 0.5, 1.0], 3_000_000_000),
            rank_samples_us: vec![
                time_us * 0.9,
                time_us,
                time_us * 1.1,
                time_us * 0.8,
                time_us,
                time_us * 1.2,
            ],
            pairs: vec![
                PairResult {
                    src_rank: Some(0),
                    src_gpu: Some(0),
                    src_host: "a".into(),
                    dst_rank: Some(1),
                    dst_gpu: Some(0),
                    dst_host: "b, \"quoted\"".into(),
                    rail: None,
                    endpoint_pairs: 1,
                    bytes: size_bytes,
                    time_us,
                    gbps: algbw,
                    link_gbps: None,
                    above_link: false,
                    impossible: false,
                },
                PairResult {
                    src_rank: Some(1),
                    src_gpu: Some(0),
                    src_host: "b, \"quoted\"".into(),
                    dst_rank: Some(0),
                    dst_gpu: Some(0),
                    dst_host: "a".into(),
                    rail: None,
                    endpoint_pairs: 1,
                    bytes: size_bytes,
                    time_us,
                    gbps: algbw,
                    link_gbps: None,
                    above_link: false,
                    impossible: false,
                },
            ],
            tcp: crate::tcp_stats::TcpActivity::from_readings([
                (
                    1,
                    "a".to_string(),
                    crate::tcp_stats::TcpCounters {
                        retrans_segs: 12,
                        timeouts: 0,
                    },
                ),
                (
                    2,
                    "b".to_string(),
                    crate::tcp_stats::TcpCounters {
                        retrans_segs: 30,
                        timeouts: 1,
                    },
                ),
            ]),
            nccl: None,
        }
    }

    pub fn results() -> Vec<SizeResult> {
        vec![size(256, 34.24, Some(0)), size(1 << 20, 100.0, Some(3))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_shape() {
        let d = default_out_dir("ring");
        assert_eq!(d.parent(), Some(Path::new("results")));
        let name = d.file_name().and_then(|n| n.to_str()).expect("name");
        // YYYYmmddTHHMMSSZ-ring
        assert_eq!(name.len(), 16 + 1 + 4, "{name}");
        assert!(name.ends_with("Z-ring") && name.as_bytes()[8] == b'T');
    }

    #[test]
    fn out_dir_must_be_new_or_empty() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("x/y");
        prepare_out_dir(&dir).expect("create");
        prepare_out_dir(&dir).expect("empty is fine");
        fs::write(dir.join("f"), "").expect("write");
        let err = prepare_out_dir(&dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("--out"));
        assert!(prepare_out_dir(&dir).is_err());
    }

    #[test]
    fn write_results_writes_every_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run");
        let info = fixtures::info();
        prepare_out_dir(&dir).expect("create");
        write_results(&dir, &info, &fixtures::results(), 2, &RunStatus::WrongData).expect("write");
        let mut names: Vec<String> = fs::read_dir(&dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "bandwidth.svg",
                "pairs.csv",
                "rank_samples.csv",
                "results.csv",
                "samples.csv",
                "summary.json"
            ]
        );
    }

    #[test]
    fn aggregates() {
        let r = fixtures::results();
        assert_eq!(wrong_total(&r), Some(3));
        assert_eq!(wrong_total(&[fixtures::size(8, 1.0, None)]), None);
        assert_eq!(wrong_total(&[]), None);
        let avg = avg_busbw(&r).expect("avg");
        assert!((avg - f64::midpoint(r[0].busbw_gbps, r[1].busbw_gbps)).abs() < 1e-12);
        assert_eq!(avg_busbw(&[]), None);
    }
}
