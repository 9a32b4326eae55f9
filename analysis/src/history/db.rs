//! The history database: an SQLite file (the default) or a PostgreSQL database, through
//! [`super::backend`], with one schema, versioned and brought up to date by the migrations below
//! in one write transaction that first reads the version (concurrent first writers wait on each
//! other, each within its timeout, instead of both creating the tables). A database is a
//! history only where it says so itself: our schema table `tcpx_history_schema` with one
//! version (or, in SQLite from before that table, a `user_version` whose tables are exactly
//! those our migrations made). An empty database (nothing in any schema) becomes one on the
//! first `history add`; anything else is another program's and is refused before a single
//! statement changes it, by writers and readers alike. A database written by a newer
//! tcpx-analyze (a higher version) is refused, not guessed at; readers (`detect`, `report`,
//! `gate --history`, `nodes`, `export`) open it read-only.
//!
//! Each run is stored in one transaction of its own, whole or not at all; its identity (the
//! SHA-256 of its files) is unique, so a run is stored once whoever adds it and however often.

use super::backend::{self, Conn, Row, Value};
use super::location::Location;
use super::model::{Config, NodeVerdict, Provenance, RunRecord, Sample, SeriesRecord, StoredRow, StoredRun};
use crate::error::Failure;
use std::cell::{RefCell, RefMut};
use std::collections::HashMap;
use std::path::Path;

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: configurations, runs with their provenance, per-size figures, per-iteration samples.
    "CREATE TABLE configs (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        pattern TEXT NOT NULL,
        variant TEXT NOT NULL,
        scope TEXT, dir TEXT, mem TEXT,
        ranks INTEGER, endpoints INTEGER, nodes INTEGER,
        plugin TEXT, chunk INTEGER, channels INTEGER, \"window\" INTEGER
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        content_sha256 TEXT NOT NULL UNIQUE,
        source TEXT NOT NULL,
        format TEXT NOT NULL,
        tool TEXT NOT NULL,
        start_time TEXT NOT NULL,
        time_from TEXT NOT NULL,
        git_commit TEXT,
        plugin_sha256 TEXT,
        hosts TEXT,
        nccl_version TEXT,
        status TEXT,
        added_at TEXT NOT NULL
    );
    CREATE TABLE results (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_id INTEGER NOT NULL REFERENCES configs(id),
        size_bytes INTEGER NOT NULL,
        time_us REAL NOT NULL,
        algbw_gbps REAL NOT NULL,
        busbw_gbps REAL NOT NULL,
        wrong REAL,
        nccl_time_us REAL,
        nccl_algbw_gbps REAL,
        nccl_busbw_gbps REAL,
        UNIQUE (run_id, config_id, size_bytes)
    );
    CREATE INDEX results_by_config ON results (config_id, size_bytes);
    CREATE TABLE samples (
        result_id INTEGER NOT NULL REFERENCES results(id),
        source TEXT NOT NULL CHECK (source IN ('run', 'nccl')),
        iter INTEGER NOT NULL,
        time_us REAL NOT NULL,
        algbw_gbps REAL NOT NULL,
        busbw_gbps REAL NOT NULL,
        PRIMARY KEY (result_id, source, iter)
    );",
    // 2: the result directory a stdout log says it wrote (the same run as that directory), and
    // the waivers a run was added under (`--allow-forced`, ...), which every verdict must name.
    "ALTER TABLE runs ADD COLUMN result_dir TEXT;
    ALTER TABLE runs ADD COLUMN allowed TEXT;",
    // 3: tcpx-perf's verdict per node of a run (summary.json `node_verdicts`): `history nodes`.
    "CREATE TABLE node_verdicts (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        host TEXT NOT NULL,
        verdict TEXT NOT NULL,
        evidence TEXT NOT NULL,
        PRIMARY KEY (run_id, host)
    );",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What a database says it is.
enum Found {
    /// A tcpx-analyze history: its schema version, and whether it carries the schema table
    /// (an SQLite history of a build from before the table carries `user_version` only).
    History(i64, bool),
    /// Nothing in it at all: a history only once `history add` (or import) makes it one.
    Empty,
    /// Anything else: another program's, never read as a history nor written into.
    Foreign,
}

/// The tables migrations `..version` make in SQLite: what an SQLite history of that version
/// from before the schema table holds, and nothing else.
fn sqlite_tables_of(version: i64) -> Result<backend::SqliteTables, rusqlite::Error> {
    let c = rusqlite::Connection::open_in_memory()?;
    for m in &MIGRATIONS[..version.clamp(0, SCHEMA_VERSION) as usize] {
        c.execute_batch(m)?;
    }
    backend::sqlite_tables(&c)
}

