//! `history export` and `history import`: a history as JSON lines, so that it moves between
//! databases (a team going from a file to a server keeps its history; a server's history
//! copied to a file for a look offline). The first line says what the file is, each next line is
//! one run as stored (its identity and provenance, the marks it was added under, when it was
//! added, its node verdicts, and per configuration its figures and per-iteration samples), and
//! the last line counts the runs, so that a cut-off file is refused rather than half imported.
//! Figures are written as JSON numbers that read back bit for bit.
//!
//! Import reads and checks the whole input before it writes; then each run is stored in a
//! transaction of its own, in the order of the export (so into an empty database the runs get
//! the same ids), and a run the database already holds (the same identity, or the same run under
//! other bytes: the gate's test of a copy, as `history add` finds it) is left alone, so an import
//! may be repeated. An export is text anyone can edit, so each run is admitted as `history add`
//! admits one ([`admit_run`]): its status and data, its figures, its node verdicts, and the marks
//! its own evidence needs. Exports written one after another into one stream (`cat a b`) are
//! read whole, each with its header and closing line; anything else after a closing line is
//! refused. Standard input is bounded as a file is, and is never the database written.

use super::backend::Value;
use super::db::{provenance, stored_row, Added, Db, PROVENANCE, RESULT, SCHEMA_VERSION};
use super::location::Location;
use super::model::{
    as_run, valid_time, Config, NodeVerdict, Provenance, RunRecord, Sample, SeriesRecord, StoredRow, StoredRun,
};
use crate::error::Failure;
use crate::model::Waiver;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};

/// The format's name and version, in the first line.
const FORMAT: &str = "tcpx-history-export";
const VERSION: u32 = 1;

/// The longest first line read: a header is about 120 bytes, so an input that is no export
/// (`/dev/zero`, a binary file) is refused after this many bytes, not read to its end.
const HEADER_MAX: u64 = 64 * 1024;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    schema_version: i64,
    tool: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
struct ExRow {
    size: u64,
    summary: Triple,
    wrong: Option<f64>,
    /// A size without a data check (`wrong` null) that `history add` admitted without
    /// `--allow-unchecked` (a witness measured its bytes exactly): without it, such a size is an
    /// unchecked one on import, whatever the line's `allowed` says. Written only where true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    verified: bool,
    nccl: Option<Triple>,
    samples: Vec<Triple>,
    nccl_samples: Vec<Triple>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExSeries {
    config: Config,
    rows: Vec<ExRow>,
}

/// One run, one line.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExRun {
    id: i64,
    added_at: String,
    status: Option<String>,
    allowed: Option<String>,
    provenance: Provenance,
    nodes: Vec<NodeVerdict>,
    series: Vec<ExSeries>,
}

