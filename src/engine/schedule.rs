//! Per-endpoint post sequences derived from the plan.
//!
//! Both sides of a connection walk the same flows in the same order and split them into the same
//! chunks, so sender and receiver agree on every post without exchanging a byte: flows from `a`
//! to `b` are concatenated in plan order, chunk `j` of that concatenation goes to channel
//! `j % channels`. Everything here is computed before the clock starts; the hot path only walks
//! these vectors.

use crate::plan::Plan;

/// One `isend` of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOp {
    pub off: u64,
    pub len: u64,
    /// Receive slot that must have completed before this chunk may be sent (ring forwarding).
    pub dep: Option<u32>,
    pub round: u32,
}

/// One `irecv` of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvOp {
    pub off: u64,
    pub len: u64,
    /// Index into the endpoint's per-iteration "received" flags.
    pub slot: u32,
    /// Global index of the flow this chunk belongs to (for per-pair times).
    pub flow: u32,
    pub round: u32,
}

/// A self-copy inside the endpoint's buffer (fullmesh's own block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCopy {
    pub src_off: u64,
    pub dst_off: u64,
    pub len: u64,
    pub flow: u32,
    pub round: u32,
}

/// The lanes of one endpoint: one send lane per (destination peer, channel) and one receive lane
/// per (source peer, channel), in the order connections are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lanes {
    pub send_peers: Vec<usize>,
    pub recv_peers: Vec<usize>,
    pub channels: usize,
}

impl Lanes {
    pub fn of(endpoint: usize, connections: &[(usize, usize)], channels: usize) -> Self {
        let send_peers = connections.iter().filter(|c| c.0 == endpoint).map(|c| c.1).collect();
        let recv_peers = connections.iter().filter(|c| c.1 == endpoint).map(|c| c.0).collect();
        Self {
            send_peers,
            recv_peers,
            channels,
        }
    }

    pub fn send_lane(&self, peer: usize, channel: usize) -> usize {
        let p = self
            .send_peers
            .iter()
            .position(|&x| x == peer)
            .expect("peer has a send lane");
        p * self.channels + channel
    }

    pub fn recv_lane(&self, peer: usize, channel: usize) -> usize {
        let p = self
            .recv_peers
            .iter()
            .position(|&x| x == peer)
            .expect("peer has a receive lane");
        p * self.channels + channel
    }
}

/// Everything one endpoint does in one iteration of one size.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    pub send: Vec<Vec<SendOp>>,
    pub recv: Vec<Vec<RecvOp>>,
    pub local: Vec<LocalCopy>,
    /// Number of receive slots (chunks received per iteration).
    pub recv_slots: usize,
    /// Ops per round (send + receive + local), to advance `--max-peers` rounds.
    pub ops_per_round: Vec<u32>,
    /// Network bytes this endpoint receives per iteration.
    pub recv_bytes: u64,
}

fn chunks(len: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let count = len.div_ceil(chunk).max(1);
    (0..count).map(move |i| (i * chunk, chunk.min(len - (i * chunk).min(len))))
}

