//! `history add`: turns an input into [`RunRecord`]s through the gate's own loader
//! ([`crate::parse::load_path`]) and the gate's own checks ([`crate::compare::check_runs`]), so
//! that the history refuses exactly what the gate refuses, and any check added there later.
//! Provenance the loader does not keep (start time, plugin sha256, hosts, NCCL version, chunk,
//! channels, window) is read beside it, from `summary.json` or the log's header.

use super::model::{rfc3339, valid_time, Config, Provenance, RunRecord, SeriesRecord, StoredRow};
use crate::error::Failure;
use crate::input::{read_bytes, RUN_FILES};
use crate::model::{Format, Run};
use crate::parse::{self, ParseOptions, Placement};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::Path;

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn dir_hash(dir: &Path) -> Result<String, Failure> {
    let mut h = Sha256::new();
    for f in RUN_FILES {
        let p = dir.join(f);
        if p.exists() {
            let b = read_bytes(&p)?;
            h.update(f.as_bytes());
            h.update((b.len() as u64).to_le_bytes());
            h.update(&b);
        }
    }
    Ok(hex(h.finalize()))
}

fn mtime(p: &Path) -> Result<String, Failure> {
    let t = std::fs::metadata(p)
        .and_then(|m| m.modified())
        .map_err(|e| Failure::Input(format!("{}: {e}", p.display())))?;
    let secs = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    Ok(rfc3339(secs))
}

