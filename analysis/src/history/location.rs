//! Where a history is: `--db FILE` (SQLite, the default) or `--db postgres://USER@HOST[:PORT]/DB`
//! (PostgreSQL). A `scheme://` is never taken for a path: `postgres://` and `postgresql://` are
//! PostgreSQL, any other scheme is refused with one line; so is what only looks like a URL or a
//! libpq key/value string (`host=... password=...`), which would otherwise become a file named
//! after it, password and all.
//!
//! The URL is libpq's (`sslmode`, `connect_timeout`, `application_name`, ... as query
//! parameters); what rust-postgres does not read itself is taken out here: `sslmode=verify-ca|
//! verify-full` and `sslrootcert=FILE` (see [`super::pg`]). It is split exactly as rust-postgres
//! splits it (the user part ends at the first `@`, wherever it is, so a password may hold a raw
//! `/` or `?`), and what messages, logs and the report show of it is rebuilt from what the
//! driver parsed: scheme, hosts, ports and database name ([`PgUrl::shown`]), never the text as
//! given. Where the text cannot be parsed, nothing of it is shown.

use crate::error::Failure;
use postgres::config::Host;
use std::fmt;
use std::path::PathBuf;

/// How a PostgreSQL connection uses TLS (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// `disable`: never.
    Off,
    /// `prefer` (the default): where the server offers it; `require`: or not at all. Encrypted,
    /// the server's certificate unchecked unless `sslrootcert` names the CA to check it against
    /// (libpq's rules).
    Prefer,
    Require,
    /// `verify-ca`: the certificate must chain to `sslrootcert` (or the system's CAs).
    VerifyCa,
    /// `verify-full`: that, and name the host connected to.
    VerifyFull,
}

/// A PostgreSQL URL, checked.
#[derive(Debug, Clone)]
pub struct PgUrl {
    /// What rust-postgres parses: the URL less the parameters read here.
    pub(crate) config: String,
    /// The URL as messages show it: `postgres://HOST:PORT[,HOST:PORT...]/DB`, from what the driver
    /// parsed (no user, no password, no parameters).
    pub shown: String,
    pub tls: Tls,
    pub root_cert: Option<PathBuf>,
    /// The query parameters the URL gave (names), so that defaults fill only the others.
    pub(crate) given: Vec<String>,
}

/// A history database's location.
#[derive(Debug, Clone)]
pub enum Location {
    File(PathBuf),
    Postgres(PgUrl),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Postgres(u) => f.write_str(&u.shown),
        }
    }
}

/// What `--db` takes, for messages.
const TAKES: &str = "give a file (SQLite) or a postgres://USER@HOST[:PORT]/DB URL";

/// The query parameters rust-postgres reads (its `Config::param`); `sslmode` and `sslrootcert`
/// are read here.
const DRIVER_PARAMS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// libpq's other parameters: a refusal names them (a parameter's name is no secret; a key that
/// is none of libpq's may be a password typed in the wrong place, and is not shown).
const LIBPQ_ONLY_PARAMS: &[&str] = &[
    "passfile",
    "service",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslcompression",
    "sslcertmode",
    "sslkeylogfile",
    "requirepeer",
    "require_auth",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gssencmode",
    "gsslib",
    "gssdelegation",
    "replication",
    "fallback_application_name",
    "client_encoding",
];

/// `%XX` decoded (query parameter names and values).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' {
            if let (Some(h), Some(l)) = (b.get(i + 1).and_then(|c| hex(*c)), b.get(i + 2).and_then(|c| hex(*c))) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` with every byte but letters, digits and `-._~` written `%XX`: a shown part stays one
/// line and one part of a URL whatever it holds.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The scheme of `s` when it starts like a URL (`word:`), and whether `//` follows it.
fn scheme(s: &str) -> Option<(&str, bool)> {
    let end = s.find(':')?;
    let scheme = &s[..end];
    let ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    ok.then_some((scheme, s[end + 1..].starts_with("//")))
}

