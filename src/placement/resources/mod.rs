//! The resource model: what a job of a given shape needs per process and per node (comms,
//! files, threads, ports, host, pinned and GPU memory), [`limits`] read from the machine, and
//! the [`check`] between them. Every run's preflight checks its own job this way before any comm
//! exists, and `tcpx-perf --plan` checks an imagined one; peers (NCCL #550, #1917, RCCL #577)
//! hit these limits at scale and only said so once the job had died.
//!
//! The model reads two things: a [`Layout`] (which endpoints each rank drives, which node each
//! rank is on) and [`PeerCounts`] (how many send and receive peers each endpoint has comms with
//! at once). A run counts them from its real plan ([`Counted`]: `Plan::connections`, one comm
//! per peer, channel and direction as [`crate::plan::Lanes`] makes them); `--plan` computes them
//! in closed form from the shape ([`shape`]), never listing a connection, and evaluates only the
//! ranks and rounds where a figure can peak. `tests/resource_plan.rs` holds the two equal on
//! small shapes. The plugin's share per comm comes from [`plugin`].
//!
//! Calibrated against `/proc` peaks (docs/a3-high.md, `--plan`): a rank's fds are its comms'
//! sockets, its listeners (kept until setup ends: engine/setup.rs) and [`FDS_BASE`]; its threads
//! are [`PROCESS_THREADS`], its endpoints, tcpx-emu's acceptor and ctrl watcher, and the larger of setup
//! ([`SETUP_POOL_THREADS`] per endpoint, the plugin's threads of the connects under way) and sweep (helpers of the
//! comms that carry data, copiers); CUDA's share where the process loads its driver.

pub mod check;
pub mod limits;
pub mod plugin;
pub mod shape;

pub use plugin::PluginModel;

use crate::topology::Topology;
use serde::Serialize;
use std::collections::BTreeSet;
use std::ops::Range;

/// Threads every rank has besides its endpoints and the plugin's, measured in `/proc` (host
/// memory, this box and the rig): main, Open MPI's two (named after the process), the signal
/// thread, the setup and engine watchdogs, and the thread that notices a stopped rank 0
/// (run/stopped.rs).
pub const PROCESS_THREADS: usize = 7;
/// Setup pool threads of an endpoint: the first, and the second a false alarm doubles it to
/// (engine/setup.rs: both plugins' calls return at once, but a call now and then waits on a lock
/// past 50 ms). A second false alarm makes 4 (seen on loopback with 8 endpoints per rank;
/// 2 on a 4 x 8 x 4 rig, docs/runs/20261127-setup-pool).
pub const SETUP_POOL_THREADS: usize = 2;
/// CUDA's threads per process that loads its driver (GPU memory, or the probe of a node with
/// GPUs): an allowance, not measured here (no GPU).
pub const CUDA_THREADS: usize = 2;
/// Files a rank holds besides the plugin's sockets, measured in `/proc` (4 ranks on one host
/// and the 4 x 2 x 2 and 8 x 2 x 2 rigs alike): Open MPI's pipes, eventfds, epoll, PMIx
/// socket and two listeners and `/dev` files (18), and on rank 0 the lock of `--out` and the
/// temporary of the result file it is writing whole (tcpx-files fsyncs it before the rename, so
/// it is open long enough to count: the 8 x 2 x 2 rig's rank 0 peaked 2 above its peers).
pub const FDS_BASE: u64 = 20;
/// Files CUDA's driver holds per process (`/dev/nvidia*`, its pipes): the 4 x H100 host's
/// peaks (16 x 8 x 4 and 12 x 5 x 3 rigs, host memory, GPUs probed) less this box's, 46 more
/// than [`FDS_BASE`] on both; not measured on 8 GPUs.
pub const CUDA_FDS: u64 = 46;
/// Copy threads of an endpoint with host memory and local copies (`engine::copier::THREADS`).
pub const COPIER_THREADS: usize = 4;

