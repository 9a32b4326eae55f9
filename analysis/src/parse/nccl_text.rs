//! nccl-tests / rccl-tests stdout tables (every layout since nccl-tests 2.0, see
//! [`super::columns`]) and tcpx-perf's own stdout table, as found in the wild: behind launcher
//! prefixes, in markdown code fences, with NCCL INFO/WARN lines and other noise anywhere,
//! several runs one after another in one file (one [`Run`] each).
//!
//! A run is complete when its table reaches the footer (`# Out of bounds values`,
//! `# Avg bus bandwidth`). A table that stops before it is refused: "run ended at row N: <the
//! error line>" when an error follows the last row (the run crashed), else as truncated
//! ([`ParseOptions::allow_truncated`] accepts the rows of a truncated one, labelled so).
//!
//! A table row has no per-iteration samples (the `-I` columns are min/max/p99/cv, not samples),
//! so each size is one observation (n = 1).

use super::columns::{is_header, Columns, RowError, RowValues};
use super::lines::logical_lines;
use super::{num, only_run, resolve_collective, ParseOptions, Placement};
use crate::error::ParseError;
use crate::model::{Format, Row, Run, Sample, Series};
use std::collections::BTreeMap;

/// What the lines before a table say about its run.
#[derive(Debug, Default)]
struct Meta {
    /// `# Collective test starting: X`.
    collective: Option<String>,
    /// The last `*_perf` / `*_perf_mpi` binary named on a command line.
    command: Option<String>,
    /// tcpx-perf's `# pattern: X scope: S dir: D` and `# memory: M`.
    tcpx_pattern: Option<String>,
    tcpx_variant: Vec<String>,
    /// tcpx-perf's `# ranks: R endpoints: E nodes: N` (job shape), as label pairs.
    tcpx_shape: Vec<(String, String)>,
    tool: Option<&'static str>,
    ranks: usize,
    /// A `...` line after `Rank` lines: the author cut the device list, so its length is not
    /// the rank count.
    ranks_cut: bool,
}

/// One table being read.
#[derive(Debug)]
struct Table {
    header_line: usize,
    cols: Columns,
    meta: Meta,
    rows: Vec<(usize, RowValues)>,
    /// A row whose fields do not fit the header: the run was cut there unless rows follow.
    bad: Option<(usize, String, String)>,
    /// The first error-looking line after the last row (a crash message).
    error_after: Option<(usize, String)>,
    /// The first other line after the last row.
    next_after: Option<(usize, String)>,
    wrong_total: Option<f64>,
    avg_busbw: Option<f64>,
    footer: bool,
    /// tcpx-perf's `# Results written to DIR` after the footer: the run's result directory.
    result_dir: Option<String>,
}

/// Words that mark a line as an error message (NCCL WARN, `Test NCCL failure`, MPI abort,
/// signals, timeouts).
fn is_error_line(t: &str) -> bool {
    let l = t.to_ascii_lowercase();
    [
        "error",
        "warn",
        "fail",
        "abort",
        "segmentation",
        "signal",
        "killed",
        "core dumped",
        "terminate",
        "exited",
        "timeout",
        "timed out",
        "exception",
        "out of memory",
    ]
    .iter()
    .any(|k| l.contains(k))
}

/// The basename of a `*_perf` or `*_perf_mpi` binary named on a command line.
fn perf_binary(tokens: &[&str]) -> Option<String> {
    tokens.iter().find_map(|t| {
        let base = t.rsplit('/').next().unwrap_or(t);
        (base.ends_with("_perf") || base.ends_with("_perf_mpi")).then(|| base.to_string())
    })
}

/// Parses a text that holds exactly one run.
pub fn parse(file: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    only_run(file, parse_all(file, text, opts)?)
}

