//! A finding: one line of a check's report (preflight before the run, devmem's after it), with
//! its level. Its own module because both [`super::preflight`] and [`super::devmem`] make them,
//! and preflight reads devmem's counters: with the type in preflight the two imported each other.

use serde::{Deserialize, Serialize};

/// How bad a finding is; the order (errors first) is the order reports list them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warning,
    Ok,
}

/// One line of a check's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub level: Level,
    pub text: String,
}

impl Finding {
    pub fn error(text: impl Into<String>) -> Finding {
        Finding {
            level: Level::Error,
            text: text.into(),
        }
    }
    pub fn warning(text: impl Into<String>) -> Finding {
        Finding {
            level: Level::Warning,
            text: text.into(),
        }
    }
    pub fn ok(text: impl Into<String>) -> Finding {
        Finding {
            level: Level::Ok,
            text: text.into(),
        }
    }
}