/// Whether `s` reads as a libpq key/value string: it starts with `word =`, or a libpq parameter
/// (`password=`, `host=`, ...) follows a space in it. Such a string is never a file name: it
/// would be a file named after the password.
fn key_value(s: &str) -> bool {
    let t = s.trim_start();
    let word = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(t.len());
    if word > 0
        && t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && t[word..].trim_start().starts_with('=')
    {
        return true;
    }
    let known = || {
        DRIVER_PARAMS
            .iter()
            .chain(LIBPQ_ONLY_PARAMS)
            .chain(&["sslmode", "sslrootcert"])
    };
    s.char_indices()
        .filter(|(_, c)| c.is_whitespace())
        .map(|(i, c)| s[i + c.len_utf8()..].trim_start())
        .any(|rest| {
            known().any(|k| {
                rest.strip_prefix(k)
                    .is_some_and(|after| after.trim_start().starts_with('='))
            })
        })
}

impl Location {
    /// Reads `--db` (or `--history`, or `TCPX_HISTORY_DB`): `flag` names it in messages. A
    /// refusal shows nothing of a string that may hold a password.
    pub fn parse(s: &str, flag: &str) -> Result<Location, Failure> {
        if s.trim().is_empty() {
            return Err(Failure::Usage(format!("{flag} is empty: {TAKES}")));
        }
        if key_value(s) {
            return Err(Failure::Usage(format!(
                "{flag} reads as a libpq key/value string (KEY=VALUE ...; not shown: it may hold a password), which tcpx-analyze does not take: write it as postgres://USER@HOST[:PORT]/DB, the password in PGPASSWORD"
            )));
        }
        match scheme(s) {
            Some((name, true)) if matches!(name.to_ascii_lowercase().as_str(), "postgres" | "postgresql") => {
                PgUrl::parse(s, flag).map(Location::Postgres)
            }
            Some((name, true)) => Err(Failure::Usage(format!(
                "{flag}: `{name}://` is no history database tcpx-analyze reads: {TAKES}"
            ))),
            // `postgres:/u:pw@h/db`, `postgres:u@h`, `x:u:pw@h`: a URL mistyped, never a file.
            Some((name, false))
                if matches!(name.to_ascii_lowercase().as_str(), "postgres" | "postgresql") || s.contains('@') =>
            {
                Err(Failure::Usage(format!(
                    "{flag} is neither a file name nor a URL (a scheme without `//`; not shown: it may hold a password): write postgres://USER@HOST[:PORT]/DB"
                )))
            }
            _ => Ok(Location::File(PathBuf::from(s))),
        }
    }
}

/// A URL's parts as rust-postgres splits them (its `UrlParser`): the user part up to the first
/// `@` of the whole text (none without one), the hosts up to the next `/` or `?`, the database
/// up to the next `?`, the parameters after it.
struct Parts<'a> {
    /// `USER[:PASSWORD]@`, or empty.
    credentials: &'a str,
    /// Hosts and database: `HOST[:PORT][,...][/DB]`.
    place: &'a str,
    query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(after_scheme: &'a str) -> Parts<'a> {
        let at = after_scheme.find('@').map_or(0, |i| i + 1);
        let (credentials, rest) = after_scheme.split_at(at);
        let (place, query) = rest.split_once('?').map_or((rest, None), |(p, q)| (p, Some(q)));
        Parts {
            credentials,
            place,
            query,
        }
    }
}