/// `--plan NODESxGPUSxNICS`: the shape of a job imagined on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanShape {
    pub nodes: usize,
    pub gpus: usize,
    pub nics: usize,
}

impl std::str::FromStr for PlanShape {
    type Err = String;
    fn from_str(s: &str) -> Result<PlanShape, String> {
        let parts: Vec<&str> = s.split(['x', 'X']).map(str::trim).collect();
        let [nodes, gpus, nics] = parts.as_slice() else {
            return Err(format!("'{s}' is not NODESxGPUSxNICS: give three numbers, e.g. 64x8x4"));
        };
        let number = |what: &str, v: &str| match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "'{s}': {what} must be a whole number of at least 1, e.g. 64x8x4"
            )),
        };
        Ok(PlanShape {
            nodes: number("NODES", nodes)?,
            gpus: number("GPUS", gpus)?,
            nics: number("NICS", nics)?,
        })
    }
}

impl std::fmt::Display for PlanShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}", self.nodes, self.gpus, self.nics)
    }
}

/// Where endpoint buffers live (`--mem` as resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    Host,
    /// GPU memory handed to the plugin.
    Cuda,
    /// GPU memory staged through a pinned host mirror of the same size (host-only plugins).
    CudaStaged,
}

/// Who runs where, as the model reads it: a run's [`Topology`] or a `--plan` shape.
pub trait Layout {
    fn ranks(&self) -> usize;
    /// Endpoint ids driven by `rank`.
    fn endpoints_of(&self, rank: usize) -> Range<usize>;
    fn node_of(&self, rank: usize) -> usize;
    /// The ranks on `node`.
    fn ranks_on(&self, node: usize) -> Vec<usize>;
}

impl Layout for Topology {
    fn ranks(&self) -> usize {
        Topology::ranks(self)
    }
    fn endpoints_of(&self, rank: usize) -> Range<usize> {
        Topology::endpoints_of(self, rank)
    }
    fn node_of(&self, rank: usize) -> usize {
        self.endpoints[Topology::endpoints_of(self, rank).start].node
    }
    fn ranks_on(&self, node: usize) -> Vec<usize> {
        (0..Topology::ranks(self))
            .filter(|&r| Layout::node_of(self, r) == node)
            .collect()
    }
}

/// Which comms are open at once: the whole job's (`--connect all`), or one round's.
pub type Phase = Option<u32>;

/// How many peers each endpoint has comms with at once.
pub trait PeerCounts {
    /// The phases in which `endpoints` (one rank's) may hold the most: `[None]` when every comm
    /// is open at once; with `--connect rounds`, the rounds where a figure can peak.
    fn phases(&self, endpoints: Range<usize>) -> Vec<Phase>;
    /// (send peers, receive peers) of endpoint `e` in `phase`.
    fn counts(&self, e: usize, phase: Phase) -> (usize, usize);
}

/// The counts of a real plan, from its connections (every comm open at once) or its flows'
/// rounds (one round's at once).
pub struct Counted {
    /// Per endpoint: (phase, send peers, receive peers).
    by_endpoint: Vec<Vec<(Phase, usize, usize)>>,
}

impl Counted {
    /// Every connection open at once (`Plan::connections`).
    pub fn all(endpoints: usize, connections: &[(usize, usize)]) -> Counted {
        Self::of(endpoints, connections.iter().map(|&(s, d)| (s, d, None)))
    }

    /// One round's connections at once: `(src, dst, round)` of every network flow.
    pub fn by_round(endpoints: usize, flows: impl Iterator<Item = (usize, usize, u32)>) -> Counted {
        Self::of(endpoints, flows.map(|(s, d, r)| (s, d, Some(r))))
    }

