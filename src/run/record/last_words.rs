//! Rank 0's last words on SIGINT/SIGTERM, said on the signal thread while the main thread
//! keeps taking the other ranks' reports: after mpirun's SIGTERM, the living ranks say so, and
//! one that cannot (killed, stopped) is the silent one the record names.

use super::{lock_within, stopped, Account, RunStatus, State, LAST_WORDS_LOCK_WAIT};
use crate::signals;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after the launcher's signal rank 0's last words wait, at most, for every other
/// rank to say it is alive and ending: mpirun sends SIGKILL a second after its SIGTERM (sooner
/// when a rank exits), and the record is written again after the wait.
const ACCOUNTS_WAIT: Duration = Duration::from_millis(600);
/// How long after the signal a rank that is alive has surely answered, if rank 0 took the
/// reports since: the others' main threads look every 20 ms (answers came within 45 ms on a
/// 2-core host with 4 ranks and 4 busy loops).
const ANSWER_TIME: Duration = Duration::from_millis(300);
/// How long no new answer must have come before the wait ends short of [`ACCOUNTS_WAIT`]: a
/// rank killed with SIGKILL never answers, and waiting the whole time for it left the record's
/// second write racing mpirun's SIGKILL (the kill -9 test ended `interrupted`, the dead rank
/// unnamed, once in CI and once in 50 runs on a 2-core host kept busy).
const QUIET: Duration = Duration::from_millis(100);

/// Rank 0's last words on SIGINT/SIGTERM (on the signal thread): `summary.json` as
/// `interrupted` at once; after the launcher's signal, the other ranks' accounts (a rank that
/// cannot give one is silent: killed or stopped), and the record again if they name a
/// culprit (`failed`, the signal as `then`).
pub(super) fn last_words(state: &Arc<Mutex<State>>, signal: i32, from: Option<&str>, by_launcher: bool) {
    let signalled = Instant::now();
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
        await_accounts(state, signalled);
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

/// After the launcher's signal: waits for every other rank's account (the main thread takes
/// them), until [`ACCOUNTS_WAIT`] after the signal, or sooner once [`settled`]; a rank that gave
/// none, while the main thread was taking them and others did answer, is silent (kill -9 leaves
/// no word; mpirun's signal is what follows).
fn await_accounts(state: &Mutex<State>, signalled: Instant) {
    let asked = Instant::now();
    let answered = |st: &State| st.accounts.iter().skip(1).filter(|a| **a != Account::Unheard).count();
    let (mut heard, mut last_answer) = (0, asked);
    loop {
        let Some(st) = lock_within(state, LAST_WORDS_LOCK_WAIT) else {
            break;
        };
        let (now, others) = (answered(&st), st.accounts.len() - 1);
        drop(st);
        if now != heard {
            (heard, last_answer) = (now, Instant::now());
        }
        let wait = Wait {
            since_signal: signalled.elapsed(),
            since_asked: asked.elapsed(),
            quiet_for: last_answer.elapsed(),
            answered: heard,
            others,
            taking: crate::mpi_boot::drained_since(asked + ANSWER_TIME),
        };
        if settled(&wait) {
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

/// Where rank 0's wait for the other ranks' accounts stands.
#[derive(Debug, Clone, Copy)]
struct Wait {
    since_signal: Duration,
    since_asked: Duration,
    /// Since the last new answer (since the asking while there is none).
    quiet_for: Duration,
    answered: usize,
    others: usize,
    /// The main thread took the reports after [`ANSWER_TIME`] had passed.
    taking: bool,
}

/// Whether the wait for accounts is over: every rank answered; or the signal is
/// [`ACCOUNTS_WAIT`] old; or the living have surely answered (some did, the main thread took
/// the reports after [`ANSWER_TIME`], and none came for [`QUIET`]), so the rest never will.
fn settled(w: &Wait) -> bool {
    w.answered >= w.others
        || w.since_signal >= ACCOUNTS_WAIT
        || (w.since_asked >= ANSWER_TIME && w.answered > 0 && w.taking && w.quiet_for >= QUIET)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waited(ms: u64) -> Wait {
        Wait {
            since_signal: Duration::from_millis(ms + 5),
            since_asked: Duration::from_millis(ms),
            quiet_for: Duration::from_millis(ms.saturating_sub(40)),
            answered: 2,
            others: 3,
            taking: true,
        }
    }

    #[test]
    fn a_dead_rank_is_not_waited_for_once_the_living_have_answered() {
        assert!(!settled(&waited(100)), "too soon: a living rank may still answer");
        assert!(settled(&waited(ANSWER_TIME.as_millis() as u64)));
        // Every rank answered: at once.
        assert!(settled(&Wait {
            answered: 3,
            ..waited(20)
        }));
    }

    #[test]
    fn the_wait_runs_on_while_answers_come_or_no_one_takes_them() {
        let late = waited(350);
        assert!(
            !settled(&Wait {
                quiet_for: Duration::from_millis(30),
                ..late
            }),
            "an answer just came"
        );
        assert!(
            !settled(&Wait { taking: false, ..late }),
            "the main thread took no report since"
        );
        assert!(
            !settled(&Wait { answered: 0, ..late }),
            "no rank answered: nothing is known"
        );
        // The signal's deadline ends every wait.
        assert!(settled(&Wait {
            taking: false,
            answered: 0,
            ..waited(ACCOUNTS_WAIT.as_millis() as u64)
        }));
    }
}
