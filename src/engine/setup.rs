//! Connection setup of one endpoint: every connect and accept polled until done, on a pool of
//! setup threads that grows while the plugin blocks.
//!
//! NCCL's connect/accept are non-blocking by contract (NULL comm = call again), and TCPX 3.1.9
//! and tcpx-emu honour it: the first call starts a detached thread that dials (or accepts) the
//! sockets and sleeps TCPX's 100 ms per socket plus the flow-steering wait, and later calls
//! poll. One thread polling every comm then sets all of them up in about one connect latency.
//! A plugin whose calls block instead would serialize them: n peers, n latencies, and a
//! deadlock when two ranks block in accepts whose connects are queued behind them. So setup
//! starts with one thread and, whenever every thread is blocked ([`Pool::all_blocked`]: inside a
//! call for longer than [`BLOCKED`], asleep in it), doubles (up to the comms waiting and
//! `max_threads`); the plugin must then
//! take calls on distinct comms from several threads at once (TCPX: `connect.cc` guards its
//! shared state, the per-device stride counters, with `tx_stride_mu`/`rx_stride_mu`; everything
//! else a call touches is its own comm's). Connects start in turns of `in_flight` per endpoint
//! ([`connects_in_flight`]): each one under way holds a plugin thread.

use nccl_net::{ListenComm, PendingConnect, RecvComm, SendComm};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A call that has not returned after this long is blocking.
pub const BLOCKED: Duration = Duration::from_millis(50);
/// How the error of a deadline that passed begins.
pub const STILL_WAITING: &str = "still waiting for ";
/// Pause between passes over comms that are not ready yet (NCCL's own setup polls about as often).
const IDLE: Duration = Duration::from_millis(1);
/// The fewest connects an endpoint has under way at once ([`connects_in_flight`]).
pub const MIN_CONNECTS_IN_FLIGHT: usize = 16;
/// Threads of a process besides its connects' while it sets up (main, MPI's, watchdogs, the
/// endpoints' workers and setup pools, the plugin's acceptor), budgeted per endpoint.
const SETUP_RESERVE: usize = 12;

/// Connects one endpoint has under way at once (`--connects-in-flight auto`); the others wait
/// their turn. A connect's first call starts the plugin's work, a thread each in tcpx-emu and
/// TCPX until its sockets are up, and every thread takes a pid of the kernel's `pid_max`, which
/// every process on that kernel shares: 512 ranks on one host (the 64-node rig) that started
/// all of their 1008 connects at once ran ~290 threads each and ran the host out of pids
/// (docs/runs/h100x4-20261127c-issue33). So each of the `endpoints_on_kernel` endpoints of the
/// job on this kernel gets an even share of half the pids, less its other threads, and at least
/// [`MIN_CONNECTS_IN_FLIGHT`]: 244 for 128 ranks under pid_max 65536 (all of a 16-node
/// fullmesh's 224 at once, as before the window), 52 for 512 ranks.
/// `pid_max` None (unreadable): Linux's default, 32768.
pub fn connects_in_flight(pid_max: Option<u64>, endpoints_on_kernel: usize) -> usize {
    let pid_max = pid_max.unwrap_or(32768);
    let share = usize::try_from(pid_max / 2).unwrap_or(usize::MAX) / endpoints_on_kernel.max(1);
    share.saturating_sub(SETUP_RESERVE).max(MIN_CONNECTS_IN_FLIGHT)
}

/// One comm still being set up.
pub enum Task {
    Connect(usize, PendingConnect),
    Accept(usize, ListenComm),
}

/// What setup produced: send comms in connect order, receive comms in listen order.
pub struct Established {
    pub sends: Vec<SendComm>,
    pub recvs: Vec<RecvComm>,
    /// The listen comms of the accepts, for the endpoint to close with its comms.
    pub listens: Vec<ListenComm>,
    /// Setup threads used at most.
    pub threads: usize,
    pub elapsed: Duration,
}

