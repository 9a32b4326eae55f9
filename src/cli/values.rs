//! The values of flags: the option enums and the parsers of NIC lists and CPU lists (each error
//! one line that names the fix). Sizes and `-a` parse with `tcpx-units`' grammar.

use std::fmt;

use clap::ValueEnum;
use serde::Serialize;

use super::{Dir, Pattern};
use crate::placement::{CpuBind, NetDevSpec};

/// `--baseline`: what to measure beside tcpx-perf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineKind {
    /// NCCL (libnccl.so.2, loaded at run time) through the same plugin, same GPUs, same job.
    Nccl,
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

/// `--iter-time`: how each timed iteration's per-rank times become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IterTime {
    /// Reduced over ranks as -a says.
    Reduced,
    /// The slowest rank's (nccl-tests -I 1: "i_* uses max over process rows").
    Max,
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
    #[must_use]
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
display_as_str!(Scope, Mem, PluginLog);

pub(super) fn parse_net_dev(s: &str) -> Result<NetDevSpec, String> {
    s.parse()
}

pub(super) fn parse_cpu_bind(s: &str) -> Result<CpuBind, String> {
    s.parse()
}

pub(super) fn parse_plan_shape(s: &str) -> Result<crate::placement::resources::PlanShape, String> {
    s.parse()
}
