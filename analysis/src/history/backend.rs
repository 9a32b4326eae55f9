//! The two places a history lives, behind one small interface the history code calls: an SQLite
//! file (rusqlite, SQLite compiled in) or a PostgreSQL database (rust-postgres' blocking client).
//! The SQL is shared, written once in SQLite's dialect where the two agree (`?N` placeholders,
//! `INSERT ... ON CONFLICT`, `RETURNING id`); what differs is handled here and nowhere else:
//!
//! - placeholders: `?N` becomes `$N` for PostgreSQL ([`pg_sql`]);
//! - column types in the schema ([`pg_ddl`]): `INTEGER PRIMARY KEY` (SQLite's row id) becomes an
//!   identity column, `INTEGER` 64-bit `BIGINT`, `REAL` `DOUBLE PRECISION`, and `TEXT` compares
//!   byte by byte (`COLLATE "C"`, as SQLite's BINARY), so that every `ORDER BY` gives the same
//!   order on both;
//! - the schema version: `PRAGMA user_version` or a one-row table `tcpx_history_schema`;
//! - one writer at a time: `BEGIN IMMEDIATE` or a transaction-scoped advisory lock, so that of
//!   several `history add` of the same run one stores it and the others find it stored (the
//!   `UNIQUE` run identity stops a second copy whatever happens);
//! - reads in one snapshot: `BEGIN` or `BEGIN ISOLATION LEVEL REPEATABLE READ`.

use super::pg::{self, PgConn};
use super::value::sqlite_value;
pub use super::value::{pg_ddl, pg_sql, Row, Value};

/// An open connection to either backend.
pub enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<PgConn>),
}

/// The PostgreSQL table that holds the schema version (SQLite keeps it in `PRAGMA user_version`).
const PG_VERSION_TABLE: &str = "tcpx_history_schema";

/// The key of the advisory lock that makes PostgreSQL writers take turns (any fixed number;
/// this one spells "tcpxhist").
const PG_WRITE_LOCK: i64 = 0x7463_7078_6869_7374;

fn sqlite_err(e: rusqlite::Error) -> String {
    e.to_string()
}

impl Conn {
    /// Runs statements without parameters (the schema's migrations).
    pub fn batch(&mut self, sql: &str) -> Result<(), String> {
        match self {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(sqlite_err),
            Conn::Postgres(p) => p.batch(sql),
        }
    }

    /// Runs one statement; the rows it changed.
    pub fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, String> {
        match self {
            Conn::Sqlite(c) => {
                let mut st = c.prepare_cached(sql).map_err(sqlite_err)?;
                st.execute(rusqlite::params_from_iter(params.iter()))
                    .map(|n| n as u64)
                    .map_err(sqlite_err)
            }
            Conn::Postgres(p) => p.exec(sql, params),
        }
    }

    /// Runs one query; its rows.
    pub fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, String> {
        match self {
            Conn::Sqlite(c) => {
                let mut st = c.prepare_cached(sql).map_err(sqlite_err)?;
                let n = st.column_count();
                let rows = st
                    .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                        (0..n)
                            .map(|i| sqlite_value(r.get_ref(i)?))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .map_err(sqlite_err)?;
                rows.map(|r| r.map(Row).map_err(sqlite_err)).collect()
            }
            Conn::Postgres(p) => p.rows(sql, params),
        }
    }

    /// The first column of the first row, if any.
    pub fn one(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>, String> {
        Ok(self.rows(sql, params)?.into_iter().next())
    }

    /// Starts the one write transaction of the database: other writers wait (each within its
    /// timeout) until it ends.
    pub fn begin_write(&mut self) -> Result<(), String> {
        match self {
            Conn::Sqlite(c) => c.execute_batch("BEGIN IMMEDIATE").map_err(sqlite_err),
            Conn::Postgres(p) => {
                p.batch("BEGIN")?;
                p.exec("SELECT pg_advisory_xact_lock(?1)", &[Value::Int(PG_WRITE_LOCK)])
                    .map(|_| ())
            }
        }
    }

    /// Starts a read transaction: the reads until [`Conn::commit`] see one state of the database.
    pub fn begin_read(&mut self) -> Result<(), String> {
        match self {
            Conn::Sqlite(c) => c.execute_batch("BEGIN").map_err(sqlite_err),
            Conn::Postgres(p) => p.batch("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        }
    }

    pub fn commit(&mut self) -> Result<(), String> {
        self.batch("COMMIT")
    }

    /// Ends a transaction without its changes (best effort: a lost connection has ended it already).
    pub fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    /// The schema version stored in the database (0: none).
    pub fn schema_version(&mut self) -> Result<i64, String> {
        match self {
            Conn::Sqlite(c) => c.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(sqlite_err),
            Conn::Postgres(_) => {
                let has = self
                    .one(
                        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?1",
                        &[PG_VERSION_TABLE.into()],
                    )?
                    .map_or(Ok(0), |r| r.int(0))?;
                if has == 0 {
                    return Ok(0);
                }
                let v = self.one(&format!("SELECT MAX(version) FROM {PG_VERSION_TABLE}"), &[])?;
                Ok(v.map(|r| r.opt_int(0)).transpose()?.flatten().unwrap_or(0))
            }
        }
    }

    /// Sets the schema version (inside the migrating transaction).
    pub fn set_schema_version(&mut self, v: i64) -> Result<(), String> {
        match self {
            Conn::Sqlite(c) => c
                .execute_batch(&format!("PRAGMA user_version = {v}"))
                .map_err(sqlite_err),
            Conn::Postgres(p) => p.batch(&format!(
                "CREATE TABLE IF NOT EXISTS {PG_VERSION_TABLE} (version BIGINT NOT NULL);
                 DELETE FROM {PG_VERSION_TABLE}; INSERT INTO {PG_VERSION_TABLE} (version) VALUES ({v});"
            )),
        }
    }

    /// How many tables the database (PostgreSQL: its current schema) holds.
    pub fn table_count(&mut self) -> Result<i64, String> {
        let sql = match self {
            Conn::Sqlite(_) => "SELECT COUNT(*) FROM sqlite_master",
            Conn::Postgres(_) => "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
        };
        self.one(sql, &[])?.map_or(Ok(0), |r| r.int(0))
    }

    /// A migration's statements in this backend's dialect.
    pub fn ddl(&self, sql: &str) -> String {
        match self {
            Conn::Sqlite(_) => sql.to_string(),
            Conn::Postgres(_) => pg_ddl(sql),
        }
    }

    /// "SQLite" or "PostgreSQL", for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Conn::Sqlite(_) => "SQLite",
            Conn::Postgres(_) => "PostgreSQL",
        }
    }
}

/// Connects to a PostgreSQL history (see [`super::pg`]).
pub fn connect_postgres(url: &super::location::PgUrl, read_only: bool) -> Result<Conn, String> {
    Ok(Conn::Postgres(Box::new(pg::connect(url, read_only)?)))
}