/// Reads what the database says it is, changing nothing: ours only where it says so
/// positively (the schema table with one version, or, in SQLite from before the table, a
/// `user_version` whose tables are exactly the ones our migrations made).
fn identify(conn: &mut Conn) -> Result<Found, String> {
    if let Some(v) = conn.marked_version()? {
        return Ok(Found::History(v, true));
    }
    if conn.is_empty()? {
        return Ok(Found::Empty);
    }
    if let Some((v, tables)) = conn.sqlite_tables()? {
        if (1..=SCHEMA_VERSION).contains(&v) && tables == sqlite_tables_of(v).map_err(|e| e.to_string())? {
            return Ok(Found::History(v, false));
        }
    }
    Ok(Found::Foreign)
}

/// What the database is, refused unless this build may use it: a history of a version it
/// reads, or (`writable`) an empty database it makes one. Nothing is written before this says
/// yes.
fn check(conn: &mut Conn, name: &str, writable: bool) -> Result<Found, Failure> {
    let found = identify(conn).map_err(|e| Failure::Input(format!("{name}: database error: {e}")))?;
    let kind = conn.kind();
    let a = if kind == "SQLite" { "an" } else { "a" };
    match found {
        Found::History(v, _) if v > SCHEMA_VERSION => Err(Failure::Input(format!(
            "{name}: schema version {v} is newer than this tcpx-analyze's ({SCHEMA_VERSION}): use a newer tcpx-analyze"
        ))),
        Found::History(v, _) if v < 1 => Err(Failure::Input(format!(
            "{name}: its table {} does not hold one valid schema version: not a history this tcpx-analyze reads or writes; give another --db",
            backend::VERSION_TABLE
        ))),
        Found::Empty if !writable => Err(Failure::Input(format!(
            "{name}: an empty {kind} database, not a tcpx-analyze history (create one with `history add --db {name} RUN...`)"
        ))),
        Found::Foreign => Err(Failure::Input(format!(
            "{name}: {a} {kind} database of another program (it holds {}, but no tcpx-analyze schema table {}): not a history, left as it is; give another --db",
            if kind == "SQLite" { "tables or a user_version" } else { "tables, in some schema" },
            backend::VERSION_TABLE
        ))),
        f => Ok(f),
    }
}

/// An open history database.
pub struct Db {
    conn: RefCell<Conn>,
    /// The file, or the URL without its password: what messages name.
    name: String,
}

/// What `add` did with one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    New(i64),
    /// Already stored (same bytes): nothing written.
    Present(i64),
    /// The same run is stored under other bytes (a copy, its stdout log): why; nothing written.
    Copy(i64, String),
}

