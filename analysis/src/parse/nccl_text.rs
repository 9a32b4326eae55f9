//! nccl-tests stdout tables (peers.md §1.7), with or without the `-I` per-iteration columns,
//! with NCCL INFO/WARN lines mixed in.
//!
//! A table row has no per-iteration samples (the `-I` columns are min/max/p99/cv, not samples),
//! so each size is one observation (n = 1). The `-I` statistics are kept as labels.

use super::{family_from_filename, int, num, ParseOptions, Placement};
use crate::error::ParseError;
use crate::model::{Family, Format, Row, Run, Sample, Series};
use std::collections::BTreeMap;

pub fn parse(file: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    let mut run = Run::new(file, Format::NcclTestsText);
    let mut collective: Option<String> = None;
    let mut per_iter: Option<bool> = None; // set by the column header line
    let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
    let mut ranks = 0usize;
    let mut footer_wrong: Option<f64> = None;
    let mut avg_busbw: Option<f64> = None;

    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim();
            if let Some(c) = rest.strip_prefix("Collective test starting:") {
                let c = c.trim().to_string();
                if let Some(prev) = &collective {
                    if *prev != c {
                        return Err(ParseError::new(
                            file,
                            Some(ln),
                            format!("a second collective ({c}) after {prev}: split the log, one test per file"),
                        ));
                    }
                }
                collective = Some(c);
            } else if rest.starts_with("size") && rest.contains("count") {
                per_iter = Some(rest.contains("i_min"));
            } else if rest.starts_with("Rank ") && rest.contains(" on ") {
                ranks += 1;
            } else if let Some(v) = rest.strip_prefix("Out of bounds values") {
                let v = v.trim_start_matches([' ', ':']).split_whitespace().next().unwrap_or("");
                footer_wrong = Some(num(file, ln, "Out of bounds values", v)?);
            } else if let Some(v) = rest.strip_prefix("Avg bus bandwidth") {
                let v = v.trim_start_matches([' ', ':']).split_whitespace().next().unwrap_or("");
                avg_busbw = v.parse::<f64>().ok();
            }
            continue;
        }
        let toks: Vec<&str> = t.split_whitespace().collect();
        // Data rows start with the size (an integer); everything else (NCCL INFO lines such as
        // `host:pid:tid [0] NCCL INFO ...`, warnings, MPI noise) is skipped.
        if toks[0].parse::<u64>().is_err() {
            continue;
        }
        let Some(pi) = per_iter else {
            // A number-led line before any table header: not part of a table.
            continue;
        };
        let block = if pi { 8 } else { 4 };
        let want = 5 + 2 * block;
        if toks.len() != want {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!(
                    "table row has {} fields, expected {want} ({} table: size count type redop root + 2 x [time algbw busbw #wrong{}])",
                    toks.len(),
                    if pi { "-I per-iteration" } else { "plain" },
                    if pi { " i_min i_max i_p99 i_cv%" } else { "" }
                ),
            ));
        }
        let size = int(file, ln, "size", toks[0])?;
        int(file, ln, "count", toks[1])?;
        let off = 5 + match opts.placement {
            Placement::OutOfPlace => 0,
            Placement::InPlace => block,
        };
        let time = num(file, ln, "time (us)", toks[off])?;
        let algbw = num(file, ln, "algbw (GB/s)", toks[off + 1])?;
        let busbw = num(file, ln, "busbw (GB/s)", toks[off + 2])?;
        let wrong = match toks[off + 3] {
            "N/A" => None,
            w => Some(num(file, ln, "#wrong", w)?),
        };
        // Also check the other placement's #wrong: any wrong data fails the run.
        let other = if off == 5 { 5 + block } else { 5 };
        let other_wrong = match toks[other + 3] {
            "N/A" => None,
            w => Some(num(file, ln, "#wrong", w)?),
        };
        if pi {
            for (k, what) in ["i_min", "i_max", "i_p99", "i_cv%"].iter().enumerate() {
                num(file, ln, what, toks[off + 4 + k])?;
            }
        }
        if time <= 0.0 {
            return Err(ParseError::new(file, Some(ln), "time must be > 0"));
        }
        let wrong = match (wrong, other_wrong) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let row = Row {
            size,
            summary: Sample {
                time_us: time,
                algbw,
                busbw,
            },
            wrong,
            samples: Vec::new(),
        };
        if rows.insert(size, row).is_some() {
            return Err(ParseError::new(
                file,
                Some(ln),
                format!("size {size} appears twice (several data types/ops in one log are not supported)"),
            ));
        }
    }
    if rows.is_empty() {
        return Err(ParseError::new(
            file,
            None,
            "no nccl-tests result table found (expected a '#  size  count  type ...' header followed by rows)",
        ));
    }
    let (pattern, family) = match &collective {
        Some(c) => (c.clone(), Family::from_name(c)),
        None => match family_from_filename(file) {
            Some((p, f)) => (p, Some(f)),
            None => match &opts.pattern {
                Some(p) => (p.clone(), Family::from_name(p)),
                None => ("unknown".to_string(), None),
            },
        },
    };
    run.wrong_total = footer_wrong;
    if ranks > 0 {
        run.labels.insert("ranks".into(), ranks.to_string());
    }
    if let Some(a) = avg_busbw {
        run.labels.insert("avg_busbw_footer".into(), format!("{a}"));
    }
    run.series.push(Series {
        pattern,
        family,
        variant: String::new(),
        rows,
    });
    Ok(run)
}
