//! `history export` and `history import`: a history as JSON lines, so that it moves between
//! databases (a team going from a file to a server keeps its history; a server's history
//! copied to a file for a look offline). The first line says what the file is, each next line is
//! one run as stored (its identity and provenance, the marks it was added under, when it was
//! added, its node verdicts, and per configuration its figures and per-iteration samples), and
//! the last line counts the runs, so that a cut-off file is refused rather than half imported.
//! Figures are written as JSON numbers that read back bit for bit.
//!
//! Import reads and checks the whole file before it writes; then each run is stored in a
//! transaction of its own, in the order of the export (so into an empty database the runs get
//! the same ids), and a run the database already holds (the same identity) is left alone, so an
//! import may be repeated. A run is not checked again as `history add` checks it: it was admitted
//! when it was added, and is moved as it is.

use super::backend::Value;
use super::db::{provenance, stored_row, Added, Db, PROVENANCE, RESULT};
use super::model::{Config, NodeVerdict, Provenance, RunRecord, Sample, SeriesRecord, StoredRow};
use crate::error::Failure;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Write};

/// The format's name and version, in the first line.
const FORMAT: &str = "tcpx-history-export";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    schema_version: i64,
    tool: String,
}

#[derive(Serialize, Deserialize)]
struct Trailer {
    end: String,
    runs: usize,
}

/// A figure triple: time (us), algbw, busbw (GB/s).
type Triple = [f64; 3];

fn triple(s: &Sample) -> Triple {
    [s.time_us, s.algbw, s.busbw]
}

fn sample(t: &Triple) -> Sample {
    Sample {
        time_us: t[0],
        algbw: t[1],
        busbw: t[2],
    }
}

#[derive(Serialize, Deserialize)]
struct ExRow {
    size: u64,
    summary: Triple,
    wrong: Option<f64>,
    nccl: Option<Triple>,
    samples: Vec<Triple>,
    nccl_samples: Vec<Triple>,
}

#[derive(Serialize, Deserialize)]
struct ExSeries {
    config: Config,
    rows: Vec<ExRow>,
}

/// One run, one line.
#[derive(Serialize, Deserialize)]
struct ExRun {
    id: i64,
    added_at: String,
    status: Option<String>,
    allowed: Option<String>,
    provenance: Provenance,
    nodes: Vec<NodeVerdict>,
    series: Vec<ExSeries>,
}

fn ex_row(r: &StoredRow) -> ExRow {
    ExRow {
        size: r.size,
        summary: triple(&r.summary),
        wrong: r.wrong,
        nccl: r.nccl.as_ref().map(triple),
        samples: r.samples.iter().map(triple).collect(),
        nccl_samples: r.nccl_samples.iter().map(triple).collect(),
    }
}