    fn of(endpoints: usize, pairs: impl Iterator<Item = (usize, usize, Phase)>) -> Counted {
        let distinct: BTreeSet<(usize, usize, Phase)> = pairs.collect();
        let mut by_endpoint: Vec<Vec<(Phase, usize, usize)>> = vec![Vec::new(); endpoints];
        let mut bump = |e: usize, phase: Phase, send: usize, recv: usize| {
            let list = &mut by_endpoint[e];
            match list.iter_mut().find(|x| x.0 == phase) {
                Some(x) => (x.1, x.2) = (x.1 + send, x.2 + recv),
                None => list.push((phase, send, recv)),
            }
        };
        for (s, d, phase) in distinct {
            bump(s, phase, 1, 0);
            bump(d, phase, 0, 1);
        }
        Counted { by_endpoint }
    }
}

impl Counted {
    /// This count's figures of `endpoints` (one rank's: the peers of its own endpoints, which
    /// its held plan knows in full) as a table of `phases.len() x total x 2` numbers, (send,
    /// receive) per phase and endpoint, zeros elsewhere: every rank's tables summed (MPI) are
    /// the job's ([`Self::from_table`]), without any rank holding another's flows.
    pub fn to_table(&self, phases: &[Phase], endpoints: Range<usize>, total: usize) -> Vec<u64> {
        let mut table = vec![0u64; phases.len() * total * 2];
        for (i, &phase) in phases.iter().enumerate() {
            for e in endpoints.clone() {
                let (send, recv) = self.counts(e, phase);
                let at = 2 * (i * total + e);
                table[at] = send as u64;
                table[at + 1] = recv as u64;
            }
        }
        table
    }

    /// The counts a summed [`Self::to_table`] holds.
    pub fn from_table(phases: &[Phase], total: usize, table: &[u64]) -> Counted {
        let mut by_endpoint: Vec<Vec<(Phase, usize, usize)>> = vec![Vec::new(); total];
        for (i, &phase) in phases.iter().enumerate() {
            for (e, list) in by_endpoint.iter_mut().enumerate() {
                let at = 2 * (i * total + e);
                let (send, recv) = (table[at] as usize, table[at + 1] as usize);
                if send + recv > 0 {
                    list.push((phase, send, recv));
                }
            }
        }
        Counted { by_endpoint }
    }
}

impl PeerCounts for Counted {
    fn phases(&self, endpoints: Range<usize>) -> Vec<Phase> {
        let phases: BTreeSet<Phase> = endpoints
            .flat_map(|e| self.by_endpoint[e].iter().map(|x| x.0))
            .collect();
        if phases.is_empty() {
            vec![None]
        } else {
            phases.into_iter().collect()
        }
    }

    fn counts(&self, e: usize, phase: Phase) -> (usize, usize) {
        self.by_endpoint[e]
            .iter()
            .find(|x| x.0 == phase)
            .map_or((0, 0), |x| (x.1, x.2))
    }
}

/// What the model reads: the job as every rank plans it.
pub struct JobShape<'a> {
    pub layout: &'a dyn Layout,
    pub peers: &'a dyn PeerCounts,
    pub channels: usize,
    /// Channels of a peer that carry data at the largest size (the rest never start helpers):
    /// `channels` where unknown.
    pub active_channels: usize,
    /// The largest buffer of one endpoint over the sweep (the -e plan's).
    pub buffer_len: u64,
    pub memory: Memory,
    /// The plan copies blocks locally (fullmesh's block to itself): host memory starts copiers.
    pub local_copies: bool,
    /// Connects each endpoint has under way at once (`engine::setup::connects_in_flight`).
    pub connects_in_flight: usize,
    pub plugin: &'a PluginModel,
    /// The NIC (index on its node) each endpoint's comms use.
    pub nic_of: &'a dyn Fn(usize) -> usize,
    /// NIC names of a node, by index (for the port figures).
    pub nic_names: &'a [String],
    /// The process loads CUDA's driver: GPU memory, or a node with GPUs it probes.
    pub cuda_runtime: bool,
}

