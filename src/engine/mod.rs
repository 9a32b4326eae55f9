//! The transfer engine: endpoint workers, their connections, and the timed iterations.
//!
//! The calling thread (the only one that talks to MPI, through [`Collectives`]) drives a crew of
//! worker threads, one per endpoint of this rank, in lock-step phases: listen, exchange handles,
//! connect, then per size prepare / (fill, barrier, run, verify) x iterations / totals, and close
//! (with `--connect rounds`, listen to release once per round: the run layer's `links`).
//! Every phase has a deadline (`-T`): the progress loop reports a stall itself, and a watchdog
//! thread ends the process with a state dump if a phase (an MPI barrier, a plugin call that
//! blocks) outlives it.

pub mod backoff;
pub mod buffer;
pub mod copier;
pub mod gpu;
pub mod progress;
pub mod schedule;
pub mod setup;
pub mod watchdog;
mod worker;

use crate::collectives::Collectives;
use crate::placement::rank::EndpointPlace;
use crate::plan::Lanes;
use crate::plan::Plan;
use crate::topology::Topology;
use nccl_net::{NetHandle, Plugin};
use progress::{IterationError, IterationTiming, LaneStats};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};
use worker::Worker;

pub use worker::{Instants, SizeTotals};

/// A connection's handle: (sending endpoint, receiving endpoint, channel).
pub type HandleKey = (usize, usize, usize);

/// Where endpoint buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Host,
    Cuda(gpu::CudaPath),
}

/// Engine knobs (validated before the engine starts).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub mem: MemKind,
    pub channels: usize,
    pub window: usize,
    pub chunk: u64,
    pub timeout: Duration,
    /// Most setup threads per endpoint ([`setup`]).
    pub setup_threads: usize,
    /// Most connects under way at once per endpoint ([`setup::connects_in_flight`]).
    pub connects_in_flight: usize,
    /// Largest single registration: the buffer is registered in segments of this size.
    pub reg_segment: u64,
    /// How progress loops wait when nothing completes (`--poll`).
    pub poll: backoff::PollMode,
}

