//! Input parsers. Every parser returns a [`ParseError`] naming file and line; none panics
//! (see `tests/robustness.rs` and `fuzz/`).

pub mod nccl_json;
pub mod nccl_text;
pub mod tcpx;

use crate::error::{Failure, ParseError};
use crate::model::{Family, Run};
use std::path::Path;

/// Which nccl-tests placement to read (tcpx-perf has only one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    #[default]
    OutOfPlace,
    InPlace,
}

/// Options shared by the parsers.
#[derive(Debug, Clone, Default)]
pub struct ParseOptions {
    pub placement: Placement,
    /// Pattern to assume when the input does not name its collective.
    pub pattern: Option<String>,
}

/// Guesses the collective from a file name (`..._sendrecv_...`, `all_reduce`, `alltoall`).
pub fn family_from_filename(name: &str) -> Option<(String, Family)> {
    let base = Path::new(name)
        .file_name()
        .map(|s| s.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    for (needle, pat) in [
        ("sendrecv", "sendrecv_perf"),
        ("all_reduce", "all_reduce_perf"),
        ("allreduce", "all_reduce_perf"),
        ("alltoall", "alltoall_perf"),
    ] {
        if base.contains(needle) {
            return Family::from_name(pat).map(|f| (pat.to_string(), f));
        }
    }
    None
}

/// Parses a finite, non-negative float; `what` names the field in the error.
pub(crate) fn num(file: &str, line: usize, what: &str, s: &str) -> Result<f64, ParseError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(ParseError::new(
            file,
            Some(line),
            format!("{what}: value {v} is not a finite non-negative number"),
        )),
        Err(_) => Err(ParseError::new(
            file,
            Some(line),
            format!("{what}: cannot parse {:?} as a number", s.trim()),
        )),
    }
}

pub(crate) fn int(file: &str, line: usize, what: &str, s: &str) -> Result<u64, ParseError> {
    s.trim().parse::<u64>().map_err(|_| {
        ParseError::new(
            file,
            Some(line),
            format!("{what}: cannot parse {:?} as a non-negative integer", s.trim()),
        )
    })
}

/// Parses text that is either nccl-tests JSON or a nccl-tests stdout table, by content.
pub fn parse_nccl_any(name: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    if text.trim_start().starts_with('{') {
        nccl_json::parse(name, text, opts)
    } else {
        nccl_text::parse(name, text, opts)
    }
}

/// Loads one path: a tcpx-perf result directory, a directory of result directories,
/// a tcpx-perf `results.csv`, a nccl-tests JSON file or a nccl-tests stdout log.
pub fn load_path(path: &Path, opts: &ParseOptions) -> Result<Vec<Run>, Failure> {
    let name = path.display().to_string();
    if !path.exists() {
        return Err(Failure::Input(format!("{name}: no such file or directory")));
    }
    if path.is_dir() {
        if path.join("results.csv").exists() || path.join("summary.json").exists() {
            return Ok(vec![tcpx::load_dir(path, opts)?]);
        }
        let mut subs: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| Failure::Input(format!("{name}: {e}")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && (p.join("results.csv").exists() || p.join("summary.json").exists()))
            .collect();
        subs.sort();
        if subs.is_empty() {
            return Err(Failure::Input(format!(
                "{name}: directory holds no tcpx-perf result (no results.csv/summary.json, no run sub-directories)"
            )));
        }
        return subs.iter().map(|p| tcpx::load_dir(p, opts)).collect();
    }
    let bytes = std::fs::read(path).map_err(|e| Failure::Input(format!("{name}: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| Failure::Input(format!("{name}: not UTF-8 text ({e})")))?;
    let first = text.lines().next().unwrap_or("");
    if first.starts_with("schema_version") {
        return Ok(vec![tcpx::parse_results_only(&name, &text, opts)?]);
    }
    Ok(vec![parse_nccl_any(&name, &text, opts)?])
}

/// Loads several paths into runs (each path may hold several runs).
pub fn load_paths(paths: &[std::path::PathBuf], opts: &ParseOptions) -> Result<Vec<Run>, Failure> {
    let mut runs = Vec::new();
    for p in paths {
        runs.extend(load_path(p, opts)?);
    }
    Ok(runs)
}
