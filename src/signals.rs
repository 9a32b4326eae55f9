//! SIGINT and SIGTERM end a run at once, keeping what it measured.
//!
//! [`install`] blocks both signals in the main thread before MPI or any other thread starts (every
//! thread inherits the mask), and one thread waits for them with `sigwaitinfo`: the signal arrives as
//! an ordinary event on an ordinary thread, which may take locks and write files, so no code runs
//! in a signal handler. That thread runs the last words registered with [`on_signal`] (rank 0
//! writes `summary.json` with `status: "interrupted"`) and ends the process with `128 + signal`,
//! as shells report a process killed by that signal, whatever the main thread is blocked in (an MPI
//! collective, a plugin call).
//!
//! Open MPI 4.1's mpirun, on SIGTERM or SIGINT, sends every rank SIGCONT, waits a second, sends
//! SIGTERM, and then sends SIGKILL as soon as *any* rank exits (its one-second `sleep` is cut
//! short by SIGCHLD). A rank that exits at once would therefore take rank 0 down within
//! milliseconds, before its last words are on disk. So the other ranks [`linger`]: they stop
//! moving data ([`hold_if_ending`]) and exit only after rank 0 had time to write, and rank 0's
//! own exit is what ends the job.
//!
//! The sender is named as it was: `sigwaitinfo` gives its pid, `/proc/<pid>/comm` its command,
//! read at once (a `kill` that exits stays readable as a zombie until its shell reaps it).
//! "mpirun" is said only of mpirun itself (`mpirun`, `orterun`, `prterun`) and of its daemons
//! (`orted`, `prted`). A rank other than 0 that is signalled by anyone but its launcher (a person,
//! a script, a scheduler's agent) says so on stderr, naming the sender: rank 0 then hears only
//! mpirun's SIGTERM as the job ends, and without that line the job's output would blame mpirun.
//! Whatever sent it, the signal is kept for the main thread ([`ending`]): after mpirun's
//! SIGTERM every rank other than 0 tells rank 0 that it is alive and ending, so that a rank
//! that cannot (killed with SIGKILL, stopped) is named as the silent one.
//!
//! A launcher that vanishes without a word must end the ranks too: `timeout 60 mpirun ...` in
//! a terminal, on Ctrl-C, hands mpirun two SIGINTs at once (the terminal's and the one
//! `timeout` forwards to its process group), and Open MPI 4.1's mpirun takes the second as
//! "forcibly terminate": it exits at once, signalling no rank (the ranks sit in process groups
//! of their own, so the terminal's SIGINT never reaches them either). Rank 0 then dies of a
//! broken stdout with `summary.json` left `running`. So a launched rank asks the kernel for
//! SIGTERM when its parent exits ([`end_with_the_launcher`]), and says so as `from the exit of
//! mpirun (pid N)`.
//!
//! One atomic decides between a signal and the main thread's own exit ([`exit`]): whichever
//! comes first sets the exit status, so a process never exits 0 after its last words said
//! `interrupted`, nor 143 after it decided on its own status.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Run with the signal and its sender (`mpirun (pid 4242)`; `None` when the kernel sent it),
/// and whether the sender is this process's launcher (mpirun ending the whole job).
type LastWords = Box<dyn Fn(i32, Option<&str>, bool) + Send>;