/// One process's needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessNeed {
    pub rank: usize,
    pub endpoints: usize,
    /// Send + receive comms.
    pub comms: usize,
    /// Listen comms open at once during setup (one per receive comm).
    pub listens: usize,
    /// Sockets of connected comms (data + ctrl).
    pub sockets: usize,
    pub files: u64,
    /// The plugin's data-path helper threads.
    pub helper_threads: usize,
    /// The most threads alive at once (setup or sweep, whichever is more).
    pub threads: usize,
    /// Host memory: buffers, pinned mirrors, staging.
    pub host_bytes: u64,
    /// Of which pinned (page-locked by CUDA).
    pub pinned_bytes: u64,
    /// GPU memory on the busiest GPU this process uses.
    pub gpu_bytes: u64,
    /// CUDA receive comms on that GPU, each taking a bounce region (tcpx-emu).
    pub gpu_recv_comms: usize,
}

/// Ephemeral ports one local address needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortNeed {
    pub address: String,
    /// Listening sockets: each holds a port of its own.
    pub listening: u64,
    /// Connected sockets dialled from this address.
    pub connecting: u64,
}

/// One node's needs: the sums over its ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeNeed {
    pub node: usize,
    pub ranks: usize,
    /// Nodes whose threads and memory these sums hold: more than 1 where nodes share one kernel
    /// (the rig's namespaces: one `pid_max`, one memory); their ports stay each node's own.
    pub kernel_nodes: usize,
    pub threads: usize,
    pub host_bytes: u64,
    pub pinned_bytes: u64,
    pub ports: Vec<PortNeed>,
}

impl NodeNeed {
    /// Counts one more process's threads and memory in the sums.
    fn add_process(&mut self, proc: &ProcessNeed) {
        self.threads += proc.threads;
        self.host_bytes = self.host_bytes.saturating_add(proc.host_bytes);
        self.pinned_bytes = self.pinned_bytes.saturating_add(proc.pinned_bytes);
    }
}

/// One rank's comms in one phase, endpoint by endpoint: (send comms, receive comms).
fn comms_in(job: &JobShape, rank: usize, phase: Phase) -> Vec<(usize, usize)> {
    job.layout
        .endpoints_of(rank)
        .map(|e| {
            let (send, recv) = job.peers.counts(e, phase);
            (send * job.channels, recv * job.channels)
        })
        .collect()
}

/// The model of one job.
pub struct Model<'a> {
    job: &'a JobShape<'a>,
}