/// NCCL's version from a log: `nccl-library=22809` (nccl-tests 2.14+) or `NCCL version 2.28.9`.
fn nccl_version_from_log(text: &str) -> Option<String> {
    if let Some(i) = text.find("nccl-library=") {
        let code: String = text[i + 13..].chars().take_while(char::is_ascii_digit).collect();
        if let Ok(c) = code.parse::<u64>() {
            // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
            return Some(format!("{}.{}.{}", c / 10_000, c % 10_000 / 100, c % 100));
        }
    }
    let i = text.find("NCCL version ")?;
    let v: String = text[i + 13..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Hosts of a log: nccl-tests' `#  Rank  0 Group  0 Pid 1813 on HOST device 0 ...` lines.
fn hosts_from_log(text: &str) -> Option<String> {
    let mut hosts = BTreeSet::new();
    for l in text.lines() {
        let l = l.trim_start_matches(|c: char| c == '#' || c.is_whitespace());
        if !l.starts_with("Rank ") {
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = w.iter().position(|x| *x == "on") {
            if let Some(h) = w.get(i + 1) {
                hosts.insert(h.to_string());
            }
        }
    }
    (!hosts.is_empty()).then(|| hosts.into_iter().collect::<Vec<_>>().join(","))
}

fn label_int(run: &Run, k: &str) -> Option<i64> {
    run.labels.get(k).and_then(|v| v.parse().ok())
}

fn tool_of(run: &Run) -> String {
    match run.format {
        Format::TcpxPerfDir | Format::TcpxPerfCsv | Format::TcpxPerfText => "tcpx-perf".into(),
        _ => run.labels.get("tool").cloned().unwrap_or_else(|| "nccl-tests".into()),
    }
}

/// The configuration of one series. `summary`: the run's summary.json (tcpx-perf directories).
fn config_of(run: &Run, s: &crate::model::Series, summary: Option<&Value>, opts: &ParseOptions) -> Config {
    let text = |k: &str| {
        summary
            .and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let int = |k: &str| summary.and_then(|v| v.get(k)).and_then(Value::as_i64);
    let nccl_tests = matches!(
        run.format,
        Format::NcclTestsText | Format::NcclTestsJson | Format::RcclTestsJson
    );
    let mut variant = s.variant.clone();
    if nccl_tests && opts.placement == Placement::InPlace {
        variant = [variant, "placement=in-place".into()]
            .into_iter()
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join(",");
    }
    Config {
        tool: tool_of(run),
        pattern: s.pattern.clone(),
        variant,
        scope: text("scope"),
        dir: text("dir"),
        mem: text("mem"),
        // nccl-tests' "ranks" are NCCL ranks, i.e. endpoints (as `compare::shape` reads them).
        ranks: if nccl_tests {
            None
        } else {
            int("ranks").or(label_int(run, "ranks"))
        },
        endpoints: if nccl_tests {
            label_int(run, "ranks")
        } else {
            int("endpoints").or(label_int(run, "endpoints"))
        },
        nodes: int("nodes").or(label_int(run, "nodes")),
        plugin: summary
            .and_then(|v| v.pointer("/plugin/name"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| run.labels.get("plugin").cloned()),
        chunk: int("chunk"),
        channels: int("channels"),
        window: int("window"),
    }
}

/// Options of `history add`.
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    pub parse: ParseOptions,
    /// Start time for inputs that record none (logs); otherwise their file's mtime is used.
    pub start_time: Option<String>,
    /// The waivers `history add` was given (`--allow-forced`, ...): stored with the run.
    pub allow: crate::admit::Allow,
}

/// Reads one input (a result directory, a directory of them, a log) into records, or refuses it
/// with the gate's reason.
pub fn import_path(path: &Path, o: &AddOptions) -> Result<Vec<RunRecord>, Failure> {
    if let Some(t) = &o.start_time {
        if !valid_time(t) {
            return Err(Failure::Usage(format!(
                "--start-time {t:?}: use RFC 3339 UTC, e.g. 2026-11-25T17:31:29Z"
            )));
        }
    }
    let mut runs = parse::load_path(path, &o.parse)?;
    crate::admit::policy(&mut runs, o.allow)?;
    let mut problems = Vec::new();
    crate::compare::check_runs(&runs, "run", &mut problems);
    if !problems.is_empty() {
        return Err(Failure::Input(format!(
            "refused (as the gate refuses it): {}",
            problems.join("; ")
        )));
    }
    runs.iter().map(|r| record(path, r, o)).collect()
}

/// The waivers a run was admitted under, as stored: `FORCED,UNCHECKED`, or `None`.
fn allowed(run: &Run) -> Option<String> {
    let w: Vec<&str> = crate::admit::waivers(run).iter().map(|(w, _)| w.label()).collect();
    (!w.is_empty()).then(|| w.join(","))
}

fn record(path: &Path, run: &Run, o: &AddOptions) -> Result<RunRecord, Failure> {
    let abs = |p: &str| std::fs::canonicalize(p).map_or_else(|_| p.to_string(), |c| c.display().to_string());
    match run.format {
        Format::TcpxPerfDir => {
            let dir = Path::new(&run.source);
            let sum_path = dir.join("summary.json");
            let summary: Value = serde_json::from_slice(&read_bytes(&sum_path)?)
                .map_err(|e| Failure::Input(format!("{}: invalid JSON: {e}", sum_path.display())))?;
            let start = summary.get("start_time").and_then(Value::as_str).unwrap_or("");
            if !valid_time(start) {
                return Err(Failure::Input(format!(
                    "{}: start_time {start:?} is missing or not RFC 3339 UTC: the history cannot place the run in time",
                    sum_path.display()
                )));
            }
            let hosts: BTreeSet<String> = summary
                .get("hosts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|h| h.get("hostname").and_then(Value::as_str).map(str::to_string))
                .collect();
            let nccl = parse::tcpx::nccl_reference(run)?;
            let series = run
                .series
                .iter()
                .map(|s| {
                    let nccl_rows = nccl.as_ref().and_then(|n| {
                        n.series
                            .iter()
                            .find(|x| x.pattern == s.pattern && x.variant == s.variant)
                    });
                    SeriesRecord {
                        config: config_of(run, s, Some(&summary), &o.parse),
                        rows: s
                            .rows
                            .values()
                            .map(|r| {
                                let n = nccl_rows.and_then(|x| x.rows.get(&r.size));
                                StoredRow {
                                    size: r.size,
                                    summary: r.summary,
                                    wrong: r.wrong,
                                    nccl: n.map(|n| n.summary),
                                    samples: r.samples.clone(),
                                    nccl_samples: n.map(|n| n.samples.clone()).unwrap_or_default(),
                                }
                            })
                            .collect(),
                    }
                })
                .collect();
            Ok(RunRecord {
                provenance: Provenance {
                content_sha256: dir_hash(dir)?,
                source: abs(&run.source),
                format: "tcpx-perf-dir".into(),
                tool: "tcpx-perf".into(),
                start_time: start.to_string(),
                time_from: "summary.json".into(),
                git_commit: run.labels.get("git_commit").cloned(),
                plugin_sha256: summary
                    .pointer("/plugin/sha256")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                hosts: (!hosts.is_empty()).then(|| hosts.into_iter().collect::<Vec<_>>().join(",")),
                nccl_version: summary
                    .pointer("/nccl_baseline/version")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                result_dir: None,
                },
                status: run.status.clone(),
                allowed: allowed(run),
                series,
                nodes: node_verdicts(&summary),
                run: run.clone(),
            })
        }
        Format::TcpxPerfCsv => Err(Failure::Input(format!(
            "{}: a results.csv alone does not show that the run completed (summary.json is written last): add its result directory",
            run.source
        ))),
        _ => {
            // A log file: it may hold several runs, named `FILE:LINE` by the parser.
            let bytes = read_bytes(path)?;
            let text = String::from_utf8_lossy(&bytes);
            let file = path.display().to_string();
            let place = run.source.strip_prefix(&file).unwrap_or("").to_string();
            let mut h = Sha256::new();
            h.update(&bytes);
            h.update(place.as_bytes());
            let (start_time, time_from) = match &o.start_time {
                Some(t) => (t.clone(), "--start-time".to_string()),
                None => (mtime(path)?, "file mtime".to_string()),
            };
            let series = run
                .series
                .iter()
                .map(|s| SeriesRecord {
                    config: config_of(run, s, None, &o.parse),
                    rows: s
                        .rows
                        .values()
                        .map(|r| StoredRow {
                            size: r.size,
                            summary: r.summary,
                            wrong: r.wrong,
                            nccl: None,
                            samples: r.samples.clone(),
                            nccl_samples: Vec::new(),
                        })
                        .collect(),
                })
                .collect();
            Ok(RunRecord {
                provenance: Provenance {
                content_sha256: hex(h.finalize()),
                source: format!("{}{place}", abs(&file)),
                format: serde_json::to_value(run.format)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                tool: tool_of(run),
                start_time,
                time_from,
                git_commit: run.labels.get("git_commit").cloned(),
                plugin_sha256: None,
                hosts: hosts_from_log(&text),
                nccl_version: run
                    .labels
                    .get("nccl_version")
                    .cloned()
                    .or_else(|| nccl_version_from_log(&text)),
                result_dir: run.labels.get("result_dir").cloned(),
                },
                status: run.status.clone(),
                allowed: allowed(run),
                series,
                nodes: Vec::new(),
                run: run.clone(),
            })
        }
    }
}

/// `summary.json`'s `node_verdicts` (tcpx-perf's verdict per node); entries without a host or
/// verdict are left out.
fn node_verdicts(summary: &Value) -> Vec<super::model::NodeVerdict> {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    summary
        .get("node_verdicts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            Some(super::model::NodeVerdict {
                host: field(v, "host")?,
                verdict: field(v, "verdict")?,
                evidence: field(v, "evidence").unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_provenance() {
        let t = "# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809\n#  Rank  0 Group  0 Pid   1813 on         vm device  0 [0000:00:06] NVIDIA H200\n#  Rank  1 Group  0 Pid   1814 on        vm2 device  1\n";
        assert_eq!(nccl_version_from_log(t).as_deref(), Some("2.28.9"));
        assert_eq!(hosts_from_log(t).as_deref(), Some("vm,vm2"));
        assert_eq!(
            nccl_version_from_log("NCCL INFO NCCL version 2.21.5+cuda12.4").as_deref(),
            Some("2.21.5")
        );
        assert_eq!(nccl_version_from_log("nothing"), None);
    }
}