/// The process runs; [`exit`] has decided its status; a signal is ending it.
const RUNNING: u8 = 0;
const EXITING: u8 = 1;
const SIGNALLED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(RUNNING);
/// The status [`exit`] decided on (valid once STATE is EXITING).
static EXIT_STATUS: AtomicI32 = AtomicI32::new(0);
static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);
/// A rank other than 0 signalled by a process other than its launcher: the signal's name and
/// the sender, for the main thread to tell rank 0 ([`signalled_by_other`]).
static BY_OTHER: Mutex<Option<(String, String)>> = Mutex::new(None);
/// The signal ending this process: its name, its sender, whether the launcher sent it (see
/// [`ending`]).
static ENDING: Mutex<Option<Ending>> = Mutex::new(None);
/// The launcher this process was started by (its parent at [`end_with_the_launcher`]) and its
/// command, to name its exit as the sender of the SIGTERM that exit causes.
static PARENT: AtomicI32 = AtomicI32::new(0);
static PARENT_COMM: Mutex<Option<String>> = Mutex::new(None);
/// Milliseconds between the last words and the exit (see [`linger`]).
static LINGER_MS: AtomicU64 = AtomicU64::new(0);

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread started after) and starts the
/// thread that waits for them. Call first thing in `main`, with the rank the launcher announces
/// (a rank other than 0 names a sender that is not its launcher).
pub fn install(rank: usize) {
    let set = ending_signals();
    // SAFETY: `set` is an initialised signal set; a null old-set pointer is allowed.
    let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
    if blocked != 0 {
        return;
    }
    let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || loop {
        // SAFETY: siginfo_t is plain data; sigwaitinfo fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call.
        let signal = unsafe { libc::sigwaitinfo(&raw const set, &raw mut info) };
        if signal <= 0 {
            continue;
        }
        // Said before the state changes, so that a thread that sees the process ending finds
        // who ended it.
        let sender = sender_of(&info);
        let from = sender.as_ref().map(Sender::describe);
        let by_launcher = sender.as_ref().is_some_and(Sender::is_launcher);
        let sent_by = from
            .clone()
            .unwrap_or_else(|| "the kernel (a terminal's Ctrl-C, say)".into());
        if rank != 0 && !by_launcher {
            *BY_OTHER.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((name(signal), sent_by.clone()));
        }
        *ENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Ending {
            signal: name(signal),
            from: from.clone(),
            by_launcher,
        });
        if STATE
            .compare_exchange(RUNNING, SIGNALLED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // The main thread had decided the status first: it stands.
            // SAFETY: ends the process; nothing after it runs.
            unsafe { libc::_exit(EXIT_STATUS.load(Ordering::SeqCst)) };
        }
        if rank != 0 && !by_launcher {
            eprintln!(
                "tcpx-perf: rank {rank}: {} from {sent_by}: this rank stops, and mpirun then ends the job",
                name(signal)
            );
        }
        if let Some(words) = LAST_WORDS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            // A panic (stderr gone with mpirun, say) must not keep this thread from ending the
            // process: the main thread waits for it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                words(signal, from.as_deref(), by_launcher);
            }));
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::thread::sleep(Duration::from_millis(LINGER_MS.load(Ordering::SeqCst)));
        // _exit: MPI and plugin threads may hold locks that atexit handlers need.
        // SAFETY: ends the process; nothing after it runs.
        unsafe { libc::_exit(128 + signal) };
    });
    if spawned.is_err() {
        // Without the waiting thread the signals must keep their default action (end the process).
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut()) };
    }
}

/// A launched rank: SIGTERM from the kernel when the launcher that started it (mpirun, its
/// daemon, slurmstepd) exits, so that a launcher gone without a word (mpirun forcibly ended by
/// a second Ctrl-C) still gets rank 0's last words written. Call after [`install`], only for a
/// process a launcher started: a singleton's parent is a shell, whose exit ends nothing.
pub fn end_with_the_launcher() {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm"))
        .ok()
        .map(|c| c.trim().to_string());
    *PARENT_COMM.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = comm;
    PARENT.store(parent, Ordering::SeqCst);
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; the other arguments are unused.
    let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) };
    // SAFETY: as above.
    if set == 0 && unsafe { libc::getppid() } != parent {
        // The launcher exited before the request took: the signal it would have sent.
        // SAFETY: signals this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    }
}

/// What this process does when SIGINT or SIGTERM arrives, before it exits `128 + signal`
/// (replaces what was registered before). `words` gets the signal and the process that sent
/// it, as `name (pid N)` (`None` when the kernel did, as for Ctrl-C at a terminal): whether
/// the scheduler, mpirun or a person ended the run; and whether the sender is the launcher
/// (mpirun ending the whole job: every rank got it).
pub fn on_signal(words: impl Fn(i32, Option<&str>, bool) + Send + 'static) {
    *LAST_WORDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(words));
}

/// After the last words, wait `delay` before exiting: ranks other than rank 0 call this, so that
/// their exit does not set off the launcher's SIGKILL before rank 0 has written its record.
pub fn linger(delay: Duration) {
    LINGER_MS.store(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), Ordering::SeqCst);
}

/// Ends the process with `status`, unless a signal got there first: then the signal thread ends
/// it (128 + signal, after its last words) and this never returns.
pub fn exit(status: i32) -> ! {
    EXIT_STATUS.store(status, Ordering::SeqCst);
    if STATE
        .compare_exchange(RUNNING, EXITING, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        std::process::exit(status);
    }
    wait_for_the_signal_thread()
}

/// If a signal is ending this process, waits for the signal thread to end it (never returns):
/// a lingering rank moves no more data and reports no error (its peers going away is the
/// signal's doing, not a fault to blame on them).
pub fn hold_if_ending() {
    if is_ending() {
        wait_for_the_signal_thread();
    }
}

/// Whether a signal is ending this process (its last words are being said).
pub fn is_ending() -> bool {
    STATE.load(Ordering::SeqCst) == SIGNALLED
}

