//! Error types. Every failure maps onto one documented exit code.

use std::fmt;

/// Exit codes of `tcpx-analyze` (documented in the README and in `--help`).
pub mod exit {
    /// Gate passed (or compare/plot/show succeeded).
    pub const PASS: i32 = 0;
    /// At least one comparison is a regression.
    pub const REGRESSION: i32 = 1;
    /// No regression, but at least one comparison is inconclusive (fail closed).
    pub const INCONCLUSIVE: i32 = 2;
    /// Invalid, missing or incomplete input, missing sizes, or wrong data (`#wrong > 0`).
    pub const INVALID_INPUT: i32 = 3;
    /// Comparison refused as apples-to-oranges (pattern, size range, unit, ...); `--force` overrides.
    pub const REFUSED: i32 = 4;
    /// Command-line usage error (clap errors are remapped to 64 as well).
    pub const USAGE: i32 = 64;
}

/// A parse error that names the file and (when known) the line.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub file: String,
    pub line: Option<usize>,
    pub msg: String,
}

impl ParseError {
    pub fn new(file: &str, line: Option<usize>, msg: impl Into<String>) -> Self {
        ParseError {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.msg),
            None => write!(f, "{}: {}", self.file, self.msg),
        }
    }
}

impl std::error::Error for ParseError {}

/// A top-level failure, classified by exit code.
#[derive(Debug)]
pub enum Failure {
    /// Invalid/missing input or wrong data: exit 3.
    Input(String),
    /// Apples-to-oranges comparison refused: exit 4. Each string is one reason.
    Refused(Vec<String>),
    /// Usage error: exit 64.
    Usage(String),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Input(_) => exit::INVALID_INPUT,
            Failure::Refused(_) => exit::REFUSED,
            Failure::Usage(_) => exit::USAGE,
        }
    }
}

impl std::error::Error for Failure {}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Input(m) => write!(f, "invalid input: {m}"),
            Failure::Refused(r) => {
                writeln!(f, "comparison refused (apples-to-oranges; --force to override):")?;
                for x in r {
                    writeln!(f, "  - {x}")?;
                }
                Ok(())
            }
            Failure::Usage(m) => write!(f, "usage: {m}"),
        }
    }
}

impl From<ParseError> for Failure {
    fn from(e: ParseError) -> Self {
        Failure::Input(e.to_string())
    }
}
