//! The history tests' two backends: each test runs once on an SQLite file and once on a
//! PostgreSQL database (the same test, parameterised by [`Backend`]). PostgreSQL is the server
//! whose URL `TCPX_TEST_POSTGRES_URL` gives (a superuser's: each test makes a database of its
//! own); `launch/test.sh` starts one (`launch/postgres/local-postgres.sh`) and sets it. Where it
//! is unset the PostgreSQL half skips, saying so, unless `CI` is set: then it fails, since CI
//! starts the server.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tcpx_analyze::history::db::Db;
use tcpx_analyze::history::location::Location;

/// The variable that names the test server.
pub const URL_ENV: &str = "TCPX_TEST_POSTGRES_URL";

#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite,
    /// The server's URL (its maintenance database).
    Postgres(String),
}

/// The test server's URL; None (after a line on stderr) where it is unset and CI is not.
/// Without TLS unless the URL asks for it: the tests of TLS ask for it themselves, and each TLS
/// connection costs about 0.1 s here (OpenSSL reading the system's CAs), 10 s over the suite.
pub fn postgres_server() -> Option<String> {
    match std::env::var(URL_ENV) {
        Ok(u) if !u.is_empty() && u.contains('?') => Some(u),
        Ok(u) if !u.is_empty() => Some(format!("{u}?sslmode=disable")),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{URL_ENV} is unset: in CI the history tests run on PostgreSQL too (launch/test.sh starts launch/postgres/local-postgres.sh and sets it)"
            );
            eprintln!(
                "skipped on PostgreSQL: {URL_ENV} is unset (bash launch/postgres/local-postgres.sh start; export {URL_ENV}=$(bash launch/postgres/local-postgres.sh url))"
            );
            None
        }
    }
}

/// SQLite, and PostgreSQL where there is a server.
pub fn all() -> Vec<Backend> {
    let mut v = vec![Backend::Sqlite];
    v.extend(postgres_server().map(Backend::Postgres));
    v
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (main, query) = url.split_once('?').map_or((url, None), |(m, q)| (m, Some(q)));
    let rest = main.split_once("://").map_or(main, |(_, r)| r);
    let base_len = main.len() - rest.len() + rest.find('/').unwrap_or(rest.len());
    let mut out = format!("{}/{db}", &main[..base_len]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A client of the server's maintenance database, for the tests' own SQL.
pub fn admin(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap_or_else(|e| panic!("{URL_ENV}: cannot connect: {e}"))
}

/// An empty database `name` on the server at `url` (made, or emptied: faster than making it
/// again, 20 ms rather than 120); its URL.
pub fn fresh_database(url: &str, name: &str) -> String {
    let db = with_database(url, name);
    if let Ok(mut c) = postgres::Client::connect(&db, postgres::NoTls) {
        c.batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
            .unwrap();
        return db;
    }
    let mut c = admin(url);
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    // Concurrent CREATE DATABASE of other tests may find the template busy: again, briefly.
    let mut tries = 0;
    while let Err(e) = c.batch_execute(&format!("CREATE DATABASE {name}")) {
        tries += 1;
        assert!(tries < 20, "CREATE DATABASE {name}: {e}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    db
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// A new, empty history for test `tag` (letters, digits, `-`): a file under `dir` that does
    /// not exist yet, or a new PostgreSQL database; what `--db` takes.
    pub fn fresh(&self, dir: &Path, tag: &str) -> String {
        match self {
            Backend::Sqlite => {
                let p = dir.join(format!("{tag}.sqlite"));
                let _ = std::fs::remove_file(&p);
                p.display().to_string()
            }
            Backend::Postgres(url) => {
                let name: String = tag
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                fresh_database(url, &format!("t_{}", &name[..name.len().min(60)]))
            }
        }
    }

    /// Opens a history as the commands do (the URL or path says which backend).
    #[allow(clippy::unused_self)]
    pub fn open(&self, db: &str, create: bool) -> Db {
        Db::open_at(&Location::parse(db, "--db").unwrap(), create).unwrap()
    }

    /// Whether anything was written there (a file made; tables made).
    pub fn written(&self, db: &str) -> bool {
        match self {
            Backend::Sqlite => Path::new(db).exists(),
            Backend::Postgres(_) => {
                let mut c = admin(db);
                let n: i64 = c
                    .query_one(
                        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                n > 0
            }
        }
    }

    /// What the database holds per (run id, size): busbw and NCCL's busbw, read with SQL here
    /// (not through the code under test).
    pub fn results(&self, db: &str) -> BTreeMap<(i64, u64), (f64, Option<f64>)> {
        const SQL: &str = "SELECT run_id, size_bytes, busbw_gbps, nccl_busbw_gbps FROM results";
        match self {
            Backend::Sqlite => {
                let c = rusqlite::Connection::open(db).unwrap();
                let mut st = c.prepare(SQL).unwrap();
                st.query_map([], |r| {
                    Ok(((r.get(0)?, r.get::<_, i64>(1)? as u64), (r.get(2)?, r.get(3)?)))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            Backend::Postgres(_) => admin(db)
                .query(SQL, &[])
                .unwrap()
                .iter()
                .map(|r| ((r.get(0), r.get::<_, i64>(1) as u64), (r.get(2), r.get(3))))
                .collect(),
        }
    }

    /// A database that does not exist: a file in a missing folder, or an unknown database.
    pub fn missing(&self) -> String {
        match self {
            Backend::Sqlite => "/nonexistent/h.sqlite".into(),
            Backend::Postgres(url) => with_database(url, "tcpx_no_such_database"),
        }
    }
}

/// The scratch folder of a test.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
