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

/// `--connect`: which comms are open while data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectMode {
    /// Every comm of the job before the first byte, held to the end (the footprint of NCCL's
    /// alltoall, which connects every peer).
    All,
    /// Only the comms of the `--max-peers` round in flight: a size's iterations run round by
    /// round, each round's comms connected before its untimed warm-up and closed after it.
    Rounds,
}

/// `--max-peers`: how many peers an endpoint serves at once (fullmesh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxPeers {
    /// [`AUTO_MAX_PEERS`] where an endpoint has more peers than that, else all.
    Auto,
    /// Every peer at once (nccl-tests' alltoall posts them all).
    All,
    /// At most this many.
    Fixed(usize),
}

/// `--max-peers auto`: peers an endpoint serves at once when it has more. Fullmesh on the rig at
/// 8 nodes x 8 ranks x 4 NICs reached 0.25 of the shaped limit with all 56 peers at once (TCP
/// incast: retransmission timeouts) and 0.91 with 8 (docs/cluster.md#incast).
pub const AUTO_MAX_PEERS: usize = 8;

impl MaxPeers {
    /// The bound the plan applies: `None` = every peer at once.
    pub fn bound(self) -> Option<usize> {
        match self {
            MaxPeers::Auto => Some(AUTO_MAX_PEERS),
            MaxPeers::All => None,
            MaxPeers::Fixed(n) => Some(n),
        }
    }
}

impl fmt::Display for MaxPeers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxPeers::Auto => write!(f, "auto ({AUTO_MAX_PEERS})"),
            MaxPeers::All => f.write_str("all"),
            MaxPeers::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for MaxPeers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parses `--max-peers`: `auto`, `all`, or a count of at least 1.
pub fn parse_max_peers(s: &str) -> Result<MaxPeers, String> {
    match s {
        "auto" => Ok(MaxPeers::Auto),
        "all" => Ok(MaxPeers::All),
        _ => match s.parse::<usize>() {
            Ok(0) => Err("0 allows no traffic: use 1 or more, auto or all".into()),
            Ok(n) => Ok(MaxPeers::Fixed(n)),
            Err(_) => Err(format!("{s:?} is not a count: use a number of peers, auto or all")),
        },
    }
}

/// `--connects-in-flight`: auto (an even share of half the kernel's pids per endpoint:
/// [`crate::engine::setup::connects_in_flight`]) or a count of at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectsInFlight {
    Auto,
    Fixed(usize),
}

impl ConnectsInFlight {
    /// The count given, or `None` for auto.
    pub fn fixed(self) -> Option<usize> {
        match self {
            ConnectsInFlight::Auto => None,
            ConnectsInFlight::Fixed(n) => Some(n),
        }
    }
}

impl Serialize for ConnectsInFlight {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ConnectsInFlight::Auto => s.serialize_str("auto"),
            ConnectsInFlight::Fixed(n) => s.serialize_u64(*n as u64),
        }
    }
}

/// Parses `--connects-in-flight`: `auto`, or a count of at least 1.
pub fn parse_connects_in_flight(s: &str) -> Result<ConnectsInFlight, String> {
    match s {
        "auto" => Ok(ConnectsInFlight::Auto),
        _ => match s.parse::<usize>() {
            Ok(0) => Err("0 would never connect: use 1 or more, or auto".into()),
            Ok(n) => Ok(ConnectsInFlight::Fixed(n)),
            Err(_) => Err(format!(
                "{s:?} is not a count: use a number of connects (1 or more), or auto"
            )),
        },
    }
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
