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
}

pub struct Watchdog {
    state: Arc<(Mutex<Armed>, Condvar)>,
}

impl Watchdog {
    /// Starts the thread; `dump` describes this rank's state when a deadline passes.
    pub fn start(dump: impl Fn() -> String + Send + 'static, rank: usize) -> Watchdog {
        let state = Arc::new((
            Mutex::new(Armed {
                phase: String::new(),
                deadline: None,
                timeout: Duration::ZERO,
            }),
            Condvar::new(),
        ));
        let watched = state.clone();
        let spawned = std::thread::Builder::new().name("watchdog".into()).spawn(move || {
            let (lock, cvar) = &*watched;
            let mut armed = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                match armed.deadline {
                    None => armed = cvar.wait(armed).unwrap_or_else(std::sync::PoisonError::into_inner),
                    Some(deadline) => {
                        let now = Instant::now();
                        if now < deadline {
                            armed = cvar.wait_timeout(armed, deadline - now).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                            continue;
                        }
                        // A signal is ending the process: the phase stopped because of it, not
                        // a hang (and the signal thread decides the status).
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
                        if let Some(words) = LAST_WORDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
                            words(&account);
                        }
                        // _exit: MPI and plugin threads may hold locks that atexit handlers need.
                        unsafe { libc::_exit(EXIT_TIMEOUT) };
                    }
                }
            }
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
        armed.deadline = Some(Instant::now() + timeout);
        armed.timeout = timeout;
        cvar.notify_one();
    }

    pub fn disarm(&self) {
        let (lock, cvar) = &*self.state;
        lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner).deadline = None;
        cvar.notify_one();
    }
}
