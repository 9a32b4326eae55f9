//! Rank 0's record of the run on disk, kept current so that no ending loses what was measured.
//!
//! After each size the CSV files hold every row so far and `summary.json` says `complete: false`,
//! `status: "running"` (each file written to a temporary sibling and renamed). SIGINT/SIGTERM
//! ([`crate::signals`]) and a watchdog that fires rewrite `summary.json` as `interrupted` or
//! `timeout` from another thread before the process exits; a timeout found by the run itself
//! ([`timed_out`]) first gathers every rank's account. On other ranks a record holds nothing.
//!
//! The first failure is the record: a rank that fails tells rank 0 over MPI before it ends the
//! job, and rank 0 takes that report wherever it waits (a barrier, a collective, its own
//! workers: [`Mpi::on_peer_failure`]). From then on every status written says `failed`, naming
//! that rank, its host, its phase and its error, and what followed (rank 0's own error, the
//! SIGTERM mpirun sends once the failing rank aborts, a timeout) only as `then`.

use super::settings::Settings;
use super::{Fatal, Job};
use crate::collectives::Collectives;
use crate::engine::watchdog;
use crate::export::{
    self,
    json::{RankFailure, RankReport, SignalledRank, TimeoutDiagnosis},
    RunStatus,
};
use crate::mpi_boot::Mpi;
use crate::report::{RunInfo, SizeResult};
use crate::signals;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct State {
    dir: Option<PathBuf>,
    info: RunInfo,
    results: Vec<SizeResult>,
    planned: usize,
    limit_s: u64,
    /// Every rank's host name, to name a rank that failed.
    hosts: Vec<String>,
    /// The first failure rank 0 learned of: every status written after says it.
    first: Option<RankFailure>,
    /// The first rank that a process other than mpirun signalled, with that signal and its
    /// sender, when rank 0 heard of it before any failure: every status written after says
    /// `interrupted`, naming that rank and sender.
    signalled: Option<(SignalledRank, String, String)>,
    /// The final files are written: nothing may overwrite them.
    ended: bool,
}