struct Pool {
    queue: Mutex<VecDeque<Task>>,
    /// Connects not started yet: one joins `queue` as each connect under way finishes.
    later: Mutex<VecDeque<Task>>,
    sends: Mutex<Vec<Option<SendComm>>>,
    recvs: Mutex<Vec<Option<RecvComm>>>,
    remaining: AtomicUsize,
    failed: Mutex<Option<String>>,
    /// Listen comms whose accept finished.
    accepted: Mutex<Vec<ListenComm>>,
    stop: AtomicBool,
    /// Per thread: nanoseconds since `epoch` when its current plugin call began, 0 = none.
    in_call: Vec<AtomicU64>,
    /// Per thread: its kernel thread id (0 until it runs), to read its state.
    tids: Vec<AtomicI32>,
    epoch: Instant,
}

impl Pool {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn fail(&self, msg: String) {
        Self::lock(&self.failed).get_or_insert(msg);
        self.stop.store(true, Ordering::Relaxed);
    }

    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// One setup thread: takes a comm, polls it once, puts it back if not ready.
    fn serve(&self, me: usize, init: &(dyn Fn() -> Result<(), String> + Sync)) {
        // SAFETY: gettid has no preconditions.
        self.tids[me].store(unsafe { libc::gettid() }, Ordering::Release);
        // The GPU context the plugin's calls read, current on this thread.
        if let Err(e) = init() {
            return self.fail(e);
        }
        let mut misses = 0usize;
        while !self.stop.load(Ordering::Relaxed) && self.remaining.load(Ordering::Acquire) > 0 {
            let Some(mut task) = Self::lock(&self.queue).pop_front() else {
                // The rest are in other threads' calls.
                std::thread::sleep(IDLE * 5);
                continue;
            };
            self.in_call[me].store(self.now(), Ordering::Release);
            let polled = match &mut task {
                Task::Connect(i, pending) => pending.poll().map(|c| c.map(|c| Self::lock(&self.sends)[*i] = Some(c))),
                Task::Accept(i, listen) => listen
                    .poll_accept()
                    .map(|c| c.map(|c| Self::lock(&self.recvs)[*i] = Some(c))),
            };
            self.in_call[me].store(0, Ordering::Release);
            match polled {
                Ok(Some(())) => {
                    misses = 0;
                    // A finished accept's listen comm is kept (the endpoint closes it with its
                    // comms): closed as each accept finished, the listeners still open when
                    // the last sockets arrive would depend on how fast this pool polls (none
                    // on a small rig, all of them on a loaded 128-rank one), and the process's
                    // peak of open files with them. Kept, the peak is every socket and every
                    // listener, what the resource model plans, and it lasts to be seen.
                    match task {
                        Task::Accept(_, listen) => Self::lock(&self.accepted).push(listen),
                        Task::Connect(..) => {
                            if let Some(next) = Self::lock(&self.later).pop_front() {
                                Self::lock(&self.queue).push_back(next);
                            }
                        }
                    }
                    self.remaining.fetch_sub(1, Ordering::AcqRel);
                }
                Ok(None) => {
                    let waiting = {
                        let mut q = Self::lock(&self.queue);
                        q.push_back(task);
                        q.len()
                    };
                    misses += 1;
                    if misses >= waiting {
                        misses = 0;
                        std::thread::sleep(IDLE);
                    }
                }
                Err(e) => return self.fail(e.to_string()),
            }
        }
    }

    /// The error of a deadline that passed: the comms not set up (those not started said so)
    /// and how many of the `started` threads are inside a plugin call.
    fn still_waiting(&self, started: usize, describe: &dyn Fn(&Task) -> String) -> String {
        let mut missing: Vec<String> = Self::lock(&self.queue).iter().map(describe).collect();
        missing.extend(
            Self::lock(&self.later)
                .iter()
                .map(|t| format!("{} (not started)", describe(t))),
        );
        let busy = self.in_call[..started]
            .iter()
            .filter(|t| t.load(Ordering::Acquire) != 0)
            .count();
        let blocked = if busy > 0 {
            format!(" ({busy} inside a plugin call)")
        } else {
            String::new()
        };
        format!("{STILL_WAITING}{}{blocked}", missing.join(", "))
    }

