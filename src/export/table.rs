//! The stdout table, in nccl-tests' layout so that people and scripts that read
//! nccl-tests output can read ours: the same `#` header conventions, the
//! `# Collective test starting/concluded` lines, the same first nine columns
//! (`size count type redop root time algbw busbw #wrong`, so `awk '{print $8}'` is busbw) with
//! the same widths and float fitting as nccl-tests 2.19, then our per-iteration statistics where
//! nccl-tests `-I 1` prints its own (`t_min t_max t_p99 cv%` at `i_min i_max i_p99 i_cv%`), then
//! `t_med`. tcpx-perf makes one measurement per size: it fills nccl-tests' out-of-place block;
//! there is no in-place block (point-to-point traffic has no in-place variant).

use std::fmt::Write as _;

use crate::placement::dry_run::{Row, NO_GPU};
use crate::report::{BandwidthGate, CpuCost, FindingLevel, HostInfo, RunInfo, SizeResult};
use tcpx_units::format_size;

use super::{avg_busbw, wrong_total};

/// The two column header lines (names, then units).
const COLUMNS: [&str; 2] = [
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong    t_min    t_max    t_p99      cv%    t_med",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)",
];

/// The nccl-tests binary whose traffic a pattern mirrors (its `# Collective test` name and the
/// `-J` file's meaning).
pub fn nccl_tests_binary(pattern: &str) -> &'static str {
    match pattern {
        "ring" => "all_reduce_perf",
        "fullmesh" => "alltoall_perf",
        _ => "sendrecv_perf",
    }
}

/// The `redop` cell as nccl-tests prints it for that binary: `none` for alltoall (no
/// reduction), `sum` (the default `-o`) for sendrecv and all-reduce.
pub fn redop(pattern: &str) -> &'static str {
    if pattern == "fullmesh" {
        "none"
    } else {
        "sum"
    }
}

/// The `root` cell: `-1` (no root) for every pattern, as nccl-tests' `"%6i"` of -1.
pub const ROOT: &str = "    -1";

/// The line that opens a run's output (after the version line), as nccl-tests; the name is the
/// pattern, which tcpx-analyze reads as the run's collective.
pub fn starting(pattern: &str) -> String {
    format!("# Collective test starting: {pattern}\n")
}

/// The line that ends a run's table, as nccl-tests (`#`, the line, `#`).
pub fn concluded(pattern: &str) -> String {
    format!("# Collective test concluded: {pattern}\n#\n")
}