/// The signal (`SIGTERM`) and its sender (`sh (pid 77)`) when a process other than the launcher
/// signalled this rank (never on rank 0): the main thread tells rank 0 while this rank lingers,
/// since rank 0 itself hears only mpirun's SIGTERM as the job ends.
pub fn signalled_by_other() -> Option<(String, String)> {
    BY_OTHER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The signal that is ending this process, once one is (whoever sent it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// `SIGTERM`, `SIGINT`.
    pub signal: String,
    /// `mpirun (pid 4242)`; `None` when the kernel sent it.
    pub from: Option<String>,
    /// The launcher sent it (mpirun ending the whole job, or its exit).
    pub by_launcher: bool,
}

/// The signal ending this process, if one is: a rank other than 0 tells rank 0 that it is
/// alive and ending (and what it saw), so that a rank that cannot say so is known as silent.
pub fn ending() -> Option<Ending> {
    ENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Parks this thread until the signal thread ends the process.
fn wait_for_the_signal_thread() -> ! {
    loop {
        std::thread::park();
    }
}

/// Who sent a signal: its pid and command (`None` once it is gone).
struct Sender {
    pid: i32,
    comm: Option<String>,
    /// The sender is the launcher that started this process, and it has exited: the signal is
    /// the one its exit sets off ([`end_with_the_launcher`]).
    exited_parent: bool,
}

/// Open MPI's and PRRTE's launcher commands, and the daemons they start the ranks under.
const MPIRUN: [&str; 3] = ["mpirun", "orterun", "prterun"];
const MPIRUN_DAEMONS: [&str; 2] = ["orted", "prted"];

impl Sender {
    /// mpirun, one of its daemons, or whatever started this process (srun's slurmstepd): the
    /// launcher, whose signals end the whole job and need no rank to report them.
    fn is_launcher(&self) -> bool {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        self.exited_parent
            || self.pid == parent
            || self
                .comm
                .as_deref()
                .is_some_and(|c| MPIRUN.contains(&c) || MPIRUN_DAEMONS.contains(&c))
    }

    /// `mpirun (pid 4242)`, `mpirun's daemon orted (pid 17)`, `kill (pid 77)`, or `pid 77`.
    fn describe(&self) -> String {
        if self.exited_parent {
            let launcher = self.comm.as_deref().unwrap_or("its launcher");
            return format!("the exit of {launcher} (pid {})", self.pid);
        }
        match self.comm.as_deref() {
            None => format!("pid {}", self.pid),
            Some(c) if MPIRUN_DAEMONS.contains(&c) => format!("mpirun's daemon {c} (pid {})", self.pid),
            Some(c) => format!("{c} (pid {})", self.pid),
        }
    }
}

fn sender_of(info: &libc::siginfo_t) -> Option<Sender> {
    if info.si_code != libc::SI_USER && info.si_code != libc::SI_QUEUE {
        return None;
    }
    // SAFETY: for SI_USER and SI_QUEUE the kernel filled in the sender's pid.
    let pid = unsafe { info.si_pid() };
    if pid <= 0 {
        return None;
    }
    // SAFETY: getppid has no preconditions.
    let exited_parent = pid == PARENT.load(Ordering::SeqCst) && unsafe { libc::getppid() } != pid;
    let comm = if exited_parent {
        PARENT_COMM
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    } else {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .map(|c| c.trim().to_string())
    };
    let comm = comm.filter(|c| !c.is_empty());
    Some(Sender {
        pid,
        comm,
        exited_parent,
    })
}

/// The signal's name as shells and `kill -l` spell it.
pub fn name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}

fn ending_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        set
    }
}

#[cfg(test)]
mod tests {
    use super::Sender;

    fn sender(pid: i32, comm: Option<&str>) -> Sender {
        Sender {
            pid,
            comm: comm.map(String::from),
            exited_parent: false,
        }
    }

    /// A plain process is named by its command and is no launcher; mpirun and its daemons are
    /// launchers, the daemons named as mpirun's; so is this process's parent, whatever it runs.
    #[test]
    fn senders_are_named_as_they_are() {
        assert_eq!(sender(77, Some("kill")).describe(), "kill (pid 77)");
        assert!(!sender(77, Some("kill")).is_launcher());
        assert_eq!(sender(77, None).describe(), "pid 77");
        assert!(!sender(77, None).is_launcher());
        assert_eq!(sender(4242, Some("mpirun")).describe(), "mpirun (pid 4242)");
        assert!(sender(4242, Some("prterun")).is_launcher());
        assert_eq!(sender(17, Some("orted")).describe(), "mpirun's daemon orted (pid 17)");
        assert!(sender(17, Some("prted")).is_launcher());
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        assert!(sender(parent, Some("slurmstepd")).is_launcher());
        // The SIGTERM a launcher's exit sets off: the launcher, named by its exit.
        let gone = Sender {
            exited_parent: true,
            ..sender(4242, Some("mpirun"))
        };
        assert_eq!(gone.describe(), "the exit of mpirun (pid 4242)");
        assert!(gone.is_launcher());
    }
}