/// State shared by the crew and the watchdog.
pub struct Shared {
    pub topology: Topology,
    pub connections: Vec<(usize, usize)>,
    pub channels: usize,
    pub epoch: Instant,
    pub abort: AtomicBool,
    /// Set when a worker's progress loop hit the deadline (exit status 3, not 1).
    pub stalled: AtomicBool,
    pub watched: Mutex<Vec<(&'static str, String, Arc<LaneStats>)>>,
}

impl Shared {
    fn watch(&self, lane: (&'static str, String, Arc<LaneStats>)) {
        self.watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(lane);
    }

    /// The per-comm state dump of this rank.
    pub fn dump(&self) -> String {
        let watched = self.watched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        progress::dump_stats(self.epoch, watched.iter().map(|(k, p, s)| (*k, p.as_str(), &**s)))
    }
}

enum Command {
    /// Buffer length, and the connections to listen for (a `--connect rounds` round, or all).
    Listen(u64, Arc<Vec<(usize, usize)>>),
    Connect(Arc<HashMap<HandleKey, NetHandle>>),
    Prepare(Arc<Plan>),
    Fill(u32),
    /// `count` iterations, back to back (one: an iteration alone, after a barrier).
    Run {
        timed: bool,
        count: usize,
    },
    Verify(u32),
    Totals,
    /// Closes every comm, keeping the buffer (`--connect rounds`: the round is done).
    Release,
    Close,
    Exit,
}

enum Reply {
    Handles(Vec<(HandleKey, NetHandle)>),
    Setup(Duration, usize),
    /// Per iteration, its timing, `elapsed` counted from the first iteration's start.
    Timing(Vec<IterationTiming>),
    Wrong(u64),
    Totals(SizeTotals),
    Done,
}

/// The crew's mailbox: one command for all, one reply slot per worker, two barriers per phase.
/// Between them the workers count their replies, so that the calling thread can wait for them
/// with a timeout and look up from the wait (see [`Engine::await_crew`]).
struct Crew {
    barrier: Barrier,
    command: Mutex<Option<Arc<Command>>>,
    replies: Vec<Mutex<Option<Result<Reply, String>>>>,
    replied: Mutex<usize>,
    replied_cv: Condvar,
}

impl Crew {
    /// A worker's reply is in its slot.
    fn replied(&self) {
        *self.replied.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        self.replied_cv.notify_all();
    }
}

/// How often the calling thread, waiting for its workers, asks whether another rank failed.
const PEER_CHECK: Duration = Duration::from_millis(20);

/// The longest a watchdog phase is armed for (a millennium: past any run, with room before an
/// `Instant` overflows).
const WATCHDOG_MAX: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

/// Per-iteration result of this rank.
#[derive(Debug, Clone)]
pub struct RankRun {
    /// Each iteration's time on this rank: from the previous iteration's last completion on the
    /// rank (the start signal, for the first) to its own (the latest over the rank's endpoints).
    /// Their sum is the time from the start signal to the rank's last completion.
    pub times: Vec<Duration>,
    pub delivered: progress::Delivered,
    /// The most distinct peers one endpoint of this rank sent to (received from) at once.
    pub peers_in_flight: (u32, u32),
    /// CPU time of the whole process from the start signal to the last worker's reply.
    pub cpu: crate::cputime::CpuTime,
    /// Wall time of the same window.
    pub window: Duration,
}

/// This rank's connection setup.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetupTiming {
    /// The slowest endpoint's connect/accept phase.
    pub connect: Duration,
    /// The most setup threads an endpoint used.
    pub threads: usize,
}

/// The engine of one rank.
pub struct Engine {
    shared: Arc<Shared>,
    crew: Arc<Crew>,
    threads: Vec<std::thread::JoinHandle<()>>,
    config: EngineConfig,
    watchdog: watchdog::Watchdog,
}

impl Engine {
    /// Starts one worker thread per endpoint of `rank`, each on the NICs and CPUs `places`
    /// gives it (one entry per local endpoint).
    pub fn start(
        plugin: Arc<Plugin>,
        topology: Topology,
        connections: Vec<(usize, usize)>,
        config: EngineConfig,
        rank: usize,
        places: Vec<EndpointPlace>,
    ) -> Result<Engine, String> {
        let shared = Arc::new(Shared {
            topology,
            connections,
            channels: config.channels,
            epoch: Instant::now(),
            abort: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            watched: Mutex::new(Vec::new()),
        });
        let endpoints = shared.topology.endpoints_of(rank);
        if places.len() != endpoints.len() {
            return Err(format!(
                "placement covers {} of {} endpoints",
                places.len(),
                endpoints.len()
            ));
        }
        check_max_comms(&plugin, &shared, endpoints.clone(), &places, config.channels)?;
        let crew = Arc::new(Crew {
            barrier: Barrier::new(endpoints.len() + 1),
            command: Mutex::new(None),
            replies: endpoints.clone().map(|_| Mutex::new(None)).collect(),
            replied: Mutex::new(0),
            replied_cv: Condvar::new(),
        });
        let dumped = shared.clone();
        let watchdog = watchdog::Watchdog::start(move || dumped.dump(), rank);
        let mut threads = Vec::new();
        for (slot, (endpoint, place)) in endpoints.zip(places).enumerate() {
            let lanes = Lanes::of(endpoint, &shared.connections, config.channels);
            let worker = Worker::new(
                endpoint,
                plugin.clone(),
                config.clone(),
                shared.clone(),
                lanes,
                place.net_devs,
            );
            let crew = crew.clone();
            let cpus = place.cpus;
            let thread = std::thread::Builder::new()
                .name(format!("endpoint-{endpoint}"))
                .spawn(move || {
                    // Before anything else: the plugin's and the copier's threads started from here
                    // inherit the binding.
                    if let Some(Err(e)) = cpus.map(|c| c.pin_current_thread()) {
                        eprintln!("tcpx-perf: endpoint {endpoint}: warning: left unpinned: {e}");
                    }
                    backoff::tighten_timer_slack();
                    crew_loop(worker, &crew, slot);
                })
                .map_err(|e| format!("cannot start a worker thread: {e}"))?;
            threads.push(thread);
        }
        Ok(Engine {
            shared,
            crew,
            threads,
            config,
            watchdog,
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Arms the watchdog for a phase: it fires a little after -T so the progress loop's and the
    /// bounded barriers' own, more precise reports (and rank 0's collection of them) win when
    /// they can.
    pub fn phase(&self, name: &str) {
        self.watchdog.arm(name, self.config.timeout + Duration::from_secs(10));
    }

    /// Stops the watchdog while the job ends after a timeout (rank 0 collects every rank's
    /// account, then ends the job).
    pub fn disarm_watchdog(&self) {
        self.watchdog.disarm();
    }

    /// A barrier of every rank, bounded by -T: `name` is what the error says this rank waited in,
    /// with the ranks that had not arrived where this rank can know them (rank 0). A timeout
    /// marks the engine stalled.
    pub fn meet(&self, coll: &dyn Collectives, name: &str) -> Result<(), String> {
        self.phase(name);
        coll.barrier_within(self.config.timeout).map_err(|e| match e {
            crate::collectives::BarrierError::PeerFailed { rank, message } => {
                format!("rank {rank} failed while the others waited in the {name}: {message}")
            }
            crate::collectives::BarrierError::TimedOut { absent } => {
                self.shared.stalled.store(true, Ordering::Relaxed);
                let who = if absent.is_empty() {
                    String::new()
                } else {
                    let ranks: Vec<String> = absent.iter().map(ToString::to_string).collect();
                    format!("; rank(s) {} had not arrived", ranks.join(","))
                };
                format!("waited -T {} s in the {name}{who}", self.config.timeout.as_secs())
            }
        })
    }

    fn broadcast(&self, command: Command) -> Result<Vec<Reply>, String> {
        self.broadcast_watching(command, None)
    }

    /// As [`Engine::broadcast`], for a phase whose workers wait for other ranks: meanwhile
    /// `coll` says whether one of them failed (see [`Engine::await_crew`]).
    fn broadcast_watching(&self, command: Command, coll: Option<&dyn Collectives>) -> Result<Vec<Reply>, String> {
        *self
            .crew
            .command
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(command));
        self.crew.barrier.wait();
        let failed = self.await_crew(coll);
        let replies = self.collect();
        match failed {
            Some(f) => Err(f),
            None => replies,
        }
    }

    /// Waits for every worker's reply, then releases them. With `coll`, every [`PEER_CHECK`] it
    /// asks whether another rank failed (rank 0 learns it from that rank's report): then this
    /// rank's workers stop (the `abort` flag every progress and setup loop reads) instead of
    /// waiting, up to -T, for a peer that is gone, and the phase's error names that rank. mpirun
    /// ends the job soon after; by then rank 0 has written who failed first.
    fn await_crew(&self, coll: Option<&dyn Collectives>) -> Option<String> {
        let workers = self.crew.replies.len();
        let mut failed = None;
        let mut replied = self
            .crew
            .replied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *replied < workers {
            let (guard, waited) = self
                .crew
                .replied_cv
                .wait_timeout(replied, PEER_CHECK)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            replied = guard;
            if !waited.timed_out() || failed.is_some() {
                continue;
            }
            if let Some(f) = coll.and_then(Collectives::peer_failure) {
                self.shared.abort.store(true, Ordering::Relaxed);
                failed = Some(format!("rank {} failed ({}): {}", f.rank, f.phase, f.error));
            }
        }
        *replied = 0;
        drop(replied);
        self.crew.barrier.wait();
        failed
    }

    fn collect(&self) -> Result<Vec<Reply>, String> {
        let mut replies = Vec::with_capacity(self.crew.replies.len());
        let mut errors = Vec::new();
        for slot in &self.crew.replies {
            match slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                Some(Ok(reply)) => replies.push(reply),
                Some(Err(e)) => errors.push(e),
                None => errors.push("a worker gave no reply".into()),
            }
        }
        if errors.is_empty() {
            Ok(replies)
        } else {
            Err(errors.join("; "))
        }
    }

    /// Listens, exchanges handles through `coll`, connects and accepts the comms of
    /// `connections` (every connection of the run, or one `--connect rounds` round's).
    ///
    /// Each handle goes from the rank that listens to the rank that connects, point to point:
    /// memory per rank grows with its own connections, not with the job's.
    pub fn connect(
        &self,
        coll: &dyn Collectives,
        connections: &Arc<Vec<(usize, usize)>>,
        buffer_len: u64,
    ) -> Result<SetupTiming, String> {
        self.phase("listen");
        let replies = self.broadcast(Command::Listen(buffer_len, connections.clone()))?;
        let topo = &self.shared.topology;
        let rank_of = |e: usize| topo.endpoints[e].rank;
        let mut outgoing: BTreeMap<usize, Vec<(HandleKey, NetHandle)>> = BTreeMap::new();
        for reply in replies {
            if let Reply::Handles(handles) = reply {
                for (key, handle) in handles {
                    outgoing.entry(rank_of(key.0)).or_default().push((key, handle));
                }
            }
        }
        let sends: Vec<(usize, Vec<u8>)> = outgoing
            .into_iter()
            .map(|(rank, mut list)| {
                list.sort_unstable_by_key(|(k, _)| *k);
                (rank, list.iter().flat_map(|(_, h)| h.iter().copied()).collect())
            })
            .collect();
        let mut incoming: BTreeMap<usize, Vec<HandleKey>> = BTreeMap::new();
        for e in topo.endpoints_of(coll.rank()) {
            let lanes = Lanes::of(e, connections, self.shared.channels);
            for &peer in &lanes.send_peers {
                for ch in 0..self.shared.channels {
                    incoming.entry(rank_of(peer)).or_default().push((e, peer, ch));
                }
            }
        }
        let size = nccl_net::abi::NET_HANDLE_MAXSIZE;
        let recvs: Vec<(usize, usize)> = incoming
            .iter_mut()
            .map(|(&rank, keys)| {
                keys.sort_unstable();
                (rank, keys.len() * size)
            })
            .collect();
        crate::trace::trace("connect: listening");
        self.phase("handle exchange (MPI)");
        let messages = coll.exchange(&sends, &recvs);
        let mut handles = HashMap::new();
        for (keys, bytes) in incoming.values().zip(&messages) {
            for (key, chunk) in keys.iter().zip(bytes.chunks_exact(size)) {
                handles.insert(*key, chunk.try_into().expect("exact chunk"));
            }
        }
        crate::trace::trace("connect: handles exchanged");
        self.phase("connect/accept");
        let mut timing = SetupTiming::default();
        for reply in self.broadcast_watching(Command::Connect(Arc::new(handles)), Some(coll))? {
            if let Reply::Setup(elapsed, threads) = reply {
                timing.connect = timing.connect.max(elapsed);
                timing.threads = timing.threads.max(threads);
            }
        }
        crate::trace::trace("connect: comms up");
        Ok(timing)
    }

    pub fn prepare(&self, plan: Arc<Plan>) -> Result<(), String> {
        self.phase("prepare");
        self.broadcast(Command::Prepare(plan)).map(drop)
    }

    pub fn fill(&self, iter: u32) -> Result<(), String> {
        self.phase("fill");
        self.broadcast(Command::Fill(iter)).map(drop)
    }

    /// `count` iterations: an MPI barrier, then every worker starts its clock and runs them back
    /// to back, each as soon as its own previous one completed (no barrier between them: the
    /// pace nccl-tests times). One iteration is today's per-iteration timing. Returns this
    /// rank's time of each (see [`RankRun::times`]) and the bytes received.
    pub fn run(&self, coll: &dyn Collectives, timed: bool, count: usize) -> Result<RankRun, String> {
        self.meet(coll, "barrier before iteration")?;
        // Back to back, the phase spans `count` iterations: each still has -T to complete (the
        // workers' own deadline), the watchdog the sum.
        let per_iteration = self.config.timeout + Duration::from_secs(10);
        let iterations = u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        self.watchdog
            .arm("iteration", per_iteration.saturating_mul(iterations).min(WATCHDOG_MAX));
        *self
            .crew
            .command
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(Command::Run { timed, count }));
        let (cpu0, t0) = (crate::cputime::CpuTime::now(), Instant::now());
        self.crew.barrier.wait();
        let failed = self.await_crew(Some(coll));
        let replies = self.collect();
        if let Some(failed) = failed {
            return Err(failed);
        }
        let mut ends = vec![Duration::ZERO; count];
        let mut result = RankRun {
            times: Vec::with_capacity(count),
            delivered: progress::Delivered::default(),
            peers_in_flight: (0, 0),
            cpu: crate::cputime::CpuTime::now().since(cpu0),
            window: t0.elapsed(),
        };
        for reply in replies? {
            if let Reply::Timing(timings) = reply {
                for (end, t) in ends.iter_mut().zip(&timings) {
                    *end = (*end).max(t.elapsed);
                    result.delivered.add(&t.delivered);
                    result.peers_in_flight.0 = result.peers_in_flight.0.max(t.peers_in_flight.0);
                    result.peers_in_flight.1 = result.peers_in_flight.1.max(t.peers_in_flight.1);
                }
            }
        }
        let mut before = Duration::ZERO;
        for end in ends {
            // A later iteration's end on the rank is never before an earlier one's: each
            // endpoint's iterations follow one another.
            result.times.push(end.saturating_sub(before));
            before = before.max(end);
        }
        Ok(result)
    }

