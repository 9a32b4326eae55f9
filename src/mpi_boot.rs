//! MPI at the edge: start-up, node discovery, the collectives the engine needs, and the check
//! that every rank runs the same plan.
//!
//! Plugin handles travel over these collectives: no TCP bootstrap, no ports, no IP addresses.
//! Only the main thread calls MPI (`MPI_THREAD_FUNNELED`).

use crate::collectives::{Collectives, PeerFailure};
use crate::topology::Topology;
use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Destination, Equivalence, Root, Source};

mod arrivals;
use arrivals::Arrivals;
pub use arrivals::{drained_since, TimeoutReports};

/// The MPI world of this process. Fields drop in order: the arrivals' communicator and requests
/// before MPI is finalised with the universe.
pub struct Mpi {
    arrivals: Arrivals,
    world: SimpleCommunicator,
    _universe: Universe,
}

/// Where a launcher announces the rank (Open MPI, PMIx, PMI, Slurm).
const LAUNCHER_RANK_VARS: [&str; 4] = ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"];

/// Whether a launcher started this process (it announced a rank).
pub fn launched() -> bool {
    LAUNCHER_RANK_VARS.iter().any(|v| std::env::var_os(v).is_some())
}

/// This process's rank as the launcher announces it, before MPI starts (Open MPI, PMIx, PMI,
/// Slurm); 0 for a process started without a launcher.
pub fn launcher_rank() -> usize {
    LAUNCHER_RANK_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
        .unwrap_or(0)
}

impl Mpi {
    /// Initialises MPI. Fails with a clear message when the library cannot give the threading
    /// level the engine needs.
    pub fn init() -> Result<Mpi, String> {
        if let Some(e) = srun_without_pmi(|v| std::env::var_os(v).is_some()) {
            return Err(e);
        }
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or("MPI is already initialised or failed to initialise")?;
        if level < mpi::Threading::Funneled {
            return Err(format!(
                "the MPI library only provides {level:?} threading; tcpx-perf needs MPI_THREAD_FUNNELED"
            ));
        }
        let world = universe.world();
        Ok(Mpi {
            arrivals: Arrivals::new(&world),
            world,
            _universe: universe,
        })
    }

    /// The MPI library's version string (first line), for provenance.
    pub fn library_version() -> String {
        mpi::environment::library_version().map_or_else(
            |_| "unknown".into(),
            |v| {
                v.lines()
                    .next()
                    .unwrap_or("")
                    .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                    .to_string()
            },
        )
    }

    /// Groups ranks into nodes by host identity ([`crate::topology::host_identity`]: the host
    /// name and boot id, or `NCCL_HOSTID`), or `ranks_per_node` consecutive ranks, and gathers
    /// every rank's host name.
    pub fn topology(&self, gpus_per_rank: usize, ranks_per_node: Option<usize>) -> Result<Topology, String> {
        let ranks = self.world.size() as usize;
        let hostname = mpi::environment::processor_name().unwrap_or_else(|_| "unknown".into());
        let hostnames = self.gather_strings(&hostname);
        if let Some(k) = ranks_per_node {
            if k == 0 || !ranks.is_multiple_of(k) {
                return Err(format!(
                    "--ranks-per-node {k} does not divide the {ranks} ranks of the job; pick a divisor of {ranks}"
                ));
            }
            return Ok(Topology::with_ranks_per_node(ranks, k, gpus_per_rank, hostnames));
        }
        // Nodes are host identities, as NCCL groups ranks: a shared-memory split would put ranks
        // of one machine on one node even where each has its own host (a container or a network
        // namespace with its own host name, as launch/cluster.sh makes).
        let identities = self.gather_strings(&crate::topology::this_host_identity(&hostname));
        Ok(Topology::by_host_identity(&identities, gpus_per_rank, hostnames))
    }

