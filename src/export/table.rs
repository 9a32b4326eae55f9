//! The stdout table, in nccl-tests' layout so that people and scripts that read
//! nccl-tests output can read ours: the same `#` header conventions, the same first columns
//! (`size count type`, then `time algbw busbw #wrong`) with the same widths and the same
//! float fitting, then our per-iteration statistics columns. nccl-tests' `redop`/`root`
//! columns and the in-place block are dropped (they mean nothing for point-to-point).

use std::fmt::Write as _;

use crate::report::{CpuCost, FindingLevel, RunInfo, SizeResult};
use tcpx_units::format_size;

use super::{avg_busbw, wrong_total};

/// The two column header lines (names, then units).
const COLUMNS: [&str; 2] = [
    "#       size         count      type     time   algbw   busbw  #wrong    t_min    t_med    t_p99    cv%",
    "#        (B)    (elements)               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)    (%)",
];

/// The run description printed before the table: every line starts with `# `
/// (nccl-tests' convention, so parsers skip it), then the two column header lines.
pub fn header(info: &RunInfo) -> String {
    let mut s = String::new();
    let commit = info
        .git_commit
        .as_deref()
        .map(|c| format!(" (git {c})"))
        .unwrap_or_default();
    // `writeln!` into a String cannot fail.
    let _ = writeln!(s, "# tcpx-perf {}{commit}", info.tool_version);
    let p = &info.plugin;
    let _ = writeln!(
        s,
        "# plugin: {} name {} ABI v{} ptrSupport {} device type {} devices {}",
        p.path, p.name, p.abi, p.ptr_support, p.device_type, p.devices
    );
    if !p.sha256.is_empty() {
        let _ = writeln!(s, "# plugin sha256: {}", p.sha256);
    }
    if let Some(mpi) = info.mpi_library.lines().next().filter(|l| !l.trim().is_empty()) {
        let _ = writeln!(s, "# MPI: {}", mpi.trim());
    }
    let _ = writeln!(
        s,
        "# pattern: {} scope: {} dir: {}",
        info.settings.pattern, info.settings.scope, info.settings.dir
    );
    let _ = writeln!(s, "# memory: {} ({})", info.settings.mem, info.settings.mem_path);
    let _ = writeln!(
        s,
        "# ranks: {} endpoints: {} nodes: {} endpoints per rank: {}",
        info.settings.ranks, info.settings.endpoints, info.settings.nodes, info.settings.gpus_per_rank
    );
    for h in &info.hosts {
        let gpus: Vec<String> = h.gpus.iter().map(usize::to_string).collect();
        let _ = writeln!(
            s,
            "#  Rank {:2} on {:>10} node {:2} GPUs {}",
            h.rank,
            h.hostname,
            h.node,
            gpus.join(",")
        );
    }
    let _ = writeln!(
        s,
        "# chunk: {} channels: {} window: {}{}",
        format_size(info.settings.chunk),
        info.settings.channels,
        info.settings.window,
        if info.settings.channels == crate::plan::DEFAULT_CHANNELS {
            format!(
                " (channels: {}, as NCCL 2.28 chose for tcpx-emu)",
                info.settings.channels
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "# iters: {} warmup: {} check: {} -a: {}",
        info.settings.iters,
        info.settings.warmup,
        if info.settings.check { "on" } else { "off" },
        info.settings.time_reduction
    );
    for note in &info.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    if let Some(n) = &info.nccl {
        let env: Vec<String> = n.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "# NCCL baseline: NCCL {} from {}", n.version, n.library);
        let _ = writeln!(s, "# NCCL settings: {}", env.join(" "));
        if !n.env_replaced.is_empty() {
            let _ = writeln!(s, "# NCCL settings replaced: {}", n.env_replaced.join(" "));
        }
        let _ = writeln!(
            s,
            "# NCCL columns: n_time, n_busbw with tcpx-perf's timing (barrier per iteration), nb_busbw with nccl-tests' (CUDA events around -n back to back), ratio = busbw / n_busbw"
        );
    }
    s.push_str(&info.placement.table());
    s.push_str(&info.placement.finding_lines(FindingLevel::Warning));
    s.push_str("#\n");
    for (i, line) in COLUMNS.iter().enumerate() {
        s.push_str(line);
        if info.nccl.is_some() {
            s.push_str(&nccl_cells(NCCL_COLUMNS[i].map(String::from)));
        }
        s.push('\n');
    }
    s
}

/// The `--baseline nccl` columns' names and units.
const NCCL_COLUMNS: [[&str; 4]; 2] = [
    ["n_time", "n_busbw", "nb_busbw", "ratio"],
    ["(us)", "(GB/s)", "(GB/s)", ""],
];

/// The NCCL cells of a row (or their headers), after tcpx-perf's columns.
fn nccl_cells([time, busbw, batch_busbw, ratio]: [String; 4]) -> String {
    format!("   {time:>7}  {busbw:>7}  {batch_busbw:>8}  {ratio:>5}")
}

/// One row per size, without a trailing newline, byte for byte nccl-tests' layout for the
/// columns it shares: `"%12li  %12li  %8s"` (size, count, type), then `"  %7s  %6s  %6s"`
/// (time, algbw, busbw) and `" %6g"` for `#wrong` (`"    N/A"` when unchecked), as in
/// nccl-tests' real output (peers.md section 1.7); floats are fitted to their width as
/// The CPU cost after the footer (every line a `#` comment, so nccl-tests parsers skip it): per
/// size the timed iterations' user and system seconds per rank, the busiest rank's, the cores a
/// rank kept busy and the CPU seconds per GB of network bytes; then the whole run's.
pub fn cpu_footer(results: &[SizeResult], run: Option<&CpuCost>) -> String {
    let mut s = String::new();
    let per_gb = |c: &CpuCost| c.cpu_s_per_gb.map_or_else(|| "N/A".to_string(), |v| format!("{v:.4}"));
    if !results.is_empty() {
        s.push_str("# CPU of the timed iterations (user + system s per rank, every thread: plugin helpers included; GB = 1e9 network bytes)\n");
        s.push_str("#        size    user_s     sys_s  max_rank_s  cores/rank  cpu_s/GB\n");
        for r in results {
            let c = &r.cpu;
            let _ = writeln!(
                s,
                "# {:>11}  {:>8.4}  {:>8.4}  {:>10.4}  {:>10.2}  {:>8}",
                r.size_bytes,
                c.user_s,
                c.sys_s,
                c.max_rank_s,
                c.cores_per_rank,
                per_gb(c)
            );
        }
    }
    if let Some(c) = run {
        let _ = writeln!(
            s,
            "# CPU of the whole run: {:.3} s user + {:.3} s system per rank (busiest rank {:.3} s) in {:.2} s, {:.2} cores per rank, {} CPU-s/GB (warm-up included)",
            c.user_s,
            c.sys_s,
            c.max_rank_s,
            c.wall_s,
            c.cores_per_rank,
            per_gb(c)
        );
    }
    s
}

/// nccl-tests' `getFloatStr`. Then our columns `"   %7s  %7s  %7s  %5s"` (t_min, t_med,
/// t_p99, cv%).
///
/// nccl-tests' `#wrong` values end one column left of their header (its header uses
/// `"  %6s"`, its rows `" %6g"`); we keep that quirk so nccl-tests parsers see identical
/// rows, and give t_min three leading spaces so our own columns line up with their headers.
/// A `#wrong` above 999999 is printed as an integer (wider) rather than `%g`'s exponent.
pub fn row(r: &SizeResult) -> String {
    let wrong = r.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string());
    let nccl = r.nccl.as_ref().map_or_else(String::new, |n| {
        nccl_cells([
            float_str(n.time_us, 7),
            float_str(n.busbw_gbps, 7),
            float_str(n.batch_busbw_gbps, 8),
            float_str(n.ratio, 5),
        ])
    });
    format!(
        "{:>12}  {:>12}  {:>8}  {:>7}  {:>6}  {:>6} {:>6}   {:>7}  {:>7}  {:>7}  {:>5}{nccl}",
        r.size_bytes,
        r.count,
        "float",
        float_str(r.time_us, 7),
        float_str(r.algbw_gbps, 6),
        float_str(r.busbw_gbps, 6),
        wrong,
        float_str(r.stats.min, 7),
        float_str(r.stats.median, 7),
        float_str(r.stats.p99, 7),
        float_str(r.stats.cv_pct, 5),
    )
}