/// Parses every run of a text (one per table).
pub fn parse_all(file: &str, text: &str, opts: &ParseOptions) -> Result<Vec<Run>, ParseError> {
    let mut done: Vec<Table> = Vec::new();
    let mut open: Option<Table> = None;
    let mut meta = Meta::default();
    for l in logical_lines(text) {
        let t = l.text;
        if t.is_empty() {
            continue;
        }
        let hashed = t.starts_with('#');
        let body = t.trim_start_matches('#').trim();
        let toks: Vec<&str> = body.split_whitespace().collect();

        if is_header(&toks) {
            let cols = Columns::from_header(file, l.no, &toks)?;
            if let Some(tab) = open.take() {
                if !tab.footer && tab.rows.is_empty() && tab.bad.is_none() {
                    // The header printed again before any row (two processes printing, or a
                    // pasted header): keep one.
                    meta = tab.meta;
                } else {
                    done.push(finish(file, tab, opts)?);
                }
            }
            open = Some(Table {
                header_line: l.no,
                cols,
                meta: std::mem::take(&mut meta),
                rows: Vec::new(),
                bad: None,
                error_after: None,
                next_after: None,
                wrong_total: None,
                avg_busbw: None,
                footer: false,
                result_dir: None,
            });
            continue;
        }

        // Table rows: two leading integers (size, count) inside an unfinished table.
        if let Some(tab) = open.as_mut().filter(|t| !t.footer) {
            let is_row = !hashed && toks.len() >= 2 && toks[..2].iter().all(|x| x.parse::<u64>().is_ok());
            if is_row {
                if let Some((ln, _, msg)) = tab.bad.take() {
                    return Err(ParseError::new(file, Some(ln), msg));
                }
                match tab.cols.row(file, l.no, &toks) {
                    Ok(r) => {
                        tab.rows.push((l.no, r));
                        tab.error_after = None;
                        tab.next_after = None;
                    }
                    Err(RowError::Value(e)) => return Err(e),
                    Err(RowError::Shape(m)) => tab.bad = Some((l.no, t.to_string(), m)),
                }
                continue;
            }
        }

        if let Some(v) = body.strip_prefix("Out of bounds values") {
            if let Some(tab) = open.as_mut().filter(|t| !t.footer) {
                if let Some((ln, _, msg)) = tab.bad.take() {
                    return Err(ParseError::new(file, Some(ln), msg));
                }
                let v = v.trim_start_matches([' ', ':']).split_whitespace().next().unwrap_or("");
                // `N/A (not checked)`: tcpx-perf with -c 0 (issue 21) checked nothing.
                if v != "N/A" {
                    tab.wrong_total = Some(num(file, l.no, "Out of bounds values", v)?);
                }
                tab.footer = true;
                continue;
            }
        }
        if let Some(v) = body.strip_prefix("Avg bus bandwidth") {
            if let Some(tab) = open.as_mut() {
                if let Some((ln, _, msg)) = tab.bad.take() {
                    return Err(ParseError::new(file, Some(ln), msg));
                }
                let v = v.trim_start_matches([' ', ':']).split_whitespace().next().unwrap_or("");
                tab.avg_busbw = v.parse::<f64>().ok();
                tab.footer = true;
                continue;
            }
        }

        if let (true, Some(d)) = (hashed, body.strip_prefix("Results written to ")) {
            if let Some(tab) = open.as_mut() {
                tab.result_dir = Some(d.trim().to_string());
                continue;
            }
        }
        // A new run starts: the open table ends here.
        let starts_run = body.starts_with("nThread ")
            || body.starts_with("Collective test starting:")
            || (hashed && body.starts_with("tcpx-perf "));
        if starts_run {
            if let Some(tab) = open.take() {
                done.push(finish(file, tab, opts)?);
            }
        }
        if let Some(tab) = open.as_mut().filter(|t| !t.footer) {
            if tab.error_after.is_none() && is_error_line(t) {
                tab.error_after = Some((l.no, t.to_string()));
            } else if tab.next_after.is_none() {
                tab.next_after = Some((l.no, t.to_string()));
            }
        }
        read_meta(&mut meta, hashed, body, &toks);
    }
    if let Some(tab) = open.take() {
        done.push(finish(file, tab, opts)?);
    }
    if done.is_empty() {
        return Err(ParseError::new(
            file,
            None,
            "no nccl-tests result table found (expected a '#  size  count  type ...' header followed by rows)",
        ));
    }
    let single = done.len() == 1;
    done.into_iter().map(|t| build(file, t, opts, single)).collect()
}

/// Collects what a preamble line says about the next run.
fn read_meta(meta: &mut Meta, hashed: bool, body: &str, toks: &[&str]) {
    if let Some(c) = body.strip_prefix("Collective test starting:") {
        meta.collective = Some(c.trim().to_string());
    } else if hashed && body.starts_with("tcpx-perf ") {
        meta.tool = Some("tcpx-perf");
    } else if body.starts_with("rccl-tests:") {
        meta.tool = Some("rccl-tests");
    } else if let (true, Some(rest)) = (hashed, body.strip_prefix("pattern:")) {
        let mut it = rest.split_whitespace();
        meta.tcpx_pattern = it.next().map(str::to_string);
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            meta.tcpx_variant.push(format!("{}={v}", k.trim_end_matches(':')));
        }
    } else if let (true, Some(rest)) = (hashed, body.strip_prefix("ranks:")) {
        // `ranks: R endpoints: E nodes: N endpoints per rank: G`
        let words: Vec<&str> = std::iter::once("ranks:").chain(rest.split_whitespace()).collect();
        for pair in words.windows(2) {
            if let ("ranks:" | "endpoints:" | "nodes:", v) = (pair[0], pair[1]) {
                if v.parse::<u64>().is_ok() {
                    meta.tcpx_shape
                        .push((pair[0].trim_end_matches(':').to_string(), v.to_string()));
                }
            }
        }
    } else if let (true, Some(rest)) = (hashed, body.strip_prefix("memory:")) {
        if let Some(m) = rest.split_whitespace().next() {
            meta.tcpx_variant.push(format!("mem={m}"));
        }
    } else if toks.first() == Some(&"Rank") && toks.get(1).is_some_and(|r| r.parse::<u64>().is_ok()) {
        meta.ranks += 1;
    } else if let Some(b) = perf_binary(toks) {
        meta.command = Some(b);
    } else if body == "..." && meta.ranks > 0 {
        meta.ranks_cut = true;
    }
}