impl Schedule {
    pub fn build(plan: &Plan, endpoint: usize, lanes: &Lanes, chunk: u64) -> Schedule {
        let channels = lanes.channels;
        let mut s = Schedule {
            send: vec![Vec::new(); lanes.send_peers.len() * channels],
            recv: vec![Vec::new(); lanes.recv_peers.len() * channels],
            ..Schedule::default()
        };
        let rounds = plan.flows.iter().map(|f| f.round).max().map_or(1, |r| r as usize + 1);
        s.ops_per_round = vec![0; rounds];

        // Receives first: they assign the slots that forwarded sends wait on.
        let mut first_slot_of_flow = vec![None; plan.flows.len()];
        for &peer in &lanes.recv_peers {
            let mut j = 0usize;
            for (fi, f) in plan
                .flows
                .iter()
                .enumerate()
                .filter(|(_, f)| f.src == peer && f.dst == endpoint)
            {
                first_slot_of_flow[fi] = Some(s.recv_slots as u32);
                for (off, len) in chunks(f.len, chunk) {
                    let lane = lanes.recv_lane(peer, j % channels);
                    let op = RecvOp {
                        off: f.dst_off + off,
                        len,
                        slot: s.recv_slots as u32,
                        flow: fi as u32,
                        round: f.round,
                    };
                    s.recv[lane].push(op);
                    s.recv_slots += 1;
                    s.recv_bytes += len;
                    s.ops_per_round[f.round as usize] += 1;
                    j += 1;
                }
            }
        }
        for &peer in &lanes.send_peers {
            let mut j = 0usize;
            for f in plan.flows.iter().filter(|f| f.src == endpoint && f.dst == peer) {
                let feeder = f.forwards.then(|| {
                    plan.flows
                        .iter()
                        .position(|g| g.dst == endpoint && g.dst_off == f.src_off && g.len == f.len && !g.is_local())
                        .and_then(|g| first_slot_of_flow[g])
                        .expect("a forwarded range is filled by an incoming flow of the same length")
                });
                for (c, (off, len)) in chunks(f.len, chunk).enumerate() {
                    let lane = lanes.send_lane(peer, j % channels);
                    let dep = feeder.map(|first| first + c as u32);
                    s.send[lane].push(SendOp {
                        off: f.src_off + off,
                        len,
                        dep,
                        round: f.round,
                    });
                    s.ops_per_round[f.round as usize] += 1;
                    j += 1;
                }
            }
        }
        for (fi, f) in plan
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_local() && f.src == endpoint)
        {
            s.local.push(LocalCopy {
                src_off: f.src_off,
                dst_off: f.dst_off,
                len: f.len,
                flow: fi as u32,
                round: f.round,
            });
            s.ops_per_round[f.round as usize] += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Direction, Pattern, Scope};
    use crate::topology::Topology;

    fn plan(p: Pattern, n: usize, size: u64) -> Plan {
        let t = Topology::with_ranks_per_node(n, n, 1, (0..n).map(|r| format!("h{r}")).collect());
        Plan::build(p, Scope::All, Direction::Bi, &t, size, None).unwrap()
    }

    /// Sender and receiver must derive the same chunk sequence on every channel.
    #[test]
    fn both_sides_agree_on_every_lane() {
        for pattern in [Pattern::Sendrecv, Pattern::Ring, Pattern::Fullmesh] {
            let p = plan(pattern, 3, 3 * 10_000 + 7);
            let conns = p.connections();
            for channels in [1, 2, 3] {
                let lanes: Vec<Lanes> = (0..3).map(|e| Lanes::of(e, &conns, channels)).collect();
                let sched: Vec<Schedule> = (0..3).map(|e| Schedule::build(&p, e, &lanes[e], 4096)).collect();
                for &(a, b) in &conns {
                    for ch in 0..channels {
                        let sends: Vec<u64> = sched[a].send[lanes[a].send_lane(b, ch)].iter().map(|o| o.len).collect();
                        let recvs: Vec<u64> = sched[b].recv[lanes[b].recv_lane(a, ch)].iter().map(|o| o.len).collect();
                        assert_eq!(sends, recvs, "{pattern} {a}->{b} channel {ch}");
                    }
                }
            }
        }
    }

    #[test]
    fn ring_chunks_wait_for_the_matching_receive() {
        let p = plan(Pattern::Ring, 2, 2 * 8192);
        let conns = p.connections();
        let lanes = Lanes::of(0, &conns, 1);
        let s = Schedule::build(&p, 0, &lanes, 4096);
        // 2 steps of 8192 bytes in 4096-byte chunks: the second step's chunks wait on slots 0, 1.
        let deps: Vec<Option<u32>> = s.send[0].iter().map(|o| o.dep).collect();
        assert_eq!(deps, vec![None, None, Some(0), Some(1)]);
    }

    #[test]
    fn zero_length_flows_still_post_one_message() {
        let p = plan(Pattern::Sendrecv, 2, 0);
        let conns = p.connections();
        let s = Schedule::build(&p, 0, &Lanes::of(0, &conns, 1), 4096);
        assert_eq!(s.send[0].len(), 1);
        assert_eq!(s.recv[0].len(), 1);
        assert_eq!(s.send[0][0].len, 0);
    }

    #[test]
    fn fullmesh_self_block_is_a_local_copy() {
        let p = plan(Pattern::Fullmesh, 3, 3000);
        let conns = p.connections();
        let s = Schedule::build(&p, 1, &Lanes::of(1, &conns, 1), 512);
        assert_eq!(s.local.len(), 1);
        assert_eq!(s.recv_bytes, 2000);
    }
}