/// How long an SQLite writer waits for another's lock before failing loudly.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Db {
    /// Opens an SQLite file: `create` (history add) creates or migrates it to
    /// [`SCHEMA_VERSION`]; otherwise read-only, and it must already be a tcpx-analyze history of
    /// this version.
    pub fn open(path: &Path, create: bool) -> Result<Db, Failure> {
        Db::open_at(&Location::File(path.to_path_buf()), create)
    }

    /// Opens the history at `loc` (a file or a PostgreSQL database), as [`Db::open`].
    pub fn open_at(loc: &Location, create: bool) -> Result<Db, Failure> {
        let conn = match loc {
            Location::File(p) => open_file(p, create)?,
            Location::Postgres(u) => super::backend::connect_postgres(u, !create).map_err(Failure::Input)?,
        };
        let db = Db {
            conn: RefCell::new(conn),
            name: loc.to_string(),
        };
        if create {
            db.migrate()?;
        } else {
            // The version and the tables in one snapshot: between two separate reads a first
            // `history add` can commit its tables, and a history being made looked like another
            // program's database (history_postgres's concurrent gate, once).
            let v = {
                let mut c = db.conn.borrow_mut();
                c.begin_read().map_err(|e| db.fail(e))?;
                match check(&mut c, &db.name, false) {
                    Ok(found) => {
                        c.commit().map_err(|e| db.fail(e))?;
                        match found {
                            Found::History(v, _) => v,
                            Found::Empty | Found::Foreign => 0,
                        }
                    }
                    Err(e) => {
                        c.rollback();
                        return Err(e);
                    }
                }
            };
            if v < SCHEMA_VERSION {
                return Err(Failure::Input(format!(
                    "{}: schema version {v} is older than this tcpx-analyze's ({SCHEMA_VERSION}); `history add --db {} RUN...` migrates it",
                    db.name, db.name
                )));
            }
        }
        Ok(db)
    }

    /// The file, or the URL without its password.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The connection, for the history's own modules (export/import).
    pub(crate) fn conn(&self) -> RefMut<'_, Conn> {
        self.conn.borrow_mut()
    }

    pub(crate) fn fail(&self, e: String) -> Failure {
        Failure::Input(format!("{}: database error: {e}", self.name))
    }

    /// Brings the schema up to date in one write transaction: the version is read under the
    /// write lock, so of several first writers one creates the tables and the others find them;
    /// a database that is neither a history nor empty is refused before any statement changes it.
    fn migrate(&self) -> Result<(), Failure> {
        let mut c = self.conn.borrow_mut();
        c.begin_write().map_err(|e| self.fail(e))?;
        let r = (|| {
            let (version, marked) = match check(&mut c, &self.name, true)? {
                Found::History(v, marked) => (v, marked),
                Found::Empty | Found::Foreign => (0, false),
            };
            for m in MIGRATIONS.iter().skip(version as usize) {
                let sql = c.ddl(m);
                c.batch(&sql).map_err(|e| self.fail(e))?;
            }
            // A history from before the schema table gets it with its first write.
            if version < SCHEMA_VERSION || !marked {
                c.set_schema_version(SCHEMA_VERSION).map_err(|e| self.fail(e))?;
            }
            c.commit().map_err(|e| self.fail(e))
        })();
        if r.is_err() {
            c.rollback();
        }
        r
    }

    /// The schema version of the database (0: none; another program's database has none).
    pub fn schema_version(&self) -> Result<i64, Failure> {
        match identify(&mut self.conn.borrow_mut()).map_err(|e| self.fail(e))? {
            Found::History(v, _) => Ok(v),
            Found::Empty | Found::Foreign => Ok(0),
        }
    }

    /// Sets the stored schema version (tests of the version check: a database from a newer build).
    #[doc(hidden)]
    pub fn set_schema_version_for_tests(&self, v: i64) -> Result<(), Failure> {
        self.conn.borrow_mut().set_schema_version(v).map_err(|e| self.fail(e))
    }

    /// Stores one run in one transaction; a run whose content is already stored is left alone.
    pub fn add(&self, record: &RunRecord, added_at: &str) -> Result<Added, Failure> {
        let mut c = self.conn.borrow_mut();
        // One writer at a time: two `history add` at once must not both see a run as absent.
        c.begin_write().map_err(|e| self.fail(e))?;
        let r = add_in(&mut c, record, added_at);
        finish(&mut c, r).map_err(|e| self.fail(e))
    }

    /// Every configuration, by key.
    pub fn configs(&self) -> Result<Vec<(i64, Config)>, Failure> {
        configs_in(&mut self.conn.borrow_mut()).map_err(|e| self.fail(e))
    }

    /// The runs of one configuration in time order (start time, then the order they were added),
    /// each with its rows by size (samples included when `with_samples`), read in one snapshot.
    pub fn runs_of(&self, config_id: i64, with_samples: bool) -> Result<Vec<StoredRun>, Failure> {
        let mut c = self.conn.borrow_mut();
        c.begin_read().map_err(|e| self.fail(e))?;
        let r = runs_in(&mut c, config_id, with_samples);
        finish(&mut c, r).map_err(|e| self.fail(e))
    }

    /// Every stored node verdict with its run: (run id, start time, verdict), oldest run first.
    pub fn node_verdicts(&self) -> Result<Vec<(i64, String, NodeVerdict)>, Failure> {
        let rows = self
            .conn
            .borrow_mut()
            .rows(
                "SELECT r.id, r.start_time, n.host, n.verdict, n.evidence FROM node_verdicts n
                 JOIN runs r ON r.id = n.run_id ORDER BY r.start_time, r.id, n.host",
                &[],
            )
            .map_err(|e| self.fail(e))?;
        let read = |x: &Row| -> Result<_, String> {
            Ok((
                x.int(0)?,
                x.text(1)?,
                NodeVerdict {
                    host: x.text(2)?,
                    verdict: x.text(3)?,
                    evidence: x.text(4)?,
                },
            ))
        };
        rows.iter()
            .map(read)
            .collect::<Result<_, _>>()
            .map_err(|e| self.fail(e))
    }

    /// Number of runs stored.
    pub fn run_count(&self) -> Result<i64, Failure> {
        let row = self
            .conn
            .borrow_mut()
            .one("SELECT COUNT(*) FROM runs", &[])
            .map_err(|e| self.fail(e))?;
        row.map_or(Ok(0), |r| r.int(0)).map_err(|e| self.fail(e))
    }
}

