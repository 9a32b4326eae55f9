//! The history database: one SQLite file (rusqlite, SQLite compiled in), its schema versioned by
//! `PRAGMA user_version` and brought up to date by the migrations below, all in one IMMEDIATE
//! transaction that first reads the version (concurrent first writers wait on each other, each
//! within the busy timeout, instead of both creating the tables). A file written by a newer
//! tcpx-analyze (a higher version) is refused, not guessed at; readers (`detect`, `report`,
//! `gate --history`) open read-only and refuse a file that is not a tcpx-analyze history (empty,
//! or another program's SQLite) instead of writing into it.

use super::model::{Config, NodeVerdict, Provenance, RunRecord, Sample, StoredRow, StoredRun};
use crate::error::Failure;
use rusqlite::{params, Connection, OptionalExtension};
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
        plugin TEXT, chunk INTEGER, channels INTEGER, window INTEGER
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

fn sql(path: &Path, e: rusqlite::Error) -> Failure {
    Failure::Input(format!("{}: database error: {e}", path.display()))
}

/// Refuses a version this build cannot read: newer than [`SCHEMA_VERSION`], negative, or 0 with
/// tables in the file (another program's database, never to be written into).
fn check_version(conn: &Connection, p: &Path, version: i64, writable: bool) -> Result<(), Failure> {
    if version > SCHEMA_VERSION {
        return Err(Failure::Input(format!(
            "{}: schema version {version} is newer than this tcpx-analyze's ({SCHEMA_VERSION}): use a newer tcpx-analyze",
            p.display()
        )));
    }
    if version < 0 {
        return Err(Failure::Input(format!(
            "{}: schema version {version} is invalid",
            p.display()
        )));
    }
    if version == 0 {
        let tables: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| sql(p, e))?;
        if tables > 0 {
            return Err(Failure::Input(format!(
                "{}: an SQLite database of another program (tables, no tcpx-analyze schema version): not a history; give another --db",
                p.display()
            )));
        }
        if writable {
            return Ok(());
        }
        return Err(Failure::Input(format!(
            "{}: an empty SQLite database, not a tcpx-analyze history (create one with `history add --db FILE RUN...`)",
            p.display()
        )));
    }
    Ok(())
}

