//! Rank 0's record of the run on disk, kept current so that no ending loses what was measured.
//!
//! After each size the CSV files hold every row so far and `summary.json` says `complete: false`,
//! `status: "running"` (each file written to a temporary sibling and renamed). SIGINT/SIGTERM
//! ([`crate::signals`]) and a watchdog that fires rewrite `summary.json` as `interrupted` or
//! `timeout` from another thread before the process exits; a timeout found by the run itself
//! ([`timed_out`]) first gathers every rank's account. On other ranks a record holds nothing.
//!
//! The culprit is the record. A rank that fails tells rank 0 over MPI before it ends the job
//! (its error names the peer it blames, and says whether it was local), a rank signalled by a
//! process other than its launcher says who, and after the launcher's SIGTERM every living rank
//! says it is alive (with its error, if it has one): rank 0 takes these reports wherever it
//! waits (a barrier, a collective, its own workers: [`Mpi::on_peer_failure`]) as each rank's
//! [`Account`], and names the root of their blame graph ([`blame::roots`]): a rank that
//! reported a local error, was signalled, blames nobody, or said nothing (silent: a kill -9, a
//! stopped process). Every status written after says `failed` (or `interrupted` by that
//! rank's signal), naming that rank, its host, NIC, phase and error; what followed (rank 0's
//! own error, the SIGTERM mpirun sends once a rank aborts, a timeout) only as `then`; the
//! victims counted. A stopped rank 0 finds out when it is continued ([`stopped`]) and names
//! itself.

use super::settings::Settings;
use super::stopped;
use super::{Fatal, Job};
use crate::blame::{self, Account, Reason, Root};
use crate::collectives::Collectives;
use crate::engine::watchdog;
use crate::export::{
    self,
    json::{Culprit, RankFailure, RankReport, SignalledRank, TimeoutDiagnosis},
    RunStatus,
};
use crate::mpi_boot::Mpi;
use crate::placement::dry_run::RoundSetup;
use crate::report::{RunInfo, SizeResult};
use crate::signals;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod last_words;
use last_words::last_words;

struct State {
    dir: Option<PathBuf>,
    info: RunInfo,
    results: Vec<SizeResult>,
    planned: usize,
    limit_s: u64,
    /// Every rank's host name, to name a rank that failed.
    hosts: Vec<String>,
    /// What each rank said as the run ended (its error, the signal a process other than its
    /// launcher sent it, that it is alive and ending) or that it said nothing: the blame
    /// graph ([`blame::roots`]) names the rank that caused the ending from these.
    accounts: Vec<Account>,
    /// The phase rank 0 is in, for a culprit that said nothing of its own.
    phase: &'static str,
    /// The culprit the last write named (a report that does not change it is not rewritten).
    named: Option<usize>,
    /// The final files are written: nothing may overwrite them.
    ended: bool,
    /// `--suspect-share`, `--bad-share`: the node verdicts of a run that ends early.
    thresholds: crate::verdict::Thresholds,
}

impl State {
    /// Writes the CSV files and `summary.json` with `status` (partial: no pictures).
    fn write(&self, status: &RunStatus) -> Result<(), String> {
        let status = self.with_cause(status);
        self.write_caused(&status, &self.info_for(&status))
    }

