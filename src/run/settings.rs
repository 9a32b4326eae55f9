//! The door: the parsed command line becomes typed settings here, once, and is validated here,
//! once ([`Cli::validate`] for what the flags alone decide). Below `run`, no module knows `Cli`;
//! each takes the settings type it owns (`plan::SweepSettings`, `plan::Iterations`,
//! `placement::PlacementSettings`, `baseline::BaselineSettings`; the engine's `EngineConfig`
//! is built from [`TransportSettings`] once the plugin is known).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use nccl_net::LogLevel;

use crate::baseline::BaselineSettings;
use crate::cli::{Cli, Mem, PluginLog, Scope as ScopeFlag};
use crate::engine::backoff::PollMode;
use crate::export;
use crate::placement::PlacementSettings;
use crate::plan::{Iterations, Scope, SweepSettings};

/// Everything a run needs from the command line, typed.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub sweep: SweepSettings,
    pub iterations: Iterations,
    pub job: JobSettings,
    pub plugin: PluginSettings,
    pub transport: TransportSettings,
    pub placement: PlacementSettings,
    /// `--baseline nccl` (None without it).
    pub baseline: Option<BaselineSettings>,
    pub output: OutputSettings,
    /// `-T`: the deadline of every phase.
    pub timeout: Duration,
    /// `--dry-run`: stop after placement and preflight.
    pub dry_run: bool,
    /// `--force`: run despite error findings of preflight (recorded).
    pub force: bool,
    /// Every flag as given, for summary.json's `config` (generated from `Cli` by serde).
    pub flags: serde_json::Value,
}

/// The job's shape as the flags set it (`-g`, `--ranks-per-node`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobSettings {
    pub endpoints_per_rank: usize,
    pub ranks_per_node: Option<usize>,
}

/// Which plugin to open and how (`--plugin --abi --plugin-log`).
#[derive(Debug, Clone)]
pub(crate) struct PluginSettings {
    /// A path (contains `/`) or a name; `None`: the bundled tcpx-emu.
    pub spec: Option<String>,
    pub force_abi: Option<u32>,
    pub log_level: LogLevel,
}

/// How bytes move (`--mem --channels --window --chunk --max-reg --setup-threads --poll`); the
/// engine's config once the plugin has said what it allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TransportSettings {
    pub mem: Mem,
    pub channels: usize,
    pub window: usize,
    pub chunk: u64,
    pub max_reg: Option<u64>,
    pub setup_threads: Option<usize>,
    pub poll: PollMode,
}

/// Where results go and what rank 0 shows while it runs.
#[derive(Debug, Clone)]
pub(crate) struct OutputSettings {
    /// The result directory; `None` with `--no-out`.
    pub dir: Option<PathBuf>,
    /// Whether rank 0 draws a progress bar.
    pub progress: bool,
}

impl Settings {
    /// The settings of `cli`, or the usage error (one line naming the fix).
    pub fn from_cli(cli: &Cli) -> Result<Settings, String> {
        cli.validate()?;
        Ok(Settings {
            sweep: SweepSettings {
                pattern: cli.pattern,
                scope: match cli.scope {
                    ScopeFlag::All => Some(Scope::All),
                    ScopeFlag::InterNode => Some(Scope::InterNode),
                    ScopeFlag::Auto => None,
                },
                dir: cli.dir,
                sizes: cli.sizes(),
                max_peers: cli.max_peers,
            },
            iterations: Iterations {
                warmup: cli.warmup_iters,
                iters: cli.iters,
                check: cli.check_enabled(),
                average: cli.average,
            },
            job: JobSettings {
                endpoints_per_rank: cli.ngpus,
                ranks_per_node: cli.ranks_per_node,
            },
            plugin: PluginSettings {
                spec: cli.plugin.clone(),
                force_abi: cli.abi,
                log_level: match cli.plugin_log {
                    PluginLog::None => LogLevel::None,
                    PluginLog::Warn => LogLevel::Warn,
                    PluginLog::Info => LogLevel::Info,
                    PluginLog::Trace => LogLevel::Trace,
                },
            },
            transport: TransportSettings {
                mem: cli.mem,
                channels: cli.channels,
                window: cli.window,
                chunk: cli.chunk,
                max_reg: cli.max_reg,
                setup_threads: cli.setup_threads,
                poll: cli.poll,
            },
            placement: PlacementSettings {
                channels: cli.channels,
                spread_channels: cli.spread_channels,
                net_dev: cli.net_dev.clone(),
                cpu_bind: cli.cpu_bind.clone(),
            },
            baseline: cli.baseline.map(|_| BaselineSettings {
                nccl_lib: cli.nccl_lib.clone(),
            }),
            output: OutputSettings {
                dir: (!cli.no_out).then(|| {
                    cli.out
                        .clone()
                        .unwrap_or_else(|| export::default_out_dir(cli.pattern.as_str()))
                }),
                progress: cli.progress_enabled(std::io::stderr().is_terminal()),
            },
            timeout: Duration::from_secs(cli.timeout),
            dry_run: cli.dry_run,
            force: cli.force,
            flags: cli.config_json(),
        })
    }
}
