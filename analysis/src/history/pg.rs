//! The PostgreSQL side of [`super::backend`]: connecting (TLS, timeouts, the password) and
//! running statements with a deadline.
//!
//! Every wait has one. Connecting: `connect_timeout` (default [`CONNECT_TIMEOUT`]) bounds the
//! whole of it, TCP, TLS and the login, not only the TCP connect that rust-postgres bounds
//! itself (a server that accepts and then says nothing would otherwise hang us). Statements: the
//! server ends one after `statement_timeout`, a wait for a lock after `lock_timeout`, and a
//! transaction left idle after `idle_in_transaction_session_timeout`; a server that stops
//! answering altogether is found by TCP (`tcp_user_timeout`, keepalives), and past all of them
//! a watchdog ends the process with one line (nothing is stored by half: the transaction in
//! progress was never committed, and the server drops it with the connection).
//!
//! TLS follows libpq's `sslmode`: `prefer` (the default) encrypts where the server offers TLS,
//! `require` insists; neither checks the certificate unless `sslrootcert` names a CA (then, as
//! `verify-ca`, the chain is checked); `verify-full` checks the host name too. The password comes
//! from the URL or, as for libpq, from `PGPASSWORD`.

use super::location::{PgUrl, Tls};
use super::value::{pg_sql, Row, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Connecting, unless the URL's `connect_timeout` says otherwise.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The server's limit on one statement (`statement_timeout`) and on a wait for a lock
/// (`lock_timeout`): a writer waits for the writers before it at most this long.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Past the statement timeout: how long the watchdog waits for an answer before it gives up.
const WATCHDOG_MARGIN: Duration = Duration::from_secs(60);

/// A connection with its prepared statements and watchdog.
pub struct PgConn {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
    deadline: Arc<Mutex<Option<Instant>>>,
    shown: String,
}

/// One line for a PostgreSQL error: the server's message with its detail, or the client's with
/// its cause; where the connection is gone, says so.
pub fn describe(e: &postgres::Error) -> String {
    let text = if let Some(db) = e.as_db_error() {
        let mut t = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            t.push_str(&format!(" ({d})"));
        }
        t
    } else {
        // The client's error, then its causes (the refused connection, the certificate ...).
        let mut t = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            let m = c.to_string();
            if !t.contains(&m) {
                t.push_str(": ");
                t.push_str(&m);
            }
            cause = c.source();
        }
        t
    };
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if e.is_closed() || e.as_db_error().is_none() && text.contains("connection") {
        format!("lost the connection to the server: {text}")
    } else {
        text
    }
}

/// The hint for an error while connecting.
fn connect_hint(e: &postgres::Error) -> &'static str {
    use postgres::error::SqlState;
    match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD => {
            "the server refused the login: check the user and the password (in the URL or PGPASSWORD)"
        }
        Some(c) if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "the server refused the login: check the user, and sslmode where the server wants TLS"
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            "create the database first (createdb), or name another in the URL"
        }
        Some(_) => "the server refused the connection",
        None => {
            let t = e.to_string().to_ascii_lowercase();
            if t.contains("tls") || t.contains("ssl") || t.contains("certificate") {
                "TLS failed: check sslmode and sslrootcert in the URL"
            } else {
                "is the server up, and the host and port right?"
            }
        }
    }
}

fn tls_connector(url: &PgUrl) -> Result<postgres_native_tls::MakeTlsConnector, String> {
    let mut b = native_tls::TlsConnector::builder();
    let verify = match url.tls {
        Tls::VerifyCa | Tls::VerifyFull => true,
        Tls::Prefer | Tls::Require => url.root_cert.is_some(),
        Tls::Off => false,
    };
    b.danger_accept_invalid_certs(!verify);
    b.danger_accept_invalid_hostnames(url.tls != Tls::VerifyFull);
    if let Some(p) = &url.root_cert {
        let pem = std::fs::read(p).map_err(|e| format!("sslrootcert {}: {e}", p.display()))?;
        let certs = native_tls::Certificate::stack_from_pem(&pem)
            .map_err(|e| format!("sslrootcert {}: not PEM certificates: {e}", p.display()))?;
        b.disable_built_in_roots(true);
        for c in certs {
            b.add_root_certificate(c);
        }
    }
    let c = b.build().map_err(|e| format!("TLS: {e}"))?;
    Ok(postgres_native_tls::MakeTlsConnector::new(c))
}

