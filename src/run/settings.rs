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
use crate::cli::{Cli, ConnectMode, IterTime, Mem, PluginLog, Scope as ScopeFlag};
use crate::engine::backoff::PollMode;
use crate::export;
use crate::placement::PlacementSettings;
use crate::plan::{Iterations, Scope, SweepSettings};
use tcpx_units::TimeReduction;

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
    /// `-T`: the deadline of every phase ([`TIMEOUT_OFF`] with `-T 0`).
    pub timeout: Duration,
    /// `--warmup-once`: every size's warm-up before the first timed iteration, none between sizes.
    pub warmup_once: bool,
    /// `NCCL_TESTS_MIN_BW` (GB/s): the run fails (exit 7) when the average busbw is below 90% of it.
    pub min_bw: Option<f64>,
    /// `--dry-run`: stop after placement and preflight.
    pub dry_run: bool,
    /// `--force`: run despite error findings of preflight (recorded).
    pub force: bool,
    /// `--suspect-share`, `--bad-share`: the node verdicts' thresholds.
    pub verdicts: crate::verdict::Thresholds,
    /// `--probe-rounds`: rounds of node pairs after the sweep that decide the node verdicts.
    pub probe_rounds: usize,
    /// `--probe-pairs`: node pairs of a probe round at once (0: all).
    pub probe_pairs: usize,
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

/// How bytes move (`--mem --channels --window --chunk --max-reg --setup-threads
/// --connects-in-flight --poll`); the engine's config once the plugin has said what it allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TransportSettings {
    pub mem: Mem,
    pub channels: usize,
    pub window: usize,
    pub chunk: u64,
    pub max_reg: Option<u64>,
    pub setup_threads: Option<usize>,
    /// `--connects-in-flight`; None: [`crate::engine::setup::connects_in_flight`].
    pub connects_in_flight: Option<usize>,
    pub poll: PollMode,
    /// `--connect`: every comm up front, or only the round in flight.
    pub connect: ConnectMode,
    /// `--connect-peers`: with `--connect rounds`, the peers of one connect's rounds.
    pub connect_peers: usize,
}

/// Where results go and what rank 0 shows while it runs.
#[derive(Debug, Clone)]
pub(crate) struct OutputSettings {
    /// The result directory; `None` with `--no-out`.
    pub dir: Option<PathBuf>,
    /// Whether rank 0 draws a progress bar.
    pub progress: bool,
    /// `-J`: nccl-tests' JSON file (rank 0 writes it; never overwritten).
    pub nccl_json: Option<PathBuf>,
    /// `--healthy-hostfile`, `--drain-list`: the node verdicts as a scheduler takes them.
    pub node_lists: export::nodes::Lists,
}

impl Settings {
    /// With `--connect rounds`: the `--max-peers` rounds one connect opens
    /// ([`crate::plan::rounds_per_connect`]).
    pub fn rounds_per_connect(&self) -> usize {
        crate::plan::rounds_per_connect(self.sweep.max_peers, self.transport.connect_peers)
    }

    /// Header notes for the nccl-tests behaviours asked for, so the table says what its
    /// columns mean.
    pub fn nccl_tests_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.warmup_once {
            notes.push(format!(
                "--warmup-once: {} warm-up iterations of every size before the first timed one, none between sizes (nccl-tests' -w)",
                self.iterations.warmup
            ));
        }
        if self.iterations.iteration_reduction != self.iterations.average {
            notes.push(format!(
                "t_min t_max t_p99 cv% t_med and samples.csv: each iteration's {} over ranks (--iter-time; nccl-tests -I takes the max)",
                self.iterations.iteration_reduction
            ));
        }
        if self.transport.connect == crate::cli::ConnectMode::Rounds {
            notes.push(
                "--connect rounds: a size's time is the sum of its rounds'; the idle gap between rounds (their connects) lets shapers and switch buffers drain, so a round that fits in their burst runs above the sustained rate (16 x 8 x 4 rig at 1-8 MiB: 1.4x a node's shaped limit). Compare busbw with --connect all".into(),
            );
        }
        if self.timeout == TIMEOUT_OFF {
            notes.push("-T 0: no deadline; a stuck plugin or peer hangs the job (nccl-tests' default)".into());
        }
        if let Some(min) = self.min_bw {
            notes.push(format!(
                "{MIN_BW_ENV}={min}: the run fails (exit 7) if the average busbw is below {} GB/s",
                min * crate::report::BandwidthGate::MARGIN
            ));
        }
        notes
    }
}

/// `-T 0`: no deadline (nccl-tests' default); a century, so every `Instant + timeout` still works.
pub(crate) const TIMEOUT_OFF: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The variable nccl-tests reads for its bandwidth gate.
pub const MIN_BW_ENV: &str = "NCCL_TESTS_MIN_BW";

/// `-T SECONDS` as a deadline: 0 is off ([`TIMEOUT_OFF`]).
pub(crate) fn timeout_of(seconds: u64) -> Duration {
    if seconds == 0 {
        TIMEOUT_OFF
    } else {
        Duration::from_secs(seconds)
    }
}

/// `NCCL_TESTS_MIN_BW` as nccl-tests reads it (GB/s), but strictly: nccl-tests' `atof` turns a
/// typo into 0, a gate that always passes; here it is a usage error.
pub(crate) fn min_bw_of(value: Option<&str>) -> Result<Option<f64>, String> {
    let Some(v) = value else { return Ok(None) };
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
        _ => Err(format!(
            "{MIN_BW_ENV}={v:?} is not a bandwidth: set it to the least average busbw in GB/s (e.g. {MIN_BW_ENV}=20) or unset it"
        )),
    }
}

