//! The resource model: what a job of a given shape needs per process and per node (comms,
//! files, threads, ports, host, pinned and GPU memory), [`limits`] read from the machine, and
//! the [`check`] between them. Every run's preflight checks its own job this way before any comm
//! exists, and `tcpx-perf --plan` checks an imagined one; peers (NCCL #550, #1917, RCCL #577)
//! hit these limits at scale and only said so once the job had died.
//!
//! The counts come from the job's real plan: connections from `Plan::connections`, comms per
//! endpoint as [`crate::plan::Lanes`] makes them (one per peer and channel and direction), buffer
//! lengths from `Plan::buffer_len`; the plugin's share per comm from [`plugin`].

pub mod check;
pub mod limits;
pub mod plugin;

pub use plugin::PluginModel;

use crate::topology::Topology;
use serde::Serialize;

/// Threads every rank has besides its endpoints and the plugin's: main, the signal thread, the
/// setup and engine watchdogs, MPI's runtime (Open MPI: progress, PMIx, libevent) and CUDA's
/// (a few per context). An upper bound: this box's ranks showed 6 without a GPU.
pub const BASE_THREADS: usize = 16;
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

/// What the model reads: the job as every rank plans it.
pub struct JobShape<'a> {
    pub topo: &'a Topology,
    pub connections: &'a [(usize, usize)],
    pub channels: usize,
    /// The largest buffer of one endpoint over the sweep (the -e plan's).
    pub buffer_len: u64,
    pub memory: Memory,
    /// The plan copies blocks locally (fullmesh's block to itself): host memory starts copiers.
    pub local_copies: bool,
    /// Most setup threads per endpoint.
    pub setup_threads: usize,
    pub plugin: &'a PluginModel,
    /// The NIC (index on its node) each endpoint's comms use.
    pub nic_of: &'a dyn Fn(usize) -> usize,
    /// NIC names of a node, by index (for the port figures).
    pub nic_names: &'a [String],
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
    pub threads: usize,
    pub host_bytes: u64,
    pub pinned_bytes: u64,
    pub ports: Vec<PortNeed>,
}

/// Send and receive peers of every endpoint, from the connections (as [`crate::plan::Lanes`]).
fn peers(topo: &Topology, connections: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>) {
    let (mut sends, mut recvs) = (vec![0; topo.len()], vec![0; topo.len()]);
    for &(s, d) in connections {
        sends[s] += 1;
        recvs[d] += 1;
    }
    (sends, recvs)
}

/// The model of one job: per-endpoint peer counts, computed once.
pub struct Model<'a> {
    job: &'a JobShape<'a>,
    sends: Vec<usize>,
    recvs: Vec<usize>,
}