    /// Whether every started thread is blocked in the plugin: inside a call that has lasted
    /// longer than [`BLOCKED`] and asleep in it (not `R`, waiting for a core; not `D`, waiting
    /// in the kernel for memory maps or I/O, as the `mmap`/`mprotect` of the connect threads'
    /// stacks do when many start at once). A non-blocking poll still outlasts 50 ms now and then
    /// (queued behind a lock: a futex), hence the doubling. Before, any such wait added a thread
    /// per comm waiting: every endpoint's pool went to `--setup-threads`, and the threads started
    /// made the waits longer (4 ranks x 8 endpoints on 2 cores set up in 3.1-5.7 s with 64
    /// threads each; 0.30-0.35 s with 2-4 now, docs/runs/20261127-setup-pool; 84 threads per
    /// process against 27 planned at 512 ranks, docs/runs/h100x4-20261127c-issue33).
    fn all_blocked(&self, started: usize) -> bool {
        let now = self.now();
        let blocked = BLOCKED.as_nanos() as u64;
        (0..started).all(|i| {
            let since = self.in_call[i].load(Ordering::Acquire);
            since != 0
                && now.saturating_sub(since) > blocked
                && !matches!(thread_state(self.tids[i].load(Ordering::Acquire)), Some('R' | 'D'))
        })
    }
}

/// The state letter of this process's thread `tid` (`R` runnable, `S` sleeping, `D` waiting on
/// I/O; see proc(5)), or None when it cannot be read.
fn thread_state(tid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // `tid (comm) S ...`: the command may hold spaces and parentheses, the state follows the last `)`.
    stat.get(stat.rfind(')')? + 1..)?.trim_start().chars().next()
}

/// The tasks polled from the start (every accept and the first `in_flight` connects) and the
/// connects that wait their turn, each in the order given.
fn first_turn(tasks: Vec<Task>, in_flight: usize) -> (VecDeque<Task>, VecDeque<Task>) {
    let (mut now, mut later) = (VecDeque::new(), VecDeque::new());
    let mut connecting = 0;
    for task in tasks {
        match task {
            Task::Connect(..) if connecting >= in_flight.max(1) => later.push_back(task),
            Task::Connect(..) => {
                connecting += 1;
                now.push_back(task);
            }
            Task::Accept(..) => now.push_back(task),
        }
    }
    (now, later)
}

