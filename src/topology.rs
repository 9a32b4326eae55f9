//! Who runs where: ranks, nodes and endpoints.
//!
//! An *endpoint* is one (rank, local GPU index) pair: with one rank per GPU every rank has one
//! endpoint; with `-g N` a rank drives N endpoints from N worker threads. Endpoint ids are
//! `rank * gpus_per_rank + local`, the same numbering nccl-tests uses for its global ranks, so a
//! pattern's "endpoint e sends to e+1" reads the same in both tools.

use serde::Serialize;

/// One endpoint of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// MPI rank that drives this endpoint.
    pub rank: usize,
    /// Index of this endpoint among its rank's workers (`0..gpus_per_rank`).
    pub local: usize,
    /// Node index (0-based, in order of the node's first rank).
    pub node: usize,
    /// GPU index on the node (`local_rank * gpus_per_rank + local`, as nccl-tests picks devices).
    pub gpu: usize,
}

/// The job's shape: every endpoint, and the host name of every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub endpoints: Vec<Endpoint>,
    pub gpus_per_rank: usize,
    pub nodes: usize,
    /// Host name per rank.
    pub hostnames: Vec<String>,
}

impl Topology {
    /// Builds the topology from each rank's node index and its local rank on that node.
    ///
    /// `node_of_rank[r]` and `local_rank_of[r]` come from a shared-memory communicator split (or
    /// from `--ranks-per-node`), gathered on every rank, so every rank computes the same value.
    pub fn new(node_of_rank: &[usize], local_rank_of: &[usize], gpus_per_rank: usize, hostnames: Vec<String>) -> Self {
        let mut endpoints = Vec::with_capacity(node_of_rank.len() * gpus_per_rank);
        for (rank, (&node, &local_rank)) in node_of_rank.iter().zip(local_rank_of).enumerate() {
            for local in 0..gpus_per_rank {
                endpoints.push(Endpoint {
                    rank,
                    local,
                    node,
                    gpu: local_rank * gpus_per_rank + local,
                });
            }
        }
        let nodes = node_of_rank.iter().copied().max().map_or(0, |m| m + 1);
        Self {
            endpoints,
            gpus_per_rank,
            nodes,
            hostnames,
        }
    }

    /// A topology in which ranks are grouped into nodes of `ranks_per_node` consecutive ranks,
    /// so one host can stand in for several nodes (`--ranks-per-node`).
    pub fn with_ranks_per_node(
        ranks: usize,
        ranks_per_node: usize,
        gpus_per_rank: usize,
        hostnames: Vec<String>,
    ) -> Self {
        let node: Vec<usize> = (0..ranks).map(|r| r / ranks_per_node).collect();
        let local: Vec<usize> = (0..ranks).map(|r| r % ranks_per_node).collect();
        Self::new(&node, &local, gpus_per_rank, hostnames)
    }

    /// A topology whose nodes are the ranks' host identities ([`host_identity`]): ranks with the
    /// same identity share a node, numbered in order of each node's lowest rank; local ranks
    /// follow world rank order within the node (as a shared-memory split numbers them).
    pub fn by_host_identity(identities: &[String], gpus_per_rank: usize, hostnames: Vec<String>) -> Self {
        let mut first_rank_of: Vec<&str> = Vec::new();
        let mut node_of = Vec::with_capacity(identities.len());
        let mut local_of = Vec::with_capacity(identities.len());
        let mut count: Vec<usize> = Vec::new();
        for id in identities {
            let node = if let Some(n) = first_rank_of.iter().position(|x| x == id) {
                n
            } else {
                first_rank_of.push(id);
                count.push(0);
                first_rank_of.len() - 1
            };
            node_of.push(node);
            local_of.push(count[node]);
            count[node] += 1;
        }
        Self::new(&node_of, &local_of, gpus_per_rank, hostnames)
    }