/// The footer as nccl-tests: wrong bytes with OK/FAILED, the mean busbw over the rows,
/// then a closing `#` line. A run with a size whose bytes nothing checked (`-c 0`) says
/// `N/A (not checked)`, never `0 OK`.
pub fn footer(results: &[SizeResult]) -> String {
    let avg = avg_busbw(results).map_or_else(|| "N/A".to_string(), c_g);
    format!(
        "# {:<20} : {}\n# {:<20} : {}\n#\n",
        "Out of bounds values",
        out_of_bounds(results),
        "Avg bus bandwidth",
        avg
    )
}

/// The footer's `Out of bounds values`: `N FAILED`, `N/A (not checked)` or `0 OK`.
fn out_of_bounds(results: &[SizeResult]) -> String {
    match wrong_total(results) {
        Some(wrong) if wrong > 0 => format!("{wrong} FAILED"),
        _ if results.iter().any(|r| !r.verified()) => "N/A (not checked)".to_string(),
        wrong => format!("{} OK", wrong.unwrap_or(0)),
    }
}

/// nccl-tests' `getFloatStr`: the most decimals that fit `width` for the value's number of
/// integer digits (`%.2f`, then `%.1f`, then `%.0f`), else `%.1e`; right-aligned.
pub fn float_str(value: f64, width: usize) -> String {
    if !value.is_finite() {
        // C's printf renders these as nan/inf.
        let s = if value.is_nan() {
            "nan"
        } else if value > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        return format!("{s:>width$}");
    }
    // Integer digits of the value (0 below 1), as nccl-tests counts them.
    let mut power = 0usize;
    let mut val = 1.0f64;
    while value >= val && power <= width + 1 {
        power += 1;
        val *= 10.0;
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else {
        format!("{:>width$}", c_exp(value, 1))
    }
}

/// C's `%.{prec}e`: mantissa, `e`, sign, at least two exponent digits (`1.2e+08`).
fn c_exp(value: f64, prec: usize) -> String {
    let s = format!("{value:.prec$e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// C's `%g`: 6 significant digits, trailing zeros removed, exponent form when the decimal
/// exponent is below -4 or at least 6.
fn c_g(value: f64) -> String {
    if !value.is_finite() {
        return float_str(value, 0);
    }
    if value == 0.0 {
        return "0".into();
    }
    // The exponent after rounding to 6 significant digits.
    let sci = format!("{value:.5e}");
    let exp: i32 = sci.split_once('e').and_then(|(_, e)| e.parse().ok()).unwrap_or(0);
    if (-4..6).contains(&exp) {
        let decimals = (5 - exp).max(0) as usize;
        trim_zeros(&format!("{value:.decimals$}")).to_string()
    } else {
        let (mantissa, _) = sci.split_once('e').unwrap_or((&sci, ""));
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures;
    use super::*;
    use crate::stats::summarize;

    /// nccl-tests' rendered header and row from peers.md §1.7 (sendrecv, 2xA40).
    const NCCL_COLUMNS: &str = "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ";
    const NCCL_ROW: &str = "         256            64     float     sum      -1    34.24    0.01    0.01      0    33.65    0.01    0.01    N/A";

    #[test]
    fn row_matches_nccl_tests_layout() {
        let mut r = fixtures::size(256, 34.24, Some(0));
        r.algbw_gbps = 256.0 / 34.24 / 1e3;
        r.busbw_gbps = r.algbw_gbps;
        r.stats = summarize(&[30.0, 34.0, 40.5]);
        let ours = row(&r);
        // size, count, type: identical to nccl-tests' first 3 columns.
        let pre = 12 + 2 + 12 + 2 + 8;
        assert_eq!(&ours[..pre], &NCCL_ROW[..pre]);
        // nccl-tests then has "  %6s  %6s" (redop, root), which we drop; the out-of-place
        // block "  %7s  %6s  %6s %6g" follows identically.
        let block = 2 + 7 + 2 + 6 + 2 + 6 + 1 + 6;
        assert_eq!(&ours[pre..pre + block], &NCCL_ROW[pre + 16..pre + 16 + block]);
        assert_eq!(
            ours,
            format!("{}     30.00    34.00    40.50  12.42", &ours[..pre + block])
        );
    }

    #[test]
    fn header_columns_line_up_with_rows() {
        // Our column names sit where nccl-tests puts them, minus redop/root.
        let nccl_without_root: String = format!("{}{}", &NCCL_COLUMNS[..36], &NCCL_COLUMNS[52..85]);
        assert_eq!(&COLUMNS[0][..69], nccl_without_root.as_str());
        // Every column name ends where its values end in a row.
        let r = row(&fixtures::size(1 << 20, 100.0, None));
        assert_eq!(COLUMNS[0].len(), r.len());
        assert_eq!(COLUMNS[1].len(), r.len());
        let ends = |s: &str| -> Vec<usize> {
            let b = s.as_bytes();
            (0..b.len())
                .filter(|&i| b[i] != b' ' && (i + 1 == b.len() || b[i + 1] == b' '))
                .collect()
        };
        let e = ends(&r);
        let mut names = ends(COLUMNS[0]);
        assert_eq!(names.remove(0), 0); // the leading '#'
                                        // #wrong (the 7th column) ends one left of its name, as in nccl-tests.
        names[6] -= 1;
        assert_eq!(names, e);
        assert!(r.contains("    N/A"));
        // The unchecked row is exactly nccl-tests' "  %7s  %6s  %6s    N/A".
        let unchecked = &r[36..36 + 2 + 7 + 2 + 6 + 2 + 6 + 7];
        assert!(unchecked.ends_with("    N/A"), "{unchecked:?}");
    }

    #[test]
    fn float_fitting() {
        assert_eq!(float_str(34.24, 7), "  34.24");
        assert_eq!(float_str(0.0074766, 6), "  0.01");
        assert_eq!(float_str(1234.567, 7), "1234.57");
        assert_eq!(float_str(12345.67, 7), "12345.7");
        assert_eq!(float_str(123456.7, 7), " 123457");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(999.5, 6), "999.50");
        assert_eq!(float_str(9999.5, 6), "9999.5");
        assert_eq!(float_str(123456.0, 6), "123456");
        assert_eq!(float_str(100.0, 5), "100.0");
        assert_eq!(float_str(12.3456, 5), "12.35");
        assert_eq!(float_str(f64::NAN, 6), "   nan");
        assert_eq!(c_exp(1.5e-7, 1), "1.5e-07");
    }

    #[test]
    fn c_g_format() {
        assert_eq!(c_g(12.3456789), "12.3457");
        assert_eq!(c_g(0.5), "0.5");
        assert_eq!(c_g(100.0), "100");
        assert_eq!(c_g(123456.0), "123456");
        assert_eq!(c_g(1234567.0), "1.23457e+06");
        assert_eq!(c_g(0.0001), "0.0001");
        assert_eq!(c_g(0.00001234), "1.234e-05");
        assert_eq!(c_g(999999.5), "1e+06");
        assert_eq!(c_g(0.0), "0");
    }

    #[test]
    fn footer_lines() {
        let r = fixtures::results();
        let f = footer(&r);
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(lines[0], "# Out of bounds values : 3 FAILED");
        let avg = avg_busbw(&r).expect("avg");
        assert_eq!(lines[1], format!("# Avg bus bandwidth    : {}", c_g(avg)));
        assert_eq!(lines[2], "#");
        let ok = footer(&[fixtures::size(8, 1.0, Some(0))]);
        assert!(ok.starts_with("# Out of bounds values : 0 OK\n"), "{ok}");
        // -c 0: nothing compared the bytes, and the wire counters are only a lower bound.
        let unchecked = footer(&[fixtures::size(8, 1.0, None)]);
        assert!(
            unchecked.starts_with("# Out of bounds values : N/A (not checked)\n"),
            "{unchecked}"
        );
        assert!(footer(&[]).contains("Avg bus bandwidth    : N/A"));
    }

    #[test]
    fn cpu_footer_lines() {
        let r = fixtures::results();
        let info = fixtures::info();
        let f = cpu_footer(&r, info.cpu.as_ref());
        let lines: Vec<&str> = f.lines().collect();
        assert!(lines.iter().all(|l| l.starts_with('#')), "{f}");
        assert_eq!(lines.len(), 2 + r.len() + 1);
        // Per size: 0.375 s user, 0.375 s system per rank, busiest 1 s, 0.75 cores, 0.5 CPU-s/GB.
        assert_eq!(
            lines[2],
            "#         256    0.3750    0.3750      1.0000        0.75    0.5000"
        );
        assert_eq!(
            lines[4],
            "# CPU of the whole run: 2.000 s user + 2.000 s system per rank (busiest rank 5.000 s) in 4.00 s, 1.00 cores per rank, 0.8000 CPU-s/GB (warm-up included)"
        );
        assert_eq!(cpu_footer(&[], None), "");
    }

    #[test]
    fn header_describes_the_run() {
        let h = header(&fixtures::info());
        assert!(h.lines().all(|l| l.starts_with('#')));
        assert!(h.contains("# tcpx-perf 0.1.0 (git abc1234)"));
        assert!(h.contains("ABI v8"));
        assert!(h.contains("# pattern: sendrecv scope: inter-node dir: bi"));
        assert!(h.contains("#  Rank  0 on          a node  0 GPUs 0"));
        assert!(h.contains("# chunk: 512K channels: 1 window: 8\n"));
        let mut two = fixtures::info();
        two.settings.channels = 2;
        assert!(header(&two)
            .contains("# chunk: 512K channels: 2 window: 8 (channels: 2, as NCCL 2.28 chose for tcpx-emu)\n"));
        assert!(h.contains("# iters: 3 warmup: 1 check: on -a: avg"));
        assert!(h.ends_with(&format!("{}\n{}\n", COLUMNS[0], COLUMNS[1])));
    }
}
