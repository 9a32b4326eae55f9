//! The record's unit tests: the blame graph's root on disk, the culprit and the failed run's verdicts.

use super::*;
use crate::report::Health;

fn state(accounts: Vec<Account>) -> State {
    State {
        dir: None,
        info: crate::export::fixtures::info(),
        results: Vec::new(),
        planned: 3,
        limit_s: 20,
        hosts: vec!["node0".into(), "node0".into(), "node1".into(), "node1".into()],
        accounts,
        phase: "sweep",
        named: None,
        ended: false,
        thresholds: crate::verdict::Thresholds::default(),
    }
}

fn failed(phase: &str, error: &str) -> Account {
    Account::Failed {
        phase: phase.into(),
        error: error.into(),
    }
}

fn mpirun_sigterm() -> RunStatus {
    RunStatus::Interrupted {
        signal: "SIGTERM".into(),
        from: Some("mpirun (pid 42)".into()),
        rank: None,
    }
}

#[test]
fn a_rank_0_that_never_ends_the_job_is_named_with_its_host() {
    let line = root_absent_line(2, "node0", Duration::from_secs(3), Duration::from_secs(9));
    assert!(
        line.starts_with("tcpx-perf: rank 2: timeout: rank 0 (node0) did not arrive within -T 3 s"),
        "{line}"
    );
    assert!(line.contains("stopped, hung or unreachable"), "{line}");
}

/// A rank that told rank 0 who signalled it is the record: `interrupted` by that signal
/// and sender, mpirun's SIGTERM that follows only as `then`.
#[test]
fn a_signalled_rank_outlives_mpiruns_sigterm() {
    let mut accounts = vec![Account::Unheard; 4];
    accounts[2] = Account::Signalled {
        signal: "SIGTERM".into(),
        from: "sh (pid 77)".into(),
    };
    let st = state(accounts);
    let running = st.with_cause(&RunStatus::Running);
    assert_eq!(running.as_str(), "interrupted");
    assert_eq!(
        running.error().as_deref(),
        Some("rank 2 (node1) interrupted by SIGTERM from sh (pid 77)")
    );
    let then = st.with_cause(&mpirun_sigterm());
    assert_eq!(
        then.error().as_deref(),
        Some("rank 2 (node1) interrupted by SIGTERM from sh (pid 77); then SIGTERM from mpirun (pid 42)")
    );
    assert_eq!(st.with_cause(&then), then, "applied twice, the same");
    assert_eq!(st.with_cause(&RunStatus::Ok), RunStatus::Ok);
    let f = then.failure().expect("failure");
    assert_eq!((f.culprit.rank, f.culprit.reason.as_str()), (2, "signalled"));
    assert_eq!(f.culprit.sender.as_deref(), Some("sh (pid 77)"));
    assert_eq!((f.phase.as_str(), f.host.as_str()), ("sweep", "node1"));
}

#[test]
fn a_known_failure_outlives_what_follows() {
    let mut accounts = vec![Account::Unheard; 4];
    accounts[2] = failed(
        "connect",
        "spawning helper thread: Resource temporarily unavailable\nmore",
    );
    let st = state(accounts);
    let signalled = st.with_cause(&mpirun_sigterm());
    assert_eq!(signalled.as_str(), "failed");
    let RunStatus::RankFailed(f) = &signalled else {
        panic!("{signalled:?}")
    };
    assert_eq!((f.rank, f.host.as_str()), (2, "node1"));
    assert_eq!(f.culprit.reason, "local-error");
    assert_eq!(f.then.as_deref(), Some("interrupted by SIGTERM from mpirun (pid 42)"));
    assert_eq!(
        signalled.error().as_deref(),
        Some("rank 2 (node1) failed in connect: spawning helper thread: Resource temporarily unavailable; then interrupted by SIGTERM from mpirun (pid 42)")
    );
    // While rank 0 still waits: failed, nothing after yet.
    let RunStatus::RankFailed(f) = st.with_cause(&RunStatus::Running) else {
        panic!()
    };
    assert_eq!(f.then, None);
    // What rank 0 saw after is what followed.
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
    assert_eq!(state(vec![Account::Unheard; 4]).with_cause(&plain), plain);
}

