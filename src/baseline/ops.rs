//! What NCCL runs for each pattern: the same operation as tcpx-perf's, in NCCL's terms.
//!
//! - sendrecv, pairs, fullmesh: the plan's own flows, as one group of `ncclSend`/`ncclRecv`
//!   per endpoint (the same peers, offsets and lengths; fullmesh's block to itself is a
//!   send/recv to self, as nccl-tests' alltoall does it with grouped point-to-point calls);
//! - ring: `ncclAllReduce` of the size as floats (tcpx-perf's ring moves an all-reduce's
//!   traffic, so busbw compares with NCCL's all-reduce busbw).
//!
//! Pure functions of the plan: every rank derives the same operations.

use crate::plan::{Pattern, Plan};
use crate::topology::Topology;

/// One point-to-point transfer of an endpoint: `len` bytes at `off` of its buffer to or from
/// endpoint `peer` (an NCCL rank: endpoint ids are the communicator's ranks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub peer: usize,
    pub off: u64,
    pub len: u64,
}

/// One endpoint's part of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointOp {
    /// `ncclSend`s and `ncclRecv`s in one group.
    P2p { sends: Vec<Transfer>, recvs: Vec<Transfer> },
    /// `ncclAllReduce` of `count` floats from `[0, 4 count)` into `[4 count, 8 count)`.
    AllReduce { count: u64 },
}

impl EndpointOp {
    /// Bytes of this endpoint's buffer the operation touches.
    pub fn buffer_len(&self) -> u64 {
        match self {
            EndpointOp::P2p { sends, recvs } => sends.iter().chain(recvs).map(|t| t.off + t.len).max().unwrap_or(0),
            EndpointOp::AllReduce { count } => 8 * count,
        }
    }
}

/// The operation NCCL runs for `plan`, for every endpoint of the job (index = endpoint id).
pub fn for_plan(plan: &Plan) -> Vec<EndpointOp> {
    let n = plan.buffer_len.len();
    if plan.pattern == Pattern::Ring {
        return vec![EndpointOp::AllReduce { count: plan.size / 4 }; n];
    }
    let mut ops: Vec<(Vec<Transfer>, Vec<Transfer>)> = vec![(Vec::new(), Vec::new()); n];
    for f in plan.flows.iter().filter(|f| f.len > 0) {
        ops[f.src].0.push(Transfer {
            peer: f.dst,
            off: f.src_off,
            len: f.len,
        });
        ops[f.dst].1.push(Transfer {
            peer: f.src,
            off: f.dst_off,
            len: f.len,
        });
    }
    ops.into_iter()
        .map(|(sends, recvs)| EndpointOp::P2p { sends, recvs })
        .collect()
}

/// The bytes NCCL's figures are computed from (the "size" of its algbw): the plan's size,
/// except for an all-reduce of whole floats.
pub fn nccl_size(plan: &Plan) -> u64 {
    match plan.pattern {
        Pattern::Ring => plan.size / 4 * 4,
        _ => plan.size,
    }
}

/// What NCCL call the pattern maps to, for the header.
pub fn nccl_call(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::Ring => "ncclAllReduce (float, sum)",
        Pattern::Fullmesh => "alltoall as grouped ncclSend/ncclRecv (block to self included)",
        Pattern::Sendrecv | Pattern::Pairs => "grouped ncclSend/ncclRecv over the plan's pairs",
    }
}

/// Ring hops that cross nodes, of all the ring's hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingHops {
    pub crossing: usize,
    pub hops: usize,
}

impl RingHops {
    /// The hops of the ring through `order` (each endpoint to the next, the last to the first).
    fn of(order: &[usize], topo: &Topology) -> RingHops {
        let node = |e: usize| topo.endpoints[e].node;
        let n = order.len();
        RingHops {
            crossing: (0..n).filter(|&i| node(order[i]) != node(order[(i + 1) % n])).count(),
            hops: n,
        }
    }
}

/// The ring hops of tcpx-perf's plan (its own ring order: `--scope inter-node` interleaves the
/// nodes, so every hop crosses) and of NCCL's all-reduce ring, which keeps each node's GPUs
/// together (one hop into each node); None for other patterns.
pub fn ring_hops(plan: &Plan, topo: &Topology) -> Option<(RingHops, RingHops)> {
    if plan.pattern != Pattern::Ring {
        return None;
    }
    // The plan's ring is the topology's order (a rank holds only its own hops of it).
    let order = topo.order(plan.scope == crate::plan::Scope::InterNode).ok()?;
    let nccl: Vec<usize> = topo.order(false).ok()?;
    Some((RingHops::of(&order, topo), RingHops::of(&nccl, topo)))
}

