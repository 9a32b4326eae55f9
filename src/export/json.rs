//! `summary.json`: provenance, configuration, the per-size results (without per-iteration
//! samples and the pair matrix, which are in `samples.csv` and `pairs.csv`) and the run's
//! verdict. Written last and atomically (a temporary file, fsync, rename), so a reader
//! that finds `summary.json` finds it whole, and a directory without it is known to be
//! partial.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use super::row::SizeRow;
use super::{avg_busbw, write_atomically, SCHEMA_VERSION};
use crate::report::{HostInfo, PluginInfo, RunInfo, RunSettings, SizeResult};

/// File name in the result directory.
pub const SUMMARY_JSON: &str = "summary.json";

/// How the run ended (or that it has not yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// Every size measured and checked (or verified), no wrong bytes.
    Ok,
    /// Every size measured, but some size's bytes were neither data-checked nor verified by an
    /// exact witness (`-c 0`): the figures stand, the delivery is unknown.
    Unchecked,
    /// Every size measured, but the data check found wrong bytes.
    WrongData,
    /// Every size measured and right, but the average busbw was below 90% of
    /// `NCCL_TESTS_MIN_BW` (exit 7): `min_bw` holds the figures.
    BelowMinBw,
    /// The run stopped early; the message says why. The results are partial.
    Failed(String),
    /// The run stopped early because a rank failed: the first one rank 0 learned of, and what
    /// followed. The results are partial.
    RankFailed(RankFailure),
    /// The run refused to move data (error findings of preflight without `--force`); the
    /// message says why. No size was measured.
    Refused(String),
    /// Written after each size while the sweep goes on: a run that ends without a word (kill -9,
    /// power loss) leaves this, with every size measured before.
    Running,
    /// SIGINT or SIGTERM (named) ended the run, sent by `from` (`mpirun (pid 4242)`) when a
    /// process sent it; the results are partial. `rank`: the rank other than 0 that a process
    /// other than the launcher signalled first (it told rank 0 before it stopped), and what
    /// rank 0 heard after; `None` when the signal rank 0 itself got is the story.
    Interrupted {
        signal: String,
        from: Option<String>,
        rank: Option<SignalledRank>,
    },
    /// A phase outlived `-T`; the diagnosis names who did not arrive.
    Timeout(TimeoutDiagnosis),
}

/// Why a run timed out, as rank 0 saw it: the phase, and each other rank's own report or silence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TimeoutDiagnosis {
    /// `-T`, seconds.
    pub limit_s: u64,
    /// What rank 0 was waiting in when `-T` passed.
    pub phase: String,
    /// Ranks that had not arrived at the barrier rank 0 waited in (empty when rank 0 itself
    /// stalled elsewhere).
    pub absent_ranks: Vec<usize>,
    /// Ranks that sent no account of their own within the grace period after rank 0's timeout
    /// (stopped, hung, or unreachable).
    pub silent_ranks: Vec<usize>,
    /// Every rank's own account (rank 0's included), in rank order.
    pub reports: Vec<RankReport>,
    /// The rank the diagnosis blames (summary.json's `failure`), if one.
    #[serde(skip)]
    pub culprit: Option<RankFailure>,
}

/// The rank that ended the run (the root of the blame graph, [`crate::blame`]), and what
/// followed: what another rank or mpirun did next must not hide the cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RankFailure {
    /// The culprit's rank (`culprit.rank`).
    pub rank: usize,
    /// The rank's host name.
    pub host: String,
    /// `connect` (workers, comms, the baseline's communicators), `sweep`, `probe` or `close`: where the
    /// culprit failed, or (when it said nothing) where the ranks that blame it did.
    pub phase: String,
    /// The culprit's own error, first line (for one that said nothing, or was signalled, what
    /// is known of it).
    pub error: String,
    /// What happened after (rank 0's own error, the SIGTERM mpirun sent, a timeout); null when
    /// nothing did before the record was written.
    pub then: Option<String>,
    /// Why this rank, of all that failed, is the one named.
    pub culprit: Culprit,
}