    /// Every rank's string, in rank order (any length: lengths first, then the bytes).
    pub fn gather_strings(&self, mine: &str) -> Vec<String> {
        let ranks = self.world.size() as usize;
        let mut lens = vec![0u64; ranks];
        lens[self.world.rank() as usize] = mine.len() as u64;
        self.all_reduce_in_place(&mut lens, SystemOperation::sum());
        let width = lens.iter().copied().max().unwrap_or(0) as usize;
        let mut fixed = vec![0u8; width];
        fixed[..mine.len()].copy_from_slice(mine.as_bytes());
        let mut all = vec![0u8; width * ranks];
        if width > 0 {
            mpi::request::scope(|scope| {
                self.arrivals
                    .wait(self.world.immediate_all_gather_into(scope, &fixed[..], &mut all[..]));
            });
        }
        (0..ranks)
            .map(|r| String::from_utf8_lossy(&all[r * width..r * width + lens[r] as usize]).into_owned())
            .collect()
    }

    /// Checks that every rank runs the same plan. `fields` are (name, canonical value) pairs; the
    /// first field whose hash differs from rank 0's is reported with the ranks that differ.
    pub fn check_same_plan(&self, fields: &[(&str, String)]) -> Result<(), String> {
        let mine: Vec<u64> = fields.iter().map(|(_, v)| fnv1a(v.as_bytes())).collect();
        let ranks = self.world.size() as usize;
        let mut all = vec![0u64; mine.len() * ranks];
        self.world.all_gather_into(&mine[..], &mut all[..]);
        for (i, (name, value)) in fields.iter().enumerate() {
            let reference = all[i];
            let differing: Vec<String> = (0..ranks)
                .filter(|r| all[r * mine.len() + i] != reference)
                .map(|r| r.to_string())
                .collect();
            if !differing.is_empty() {
                let here = if mine[i] == reference { "" } else { " (this rank has " };
                let detail = if here.is_empty() {
                    String::new()
                } else {
                    format!("{here}{value})")
                };
                return Err(format!(
                    "plan mismatch: '{name}' differs between rank 0 and rank(s) {}{detail}; run every rank with the same command line, plugin and environment",
                    differing.join(",")
                ));
            }
        }
        Ok(())
    }
}

impl Mpi {
    /// Sends this rank's one-line account of its timeout to rank 0 (a no-op on rank 0).
    pub fn report_timeout(&self, message: &str) {
        self.arrivals.report(message);
    }

    /// Sends rank 0 this rank's error and the phase it failed in, so that rank 0, waiting in a
    /// barrier, a collective or for its workers, names this rank in the results before the job
    /// ends (a no-op on rank 0).
    pub fn report_failure(&self, phase: &str, error: &str) {
        self.arrivals.report_failure(phase, error);
    }

    /// Rank 0: the first error another rank reported, if one did.
    pub fn reported_failure(&self) -> Option<PeerFailure> {
        self.arrivals.reported_failure()
    }

    /// Rank 0: `f` runs, on the main thread, as soon as an error of another rank is taken,
    /// wherever rank 0 waits (every wait of this module takes the reports).
    pub fn on_peer_failure(&self, f: impl Fn(&PeerFailure) + 'static) {
        self.arrivals.on_failure(Box::new(f));
    }

    /// Rank 0: `f(rank)` runs, on the main thread, when another rank says that it is alive and
    /// ending on the launcher's signal.
    pub fn on_peer_ending(&self, f: impl Fn(usize) + 'static) {
        self.arrivals.on_ending(Box::new(f));
    }

    /// If a signal is ending this process, never returns. Other ranks tell rank 0 they are
    /// ending (their phase and error with it, if `failed`) and wait for the signal thread to end
    /// the process; rank 0 keeps taking their reports for its signal thread, which names a rank
    /// that could not answer.
    pub fn hold_if_ending(&self, failed: Option<(&str, &str)>) {
        self.arrivals.hold_if_ending(failed);
    }

    /// Rank 0: `f(rank, signal, sender)` runs, on the main thread, when another rank reports
    /// that a process other than its launcher signalled it (wherever rank 0 waits).
    pub fn on_peer_signalled(&self, f: impl Fn(usize, &str, &str) + 'static) {
        self.arrivals.on_signalled(Box::new(f));
    }

    /// Other ranks: tells rank 0 who signalled this rank, if a process other than the launcher
    /// did (once; a no-op otherwise). Call before [`crate::signals::hold_if_ending`] parks the
    /// main thread: the waits of this module call it too.
    pub fn tell_if_signalled(&self) {
        self.arrivals.tell_if_signalled();
    }