/// Rank `h`'s GPUs as the header prints them: `GPUs 0,1`, with `-` for an endpoint whose GPU
/// placement could not find (no GPU at that index, or no CUDA), and `no GPU` where it found
/// none: an endpoint's index alone would read as "GPU 0" on a machine without GPUs. Without
/// placement rows for the rank (none were gathered), the indices as the topology numbers them.
fn gpus_of(h: &HostInfo, rows: &[Row]) -> String {
    let placed: Vec<&Row> = rows.iter().filter(|r| r.rank == h.rank).collect();
    if placed.is_empty() {
        let gpus: Vec<String> = h.gpus.iter().map(usize::to_string).collect();
        return format!("GPUs {}", gpus.join(","));
    }
    if placed.iter().all(|r| r.gpu_pci == NO_GPU) {
        return "no GPU".into();
    }
    let gpus: Vec<String> = placed
        .iter()
        .map(|r| {
            if r.gpu_pci == NO_GPU {
                NO_GPU.to_string()
            } else {
                r.gpu.to_string()
            }
        })
        .collect();
    format!("GPUs {}", gpus.join(","))
}

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
    s.push_str(&starting(&info.settings.pattern));
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
        let _ = writeln!(
            s,
            "#  Rank {:2} on {:>10} node {:2} {}",
            h.rank,
            h.hostname,
            h.node,
            gpus_of(h, &info.placement.rows)
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
    if info.settings.connect == "rounds" {
        s.push_str("# connect: rounds (a size runs round by round, each --max-peers round on its own comms, connected before its warm-up)\n");
    }
    s.push_str(&iterations_lines(&info.settings));
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
        if let Some(note) = &n.baseline_note {
            let _ = writeln!(s, "# NCCL baseline: {note}");
        }
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

/// The header's account of the iterations: their counts, the check, `-a`, the timing mode,
/// and what t_p99 is when there are too few of them for a 99th percentile.
fn iterations_lines(settings: &crate::report::RunSettings) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# iters: {} warmup: {} check: {} -a: {} timing: {}",
        settings.iters,
        settings.warmup,
        if settings.check { "on" } else { "off" },
        settings.time_reduction,
        match settings.timing.as_str() {
            "back-to-back" =>
                "back-to-back (as nccl-tests: one start, time = total / iterations; -c checks the last iteration)",
            _ => "per-iteration (each after a barrier, timed alone)",
        }
    );
    if settings.iters < crate::stats::P99_SAMPLES {
        // The nearest rank of fewer than 100 samples is the largest: said, not left to be read
        // as a tail figure.
        let _ = writeln!(
            s,
            "# note: t_p99 is the largest of {} timed iterations (a 99th percentile needs at least {}: -n {})",
            settings.iters,
            crate::stats::P99_SAMPLES,
            crate::stats::P99_SAMPLES
        );
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

/// One row per size, without a trailing newline, byte for byte nccl-tests 2.19's layout for
/// the columns it shares: `"%12li  %12li  %8s  %6s  %6s"` (size, count, type, redop, root), then
/// the out-of-place block `"  %7s  %6s  %6s  %6g"` (time, algbw, busbw, #wrong; `"    N/A"` when
/// unchecked), then `"  %7s"` for each of t_min, t_max, t_p99, cv% (where nccl-tests `-I 1`
/// prints i_min, i_max, i_p99, i_cv%) and t_med; floats are fitted to their width as
/// nccl-tests' `getFloatStr`. A `#wrong` above 999999 is printed as an integer (wider) rather
/// than `%g`'s rounded exponent.
pub fn row(r: &SizeResult, pattern: &str) -> String {
    let wrong = r.wrong.map_or_else(|| "    N/A".to_string(), |w| format!("  {w:>6}"));
    let nccl = r.nccl.as_ref().map_or_else(String::new, |n| {
        nccl_cells([
            float_str(n.time_us, 7),
            float_str(n.busbw_gbps, 7),
            float_str(n.batch_busbw_gbps, 8),
            float_str(n.ratio, 5),
        ])
    });
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {ROOT}  {:>7}  {:>6}  {:>6}{wrong}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}{nccl}",
        r.size_bytes,
        r.count,
        "float",
        redop(pattern),
        float_str(r.time_us, 7),
        float_str(r.algbw_gbps, 6),
        float_str(r.busbw_gbps, 6),
        float_str(r.stats.min, 7),
        float_str(r.stats.max, 7),
        float_str(r.stats.p99, 7),
        float_str(r.stats.cv_pct, 7),
        float_str(r.stats.median, 7),
    )
}

/// The footer as nccl-tests: wrong bytes with OK/FAILED, the mean busbw over the rows (with
/// `OK`/`FAILED` against `NCCL_TESTS_MIN_BW` when it is set: [`BandwidthGate`]), then a closing
/// `#` line. A run with a size whose bytes nothing checked (`-c 0`) says `N/A (not checked)`,
/// never `0 OK`.
/// `probe_wrong`: the node verdicts' probe's wrong bytes, counted with the rows'.
pub fn footer(results: &[SizeResult], gate: Option<&BandwidthGate>, probe_wrong: Option<u64>) -> String {
    let avg = avg_busbw(results).map_or_else(|| "N/A".to_string(), c_g);
    let verdict = gate.map_or("", |g| if g.passed { "OK" } else { "FAILED" });
    format!(
        "# {:<20} : {}\n# {:<20} : {} {verdict}\n#\n",
        "Out of bounds values",
        out_of_bounds(results, probe_wrong),
        "Avg bus bandwidth",
        avg
    )
}

