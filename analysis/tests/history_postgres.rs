//! The history on a PostgreSQL server, for a fleet: many writers at once, a gate reading while
//! they write, a server stopped in the middle of `history add`, servers that are down, slow or
//! refuse the login, TLS where the server asks for it; and `--db` URLs never taken for paths.
//!
//! The server is the one `TCPX_TEST_POSTGRES_URL` names (launch/test.sh starts it: tests/backends);
//! the stop-in-the-middle test starts a private one of its own with launch/postgres/local-postgres.sh,
//! since it stops it. Without them the tests skip, saying so, unless `CI` is set.

mod backends;
mod common;

use backends::{admin, fresh_database, postgres_server, with_database};
use common::{run_analyze, tmpdir, write_run, Spec};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-analyze");
const LOCAL_PG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../launch/postgres/local-postgres.sh");

/// `n` runs of one configuration under `dir`, seeds from `seed`, `iters` samples a size.
fn make_runs(dir: &Path, n: u64, seed: u64, iters: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            write_run(
                &dir.join(format!("run{i:02}")),
                &Spec {
                    seed: seed + i,
                    iters,
                    ..Spec::default()
                },
            )
        })
        .collect()
}

fn add(db: &str, inputs: &[&Path]) -> Child {
    Command::new(BIN)
        .args(["history", "add", "--db", db])
        .args(inputs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpx-analyze")
}

/// Waits for `c` at most `limit`; killed past it (a hang is a failure, never a stuck suite).
fn finish(mut c: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while c.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = c.kill();
            let o = c.wait_with_output().expect("wait");
            panic!("{what}: still running after {limit:?}: {}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().expect("output")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn count(db: &str, sql: &str) -> i64 {
    admin(db).query_one(sql, &[]).expect(sql).get(0)
}

/// Runs stored, identities stored twice, and runs not stored whole (each has 7 sizes, each size
/// `iters` samples).
fn census(db: &str, iters: i64) -> (i64, i64, i64) {
    let runs = count(db, "SELECT COUNT(*) FROM runs");
    let twice = count(
        db,
        "SELECT COUNT(*) - COUNT(DISTINCT content_sha256) + COUNT(*) - COUNT(DISTINCT source) FROM runs",
    );
    let partial = count(
        db,
        &format!(
            "SELECT COUNT(*) FROM runs r WHERE (SELECT COUNT(*) FROM results x WHERE x.run_id = r.id) <> 7
             OR (SELECT COUNT(*) FROM samples s JOIN results x ON x.id = s.result_id WHERE x.run_id = r.id) <> {}",
            7 * iters
        ),
    );
    (runs, twice, partial)
}

/// The acceptance case: 8 `history add` at once, 10 runs each, into one database, while
/// `gate --history` reads it over and over: 80 runs stored, none twice, no error, every read
/// either a decision or "not enough history yet" (no tables yet, no or too few runs). Then 8 adders of the same 10 new runs at once:
/// each run stored once.
#[test]
fn eight_adders_of_ten_runs_store_80_runs_once_while_a_gate_reads() {
    let Some(server) = postgres_server() else { return };
    let dir = tmpdir("pg-concurrent");
    let sets: Vec<PathBuf> = (0..8u64)
        .map(|i| {
            make_runs(&dir.join(format!("adder{i}")), 10, 1000 + 10 * i, 20);
            dir.join(format!("adder{i}"))
        })
        .collect();
    let cands = make_runs(&dir.join("candidates"), 3, 5000, 20);
    let db = fresh_database(&server, "t_concurrent");
    let t0 = Instant::now();
    let adders: Vec<Child> = sets.iter().map(|s| add(&db, &[s])).collect();
    // The gate reads while they add, until they are done.
    let reader = {
        let db = db.clone();
        let cands: Vec<String> = cands.iter().map(|c| c.display().to_string()).collect();
        std::thread::spawn(move || {
            let mut reads = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                let mut args = vec!["gate", "--history", db.as_str()];
                args.extend(cands.iter().map(String::as_str));
                let (code, out) = run_analyze(&args);
                let done = out.contains("last stable segment");
                reads.push((code, out));
                if done && reads.iter().filter(|(c, _)| *c != 3).count() >= 3 {
                    break;
                }
            }
            reads
        })
    };
    let outs: Vec<Output> = adders
        .into_iter()
        .enumerate()
        .map(|(i, c)| finish(c, Duration::from_secs(120), &format!("adder {i}")))
        .collect();
    let secs = t0.elapsed().as_secs_f64();
    let errors = outs.iter().filter(|o| !o.status.success()).count();
    for (i, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "adder {i}: {}", text(o));
        assert!(
            text(o).contains(": 10 run(s) added, 0 already stored"),
            "adder {i}: {}",
            text(o)
        );
    }
    let (runs, twice, partial) = census(&db, 20);
    println!(
        "8 adders x 10 runs: {runs} stored, {twice} duplicates, {errors} errors, {partial} partial, in {secs:.1} s"
    );
    assert_eq!((runs, twice, partial, errors), (80, 0, 0, 0));
    let reads = reader.join().expect("reader");
    for (code, out) in &reads {
        // Before the first adder made the tables, and before enough runs of the configuration.
        let waiting = [
            "not a tcpx-analyze history",
            "holds no run of configuration",
            "too few to gate against",
        ]
        .iter()
        .any(|w| out.contains(w));
        assert!(
            [0, 1, 2].contains(code) || (*code == 3 && waiting),
            "a gate reading while others add: exit {code}: {out}"
        );
        assert!(!out.contains("database error"), "{out}");
    }
    let decided = reads.iter().filter(|(c, _)| *c != 3).count();
    println!(
        "gate --history read {} times during and after the adds, {decided} decided",
        reads.len()
    );
    assert!(decided >= 1, "the gate never decided: {reads:?}");

    // The same 10 new runs from 8 adders at once: stored once.
    let same = dir.join("same");
    make_runs(&same, 10, 7000, 20);
    let adders: Vec<Child> = (0..8).map(|_| add(&db, &[&same])).collect();
    let mut added = 0;
    for (i, c) in adders.into_iter().enumerate() {
        let o = finish(c, Duration::from_secs(120), &format!("adder {i} of the same runs"));
        assert!(o.status.success(), "{}", text(&o));
        added += text(&o).matches("added run ").count();
    }
    let (runs, twice, partial) = census(&db, 20);
    assert_eq!(
        (added, runs, twice, partial),
        (10, 90, 0, 0),
        "the same runs from 8 adders"
    );
}