/// Ends a table: complete (footer seen) or refused as crashed/truncated.
fn finish(file: &str, tab: Table, opts: &ParseOptions) -> Result<Table, ParseError> {
    if tab.footer {
        if tab.rows.is_empty() {
            return Err(ParseError::new(
                file,
                Some(tab.header_line),
                "table has a footer but no rows",
            ));
        }
        return Ok(tab);
    }
    let n = tab.rows.len();
    let at = match tab.rows.last() {
        Some((ln, r)) => format!("run ended at row {n} (size {}, line {ln})", r.size),
        None => format!(
            "run ended before its first row (table header at line {})",
            tab.header_line
        ),
    };
    if let Some((ln, line)) = tab.error_after {
        return Err(ParseError::new(
            file,
            Some(ln),
            format!("{at}: {line} (the run crashed)"),
        ));
    }
    if let Some((ln, line, msg)) = tab.bad {
        return Err(ParseError::new(
            file,
            Some(ln),
            format!("{at}: {line} (a cut-off row: {msg}; the run crashed or the log is truncated)"),
        ));
    }
    if opts.allow_truncated && n > 0 {
        return Ok(tab);
    }
    let next = match &tab.next_after {
        Some((ln, line)) => format!("line {ln} is {line:?}"),
        None => "the file ends".to_string(),
    };
    Err(ParseError::new(
        file,
        tab.rows.last().map(|(ln, _)| *ln),
        format!(
            "{at}: {next}, without nccl-tests' footer ('# Out of bounds values', '# Avg bus bandwidth'): \
             the log is truncated or the run died; --allow-truncated uses the rows it has"
        ),
    ))
}

/// The rows of one data type and reduction, keyed by size, with their line numbers.
type Group = BTreeMap<u64, (usize, Row)>;

