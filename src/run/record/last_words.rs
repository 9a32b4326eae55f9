//! Rank 0's last words on SIGINT/SIGTERM, said on the signal thread while the main thread
//! keeps taking the other ranks' reports: after mpirun's SIGTERM, the living ranks say so, and
//! one that cannot (killed, stopped) is the silent one the record names.

use super::{lock_within, stopped, Account, RunStatus, State, LAST_WORDS_LOCK_WAIT};
use crate::signals;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long rank 0's last words wait for every other rank to say it is alive and ending
/// after the launcher's signal: mpirun sends SIGKILL a second after its SIGTERM.
const ACCOUNTS_WAIT: Duration = Duration::from_millis(700);
/// How long after the signal a rank that is alive has surely answered, if rank 0 took the
/// reports since: the others' main threads look every 20 ms.
const ANSWER_TIME: Duration = Duration::from_millis(300);

/// Rank 0's last words on SIGINT/SIGTERM (on the signal thread): `summary.json` as
/// `interrupted` at once; after the launcher's signal, the other ranks' accounts (a rank that
/// cannot give one is silent: killed or stopped), and the record again if they name a
/// culprit (`failed`, the signal as `then`).
pub(super) fn last_words(state: &Arc<Mutex<State>>, signal: i32, from: Option<&str>, by_launcher: bool) {
    let name = signals::name(signal);
    let plain = RunStatus::Interrupted {
        signal: name.clone(),
        from: from.map(str::to_string),
        rank: None,
    };
    // A size being written (the CSV files and summary.json, milliseconds) finishes first. Half
    // a second at most, well inside the second mpirun leaves before SIGKILL: the final writes
    // (pictures, fsync) or a hung file system may outlast it, and then summary.json stays as
    // the last size left it (`running`, every size measured).
    let Some(mut st) = lock_within(state, LAST_WORDS_LOCK_WAIT) else {
        eprintln!("tcpx-perf: interrupted by {name}; the result directory was busy and is left as it was");
        return;
    };
    if st.ended {
        eprintln!("tcpx-perf: {name} after the results were written; they are left as they are");
        return;
    }
    // From here no size is written over this record.
    st.ended = true;
    let mut status = plain.clone();
    if let Some(stopped) = stopped::missed(Duration::from_secs(st.limit_s)) {
        // Rank 0 itself was stopped (mpirun continues it to end the job): the others' silence
        // is not theirs.
        let what = format!("{name} after rank 0 did not run for {:.1} s", stopped.as_secs_f64());
        status = RunStatus::Timeout(st.own_timeout(&what));
    } else if let (Some(from), false) = (from, by_launcher) {
        // Rank 0 itself, signalled by a person or a script: the culprit, the signal no `then`.
        st.accounts[0] = Account::Signalled {
            signal: name,
            from: from.to_string(),
        };
        status = RunStatus::Running;
    }
    let first = st.with_cause(&status);
    let mut written = st.write_summary(&first);
    if by_launcher && matches!(status, RunStatus::Interrupted { .. }) {
        drop(st);
        await_accounts(state);
        let Some(again) = lock_within(state, LAST_WORDS_LOCK_WAIT) else {
            return;
        };
        st = again;
        let now = st.with_cause(&status);
        if now != first {
            written = st.write_summary(&now);
        }
    }
    let status = st.with_cause(&status);
    eprintln!("tcpx-perf: {} {}", status.error().unwrap_or_default(), st.where_());
    if let Err(e) = written {
        eprintln!("tcpx-perf: error: {e}");
    }
    // The process ends right after this returns: keep the lock held until then.
    std::mem::forget(st);
}

/// After the launcher's signal: waits up to [`ACCOUNTS_WAIT`] for every other rank's account
/// (the main thread takes them); a rank that gave none, while the main thread was taking them
/// and others did answer, is silent (kill -9 leaves no word; mpirun's signal is what follows).
fn await_accounts(state: &Mutex<State>) {
    let asked = Instant::now();
    let answered = |st: &State| st.accounts.iter().skip(1).filter(|a| **a != Account::Unheard).count();
    loop {
        let all = lock_within(state, LAST_WORDS_LOCK_WAIT).is_none_or(|st| answered(&st) + 1 == st.accounts.len());
        if all || asked.elapsed() >= ACCOUNTS_WAIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The main thread not taking reports (writing, or blocked), or no rank answering at all:
    // no one is known silent.
    let taking = crate::mpi_boot::drained_since(asked + ANSWER_TIME);
    if let Some(mut st) = lock_within(state, LAST_WORDS_LOCK_WAIT).filter(|st| taking && answered(st) > 0) {
        for a in st.accounts.iter_mut().skip(1) {
            if *a == Account::Unheard {
                *a = Account::Silent;
            }
        }
    }
}