/// Opens an SQLite file (see [`Db::open`]).
fn open_file(path: &Path, create: bool) -> Result<Conn, Failure> {
    let name = path.display();
    let sql = |e: rusqlite::Error| Failure::Input(format!("{name}: database error: {e}"));
    if !create && !path.exists() {
        return Err(Failure::Input(format!(
            "{name}: no such history database (create it with `tcpx-analyze history add --db {name} RUN...`)"
        )));
    }
    if !create && std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
        return Err(Failure::Input(format!(
            "{name}: an empty file, not a tcpx-analyze history database (create one with `history add --db FILE RUN...`; this file is left alone)"
        )));
    }
    // A database read is an input of the command: no output of it may replace it
    // (tcpx_files::claim_output). Its directory is never made: `history add` claims the path.
    if !create {
        tcpx_files::note_input(path);
    }
    // Never through a link: a database name that is a symbolic link is refused, naming it
    // (SQLite's NOFOLLOW alone says only "unable to open database file").
    tcpx_files::refuse_non_file(path).map_err(|e| Failure::Input(e.to_string()))?;
    let flags = if create {
        rusqlite::OpenFlags::default()
    } else {
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
    };
    let conn =
        rusqlite::Connection::open_with_flags(path, flags | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW).map_err(sql)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
    if create {
        conn.execute_batch("PRAGMA foreign_keys = ON;").map_err(sql)?;
    }
    Ok(Conn::Sqlite(conn))
}

/// Ends the transaction: committed when `r` is Ok, rolled back otherwise.
fn finish<T>(c: &mut Conn, r: Result<T, String>) -> Result<T, String> {
    match r {
        Ok(v) => c.commit().map(|()| v),
        Err(e) => {
            c.rollback();
            Err(e)
        }
    }
}

/// The id of the run stored with this identity, if any.
fn present(c: &mut Conn, sha: &str) -> Result<Option<i64>, String> {
    c.one("SELECT id FROM runs WHERE content_sha256 = ?1", &[sha.into()])?
        .map(|r| r.int(0))
        .transpose()
}

/// `add`'s work inside its transaction.
fn add_in(c: &mut Conn, record: &RunRecord, added_at: &str) -> Result<Added, String> {
    if let Some(id) = present(c, &record.provenance.content_sha256)? {
        return Ok(Added::Present(id));
    }
    // Under the same lock: the same run stored under other bytes (the gate's own test of a
    // copy, against every stored run of the same tool and pattern: a stdout log keys its
    // configuration with fewer fields than its result directory).
    let configs = configs_in(c)?;
    for s in &record.series {
        for (cid, cfg) in &configs {
            if cfg.tool != s.config.tool || cfg.pattern != s.config.pattern {
                continue;
            }
            for stored in runs_in(c, *cid, false)? {
                if let Some(why) = crate::admit::same_run(&super::model::as_run(cfg, &stored), &record.run) {
                    return Ok(Added::Copy(stored.id, why));
                }
            }
        }
    }
    write_run(c, record, added_at)
}

/// The id of a configuration, stored first when new.
fn config_id(c: &mut Conn, cfg: &Config) -> Result<i64, String> {
    let key = cfg.key();
    if let Some(r) = c.one("SELECT id FROM configs WHERE key = ?1", &[key.as_str().into()])? {
        return r.int(0);
    }
    let p: Vec<Value> = vec![
        key.into(),
        cfg.tool.as_str().into(),
        cfg.pattern.as_str().into(),
        cfg.variant.as_str().into(),
        (&cfg.scope).into(),
        (&cfg.dir).into(),
        (&cfg.mem).into(),
        cfg.ranks.into(),
        cfg.endpoints.into(),
        cfg.nodes.into(),
        (&cfg.plugin).into(),
        cfg.chunk.into(),
        cfg.channels.into(),
        cfg.window.into(),
    ];
    c.one(
        "INSERT INTO configs (key, tool, pattern, variant, scope, dir, mem, ranks, endpoints, nodes, plugin, chunk, channels, \"window\")
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) RETURNING id",
        &p,
    )?
    .ok_or("no id returned for a new configuration")?
    .int(0)
}