    pub fn verify(&self, iter: u32) -> Result<u64, String> {
        self.phase("verify");
        let mut wrong = 0;
        for reply in self.broadcast(Command::Verify(iter))? {
            if let Reply::Wrong(w) = reply {
                wrong += w;
            }
        }
        Ok(wrong)
    }

    pub fn totals(&self) -> Result<Vec<SizeTotals>, String> {
        self.phase("totals");
        Ok(self
            .broadcast(Command::Totals)?
            .into_iter()
            .filter_map(|r| if let Reply::Totals(t) = r { Some(t) } else { None })
            .collect())
    }

    /// Every worker deregisters and closes its comms (send, receive and listen) and keeps its
    /// buffer: a `--connect rounds` round is over. The stall dump forgets them.
    pub fn release(&self) -> Result<(), String> {
        self.phase("close the round's comms");
        self.broadcast(Command::Release)?;
        self.shared
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        Ok(())
    }

    /// End-of-run barrier, then every worker deregisters and closes its comms.
    pub fn close(mut self, coll: &dyn Collectives) -> Result<(), String> {
        self.phase("barrier before close");
        coll.barrier();
        self.phase("close");
        let closed = self.broadcast(Command::Close).map(drop);
        self.shutdown();
        self.watchdog.disarm();
        closed
    }

