//! The values of flags: the option enums and the parsers of sizes, reductions, NIC lists and CPU
//! lists (each error one line that names the fix), and the size format of the table.

use std::fmt;

use clap::ValueEnum;
use serde::Serialize;

use super::{Dir, Pattern};
use crate::placement::{CpuBind, NetDevSpec};

/// How per-rank times are reduced to one number before bandwidth is computed (nccl-tests `-a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeReduction {
    /// `-a 0`: rank 0's time.
    Rank0,
    /// `-a 1`: the mean over ranks (default).
    Avg,
    /// `-a 2`: the fastest rank.
    Min,
    /// `-a 3`: the slowest rank.
    Max,
}

/// Which endpoint pairs carry traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Every pair, same node or not.
    All,
    /// Only pairs on different nodes.
    InterNode,
    /// inter-node when the job spans several nodes, else all.
    Auto,
}

/// Buffer memory kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mem {
    /// cuda when the plugin and a GPU allow it, else host.
    Auto,
    /// Host memory.
    Host,
    /// CUDA device memory.
    Cuda,
}

/// When to draw a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Progress {
    /// Only when the output is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Plugin log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginLog {
    /// Warnings only.
    Warn,
    /// Informational messages.
    Info,
    /// Everything.
    Trace,
    /// Nothing.
    None,
}

impl TimeReduction {
    /// The name used in reports: `rank0`, `avg`, `min`, `max`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeReduction::Rank0 => "rank0",
            TimeReduction::Avg => "avg",
            TimeReduction::Min => "min",
            TimeReduction::Max => "max",
        }
    }

    /// nccl-tests' `-a` number.
    pub fn code(self) -> u32 {
        match self {
            TimeReduction::Rank0 => 0,
            TimeReduction::Avg => 1,
            TimeReduction::Min => 2,
            TimeReduction::Max => 3,
        }
    }
}

// Names for the plan's enums, as the other enums here have. (Inherent impls may live in any
// module of the crate; if plan.rs grows its own `as_str`, delete these.)
impl Pattern {
    /// The name used on the command line and in result files.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Sendrecv => "sendrecv",
            Pattern::Pairs => "pairs",
            Pattern::Ring => "ring",
            Pattern::Fullmesh => "fullmesh",
        }
    }
}

impl Dir {
    /// The name used on the command line and in result files.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Uni => "uni",
            Dir::Bi => "bi",
        }
    }
}

impl Scope {
    /// The name used on the command line and in result files.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::All => "all",
            Scope::InterNode => "inter-node",
            Scope::Auto => "auto",
        }
    }

    /// Resolves `auto`: inter-node when the job spans several nodes, else all.
    /// `all` and `inter-node` are returned unchanged.
    pub fn resolve(self, nodes: usize) -> Scope {
        match self {
            Scope::Auto if nodes > 1 => Scope::InterNode,
            Scope::Auto => Scope::All,
            other => other,
        }
    }
}

impl Mem {
    /// The name used on the command line and in result files.
    pub fn as_str(self) -> &'static str {
        match self {
            Mem::Auto => "auto",
            Mem::Host => "host",
            Mem::Cuda => "cuda",
        }
    }
}

impl PluginLog {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginLog::Warn => "warn",
            PluginLog::Info => "info",
            PluginLog::Trace => "trace",
            PluginLog::None => "none",
        }
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(TimeReduction, Scope, Mem, PluginLog);

pub(super) fn parse_net_dev(s: &str) -> Result<NetDevSpec, String> {
    s.parse()
}

pub(super) fn parse_cpu_bind(s: &str) -> Result<CpuBind, String> {
    s.parse()
}

/// Parses `-a`: nccl-tests' numbers 0..=3, or the names rank0, avg, min, max.
pub(super) fn parse_reduction(s: &str) -> Result<TimeReduction, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "0" | "rank0" => Ok(TimeReduction::Rank0),
        "1" | "avg" => Ok(TimeReduction::Avg),
        "2" | "min" => Ok(TimeReduction::Min),
        "3" | "max" => Ok(TimeReduction::Max),
        _ => Err(format!(
            "invalid time reduction '{s}': use 0 (rank0), 1 (avg), 2 (min) or 3 (max)"
        )),
    }
}

/// Parses a size: a number (fractions allowed) with an optional binary suffix K, M or G
/// (case-insensitive, 1024-based, as nccl-tests). `"1.5M"` is 1572864. The result must be a
/// whole number of bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size '{s}': use a number with an optional K, M or G suffix (binary)");
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1u64 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1u64 << 30),
        Some(_) => (t, 1u64),
        None => return Err(invalid()),
    };
    // Only plain decimal numbers: f64's parser would also take "inf", "nan" and "1e3".
    if num.is_empty()
        || !num.chars().all(|c| c.is_ascii_digit() || c == '.')
        || !num.chars().any(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    if !num.contains('.') {
        return num
            .parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(mult))
            .ok_or_else(|| format!("invalid size '{s}': too large"));
    }
    let v: f64 = num.parse().map_err(|_| invalid())?;
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(format!("invalid size '{s}': too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("invalid size '{s}': {bytes} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats a size with the largest binary suffix that divides it exactly:
/// `64M`, `1G`, `1536K`, `100`, `0`. [`parse_size`] reads it back to the same value.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    if bytes == 0 {
        return "0".into();
    }
    for (unit, suffix) in UNITS {
        if bytes & (unit - 1) == 0 {
            return format!("{}{}", bytes / unit, suffix);
        }
    }
    bytes.to_string()
}