/// An open history database.
pub struct Db {
    conn: Connection,
    path: std::path::PathBuf,
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

/// How long a writer waits for another's lock before failing loudly.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Db {
    /// Opens the database: `create` (history add) creates or migrates it to [`SCHEMA_VERSION`];
    /// otherwise read-only, and it must already be a tcpx-analyze history of this version.
    pub fn open(path: &Path, create: bool) -> Result<Db, Failure> {
        let name = path.display();
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
        let conn = Connection::open_with_flags(path, flags | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW)
            .map_err(|e| sql(path, e))?;
        let mut db = Db {
            conn,
            path: path.to_path_buf(),
        };
        db.conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| sql(path, e))?;
        if create {
            db.conn
                .execute_batch("PRAGMA foreign_keys = ON;")
                .map_err(|e| sql(path, e))?;
            db.migrate()?;
        } else {
            let v = db.schema_version()?;
            check_version(&db.conn, path, v, false)?;
            if v < SCHEMA_VERSION {
                return Err(Failure::Input(format!(
                    "{name}: schema version {v} is older than this tcpx-analyze's ({SCHEMA_VERSION}); `history add --db {name} RUN...` migrates it"
                )));
            }
        }
        Ok(db)
    }

    /// Brings the schema up to date in one IMMEDIATE transaction: the version is read under the
    /// write lock, so of several first writers one creates the tables and the others find them.
    fn migrate(&mut self) -> Result<(), Failure> {
        let p = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql(&p, e))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sql(&p, e))?;
        check_version(&tx, &p, version, true)?;
        for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(m).map_err(|e| sql(&p, e))?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))
                .map_err(|e| sql(&p, e))?;
        }
        tx.commit().map_err(|e| sql(&p, e))
    }

    pub fn schema_version(&self) -> Result<i64, Failure> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sql(&self.path, e))
    }

    fn config_id(tx: &rusqlite::Transaction, c: &Config) -> rusqlite::Result<i64> {
        let key = c.key();
        if let Some(id) = tx
            .query_row("SELECT id FROM configs WHERE key = ?1", [&key], |r| r.get(0))
            .optional()?
        {
            return Ok(id);
        }
        tx.execute(
            "INSERT INTO configs (key, tool, pattern, variant, scope, dir, mem, ranks, endpoints, nodes, plugin, chunk, channels, window)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                key, c.tool, c.pattern, c.variant, c.scope, c.dir, c.mem, c.ranks, c.endpoints, c.nodes, c.plugin,
                c.chunk, c.channels, c.window
            ],
        )?;
        Ok(tx.last_insert_rowid())
    }

    /// Stores one run in one transaction; a run whose content is already stored is left alone.
    pub fn add(&mut self, record: &RunRecord, added_at: &str) -> Result<Added, Failure> {
        let p = self.path.clone();
        let r = &record.provenance;
        // IMMEDIATE: two `history add` at once must not both see a run as absent.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql(&p, e))?;
        let present: Option<i64> = tx
            .query_row(
                "SELECT id FROM runs WHERE content_sha256 = ?1",
                [&r.content_sha256],
                |x| x.get(0),
            )
            .optional()
            .map_err(|e| sql(&p, e))?;
        if let Some(id) = present {
            return Ok(Added::Present(id));
        }
        // Under the same lock: the same run stored under other bytes (the gate's own test of a
        // copy, against every stored run of the same tool and pattern: a stdout log keys its
        // configuration with fewer fields than its result directory).
        for s in &record.series {
            for (cid, c) in configs_in(&tx, &p)? {
                if c.tool != s.config.tool || c.pattern != s.config.pattern {
                    continue;
                }
                for stored in runs_in(&tx, &p, cid, false)? {
                    if let Some(why) = crate::admit::same_run(&super::model::as_run(&c, &stored), &record.run) {
                        return Ok(Added::Copy(stored.id, why));
                    }
                }
            }
        }
        let write = || -> rusqlite::Result<i64> {
            tx.execute(
                "INSERT INTO runs (content_sha256, source, format, tool, start_time, time_from, git_commit, plugin_sha256, hosts, nccl_version, status, added_at, result_dir, allowed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    r.content_sha256, r.source, r.format, r.tool, r.start_time, r.time_from, r.git_commit,
                    r.plugin_sha256, r.hosts, r.nccl_version, record.status, added_at, r.result_dir, record.allowed
                ],
            )?;
            let run_id = tx.last_insert_rowid();
            for n in &record.nodes {
                tx.execute(
                    "INSERT OR REPLACE INTO node_verdicts (run_id, host, verdict, evidence) VALUES (?1, ?2, ?3, ?4)",
                    params![run_id, n.host, n.verdict, n.evidence],
                )?;
            }
            for s in &record.series {
                let cid = Self::config_id(&tx, &s.config)?;
                for row in &s.rows {
                    tx.execute(
                        "INSERT INTO results (run_id, config_id, size_bytes, time_us, algbw_gbps, busbw_gbps, wrong, nccl_time_us, nccl_algbw_gbps, nccl_busbw_gbps)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![
                            run_id,
                            cid,
                            row.size as i64,
                            row.summary.time_us,
                            row.summary.algbw,
                            row.summary.busbw,
                            row.wrong,
                            row.nccl.map(|n| n.time_us),
                            row.nccl.map(|n| n.algbw),
                            row.nccl.map(|n| n.busbw)
                        ],
                    )?;
                    let rid = tx.last_insert_rowid();
                    let mut st = tx.prepare_cached(
                        "INSERT INTO samples (result_id, source, iter, time_us, algbw_gbps, busbw_gbps) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?;
                    for (src, list) in [("run", &row.samples), ("nccl", &row.nccl_samples)] {
                        for (i, x) in list.iter().enumerate() {
                            st.execute(params![rid, src, i as i64, x.time_us, x.algbw, x.busbw])?;
                        }
                    }
                }
            }
            Ok(run_id)
        };
        let id = write().map_err(|e| sql(&p, e))?;
        tx.commit().map_err(|e| sql(&p, e))?;
        Ok(Added::New(id))
    }

    /// Every configuration, by key.
    pub fn configs(&self) -> Result<Vec<(i64, Config)>, Failure> {
        configs_in(&self.conn, &self.path)
    }

    /// The runs of one configuration in time order (start time, then the order they were added),
    /// each with its rows by size (samples included when `with_samples`).
    pub fn runs_of(&self, config_id: i64, with_samples: bool) -> Result<Vec<StoredRun>, Failure> {
        runs_in(&self.conn, &self.path, config_id, with_samples)
    }

    /// Number of runs stored.
    /// Every stored node verdict with its run: (run id, start time, verdict), oldest run first.
    pub fn node_verdicts(&self) -> Result<Vec<(i64, String, NodeVerdict)>, Failure> {
        let read = || -> rusqlite::Result<Vec<(i64, String, NodeVerdict)>> {
            let mut st = self.conn.prepare(
                "SELECT r.id, r.start_time, n.host, n.verdict, n.evidence FROM node_verdicts n
                 JOIN runs r ON r.id = n.run_id ORDER BY r.start_time, r.id, n.host",
            )?;
            let rows = st.query_map([], |x| {
                Ok((
                    x.get(0)?,
                    x.get(1)?,
                    NodeVerdict {
                        host: x.get(2)?,
                        verdict: x.get(3)?,
                        evidence: x.get(4)?,
                    },
                ))
            })?;
            rows.collect()
        };
        read().map_err(|e| sql(&self.path, e))
    }

    pub fn run_count(&self) -> Result<i64, Failure> {
        self.conn
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
            .map_err(|e| sql(&self.path, e))
    }
}

