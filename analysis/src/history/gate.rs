//! `gate --history DB`: the reference of each candidate's configuration is the runs of its last
//! stable segment (the runs after the newest change point of any of the configuration's series,
//! as `detect` finds them), rebuilt as runs and judged by the gate's usual decision. Fails closed:
//! a configuration the history does not hold is invalid input, not a pass.

use super::db::Db;
use super::detect::{analyse, config_series};
use super::edm::EdmSettings;
use super::import::{import_path, AddOptions};
use super::model::{Config, StoredRun};
use crate::error::Failure;
use crate::model::{Family, Format, Row, Run, Series, Waiver};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Rebuilds a stored run of one configuration as the gate's [`Run`].
pub(crate) fn as_run(c: &Config, r: &StoredRun) -> Run {
    let pv = &r.provenance;
    // The format it was read from decides how precisely its figures were printed.
    let format = match pv.format.as_str() {
        "tcpx-perf-dir" => Format::TcpxPerfDir,
        "tcpx-perf-text" => Format::TcpxPerfText,
        "nccl-tests-json" => Format::NcclTestsJson,
        "rccl-tests-json" => Format::RcclTestsJson,
        _ if c.tool == "tcpx-perf" && pv.result_dir.is_none() => Format::TcpxPerfDir,
        _ => Format::NcclTestsText,
    };
    let mut run = Run::new(&format!("{} (history run {})", pv.source, r.id), format);
    let dir = if format == Format::TcpxPerfDir {
        Some(pv.source.clone())
    } else {
        pv.result_dir.clone()
    };
    for (k, v) in [
        ("git_commit", pv.git_commit.clone()),
        ("plugin", c.plugin.clone()),
        ("result_dir", dir),
        ("start_time", Some(pv.start_time.clone())),
    ] {
        if let Some(v) = v {
            run.labels.insert(k.into(), v);
        }
    }
    for w in r.allowed.iter().flat_map(|a| a.split(',')) {
        if let Some(w) = Waiver::from_label(w) {
            run.waivers.push((
                w,
                format!("{} (history run {}): added under {}", pv.source, r.id, w.flag()),
            ));
        }
    }
    let shape = if c.tool == "tcpx-perf" {
        [("ranks", c.ranks), ("endpoints", c.endpoints), ("nodes", c.nodes)]
    } else {
        [("ranks", c.endpoints), ("endpoints", None), ("nodes", None)]
    };
    for (k, v) in shape {
        if let Some(v) = v {
            run.labels.insert(k.into(), v.to_string());
        }
    }
    run.status = Some("ok".into());
    let variant = c
        .variant
        .split(',')
        .filter(|x| !x.starts_with("placement="))
        .collect::<Vec<_>>()
        .join(",");
    run.series.push(Series {
        pattern: c.pattern.clone(),
        family: Family::from_name(&c.pattern),
        variant,
        rows: r
            .rows
            .iter()
            .map(|x| {
                (
                    x.size,
                    Row {
                        size: x.size,
                        summary: x.summary,
                        wrong: x.wrong,
                        max_error: None,
                        samples: x.samples.clone(),
                    },
                )
            })
            .collect(),
    });
    run
}

/// The reference runs for the candidates' configurations, and a line per configuration saying
/// which segment it is.
pub fn references(
    db: &Db,
    candidates: &[PathBuf],
    add: &AddOptions,
    edm: &EdmSettings,
) -> Result<(Vec<Run>, Vec<String>), Failure> {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut own_runs = Vec::new();
    for p in candidates {
        for rec in import_path(p, add)? {
            for s in &rec.series {
                wanted
                    .entry(s.config.key())
                    .or_default()
                    .push(rec.provenance.content_sha256.clone());
            }
            own_runs.push(rec.run);
        }
    }
    let configs = db.configs()?;
    let mut refs = Vec::new();
    let mut notes = Vec::new();
    for (key, own) in &wanted {
        let Some((cid, c)) = configs.iter().find(|(_, c)| c.key() == *key) else {
            return Err(Failure::Input(format!(
                "the history holds no run of configuration `{key}`: add trusted runs of it first (history add), or gate with -B"
            )));
        };
        // The candidates themselves may already be in the history: never their own reference.
        let runs: Vec<StoredRun> = db
            .runs_of(*cid, true)?
            .into_iter()
            .filter(|r| !own.contains(&r.provenance.content_sha256))
            .filter(|r| {
                let stored = as_run(c, r);
                !own_runs.iter().any(|o| crate::admit::same_run(o, &stored).is_some())
            })
            .collect();
        let start = config_series(*cid, key, &runs)
            .into_iter()
            .map(|s| analyse(s, edm))
            // A series of one size skips runs without that size: place its change by run id.
            .filter_map(|r| {
                r.changes
                    .last()
                    .and_then(|c| runs.iter().position(|x| x.id == c.run_id))
            })
            .max()
            .unwrap_or(0);
        let segment = &runs[start.min(runs.len())..];
        if segment.len() < 2 {
            return Err(Failure::Input(format!(
                "configuration `{key}`: its last stable segment holds {} run(s) (from run #{start} of {}): too few to gate against; add more runs",
                segment.len(),
                runs.len()
            )));
        }
        notes.push(format!(
            "`{key}`: last stable segment = runs #{start}..#{} of {} ({} .. {})",
            runs.len() - 1,
            runs.len(),
            segment[0].provenance.start_time,
            segment[segment.len() - 1].provenance.start_time
        ));
        refs.extend(segment.iter().map(|r| as_run(c, r)));
    }
    Ok((refs, notes))
}
