//! Input parsers. Every parser returns a [`ParseError`] naming file and line; none panics
//! (see `tests/robustness.rs` and `fuzz/`).

pub mod columns;
pub mod lines;
pub mod nccl_json;
pub mod nccl_text;
pub mod rccl_json;
pub mod tcpx;

use crate::error::{Failure, ParseError};
use crate::model::{Family, Format, Run, Waiver};
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
    /// Pattern to assume when the input does not name its collective, or names one of no
    /// known family (e.g. a renamed binary).
    pub pattern: Option<String>,
    /// Accept the rows of a table that stops before its footer with no error after it (a
    /// pasted excerpt, a log cut short); the run is labelled `truncated`. Crashed runs are
    /// refused regardless.
    pub allow_truncated: bool,
}

/// Guesses the collective from a file name (`..._sendrecv_...`, `all_reduce`, `alltoall`).
/// A name that mentions collectives of different families guesses nothing.
pub fn family_from_filename(name: &str) -> Option<(String, Family)> {
    let base = Path::new(name)
        .file_name()
        .map(|s| s.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let mut found: Option<(&str, Family)> = None;
    for (needle, pat) in [
        ("sendrecv", "sendrecv_perf"),
        ("all_reduce", "all_reduce_perf"),
        ("allreduce", "all_reduce_perf"),
        ("alltoall", "alltoall_perf"),
        ("all_to_all", "alltoall_perf"),
    ] {
        // `alltoallv` is another collective.
        let hit = base
            .match_indices(needle)
            .any(|(i, _)| !base[i + needle.len()..].starts_with('v'));
        let fam = Family::from_name(pat)?;
        match (hit, found) {
            (true, Some((_, f))) if f != fam => return None,
            (true, None) => found = Some((pat, fam)),
            _ => {}
        }
    }
    found.map(|(p, f)| (p.to_string(), f))
}

/// The collective of a run: the name the input gives (`named`), else `--pattern`, else the
/// file name (`use_file_name`: the file holds this run only). `--pattern` replaces a name of no
/// known family (the file name is tried for one too); it may not contradict a known one.
pub(crate) fn resolve_collective(
    file: &str,
    named: Option<&str>,
    opts: &ParseOptions,
    use_file_name: bool,
) -> Result<(String, Option<Family>), ParseError> {
    let forced = opts.pattern.as_deref().map(|p| (p.to_string(), Family::from_name(p)));
    match (named, forced) {
        (Some(n), forced) => match (Family::from_name(n), forced) {
            (Some(f), Some((p, Some(g)))) if f != g => Err(ParseError::new(
                file,
                None,
                format!(
                    "the input names the collective {n} ({}) but --pattern says {p} ({}): drop --pattern or pick the right input",
                    f.short(),
                    g.short()
                ),
            )),
            (Some(f), _) => Ok((n.to_string(), Some(f))),
            (None, Some(forced)) => Ok(forced),
            (None, None) => Ok(match family_from_filename(file).filter(|_| use_file_name) {
                Some((p, f)) => (p, Some(f)),
                None => (n.to_string(), None),
            }),
        },
        (None, Some(forced)) => Ok(forced),
        (None, None) => Ok(match family_from_filename(file).filter(|_| use_file_name) {
            Some((p, f)) => (p, Some(f)),
            None => ("unknown".to_string(), None),
        }),
    }
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

/// Parses any text input by content: nccl-tests JSON, rccl-tests JSON, a tcpx-perf
/// `results.csv`, or a stdout log (nccl-tests, rccl-tests, tcpx-perf) holding one or more runs.
pub fn parse_text(name: &str, text: &str, opts: &ParseOptions) -> Result<Vec<Run>, ParseError> {
    if rccl_json::detect(text) {
        Ok(vec![rccl_json::parse(name, text, opts)?])
    } else if text.trim_start().starts_with('{') {
        Ok(vec![nccl_json::parse(name, text, opts)?])
    } else if text.starts_with("schema_version") {
        Ok(vec![tcpx::parse_results_only(name, text, opts)?])
    } else {
        nccl_text::parse_all(name, text, opts)
    }
}

/// Parses a text input that holds exactly one run (see [`parse_text`]).
pub fn parse_nccl_any(name: &str, text: &str, opts: &ParseOptions) -> Result<Run, ParseError> {
    only_run(name, parse_text(name, text, opts)?)
}

/// The one run of an input that must hold one.
pub(crate) fn only_run(name: &str, mut runs: Vec<Run>) -> Result<Run, ParseError> {
    if runs.len() != 1 {
        let at: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
        return Err(ParseError::new(
            name,
            None,
            format!(
                "holds {} runs ({}): load it as a path, one run each",
                runs.len(),
                at.join(", ")
            ),
        ));
    }
    Ok(runs.remove(0))
}

/// Loads one path (checked by [`crate::validate`]): a tcpx-perf result directory, a directory of result directories,
/// a tcpx-perf `results.csv`, a nccl-tests or rccl-tests JSON file, or a stdout log (which
/// may hold several runs).
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
        let runs = subs
            .iter()
            .map(|p| tcpx::load_dir(p, opts))
            .collect::<Result<Vec<_>, _>>()?;
        crate::admit::distinct(&runs)?;
        return Ok(runs);
    }
    let text = crate::input::read_text(path)?;
    let mut runs = parse_text(&name, &text, opts)?;
    if runs.iter().any(|r| r.format == Format::TcpxPerfCsv) {
        // A results.csv is whole only as its directory says: read it as that directory.
        if let Some(dir) = directory_of_results(path) {
            return Ok(vec![tcpx::load_dir(&dir, opts)?]);
        }
        for r in &mut runs {
            r.waivers.push((
                Waiver::Incomplete,
                format!("{name}: no summary.json beside it (summary.json is written last, saying whether the run completed)"),
            ));
        }
    }
    crate::validate::text(&name, &text, &mut runs)?;
    Ok(runs)
}

/// The result directory whose `results.csv` `path` is, when its `summary.json` is beside it.
fn directory_of_results(path: &Path) -> Option<std::path::PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    (dir.join("summary.json").is_file() && same(&dir.join("results.csv"), path)).then_some(dir)
}

/// Loads several paths into runs (each path may hold several runs); copies of one run are refused.
pub fn load_paths(paths: &[std::path::PathBuf], opts: &ParseOptions) -> Result<Vec<Run>, Failure> {
    let mut runs = Vec::new();
    for p in paths {
        runs.extend(load_path(p, opts)?);
    }
    crate::admit::distinct(&runs)?;
    Ok(runs)
}