/// The waivers an `allowed` text names (`FORCED,UNCHECKED`), or the label that is none.
fn waivers_named(allowed: Option<&str>) -> Result<Vec<Waiver>, String> {
    let mut out = Vec::new();
    for l in allowed.iter().flat_map(|a| a.split(',')) {
        let w = Waiver::from_label(l).ok_or_else(|| {
            let all: Vec<&str> = Waiver::ALL.iter().map(|w| w.label()).collect();
            format!("allowed names {l:?}, not a mark (one of {})", all.join(", "))
        })?;
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out.sort();
    Ok(out)
}

fn ex_row(r: &StoredRow, unchecked_allowed: bool) -> ExRow {
    ExRow {
        size: r.size,
        summary: triple(&r.summary),
        wrong: r.wrong,
        verified: r.wrong.is_none() && !unchecked_allowed,
        nccl: r.nccl.as_ref().map(triple),
        samples: r.samples.iter().map(triple).collect(),
        nccl_samples: r.nccl_samples.iter().map(triple).collect(),
    }
}

/// Reads one stored run whole (inside the export's read transaction).
fn read_run(db: &Db, configs: &HashMap<i64, Config>, head: ExRun) -> Result<ExRun, String> {
    let mut c = db.conn();
    let id = [Value::Int(head.id)];
    // A size without a data check was admitted by `history add` as verified unless the run was
    // added under --allow-unchecked: the export says so, for the import's admission.
    let unchecked_allowed = waivers_named(head.allowed.as_deref()).map_or(true, |w| w.contains(&Waiver::Unchecked));
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
        series[k].1.rows.push(ex_row(&stored_row(&r, 2)?, unchecked_allowed));
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

/// An export read and checked whole, ready to import: each run as `history add` would store it,
/// with the time it was added.
pub struct Export {
    runs: Vec<(RunRecord, String)>,
    name: String,
}

/// Reads, checks and admits a whole export (`name` in messages), before anything is written.
pub fn read(input: &mut dyn BufRead, name: &str) -> Result<Export, Failure> {
    let runs = read_export(input, name)?
        .into_iter()
        .enumerate()
        .map(|(k, r)| admit_run(name, k + 1, r))
        .collect::<Result<_, _>>()?;
    Ok(Export {
        runs,
        name: name.to_string(),
    })
}

/// An export's lines, each within a bound and all together within a history export's
/// ([`tcpx_files::Bound::HISTORY_EXPORT`]), whether they come from a file or a pipe: a line is
/// never read past its bound, so an endless input is refused, not held in memory.
struct Lines<'a> {
    input: &'a mut dyn BufRead,
    name: &'a str,
    /// The number of the line last read, and the bytes read so far.
    line: usize,
    bytes: u64,
}

impl Lines<'_> {
    /// The next line without its line break, of at most `max` bytes (`what` it is, for the
    /// refusal of a longer one); None at the end of the input.
    fn next(&mut self, max: u64, what: &str) -> Result<Option<String>, Failure> {
        let bound = tcpx_files::Bound::HISTORY_EXPORT;
        let left = bound.max_bytes.saturating_sub(self.bytes);
        let cap = max.min(left);
        self.line += 1;
        let at = format!("{}:{}", self.name, self.line);
        let mut buf = Vec::new();
        (&mut *self.input)
            .take(cap.saturating_add(1))
            .read_until(b'\n', &mut buf)
            .map_err(|e| Failure::Input(format!("{at}: {e}")))?;
        if buf.is_empty() {
            return Ok(None);
        }
        self.bytes += buf.len() as u64;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() as u64 > cap {
            return Err(Failure::Input(if cap < max {
                format!(
                    "{}: more than {} may be ({} MiB): not one; give the export itself",
                    self.name,
                    bound.what,
                    bound.max_bytes >> 20
                )
            } else {
                format!("{at}: no line break in the first {cap} bytes: {what}")
            }));
        }
        String::from_utf8(buf)
            .map(Some)
            .map_err(|_| Failure::Input(format!("{at}: not UTF-8 text: {what}")))
    }
}

const NOT_EXPORT: &str = "not a history export (make one with `history export`)";

/// An export's header line, checked: this format and version, a history schema this build reads.
fn header(line: &str, at: &str, exports: usize) -> Result<Header, Failure> {
    let bad = |why: String| Failure::Input(format!("{at}: {why}"));
    let h: Header = serde_json::from_str(line)
        .ok()
        .filter(|h: &Header| h.format == FORMAT)
        .ok_or_else(|| {
            bad(if exports == 0 {
                NOT_EXPORT.into()
            } else {
                format!(
                    "after the closing line of export {exports} comes no header of another export: give exports whole, one after another; nothing was imported"
                )
            })
        })?;
    if h.version != VERSION {
        return Err(bad(format!(
            "export format version {} (this tcpx-analyze reads {VERSION}): use the tcpx-analyze that wrote it",
            h.version
        )));
    }
    // The history's schema its runs were read from: a newer one may hold what this build would
    // drop on the way in.
    if !(1..=SCHEMA_VERSION).contains(&h.schema_version) {
        return Err(bad(format!(
            "an export of a history of schema version {} (this tcpx-analyze reads 1 to {SCHEMA_VERSION}): import it with the tcpx-analyze that wrote it",
            h.schema_version
        )));
    }
    Ok(h)
}

