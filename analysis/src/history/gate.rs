//! `gate --history DB`: the reference of each candidate's configuration is the runs of its last
//! stable segment (the runs after the newest change point of any of the configuration's series,
//! as `detect` finds them), rebuilt as runs and judged by the gate's usual decision. Fails closed:
//! a configuration the history does not hold is invalid input, not a pass.

use super::db::Db;
use super::detect::{analyse, config_series};
use super::edm::EdmSettings;
use super::import::{import_path, AddOptions};
use super::model::{as_run, Config, StoredRun};
use crate::error::Failure;
use crate::model::Run;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The reference runs for the candidates' configurations, and a line per configuration saying
/// which segment it is.
pub fn references(
    db: &Db,
    candidates: &[PathBuf],
    add: &AddOptions,
    edm: &EdmSettings,
) -> Result<(Vec<Run>, Vec<String>), Failure> {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut wanted_configs: BTreeMap<String, Config> = BTreeMap::new();
    let mut own_runs = Vec::new();
    for p in candidates {
        for rec in import_path(p, add)? {
            for s in &rec.series {
                wanted_configs.insert(s.config.key(), s.config.clone());
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
            return Err(unheld(key, &wanted_configs[key], &configs));
        };
        // The candidates themselves may already be in the history: never their own reference.
        let (stored_own, runs): (Vec<StoredRun>, Vec<StoredRun>) = db.runs_of(*cid, true)?.into_iter().partition(|r| {
            own.contains(&r.provenance.content_sha256) || {
                let stored = as_run(c, r);
                own_runs.iter().any(|o| crate::admit::same_run(o, &stored).is_some())
            }
        });
        notes.push(detect_sees(key, own.len(), &stored_own));
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
                "configuration `{key}`: its last stable segment holds {} of its {} runs (history runs: {}): too few to gate against; add more runs",
                segment.len(),
                runs.len(),
                if segment.is_empty() {
                    "none".to_string()
                } else {
                    segment.iter().map(|r| r.id.to_string()).collect::<Vec<_>>().join(", ")
                }
            )));
        }
        notes.push(format!(
            "`{key}`: last stable segment = history runs {}..{} ({} of the {} runs of this configuration, candidates left out; {} .. {})",
            segment[0].id,
            segment[segment.len() - 1].id,
            segment.len(),
            runs.len(),
            segment[0].provenance.start_time,
            segment[segment.len() - 1].provenance.start_time
        ));
        refs.extend(segment.iter().map(|r| as_run(c, r)));
    }
    Ok((refs, notes))
}

/// A candidate configuration the history does not hold. Where it holds the same tool and
/// pattern in another configuration, the difference is refused by the one check every
/// comparison makes ([`crate::comparable::check`]: exit 4, naming the field, as `gate -B`);
/// else there is nothing to gate against (exit 3).
fn unheld(key: &str, want: &Config, held: &[(i64, Config)]) -> Failure {
    let same_pattern: Vec<crate::comparable::Configuration> = held
        .iter()
        .filter(|(_, c)| c.tool == want.tool && c.pattern == want.pattern)
        .map(|(_, c)| crate::comparable::with_shape(c.configuration(), &c.shape()))
        .collect();
    if !same_pattern.is_empty() {
        // Nearest first: the held configuration with the fewest differences names them.
        let mut best: Option<crate::comparable::Findings> = None;
        for h in same_pattern {
            let f = crate::comparable::check(&[
                (
                    "candidate".into(),
                    vec![crate::comparable::with_shape(want.configuration(), &want.shape())],
                ),
                ("history".into(), vec![h]),
            ]);
            if !f.refusals.is_empty() && best.as_ref().is_none_or(|b| f.refusals.len() < b.refusals.len()) {
                best = Some(f);
            }
        }
        if let Some(b) = best {
            let mut reasons = b.refusals.clone();
            reasons.extend(b.hint());
            return Failure::Refused(reasons);
        }
    }
    Failure::Input(format!(
        "the history holds no run of configuration `{key}`: add trusted runs of it first (history add), or gate with -B"
    ))
}

/// Whether `history detect` judges the same runs as this gate (issue 54: the gate called a
/// slowdown that detect, not holding the candidates, did not see): which candidates the history
/// holds, and what to run for detect to judge the others.
fn detect_sees(key: &str, candidates: usize, stored: &[StoredRun]) -> String {
    let ids: Vec<String> = stored.iter().map(|r| format!("run {}", r.id)).collect();
    if ids.len() >= candidates {
        format!(
            "`{key}`: the candidates are history {} (left out of the reference): `history detect` judges them in this configuration's newest segment",
            ids.join(", ")
        )
    } else {
        format!(
            "`{key}`: {} of the {candidates} candidate runs are not in the history, so `history detect` does not see them and cannot agree with this gate until they are added (`history add`){}",
            candidates - ids.len(),
            if ids.is_empty() {
                String::new()
            } else {
                format!("; the others are history {}", ids.join(", "))
            }
        )
    }
}