    fn shutdown(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        self.shared.abort.store(true, Ordering::Relaxed);
        *self
            .crew
            .command
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(Command::Exit));
        self.crew.barrier.wait();
        self.await_crew(None);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Workers only wait on the crew barrier between phases, so they can always be released.
        self.shutdown();
    }
}

/// The plugin's `maxComms` per device against the send and receive comms this rank opens there.
fn check_max_comms(
    plugin: &Plugin,
    shared: &Shared,
    endpoints: std::ops::Range<usize>,
    places: &[EndpointPlace],
    channels: usize,
) -> Result<(), String> {
    let mut per_device: BTreeMap<usize, usize> = BTreeMap::new();
    for (endpoint, place) in endpoints.zip(places) {
        let lanes = Lanes::of(endpoint, &shared.connections, channels);
        for &dev in &place.net_devs {
            *per_device.entry(dev).or_default() += lanes.send_peers.len() + lanes.recv_peers.len();
        }
    }
    for (dev, needed) in per_device {
        let props = plugin.properties(dev).map_err(|e| e.to_string())?;
        crate::contracts::check_comms(needed, dev, &props, channels)?;
    }
    Ok(())
}

fn crew_loop(mut worker: Worker, crew: &Crew, slot: usize) {
    loop {
        crew.barrier.wait();
        let command = crew
            .command
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .expect("a command was posted");
        let exit = matches!(*command, Command::Exit);
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(&mut worker, &command)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(std::string::ToString::to_string))
                    .unwrap_or_default();
                Err(format!("worker for endpoint {} panicked: {what}", worker.endpoint))
            });
        if reply.is_err() {
            // Release this rank's other workers from their progress loops.
            worker.abort_rank();
        }
        *crew.replies[slot]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reply);
        crew.replied();
        crew.barrier.wait();
        if exit {
            worker.close();
            return;
        }
    }
}

