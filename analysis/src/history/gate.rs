//! `gate --history DB`: the reference of each candidate's configuration is the runs of its last
//! stable segment (the runs after the newest change point of any of the configuration's series,
//! as `detect` finds them), rebuilt as runs and judged by the gate's usual decision. Fails closed:
//! a configuration the history does not hold is invalid input, not a pass.

use super::db::Db;
use super::detect::{analyse, config_series};
use super::edm::EdmSettings;
use super::import::{import_path, AddOptions};
use super::model::{as_run, StoredRun};
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