/// Sets up every comm of `tasks` (connect indices `0..connects`, accept indices
/// `0..accepts`), at most `in_flight` connects under way at once, before `deadline`, or until
/// `abort` is set (another rank failed: its comms will never come); `init` runs first on every
/// setup thread (the GPU context the plugin reads in connect). `describe` names a comm that did
/// not finish, for the error.
#[allow(clippy::too_many_arguments)]
pub fn establish(
    tasks: Vec<Task>,
    connects: usize,
    accepts: usize,
    max_threads: usize,
    in_flight: usize,
    deadline: Instant,
    abort: &AtomicBool,
    init: &(dyn Fn() -> Result<(), String> + Sync),
    describe: &dyn Fn(&Task) -> String,
) -> Result<Established, String> {
    let start = Instant::now();
    let max_threads = max_threads.clamp(1, tasks.len().max(1));
    let (now, later) = first_turn(tasks, in_flight);
    let pool = Pool {
        remaining: AtomicUsize::new(now.len() + later.len()),
        queue: Mutex::new(now),
        later: Mutex::new(later),
        sends: Mutex::new((0..connects).map(|_| None).collect()),
        recvs: Mutex::new((0..accepts).map(|_| None).collect()),
        failed: Mutex::new(None),
        accepted: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        in_call: (0..max_threads).map(|_| AtomicU64::new(0)).collect(),
        tids: (0..max_threads).map(|_| AtomicI32::new(0)).collect(),
        epoch: start,
    };
    let mut started = 0;
    std::thread::scope(|scope| {
        let pool = &pool;
        let spawn = |me: usize| {
            std::thread::Builder::new()
                .name(format!("setup-{me}"))
                .spawn_scoped(scope, move || pool.serve(me, init))
                .map(drop)
                .map_err(|e| format!("cannot start a setup thread: {e}"))
        };
        if let Err(e) = spawn(0) {
            return pool.fail(e);
        }
        started = 1;
        while pool.remaining.load(Ordering::Acquire) > 0 && !pool.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(2));
            if abort.load(Ordering::Relaxed) {
                return pool.fail("stopped: another rank failed".to_string());
            }
            if Instant::now() > deadline {
                return pool.fail(pool.still_waiting(started, describe));
            }
            // All threads blocked in calls: twice as many (no more than the comms waiting), so
            // that a plugin whose calls block has all of them in flight within a few doublings
            // (50 ms each), and a false alarm costs a thread or two, not `max_threads`.
            let waiting = Pool::lock(&pool.queue).len();
            if started < max_threads && waiting > 0 && pool.all_blocked(started) {
                for _ in 0..started.min(waiting).min(max_threads - started) {
                    match spawn(started) {
                        Ok(()) => started += 1,
                        Err(e) => return pool.fail(e),
                    }
                }
            }
        }
        // Setup threads still inside a blocking call are waited for here (scope end).
    });
    if let Some(e) = Pool::lock(&pool.failed).take() {
        return Err(e);
    }
    let sends = pool
        .sends
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let recvs = pool
        .recvs
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Established {
        sends: sends.into_iter().map(|c| c.expect("every connect completed")).collect(),
        recvs: recvs.into_iter().map(|c| c.expect("every accept completed")).collect(),
        listens: pool
            .accepted
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        threads: started,
        elapsed: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state that tells a starved call from a blocked one, read from a thread that spins and
    /// one that sleeps.
    #[test]
    fn a_spinning_thread_is_runnable_and_a_sleeping_one_is_not() {
        let stop = AtomicBool::new(false);
        let tids = [AtomicI32::new(0), AtomicI32::new(0)];
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: gettid has no preconditions.
                tids[0].store(unsafe { libc::gettid() }, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            s.spawn(|| {
                // SAFETY: as above.
                tids[1].store(unsafe { libc::gettid() }, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let deadline = Instant::now() + Duration::from_secs(5);
            let (mut spinning, mut sleeping) = (None, None);
            // A spinning thread may be read between time slices only as runnable; a sleeping one
            // is asleep nearly always: a few reads settle both.
            while Instant::now() < deadline && (spinning != Some('R') || sleeping != Some('S')) {
                std::thread::sleep(Duration::from_millis(5));
                spinning = thread_state(tids[0].load(Ordering::Acquire));
                sleeping = thread_state(tids[1].load(Ordering::Acquire));
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!((spinning, sleeping), (Some('R'), Some('S')));
        });
        assert_eq!(thread_state(-1), None, "no such thread");
    }

    #[test]
    fn connects_in_flight_shares_half_the_pids_among_the_kernels_endpoints() {
        // The 4 x H100 host: 128 ranks set up every connect of a 16-node fullmesh (224) at once.
        assert_eq!(connects_in_flight(Some(65536), 128), 244);
        // 512 ranks: 52 each, 512 x (52 + 12) pids = half of pid_max.
        assert_eq!(connects_in_flight(Some(65536), 512), 52);
        // Never fewer than the minimum, whatever the share; no endpoints counts as one.
        assert_eq!(connects_in_flight(Some(32768), 4096), MIN_CONNECTS_IN_FLIGHT);
        assert_eq!(connects_in_flight(Some(4_194_304), 0), 2_097_152 - 12);
        // Unreadable: Linux's default.
        assert_eq!(connects_in_flight(None, 32), connects_in_flight(Some(32768), 32));
    }
}