/// The footer's `Out of bounds values`: `N FAILED`, `N/A (not checked)` or `0 OK`.
fn out_of_bounds(results: &[SizeResult], probe_wrong: Option<u64>) -> String {
    let wrong = match (wrong_total(results), probe_wrong) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    match wrong {
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

    /// nccl-tests 2.19.6's header and first row (sendrecv_perf -I 1, tcpx-analyze's fixture).
    const NCCL: &str = include_str!("../../analysis/tests/fixtures/nccl-tests/nccl_sendrecv_socket_np4.txt");

    fn nccl_line(starts: &str) -> &'static str {
        NCCL.lines().find(|l| l.starts_with(starts)).expect("fixture line")
    }

    #[test]
    fn row_matches_nccl_tests_layout() {
        // nccl-tests' first row: 1048576 bytes, 400.77 us, 2.62 GB/s, 0 wrong, then -I's
        // i_min i_max i_p99 i_cv% = 395.10 693.25 693.25 15.53.
        let theirs = nccl_line("     1048576");
        let mut r = fixtures::size(1048576, 400.77, Some(0));
        r.algbw_gbps = 2.616389;
        r.busbw_gbps = 2.616389;
        r.stats.min = 395.10;
        r.stats.max = 693.25;
        r.stats.p99 = 693.25;
        r.stats.cv_pct = 15.53;
        r.stats.median = 450.30;
        let ours = row(&r, "sendrecv");
        // Byte for byte nccl-tests' out-of-place block with -I's statistics, then t_med.
        let block = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + (2 + 7 + 2 + 6 + 2 + 6 + 2 + 6) + 4 * (2 + 7);
        assert_eq!(&ours[..block], &theirs[..block]);
        assert_eq!(&ours[block..], "   450.30");
        // awk '{print $8}' is busbw; $4 $5 redop and root as nccl-tests prints them.
        let fields: Vec<&str> = ours.split_whitespace().collect();
        assert_eq!(fields[7], "2.62");
        assert_eq!(&fields[3..5], ["sum", "-1"]);
        let a2a = row(&r, "fullmesh");
        assert_eq!(&a2a.split_whitespace().collect::<Vec<_>>()[3..5], ["none", "-1"]);
        // Unchecked: "    N/A" as nccl-tests' in-place block, and the columns after still align.
        let unchecked = row(&fixtures::size(1048576, 400.77, None), "ring");
        assert_eq!(unchecked.len(), ours.len() - 1);
        assert!(unchecked.contains("    N/A  "), "{unchecked}");
    }

    #[test]
    fn header_columns_line_up_with_rows() {
        // Our column names sit where nccl-tests -I 1 puts its out-of-place ones.
        let theirs = nccl_line("#       size");
        let theirs_units = nccl_line("#        (B)");
        let shared = COLUMNS[0].len() - (2 + 7);
        assert_eq!(
            &COLUMNS[0][..shared].replace("t_", "i_").replace("  cv%", "i_cv%"),
            &theirs[..shared]
        );
        assert_eq!(&COLUMNS[1][..shared], &theirs_units[..shared]);
        // Every column name ends where its values end in a row.
        let r = row(&fixtures::size(1 << 20, 100.0, Some(0)), "sendrecv");
        assert_eq!(COLUMNS[0].len(), r.len());
        assert_eq!(COLUMNS[1].len(), r.len());
        let ends = |s: &str| -> Vec<usize> {
            let b = s.as_bytes();
            (0..b.len())
                .filter(|&i| b[i] != b' ' && (i + 1 == b.len() || b[i + 1] == b' '))
                .collect()
        };
        let mut names = ends(COLUMNS[0]);
        assert_eq!(names.remove(0), 0); // the leading '#'
        assert_eq!(names, ends(&r));
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
        let f = footer(&r, None, None);
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(lines[0], "# Out of bounds values : 3 FAILED");
        let avg = avg_busbw(&r).expect("avg");
        // nccl-tests' "%g %s" leaves a space before the empty verdict.
        assert_eq!(lines[1], format!("# Avg bus bandwidth    : {} ", c_g(avg)));
        assert_eq!(lines[2], "#");
        let ok = footer(&[fixtures::size(8, 1.0, Some(0))], None, None);
        assert!(ok.starts_with("# Out of bounds values : 0 OK\n"), "{ok}");
        // -c 0: nothing compared the bytes, and the wire counters are only a lower bound.
        let unchecked = footer(&[fixtures::size(8, 1.0, None)], None, None);
        assert!(
            unchecked.starts_with("# Out of bounds values : N/A (not checked)\n"),
            "{unchecked}"
        );
        assert!(footer(&[], None, None).contains("Avg bus bandwidth    : N/A"));
        // NCCL_TESTS_MIN_BW: OK at 90% of the minimum, FAILED below, as nccl-tests.
        let passed = BandwidthGate::judge(avg / 0.9, Some(avg));
        assert!(footer(&r, Some(&passed), None).contains(&format!("bandwidth    : {} OK\n", c_g(avg))));
        let failed = BandwidthGate::judge(avg / 0.9 * 1.001, Some(avg));
        assert!(footer(&r, Some(&failed), None).contains(&format!("bandwidth    : {} FAILED\n", c_g(avg))));
        assert!(!BandwidthGate::judge(0.0, None).passed);
        // The fixture's footer lines, byte for byte (same widths, trailing space included).
        let theirs: Vec<&str> = NCCL
            .lines()
            .skip_while(|l| !l.starts_with("# Out of"))
            .take(5)
            .collect();
        let mut one = fixtures::size(8, 1.0, Some(0));
        one.busbw_gbps = 2.737284;
        let ours = format!("{}{}", footer(&[one], None, None), concluded("sendrecv_perf"));
        assert_eq!(ours.lines().collect::<Vec<_>>(), theirs);
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

    /// Placement's row for endpoint `endpoint` of rank 0: GPU `gpu` at `pci` (`-`: not found).
    fn placed(endpoint: usize, gpu: usize, pci: &str) -> Row {
        Row {
            endpoint,
            rank: 0,
            host: "a".into(),
            gpu,
            gpu_pci: pci.into(),
            gpu_numa: "-".into(),
            nic: "lo".into(),
            nic_dev: 0,
            nic_pci: "-".into(),
            nic_numa: "-".into(),
            speed_gbps: 10.0,
            shapers: Vec::new(),
            mtu: None,
            distance: "unknown".into(),
            choice: crate::placement::Choice::Arithmetic,
            cpus: "0-1".into(),
            cpus_why: String::new(),
        }
    }

    /// On a machine without GPUs placement finds none: the header says so instead of printing
    /// the endpoint's index where a GPU's would be ("GPUs 0").
    #[test]
    fn header_says_no_gpu_where_placement_found_none() {
        let mut info = fixtures::info();
        let line = |info: &RunInfo| {
            let h = header(info);
            h.lines()
                .find(|l| l.starts_with("#  Rank  0"))
                .expect("rank 0's line")
                .to_string()
        };
        info.placement.rows = vec![placed(0, 0, NO_GPU)];
        assert_eq!(line(&info), "#  Rank  0 on          a node  0 no GPU");
        info.placement.rows = vec![placed(0, 0, "0000:04:00.0")];
        assert_eq!(line(&info), "#  Rank  0 on          a node  0 GPUs 0");
        // Two endpoints on a one-GPU machine: the second has no GPU of its own.
        info.placement.rows = vec![placed(0, 0, "0000:04:00.0"), placed(1, 1, NO_GPU)];
        assert_eq!(line(&info), "#  Rank  0 on          a node  0 GPUs 0,-");
    }

    #[test]
    fn header_describes_the_run() {
        let h = header(&fixtures::info());
        assert!(h.lines().all(|l| l.starts_with('#')));
        assert!(h.starts_with("# tcpx-perf 0.1.0 (git abc1234)\n# Collective test starting: sendrecv\n"));
        assert!(h.contains("ABI v8"));
        assert!(h.contains("# pattern: sendrecv scope: inter-node dir: bi"));
        assert!(h.contains("#  Rank  0 on          a node  0 GPUs 0"));
        assert!(h.contains("# chunk: 512K channels: 1 window: 8\n"));
        let mut two = fixtures::info();
        two.settings.channels = 2;
        assert!(header(&two)
            .contains("# chunk: 512K channels: 2 window: 8 (channels: 2, as NCCL 2.28 chose for tcpx-emu)\n"));
        assert!(h.contains("# iters: 3 warmup: 1 check: on -a: avg timing: per-iteration"));
        // 3 samples: their p99 is their largest, and the header says so; 100 have a p99.
        assert!(h.contains(
            "# note: t_p99 is the largest of 3 timed iterations (a 99th percentile needs at least 100: -n 100)\n"
        ));
        let mut many = fixtures::info();
        many.settings.iters = 100;
        assert!(!header(&many).contains("t_p99 is the largest"));
        assert!(h.ends_with(&format!("{}\n{}\n", COLUMNS[0], COLUMNS[1])));
    }
}