impl<'a> Model<'a> {
    pub fn new(job: &'a JobShape<'a>) -> Model<'a> {
        let (sends, recvs) = peers(job.topo, job.connections);
        Model { job, sends, recvs }
    }

    /// What `rank` needs.
    pub fn process(&self, rank: usize) -> ProcessNeed {
        let (job, p) = (self.job, self.job.plugin);
        let cuda = job.memory != Memory::Host;
        let mut need = ProcessNeed {
            rank,
            ..ProcessNeed::default()
        };
        let (mut setup_pool, mut pinned, mut connects) = (0, 0, 0);
        for e in job.topo.endpoints_of(rank) {
            let (send, recv) = (self.sends[e] * job.channels, self.recvs[e] * job.channels);
            need.endpoints += 1;
            need.comms += send + recv;
            need.listens += recv;
            connects += send;
            setup_pool += job.setup_threads.clamp(1, (send + recv).max(1));
            pinned += send as u64 * p.pinned_per_comm(cuda, false) + recv as u64 * p.pinned_per_comm(cuda, true);
            if job.memory == Memory::CudaStaged {
                pinned += job.buffer_len;
            }
            if cuda {
                // Receive comms that take a region of the plugin's bounce pool (tcpx-emu's).
                let pooled = job.memory == Memory::Cuda && p.bounce_region() > 0;
                let recv_cuda = if pooled { recv } else { 0 };
                let pool = if recv_cuda > 0 { p.bounce_pool } else { 0 };
                if job.buffer_len + pool >= need.gpu_bytes {
                    need.gpu_bytes = job.buffer_len + pool;
                    need.gpu_recv_comms = recv_cuda;
                }
            }
        }
        need.sockets = need.comms * (p.data_sockets + 1);
        need.files = fds_needed(need.comms, need.listens * p.listen_sockets(), p.data_sockets);
        need.helper_threads = p.helper_threads(need.comms, job.memory == Memory::Cuda);
        let copiers = if job.memory == Memory::Host && job.local_copies {
            COPIER_THREADS * need.endpoints
        } else {
            0
        };
        // Setup: the pool and the plugin's setup threads with every connect and accept under way
        // at once. Sweep: the helpers (both plugins start them at a comm's first transfer:
        // tcpx-emu `threads.rs`, plugin-abi.md §3.4) and the copiers.
        let setup = setup_pool + p.setup_threads(connects, need.listens);
        let sweep = copiers + need.helper_threads;
        need.threads = BASE_THREADS + need.endpoints + setup.max(sweep);
        let host_buffers = if job.memory == Memory::Host {
            job.buffer_len * need.endpoints as u64
        } else {
            0
        };
        need.pinned_bytes = pinned;
        need.host_bytes = host_buffers + pinned;
        need
    }

    /// What `node` needs: its ranks' sums, and the ports of each local address.
    pub fn node(&self, node: usize) -> NodeNeed {
        let (job, p) = (self.job, self.job.plugin);
        let ranks: Vec<usize> = (0..job.topo.ranks())
            .filter(|&r| job.topo.endpoints[job.topo.endpoints_of(r).start].node == node)
            .collect();
        let mut need = NodeNeed {
            node,
            ranks: ranks.len(),
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
            let proc = self.process(r);
            need.threads += proc.threads;
            need.host_bytes += proc.host_bytes;
            need.pinned_bytes += proc.pinned_bytes;
            for e in job.topo.endpoints_of(r) {
                let nic = (job.nic_of)(e).min(need.ports.len().saturating_sub(1));
                let (send, recv) = (
                    (self.sends[e] * job.channels) as u64,
                    (self.recvs[e] * job.channels) as u64,
                );
                // TCPX with CTRL_DEV: the ctrl listener and ctrl sockets live on that interface.
                let ctrl_at = ctrl.unwrap_or(nic);
                let listeners = recv * p.listen_sockets() as u64;
                need.ports[nic].listening += listeners - if ctrl.is_some() { recv } else { 0 };
                need.ports[ctrl_at].listening += if ctrl.is_some() { recv } else { 0 };
                need.ports[nic].connecting += send * p.data_sockets as u64;
                need.ports[ctrl_at].connecting += send;
            }
        }
        need
    }

    /// The process that needs the most of each figure among `ranks` (field by field).
    pub fn worst_process(&self, ranks: impl Iterator<Item = usize>) -> ProcessNeed {
        ranks
            .map(|r| self.process(r))
            .fold(ProcessNeed::default(), |a, b| ProcessNeed {
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
            })
    }
}

impl Model<'_> {
    /// The node that needs the most of each figure among `nodes` (field by field; ports per
    /// address).
    pub fn worst_node(&self, nodes: impl Iterator<Item = usize>) -> NodeNeed {
        nodes.map(|n| self.node(n)).fold(NodeNeed::default(), |a, b| NodeNeed {
            node: if b.threads > a.threads { b.node } else { a.node },
            ranks: a.ranks.max(b.ranks),
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

/// File descriptors a process needs: every comm's sockets (data + ctrl), the listening sockets
/// open at once during setup, and a margin for MPI, CUDA and the plugin's own files.
pub fn fds_needed(comms: usize, listening: usize, data_sockets: usize) -> u64 {
    (comms * (data_sockets + 1) + listening + 256) as u64
}

#[cfg(test)]
mod tests;