impl<'a> Model<'a> {
    pub fn new(job: &'a JobShape<'a>) -> Model<'a> {
        Model { job }
    }

    /// What `rank` needs: in each phase its comms may peak in, figure by figure the most.
    pub fn process(&self, rank: usize) -> ProcessNeed {
        let phases = self.job.peers.phases(self.job.layout.endpoints_of(rank));
        let mut need = phases
            .into_iter()
            .map(|phase| self.process_in(rank, phase))
            .reduce(worse_process)
            .unwrap_or_default();
        need.rank = rank;
        need
    }

    /// What `rank` needs while the comms of `phase` are open.
    fn process_in(&self, rank: usize, phase: Phase) -> ProcessNeed {
        let (job, p) = (self.job, self.job.plugin);
        let cuda = job.memory != Memory::Host;
        let mut need = ProcessNeed {
            rank,
            ..ProcessNeed::default()
        };
        let (mut pinned, mut connects, mut active, mut pools) = (0, 0, 0, 0);
        for (send, recv) in comms_in(job, rank, phase) {
            need.endpoints += 1;
            need.comms += send + recv;
            need.listens += recv;
            connects += send.min(job.connects_in_flight.max(1));
            pools += SETUP_POOL_THREADS.min(send + recv);
            // Comms whose channel carries no data never start their helpers.
            active += (send + recv) / job.channels.max(1) * job.active_channels.min(job.channels);
            pinned += send as u64 * p.pinned_per_comm(cuda, false) + recv as u64 * p.pinned_per_comm(cuda, true);
            if job.memory == Memory::CudaStaged {
                pinned = pinned.saturating_add(job.buffer_len);
            }
            if cuda {
                // Receive comms that take a region of the plugin's bounce pool (tcpx-emu's).
                let pooled = job.memory == Memory::Cuda && p.bounce_region() > 0;
                let recv_cuda = if pooled { recv } else { 0 };
                let pool = if recv_cuda > 0 { p.bounce_pool } else { 0 };
                if job.buffer_len.saturating_add(pool) >= need.gpu_bytes {
                    need.gpu_bytes = job.buffer_len.saturating_add(pool);
                    need.gpu_recv_comms = recv_cuda;
                }
            }
        }
        need.sockets = need.comms * (p.data_sockets + 1);
        need.files = fds_needed(need.sockets, need.listens * p.listen_sockets(), job.cuda_runtime)
            + p.resident_fds(need.listens);
        need.helper_threads = p.helpers_started(need.comms, active, job.memory == Memory::Cuda);
        let copiers = if job.memory == Memory::Host && job.local_copies {
            COPIER_THREADS * need.endpoints
        } else {
            0
        };
        // Setup: the pools and the plugin's setup threads with every accept and each endpoint's
        // `connects_in_flight` connects under way at once. Sweep: the helpers (both plugins start them at a comm's first transfer:
        // tcpx-emu `threads.rs`, plugin-abi.md §3.4) and the copiers. tcpx-emu's acceptor
        // (one of its setup threads) lives from the first listen to the end, its ctrl watcher
        // from the first accept: both are resident, counted once.
        let resident = p.resident_threads(need.listens);
        let setup = pools + p.setup_threads(connects, need.listens).saturating_sub(resident);
        let sweep = copiers + need.helper_threads;
        let runtime = PROCESS_THREADS + if job.cuda_runtime { CUDA_THREADS } else { 0 };
        need.threads = runtime + need.endpoints + resident + setup.max(sweep);
        let host_buffers = if job.memory == Memory::Host {
            job.buffer_len.saturating_mul(need.endpoints as u64)
        } else {
            0
        };
        need.pinned_bytes = pinned;
        need.host_bytes = host_buffers.saturating_add(pinned);
        need
    }

    /// Ports one rank's endpoints need on each address (the node's NICs, then TCPX's ctrl
    /// device), the most over its phases.
    fn ports_of(&self, rank: usize, addresses: usize, ctrl: Option<usize>) -> Vec<(u64, u64)> {
        let (job, p) = (self.job, self.job.plugin);
        let mut most = vec![(0u64, 0u64); addresses];
        for phase in job.peers.phases(job.layout.endpoints_of(rank)) {
            let mut here = vec![(0u64, 0u64); addresses];
            for (e, (send, recv)) in job.layout.endpoints_of(rank).zip(comms_in(job, rank, phase)) {
                let nic = (job.nic_of)(e).min(addresses.saturating_sub(1));
                let (send, recv) = (send as u64, recv as u64);
                // TCPX with CTRL_DEV: the ctrl listener and ctrl sockets live on that interface.
                let ctrl_at = ctrl.unwrap_or(nic);
                let listeners = recv * p.listen_sockets() as u64;
                here[nic].0 += listeners - if ctrl.is_some() { recv } else { 0 };
                here[ctrl_at].0 += if ctrl.is_some() { recv } else { 0 };
                here[nic].1 += send * p.data_sockets as u64;
                here[ctrl_at].1 += send;
            }
            for (m, h) in most.iter_mut().zip(here) {
                *m = (m.0.max(h.0), m.1.max(h.1));
            }
        }
        most
    }

    /// What `node` needs: its ranks' sums, and the ports of each local address.
    pub fn node(&self, node: usize) -> NodeNeed {
        let (job, p) = (self.job, self.job.plugin);
        let ranks = job.layout.ranks_on(node);
        let mut need = NodeNeed {
            node,
            ranks: ranks.len(),
            kernel_nodes: 1,
            ports: job
                .nic_names
                .iter()
                .map(|n| PortNeed {
                    address: n.clone(),
                    ..PortNeed::default()
                })
                .collect(),
            ..NodeNeed::default()
        };
        let ctrl = p.ctrl_dev.as_ref().filter(|_| p.kind == plugin::Kind::Tcpx).map(|dev| {
            need.ports.push(PortNeed {
                address: dev.clone(),
                ..PortNeed::default()
            });
            need.ports.len() - 1
        });
        for &r in &ranks {
            need.add_process(&self.process(r));
            let ports = self.ports_of(r, need.ports.len(), ctrl);
            for (port, (listening, connecting)) in need.ports.iter_mut().zip(ports) {
                port.listening += listening;
                port.connecting += connecting;
            }
        }
        need
    }

    /// `node`'s needs with the threads, memory and ranks of the other nodes of `on_kernel`
    /// (the nodes that share its kernel, itself included) added: what the kernel's `pid_max`
    /// and memory must hold. Ports stay `node`'s (each namespace has its own).
    pub fn kernel(&self, node: usize, on_kernel: &[usize]) -> NodeNeed {
        let mut need = self.node(node);
        for other in on_kernel.iter().copied().filter(|&n| n != node) {
            // Their ranks' threads and memory, not their ports (which stay theirs).
            for r in self.job.layout.ranks_on(other) {
                need.ranks += 1;
                need.add_process(&self.process(r));
            }
        }
        need.kernel_nodes = on_kernel.len().max(1);
        need
    }

    /// The process that needs the most of each figure among `ranks` (field by field).
    pub fn worst_process(&self, ranks: impl Iterator<Item = usize>) -> ProcessNeed {
        ranks
            .map(|r| self.process(r))
            .fold(ProcessNeed::default(), worse_process)
    }

    /// The node that needs the most of each figure among `nodes` (field by field; ports per
    /// address).
    pub fn worst_node(&self, nodes: impl Iterator<Item = usize>) -> NodeNeed {
        nodes.map(|n| self.node(n)).fold(NodeNeed::default(), |a, b| NodeNeed {
            node: if b.threads > a.threads { b.node } else { a.node },
            ranks: a.ranks.max(b.ranks),
            kernel_nodes: a.kernel_nodes.max(b.kernel_nodes),
            threads: a.threads.max(b.threads),
            host_bytes: a.host_bytes.max(b.host_bytes),
            pinned_bytes: a.pinned_bytes.max(b.pinned_bytes),
            ports: if a.ports.is_empty() {
                b.ports
            } else {
                a.ports
                    .into_iter()
                    .zip(b.ports)
                    .map(|(x, y)| PortNeed {
                        address: x.address,
                        listening: x.listening.max(y.listening),
                        connecting: x.connecting.max(y.connecting),
                    })
                    .collect()
            },
        })
    }
}