/// Writes a run that is not stored yet (inside the caller's write transaction).
fn write_run(c: &mut Conn, record: &RunRecord, added_at: &str) -> Result<Added, String> {
    let r = &record.provenance;
    let p: Vec<Value> = vec![
        r.content_sha256.as_str().into(),
        r.source.as_str().into(),
        r.format.as_str().into(),
        r.tool.as_str().into(),
        r.start_time.as_str().into(),
        r.time_from.as_str().into(),
        (&r.git_commit).into(),
        (&r.plugin_sha256).into(),
        (&r.hosts).into(),
        (&r.nccl_version).into(),
        (&record.status).into(),
        added_at.into(),
        (&r.result_dir).into(),
        (&record.allowed).into(),
    ];
    let Some(row) = c.one(
        "INSERT INTO runs (content_sha256, source, format, tool, start_time, time_from, git_commit, plugin_sha256, hosts, nccl_version, status, added_at, result_dir, allowed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT (content_sha256) DO NOTHING RETURNING id",
        &p,
    )?
    else {
        // Stored by another writer meanwhile (the identity is unique): nothing written.
        return present(c, &r.content_sha256)?.map(Added::Present).ok_or("a run neither stored nor new".into());
    };
    let run_id = row.int(0)?;
    for n in &record.nodes {
        c.exec(
            "INSERT INTO node_verdicts (run_id, host, verdict, evidence) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (run_id, host) DO UPDATE SET verdict = excluded.verdict, evidence = excluded.evidence",
            &[
                run_id.into(),
                n.host.as_str().into(),
                n.verdict.as_str().into(),
                n.evidence.as_str().into(),
            ],
        )?;
    }
    for s in &record.series {
        write_series(c, run_id, s)?;
    }
    Ok(Added::New(run_id))
}

fn write_series(c: &mut Conn, run_id: i64, s: &SeriesRecord) -> Result<(), String> {
    let cid = config_id(c, &s.config)?;
    for row in &s.rows {
        let p: Vec<Value> = vec![
            run_id.into(),
            cid.into(),
            (row.size as i64).into(),
            row.summary.time_us.into(),
            row.summary.algbw.into(),
            row.summary.busbw.into(),
            row.wrong.into(),
            row.nccl.map(|n| n.time_us).into(),
            row.nccl.map(|n| n.algbw).into(),
            row.nccl.map(|n| n.busbw).into(),
        ];
        let rid = c
            .one(
                "INSERT INTO results (run_id, config_id, size_bytes, time_us, algbw_gbps, busbw_gbps, wrong, nccl_time_us, nccl_algbw_gbps, nccl_busbw_gbps)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id",
                &p,
            )?
            .ok_or("no id returned for a new result")?
            .int(0)?;
        for (src, list) in [("run", &row.samples), ("nccl", &row.nccl_samples)] {
            for (i, x) in list.iter().enumerate() {
                c.exec(
                    "INSERT INTO samples (result_id, source, iter, time_us, algbw_gbps, busbw_gbps) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    &[rid.into(), src.into(), (i as i64).into(), x.time_us.into(), x.algbw.into(), x.busbw.into()],
                )?;
            }
        }
    }
    Ok(())
}

/// Every configuration, by key.
fn configs_in(c: &mut Conn) -> Result<Vec<(i64, Config)>, String> {
    let rows = c.rows(
        "SELECT id, tool, pattern, variant, scope, dir, mem, ranks, endpoints, nodes, plugin, chunk, channels, \"window\" FROM configs ORDER BY key",
        &[],
    )?;
    rows.iter()
        .map(|r| {
            Ok((
                r.int(0)?,
                Config {
                    tool: r.text(1)?,
                    pattern: r.text(2)?,
                    variant: r.text(3)?,
                    scope: r.opt_text(4)?,
                    dir: r.opt_text(5)?,
                    mem: r.opt_text(6)?,
                    ranks: r.opt_int(7)?,
                    endpoints: r.opt_int(8)?,
                    nodes: r.opt_int(9)?,
                    plugin: r.opt_text(10)?,
                    chunk: r.opt_int(11)?,
                    channels: r.opt_int(12)?,
                    window: r.opt_int(13)?,
                },
            ))
        })
        .collect()
}

