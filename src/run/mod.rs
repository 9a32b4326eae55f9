//! One benchmark run, from parsed flags to the result directory.
//!
//! The flags become typed [`settings`] at the door; then named phases hand typed values to each
//! other: [`plan_job`] (MPI's topology and the plan of every size, identical on every rank),
//! [`vet::vet_plugin`] (the plugin, its limits and the memory path), [`place::place`] (NICs,
//! CPUs, preflight, the check that all ranks agree; `--dry-run` ends here), [`connect::connect`]
//! (workers and comms, the NCCL baseline's communicators), [`sweep::sweep`] (every size, with a
//! hook after each), [`second_pass::run`] (suspects the sweep could not tell from their partners,
//! re-tested against healthy nodes) and [`finish::finish`] (the run's CPU cost, the footers and the files).
//! Errors that every rank hits identically (a plan that cannot work) are printed once by rank 0;
//! errors of one rank (a plugin that fails to load there) are printed by that rank, which then
//! ends the whole job so that no other rank waits for it.

use crate::cli::Cli;
use crate::collectives::Collectives;
use crate::contracts;
use crate::cputime::CpuTime;
use crate::engine::watchdog::{self, Watchdog};
use crate::mpi_boot::Mpi;
use crate::plan::{Holder, Plan, Scope};
use crate::report;
use crate::topology::Topology;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

mod connect;
mod finish;
mod links;
mod measure;
mod place;
mod plan_mode;
mod probe;
mod record;
/// The probe's rounds of node pairs ([`probe::matchings`]), for the verdicts' tests.
pub use probe::matchings as probe_matchings;
pub(crate) mod settings;
mod simulate;
mod stopped;
mod sweep;
mod vet;
pub use plan_mode::plan;
use settings::Settings;

/// Exit statuses (documented in the README and `--help`).
pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_WRONG_DATA: i32 = 2;
pub const EXIT_TIMEOUT: i32 = watchdog::EXIT_TIMEOUT;
/// The average busbw is below 90% of `NCCL_TESTS_MIN_BW` (nccl-tests' `testNumResults`, which its
/// `main` returns as the exit status).
pub const EXIT_MIN_BW: i32 = 7;
/// A node is bad (the node verdicts, [`crate::verdict`]); the results are complete and right.
pub const EXIT_BAD_NODE: i32 = 5;
/// A flag or value tcpx-perf does not accept (`EX_USAGE` of sysexits.h).
pub const EXIT_USAGE: i32 = 64;

pub use crate::mpi_boot::{launched, launcher_rank};

/// The built-in plugin: tcpx-emu as GPUDirect-TCPX presents itself (only `ncclNetPlugin_v7`
/// exported, so nothing can pick a newer table), by NCCL's file name and by cargo's. The build
/// with every table (v7..v12) is `--plugin tcpxemu`.
pub const EMU_PLUGIN_FILES: [&str; 2] = ["libnccl-net-tcpxemu-v7.so", "libnccl_net_tcpxemu_v7.so"];

pub(crate) enum Fatal {
    /// The flags are invalid (the same on every rank): rank 0 says so once, all exit with
    /// [`EXIT_USAGE`].
    Usage(String),
    /// Every rank reached the same conclusion: rank 0 says it once, all exit.
    Everywhere(String),
    /// Only this rank knows: it says so and ends the job.
    Here(String),
    /// This rank's progress stopped before the -T deadline: ends the job with EXIT_TIMEOUT.
    Stalled(String),
    /// Already reported by `rank`, the lowest that failed (see [`agree`]); every rank exits.
    Reported { rank: usize, error: String },
    /// A timeout, already reported (rank 0 wrote the diagnosis): ends the job with EXIT_TIMEOUT.
    TimedOut,
}

impl Fatal {
    /// What this rank says of its failure, if it has words of its own.
    fn message(&self) -> Option<&str> {
        match self {
            Fatal::Here(m) | Fatal::Everywhere(m) | Fatal::Stalled(m) => Some(m),
            Fatal::Reported { error, .. } => Some(error),
            Fatal::Usage(_) | Fatal::TimedOut => None,
        }
    }

    /// A stall's message with the size it happened at.
    fn at_size(self, size: u64) -> Fatal {
        self.within(&format!("size {size}"))
    }

    /// A stall's or this rank's error with where it happened (`probe round 2`).
    fn within(self, place: &str) -> Fatal {
        match self {
            Fatal::Stalled(m) => Fatal::Stalled(format!("{place}: {m}")),
            Fatal::Here(m) => Fatal::Here(format!("{place}: {m}")),
            other => other,
        }
    }
}