/// The 128-rank run's record, on 4 ranks: rank 0 heard first from a victim and failed
/// itself; the rank every error leads to said nothing and is the culprit.
#[test]
fn the_victim_heard_first_is_not_the_culprit() {
    let peer = |n: usize| {
        format!("endpoint 0: irecv failed: ncclRemoteError (6) [peer rank {n} gpu 0 (node1) over eth1]: peer {n} closed the connection with 1 receive(s) outstanding")
    };
    let mut st = state(vec![Account::Unheard; 4]);
    st.take(1, failed("sweep", &peer(3)));
    st.take(0, failed("sweep", &peer(1)));
    st.take(2, failed("sweep", &peer(3)));
    let status = st.with_cause(&RunStatus::Failed("rank 0: x".into()));
    let RunStatus::RankFailed(f) = &status else {
        panic!("{status:?}")
    };
    assert_eq!((f.rank, f.host.as_str(), f.phase.as_str()), (3, "node1", "sweep"));
    let c = &f.culprit;
    assert_eq!(
        (c.reason.as_str(), c.nic.as_deref(), c.blamed_by),
        ("killed", Some("eth1"), 2)
    );
    assert_eq!((c.victims.clone(), c.error.clone()), (vec![0, 1, 2], None));
    assert_eq!(
        status.error().as_deref(),
        Some("rank 3 (node1, eth1) ended without a word in sweep (killed or crashed: its peers saw its connections closed); 2 rank(s) blame it; 3 rank(s) failed after it; then rank 0: x")
    );
    // A later "alive and ending" does not undo a failure.
    st.take(1, Account::Fine);
    assert!(matches!(st.accounts[1], Account::Failed { .. }));
}

/// A run a rank's failure ended judges its nodes: the culprit's node suspect by the failure,
/// with the culprit's line; the others by what was measured (here nothing).
#[test]
fn a_failed_runs_record_names_the_culprits_node_suspect() {
    let mut st = state(vec![Account::Unheard; 4]);
    for (h, name) in st.info.hosts.iter_mut().zip(["node0", "node1"]) {
        h.hostname = name.into();
    }
    assert!(
        st.info_for(&RunStatus::Running).node_verdicts.is_empty(),
        "no failure, no verdict"
    );
    st.take(
        2,
        failed("sweep", "endpoint 2: isend failed over eth2: connection reset"),
    );
    let status = st.with_cause(&RunStatus::Failed("rank 0: x".into()));
    let verdicts = st.info_for(&status).node_verdicts.clone();
    let seen: Vec<(&str, Health, Option<&str>)> = verdicts
        .iter()
        .map(|v| (v.host.as_str(), v.verdict, v.decided_by.as_deref()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("node0", Health::Healthy, None),
            ("node1", Health::Suspect, Some("failure"))
        ]
    );
    assert!(
        verdicts[1]
            .evidence
            .starts_with("failure: rank 2 in sweep: endpoint 2: isend failed"),
        "{}",
        verdicts[1].evidence
    );
}

/// A timeout that no failure preceded names its silent rank; rank 0 stopped past -T is one.
#[test]
fn a_timeout_names_its_silent_rank() {
    let st = state(vec![Account::Unheard; 4]);
    let d = TimeoutDiagnosis {
        limit_s: 3,
        phase: "barrier".into(),
        absent_ranks: vec![0],
        silent_ranks: vec![0],
        reports: Vec::new(),
        culprit: None,
    };
    let status = st.with_cause(&RunStatus::Timeout(d));
    assert_eq!(status.as_str(), "timeout");
    let f = status.failure().expect("a culprit");
    assert_eq!((f.rank, f.culprit.reason.as_str()), (0, "silent"));
    assert_eq!(st.with_cause(&status), status, "applied twice, the same");
}