impl State {
    /// Writes the CSV files and `summary.json` with `status` (partial: no pictures).
    fn write(&self, status: &RunStatus) -> Result<(), String> {
        let status = self.with_cause(status);
        match &self.dir {
            Some(dir) => {
                export::write_partial(dir, &self.info, &self.results, self.planned, &status).map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// Rewrites `summary.json` only (the CSV files are current after every size): what a signal
    /// has time for.
    fn write_summary(&self, status: &RunStatus) -> Result<(), String> {
        let status = self.with_cause(status);
        match &self.dir {
            Some(dir) => {
                let now = crate::report::now_rfc3339();
                export::json::write_summary(dir, &self.info, &self.results, self.planned, &status, &now)
                    .map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// `status` once a rank's failure is known: that failure, with `status` as what followed (a
    /// complete run, which no failure can have preceded, stays as it is).
    fn with_cause(&self, status: &RunStatus) -> RunStatus {
        if let Some((rank, signal, from)) = &self.signalled {
            if status.is_complete() || matches!(status, RunStatus::Interrupted { rank: Some(_), .. }) {
                return status.clone();
            }
            let mut rank = rank.clone();
            rank.then = match status {
                RunStatus::Running => None,
                RunStatus::Interrupted {
                    signal, from: Some(f), ..
                } => Some(format!("{signal} from {f}")),
                RunStatus::Interrupted { signal, from: None, .. } => Some(signal.clone()),
                other => other.error(),
            };
            return RunStatus::Interrupted {
                signal: signal.clone(),
                from: Some(from.clone()),
                rank: Some(rank),
            };
        }
        let Some(first) = &self.first else {
            return status.clone();
        };
        if status.is_complete() || matches!(status, RunStatus::RankFailed(_)) {
            return status.clone();
        }
        let mut failure = first.clone();
        failure.then = status.error().or(failure.then);
        RunStatus::RankFailed(failure)
    }

    /// `rank`'s failure as the record names it.
    fn failure(&self, rank: usize, phase: &str, error: &str) -> RankFailure {
        RankFailure {
            rank,
            host: self.hosts.get(rank).cloned().unwrap_or_else(|| "unknown".into()),
            phase: phase.to_string(),
            error: error.lines().next().unwrap_or(error).to_string(),
            then: None,
        }
    }

    /// "after N of M sizes; the sizes measured are in DIR" (or that nothing is written).
    fn where_(&self) -> String {
        let done = format!("after {} of {} sizes", self.results.len(), self.planned);
        match &self.dir {
            Some(dir) => format!(
                "{done}; every size measured is in {} (summary.json: complete false)",
                dir.display()
            ),
            None => format!("{done} (--no-out: nothing written)"),
        }
    }
}

/// How long the other ranks wait, after a signal, before exiting (see [`signals`]).
const LINGER_FOR_RANK_0: Duration = Duration::from_secs(1);
/// How long rank 0's last words wait for the record (see [`Record::new`]).
const LAST_WORDS_LOCK_WAIT: Duration = Duration::from_millis(500);

/// Rank 0's results so far (empty on other ranks).
pub(super) struct Record {
    state: Option<Arc<Mutex<State>>>,
    /// Rank 0's host, for the other ranks to name it when it never ends a timed-out job.
    root_host: String,
}

impl Record {
    /// Rank 0: a record of `info` (the directory already probed) that SIGINT/SIGTERM and the
    /// watchdogs end as `interrupted` / `timeout`. Other ranks: nothing.
    pub(super) fn new(settings: &Settings, mpi: &Mpi, job: &Job, info: &RunInfo) -> Record {
        if mpi.rank() != 0 {
            // mpirun kills the whole job as soon as any rank exits after its SIGTERM: give rank
            // 0 the time to write what was measured (the launcher's SIGKILL comes within a second
            // anyway).
            signals::linger(LINGER_FOR_RANK_0);
            return Record {
                state: None,
                root_host: root_host(job),
            };
        }
        let state = Arc::new(Mutex::new(State {
            dir: settings.output.dir.clone(),
            info: info.clone(),
            results: Vec::new(),
            planned: job.plans.len(),
            limit_s: settings.timeout.as_secs(),
            hosts: job.topo.hostnames.clone(),
            first: None,
            signalled: None,
            ended: false,
        }));
        hear_peers(mpi, &state);
        let interrupted = state.clone();
        signals::on_signal(move |signal, from| {
            let name = signals::name(signal);
            // A size being written (the CSV files and summary.json, milliseconds) finishes
            // first. Half a second at most, well inside the second mpirun leaves before SIGKILL:
            // the final writes (pictures, fsync) or a hung file system may outlast it, and then
            // summary.json stays as the last size left it (`running`, every size measured).
            let Some(mut st) = lock_within(&interrupted, LAST_WORDS_LOCK_WAIT) else {
                eprintln!("tcpx-perf: interrupted by {name}; the result directory was busy and is left as it was");
                return;
            };
            if st.ended {
                eprintln!("tcpx-perf: {name} after the results were written; they are left as they are");
                return;
            }
            st.ended = true;
            let status = st.with_cause(&RunStatus::Interrupted {
                signal: name,
                from: from.map(str::to_string),
                rank: None,
            });
            let written = st.write_summary(&status);
            eprintln!("tcpx-perf: {} {}", status.error().unwrap_or_default(), st.where_());
            if let Err(e) = written {
                eprintln!("tcpx-perf: error: {e}");
            }
            // The process ends right after this returns: keep the lock held until then, so the
            // sweep cannot write its next size (status running) over the interrupted summary.
            std::mem::forget(st);
        });
        let fired = state.clone();
        watchdog::on_fire(move |account| {
            let Some(st) = lock_within(&fired, Duration::from_millis(500)).filter(|st| !st.ended) else {
                return;
            };
            let diagnosis = TimeoutDiagnosis {
                limit_s: st.limit_s,
                phase: account.to_string(),
                absent_ranks: Vec::new(),
                silent_ranks: Vec::new(),
                reports: vec![RankReport {
                    rank: 0,
                    message: account.to_string(),
                }],
            };
            if let Err(e) = st.write_summary(&RunStatus::Timeout(diagnosis)) {
                eprintln!("tcpx-perf: error: {e}");
            }
            eprintln!("tcpx-perf: timeout {}", st.where_());
        });
        Record {
            state: Some(state),
            root_host: root_host(job),
        }
    }

    /// The run's description after connect (the setup's figures added).
    pub(super) fn set_info(&self, info: &RunInfo) {
        if let Some(mut st) = self.lock() {
            st.info = info.clone();
        }
    }

    /// One more size: rewrites the CSV files with every row so far and `summary.json` as
    /// `running`. An error names the file.
    pub(super) fn add(&self, result: &SizeResult) -> Result<(), String> {
        let Some(mut st) = self.lock() else { return Ok(()) };
        if st.ended {
            return Ok(());
        }
        st.results.push(result.clone());
        st.write(&RunStatus::Running)
    }

    /// The run ended early with `status`: the files say so, and no signal rewrites them.
    pub(super) fn end(&self, status: &RunStatus) -> Result<(), String> {
        self.lock().map_or(Ok(()), |mut st| {
            st.ended = true;
            st.write(status)
        })
    }

    /// The sweep ran to the end: the final files (pictures too), `summary.json` last; after this
    /// no signal rewrites them. The directory, once every file is in place.
    pub(super) fn finish(&self, info: &RunInfo, status: &RunStatus) -> Result<Option<PathBuf>, String> {
        let Some(mut st) = self.lock() else { return Ok(None) };
        st.info = info.clone();
        let Some(dir) = st.dir.clone() else { return Ok(None) };
        export::write_results(&dir, &st.info, &st.results, st.planned, status).map_err(|e| e.to_string())?;
        st.ended = true;
        Ok(Some(dir))
    }

    /// The run failed with `fatal` in `phase`, after the result directory was made. Rank 0
    /// writes `summary.json` as `failed` (`complete: false`) naming the first rank that failed:
    /// another rank's report, already taken or arriving within a second (its end may be what
    /// broke rank 0's connections), before rank 0's own error, which then follows as `then`. The
    /// error to print names that rank too. Other ranks, timeouts and a record already ended:
    /// `fatal` as it is.
    pub(super) fn fail(&self, mpi: &Mpi, phase: &str, fatal: Fatal) -> Fatal {
        let own = match &fatal {
            _ if self.state.is_none() => return fatal,
            Fatal::Here(m) | Fatal::Everywhere(m) => m.clone(),
            Fatal::Reported { error, .. } => error.clone(),
            Fatal::Usage(_) | Fatal::Stalled(_) | Fatal::TimedOut => return fatal,
        };
        if matches!(fatal, Fatal::Here(_)) {
            await_peer_report(mpi);
        }
        let Some(mut st) = self.lock().filter(|st| !st.ended) else {
            return fatal;
        };
        let failure = match (&st.first, &fatal) {
            (Some(first), _) => {
                let mut f = first.clone();
                if !own.starts_with(&format!("rank {} failed", f.rank)) {
                    f.then = Some(format!("rank 0: {}", own.lines().next().unwrap_or(&own)));
                }
                Some(f)
            }
            (None, Fatal::Reported { rank, error }) => Some(st.failure(*rank, phase, error)),
            (None, Fatal::Here(_)) => Some(st.failure(0, phase, &own)),
            // Every rank reached it: no rank to name.
            _ => None,
        };
        st.ended = true;
        let status = failure.clone().map_or(RunStatus::Failed(own), RunStatus::RankFailed);
        if let Err(e) = st.write(&status) {
            eprintln!("tcpx-perf: error: {e}");
        }
        match (failure, fatal) {
            (Some(f), Fatal::Here(_)) => Fatal::Here(f.line()),
            (_, fatal) => fatal,
        }
    }

    /// "after N of M sizes; ..." for the last line of an early ending.
    fn where_(&self) -> String {
        self.lock().map(|st| st.where_()).unwrap_or_default()
    }

    fn lock(&self) -> Option<MutexGuard<'_, State>> {
        self.state
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Rank 0: the first report of another rank, a failure or the signal a process other than
/// mpirun sent it, becomes the record's cause and is on disk at once (taken on the main thread,
/// wherever it waits), since mpirun may end the job before rank 0 gets to its own ending.
fn hear_peers(mpi: &Mpi, state: &Arc<Mutex<State>>) {
    let told = state.clone();
    mpi.on_peer_failure(move |f| {
        // On the main thread, while it waits: say it on disk now, since mpirun may end the
        // job (the failing rank aborts) before rank 0 gets to its own ending.
        let Some(mut st) = lock_within(&told, LAST_WORDS_LOCK_WAIT).filter(|st| !st.ended) else {
            return;
        };
        if st.first.is_none() && st.signalled.is_none() {
            st.first = Some(st.failure(f.rank, &f.phase, &f.error));
            if let Err(e) = st.write_summary(&RunStatus::Running) {
                eprintln!("tcpx-perf: error: {e}");
            }
        }
    });
    let heard = state.clone();
    mpi.on_peer_signalled(move |rank, signal, from| {
        // As for a failure: on disk now, since mpirun ends the job once that rank exits.
        let Some(mut st) = lock_within(&heard, LAST_WORDS_LOCK_WAIT).filter(|st| !st.ended) else {
            return;
        };
        if st.first.is_none() && st.signalled.is_none() {
            let host = st.hosts.get(rank).cloned().unwrap_or_else(|| "unknown".into());
            let who = SignalledRank { rank, host, then: None };
            st.signalled = Some((who, signal.to_string(), from.to_string()));
            if let Err(e) = st.write_summary(&RunStatus::Running) {
                eprintln!("tcpx-perf: error: {e}");
            }
        }
    });
}

/// The lock, unless another thread holds it for longer than `limit` (a write stuck on a
/// full or hung file system must not keep the process from ending).
fn lock_within(state: &Mutex<State>, limit: Duration) -> Option<MutexGuard<'_, State>> {
    let start = Instant::now();
    loop {
        match state.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Rank 0's own error may be the echo of another rank's end (a peer killed by a signal, or one
/// that failed and closes its connections as it goes): for up to a second, that rank's report
/// (the cause, which the record then holds) or mpirun's SIGTERM (whose last words write it) may
/// still come.
fn await_peer_report(mpi: &Mpi) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while mpi.reported_failure().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long rank 0 waits for the other ranks' accounts after its own timeout.
/// The line a rank other than 0 prints when rank 0 has not ended a timed-out job `waited` after
/// this rank's own timeout: rank 0 is stopped, hung or unreachable, and did not arrive where
/// this rank waited.
fn root_absent_line(rank: usize, root_host: &str, limit: Duration, waited: Duration) -> String {
    format!(
        "tcpx-perf: rank {rank}: timeout: rank 0 ({root_host}) did not arrive within -T {} s and has not ended the job {} s later: it is stopped, hung or unreachable; summary.json (written by rank 0) cannot say so and is left as the last size wrote it",
        limit.as_secs(),
        waited.as_secs()
    )
}

/// Rank 0's host name.
fn root_host(job: &Job) -> String {
    job.topo.hostnames.first().cloned().unwrap_or_else(|| "unknown".into())
}

fn grace(limit: Duration) -> Duration {
    limit.clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// This rank hit `-T` (`message`: what it waited in). Other ranks send rank 0 their account and
/// wait for it to end the job; rank 0 gathers the accounts, names the ranks that did not arrive
/// or answer, writes `summary.json` as `timeout` and ends the job ([`Fatal::TimedOut`]).
pub(super) fn timed_out(settings: &Settings, mpi: &Mpi, record: &Record, message: &str) -> Fatal {
    let rank = mpi.rank();
    let account = message
        .lines()
        .next()
        .unwrap_or(message)
        .trim_end_matches(':')
        .to_string();
    eprintln!("tcpx-perf: rank {rank}: timeout: {message}");
    let grace = grace(settings.timeout);
    if rank != 0 {
        mpi.report_timeout(&account);
        // Rank 0 ends the job once it has written the results; if it cannot (it is the rank that
        // hangs), this rank ends it.
        let waited = grace * 2 + Duration::from_secs(5);
        std::thread::sleep(waited);
        // Still here: rank 0 neither took the accounts nor ended the job. Only rank 0 writes
        // summary.json, so this line is the only record that names it.
        eprintln!(
            "{}",
            root_absent_line(rank, &record.root_host, settings.timeout, waited)
        );
        return Fatal::TimedOut;
    }
    let heard = mpi.timeout_reports(grace);
    let mut reports = vec![RankReport {
        rank: 0,
        message: account.clone(),
    }];
    reports.extend(
        heard
            .reports
            .into_iter()
            .map(|(rank, message)| RankReport { rank, message }),
    );
    let diagnosis = TimeoutDiagnosis {
        limit_s: settings.timeout.as_secs(),
        phase: account,
        absent_ranks: heard.absent,
        silent_ranks: heard.silent,
        reports,
    };
    let line = diagnosis.line();
    if let Err(e) = record.end(&RunStatus::Timeout(diagnosis)) {
        eprintln!("tcpx-perf: error: {e}");
    }
    eprintln!("tcpx-perf: timeout: {line}");
    eprintln!("tcpx-perf: timeout {}", record.where_());
    Fatal::TimedOut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(first: Option<RankFailure>) -> State {
        State {
            dir: None,
            info: crate::export::fixtures::info(),
            results: Vec::new(),
            planned: 3,
            limit_s: 20,
            hosts: vec!["node0".into(), "node0".into(), "node1".into()],
            first,
            signalled: None,
            ended: false,
        }
    }

    /// A rank that told rank 0 who signalled it is the record: `interrupted` by that signal
    /// and sender, mpirun's SIGTERM that follows only as `then`.
    #[test]
    fn a_rank_0_that_never_ends_the_job_is_named_with_its_host() {
        let line = root_absent_line(2, "node0", Duration::from_secs(3), Duration::from_secs(9));
        assert!(
            line.starts_with("tcpx-perf: rank 2: timeout: rank 0 (node0) did not arrive within -T 3 s"),
            "{line}"
        );
        assert!(line.contains("stopped, hung or unreachable"), "{line}");
    }

    #[test]
    fn a_signalled_rank_outlives_mpiruns_sigterm() {
        let mut st = state(None);
        let who = SignalledRank {
            rank: 2,
            host: "node1".into(),
            then: None,
        };
        st.signalled = Some((who, "SIGTERM".into(), "sh (pid 77)".into()));
        let running = st.with_cause(&RunStatus::Running);
        assert_eq!(running.as_str(), "interrupted");
        assert_eq!(
            running.error().as_deref(),
            Some("rank 2 (node1) interrupted by SIGTERM from sh (pid 77)")
        );
        let then = st.with_cause(&RunStatus::Interrupted {
            signal: "SIGTERM".into(),
            from: Some("mpirun (pid 42)".into()),
            rank: None,
        });
        assert_eq!(
            then.error().as_deref(),
            Some("rank 2 (node1) interrupted by SIGTERM from sh (pid 77); then SIGTERM from mpirun (pid 42)")
        );
        assert_eq!(st.with_cause(&then), then, "applied twice, the same");
        assert_eq!(st.with_cause(&RunStatus::Ok), RunStatus::Ok);
    }

    #[test]
    fn a_known_failure_outlives_what_follows() {
        let st = state(None);
        let first = st.failure(
            2,
            "connect",
            "spawning helper thread: Resource temporarily unavailable\nmore",
        );
        assert_eq!(
            first.line(),
            "rank 2 (node1) failed in connect: spawning helper thread: Resource temporarily unavailable"
        );
        let st = state(Some(first));
        let signalled = st.with_cause(&RunStatus::Interrupted {
            signal: "SIGTERM".into(),
            from: Some("mpirun (pid 42)".into()),
            rank: None,
        });
        assert_eq!(signalled.as_str(), "failed");
        let RunStatus::RankFailed(f) = &signalled else {
            panic!("{signalled:?}")
        };
        assert_eq!((f.rank, f.host.as_str()), (2, "node1"));
        assert_eq!(f.then.as_deref(), Some("interrupted by SIGTERM from mpirun (pid 42)"));
        assert!(signalled
            .error()
            .unwrap()
            .ends_with("; then interrupted by SIGTERM from mpirun (pid 42)"));
        // While rank 0 still waits: failed, nothing after yet.
        let RunStatus::RankFailed(f) = st.with_cause(&RunStatus::Running) else {
            panic!()
        };
        assert_eq!(f.then, None);
        // A timeout that follows is what followed.
        let RunStatus::RankFailed(f) = st.with_cause(&RunStatus::Failed("rank 0: reset by peer".into())) else {
            panic!()
        };
        assert_eq!(f.then.as_deref(), Some("rank 0: reset by peer"));
        assert_eq!(st.with_cause(&RunStatus::Ok), RunStatus::Ok);
        // Without a failure the status is what it was.
        let plain = RunStatus::Interrupted {
            signal: "SIGINT".into(),
            from: None,
            rank: None,
        };
        assert_eq!(state(None).with_cause(&plain), plain);
    }
}