fn execute(worker: &mut Worker, command: &Command) -> Result<Reply, String> {
    match command {
        Command::Listen(len, connections) => worker.listen(*len, connections).map(Reply::Handles),
        Command::Connect(handles) => worker
            .connect(handles)
            .map(|(elapsed, threads)| Reply::Setup(elapsed, threads)),
        Command::Prepare(plan) => {
            worker.prepare(plan.clone());
            Ok(Reply::Done)
        }
        Command::Fill(iter) => worker.fill(*iter).map(|()| Reply::Done),
        Command::Run { timed, count } => {
            // The clock starts when this worker leaves the barrier that followed the MPI barrier;
            // each later iteration starts when this worker's previous one completed.
            let first = Instant::now();
            (0..*count)
                .try_fold(Vec::with_capacity(*count), |mut timings, _| {
                    let start = first + timings.last().map_or(Duration::ZERO, |t: &IterationTiming| t.elapsed);
                    let mut t = worker.run(start, *timed)?;
                    t.elapsed += start - first;
                    timings.push(t);
                    Ok(timings)
                })
                .map(Reply::Timing)
                .map_err(|e| match e {
                    IterationError::Stalled(dump) => {
                        worker.mark_stalled();
                        // One line names the endpoint, its node, the comms (peer and NIC)
                        // it waits on and any of its NICs whose link is down; the dump follows.
                        let (first, rest) = dump.trim_end().split_once('\n').unwrap_or((dump.trim_end(), ""));
                        let dead = worker.dead_nics();
                        let dead = if dead.is_empty() {
                            String::new()
                        } else {
                            format!("; {}", dead.join(", "))
                        };
                        format!(
                            "endpoint {} ({}) stalled: {first}{dead}\n{rest}",
                            worker.endpoint,
                            worker.own_label(),
                        )
                    }
                    other => format!("endpoint {}: {other}", worker.endpoint),
                })
        }
        Command::Verify(iter) => worker.verify(*iter).map(Reply::Wrong),
        Command::Totals => Ok(Reply::Totals(worker.totals())),
        Command::Release => {
            worker.release();
            Ok(Reply::Done)
        }
        Command::Close => {
            worker.close();
            Ok(Reply::Done)
        }
        Command::Exit => Ok(Reply::Done),
    }
}