    pub fn ranks(&self) -> usize {
        self.hostnames.len()
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Endpoint ids driven by `rank`.
    pub fn endpoints_of(&self, rank: usize) -> std::ops::Range<usize> {
        rank * self.gpus_per_rank..(rank + 1) * self.gpus_per_rank
    }

    /// A human label for error messages and state dumps: "rank 3 gpu 1 (host-b)".
    pub fn label(&self, endpoint: usize) -> String {
        let e = &self.endpoints[endpoint];
        let host = self.hostnames.get(e.rank).map_or("?", String::as_str);
        format!("rank {} gpu {} ({host})", e.rank, e.gpu)
    }

    /// Endpoint ids ordered node-major (the natural order) or interleaved across nodes so that
    /// consecutive endpoints sit on different nodes (every ring hop then crosses nodes). The
    /// interleaved order needs the same endpoint count on every node.
    pub fn order(&self, interleave_nodes: bool) -> Result<Vec<usize>, String> {
        if !interleave_nodes || self.nodes <= 1 {
            return Ok((0..self.len()).collect());
        }
        let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); self.nodes];
        for (id, e) in self.endpoints.iter().enumerate() {
            per_node[e.node].push(id);
        }
        let width = per_node[0].len();
        if per_node.iter().any(|n| n.len() != width) {
            let counts: Vec<usize> = per_node.iter().map(Vec::len).collect();
            return Err(format!(
                "--scope inter-node needs the same number of endpoints on every node (found {counts:?}); \
                 use --scope all or launch evenly"
            ));
        }
        Ok((0..width).flat_map(|i| per_node.iter().map(move |n| n[i])).collect())
    }
}

/// A process's host identity, as NCCL's `getHostHash` forms it: `NCCL_HOSTID` where set, else
/// the host name followed by the kernel's boot id. Containers or network namespaces with their
/// own host name (UTS namespace) are separate hosts; two machines that share a host name are not
/// one host, since their boot ids differ.
pub fn host_identity(hostname: &str, nccl_hostid: Option<&str>, boot_id: Option<&str>) -> String {
    match nccl_hostid.map(str::trim).filter(|h| !h.is_empty()) {
        Some(id) => format!("hostid:{id}"),
        None => format!("{hostname}{}", boot_id.unwrap_or("").trim()),
    }
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`, trimmed): the same for every process
/// on one running kernel, whatever its namespaces.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_string())
}

/// This process's [`host_identity`] (`NCCL_HOSTID`, the kernel's [`boot_id`]).
pub fn this_host_identity(hostname: &str) -> String {
    let boot_id = boot_id();
    host_identity(
        hostname,
        std::env::var("NCCL_HOSTID").ok().as_deref(),
        boot_id.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    #[test]
    fn endpoints_follow_nccl_tests_numbering() {
        let t = Topology::with_ranks_per_node(2, 1, 2, hosts(2));
        assert_eq!(t.len(), 4);
        assert_eq!(
            t.endpoints[3],
            Endpoint {
                rank: 1,
                local: 1,
                node: 1,
                gpu: 1
            }
        );
        assert_eq!(t.endpoints_of(1), 2..4);
    }

    #[test]
    fn interleaved_order_crosses_nodes_every_hop() {
        let t = Topology::with_ranks_per_node(4, 2, 1, hosts(4));
        let order = t.order(true).unwrap();
        assert_eq!(order, vec![0, 2, 1, 3]);
        for i in 0..order.len() {
            let (a, b) = (order[i], order[(i + 1) % order.len()]);
            assert_ne!(t.endpoints[a].node, t.endpoints[b].node);
        }
    }

    #[test]
    fn nodes_are_host_identities_in_order_of_first_rank() {
        let ids: Vec<String> = ["b", "a", "b", "a", "c"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let t = Topology::by_host_identity(&ids, 1, hosts(5));
        let nodes: Vec<usize> = t.endpoints.iter().map(|e| e.node).collect();
        let gpus: Vec<usize> = t.endpoints.iter().map(|e| e.gpu).collect();
        assert_eq!((t.nodes, nodes, gpus), (3, vec![0, 1, 0, 1, 2], vec![0, 0, 1, 1, 0]));
    }

    #[test]
    fn host_identity_is_ncclhostid_else_name_and_boot_id() {
        let boot = Some("1b6c-42\n");
        assert_eq!(host_identity("node0", None, boot), "node01b6c-42");
        assert_ne!(host_identity("node0", None, boot), host_identity("node1", None, boot));
        assert_ne!(host_identity("a", None, Some("x")), host_identity("a", None, Some("y")));
        assert_eq!(
            host_identity("node0", Some("rack7"), boot),
            host_identity("node1", Some("rack7"), boot)
        );
        assert_eq!(
            host_identity("n", Some(" "), None),
            "n",
            "an empty NCCL_HOSTID is unset"
        );
    }

    #[test]
    fn uneven_nodes_cannot_interleave() {
        let t = Topology::new(&[0, 0, 1], &[0, 1, 0], 1, hosts(3));
        assert!(t.order(true).unwrap_err().contains("same number of endpoints"));
    }
}