/// A private server (launch/postgres/local-postgres.sh on a port and folder of its own), stopped
/// when dropped.
struct Private {
    dir: PathBuf,
    port: u16,
}

impl Private {
    fn script(&self, verb: &str) -> Output {
        let mut c = Command::new("bash");
        c.arg(LOCAL_PG)
            .arg(verb)
            .env("LOCAL_PG_DIR", &self.dir)
            .env("LOCAL_PG_PORT", self.port.to_string());
        finish(
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("bash"),
            Duration::from_secs(90),
            &format!("local-postgres.sh {verb}"),
        )
    }

    /// Starts one, or None where this machine cannot run a server (exit 77) and CI is unset.
    fn start(name: &str) -> Option<Private> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let p = Private {
            dir: std::env::temp_dir().join(format!("tcpx-pg-{name}-{}", std::process::id())),
            port,
        };
        let o = p.script("start");
        if o.status.code() == Some(77) {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL must run in CI: {}",
                text(&o)
            );
            eprintln!("skipped: no PostgreSQL server here: {}", text(&o).trim());
            return None;
        }
        assert!(o.status.success(), "local-postgres.sh start: {}", text(&o));
        Some(p)
    }

    fn url(&self) -> String {
        let o = self.script("url");
        assert!(o.status.success(), "{}", text(&o));
        format!("{}?sslmode=disable", String::from_utf8_lossy(&o.stdout).trim())
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let o = self.script("stop");
        if !o.status.success() {
            eprintln!("local-postgres.sh stop: {}", text(&o));
        }
    }
}