/// Reads one stored run whole (inside the export's read transaction).
fn read_run(db: &Db, configs: &HashMap<i64, Config>, head: ExRun) -> Result<ExRun, String> {
    let mut c = db.conn();
    let id = [Value::Int(head.id)];
    let mut series: Vec<(i64, ExSeries)> = Vec::new();
    let mut at: HashMap<i64, (usize, usize)> = HashMap::new();
    for r in c.rows(
        &format!("SELECT id, config_id, {RESULT} FROM results WHERE run_id = ?1 ORDER BY config_id, size_bytes"),
        &id,
    )? {
        let cid = r.int(1)?;
        if series.last().is_none_or(|(c, _)| *c != cid) {
            let config = configs
                .get(&cid)
                .ok_or(format!("result of an unknown configuration {cid}"))?;
            series.push((
                cid,
                ExSeries {
                    config: config.clone(),
                    rows: Vec::new(),
                },
            ));
        }
        let k = series.len() - 1;
        series[k].1.rows.push(ex_row(&stored_row(&r, 2)?));
        at.insert(r.int(0)?, (k, series[k].1.rows.len() - 1));
    }
    for s in c.rows(
        "SELECT s.result_id, s.source, s.time_us, s.algbw_gbps, s.busbw_gbps FROM samples s
         JOIN results r ON r.id = s.result_id WHERE r.run_id = ?1 ORDER BY s.result_id, s.source, s.iter",
        &id,
    )? {
        let Some(&(k, j)) = at.get(&s.int(0)?) else { continue };
        let row = &mut series[k].1.rows[j];
        let x = [s.real(2)?, s.real(3)?, s.real(4)?];
        if s.text(1)? == "run" {
            row.samples.push(x);
        } else {
            row.nccl_samples.push(x);
        }
    }
    let nodes = c
        .rows(
            "SELECT host, verdict, evidence FROM node_verdicts WHERE run_id = ?1 ORDER BY host",
            &id,
        )?
        .iter()
        .map(|r| {
            Ok(NodeVerdict {
                host: r.text(0)?,
                verdict: r.text(1)?,
                evidence: r.text(2)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(ExRun {
        nodes,
        series: series.into_iter().map(|(_, s)| s).collect(),
        ..head
    })
}

/// Writes the whole history to `out`, read in one snapshot; the number of runs.
pub fn export(db: &Db, out: &mut dyn Write) -> Result<usize, Failure> {
    let io = |e: std::io::Error| Failure::Input(format!("export: cannot write: {e}"));
    let header = Header {
        format: FORMAT.into(),
        version: VERSION,
        schema_version: db.schema_version()?,
        tool: format!("tcpx-analyze {}", env!("CARGO_PKG_VERSION")),
    };
    writeln!(out, "{}", json(&header)).map_err(io)?;
    let configs: HashMap<i64, Config> = db.configs()?.into_iter().collect();
    db.conn().begin_read().map_err(|e| db.fail(e))?;
    let r = (|| -> Result<usize, Failure> {
        let heads = db
            .conn()
            .rows(
                &format!("SELECT id, added_at, status, allowed, {PROVENANCE} FROM runs ORDER BY id"),
                &[],
            )
            .map_err(|e| db.fail(e))?;
        for h in &heads {
            let head = (|| -> Result<ExRun, String> {
                Ok(ExRun {
                    id: h.int(0)?,
                    added_at: h.text(1)?,
                    status: h.opt_text(2)?,
                    allowed: h.opt_text(3)?,
                    provenance: provenance(h, 4)?,
                    nodes: Vec::new(),
                    series: Vec::new(),
                })
            })()
            .map_err(|e| db.fail(e))?;
            let run = read_run(db, &configs, head).map_err(|e| db.fail(e))?;
            writeln!(out, "{}", json(&run)).map_err(io)?;
        }
        let end = Trailer {
            end: FORMAT.into(),
            runs: heads.len(),
        };
        writeln!(out, "{}", json(&end)).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(heads.len())
    })();
    let mut c = db.conn();
    match r {
        Ok(n) => c.commit().map(|()| n).map_err(|e| db.fail(e)),
        Err(e) => {
            c.rollback();
            Err(e)
        }
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// An export read and checked whole, ready to import.
pub struct Export {
    runs: Vec<ExRun>,
    name: String,
}

/// Reads and checks a whole export (`name` in messages), before anything is written.
pub fn read(input: &mut dyn BufRead, name: &str) -> Result<Export, Failure> {
    let runs = read_export(input, name)?;
    for (k, r) in runs.iter().enumerate() {
        if !super::model::valid_time(&r.provenance.start_time) {
            return Err(Failure::Input(format!(
                "{name}: run {} ({}): start time {:?} is not RFC 3339 UTC",
                k + 1,
                r.provenance.source,
                r.provenance.start_time
            )));
        }
    }
    Ok(Export {
        runs,
        name: name.to_string(),
    })
}

fn read_export(input: &mut dyn BufRead, name: &str) -> Result<Vec<ExRun>, Failure> {
    let bad = |line: usize, why: String| Failure::Input(format!("{name}:{line}: {why}"));
    let mut lines = input.lines().enumerate();
    let (_, first) = lines
        .next()
        .ok_or_else(|| bad(1, "empty: not a history export (make one with `history export`)".into()))?;
    let first = first.map_err(|e| bad(1, e.to_string()))?;
    let h: Header = serde_json::from_str(&first)
        .ok()
        .filter(|h: &Header| h.format == FORMAT)
        .ok_or_else(|| bad(1, "not a history export (make one with `history export`)".into()))?;
    if h.version != VERSION {
        return Err(bad(
            1,
            format!(
                "export format version {} (this tcpx-analyze reads {VERSION}): use the tcpx-analyze that wrote it",
                h.version
            ),
        ));
    }
    let mut runs = Vec::new();
    for (i, line) in lines {
        let line = line.map_err(|e| bad(i + 1, e.to_string()))?;
        if let Ok(t) = serde_json::from_str::<Trailer>(&line) {
            if t.runs != runs.len() {
                return Err(bad(
                    i + 1,
                    format!("says {} runs, the file holds {}", t.runs, runs.len()),
                ));
            }
            return Ok(runs);
        }
        runs.push(serde_json::from_str::<ExRun>(&line).map_err(|e| bad(i + 1, format!("not a run: {e}")))?);
    }
    Err(Failure::Input(format!(
        "{name}: cut off after {} run(s) (no closing line): export again; nothing was imported",
        runs.len()
    )))
}

/// What an import did.
pub struct Imported {
    pub added: usize,
    pub present: usize,
}

/// Imports an export into `db` (see the module comment).
pub fn import(db: &Db, export: Export) -> Result<Imported, Failure> {
    let mut done = Imported { added: 0, present: 0 };
    let name = export.name;
    for (k, r) in export.runs.into_iter().enumerate() {
        let record = RunRecord {
            run: crate::model::Run::new(&r.provenance.source, crate::model::Format::TcpxPerfDir),
            provenance: r.provenance,
            status: r.status,
            allowed: r.allowed,
            nodes: r.nodes,
            series: r
                .series
                .into_iter()
                .map(|s| SeriesRecord {
                    config: s.config,
                    rows: s
                        .rows
                        .into_iter()
                        .map(|x| StoredRow {
                            size: x.size,
                            summary: sample(&x.summary),
                            wrong: x.wrong,
                            nccl: x.nccl.as_ref().map(sample),
                            samples: x.samples.iter().map(sample).collect(),
                            nccl_samples: x.nccl_samples.iter().map(sample).collect(),
                        })
                        .collect(),
                })
                .collect(),
        };
        match db.store(&record, &r.added_at) {
            Ok(Added::New(_)) => done.added += 1,
            Ok(_) => done.present += 1,
            Err(Failure::Input(m)) => {
                return Err(Failure::Input(format!(
                    "{m} (importing run {} of {name}; the {k} before it are stored: run the same import again, stored runs are skipped)",
                    k + 1
                )))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
