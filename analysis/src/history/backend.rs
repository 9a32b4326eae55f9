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
//! - the schema version: a one-row table `tcpx_history_schema` in both, SQLite's
//!   `PRAGMA user_version` kept in step; whether a database holds anything at all (PostgreSQL:
//!   in any schema, not only the current one);
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

/// The table that holds the schema version: a database is a tcpx-analyze history only where it
/// has it (SQLite keeps `PRAGMA user_version` in step, for builds from before the table).
pub const VERSION_TABLE: &str = "tcpx_history_schema";

/// An SQLite database's tables, by name, each with its columns (name, declared type) in order.
pub type SqliteTables = Vec<(String, Vec<(String, String)>)>;

/// The tables of an SQLite database (its own `sqlite_*` left out), as [`SqliteTables`].
pub fn sqlite_tables(c: &rusqlite::Connection) -> Result<SqliteTables, rusqlite::Error> {
    let mut st = c.prepare(
        "SELECT m.name, p.name, p.type FROM sqlite_master m JOIN pragma_table_info(m.name) p
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY m.name, p.cid",
    )?;
    let rows = st.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
    })?;
    let mut out: SqliteTables = Vec::new();
    for r in rows {
        let (table, column, ty) = r?;
        match out.last_mut() {
            Some((t, cols)) if *t == table => cols.push((column, ty)),
            _ => out.push((table, vec![(column, ty)])),
        }
    }
    Ok(out)
}

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

    /// The version in the schema table, the mark of a tcpx-analyze history: None where the
    /// database (PostgreSQL: its current schema) has no such table; Some(0) where it holds no
    /// one version (a table of that name, not ours).
    pub fn marked_version(&mut self) -> Result<Option<i64>, String> {
        // pg_class, not information_schema: that shows only the tables this role may use.
        let has = match self {
            Conn::Sqlite(_) => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            Conn::Postgres(_) => {
                "SELECT COUNT(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relname = ?1 AND c.relkind IN ('r', 'p')"
            }
        };
        if self.one(has, &[VERSION_TABLE.into()])?.map_or(Ok(0), |r| r.int(0))? == 0 {
            return Ok(None);
        }
        let rows = self.rows(&format!("SELECT version FROM {VERSION_TABLE}"), &[])?;
        Ok(Some(match rows.as_slice() {
            [r] => r.opt_int(0).ok().flatten().unwrap_or(0),
            _ => 0,
        }))
    }

    /// Whether the database holds nothing at all: no table, view or sequence in any schema
    /// (PostgreSQL: another program may keep its tables in a schema of its own), and, in SQLite,
    /// no object and no version or application id set by another program. Only such a database
    /// becomes a history.
    pub fn is_empty(&mut self) -> Result<bool, String> {
        let sql = match self {
            Conn::Sqlite(_) => {
                "SELECT ((SELECT COUNT(*) FROM sqlite_master) > 0) + ((SELECT user_version FROM pragma_user_version) <> 0)
                 + ((SELECT application_id FROM pragma_application_id) <> 0)"
            }
            Conn::Postgres(_) => {
                "SELECT COUNT(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                 AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'"
            }
        };
        Ok(self.one(sql, &[])?.map_or(Ok(0), |r| r.int(0))? == 0)
    }

    /// SQLite's `PRAGMA user_version` and its tables with their columns (name, declared type),
    /// by name: how an SQLite history of a build from before the schema table is recognised.
    /// None for PostgreSQL, whose histories always had the table.
    pub fn sqlite_tables(&mut self) -> Result<Option<(i64, SqliteTables)>, String> {
        let Conn::Sqlite(c) = self else { return Ok(None) };
        let version = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sqlite_err)?;
        Ok(Some((version, sqlite_tables(c).map_err(sqlite_err)?)))
    }

    /// Sets the schema version (inside the migrating transaction): the schema table, and in
    /// SQLite `PRAGMA user_version` too (what builds from before the table read).
    pub fn set_schema_version(&mut self, v: i64) -> Result<(), String> {
        let mark = format!(
            "CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version {} NOT NULL);
             DELETE FROM {VERSION_TABLE}; INSERT INTO {VERSION_TABLE} (version) VALUES ({v});",
            if matches!(self, Conn::Sqlite(_)) {
                "INTEGER"
            } else {
                "BIGINT"
            }
        );
        match self {
            Conn::Sqlite(c) => c
                .execute_batch(&format!("{mark} PRAGMA user_version = {v};"))
                .map_err(sqlite_err),
            Conn::Postgres(p) => p.batch(&mark),
        }
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