/// Where tcpx-perf's ring and NCCL's all-reduce move different traffic (more of the ring's
/// hops cross nodes on one side), one line saying so with the hops of each; None where they
/// move the same.
pub fn ring_note(plan: &Plan, topo: &Topology) -> Option<String> {
    let (ours, nccl) = ring_hops(plan, topo)?;
    (ours != nccl).then(|| {
        format!(
            "different traffic: tcpx-perf's ring crosses nodes on {} of {} hops, NCCL's all-reduce ring on {} of {} (NCCL keeps a node's GPUs together), so the ratio is not like for like; --scope all gives both the same ring",
            ours.crossing, ours.hops, nccl.crossing, nccl.hops
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Direction, Scope};
    use crate::topology::Topology;

    fn plan(pattern: Pattern, ranks: usize, per_node: usize, scope: Scope, size: u64) -> Plan {
        let topo = Topology::with_ranks_per_node(ranks, per_node, 1, vec!["h".into(); ranks]);
        Plan::build(pattern, scope, Direction::Bi, &topo, size, None).expect("plan")
    }

    #[test]
    fn sendrecv_is_the_ring_shift_of_the_plan() {
        let ops = for_plan(&plan(Pattern::Sendrecv, 4, 4, Scope::All, 1000));
        for (e, op) in ops.iter().enumerate() {
            let EndpointOp::P2p { sends, recvs } = op else {
                panic!("p2p")
            };
            assert_eq!(
                sends,
                &[Transfer {
                    peer: (e + 1) % 4,
                    off: 0,
                    len: 1000
                }]
            );
            assert_eq!(
                recvs,
                &[Transfer {
                    peer: (e + 3) % 4,
                    off: 1000,
                    len: 1000
                }]
            );
            assert_eq!(op.buffer_len(), 2000);
        }
    }

    #[test]
    fn inter_node_sendrecv_keeps_the_plans_peers() {
        // 4 ranks, 2 per node: the plan interleaves the nodes, NCCL must use the same pairs.
        let p = plan(Pattern::Sendrecv, 4, 2, Scope::InterNode, 64);
        let ops = for_plan(&p);
        for f in &p.flows {
            let EndpointOp::P2p { sends, .. } = &ops[f.src] else {
                panic!("p2p")
            };
            assert_eq!(sends[0].peer, f.dst);
            assert_ne!(f.src / 2, f.dst / 2, "every hop crosses nodes");
        }
    }

    #[test]
    fn fullmesh_sends_a_block_to_every_endpoint_itself_included() {
        let p = plan(Pattern::Fullmesh, 4, 4, Scope::All, 4096);
        for (e, op) in for_plan(&p).iter().enumerate() {
            let EndpointOp::P2p { sends, recvs } = op else {
                panic!("p2p")
            };
            let mut peers: Vec<usize> = sends.iter().map(|t| t.peer).collect();
            peers.sort_unstable();
            assert_eq!(peers, [0, 1, 2, 3]);
            assert!(sends.iter().all(|t| t.len == 1024 && t.off == t.peer as u64 * 1024));
            assert!(
                recvs.iter().all(|t| t.off == 4096 + t.peer as u64 * 1024),
                "endpoint {e}"
            );
        }
        // Inter-node scope: same-node blocks are dropped by NCCL too.
        let p = plan(Pattern::Fullmesh, 4, 2, Scope::InterNode, 4096);
        for (e, op) in for_plan(&p).iter().enumerate() {
            let EndpointOp::P2p { sends, .. } = op else {
                panic!("p2p")
            };
            assert!(sends.iter().all(|t| t.peer / 2 != e / 2));
            assert_eq!(sends.len(), 2);
        }
    }

    #[test]
    fn ring_is_an_all_reduce_of_whole_floats() {
        let p = plan(Pattern::Ring, 4, 4, Scope::All, 1 << 20);
        assert!(for_plan(&p)
            .iter()
            .all(|o| *o == EndpointOp::AllReduce { count: 1 << 18 }));
        assert_eq!(nccl_size(&p), 1 << 20);
        let p = plan(Pattern::Ring, 3, 3, Scope::All, 1001);
        assert_eq!(p.size, 999);
        assert_eq!(nccl_size(&p), 996);
        assert_eq!(for_plan(&p)[0].buffer_len(), 8 * 249);
    }

    #[test]
    fn uni_pairs_leave_the_upper_half_receiving() {
        let topo = Topology::with_ranks_per_node(4, 4, 1, vec!["h".into(); 4]);
        let p = Plan::build(Pattern::Pairs, Scope::All, Direction::Uni, &topo, 100, None).expect("plan");
        let ops = for_plan(&p);
        let EndpointOp::P2p { sends, recvs } = &ops[3] else {
            panic!("p2p")
        };
        assert!(sends.is_empty());
        assert_eq!(
            recvs,
            &[Transfer {
                peer: 1,
                off: 100,
                len: 100
            }]
        );
    }

    #[test]
    fn the_ring_note_counts_the_hops_that_cross_nodes_on_each_side() {
        // 2 nodes x 2 GPUs: the inter-node ring interleaves (0, 2, 1, 3), NCCL goes 0 1 | 2 3.
        let topo = Topology::with_ranks_per_node(4, 2, 1, vec!["h".into(); 4]);
        let ring = |scope| Plan::build(Pattern::Ring, scope, Direction::Bi, &topo, 4096, None).expect("plan");
        let (ours, nccl) = ring_hops(&ring(Scope::InterNode), &topo).expect("ring");
        assert_eq!((ours.crossing, ours.hops), (4, 4));
        assert_eq!((nccl.crossing, nccl.hops), (2, 4));
        let note = ring_note(&ring(Scope::InterNode), &topo).expect("a note");
        assert!(
            note.contains("tcpx-perf's ring crosses nodes on 4 of 4 hops, NCCL's all-reduce ring on 2 of 4"),
            "{note}"
        );
        // The same ring on both sides: nothing to say.
        assert_eq!(ring_note(&ring(Scope::All), &topo), None);
        // 4 nodes x 2: 8 of 8 against 4 of 8.
        let topo = Topology::with_ranks_per_node(8, 2, 1, vec!["h".into(); 8]);
        let p = Plan::build(Pattern::Ring, Scope::InterNode, Direction::Bi, &topo, 8192, None).expect("plan");
        let (ours, nccl) = ring_hops(&p, &topo).expect("ring");
        assert_eq!((ours.crossing, nccl.crossing, nccl.hops), (8, 4, 8));
        // Other patterns run NCCL on the plan's own flows.
        assert_eq!(
            ring_note(&plan(Pattern::Sendrecv, 4, 2, Scope::InterNode, 100), &topo),
            None
        );
    }
}