    /// Rank 0, after its own timeout: every other rank's account, waiting up to `grace` for them,
    /// and the ranks that had not arrived where rank 0 last waited.
    pub fn timeout_reports(&self, grace: std::time::Duration) -> TimeoutReports {
        self.arrivals.reports(grace)
    }
}

impl Mpi {
    /// Every rank's `mine` on rank 0 (in rank order); None on the other ranks. Setup only.
    pub fn gather_to_root(&self, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
        let root = self.world.process_at_rank(0);
        let len = mine.len() as mpi::Count;
        if self.world.rank() != 0 {
            root.gather_into(&len);
            root.gather_varcount_into(mine);
            return None;
        }
        let mut counts = vec![0 as mpi::Count; self.world.size() as usize];
        root.gather_into_root(&len, &mut counts[..]);
        let displs = displacements(&counts);
        let mut all = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
        {
            let mut partition = mpi::datatype::PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(mine, &mut partition);
        }
        Some(
            displs
                .iter()
                .zip(&counts)
                .map(|(&d, &c)| all[d as usize..(d + c) as usize].to_vec())
                .collect(),
        )
    }
}

impl Mpi {
    /// `buf` <- reduction of every rank's `buf` (setup and per-size reductions, not the hot path).
    /// Allreduce. A long buffer (a size's per-flow time sums: 4 MB at 512 endpoints) goes as a
    /// reduce to rank 0 and a broadcast back: Open MPI's allreduce takes a ring for long
    /// messages, 2 x (ranks - 1) steps one after another, each waiting for the next rank to be
    /// scheduled, which 512 ranks on 32 cores took minutes over; a tree takes log2(ranks).
    fn all_reduce_in_place<T: Equivalence + Copy>(&self, buf: &mut [T], op: SystemOperation) {
        let send = buf.to_vec();
        if std::mem::size_of_val(buf) <= LONG_REDUCTION {
            mpi::request::scope(|scope| {
                self.arrivals
                    .wait(self.world.immediate_all_reduce_into(scope, &send[..], buf, op));
            });
            return;
        }
        let root = self.world.process_at_rank(0);
        mpi::request::scope(|scope| {
            if self.world.rank() == 0 {
                self.arrivals
                    .wait(root.immediate_reduce_into_root(scope, &send[..], &mut *buf, op));
            } else {
                self.arrivals.wait(root.immediate_reduce_into(scope, &send[..], op));
            }
        });
        mpi::request::scope(|scope| {
            self.arrivals.wait(root.immediate_broadcast_into(scope, &mut *buf));
        });
    }
}

/// Bytes past which an allreduce is a reduce and a broadcast ([`Mpi::all_reduce_in_place`]).
const LONG_REDUCTION: usize = 64 << 10;

/// A task that `srun` started without an MPI plugin (`--mpi=none`, Slurm's default `MpiDefault`)
/// has no process-management server to join: Open MPI then aborts in `MPI_Init` with a page
/// that blames Slurm's build. Said instead, before MPI starts, as the launch line to fix.
/// `set(name)`: whether the environment variable is set. A step's task has `SLURM_STEP_ID`;
/// PMIx sets `PMIX_RANK`, PMI-2 `PMI_RANK`, and ranks under `mpirun` (also inside a Slurm job)
/// have `OMPI_COMM_WORLD_RANK`.
fn srun_without_pmi(set: impl Fn(&str) -> bool) -> Option<String> {
    let wired = ["PMIX_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"].iter().any(|v| set(v));
    (set("SLURM_STEP_ID") && !wired).then(|| {
        "srun started this task without an MPI plugin, so its ranks cannot find each other: \
         run srun --mpi=pmix (or set MpiDefault=pmix in slurm.conf)"
            .to_string()
    })
}