/// The root of the blame graph: the rank that others' errors lead to and that blames nobody,
/// reported a local error, was signalled, or said nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Culprit {
    pub rank: usize,
    /// The rank's host name.
    pub host: String,
    /// The NIC of the comms involved, when known: the one its own error names, else the one
    /// every error that blames it names (their side), else the one NIC all its endpoints use.
    pub nic: Option<String>,
    /// As `failure.phase`.
    pub phase: String,
    /// `local-error` (its own plugin or system call failed), `silent` (blamed, or awaited, and
    /// no word within the grace: stopped, hung or unreachable), `signalled` (by a process other
    /// than its launcher: `sender`), `killed` (silent, and its peers saw its connections closed
    /// or reset: kill -9, a crash), `blamed-by-N` (its error names no peer, or the blame goes
    /// round in a circle, and N ranks' errors name it).
    pub reason: String,
    /// Its own error, first line; null when it said nothing.
    pub error: Option<String>,
    /// `signalled`: who sent the signal (`sh (pid 77)`).
    pub sender: Option<String>,
    /// How many ranks' own errors name it.
    pub blamed_by: usize,
    /// The ranks that failed after it (their chain of blame ends here), in rank order.
    pub victims: Vec<usize>,
    /// Other roots of the graph (ranks that failed on their own account too), headline first.
    pub other_roots: Vec<usize>,
}

impl RankFailure {
    /// `rank 2 (node1) failed in connect: ERROR[; N rank(s) failed after it][; then THEN]`, or
    /// for a rank that said nothing `rank 38 (node4, eth1) fell silent in sweep (...)`:
    /// `error` in summary.json.
    pub fn line(&self) -> String {
        let c = &self.culprit;
        let then = self.then.as_ref().map_or(String::new(), |t| format!("; then {t}"));
        let after = match c.victims.len() {
            0 => String::new(),
            n => format!("; {n} rank(s) failed after it"),
        };
        let nic = c.nic.as_ref().map_or(String::new(), |n| format!(", {n}"));
        let (rank, host, phase) = (self.rank, &self.host, &self.phase);
        match c.reason.as_str() {
            "silent" => format!(
                "rank {rank} ({host}{nic}) fell silent in {phase} (stopped, hung or unreachable: no word within the grace); {} rank(s) blame it{after}{then}",
                c.blamed_by
            ),
            "killed" => format!(
                "rank {rank} ({host}{nic}) ended without a word in {phase} (killed or crashed: its peers saw its connections closed); {} rank(s) blame it{after}{then}",
                c.blamed_by
            ),
            _ => format!("rank {rank} ({host}) failed in {phase}: {}{after}{then}", self.error),
        }
    }
}

/// A rank other than 0 that was signalled by someone other than its launcher (a person, a
/// script): the real cause of a job that mpirun then ends with its own SIGTERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalledRank {
    pub rank: usize,
    /// The rank's host name.
    pub host: String,
    /// The phase the run was in when rank 0 heard of it.
    pub phase: String,
    /// What rank 0 heard after (`SIGTERM from mpirun (pid 4242)`); `None` before it did.
    pub then: Option<String>,
}

/// One rank's one-line account of its timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RankReport {
    pub rank: usize,
    pub message: String,
}

impl TimeoutDiagnosis {
    /// One line: who did not arrive or answer; the accounts of the ranks that did not arrive but
    /// answered (or, when rank 0 was not waiting at a barrier, every account).
    pub fn line(&self) -> String {
        let list = |ranks: &[&usize]| ranks.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let (gone, late): (Vec<&usize>, Vec<&usize>) =
            self.absent_ranks.iter().partition(|r| self.silent_ranks.contains(r));
        let quiet: Vec<&usize> = self
            .silent_ranks
            .iter()
            .filter(|r| !self.absent_ranks.contains(r))
            .collect();
        let mut parts = Vec::new();
        if !gone.is_empty() {
            parts.push(format!(
                "rank(s) {} did not arrive within -T {} s and did not answer (stopped, hung or unreachable)",
                list(&gone),
                self.limit_s
            ));
        }
        if !late.is_empty() {
            parts.push(format!(
                "rank(s) {} did not arrive within -T {} s",
                list(&late),
                self.limit_s
            ));
        }
        if !quiet.is_empty() {
            parts.push(format!(
                "rank(s) {} did not answer (stopped, hung or unreachable)",
                list(&quiet)
            ));
        }
        let waited_at_barrier = !self.absent_ranks.is_empty();
        for r in &self.reports {
            if !waited_at_barrier || late.contains(&&r.rank) {
                parts.push(format!("rank {}: {}", r.rank, r.message));
            }
        }
        parts.join("; ")
    }
}

