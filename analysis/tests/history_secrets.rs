//! Issue 53 (fail closed, fifth hostile review), the history's two families:
//!
//! - a database's location is never shown beyond scheme, host, port and database name, however
//!   it is spelled: a password with a raw `/` or `?` (which the driver takes whole, its user part
//!   ending at the first `@`), a URL without its `//` (also from TCPX_HISTORY_DB), a libpq
//!   key/value string (refused, never a file named after it);
//! - a database is written into only where it says it is a tcpx-analyze history (our schema
//!   table and version) or holds nothing at all: an SQLite file of another program with a
//!   `user_version`, a PostgreSQL database whose program keeps its tables in a schema of its own,
//!   are refused before a single statement changes them.
//!
//! Real SQLite files and real runs; the PostgreSQL cases on the server `TCPX_TEST_POSTGRES_URL`
//! names (they skip without it, saying so, unless `CI` is set: [`backends::postgres_server`]).

mod backends;
mod common;

use backends::{admin, fresh_database, postgres_server};
use common::tmpdir;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-analyze");
const RUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01");
const RUN2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run02");

/// What every secret of these tests starts with: no output may hold it.
const SECRET: &str = "S3cr3t";

/// Runs tcpx-analyze in `cwd` (TCPX_HISTORY_DB as given, else unset): exit code and all it printed.
fn analyze(cwd: &Path, env_db: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(cwd).env_remove("TCPX_HISTORY_DB");
    if let Some(db) = env_db {
        c.env("TCPX_HISTORY_DB", db);
    }
    let o: Output = c.output().expect("tcpx-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A refusal or failure of `args`: exit `code`, one line, no secret, nothing made in `cwd`.
fn assert_refused(cwd: &Path, env_db: Option<&str>, args: &[&str], code: i32, why: &str) -> String {
    let (got, out) = analyze(cwd, env_db, args);
    assert!(!out.contains(SECRET), "the secret shown: {out}");
    assert_eq!(got, code, "{out}");
    assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
    assert!(out.contains(why), "want {why:?}: {out}");
    assert!(
        entries(cwd).is_empty(),
        "made in the working directory: {:?}",
        entries(cwd)
    );
    out
}

/// Repro (1): a password with a raw `/` or `?`. The driver takes the user part up to the first
/// `@`, so such a URL logs in; before, messages showed the URL cut at the `/` or `?` instead,
/// password and all (`history report` wrote it into the page). Now what is shown is the URL the
/// driver parsed, without user, password or parameters: on a closed port (no server needed),
/// and, with the test server, through a login, `history add` and the report's HTML.
#[test]
fn a_password_with_a_raw_slash_or_question_mark_is_never_shown() {
    let cwd = tmpdir("secrets-raw-password");
    let port = closed_port();
    for pw in ["ab/S3cr3tSlash", "ab?S3cr3tQuery"] {
        let url = format!("postgres://u:{pw}@127.0.0.1:{port}/db");
        let shown = format!("postgres://127.0.0.1:{port}/db:");
        for args in [
            vec!["history", "detect", "--db", url.as_str()],
            vec!["history", "add", "--db", url.as_str(), RUN],
            vec!["gate", "--history", url.as_str(), RUN],
        ] {
            let out = assert_refused(&cwd, None, &args, 3, "cannot connect");
            assert!(out.contains(&shown), "{out}");
        }
    }

    let Some(server) = postgres_server() else { return };
    let host = server
        .split('@')
        .nth(1)
        .and_then(|h| h.split('/').next())
        .expect("host:port")
        .to_string();
    let role = "tcpx_secret_user";
    let html = cwd.join("r.html");
    for pw in ["ab/S3cr3tSlash", "ab?S3cr3tQuery"] {
        admin(&server)
            .batch_execute(&format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$;
                 ALTER ROLE {role} PASSWORD '{pw}';"
            ))
            .unwrap();
        let db = fresh_database(&server, "t_secret_pw");
        admin(&db)
            .batch_execute(&format!("ALTER SCHEMA public OWNER TO {role}"))
            .unwrap();
        let url = format!("postgres://{role}:{pw}@{host}/t_secret_pw?sslmode=disable");
        let shown = format!("postgres://{host}/t_secret_pw");
        let (code, out) = analyze(&cwd, None, &["history", "add", "--db", &url, RUN]);
        assert!(!out.contains(SECRET), "the secret shown: {out}");
        assert_eq!(code, 0, "{pw}: the driver logs in with it: {out}");
        assert!(out.contains(&format!("{shown}: 1 run(s) added")), "{out}");
        let _ = std::fs::remove_file(&html);
        let (code, out) = analyze(&cwd, Some(&url), &["history", "report", "-o", html.to_str().unwrap()]);
        assert!(!out.contains(SECRET), "the secret shown: {out}");
        assert_eq!(code, 0, "{out}");
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(!page.contains(SECRET), "the secret in the report");
        assert!(
            page.contains(&format!("<code>{shown}</code>")),
            "the report names {shown}"
        );
    }
}

/// Repro (2): a URL without its `//` (`postgres:/u:PASSWORD@...`), in `--db` or in
/// TCPX_HISTORY_DB. Before, the refusal echoed it whole; now it shows nothing of it, and it
/// never becomes a file either.
#[test]
fn a_url_without_its_slashes_is_never_echoed() {
    let cwd = tmpdir("secrets-no-slashes");
    let port = closed_port();
    for db in [
        format!("postgres:/u:S3cr3tEnv@127.0.0.1:{port}/db"),
        format!("postgresql:u:S3cr3tEnv@127.0.0.1:{port}/db"),
        format!("mysql:u:S3cr3tEnv@127.0.0.1:{port}/db"),
    ] {
        assert_refused(
            &cwd,
            Some(&db),
            &["history", "detect"],
            64,
            "neither a file name nor a URL",
        );
        assert_refused(
            &cwd,
            Some(&db),
            &["history", "add", RUN],
            64,
            "neither a file name nor a URL",
        );
        assert_refused(
            &cwd,
            None,
            &["history", "nodes", "--db", &db],
            64,
            "neither a file name nor a URL",
        );
    }
}

/// Repro (3): a libpq key/value string. Before, `history add` made an SQLite file named after it,
/// password included, in the working directory, and exited 0; readers named it in their
/// message. Now it is refused in one line that shows none of it, and no file is made.
#[test]
fn a_libpq_key_value_string_never_becomes_a_file() {
    let cwd = tmpdir("secrets-key-value");
    let port = closed_port();
    for kv in [
        format!("host=127.0.0.1 port={port} user=u password=S3cr3tKv dbname=db"),
        format!("dbname = db password = S3cr3tKv host=127.0.0.1 port={port}"),
    ] {
        for args in [
            vec!["history", "add", "--db", kv.as_str(), RUN],
            vec!["history", "detect", "--db", kv.as_str()],
            vec!["gate", "--history", kv.as_str(), RUN],
        ] {
            assert_refused(&cwd, None, &args, 64, "libpq key/value string");
        }
    }
}

/// A file's tables with their columns, and its user_version, read with SQL here.
fn sqlite_state(p: &Path) -> (Vec<String>, i64) {
    let c = rusqlite::Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut st = c
        .prepare(
            "SELECT m.name || '(' || group_concat(p.name, ',') || ')' FROM sqlite_master m
             JOIN pragma_table_info(m.name) p WHERE m.type = 'table' GROUP BY m.name ORDER BY m.name",
        )
        .unwrap();
    let tables = st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    (tables, c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap())
}

/// Repro (4), SQLite: a file of another program with a `runs(id, name)` table and user_version 1
/// or 2. Before, `history add` took the version for ours, added its columns, a `node_verdicts`
/// table and user_version 3, and only then failed. Now every command refuses it, naming it
/// another program's, and its bytes are as they were. A history of a build from before the
/// schema table (user_version 3, our tables exactly) is still read, and marked on the next add.
#[test]
fn an_sqlite_file_of_another_program_is_never_changed() {
    let dir = tmpdir("secrets-foreign-sqlite");
    for version in [1, 2] {
        let f = dir.join(format!("theirs-v{version}.sqlite"));
        rusqlite::Connection::open(&f)
            .unwrap()
            .execute_batch(&format!(
                "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT);
                 INSERT INTO runs (name) VALUES ('theirs');
                 PRAGMA user_version = {version};"
            ))
            .unwrap();
        let before = std::fs::read(&f).unwrap();
        let db = f.to_str().unwrap();
        for args in [
            vec!["history", "add", "--db", db, RUN],
            vec!["history", "detect", "--db", db],
            vec!["gate", "--history", db, RUN],
        ] {
            let (code, out) = analyze(&dir, None, &args);
            assert_eq!(
                sqlite_state(&f),
                (vec!["runs(id,name)".to_string()], version),
                "{args:?} changed it: {out}"
            );
            assert!(
                std::fs::read(&f).unwrap() == before,
                "{args:?} changed its bytes: {out}"
            );
            assert_eq!(code, 3, "{args:?}: {out}");
            assert!(out.contains("an SQLite database of another program"), "{args:?}: {out}");
            assert_eq!(out.trim().lines().count(), 1, "{out}");
        }
    }

    // A history from before the schema table: what `history add` made, less the table.
    let legacy = dir.join("legacy.sqlite");
    let db = legacy.to_str().unwrap();
    assert_eq!(analyze(&dir, None, &["history", "add", "--db", db, RUN]).0, 0);
    rusqlite::Connection::open(&legacy)
        .unwrap()
        .execute_batch("DROP TABLE tcpx_history_schema")
        .unwrap();
    let (code, out) = analyze(&dir, None, &["history", "detect", "--db", db]);
    assert!([0, 1].contains(&code), "{out}");
    let (code, out) = analyze(&dir, None, &["history", "add", "--db", db, RUN2]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 run(s) added, 0 already stored, 2 in all"), "{out}");
    assert!(sqlite_state(&legacy)
        .0
        .contains(&"tcpx_history_schema(version)".to_string()));
}

/// Repro (4), PostgreSQL: a database whose program keeps its tables in a schema of its own
/// (`public` empty). Before, `history add` took it for an empty database and made 6 tables in
/// `public`; now it is another program's database, refused by writers and readers, `public` left
/// empty and their table as it was.
#[test]
fn a_postgres_database_of_another_program_in_its_own_schema_is_never_written_into() {
    let Some(server) = postgres_server() else { return };
    let dir = tmpdir("secrets-foreign-pg");
    let db = fresh_database(&server, "t_own_schema");
    admin(&db)
        .batch_execute(
            "DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app;
             CREATE TABLE app.runs (id BIGINT PRIMARY KEY, name TEXT); INSERT INTO app.runs VALUES (1, 'theirs');",
        )
        .unwrap();
    for args in [
        vec!["history", "add", "--db", db.as_str(), RUN],
        vec!["history", "detect", "--db", db.as_str()],
        vec!["gate", "--history", db.as_str(), RUN],
    ] {
        let (code, out) = analyze(&dir, None, &args);
        // The command by its name only: the URL holds the test server's password.
        let args = &args[..2];
        let mut c = admin(&db);
        let public: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(public, 0, "{args:?} wrote into public: {out}");
        assert_eq!(code, 3, "{out}");
        assert!(out.contains("a PostgreSQL database of another program"), "{out}");
        assert_eq!(out.trim().lines().count(), 1, "{out}");
        let theirs: i64 = c.query_one("SELECT COUNT(*) FROM app.runs", &[]).unwrap().get(0);
        assert_eq!(theirs, 1);
    }
}