/// `--plugin-log`, raised by `-v` (info) and `-vv` (trace), never lowered.
fn plugin_log_level(flag: PluginLog, verbose: u8) -> LogLevel {
    let given = match flag {
        PluginLog::None => LogLevel::None,
        PluginLog::Warn => LogLevel::Warn,
        PluginLog::Info => LogLevel::Info,
        PluginLog::Trace => LogLevel::Trace,
    };
    let wanted = match verbose {
        0 => LogLevel::None,
        1 => LogLevel::Info,
        _ => LogLevel::Trace,
    };
    let rank = |l: LogLevel| match l {
        LogLevel::None => 0,
        LogLevel::Warn => 1,
        LogLevel::Info => 2,
        LogLevel::Trace => 3,
    };
    if rank(wanted) > rank(given) {
        wanted
    } else {
        given
    }
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
                max_peers: cli.max_peers.bound(),
            },
            iterations: Iterations {
                warmup: cli.warmup_iters,
                iters: cli.iters,
                check: cli.check_enabled(),
                average: cli.average,
                iteration_reduction: match cli.iter_time {
                    IterTime::Reduced => cli.average,
                    IterTime::Max => TimeReduction::Max,
                },
                timing: cli.timing,
            },
            job: JobSettings {
                endpoints_per_rank: cli.ngpus,
                ranks_per_node: cli.ranks_per_node,
            },
            plugin: PluginSettings {
                spec: cli.plugin.clone(),
                force_abi: cli.abi,
                log_level: plugin_log_level(cli.plugin_log, cli.verbose),
            },
            transport: TransportSettings {
                mem: cli.mem,
                channels: cli.channels,
                window: cli.window,
                chunk: cli.chunk,
                max_reg: cli.max_reg,
                setup_threads: cli.setup_threads,
                connects_in_flight: cli.connects_in_flight.fixed(),
                poll: cli.poll,
                connect: cli.connect,
                connect_peers: usize::try_from(cli.connect_peers).unwrap_or(usize::MAX),
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
                nccl_json: cli.output_file.clone(),
                node_lists: export::nodes::Lists {
                    healthy_hostfile: cli.healthy_hostfile.clone(),
                    drain_list: cli.drain_list.clone(),
                },
            },
            timeout: timeout_of(cli.timeout),
            warmup_once: cli.warmup_once,
            min_bw: min_bw_of(std::env::var(MIN_BW_ENV).ok().as_deref())?,
            dry_run: cli.dry_run,
            force: cli.force,
            verdicts: crate::verdict::Thresholds::new(cli.suspect_share, cli.bad_share)?,
            probe_rounds: usize::from(cli.probe_rounds),
            probe_pairs: cli.probe_pairs,
            flags: cli.config_json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(args: &[&str]) -> Settings {
        let cli = Cli::try_parse_from(std::iter::once("tcpx-perf").chain(args.iter().copied())).expect("parse");
        Settings::from_cli(&cli).expect("settings")
    }

    #[test]
    fn nccl_tests_min_bw_is_read_strictly() {
        assert_eq!(min_bw_of(None), Ok(None));
        assert_eq!(min_bw_of(Some("20")), Ok(Some(20.0)));
        assert_eq!(min_bw_of(Some(" 1.5 ")), Ok(Some(1.5)));
        for bad in ["", "fast", "-1", "nan", "inf"] {
            let e = min_bw_of(Some(bad)).unwrap_err();
            assert!(
                e.starts_with("NCCL_TESTS_MIN_BW=") && e.contains("GB/s") && !e.contains('\n'),
                "{e}"
            );
        }
    }

    #[test]
    fn nccl_tests_behaviours_on_request() {
        assert_eq!(timeout_of(0), TIMEOUT_OFF);
        assert_eq!(timeout_of(7), Duration::from_secs(7));
        // The deadline arithmetic the watchdogs do still works with "off".
        assert!(std::time::Instant::now().checked_add(TIMEOUT_OFF).is_some());
        let s = settings(&["-T", "0", "--warmup-once", "--iter-time", "max", "-a", "2"]);
        assert_eq!(s.timeout, TIMEOUT_OFF);
        assert!(s.warmup_once);
        assert_eq!(s.iterations.average, TimeReduction::Min);
        assert_eq!(s.iterations.iteration_reduction, TimeReduction::Max);
        let d = settings(&["-a", "2"]);
        assert_eq!(d.iterations.iteration_reduction, TimeReduction::Min);
        assert!(!d.warmup_once);
        let notes = s.nccl_tests_notes().join("\n");
        assert!(
            notes.contains("--warmup-once") && notes.contains("max over ranks") && notes.contains("-T 0"),
            "{notes}"
        );
        // -a max with the default --iter-time is no note (the spread already uses max).
        assert!(settings(&["-a", "3", "--iter-time", "max"])
            .nccl_tests_notes()
            .is_empty());
        let j = settings(&["-J", "x.json"]);
        assert_eq!(j.output.nccl_json.as_deref(), Some(std::path::Path::new("x.json")));
    }

    #[test]
    fn verbose_raises_the_plugin_log() {
        assert_eq!(plugin_log_level(PluginLog::Warn, 0), LogLevel::Warn);
        assert_eq!(plugin_log_level(PluginLog::Warn, 1), LogLevel::Info);
        assert_eq!(plugin_log_level(PluginLog::None, 2), LogLevel::Trace);
        assert_eq!(plugin_log_level(PluginLog::Trace, 1), LogLevel::Trace);
        assert_eq!(plugin_log_level(PluginLog::None, 0), LogLevel::None);
        assert_eq!(settings(&["-vv"]).plugin.log_level, LogLevel::Trace);
    }
}
