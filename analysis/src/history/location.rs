//! Where a history is: `--db FILE` (SQLite, the default) or `--db postgres://USER@HOST[:PORT]/DB`
//! (PostgreSQL). A `scheme://` is never taken for a path: `postgres://` and `postgresql://` are
//! PostgreSQL, any other scheme is refused with one line. The URL is libpq's (`sslmode`,
//! `connect_timeout`, `application_name`, ... as query parameters); what rust-postgres does not
//! read itself is taken out here: `sslmode=verify-ca|verify-full` and `sslrootcert=FILE`
//! (see [`super::pg`]). The password, in the URL or in `PGPASSWORD`, is never shown: messages
//! name the URL as [`PgUrl::shown`] writes it, without it.

use crate::error::Failure;
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
    /// The URL as messages show it: no password.
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

/// `%XX` decoded (query parameter values).
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

/// The URL without its password (in the user part or as a parameter).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (main, query) = rest.split_once('?').map_or((rest, None), |(m, q)| (m, Some(q)));
    let (authority, path) = main.find('/').map_or((main, ""), |i| main.split_at(i));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or("")),
        None => authority.to_string(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        let kept: Vec<&str> = q
            .split('&')
            .filter(|p| !p.is_empty() && !p.to_ascii_lowercase().starts_with("password="))
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

/// The scheme of `s` when it starts like a URL (`word://`).
fn scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let ok = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    ok.then_some(scheme)
}

impl Location {
    /// Reads `--db` (or `--history`, or `TCPX_HISTORY_DB`): `flag` names it in messages.
    pub fn parse(s: &str, flag: &str) -> Result<Location, Failure> {
        if s.trim().is_empty() {
            return Err(Failure::Usage(format!(
                "{flag} is empty: give a file (SQLite) or a postgres://USER@HOST[:PORT]/DB URL"
            )));
        }
        match scheme(s).map(str::to_ascii_lowercase).as_deref() {
            Some("postgres" | "postgresql") => PgUrl::parse(s, flag).map(Location::Postgres),
            Some(other) => Err(Failure::Usage(format!(
                "{flag} {}: `{other}://` is no history database tcpx-analyze reads: give a file (SQLite) or a postgres://USER@HOST[:PORT]/DB URL",
                redact(s)
            ))),
            None => {
                let lower = s.to_ascii_lowercase();
                if lower.starts_with("postgres:") || lower.starts_with("postgresql:") {
                    return Err(Failure::Usage(format!(
                        "{flag} {}: not a file name nor a URL: write postgres://USER@HOST[:PORT]/DB",
                        redact(s)
                    )));
                }
                Ok(Location::File(PathBuf::from(s)))
            }
        }
    }
}

impl PgUrl {
    fn parse(s: &str, flag: &str) -> Result<PgUrl, Failure> {
        let shown = redact(s);
        let bad = |why: String| Failure::Usage(format!("{flag} {shown}: {why}"));
        let (main, query) = s.split_once('?').map_or((s, None), |(m, q)| (m, Some(q)));
        let mut kept = Vec::new();
        let mut given = Vec::new();
        let (mut tls, mut root_cert) = (Tls::Prefer, None);
        for p in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let v = percent_decode(v);
            given.push(k.to_string());
            match k {
                "sslmode" => {
                    tls = match v.as_str() {
                        "disable" => Tls::Off,
                        "allow" | "prefer" => Tls::Prefer,
                        "require" => Tls::Require,
                        "verify-ca" => Tls::VerifyCa,
                        "verify-full" => Tls::VerifyFull,
                        _ => {
                            return Err(bad(format!(
                                "sslmode={v}: use disable, prefer, require, verify-ca or verify-full"
                            )))
                        }
                    };
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(v)),
                _ => kept.push(p),
            }
        }
        // rust-postgres knows disable, prefer and require; the checks of verify-* are ours.
        kept.push(match tls {
            Tls::Off => "sslmode=disable",
            Tls::Prefer => "sslmode=prefer",
            _ => "sslmode=require",
        });
        let config = format!("{main}?{}", kept.join("&"));
        if let Err(e) = config.parse::<postgres::Config>() {
            return Err(bad(format!(
                "{e} (postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=...&connect_timeout=S])"
            )));
        }
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

    #[test]
    fn urls_are_never_paths_and_passwords_never_shown() {
        let l = Location::parse(
            "postgres://ci:s3cret@db.example:5433/tcpx?sslmode=require&password=x2",
            "--db",
        )
        .unwrap();
        let Location::Postgres(u) = &l else { panic!("{l:?}") };
        assert_eq!(u.shown, "postgres://ci@db.example:5433/tcpx?sslmode=require");
        assert_eq!(u.tls, Tls::Require);
        assert!(!l.to_string().contains("s3cret"));
        let u = match Location::parse(
            "postgresql://u@h/d?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
            "--db",
        )
        .unwrap()
        {
            Location::Postgres(u) => u,
            l @ Location::File(_) => panic!("{l:?}"),
        };
        assert_eq!(
            (u.tls, u.root_cert.as_deref()),
            (Tls::VerifyFull, Some(std::path::Path::new("/tmp/ca.pem")))
        );
        assert!(!u.config.contains("sslrootcert"), "{}", u.config);
        for bad in [
            "mysql://u:pw@h/d",
            "sqlite://x.db",
            "https://h/x",
            "postgres:/u@h/d",
            "postgres://u:pw@h/d?sslmode=sometimes",
            "postgres://u:pw@h/d?frobnicate=1",
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
        assert_eq!(redact("postgres://h/d"), "postgres://h/d");
    }
}