/// Every run of the export(s) on `input`: one export, or several written one after another
/// (`cat a.jsonl b.jsonl`), each whole with its header and closing count.
fn read_export(input: &mut dyn BufRead, name: &str) -> Result<Vec<ExRun>, Failure> {
    let mut lines = Lines {
        input,
        name,
        line: 0,
        bytes: 0,
    };
    let mut runs = Vec::new();
    let mut exports = 0;
    loop {
        let Some(first) = lines.next(HEADER_MAX, NOT_EXPORT)? else {
            if exports == 0 {
                return Err(Failure::Input(format!("{name}:1: empty: {NOT_EXPORT}")));
            }
            return Ok(runs);
        };
        header(&first, &format!("{name}:{}", lines.line), exports)?;
        exports += 1;
        let from = runs.len();
        loop {
            let Some(line) = lines.next(u64::MAX, "not a line of a history export")? else {
                let which = if exports > 1 {
                    format!(" of export {exports}")
                } else {
                    String::new()
                };
                return Err(Failure::Input(format!(
                    "{name}: cut off after {} run(s){which} (no closing line): export again; nothing was imported",
                    runs.len() - from
                )));
            };
            let at = lines.line;
            if let Ok(t) = serde_json::from_str::<Trailer>(&line) {
                if t.end != FORMAT || t.runs != runs.len() - from {
                    return Err(Failure::Input(format!(
                        "{name}:{at}: says {} runs, the export holds {}: export again; nothing was imported",
                        t.runs,
                        runs.len() - from
                    )));
                }
                break;
            }
            runs.push(
                serde_json::from_str::<ExRun>(&line)
                    .map_err(|e| Failure::Input(format!("{name}:{at}: not a run: {e}")))?,
            );
        }
    }
}

/// The formats `history add` stores a run from (a results.csv alone it refuses).
const FORMATS: [&str; 5] = [
    "tcpx-perf-dir",
    "tcpx-perf-text",
    "nccl-tests-text",
    "nccl-tests-json",
    "rccl-tests-json",
];

/// Whether `v` equals `want` within 0.1% (and 1e-9): `history add` admits a figure within the
/// rounding of its printed digits, never more than this apart from what its size and time say.
fn close(v: f64, want: f64) -> bool {
    (v - want).abs() <= 1e-3 * v.abs().max(want.abs()) + 1e-9
}

/// A figure triple as `history add` admits one: finite, >= 0, a time > 0; and where `derived`
/// (a tcpx-perf result directory's own figures) algbw = size / time and busbw = algbw x the
/// pattern's `factor`, where known.
fn check_triple(t: &Triple, size: u64, derived: bool, factor: Option<f64>) -> Result<(), String> {
    let [time, algbw, busbw] = *t;
    if !t.iter().all(|x| x.is_finite() && *x >= 0.0) || time <= 0.0 {
        return Err(format!(
            "{t:?} (time us, algbw, busbw): every figure finite and >= 0, the time > 0"
        ));
    }
    if !derived {
        return Ok(());
    }
    let want = size as f64 / time / 1e3;
    if !close(algbw, want) {
        return Err(format!(
            "algbw {algbw} but size / time = {size} / {time} us = {want:.6} GB/s: the figures contradict each other"
        ));
    }
    if let Some(k) = factor.filter(|k| k.is_finite()) {
        if !close(busbw, algbw * k) {
            return Err(format!(
                "busbw {busbw} but algbw x the pattern's factor = {algbw} x {k}: the figures contradict each other"
            ));
        }
    }
    Ok(())
}

/// A configuration's settings in tcpx-perf's ranges (as summary.json's are admitted).
fn check_config(c: &Config, tool: &str) -> Result<(), String> {
    if c.tool != tool || c.pattern.trim().is_empty() {
        return Err(format!(
            "configuration {}: its tool must be the run's ({tool}) and its pattern named",
            c.key()
        ));
    }
    let ranges = [
        ("ranks", c.ranks, 1, i64::MAX),
        ("endpoints", c.endpoints, 1, i64::MAX),
        ("nodes", c.nodes, 1, i64::MAX),
        ("chunk", c.chunk, 1, i64::MAX),
        ("channels", c.channels, 1, 64),
        ("window", c.window, 1, 32),
    ];
    for (k, v, lo, hi) in ranges {
        if let Some(v) = v.filter(|v| !(lo..=hi).contains(v)) {
            return Err(format!(
                "configuration {}: {k} {v} is out of range: no run has it",
                c.key()
            ));
        }
    }
    for (fewer, a, more, b) in [
        ("nodes", c.nodes, "ranks", c.ranks),
        ("ranks", c.ranks, "endpoints", c.endpoints),
    ] {
        if let (Some(a), Some(b)) = (a, b) {
            if a > b {
                return Err(format!("configuration {}: {a} {fewer} but {b} {more}", c.key()));
            }
        }
    }
    Ok(())
}