/// Turns a table into a run: one series per data type and reduction printed.
fn build(file: &str, tab: Table, opts: &ParseOptions, single: bool) -> Result<Run, ParseError> {
    let tcpx = tab.cols.tcpx || tab.meta.tool == Some("tcpx-perf");
    let source = if single {
        file.to_string()
    } else {
        format!("{file}:{}", tab.header_line)
    };
    let mut run = Run::new(
        &source,
        if tcpx {
            Format::TcpxPerfText
        } else {
            Format::NcclTestsText
        },
    );
    let idx = match opts.placement {
        Placement::InPlace if tab.cols.blocks > 1 => 1,
        _ => 0,
    };
    let mut groups: Vec<((String, String), Group)> = Vec::new();
    let mut zero_repeats = 0;
    for (ln, r) in &tab.rows {
        let key = (r.dtype.clone(), r.redop.clone());
        let g = if let Some(i) = groups.iter().position(|(k, _)| *k == key) {
            i
        } else {
            groups.push((key, BTreeMap::new()));
            groups.len() - 1
        };
        let p = r.placed[idx];
        let wrongs: Vec<f64> = r.placed.iter().filter_map(|p| p.wrong).collect();
        let errors = r.placed.iter().filter_map(|p| p.max_error);
        let row = Row {
            size: r.size,
            summary: Sample {
                time_us: p.time_us,
                algbw: p.algbw,
                busbw: p.busbw,
            },
            wrong: (!wrongs.is_empty()).then(|| wrongs.iter().sum()),
            max_error: errors.reduce(f64::max),
            samples: Vec::new(),
        };
        // Requested sizes below one element per rank round down to 0 bytes, one row each
        // (all_gather with -g 12 prints three); they move no data, so the first one stands for
        // them all.
        if r.size == 0 && groups[g].1.contains_key(&0) {
            zero_repeats += 1;
            continue;
        }
        if let Some((first, _)) = groups[g].1.insert(r.size, (*ln, row)) {
            return Err(ParseError::new(
                file,
                Some(*ln),
                format!(
                    "size {} appears twice for {} {} (lines {first} and {ln}): several cycles (-N) or \
                     interleaved outputs in one table are not supported",
                    r.size, r.dtype, r.redop
                ),
            ));
        }
    }
    let named = tab
        .meta
        .collective
        .clone()
        .or(tab.meta.command.clone())
        .or(tab.meta.tcpx_pattern.clone());
    let (pattern, family) = resolve_collective(file, named.as_deref(), opts, single)?;
    let several = groups.len() > 1;
    if let [((dtype, _), _)] = groups.as_slice() {
        // The data type decides the `error` column's tolerance (crate::validate).
        run.labels.insert("type".into(), dtype.clone());
    }
    for ((dtype, redop), rows) in groups {
        let variant = if several {
            let mut v = format!("type={dtype}");
            if !redop.is_empty() {
                v.push(',');
                v.push_str("redop=");
                v.push_str(&redop);
            }
            v
        } else if tcpx {
            tab.meta.tcpx_variant.join(",")
        } else {
            String::new()
        };
        run.series.push(Series {
            pattern: pattern.clone(),
            family,
            variant,
            rows: rows.into_iter().map(|(s, (_, r))| (s, r)).collect(),
        });
    }
    run.wrong_total = tab.wrong_total;
    if tab.meta.ranks > 0 && !tab.meta.ranks_cut {
        run.labels.insert("ranks".into(), tab.meta.ranks.to_string());
    }
    for (k, v) in &tab.meta.tcpx_shape {
        run.labels.insert(k.clone(), v.clone());
    }
    if let Some(a) = tab.avg_busbw {
        run.labels.insert("avg_busbw_footer".into(), format!("{a}"));
    }
    if let Some(d) = &tab.result_dir {
        run.labels.insert("result_dir".into(), d.clone());
    }
    let tool = if tcpx {
        "tcpx-perf"
    } else {
        tab.meta.tool.unwrap_or("nccl-tests")
    };
    run.labels.insert("tool".into(), tool.into());
    if let Some(n) = named.filter(|n| *n != pattern) {
        run.labels.insert("collective_as_written".into(), n);
    }
    if zero_repeats > 0 {
        run.labels
            .insert("repeated_zero_size_rows".into(), zero_repeats.to_string());
    }
    if !tab.footer {
        run.labels
            .insert("truncated".into(), format!("after row {}", tab.rows.len()));
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error";
    const FOOTER: &str = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5";

    fn table(rows: &[&str]) -> String {
        format!("{HEADER}\n{}\n{FOOTER}\n", rows.join("\n"))
    }

    #[test]
    fn an_unchecked_footer_is_no_wrong_count() {
        let text = table(&["48  1  float  57.46  0.00  0.00  N/A  57.40  0.00  0.00  N/A"])
            .replace("0 OK", "N/A (not checked)");
        let run = parse("u.log", &text, &ParseOptions::default()).unwrap();
        assert_eq!(run.wrong_total, None);
        assert_eq!(run.series[0].rows[&48].max_error, None);
        let text = table(&["48  1  float  57.46  0.00  0.00  N/A  57.40  0.00  0.00  N/A"]).replace("0 OK", "many");
        assert!(parse("u.log", &text, &ParseOptions::default()).is_err());
    }

    #[test]
    fn repeated_zero_size_rows_keep_the_first() {
        let text = table(&[
            "0  0  float  57.30  0.00  0.00  0e+00  57.09  0.00  0.00  0e+00",
            "0  0  float  57.12  0.00  0.00  0e+00  57.62  0.00  0.00  0e+00",
            "48  1  float  57.46  0.00  0.00  0e+00  57.40  0.00  0.00  0e+00",
        ]);
        let run = parse("z.log", &text, &ParseOptions::default()).unwrap();
        let rows = &run.series[0].rows;
        assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [0, 48]);
        assert_eq!(rows[&0].summary.time_us, 57.30);
        assert_eq!(run.labels["repeated_zero_size_rows"], "1");
        // A repeated non-zero size is still two outputs mixed in one table.
        let text = table(&[
            "48  1  float  57.46  0.00  0.00  0e+00  57.40  0.00  0.00  0e+00",
            "48  1  float  57.50  0.00  0.00  0e+00  57.40  0.00  0.00  0e+00",
        ]);
        let e = parse("d.log", &text, &ParseOptions::default()).unwrap_err().to_string();
        assert!(e.starts_with("d.log:3: size 48 appears twice"), "{e}");
    }
}