impl RunStatus {
    /// The `status` value: `ok`, `unchecked`, `wrong-data`, `failed`, `error`, `running`,
    /// `interrupted`, `timeout`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Unchecked => "unchecked",
            RunStatus::Refused(_) => "error",
            RunStatus::WrongData => "wrong-data",
            RunStatus::BelowMinBw => "below-min-bw",
            RunStatus::Failed(_) | RunStatus::RankFailed(_) => "failed",
            RunStatus::Running => "running",
            RunStatus::Interrupted { .. } => "interrupted",
            RunStatus::Timeout(_) => "timeout",
        }
    }

    /// Whether the sweep ran to the end (`ok`, `unchecked`, `wrong-data` or `below-min-bw`).
    pub fn is_complete(&self) -> bool {
        matches!(
            self,
            RunStatus::Ok | RunStatus::Unchecked | RunStatus::WrongData | RunStatus::BelowMinBw
        )
    }

    /// The rank that ended the run, as summary.json's `failure` names it: a failed rank's
    /// culprit, a rank signalled by a process other than its launcher, a timeout's silent rank.
    pub fn failure(&self) -> Option<RankFailure> {
        match self {
            RunStatus::RankFailed(f) => Some(f.clone()),
            RunStatus::Timeout(d) => d.culprit.clone(),
            RunStatus::Interrupted {
                signal,
                from,
                rank: Some(r),
            } => {
                let sent = from.as_deref().map_or(signal.clone(), |f| format!("{signal} from {f}"));
                Some(RankFailure {
                    rank: r.rank,
                    host: r.host.clone(),
                    phase: r.phase.clone(),
                    error: format!("interrupted by {sent}"),
                    then: r.then.clone(),
                    culprit: Culprit {
                        rank: r.rank,
                        host: r.host.clone(),
                        nic: None,
                        phase: r.phase.clone(),
                        reason: crate::blame::Reason::Signalled.name(),
                        error: None,
                        sender: from.clone(),
                        blamed_by: 0,
                        victims: Vec::new(),
                        other_roots: Vec::new(),
                    },
                })
            }
            _ => None,
        }
    }

    /// Why the run ended early, in one line (`error` in summary.json).
    pub fn error(&self) -> Option<String> {
        match self {
            RunStatus::Failed(msg) | RunStatus::Refused(msg) => Some(msg.clone()),
            RunStatus::RankFailed(f) => Some(f.line()),
            RunStatus::Interrupted {
                signal,
                from,
                rank: Some(r),
            } => {
                let from = from.as_deref().map_or(String::new(), |f| format!(" from {f}"));
                let then = r.then.as_ref().map_or(String::new(), |t| format!("; then {t}"));
                Some(format!("rank {} ({}) interrupted by {signal}{from}{then}", r.rank, r.host))
            }
            RunStatus::Interrupted {
                signal, from: Some(from), ..
            } => Some(format!("interrupted by {signal} from {from}")),
            RunStatus::Interrupted { signal, from: None, .. } => Some(format!(
                "interrupted by {signal} (from the user, the scheduler, or mpirun ending the job after another rank died)"
            )),
            RunStatus::Timeout(d) => Some(format!("timeout: {}", d.line())),
            _ => None,
        }
    }
}

#[derive(Serialize, schemars::JsonSchema)]
struct Tool<'a> {
    name: &'static str,
    version: &'a str,
    git_commit: Option<&'a str>,
}