/// One series' rows: sizes once each, every figure as [`check_triple`] admits it, `wrong` a
/// whole count.
fn check_series(s: &ExSeries, tcpx_dir: bool) -> Result<(), String> {
    if s.rows.is_empty() {
        return Err(format!("configuration {}: no sizes", s.config.key()));
    }
    let factor = crate::validate::busbw_factor(&s.config.pattern, s.config.endpoints.map_or(f64::NAN, |e| e as f64));
    let mut last = None;
    for x in &s.rows {
        let at = |why: String| format!("configuration {} size {}: {why}", s.config.key(), x.size);
        if last.is_some_and(|l| l >= x.size) || i64::try_from(x.size).is_err() {
            return Err(at(
                "sizes out of order or given twice: history export writes each once, in order".into(),
            ));
        }
        last = Some(x.size);
        if let Some(w) = x.wrong.filter(|w| !(w.is_finite() && *w >= 0.0 && w.fract() == 0.0)) {
            return Err(at(format!("wrong {w} is not a count of bytes")));
        }
        check_triple(&x.summary, x.size, tcpx_dir, factor).map_err(at)?;
        for t in &x.samples {
            check_triple(t, x.size, tcpx_dir, factor).map_err(|e| at(format!("a sample: {e}")))?;
        }
        for t in x.nccl.iter().chain(&x.nccl_samples) {
            check_triple(t, x.size, false, None).map_err(|e| at(format!("NCCL's figures: {e}")))?;
        }
    }
    Ok(())
}