/// The server stopped (as by a crash) while `history add` stores 12 runs: the add exits non-zero
/// with one line naming the URL without its password; every run stored is whole; a command
/// meanwhile cannot connect, in one line; once the server is back, the same add stores the rest,
/// each run once.
#[test]
fn a_server_stopped_mid_add_stores_nothing_by_half_and_the_retry_stores_each_run_once() {
    if postgres_server().is_none() {
        return;
    }
    let Some(server) = Private::start("stop") else { return };
    let url = server.url();
    let password = url
        .split(':')
        .nth(2)
        .and_then(|x| x.split('@').next())
        .unwrap_or("?")
        .to_string();
    let db = fresh_database(&url, "t_stop");
    let dir = tmpdir("pg-stop");
    // Many samples a run, so that storing 12 takes long enough to stop the server in the middle.
    let iters = 400;
    make_runs(&dir.join("runs"), 12, 300, iters);
    let t0 = Instant::now();
    let child = add(&db, &[&dir.join("runs")]);
    let stored = |db: &str| {
        postgres::Client::connect(db, postgres::NoTls)
            .ok()
            .and_then(|mut c| c.query_one("SELECT COUNT(*) FROM runs", &[]).ok())
            .map_or(0, |r| r.get::<_, i64>(0))
    };
    while stored(&db) < 3 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no run stored in 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let halt = server.script("halt");
    assert!(halt.status.success(), "{}", text(&halt));
    let o = finish(child, Duration::from_secs(60), "history add after the server stopped");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    println!(
        "stopped mid-add after {:.1} s: exit {:?}: {err}",
        t0.elapsed().as_secs_f64(),
        o.status.code()
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // The URL as the driver parsed it: no user, no password, no parameters.
    assert!(
        err.contains("postgres://127.0.0.1:") && err.contains("/t_stop:"),
        "{err}"
    );
    assert!(err.contains("run the same `history add` again"), "{err}");
    assert!(!text(&o).contains(&password), "the password shown: {}", text(&o));
    // While it is down: one line, no hang.
    let (code, out) = run_analyze(&["history", "detect", "--db", &db]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.trim().lines().count() == 1 && out.contains("cannot connect"),
        "{out}"
    );
    assert!(server.script("start").status.success());
    let (runs, twice, partial) = census(&db, iters as i64);
    println!("after the stop: {runs} runs stored whole, {partial} by half, {twice} twice");
    assert!((3..12).contains(&runs), "{runs} runs: the stop was not in the middle");
    assert_eq!((twice, partial), (0, 0));
    let o = finish(add(&db, &[&dir.join("runs")]), Duration::from_secs(120), "the retry");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            ": {} run(s) added, {runs} already stored, 12 in all",
            12 - runs
        )),
        "{}",
        text(&o)
    );
    assert_eq!(census(&db, iters as i64), (12, 0, 0));
}

/// A server that is down, silent or refuses the login, a database that does not exist: exit 3
/// and one line naming the URL without its password, within the connect timeout.
#[test]
fn servers_down_slow_or_refusing_get_one_line_without_the_password() {
    let Some(server) = postgres_server() else { return };
    let secret = "not-the-password-1234";
    let host = server
        .split('@')
        .nth(1)
        .and_then(|h| h.split('/').next())
        .expect("host:port");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().unwrap().port();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().unwrap().port()
    };
    let cases = [
        (
            format!("postgres://postgres:{secret}@{host}/postgres"),
            "refused the login",
        ),
        (
            with_database(&server, "tcpx_no_such_database"),
            "does not exist: create the database first",
        ),
        (
            format!("postgres://postgres:{secret}@127.0.0.1:{closed_port}/x"),
            "Connection refused",
        ),
        (
            format!("postgres://postgres:{secret}@127.0.0.1:{silent_port}/x?connect_timeout=1"),
            "no answer within 1 s (connect_timeout)",
        ),
    ];
    for (url, why) in &cases {
        for args in [
            vec!["history", "detect", "--db", url.as_str()],
            vec![
                "history",
                "add",
                "--db",
                url.as_str(),
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01"),
            ],
        ] {
            let t0 = Instant::now();
            let (code, out) = run_analyze(&args);
            let secs = t0.elapsed().as_secs_f64();
            assert_eq!(code, 3, "{args:?}: {out}");
            assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
            assert!(out.contains(why), "want {why:?}: {out}");
            assert!(!out.contains(secret), "the password shown: {out}");
            assert!(
                // The URL as the driver parsed it: its host, no user, no password.
                out.contains(&format!(
                    "postgres://{}",
                    url.split('@').nth(1).and_then(|h| h.split('/').next()).unwrap()
                )) && !out.contains("postgres://postgres@"),
                "{out}"
            );
            assert!(secs < 5.0, "{secs:.1} s: {out}");
        }
    }
    drop(silent);
}

/// The URL in TCPX_HISTORY_DB stands for `--db` and is never printed (not even by --help).
#[test]
fn the_environment_gives_the_database_and_help_does_not_print_it() {
    let Some(server) = postgres_server() else { return };
    let db = fresh_database(&server, "t_env");
    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01");
    let password = server
        .split(':')
        .nth(2)
        .and_then(|x| x.split('@').next())
        .unwrap()
        .to_string();
    let o = Command::new(BIN)
        .args(["history", "add", run])
        .env("TCPX_HISTORY_DB", &db)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("/t_env: 1 run(s) added"), "{}", text(&o));
    assert!(!text(&o).contains(&password), "{}", text(&o));
    let o = Command::new(BIN)
        .args(["history", "detect", "--help"])
        .env("TCPX_HISTORY_DB", &db)
        .output()
        .unwrap();
    assert!(text(&o).contains("TCPX_HISTORY_DB"), "{}", text(&o));
    assert!(!text(&o).contains(&password), "{}", text(&o));
}