/// Figure by figure the larger of two needs (the rank label follows the files).
fn worse_process(a: ProcessNeed, b: ProcessNeed) -> ProcessNeed {
    ProcessNeed {
        rank: if b.files > a.files { b.rank } else { a.rank },
        endpoints: a.endpoints.max(b.endpoints),
        comms: a.comms.max(b.comms),
        listens: a.listens.max(b.listens),
        sockets: a.sockets.max(b.sockets),
        files: a.files.max(b.files),
        helper_threads: a.helper_threads.max(b.helper_threads),
        threads: a.threads.max(b.threads),
        host_bytes: a.host_bytes.max(b.host_bytes),
        pinned_bytes: a.pinned_bytes.max(b.pinned_bytes),
        gpu_bytes: a.gpu_bytes.max(b.gpu_bytes),
        gpu_recv_comms: a.gpu_recv_comms.max(b.gpu_recv_comms),
    }
}

/// File descriptors a process holds at its peak, the end of setup: every comm's `sockets`
/// (data + ctrl), the `listening` sockets of its listen comms (closed together once every
/// accept finished: engine/setup.rs), and what MPI, the runtime and CUDA's driver hold.
pub fn fds_needed(sockets: usize, listening: usize, cuda_runtime: bool) -> u64 {
    (sockets + listening) as u64 + FDS_BASE + if cuda_runtime { CUDA_FDS } else { 0 }
}

#[cfg(test)]
mod tests;