/// Every configuration of the database `conn` (a connection or a transaction), by key.
fn configs_in(conn: &Connection, p: &Path) -> Result<Vec<(i64, Config)>, Failure> {
    {
        let mut st = conn
            .prepare(
"SELECT id, tool, pattern, variant, scope, dir, mem, ranks, endpoints, nodes, plugin, chunk, channels, window FROM configs ORDER BY key")
            .map_err(|e| sql(p, e))?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    Config {
                        tool: r.get(1)?,
                        pattern: r.get(2)?,
                        variant: r.get(3)?,
                        scope: r.get(4)?,
                        dir: r.get(5)?,
                        mem: r.get(6)?,
                        ranks: r.get(7)?,
                        endpoints: r.get(8)?,
                        nodes: r.get(9)?,
                        plugin: r.get(10)?,
                        chunk: r.get(11)?,
                        channels: r.get(12)?,
                        window: r.get(13)?,
                    },
                ))
            })
            .map_err(|e| sql(p, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql(p, e))
    }
}

/// The runs of configuration `config_id` in `conn` (see [`Db::runs_of`]).
fn runs_in(conn: &Connection, p: &Path, config_id: i64, with_samples: bool) -> Result<Vec<StoredRun>, Failure> {
    {
        let mut st = conn
            .prepare(
                "SELECT DISTINCT runs.id, source, format, tool, start_time, time_from, git_commit, plugin_sha256, hosts, nccl_version, content_sha256, result_dir, allowed
                 FROM runs JOIN results ON results.run_id = runs.id
                 WHERE results.config_id = ?1 ORDER BY start_time, runs.id",
            )
            .map_err(|e| sql(p, e))?;
        let mut runs: Vec<StoredRun> = st
            .query_map([config_id], |r| {
                Ok(StoredRun {
                    id: r.get(0)?,
                    provenance: Provenance {
                        source: r.get(1)?,
                        format: r.get(2)?,
                        tool: r.get(3)?,
                        start_time: r.get(4)?,
                        time_from: r.get(5)?,
                        git_commit: r.get(6)?,
                        plugin_sha256: r.get(7)?,
                        hosts: r.get(8)?,
                        nccl_version: r.get(9)?,
                        content_sha256: r.get(10)?,
                        result_dir: r.get(11)?,
                    },
                    allowed: r.get(12)?,
                    rows: Vec::new(),
                })
            })
            .map_err(|e| sql(p, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| sql(p, e))?;
        let mut rs = conn
            .prepare(
                "SELECT id, size_bytes, time_us, algbw_gbps, busbw_gbps, wrong, nccl_time_us, nccl_algbw_gbps, nccl_busbw_gbps
                 FROM results WHERE run_id = ?1 AND config_id = ?2 ORDER BY size_bytes",
            )
            .map_err(|e| sql(p, e))?;
        let mut ss = conn
            .prepare("SELECT time_us, algbw_gbps, busbw_gbps FROM samples WHERE result_id = ?1 AND source = ?2 ORDER BY iter")
            .map_err(|e| sql(p, e))?;
        for run in &mut runs {
            let rows: Vec<(i64, StoredRow)> = rs
                .query_map(params![run.id, config_id], |r| {
                    let nccl = match (
                        r.get::<_, Option<f64>>(6)?,
                        r.get::<_, Option<f64>>(7)?,
                        r.get::<_, Option<f64>>(8)?,
                    ) {
                        (Some(t), Some(a), Some(b)) => Some(Sample {
                            time_us: t,
                            algbw: a,
                            busbw: b,
                        }),
                        _ => None,
                    };
                    Ok((
                        r.get(0)?,
                        StoredRow {
                            size: r.get::<_, i64>(1)? as u64,
                            summary: Sample {
                                time_us: r.get(2)?,
                                algbw: r.get(3)?,
                                busbw: r.get(4)?,
                            },
                            wrong: r.get(5)?,
                            nccl,
                            samples: Vec::new(),
                            nccl_samples: Vec::new(),
                        },
                    ))
                })
                .map_err(|e| sql(p, e))?
                .collect::<Result<_, _>>()
                .map_err(|e| sql(p, e))?;
            for (rid, mut row) in rows {
                if with_samples {
                    for src in ["run", "nccl"] {
                        let v: Vec<Sample> = ss
                            .query_map(params![rid, src], |r| {
                                Ok(Sample {
                                    time_us: r.get(0)?,
                                    algbw: r.get(1)?,
                                    busbw: r.get(2)?,
                                })
                            })
                            .map_err(|e| sql(p, e))?
                            .collect::<Result<_, _>>()
                            .map_err(|e| sql(p, e))?;
                        if src == "run" {
                            row.samples = v;
                        } else {
                            row.nccl_samples = v;
                        }
                    }
                }
                run.rows.push(row);
            }
        }
        Ok(runs)
    }
}

/// Sets `PRAGMA user_version` (tests of the version check: a database from a newer build).
#[doc(hidden)]
pub fn set_user_version_for_tests(path: &Path, v: i64) -> Result<(), Failure> {
    let c = Connection::open(path).map_err(|e| sql(path, e))?;
    c.execute_batch(&format!("PRAGMA user_version = {v}"))
        .map_err(|e| sql(path, e))
}