/// The URL as messages show it, from what the driver parsed: `postgres://HOST:PORT/DB` (hosts
/// and ports as the driver pairs them; the default port 5432 where none is given).
fn shown(c: &postgres::Config) -> String {
    let ports = c.get_ports();
    let port = |i: usize| match ports {
        [one] => *one,
        _ => ports.get(i).copied().unwrap_or(5432),
    };
    let mut hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let name = match h {
                Host::Tcp(n) if n.contains(':') => format!("[{n}]"),
                Host::Tcp(n) => percent_encode(n),
                Host::Unix(p) => percent_encode(&p.to_string_lossy()),
            };
            format!("{name}:{}", port(i))
        })
        .collect();
    if hosts.is_empty() {
        hosts = c
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                std::net::IpAddr::V6(a) => format!("[{a}]:{}", port(i)),
                std::net::IpAddr::V4(a) => format!("{a}:{}", port(i)),
            })
            .collect();
    }
    let db = c
        .get_dbname()
        .map_or(String::new(), |d| format!("/{}", percent_encode(d)));
    format!("postgres://{}{db}", hosts.join(","))
}

/// Whether every TCP host the driver parsed is a host name or an address: anything else is a
/// piece of a password whose `@` ended the user part early (`u:p@ss@h`), and is never shown.
fn hosts_are_names(c: &postgres::Config) -> bool {
    c.get_hosts().iter().all(|h| match h {
        Host::Tcp(n) => !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c)),
        Host::Unix(_) => true,
    })
}