    /// [`Self::write`] of a status whose cause is in it already, with `info` from
    /// [`Self::info_for`] it.
    fn write_caused(&self, status: &RunStatus, info: &RunInfo) -> Result<(), String> {
        match &self.dir {
            Some(dir) => {
                export::write_partial(dir, info, &self.results, self.planned, status).map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// The run's description as `status` leaves it: a run that a rank's failure ended gets node
    /// verdicts, the culprit's node named by its failure beside what the sizes measured so far
    /// say of every node.
    fn info_for(&self, status: &RunStatus) -> std::borrow::Cow<'_, RunInfo> {
        let Some(failure) = status.failure() else {
            return std::borrow::Cow::Borrowed(&self.info);
        };
        let c = &failure.culprit;
        let nic = c.nic.as_deref().map_or(String::new(), |n| format!(" ({n})"));
        let line = format!("rank {}{nic} in {}: {}", c.rank, c.phase, failure.error);
        let mut info = self.info.clone();
        info.node_verdicts = crate::verdict::of_run(&info, &self.results, Some((&c.host, &line)), self.thresholds);
        std::borrow::Cow::Owned(info)
    }

    /// Rewrites `summary.json` only (the CSV files are current after every size): what a signal
    /// has time for.
    fn write_summary(&self, status: &RunStatus) -> Result<(), String> {
        let status = self.with_cause(status);
        match &self.dir {
            Some(dir) => {
                let now = crate::report::now_rfc3339();
                export::json::write_summary(dir, &self.info_for(&status), &self.results, self.planned, &status, &now)
                    .map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// Rank 0's own timeout (`account`: what it waited in), naming rank 0 itself if it was
    /// stopped past -T.
    fn own_timeout(&self, account: &str) -> TimeoutDiagnosis {
        let mut d = TimeoutDiagnosis {
            limit_s: self.limit_s,
            phase: account.to_string(),
            absent_ranks: Vec::new(),
            silent_ranks: Vec::new(),
            reports: vec![RankReport {
                rank: 0,
                message: account.to_string(),
            }],
            culprit: None,
        };
        own_stop(&mut d, Duration::from_secs(self.limit_s));
        d
    }

    /// Some rank failed or was signalled by a process other than its launcher.
    fn has_cause(&self) -> bool {
        self.accounts
            .iter()
            .any(|a| matches!(a, Account::Failed { .. } | Account::Signalled { .. }))
    }

    /// `status` once the cause is known: the blame graph's root, with `status` as what
    /// followed (a complete run, which no failure can have preceded, stays as it is). A timeout
    /// that no failure preceded stays a timeout, naming its silent rank.
    fn with_cause(&self, status: &RunStatus) -> RunStatus {
        let caused = matches!(
            status,
            RunStatus::RankFailed(_) | RunStatus::Interrupted { rank: Some(_), .. }
        ) || matches!(status, RunStatus::Timeout(d) if d.culprit.is_some());
        if status.is_complete() || caused {
            return status.clone();
        }
        if let RunStatus::Timeout(d) = status {
            if !self.has_cause() {
                let mut accounts = self.accounts.clone();
                for &r in d.silent_ranks.iter().chain(&d.absent_ranks) {
                    if let Some(a) = accounts.get_mut(r) {
                        *a = Account::Silent;
                    }
                }
                let mut d = d.clone();
                let roots = blame::roots(&accounts);
                d.culprit = roots.first().map(|root| {
                    let others = roots.iter().skip(1).map(|r| r.rank).collect();
                    self.failure(root, &accounts, others, None)
                });
                return RunStatus::Timeout(d);
            }
        }
        let roots = blame::roots(&self.accounts);
        let Some(root) = roots.first() else {
            return status.clone();
        };
        if let Account::Signalled { signal, from } = &self.accounts[root.rank] {
            return RunStatus::Interrupted {
                signal: signal.clone(),
                from: Some(from.clone()),
                rank: Some(SignalledRank {
                    rank: root.rank,
                    host: self.host(root.rank),
                    phase: self.phase.to_string(),
                    then: then_of_signal(status),
                }),
            };
        }
        let then = match status {
            RunStatus::Running | RunStatus::RankFailed(_) => None,
            other => other.error(),
        };
        let others = roots.iter().skip(1).map(|r| r.rank).collect();
        RunStatus::RankFailed(self.failure(root, &self.accounts, others, then))
    }

    /// The one NIC every endpoint of `rank` uses (its placement), if there is one.
    fn only_nic(&self, rank: usize) -> Option<String> {
        let mut nics = self
            .info
            .placement
            .rows
            .iter()
            .filter(|r| r.rank == rank)
            .map(|r| &r.nic);
        let first = nics.next()?;
        (!first.contains('+') && nics.all(|n| n == first)).then(|| first.clone())
    }

    fn host(&self, rank: usize) -> String {
        self.hosts.get(rank).cloned().unwrap_or_else(|| "unknown".into())
    }

    /// The record of `root` (of the graph of `accounts`): its own words, or for one that said
    /// nothing, what its blamers show.
    fn failure(&self, root: &Root, accounts: &[Account], other_roots: Vec<usize>, then: Option<String>) -> RankFailure {
        let blamer_phase = root.blamed_by.iter().find_map(|&b| match &accounts[b] {
            Account::Failed { phase, .. } => Some(phase.clone()),
            _ => None,
        });
        let (phase, error, own) = if let Account::Failed { phase, error } = &accounts[root.rank] {
            let first = error.lines().next().unwrap_or(error).to_string();
            (phase.clone(), first.clone(), Some(first))
        } else {
            let said = match root.reason {
                Reason::Killed => "no word; its peers saw its connections closed (killed or crashed)",
                Reason::Silent => "no word within the grace (stopped, hung or unreachable)",
                _ => "no error of its own",
            };
            let phase = blamer_phase.unwrap_or_else(|| self.phase.to_string());
            (phase, said.to_string(), None)
        };
        let host = self.host(root.rank);
        RankFailure {
            rank: root.rank,
            host: host.clone(),
            phase: phase.clone(),
            error,
            then,
            culprit: Culprit {
                rank: root.rank,
                host,
                nic: root.nic.clone().or_else(|| self.only_nic(root.rank)),
                phase,
                reason: root.reason.name(),
                error: own,
                sender: None,
                blamed_by: root.blamed_by.len(),
                victims: root.victims.clone(),
                other_roots,
            },
        }
    }

    /// Takes `rank`'s account (a signal stands; a failure is not undone by a later "ending")
    /// and says it on disk at once when the culprit changes, since mpirun may end the job
    /// before rank 0 gets to its own ending.
    fn take(&mut self, rank: usize, account: Account) {
        let Some(slot) = self.accounts.get_mut(rank) else {
            return;
        };
        match (&*slot, &account) {
            (Account::Signalled { .. }, _) | (Account::Failed { .. }, Account::Fine) => return,
            _ => *slot = account,
        }
        let named = blame::roots(&self.accounts).first().map(|r| r.rank);
        if named.is_some() && named != self.named && self.has_cause() && !self.ended {
            self.named = named;
            if let Err(e) = self.write_summary(&RunStatus::Running) {
                eprintln!("tcpx-perf: error: {e}");
            }
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
            accounts: vec![Account::Unheard; job.topo.hostnames.len().max(1)],
            phase: super::PHASES[1],
            named: None,
            ended: false,
            thresholds: settings.verdicts,
        }));
        hear_peers(mpi, &state);
        stopped::watch();
        let interrupted = state.clone();
        signals::on_signal(move |signal, from, by_launcher| last_words(&interrupted, signal, from, by_launcher));
        let fired = state.clone();
        watchdog::on_fire(move |account| {
            let Some(st) = lock_within(&fired, Duration::from_millis(500)).filter(|st| !st.ended) else {
                return;
            };
            let diagnosis = st.own_timeout(account);
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

    /// The phase the run is in (`connect`, `sweep`, `probe`, `close`), for a culprit whose own words
    /// do not say.
    pub(super) fn set_phase(&self, phase: &'static str) {
        if let Some(mut st) = self.lock() {
            st.phase = phase;
        }
    }

    /// The run's description after connect (the setup's figures added).
    pub(super) fn set_info(&self, info: &RunInfo) {
        if let Some(mut st) = self.lock() {
            st.info = info.clone();
        }
    }

    /// What `--connect rounds` calls after each connect (rank 0's record; a no-op elsewhere):
    /// `summary.json` gets the rounds set up so far at once, so a run that stops inside a size
    /// shows which rounds it had connected, and how long each took.
    pub(super) fn rounds_hook(&self) -> impl Fn(&[RoundSetup]) + 'static {
        let state = self.state.clone();
        move |rounds| {
            let Some(state) = &state else { return };
            let mut st = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if st.ended {
                return;
            }
            let Some(setup) = st.info.placement.setup.as_mut() else {
                return;
            };
            setup.rounds = rounds.to_vec();
            setup.connect_seconds_total = rounds.iter().map(|r| r.seconds_total).sum();
            if let Err(e) = st.write_summary(&RunStatus::Running) {
                eprintln!("tcpx-perf: error: {e}");
            }
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
        // Ended already: a signal's last words are on disk (or still being said while they
        // wait for the other ranks' accounts), and stand.
        self.lock().filter(|st| !st.ended).map_or(Ok(()), |mut st| {
            st.ended = true;
            st.write(status)
        })
    }

    /// The sweep ran to the end: the final files (pictures too), `summary.json` last; after this
    /// no signal rewrites them. The directory, once every file is in place.
    pub(super) fn finish(&self, info: &RunInfo, status: &RunStatus) -> Result<Option<PathBuf>, String> {
        // Ended already: a signal is ending the run and its last words stand.
        let Some(mut st) = self.lock().filter(|st| !st.ended) else {
            return Ok(None);
        };
        st.info = info.clone();
        let Some(dir) = st.dir.clone() else { return Ok(None) };
        export::write_results(&dir, &st.info, &st.results, st.planned, status).map_err(|e| e.to_string())?;
        st.ended = true;
        Ok(Some(dir))
    }

    /// The run failed with `fatal` in `phase`, after the result directory was made. Rank 0
    /// writes `summary.json` as `failed` (`complete: false`) naming the culprit: the root of
    /// the blame graph of every account, rank 0's own error among them (the reports that name
    /// the cause may arrive within a second: its end may be what broke rank 0's connections);
    /// rank 0's own error then follows as `then` unless it is the cause. The error to print
    /// names the culprit too. Other ranks, timeouts and a record already ended: `fatal` as it
    /// is.
    pub(super) fn fail(&self, mpi: &Mpi, phase: &str, fatal: Fatal) -> Fatal {
        let own = match &fatal {
            _ if self.state.is_none() => return fatal,
            Fatal::Here(m) | Fatal::Everywhere(m) => m.lines().next().unwrap_or(m).to_string(),
            Fatal::Reported { error, .. } => error.clone(),
            Fatal::Usage(_) | Fatal::Stalled(_) | Fatal::TimedOut => return fatal,
        };
        if let Some(mut st) = self.lock().filter(|st| !st.ended) {
            let account = Account::Failed {
                phase: phase.to_string(),
                error: own.clone(),
            };
            match &fatal {
                Fatal::Here(_) => st.take(0, account),
                Fatal::Reported { rank, .. } => st.take(*rank, account),
                _ => {}
            }
        }
        if matches!(fatal, Fatal::Here(_)) {
            self.await_cause(mpi);
        }
        let Some(mut st) = self.lock().filter(|st| !st.ended) else {
            return fatal;
        };
        st.ended = true;
        let root = blame::roots(&st.accounts).first().map(|r| r.rank);
        let status = match (&fatal, root) {
            (_, None) => RunStatus::Failed(own),
            // Rank 0's own error follows the cause, unless it is the cause.
            (Fatal::Here(_) | Fatal::Everywhere(_), Some(r)) if r != 0 => {
                st.with_cause(&RunStatus::Failed(format!("rank 0: {own}")))
            }
            _ => st.with_cause(&RunStatus::Running),
        };
        let written = st.with_cause(&status);
        let info = st.info_for(&written);
        if let Err(e) = st.write_caused(&written, &info) {
            eprintln!("tcpx-perf: error: {e}");
        }
        // The node verdicts written: the culprit's node, and what the sizes measured before say
        // of the others (the table of a complete run's footer).
        if !info.node_verdicts.is_empty() {
            print!("{}", export::nodes::footer(&info.node_verdicts, st.thresholds, None));
        }
        match (status.error(), fatal) {
            (Some(line), Fatal::Here(_)) => Fatal::Here(line),
            (_, fatal) => fatal,
        }
    }

    /// Rank 0's own error may be the echo of another rank's end (a peer killed, or one that
    /// failed and closes its connections as it goes): for up to a second the reports that name
    /// the cause may still come, while the root of the blame graph is a rank that has not
    /// spoken (mpirun's SIGTERM, if it comes first, writes the record with what is known).
    fn await_cause(&self, mpi: &Mpi) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            // Takes the reports that have arrived (each is an account in the record).
            let _ = mpi.reported_failure();
            let settled = self.lock().is_none_or(|st| {
                blame::roots(&st.accounts)
                    .first()
                    .is_some_and(|r| st.accounts[r.rank] != Account::Unheard)
            });
            if settled {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
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

/// Rank 0: every report of another rank (its error, the signal a process other than its
/// launcher sent it, that it is alive and ending on the launcher's signal) is its account in
/// the record, taken on the main thread wherever it waits; a new culprit is on disk at once.
fn hear_peers(mpi: &Mpi, state: &Arc<Mutex<State>>) {
    let told = state.clone();
    mpi.on_peer_failure(move |f| {
        if let Some(mut st) = lock_within(&told, LAST_WORDS_LOCK_WAIT) {
            let account = Account::Failed {
                phase: f.phase.clone(),
                error: f.error.clone(),
            };
            st.take(f.rank, account);
        }
    });
    let heard = state.clone();
    mpi.on_peer_signalled(move |rank, signal, from| {
        if let Some(mut st) = lock_within(&heard, LAST_WORDS_LOCK_WAIT) {
            let account = Account::Signalled {
                signal: signal.to_string(),
                from: from.to_string(),
            };
            st.take(rank, account);
        }
    });
    let ending = state.clone();
    mpi.on_peer_ending(move |rank| {
        if let Some(mut st) = lock_within(&ending, LAST_WORDS_LOCK_WAIT) {
            st.take(rank, Account::Fine);
        }
    });
}

/// `then` of a signalled culprit: what rank 0 heard after (`SIGTERM from mpirun (pid 42)`).
fn then_of_signal(status: &RunStatus) -> Option<String> {
    match status {
        RunStatus::Running => None,
        RunStatus::Interrupted {
            signal, from: Some(f), ..
        } => Some(format!("{signal} from {f}")),
        RunStatus::Interrupted { signal, from: None, .. } => Some(signal.clone()),
        other => other.error(),
    }
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

/// Rank 0 itself did not run for long enough to miss -T (stopped, see [`stopped`]): it is the
/// rank that did not arrive and did not answer, whatever the others did.
fn own_stop(d: &mut TimeoutDiagnosis, limit: Duration) {
    let Some(gap) = stopped::missed(limit) else { return };
    for list in [&mut d.absent_ranks, &mut d.silent_ranks] {
        if !list.contains(&0) {
            list.insert(0, 0);
        }
    }
    if let Some(own) = d.reports.iter_mut().find(|r| r.rank == 0) {
        own.message = format!(
            "{} (rank 0 itself did not run for {:.1} s: stopped or frozen)",
            own.message,
            gap.as_secs_f64()
        );
    }
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
    let mut diagnosis = TimeoutDiagnosis {
        limit_s: settings.timeout.as_secs(),
        phase: account,
        absent_ranks: heard.absent,
        silent_ranks: heard.silent,
        reports,
        culprit: None,
    };
    own_stop(&mut diagnosis, settings.timeout);
    let line = diagnosis.line();
    if let Err(e) = record.end(&RunStatus::Timeout(diagnosis)) {
        eprintln!("tcpx-perf: error: {e}");
    }
    eprintln!("tcpx-perf: timeout: {line}");
    eprintln!("tcpx-perf: timeout {}", record.where_());
    Fatal::TimedOut
}

#[cfg(test)]
mod tests;