/// A run's provenance columns, from `source` on (see [`runs_in`]).
pub(crate) fn provenance(r: &Row, at: usize) -> Result<Provenance, String> {
    Ok(Provenance {
        source: r.text(at)?,
        format: r.text(at + 1)?,
        tool: r.text(at + 2)?,
        start_time: r.text(at + 3)?,
        time_from: r.text(at + 4)?,
        git_commit: r.opt_text(at + 5)?,
        plugin_sha256: r.opt_text(at + 6)?,
        hosts: r.opt_text(at + 7)?,
        nccl_version: r.opt_text(at + 8)?,
        content_sha256: r.text(at + 9)?,
        result_dir: r.opt_text(at + 10)?,
    })
}

/// The columns [`provenance`] reads, in its order.
pub(crate) const PROVENANCE: &str =
    "source, format, tool, start_time, time_from, git_commit, plugin_sha256, hosts, nccl_version, content_sha256, result_dir";

fn sample(r: &Row, at: usize) -> Result<Sample, String> {
    Ok(Sample {
        time_us: r.real(at)?,
        algbw: r.real(at + 1)?,
        busbw: r.real(at + 2)?,
    })
}

/// A result row (`size_bytes, time_us, algbw, busbw, wrong, nccl time, algbw, busbw` from `at`).
pub(crate) fn stored_row(r: &Row, at: usize) -> Result<StoredRow, String> {
    let nccl = match (r.opt_real(at + 5)?, r.opt_real(at + 6)?, r.opt_real(at + 7)?) {
        (Some(t), Some(a), Some(b)) => Some(Sample {
            time_us: t,
            algbw: a,
            busbw: b,
        }),
        _ => None,
    };
    Ok(StoredRow {
        size: r.int(at)? as u64,
        summary: sample(r, at + 1)?,
        wrong: r.opt_real(at + 4)?,
        nccl,
        samples: Vec::new(),
        nccl_samples: Vec::new(),
    })
}

/// The result columns [`stored_row`] reads, in its order.
pub(crate) const RESULT: &str =
    "size_bytes, time_us, algbw_gbps, busbw_gbps, wrong, nccl_time_us, nccl_algbw_gbps, nccl_busbw_gbps";

/// The runs of configuration `config_id` (see [`Db::runs_of`]).
fn runs_in(c: &mut Conn, config_id: i64, with_samples: bool) -> Result<Vec<StoredRun>, String> {
    let cid = [Value::Int(config_id)];
    let rows = c.rows(
        &format!(
            "SELECT DISTINCT runs.id, allowed, {PROVENANCE} FROM runs JOIN results ON results.run_id = runs.id
             WHERE results.config_id = ?1 ORDER BY start_time, runs.id"
        ),
        &cid,
    )?;
    let mut runs = rows
        .iter()
        .map(|r| {
            Ok(StoredRun {
                id: r.int(0)?,
                allowed: r.opt_text(1)?,
                provenance: provenance(r, 2)?,
                rows: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let place: HashMap<i64, usize> = runs.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    // Where each result went: (run, row).
    let mut result_at: HashMap<i64, (usize, usize)> = HashMap::new();
    for r in c.rows(
        &format!("SELECT run_id, id, {RESULT} FROM results WHERE config_id = ?1 ORDER BY run_id, size_bytes"),
        &cid,
    )? {
        let Some(&k) = place.get(&r.int(0)?) else { continue };
        runs[k].rows.push(stored_row(&r, 2)?);
        result_at.insert(r.int(1)?, (k, runs[k].rows.len() - 1));
    }
    if with_samples {
        for s in c.rows(
            "SELECT s.result_id, s.source, s.time_us, s.algbw_gbps, s.busbw_gbps FROM samples s
             JOIN results r ON r.id = s.result_id WHERE r.config_id = ?1 ORDER BY s.result_id, s.source, s.iter",
            &cid,
        )? {
            let Some(&(k, j)) = result_at.get(&s.int(0)?) else {
                continue;
            };
            let row = &mut runs[k].rows[j];
            let x = sample(&s, 2)?;
            if s.text(1)? == "run" {
                row.samples.push(x);
            } else {
                row.nccl_samples.push(x);
            }
        }
    }
    Ok(runs)
}

/// Sets the schema version of an SQLite file, its schema table and `PRAGMA user_version` (tests
/// of the version check: a database from a newer build).
#[doc(hidden)]
pub fn set_user_version_for_tests(path: &Path, v: i64) -> Result<(), Failure> {
    let c = rusqlite::Connection::open(path).map_err(|e| Failure::Input(format!("{}: {e}", path.display())))?;
    Conn::Sqlite(c)
        .set_schema_version(v)
        .map_err(|e| Failure::Input(format!("{}: {e}", path.display())))
}