/// TLS where the server asks for it: role tcpx_tls_only may log in only over TLS
/// (local-postgres.sh's pg_hba.conf). sslmode=disable is refused by the server, the default
/// (prefer) and require encrypt; verify-full checks the certificate against sslrootcert, and
/// without it refuses the self-signed one.
#[test]
fn tls_where_the_server_asks_for_it() {
    let Some(server) = postgres_server() else { return };
    let ssl: String = admin(&server).query_one("SHOW ssl", &[]).unwrap().get(0);
    let role = count(&server, "SELECT COUNT(*) FROM pg_roles WHERE rolname = 'tcpx_tls_only'");
    if ssl != "on" || role == 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's server has TLS (local-postgres.sh): ssl {ssl}, role {role}"
        );
        eprintln!("skipped: the test server has no TLS or no role tcpx_tls_only (launch/postgres/local-postgres.sh makes both)");
        return;
    }
    let dir = tmpdir("pg-tls");
    let ca = dir.join("server.crt");
    let pem: String = admin(&server)
        .query_one("SELECT pg_read_file('server.crt')", &[])
        .unwrap()
        .get(0);
    std::fs::write(&ca, pem).unwrap();
    let db = fresh_database(&server, "t_tls");
    // The same password, the role that may log in only over TLS.
    let tls_db = db.replacen("://postgres:", "://tcpx_tls_only:", 1);
    let base = tls_db.split('?').next().unwrap().to_string();
    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01");
    let (code, out) = run_analyze(&["history", "add", "--db", &format!("{base}?sslmode=disable"), run]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("no encryption") && out.contains("sslmode"), "{out}");
    let (code, out) = run_analyze(&["history", "add", "--db", &base, run]);
    // The server let it in: over TLS (prefer, the default, as the server asks).
    assert_eq!(code, 0, "prefer: TLS as the server asks: {out}");
    for (params, ok) in [
        ("sslmode=require".to_string(), true),
        (format!("sslmode=verify-full&sslrootcert={}", ca.display()), true),
        ("sslmode=verify-full".to_string(), false),
    ] {
        let (code, out) = run_analyze(&["history", "detect", "--db", &format!("{base}?{params}")]);
        if ok {
            assert_eq!(code, 0, "{params}: {out}");
        } else {
            assert_eq!(code, 3, "{params}: {out}");
            assert!(
                out.contains("certificate verify failed") && out.trim().lines().count() == 1,
                "{out}"
            );
        }
    }
}

/// `--db` is a path or a postgres:// URL, never a URL taken for a path: another scheme is
/// refused in one line, and neither makes a folder (before, `postgres://...` made `postgres:/`).
#[test]
fn a_url_is_never_taken_for_a_path() {
    let cwd = tmpdir("pg-url-not-path");
    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01");
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (db, code, why) in [
        (
            "mysql://u:pw1234@h/d".to_string(),
            64,
            "`mysql://` is no history database",
        ),
        (
            "sqlite://h.sqlite".to_string(),
            64,
            "`sqlite://` is no history database",
        ),
        (
            format!("postgres://postgres:pw1234@127.0.0.1:{closed_port}/tcpx"),
            3,
            "cannot connect",
        ),
    ] {
        let o = Command::new(BIN)
            .args(["history", "add", "--db", &db, run])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{db}: {}", text(&o));
        assert_eq!(text(&o).trim().lines().count(), 1, "{}", text(&o));
        assert!(text(&o).contains(why) && !text(&o).contains("pw1234"), "{}", text(&o));
        let made: Vec<_> = std::fs::read_dir(&cwd).unwrap().collect();
        assert!(made.is_empty(), "{db} made {made:?}");
    }
}

/// A PostgreSQL database of another program (tables, no history schema) is never written into:
/// add, detect and gate refuse it in one line and leave its tables as they were.
#[test]
fn a_database_of_another_program_is_never_written_into() {
    let Some(server) = postgres_server() else { return };
    let db = fresh_database(&server, "t_foreign");
    admin(&db)
        .batch_execute("CREATE TABLE notes (id BIGINT PRIMARY KEY, text TEXT)")
        .unwrap();
    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runs/ci-sendrecv-identical/run01");
    for args in [
        vec!["history", "add", "--db", db.as_str(), run],
        vec!["history", "detect", "--db", db.as_str()],
        vec!["gate", "--history", db.as_str(), run],
    ] {
        let (code, out) = run_analyze(&args);
        assert_eq!(code, 3, "{args:?}: {out}");
        assert!(out.contains("a PostgreSQL database of another program"), "{out}");
        assert_eq!(out.trim().lines().count(), 1, "{out}");
        let tables = count(
            &db,
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
        );
        assert_eq!(tables, 1, "{args:?} wrote into it");
    }
}