/// FNV-1a: a stable 64-bit hash (the same on every rank and build, unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Collectives for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn barrier(&self) {
        self.arrivals.wait(self.world.immediate_barrier());
    }

    fn barrier_within(&self, limit: std::time::Duration) -> Result<(), crate::collectives::BarrierError> {
        self.arrivals.barrier_within(&self.world, limit)
    }

    fn or_bytes(&self, buf: &mut [u8]) {
        self.all_reduce_in_place(buf, SystemOperation::bitwise_or());
    }

    fn sum_u64(&self, buf: &mut [u64]) {
        self.all_reduce_in_place(buf, SystemOperation::sum());
    }

    fn sum_f64(&self, buf: &mut [f64]) {
        self.all_reduce_in_place(buf, SystemOperation::sum());
    }

    fn gather_f64(&self, local: &[f64]) -> Vec<f64> {
        let mut all = vec![0.0; local.len() * self.size()];
        mpi::request::scope(|scope| {
            self.arrivals
                .wait(self.world.immediate_all_gather_into(scope, local, &mut all[..]));
        });
        all
    }

    fn gather_f64_to_root(&self, local: &[f64]) -> Option<Vec<Vec<f64>>> {
        let root = self.world.process_at_rank(0);
        let len = local.len() as mpi::Count;
        if self.world.rank() != 0 {
            mpi::request::scope(|scope| {
                self.arrivals.wait(root.immediate_gather_into(scope, &len));
            });
            mpi::request::scope(|scope| {
                self.arrivals.wait(root.immediate_gather_varcount_into(scope, local));
            });
            return None;
        }
        let mut counts = vec![0 as mpi::Count; self.world.size() as usize];
        mpi::request::scope(|scope| {
            self.arrivals
                .wait(root.immediate_gather_into_root(scope, &len, &mut counts[..]));
        });
        let displs = displacements(&counts);
        let mut all = vec![0.0f64; counts.iter().map(|&c| c as usize).sum()];
        {
            let mut partition = mpi::datatype::PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            mpi::request::scope(|scope| {
                self.arrivals
                    .wait(root.immediate_gather_varcount_into_root(scope, local, &mut partition));
            });
        }
        Some(
            displs
                .iter()
                .zip(&counts)
                .map(|(&d, &c)| all[d as usize..(d + c) as usize].to_vec())
                .collect(),
        )
    }

    fn exchange(&self, sends: &[(usize, Vec<u8>)], recvs: &[(usize, usize)]) -> Vec<Vec<u8>> {
        let mut inbox: Vec<Vec<u8>> = recvs.iter().map(|&(_, len)| vec![0u8; len]).collect();
        mpi::request::scope(|scope| {
            let mut pending = Vec::with_capacity(sends.len() + recvs.len());
            for (buf, &(rank, _)) in inbox.iter_mut().zip(recvs) {
                pending.push(
                    self.world
                        .process_at_rank(rank as i32)
                        .immediate_receive_into(scope, &mut buf[..]),
                );
            }
            for (rank, bytes) in sends {
                pending.push(
                    self.world
                        .process_at_rank(*rank as i32)
                        .immediate_send(scope, &bytes[..]),
                );
            }
            for request in pending {
                self.arrivals.wait(request);
            }
        });
        inbox
    }

    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    fn peer_failure(&self) -> Option<PeerFailure> {
        // Other ranks, asked while their workers wait (connect, every size): the moment to
        // tell rank 0 of a signal that is ending this rank.
        self.arrivals.tell_if_signalled();
        self.reported_failure()
    }
}

/// Where each rank's part starts in a gathered buffer of parts `counts` long, in rank order.
fn displacements(counts: &[mpi::Count]) -> Vec<mpi::Count> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn srun_without_an_mpi_plugin_is_named() {
        let with = |names: &'static [&'static str]| super::srun_without_pmi(move |v| names.contains(&v));
        let said = with(&["SLURM_STEP_ID", "SLURM_PROCID"]).expect("srun --mpi=none is refused");
        assert!(said.contains("srun --mpi=pmix"), "{said}");
        assert_eq!(with(&["SLURM_STEP_ID", "PMIX_RANK"]), None, "srun --mpi=pmix");
        assert_eq!(with(&["SLURM_STEP_ID", "PMI_RANK"]), None, "srun --mpi=pmi2");
        assert_eq!(
            with(&["SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK"]),
            None,
            "mpirun in a batch job"
        );
        assert_eq!(with(&[]), None, "no launcher: a singleton");
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(super::fnv1a(b"iters=20"), super::fnv1a(b"iters=21"));
    }
}