/// Runs the benchmark; returns the process exit status.
pub fn run(cli: Cli) -> i32 {
    // Before MPI starts threads (the environment is process-wide): the built-in tcpx-emu behaves
    // as TCPX, which moves no data without NCCL_DYNAMIC_CHUNK_SIZE; give it GKE's value.
    let mut notes = Vec::new();
    if cli.plugin.is_none() && std::env::var_os(contracts::DYNAMIC_CHUNK_ENV).is_none() {
        std::env::set_var(contracts::DYNAMIC_CHUNK_ENV, contracts::DYNAMIC_CHUNK_DEFAULT);
        notes.push(format!(
            "{}={} set for the built-in tcpx-emu (GKE's value for TCPX; it was unset)",
            contracts::DYNAMIC_CHUNK_ENV,
            contracts::DYNAMIC_CHUNK_DEFAULT
        ));
    }
    crate::trace::trace("start");
    let mpi = match Mpi::init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("tcpx-perf: error: {e}");
            return EXIT_ERROR;
        }
    };
    crate::trace::trace("MPI initialised");
    let phase = Cell::new(PHASES[0]);
    let outcome = run_with(&cli, &mpi, notes, &phase);
    if let Err(fatal) = &outcome {
        // A signal is ending the job: this rank's error goes to rank 0 as what it saw (it
        // names the peer it blames), and the signal thread ends the process.
        mpi.hold_if_ending(fatal.message().map(|m| (phase.get(), m)));
    }
    report_plugin_repeats(mpi.rank());
    let code = match outcome {
        Ok(code) => code,
        Err(Fatal::Usage(msg)) => {
            if mpi.rank() == 0 {
                eprintln!("tcpx-perf: usage error: {msg}");
            }
            exit_together(&mpi, EXIT_USAGE)
        }
        Err(Fatal::Everywhere(msg)) => {
            if mpi.rank() == 0 {
                eprintln!("tcpx-perf: error: {msg}");
            }
            exit_together(&mpi, EXIT_ERROR)
        }
        Err(Fatal::Here(msg)) => {
            eprintln!("tcpx-perf: rank {}: error: {msg}", mpi.rank());
            use std::io::Write;
            let _ = std::io::stderr().flush();
            if mpi.rank() != 0 {
                // Rank 0, if it waits at a barrier, names this rank in the results first.
                mpi.report_failure(phase.get(), msg.lines().next().unwrap_or(&msg));
            }
            // mpirun forwards the line only if the abort does not overtake it.
            std::thread::sleep(std::time::Duration::from_millis(if mpi.rank() == 0 {
                200
            } else {
                500
            }));
            // mpirun's SIGTERM came meanwhile: rank 0's last words are being written, and an
            // abort now would kill it mid-record; the signal thread ends this process instead.
            mpi.hold_if_ending(None);
            mpi.abort(EXIT_ERROR)
        }
        Err(Fatal::Stalled(msg)) => {
            eprintln!("tcpx-perf: rank {}: timeout: {msg}", mpi.rank());
            mpi.abort(EXIT_TIMEOUT)
        }
        Err(Fatal::Reported { .. }) => exit_together(&mpi, EXIT_ERROR),
        Err(Fatal::TimedOut) => mpi.abort(EXIT_TIMEOUT),
    };
    drop(mpi);
    linger_after_finalize();
    code
}

/// After `MPI_Finalize`, a moment before the process exits. Open MPI 4's daemon learns that a
/// rank finalized in one event and that it exited in another; when the exit is handled first
/// it reports the rank as "exiting improperly" (`PID 0`) and mpirun exits 1 for a run that
/// ended well (open-mpi/ompi#7833, not fixed in 4.x). With 512 ranks on one host's daemon that
/// happened in 2 of 3 runs of 64 x 8 x 4 (docs/runs/h200-20261201-issue51); the daemon works
/// through its ranks' finalize events in turn, so the wait grows with the ranks on this host:
/// 50 ms + 2 ms a local rank, at most 2 s.
fn linger_after_finalize() {
    let local: u64 = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if launched() {
        std::thread::sleep(std::time::Duration::from_millis((50 + 2 * local).min(2000)));
    }
}

/// For errors every rank reached together: no rank leaves before the one that explains the error
/// has printed it (mpirun ends the job at the first non-zero exit, cutting off what others had
/// still to say).
fn exit_together(mpi: &Mpi, code: i32) -> i32 {
    use std::io::Write;
    let _ = std::io::stderr().flush();
    mpi.barrier();
    code
}

