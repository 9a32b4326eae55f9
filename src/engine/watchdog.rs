//! The last line of defence against hangs: a thread that ends the process when a phase outlives
//! its deadline, after printing which phase it was and the state of every comm of this rank.
//!
//! The progress loop reports stalls itself; the watchdog exists for waits the engine cannot
//! bound from inside (an MPI barrier whose peer is stuck, a plugin call that blocks).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Exit status of a run ended by the watchdog (distinct from errors and wrong data).
pub const EXIT_TIMEOUT: i32 = 3;

type LastWords = Box<dyn Fn(&str) + Send>;

/// What the process does when any watchdog fires, before it exits (rank 0 writes the partial
/// results as timed out); given the one-line account of the phase.
static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);

/// Registers what to do when a watchdog fires, before the process exits [`EXIT_TIMEOUT`].
pub fn on_fire(words: impl Fn(&str) + Send + 'static) {
    *LAST_WORDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(words));
}

struct Armed {
    phase: String,
    deadline: Option<Instant>,
    timeout: Duration,
    /// What the thread is doing. A phase whose deadline comes no earlier than the one it
    /// sleeps toward needs no wake-up: the thread finds it when it wakes (phases start thousands
    /// of times a second, and each wake-up is a context switch taken from the ranks on the same
    /// cores).
    sleeping: Sleep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// Running: it reads the deadline before it sleeps again.
    Awake,
    /// Asleep without a deadline.
    Unarmed,
    /// Asleep until this instant.
    Until(Instant),
}

pub struct Watchdog {
    state: Arc<(Mutex<Armed>, Condvar)>,
}

/// The shared state before the first phase.
fn unarmed() -> Arc<(Mutex<Armed>, Condvar)> {
    Arc::new((
        Mutex::new(Armed {
            phase: String::new(),
            deadline: None,
            timeout: Duration::ZERO,
            sleeping: Sleep::Awake,
        }),
        Condvar::new(),
    ))
}

impl Watchdog {
    /// Starts the thread; `dump` describes this rank's state when a deadline passes.
    pub fn start(dump: impl Fn() -> String + Send + 'static, rank: usize) -> Watchdog {
        let state = unarmed();
        let watched = state.clone();
        let spawned = std::thread::Builder::new().name("watchdog".into()).spawn(move || {
            watch(&watched, |armed| {
                // A signal is ending the process: the phase stopped because of it, not a hang
                // (and the signal thread decides the status).
                crate::signals::hold_if_ending();
                // Formatted first, one write: other ranks' lines do not cut into it.
                eprintln!(
                    "tcpx-perf: rank {rank}: timeout: phase '{}' did not finish within {:.0} s; comm state:\n{}",
                    armed.phase,
                    armed.timeout.as_secs_f64(),
                    dump().trim_end()
                );
                let account = format!(
                    "phase '{}' did not finish within {:.0} s (watchdog)",
                    armed.phase,
                    armed.timeout.as_secs_f64()
                );
                if let Some(words) = LAST_WORDS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                {
                    words(&account);
                }
                // _exit: MPI and plugin threads may hold locks that atexit handlers need.
                unsafe { libc::_exit(EXIT_TIMEOUT) };
            });
        });
        if let Err(e) = spawned {
            eprintln!("tcpx-perf: warning: no watchdog thread ({e}); a hang would not be bounded");
        }
        Watchdog { state }
    }

    /// Starts a new phase that must end within `timeout`.
    pub fn arm(&self, phase: &str, timeout: Duration) {
        let (lock, cvar) = &*self.state;
        let mut armed = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        armed.phase.clear();
        armed.phase.push_str(phase);
        let deadline = Instant::now() + timeout;
        armed.deadline = Some(deadline);
        armed.timeout = timeout;
        if needs_wake(armed.sleeping, deadline) {
            cvar.notify_one();
        }
    }

    /// Ends the phase. The thread is not woken: at its deadline it finds none and sleeps on.
    pub fn disarm(&self) {
        let (lock, _) = &*self.state;
        lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner).deadline = None;
    }
}

/// The thread's loop: sleeps until the armed phase's deadline and calls `expired` with the
/// phase when it passes (the process's `expired` never returns).
fn watch(state: &(Mutex<Armed>, Condvar), mut expired: impl FnMut(&mut Armed)) {
    let (lock, cvar) = state;
    let mut armed = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        match armed.deadline {
            None => {
                armed.sleeping = Sleep::Unarmed;
                armed = cvar.wait(armed).unwrap_or_else(std::sync::PoisonError::into_inner);
                armed.sleeping = Sleep::Awake;
            }
            Some(deadline) if Instant::now() < deadline => {
                armed.sleeping = Sleep::Until(deadline);
                let left = deadline.saturating_duration_since(Instant::now());
                armed = cvar
                    .wait_timeout(armed, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                armed.sleeping = Sleep::Awake;
            }
            Some(_) => expired(&mut armed),
        }
    }
}

/// Whether a thread in state `sleeping` must be woken for a new `deadline`: it sleeps without
/// one, or toward a later one (awake, it reads the deadline before it sleeps again).
fn needs_wake(sleeping: Sleep, deadline: Instant) -> bool {
    match sleeping {
        Sleep::Awake => false,
        Sleep::Unarmed => true,
        Sleep::Until(until) => deadline < until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_wakes_the_thread_only_when_its_deadline_comes_sooner() {
        let t = Instant::now();
        let s = Duration::from_secs(1);
        assert!(needs_wake(Sleep::Unarmed, t), "asleep without a deadline");
        assert!(needs_wake(Sleep::Until(t + 2 * s), t + s), "a sooner deadline");
        assert!(
            !needs_wake(Sleep::Until(t + s), t + 2 * s),
            "a later one: found at the wake-up"
        );
        assert!(!needs_wake(Sleep::Awake, t), "awake: reads it before it sleeps");
    }

    /// A later phase that outlives its deadline fires even though arming it woke nobody.
    #[test]
    fn a_phase_armed_without_a_wake_up_still_has_its_deadline() {
        let (tx, rx) = std::sync::mpsc::channel();
        let state = unarmed();
        let w = Watchdog {
            state: Arc::clone(&state),
        };
        // The thread's loop, with a report instead of the exit.
        let watched = Arc::clone(&state);
        std::thread::spawn(move || {
            watch(&watched, |armed| {
                let _ = tx.send(armed.phase.clone());
                armed.deadline = None;
            });
        });
        w.arm("first", Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(50));
        w.disarm();
        w.arm("second", Duration::from_millis(400));
        let fired = rx.recv_timeout(Duration::from_secs(5)).expect("the second phase fires");
        assert_eq!(fired, "second");
    }
}