/// The URL's configuration with this module's defaults where it gives none.
fn config(url: &PgUrl) -> Result<(postgres::Config, Duration), String> {
    let mut c: postgres::Config = url.config.parse().map_err(|e| format!("{e}"))?;
    let given = |k: &str| url.given.iter().any(|g| g == k);
    if c.get_password().is_none() {
        if let Some(pw) = std::env::var_os("PGPASSWORD") {
            c.password(pw.to_string_lossy().as_bytes());
        }
    }
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(CONNECT_TIMEOUT);
    }
    if !given("tcp_user_timeout") {
        c.tcp_user_timeout(Duration::from_secs(30));
    }
    if !given("keepalives_idle") {
        c.keepalives_idle(Duration::from_secs(30));
    }
    if !given("application_name") {
        c.application_name("tcpx-analyze");
    }
    let limit = c.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
    Ok((c, limit))
}

/// Connects within the URL's `connect_timeout`; `read_only`: every transaction of the session
/// is read-only (the readers: detect, report, nodes, gate --history, export).
pub fn connect(url: &PgUrl, read_only: bool) -> Result<PgConn, String> {
    let shown = url.shown.clone();
    let (cfg, limit) = config(url).map_err(|e| format!("{shown}: {e}"))?;
    // sslmode=disable: no TLS set up at all (OpenSSL reads the system's CAs whatever it is told).
    let tls = match url.tls {
        Tls::Off => None,
        _ => Some(tls_connector(url).map_err(|e| format!("{shown}: {e}"))?),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    // The whole connect on a thread of its own, so that it has a deadline; one left behind
    // ends with the process.
    std::thread::spawn(move || {
        let _ = tx.send(match tls {
            Some(tls) => cfg.connect(tls),
            None => cfg.connect(postgres::NoTls),
        });
    });
    let mut client = match rx.recv_timeout(limit + Duration::from_millis(500)) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Err(format!(
                "{shown}: cannot connect: {}: {}",
                describe(&e),
                connect_hint(&e)
            ))
        }
        Err(_) => {
            return Err(format!(
            "{shown}: cannot connect: no answer within {} s (connect_timeout): is the server up, and not overloaded?",
            limit.as_secs_f64()
        ))
        }
    };
    let ms = STATEMENT_TIMEOUT.as_millis();
    let mut setup = format!(
        "SET statement_timeout = {ms}; SET lock_timeout = {ms}; SET idle_in_transaction_session_timeout = {};",
        2 * ms
    );
    if read_only {
        setup.push_str(" SET default_transaction_read_only = on;");
    }
    client
        .batch_execute(&setup)
        .map_err(|e| format!("{shown}: {}", describe(&e)))?;
    let deadline = Arc::new(Mutex::new(None));
    watchdog(Arc::downgrade(&deadline), shown.clone());
    Ok(PgConn {
        client,
        statements: HashMap::new(),
        deadline,
        shown,
    })
}

/// Ends the process with one line when a statement has had no answer by its deadline.
fn watchdog(deadline: Weak<Mutex<Option<Instant>>>, shown: String) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(250));
        let Some(d) = deadline.upgrade() else { return };
        let late = d.lock().is_ok_and(|g| g.is_some_and(|t| Instant::now() > t));
        if late {
            eprintln!(
                "tcpx-analyze: {shown}: no answer from the server for {} s: is it stopped or overloaded? Nothing of the run in progress was stored; run the command again",
                (STATEMENT_TIMEOUT + WATCHDOG_MARGIN).as_secs()
            );
            std::process::exit(crate::error::exit::INVALID_INPUT);
        }
    });
}

impl PgConn {
    /// Runs `f` on the client under the watchdog's deadline.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, postgres::Error>) -> Result<T, String> {
        if let Ok(mut d) = self.deadline.lock() {
            *d = Some(Instant::now() + STATEMENT_TIMEOUT + WATCHDOG_MARGIN);
        }
        let r = f(self);
        if let Ok(mut d) = self.deadline.lock() {
            *d = None;
        }
        r.map_err(|e| describe(&e))
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(&pg_sql(sql))?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub fn batch(&mut self, sql: &str) -> Result<(), String> {
        self.guarded(|c| c.client.batch_execute(sql))
    }

    pub fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, String> {
        self.guarded(|c| {
            let st = c.statement(sql)?;
            let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
            c.client.execute(&st, &p)
        })
    }

    pub fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, String> {
        self.guarded(|c| {
            let st = c.statement(sql)?;
            let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
            let rows = c.client.query(&st, &p)?;
            rows.iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| r.try_get::<_, Value>(i))
                        .collect::<Result<Vec<_>, _>>()
                        .map(Row)
                })
                .collect()
        })
    }

    /// The URL as messages show it.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}