/// Whether `s` is a SHA-256 as `history add` writes one (64 lower-case hex digits).
fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Admits run `k` of export `name` as `history add` admits a run (an export is text anyone can
/// edit, and a history judges by what it stores): its identity, times and configurations well
/// formed; its figures finite, >= 0 and (a tcpx-perf result directory) consistent; its node
/// verdicts as summary.json's ([`crate::validate::check_node_verdicts`]); the marks its own
/// evidence needs (a size without a data check, a status `unchecked` or `below-min-bw`) named in
/// its `allowed`, which is what it was admitted under; and then the gate's refusals (wrong data,
/// a status other than ok). The record to store, with the time it was added.
fn admit_run(name: &str, k: usize, r: ExRun) -> Result<(RunRecord, String), Failure> {
    let at = format!("{name}: run {k} ({})", r.provenance.source);
    let bad = |why: String| Failure::Input(format!("{at}: {why}"));
    let pv = &r.provenance;
    if !is_sha256(&pv.content_sha256) {
        return Err(bad(format!(
            "content_sha256 {:?} is not a SHA-256 (64 hex digits), the identity history add gives a run",
            pv.content_sha256
        )));
    }
    for (what, t) in [("start time", &pv.start_time), ("added_at", &r.added_at)] {
        if !valid_time(t) {
            return Err(bad(format!("{what} {t:?} is not RFC 3339 UTC")));
        }
    }
    if !FORMATS.contains(&pv.format.as_str()) {
        return Err(bad(format!(
            "format {:?} is not one history add stores ({})",
            pv.format,
            FORMATS.join(", ")
        )));
    }
    let tcpx_dir = pv.format == "tcpx-perf-dir";
    if r.series.is_empty() {
        return Err(bad("no figures: history add stores a run with its sizes".into()));
    }
    let mut keys = Vec::new();
    for s in &r.series {
        check_config(&s.config, &pv.tool).map_err(&bad)?;
        if keys.contains(&s.config.key()) {
            return Err(bad(format!("configuration {} given twice", s.config.key())));
        }
        keys.push(s.config.key());
        check_series(s, tcpx_dir).map_err(&bad)?;
    }
    // Node verdicts come from a tcpx-perf result directory's summary.json, and are admitted by
    // its rule, the run's nodes being the hosts history add stored.
    if tcpx_dir {
        let hosts: Vec<serde_json::Value> = pv
            .hosts
            .iter()
            .flat_map(|h| h.split(','))
            .map(|h| serde_json::json!({ "hostname": h }))
            .collect();
        let doc = serde_json::json!({ "hosts": hosts, "node_verdicts": r.nodes });
        crate::validate::check_node_verdicts(&at, &doc)?;
    } else if !r.nodes.is_empty() {
        return Err(bad(format!(
            "node verdicts on a {} run: only a tcpx-perf result directory has them",
            pv.format
        )));
    }
    let allowed = waivers_named(r.allowed.as_deref()).map_err(&bad)?;
    // Sizes without a data check that no witness verified: an unchecked run's evidence.
    let unverified: Vec<String> = r
        .series
        .iter()
        .flat_map(|s| s.rows.iter().map(move |x| (s, x)))
        .filter(|(_, x)| x.wrong.is_none() && !x.verified)
        .map(|(s, x)| {
            format!(
                "{at}: size {} ({}): no data check (wrong is null) and no witness (verified is not true)",
                x.size, s.config.pattern
            )
        })
        .collect();
    let series: Vec<SeriesRecord> = r
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
        .collect();
    let mut run = gate_run(&r.provenance, r.allowed.as_ref(), &series);
    run.source.clone_from(&at);
    run.unverified = unverified;
    // The evidence alone decides what the run needs: the marks `as_run` read from the line are
    // what is checked against it, not part of it.
    run.waivers.clear();
    if r.status.as_deref() == Some("below-min-bw") {
        let why = format!("{at}: status is \"below-min-bw\"");
        run.waivers.push((Waiver::BelowMinBw, why));
    }
    run.status = r.status;
    // history add's policy (crate::admit::policy), with the line's marks for its flags: a mark
    // the evidence needs and the line does not name is refused, never added or dropped here.
    let needed = crate::admit::waivers(&run);
    if let Some((w, what)) = needed.iter().find(|(w, _)| !allowed.contains(w)) {
        return Err(Failure::Input(format!(
            "{what}: a {} run, but its line's allowed is {}: history add stores such a run only under {} and marked; export it again from its history, or add its result directory with {}",
            w.label(),
            r.allowed.as_deref().map_or("null".to_string(), |a| format!("{a:?}")),
            w.flag(),
            w.flag()
        )));
    }
    if !needed.is_empty() && matches!(run.status.as_deref(), Some("unchecked" | "below-min-bw")) {
        run.status = Some("ok".into());
    }
    let mut problems = Vec::new();
    crate::compare::check_runs(std::slice::from_ref(&run), "run", &mut problems);
    if !problems.is_empty() {
        return Err(Failure::Input(format!(
            "refused (as history add refuses it): {}",
            problems.join("; ")
        )));
    }
    let labels: Vec<&str> = allowed.iter().map(|w| w.label()).collect();
    let record = RunRecord {
        provenance: r.provenance,
        status: run.status.clone(),
        allowed: (!labels.is_empty()).then(|| labels.join(",")),
        series,
        nodes: r.nodes,
        run,
    };
    Ok((record, r.added_at))
}

/// The gate's view of a run of these series ([`as_run`] of each, as a stored run is read back),
/// without its samples, which neither a copy nor a refusal is decided by.
fn gate_run(pv: &Provenance, allowed: Option<&String>, series: &[SeriesRecord]) -> crate::model::Run {
    let mut run: Option<crate::model::Run> = None;
    for s in series {
        let stored = StoredRun {
            id: 0,
            provenance: pv.clone(),
            allowed: allowed.cloned(),
            rows: s
                .rows
                .iter()
                .map(|x| StoredRow {
                    samples: Vec::new(),
                    nccl_samples: Vec::new(),
                    ..x.clone()
                })
                .collect(),
        };
        let one = as_run(&s.config, &stored);
        match &mut run {
            None => run = Some(one),
            Some(r) => r.series.extend(one.series),
        }
    }
    run.unwrap_or_else(|| crate::model::Run::new(&pv.source, crate::model::Format::TcpxPerfDir))
}

/// What an import did.
pub struct Imported {
    pub added: usize,
    pub present: usize,
    /// Runs left alone as copies of stored runs under other bytes, one line each.
    pub copies: Vec<String>,
}

/// Imports an export into `db` (see the module comment).
pub fn import(db: &Db, export: Export) -> Result<Imported, Failure> {
    let mut done = Imported {
        added: 0,
        present: 0,
        copies: Vec::new(),
    };
    let name = export.name;
    for (k, (record, added_at)) in export.runs.iter().enumerate() {
        // history add's own store: the identity, then a copy under other bytes, under the lock.
        match db.add(record, added_at) {
            Ok(Added::New(_)) => done.added += 1,
            Ok(Added::Present(_)) => done.present += 1,
            Ok(Added::Copy(id, why)) => {
                done.present += 1;
                done.copies.push(format!(
                    "run {} of {name} ({}) is stored run {id}, the same run ({why}): left alone",
                    k + 1,
                    record.provenance.source
                ));
            }
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

/// The metadata of an open standard stream, through a duplicate of its descriptor.
fn stream_metadata(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<std::fs::Metadata> {
    std::fs::File::from(fd.try_clone_to_owned()?).metadata()
}

/// Whether `m` is the file of the database at `db` (a server's database is no file).
fn is_database(m: &std::fs::Metadata, db: &Location) -> bool {
    use std::os::unix::fs::MetadataExt;
    match db {
        Location::File(p) => std::fs::metadata(p).is_ok_and(|d| d.dev() == m.dev() && d.ino() == m.ino()),
        Location::Postgres(_) => false,
    }
}

/// Standard input as the export `history import -` reads, bounded as a named file is: a pipe, or
/// a regular file within [`tcpx_files::Bound::HISTORY_EXPORT`] that is not the database `db` the
/// import writes; a terminal or another device (`< /dev/zero`) or a directory is refused at once,
/// before a byte is read. ([`Lines`] bounds what a pipe gives.)
pub fn stdin_export(db: &Location) -> Result<Box<dyn BufRead>, Failure> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::io::stdin();
    let m = stream_metadata(stdin.as_fd()).map_err(|e| Failure::Input(format!("standard input: {e}")))?;
    let t = m.file_type();
    let bound = tcpx_files::Bound::HISTORY_EXPORT;
    if t.is_file() {
        if is_database(&m, db) {
            return Err(Failure::Input(format!(
                "standard input is {db}, the database this import writes: import an export of it (`history export -o FILE`), never the database itself"
            )));
        }
        if m.len() > bound.max_bytes {
            return Err(Failure::Input(format!(
                "standard input: {} MiB, more than {} may be ({} MiB): not one; give the export itself",
                m.len() >> 20,
                bound.what,
                bound.max_bytes >> 20
            )));
        }
    } else if !(t.is_fifo() || t.is_socket()) {
        let kind = if t.is_char_device() {
            "a character device (a terminal, /dev/zero)"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_dir() {
            "a directory"
        } else {
            "neither a file nor a pipe"
        };
        return Err(Failure::Input(format!(
            "standard input is {kind}, not a history export: pipe one in (`history export -o - | history import -`) or name its file"
        )));
    }
    Ok(Box::new(stdin.lock()))
}

/// Refuses standard output that is the database `history export -o -` reads (`>> DB`): the
/// export would be appended to the file it is read from, past SQLite's pages.
pub fn refuse_stdout_database(db: &Location) -> Result<(), Failure> {
    use std::os::fd::AsFd;
    let Ok(m) = stream_metadata(std::io::stdout().as_fd()) else {
        return Ok(());
    };
    if m.file_type().is_file() && is_database(&m, db) {
        return Err(Failure::Input(format!(
            "standard output is {db}, the database this export reads: write the export to another file (-o FILE, or > FILE)"
        )));
    }
    Ok(())
}