#[derive(Serialize, schemars::JsonSchema)]
struct Summary<'a> {
    schema_version: u32,
    /// True when the sweep ran to the end and every file was written.
    complete: bool,
    status: &'static str,
    /// Why the run ended early (`failed`, `error`, `interrupted`, `timeout`), else null.
    error: Option<String>,
    /// Sizes the sweep planned, and those measured and written (every row in the CSV files).
    sizes_planned: usize,
    sizes_done: usize,
    /// `interrupted`: the signal that ended the run (`SIGINT`, `SIGTERM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<&'a str>,
    /// `timeout`: the phase, `-T`, the ranks that did not arrive, every rank's own account.
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<&'a TimeoutDiagnosis>,
    /// The rank that ended the run (`failed`; `interrupted` by a signal to one rank; a
    /// `timeout` with a silent rank): rank, host, phase, its error, what followed, and the
    /// `culprit` (the blame graph's root: reason, NIC, victims).
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<RankFailure>,
    /// `--force`: the run went on despite error findings (listed in `placement.findings`).
    force: bool,
    tool: Tool<'a>,
    command: &'a [String],
    start_time: &'a str,
    end_time: &'a str,
    config: &'a serde_json::Value,
    #[serde(flatten)]
    settings: &'a RunSettings,
    plugin: &'a PluginInfo,
    mpi: &'a str,
    hosts: &'a [HostInfo],
    env: BTreeMap<&'a str, &'a str>,
    /// NIC and CPUs per endpoint, preflight findings, connection setup.
    placement: &'a crate::report::PlacementReport,
    /// The slow NIC sides found after the sweep (each a warning in `placement.findings`), with
    /// every flow through each: the evidence a one-line finding leaves out.
    slow_nics: &'a [crate::slow_nic::SlowNic],
    /// A verdict per node of a multi-node run (healthy, suspect, bad) with its evidence in one
    /// line; empty when no size was judged and no finding names a node.
    node_verdicts: &'a [crate::report::NodeVerdict],
    /// The node verdicts' probe after the sweep (rounds of node pairs; docs/drain.md): its
    /// rounds, time and bytes, or why none ran; null when the sweep did not end well.
    probe: Option<&'a crate::report::ProbeRun>,
    avg_busbw_gbps: Option<f64>,
    /// `NCCL_TESTS_MIN_BW`'s verdict on `avg_busbw_gbps` (null when unset): a failed one is
    /// status `below-min-bw`, which a gate refuses unless allowed by name.
    min_bw: Option<&'a crate::report::BandwidthGate>,
    wrong_total: Option<u64>,
    /// The whole run's CPU cost (null for a run that did not complete).
    cpu: Option<&'a crate::report::CpuCost>,
    /// `--baseline nccl`: library, settings, NCCL's log lines that prove it used the plugin,
    /// the timings' definitions and the alternation of the blocks (null without it).
    nccl_baseline: Option<&'a crate::report::NcclInfo>,
    results: Vec<SizeRow<'a>>,
}

/// The JSON Schema of `summary.json`, generated from the types that write it (committed as
/// `docs/schema/summary.schema.json`).
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Summary<'static>)).unwrap_or_default()
}