/// The plugin log lines this rank held back as repeats, with their counts.
fn report_plugin_repeats(rank: usize) {
    for line in nccl_net::logger::suppressed_summary() {
        eprintln!("tcpx-perf: rank {rank}: plugin log repeated: {line}");
    }
}

/// Setup steps every rank runs at the same point: when any rank fails, all learn it and its
/// error (rank 0 records it), the lowest failing rank says why (once), and every rank exits
/// normally instead of aborting.
fn agree<T>(mpi: &Mpi, local: Result<T, String>) -> Result<T, Fatal> {
    // A failure is its first line after a mark (an error may be empty).
    let mine = local
        .as_ref()
        .err()
        .map_or(String::new(), |e| format!("!{}", e.lines().next().unwrap_or(e)));
    let all = mpi.gather_strings(&mine);
    let Some(first) = all.iter().position(|f| !f.is_empty()) else {
        return local.map_err(Fatal::Here);
    };
    let count = all.iter().filter(|f| !f.is_empty()).count();
    if let Err(msg) = &local {
        if mpi.rank() == first {
            let others = if count > 1 {
                format!(" (and {} more rank(s))", count - 1)
            } else {
                String::new()
            };
            eprintln!("tcpx-perf: rank {first}{others}: error: {msg}");
        }
    }
    Err(Fatal::Reported {
        rank: first,
        error: all[first][1..].to_string(),
    })
}

/// The run's phases, as a failure names them: `setup` (flags, topology, plugin, placement),
/// `connect` (workers, every comm, the baseline's communicators), `sweep` (every size), `probe`
/// (the node verdicts' rounds of node pairs), `close` (the baseline and the engine closed, the
/// run's CPU cost, the files).
const PHASES: [&str; 5] = ["setup", "connect", "sweep", "probe", "close"];

/// The job every phase works on: MPI's topology and the plan of every size.
struct Job {
    topo: Topology,
    scope: Scope,
    /// Plans in size order, each holding this rank's flows (and the job's totals).
    plans: Vec<Arc<Plan>>,
    /// Sizes smaller than one byte per endpoint, left out.
    skipped: Vec<u64>,
    /// `(sender endpoint, receiver endpoint)` of every connection of this rank's endpoints
    /// (the first plan's).
    connections: Vec<(usize, usize)>,
    /// The largest buffer any plan needs.
    buffer_len: u64,
    /// Connects each endpoint has under way at once (`--connects-in-flight`).
    connects_in_flight: usize,
    /// The nodes whose ranks run on this rank's kernel (one boot id), its own included: more
    /// than one on the rig, whose namespaces share the host's pids and memory.
    kernel_nodes: Vec<usize>,
    /// Which ranks share a kernel's monotonic clock (the pair figures' clock).
    clocks: measure::Clocks,
}

fn run_with(cli: &Cli, mpi: &Mpi, mut notes: Vec<String>, phase: &Cell<&'static str>) -> Result<i32, Fatal> {
    let run_start = (CpuTime::now(), Instant::now());
    // From the first collective on, every wait is bounded: setup (flags, topology, plugin) has
    // -T too; the engine arms its own watchdog per phase.
    let setup = Watchdog::start(|| "  (no comms yet)".to_string(), mpi.rank());
    setup.arm("setup (flags, topology, plugin)", settings::timeout_of(cli.timeout));
    agree_on_flags(mpi)?;
    crate::trace::trace("flags agreed");
    // Every rank now has the same flags, so rank 0 alone reports what is wrong with them.
    let settings = Settings::from_cli(cli).map_err(Fatal::Usage)?;
    notes.extend(settings.nccl_tests_notes());
    let start_time = report::now_rfc3339();
    let job = plan_job(&settings, mpi)?;
    crate::trace::trace("job planned");
    crate::trace::memory("the plans");
    let vetted = vet::vet_plugin(&settings, mpi, &job, &mut notes)?;
    crate::trace::trace("plugin vetted");
    let placed = match place::place(&settings, mpi, &job, &vetted, notes, start_time)? {
        place::Placed::DryRun(code) => return Ok(code),
        place::Placed::Ready(ready) => *ready,
    };
    crate::trace::trace("placed");
    finish::announce(&settings, mpi, &job, &placed.info)?;
    crate::trace::trace("header printed");
    let record = record::Record::new(&settings, mpi, &job, &placed.info);
    setup.disarm();
    let vet::Vetted { probe, resources, .. } = vetted;
    // From here every failure leaves summary.json (complete: false) naming the first failure.
    let measured = (|| {
        phase.set(PHASES[1]);
        record.set_phase(PHASES[1]);
        let (mut connected, info) = connect::connect(&settings, mpi, &job, resources, placed)?;
        record.set_info(&info);
        connected.links.on_connect(record.rounds_hook());
        crate::trace::trace("first comms connected");
        crate::trace::memory("the first connect");
        phase.set(PHASES[2]);
        record.set_phase(PHASES[2]);
        let mut swept = sweep::sweep(&settings, mpi, &job, &probe, &mut connected, &mut |_, r| {
            crate::link_check::mark(&info.placement.rows, r);
            record.add(r).map_err(Fatal::Here)
        });
        let mut info = info;
        if swept.failure.is_none() {
            phase.set(PHASES[3]);
            record.set_phase(PHASES[3]);
            match probe::run(&settings, mpi, &job, &probe, &mut connected, &info.placement.rows) {
                Ok(p) => info.probe = Some(p),
                Err(e) => swept.failure = Some(e),
            }
        }
        finish::finish(&settings, mpi, &job, connected, swept, info, run_start, &record, phase)
    })();
    measured.map_err(|fatal| record.fail(mpi, phase.get(), fatal))
}