impl PgUrl {
    fn parse(s: &str, flag: &str) -> Result<PgUrl, Failure> {
        // Before anything of the URL is known good, refusals show none of it.
        let hidden = |why: &str| Failure::Usage(format!("{flag} (a postgres:// URL, not shown): {why}"));
        let after_scheme = s.split_once("://").map_or("", |(_, r)| r);
        let parts = Parts::split(after_scheme);
        // A user part with `/` or `?` ran past the host to an `@` in the database or a
        // parameter: the driver would take the host from there.
        let user = parts.credentials.split(':').next().unwrap_or("");
        if user.contains(['/', '?']) {
            return Err(hidden(
                "an `@` after the host (in the database name or a parameter): write it %40",
            ));
        }
        // The hosts and database alone first: what refusals of a parameter show.
        let base = format!("postgres://{}{}", parts.credentials, parts.place);
        let parsed = |config: &str| -> Result<postgres::Config, Failure> {
            let c = config.parse::<postgres::Config>().map_err(|e| {
                hidden(&format!(
                    "{e}{} (postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=...&connect_timeout=S])",
                    std::error::Error::source(&e).map_or(String::new(), |c| format!(": {c}"))
                ))
            })?;
            if !hosts_are_names(&c) {
                return Err(hidden(
                    "a host that is no host name: an `@`, `/` or `?` of the password is written %40, %2F, %3F",
                ));
            }
            Ok(c)
        };
        let at = shown(&parsed(&base)?);
        let bad = |why: String| Failure::Usage(format!("{flag} {at}: {why}"));
        let mut kept = Vec::new();
        let mut given = Vec::new();
        let (mut tls, mut root_cert) = (Tls::Prefer, None);
        for p in parts
            .query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let Some((k, v)) = p.split_once('=') else {
                return Err(bad(
                    "a parameter without `=` (not shown): write KEY=VALUE, an `&` or `=` of a value as %26, %3D".into(),
                ));
            };
            let (k, v) = (percent_decode(k), percent_decode(v));
            match k.as_str() {
                "sslmode" => {
                    tls = match v.as_str() {
                        "disable" => Tls::Off,
                        "allow" | "prefer" => Tls::Prefer,
                        "require" => Tls::Require,
                        "verify-ca" => Tls::VerifyCa,
                        "verify-full" => Tls::VerifyFull,
                        _ => {
                            return Err(bad(
                                "sslmode: use disable, prefer, require, verify-ca or verify-full".into(),
                            ))
                        }
                    };
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(v)),
                k if DRIVER_PARAMS.contains(&k) => kept.push(p),
                k if LIBPQ_ONLY_PARAMS.contains(&k) => {
                    return Err(bad(format!(
                        "{k}= is libpq's but not read here: leave it out (sslmode, sslrootcert, connect_timeout, application_name, ... are)"
                    )))
                }
                _ => {
                    return Err(bad(
                        "a parameter that is none of libpq's (not shown: it may be a password): leave it out, or give the password as password=... or in PGPASSWORD".into(),
                    ))
                }
            }
            given.push(k);
        }
        // rust-postgres knows disable, prefer and require; the checks of verify-* are ours.
        kept.push(match tls {
            Tls::Off => "sslmode=disable",
            Tls::Prefer => "sslmode=prefer",
            _ => "sslmode=require",
        });
        let config = format!("{base}?{}", kept.join("&"));
        // The parameters may name hosts and a database too (`host=`, `dbname=`): shown as parsed.
        let shown = shown(&parsed(&config)?);
        Ok(PgUrl {
            config,
            shown,
            tls,
            root_cert,
            given,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(s: &str) -> PgUrl {
        match Location::parse(s, "--db") {
            Ok(Location::Postgres(u)) => u,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn urls_are_never_paths_and_passwords_never_shown() {
        let u = pg("postgres://ci:s3cret@db.example:5433/tcpx?sslmode=require&password=x2");
        assert_eq!(u.shown, "postgres://db.example:5433/tcpx");
        assert_eq!(u.tls, Tls::Require);
        let u = pg("postgresql://u@h/d?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem");
        assert_eq!(
            (u.tls, u.root_cert.as_deref()),
            (Tls::VerifyFull, Some(std::path::Path::new("/tmp/ca.pem")))
        );
        assert!(!u.config.contains("sslrootcert"), "{}", u.config);
        assert_eq!(u.shown, "postgres://h:5432/d");
        for bad in [
            "mysql://u:pw@h/d",
            "sqlite://x.db",
            "https://h/x",
            "postgres:/u@h/d",
            "postgres:/u:pw@h/d",
            "POSTGRES:u:pw@h/d",
            "x:u:pw@h/d",
            "postgres://u:pw@h/d?sslmode=sometimes",
            "postgres://u:pw@h/d?frobnicate=1",
            "postgres://u:ab@pw@h/d",
            "postgres://h/d?password=a@pw",
            "postgres://u:ab/pw@h/d?pw",
            "host=h port=5432 user=u password=pw dbname=d",
            "  dbname = d password=pw",
            "d.sqlite password=pw",
        ] {
            let e = Location::parse(bad, "--db").expect_err(bad).to_string();
            assert!(!e.contains("pw"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(matches!(
            Location::parse("results/h.sqlite", "--db").unwrap(),
            Location::File(_)
        ));
        assert!(matches!(
            Location::parse("/a/b:c/h.sqlite", "--db").unwrap(),
            Location::File(_)
        ));
    }

    /// The user part ends where the driver ends it, at the first `@`: a password with a raw `/`
    /// or `?` is the password, and the URL shown is what the driver connects to.
    #[test]
    fn a_url_is_split_as_the_driver_splits_it() {
        for (url, shown, password) in [
            (
                "postgres://u:ab/pw@127.0.0.1:5999/db",
                "postgres://127.0.0.1:5999/db",
                "ab/pw",
            ),
            (
                "postgres://u:ab?pw@127.0.0.1:5999/db?sslmode=disable",
                "postgres://127.0.0.1:5999/db",
                "ab?pw",
            ),
            (
                "POSTGRES://u:p%40w@[::1]/my%20db",
                "postgres://[::1]:5432/my%20db",
                "p@w",
            ),
            (
                "postgres://u@h1:1,h2/d?host=%2Ftmp%2Fs&connect_timeout=2",
                "postgres://h1:1,h2:5432,%2Ftmp%2Fs:5432/d",
                "",
            ),
        ] {
            let u = pg(url);
            assert_eq!(u.shown, shown, "{url}");
            let c: postgres::Config = u.config.parse().unwrap();
            assert_eq!(c.get_password().unwrap_or_default(), password.as_bytes(), "{url}");
            assert_eq!(c.get_user(), Some("u"), "{url}");
        }
    }
}