/// Writes `summary.json` into `dir` atomically (temporary file in `dir`, rename; the final
/// write is fsynced by [`super::write_results`]).
/// `complete` is true for `ok`, `unchecked` and `wrong-data` only; `end_time` is RFC 3339 UTC.
pub fn write_summary(
    dir: &Path,
    info: &RunInfo,
    results: &[SizeResult],
    sizes_planned: usize,
    status: &RunStatus,
    end_time: &str,
) -> io::Result<()> {
    let summary = Summary {
        schema_version: SCHEMA_VERSION,
        complete: status.is_complete(),
        status: status.as_str(),
        force: info.force,
        error: status.error(),
        sizes_planned,
        sizes_done: results.len(),
        signal: match status {
            RunStatus::Interrupted { signal, .. } => Some(signal.as_str()),
            _ => None,
        },
        timeout: match status {
            RunStatus::Timeout(d) => Some(d),
            _ => None,
        },
        failure: status.failure(),
        tool: Tool {
            name: "tcpx-perf",
            version: &info.tool_version,
            git_commit: info.git_commit.as_deref(),
        },
        command: &info.command,
        start_time: &info.start_time,
        end_time,
        config: &info.config,
        settings: &info.settings,
        plugin: &info.plugin,
        mpi: &info.mpi_library,
        hosts: &info.hosts,
        env: info.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
        placement: &info.placement,
        slow_nics: &info.slow_nics,
        node_verdicts: &info.node_verdicts,
        probe: info.probe.as_ref(),
        avg_busbw_gbps: avg_busbw(results),
        min_bw: info.bandwidth_gate.as_ref(),
        wrong_total: super::run_wrong(info, results),
        cpu: info.cpu.as_ref(),
        nccl_baseline: info.nccl.as_ref(),
        results: results.iter().map(SizeRow::of).collect(),
    };
    write_atomically(&dir.join(SUMMARY_JSON), |w| {
        serde_json::to_writer_pretty(&mut *w, &summary)?;
        w.write_all(b"\n")
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures;
    use super::*;
    use std::fs;

    fn read(dir: &Path) -> serde_json::Value {
        let text = fs::read_to_string(dir.join(SUMMARY_JSON)).expect("read");
        serde_json::from_str(&text).expect("json")
    }

    #[test]
    fn summary_fields() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let info = fixtures::info();
        let results = fixtures::results();
        write_summary(
            tmp.path(),
            &info,
            &results,
            2,
            &RunStatus::WrongData,
            "2026-11-21T05:01:00Z",
        )
        .expect("write");
        let v = read(tmp.path());
        assert_eq!(v["schema_version"], 4);
        assert!(v["nccl_baseline"].is_null());
        assert!(v["results"][0].get("nccl").is_none());
        assert_eq!(v["complete"], true);
        assert_eq!(v["status"], "wrong-data");
        assert!(v["error"].is_null());
        assert_eq!(v["tool"]["name"], "tcpx-perf");
        assert_eq!(v["tool"]["version"], "0.1.0");
        assert_eq!(v["tool"]["git_commit"], "abc1234");
        assert_eq!(v["command"][1], "-b");
        assert_eq!(v["start_time"], "2026-11-21T05:00:00Z");
        assert_eq!(v["end_time"], "2026-11-21T05:01:00Z");
        assert_eq!(v["config"]["minbytes"], 256);
        for key in ["path", "sha256", "name", "abi", "ptr_support", "device_type"] {
            assert!(!v["plugin"][key].is_null(), "plugin.{key}");
        }
        assert_eq!(v["plugin"]["abi"], 8);
        assert_eq!(v["mpi"], "Open MPI v4.1.6");
        assert_eq!(v["hosts"][1]["node"], 1);
        assert_eq!(v["hosts"][0]["gpus"][0], 0);
        assert_eq!(v["env"]["NCCL_DEBUG"], "WARN");
        assert_eq!(v["wrong_total"], 3);
        let avg = v["avg_busbw_gbps"].as_f64().expect("avg");
        assert!((avg - avg_busbw(&results).expect("avg")).abs() < 1e-12);
        let r = &v["results"][1];
        assert_eq!(r["size_bytes"], 1048576);
        assert_eq!(r["time_us"], 100.0);
        assert_eq!(r["wrong"], 3);
        assert!(r.get("samples_us").is_none() && r.get("pairs").is_none());
        assert!(r["bytes_moved"].is_null(), "unverified is null");
        assert_eq!(r["bytes"]["sources"][0], "wire (lower bound)");
        assert_eq!(r["verified"], true, "checked by the data check (3 wrong bytes found)");
        assert_eq!(v["force"], false);
        assert_eq!(r["bytes"]["wire"][0]["iface"], "lo");
        assert_eq!(v["results"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["cpu"]["cpu_s_per_gb"], results[1].cpu.cpu_s_per_gb.expect("bytes"));
        assert_eq!(r["cpu"]["max_rank_s"], results[1].cpu.max_rank_s);
        assert_eq!(v["cpu"]["user_s"], 2.0);
        // No temporary left behind.
        let names: Vec<_> = fs::read_dir(tmp.path()).expect("ls").collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn failed_and_unchecked() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut info = fixtures::info();
        info.settings.check = false;
        info.cpu = None;
        let results = vec![fixtures::size(8, 1.0, None)];
        write_summary(
            tmp.path(),
            &info,
            &results,
            1,
            &RunStatus::Failed("timeout after 300 s in connect".into()),
            "t",
        )
        .expect("write");
        let v = read(tmp.path());
        assert_eq!(v["complete"], false);
        assert_eq!(v["status"], "failed");
        assert_eq!(v["error"], "timeout after 300 s in connect");
        assert!(v["wrong_total"].is_null());
        assert!(v["results"][0]["wrong"].is_null());
        assert_eq!(v["results"][0]["verified"], false, "-c 0 and no exact witness");
        assert!(v["cpu"].is_null(), "no whole-run figure for a failed run");
        write_summary(tmp.path(), &info, &results, results.len(), &RunStatus::Unchecked, "t1").expect("rewrite");
        let v = read(tmp.path());
        assert_eq!(
            (v["complete"].as_bool(), v["status"].as_str()),
            (Some(true), Some("unchecked"))
        );
        let refused = RunStatus::Refused("2 error finding(s)".into());
        write_summary(tmp.path(), &info, &[], 0, &refused, "t1").expect("rewrite");
        let v = read(tmp.path());
        assert_eq!(
            (v["complete"].as_bool(), v["status"].as_str()),
            (Some(false), Some("error"))
        );
        assert_eq!(v["error"], "2 error finding(s)");
        // Overwrites a previous summary atomically.
        write_summary(tmp.path(), &info, &[], 0, &RunStatus::Ok, "t2").expect("rewrite");
        let v = read(tmp.path());
        assert_eq!(v["status"], "ok");
        assert!(v["avg_busbw_gbps"].is_null());
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let missing = tmp.path().join("absent");
        let info = fixtures::info();
        assert!(write_summary(&missing, &info, &[], 0, &RunStatus::Ok, "t").is_err());
        assert!(!missing.exists());
    }
}