/// Every rank's flags must mean the same before any check made from them: a rank that disagrees
/// would otherwise wait in a collective the others never reach.
fn agree_on_flags(mpi: &Mpi) -> Result<(), Fatal> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let all = mpi.gather_strings(&argv.join("\u{1f}"));
    let argvs: Vec<Vec<String>> = all
        .iter()
        .map(|a| {
            if a.is_empty() {
                Vec::new()
            } else {
                a.split('\u{1f}').map(String::from).collect()
            }
        })
        .collect();
    match Cli::disagreement(&argvs) {
        Some(msg) => Err(Fatal::Usage(msg)),
        None => Ok(()),
    }
}

/// The topology and the plan of every size as this rank holds it: its endpoints' flows (its
/// share of the job: memory and time in proportion to them), the job's totals alike on every rank.
fn plan_job(settings: &Settings, mpi: &Mpi) -> Result<Job, Fatal> {
    let topo = mpi
        .topology(settings.job.endpoints_per_rank, settings.job.ranks_per_node)
        .map_err(Fatal::Everywhere)?;
    let holder = Holder::Endpoints(topo.endpoints_of(mpi.rank()));
    let (plans, skipped) = settings.sweep.plans(&topo, &holder).map_err(Fatal::Everywhere)?;
    let connections = plans[0].connections();
    // Every plan's buffer, and the probe's two blocks of its size as asked.
    let buffer_len = plans
        .iter()
        .flat_map(|p| p.buffer_len.iter().copied())
        .chain([2 * probe::probe_size(&plans)])
        .max()
        .unwrap_or(0);
    // Every thread of every process on this kernel takes one of its pids: the ranks that share
    // it (one boot id) share the connects' threads, and the preflight checks their nodes' sums.
    let boot_id = crate::topology::boot_id().unwrap_or_default();
    let boot_ids = mpi.gather_strings(&boot_id);
    let on_this_kernel: Vec<usize> = (0..boot_ids.len()).filter(|&r| boot_ids[r] == boot_id).collect();
    let connects_in_flight = settings.transport.connects_in_flight.unwrap_or_else(|| {
        let pid_max = crate::placement::resources::limits::Limits::read().pid_max;
        crate::engine::setup::connects_in_flight(pid_max, on_this_kernel.len() * topo.gpus_per_rank)
    });
    let node_of = |r: usize| topo.endpoints[topo.endpoints_of(r).start].node;
    let mut kernel_nodes: Vec<usize> = if boot_id.is_empty() {
        // No boot id to tell kernels apart: this rank's node alone, as before.
        vec![node_of(mpi.rank())]
    } else {
        on_this_kernel.iter().map(|&r| node_of(r)).collect()
    };
    kernel_nodes.sort_unstable();
    kernel_nodes.dedup();
    Ok(Job {
        connects_in_flight,
        kernel_nodes,
        clocks: measure::Clocks::from_boot_ids(&boot_ids),
        scope: settings.sweep.scope_on(topo.nodes),
        topo,
        plans,
        skipped,
        connections,
        buffer_len,
    })
}
