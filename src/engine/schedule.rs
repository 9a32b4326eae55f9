//! Per-endpoint post sequences derived from the plan.
//!
//! Both sides of a connection walk the same flows in the same order and split them into the same
//! chunks, so sender and receiver agree on every post without exchanging a byte: flows from `a`
//! to `b` are concatenated in plan order, chunk `j` of that concatenation goes to channel
//! `j % channels`. Everything here is computed before the clock starts; the hot path only walks
//! these vectors.
//!
//! Registrations: an endpoint's buffer is registered in segments of at most `segment` bytes (an
//! ABI v7/v8 `regMr` takes an `int` size, so a 2 GiB buffer needs two registrations). Every
//! request must lie inside one registration, so a flow is cut where either side's range crosses
//! a segment boundary, besides every `chunk` bytes. Both sides know both offsets (the plan is
//! global), so they still agree on every cut.

use crate::plan::{Lanes, Plan};
use std::collections::HashMap;

/// One `isend` of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOp {
    pub off: u64,
    pub len: u64,
    /// Index of the registration (buffer segment) the range lies in.
    pub reg: u32,
    /// Receive slots `first..=last` that must have completed before this chunk may be sent (ring
    /// forwarding: the slots whose bytes it forwards).
    pub dep: Option<(u32, u32)>,
    /// Global index of the flow this chunk belongs to (its first post starts the pair's time).
    pub flow: u32,
    pub round: u32,
}

/// One `irecv` of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvOp {
    pub off: u64,
    pub len: u64,
    /// Index of the registration (buffer segment) the range lies in.
    pub reg: u32,
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

/// The `--max-peers` round an op belongs to (sends and receives alike).
pub trait HasRound {
    fn round(&self) -> u32;
}

impl HasRound for SendOp {
    fn round(&self) -> u32 {
        self.round
    }
}

impl HasRound for RecvOp {
    fn round(&self) -> u32 {
        self.round
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

/// The pieces `(flow offset, length)` a flow is posted in: every `chunk` bytes from the flow's
/// start, and wherever the source range (at `src_off`) or the destination range (at `dst_off`)
/// crosses a multiple of `segment`. A zero-length flow is one zero-length piece.
fn pieces(len: u64, chunk: u64, segment: u64, src_off: u64, dst_off: u64) -> Vec<(u64, u64)> {
    let next_boundary = |base: u64, pos: u64| {
        let at = base + pos;
        (at / segment + 1).saturating_mul(segment) - base
    };
    let mut out = Vec::with_capacity(len.div_ceil(chunk).max(1) as usize);
    let mut pos = 0;
    loop {
        let end = ((pos / chunk + 1) * chunk)
            .min(next_boundary(src_off, pos))
            .min(next_boundary(dst_off, pos))
            .min(len);
        out.push((pos, end - pos));
        pos = end;
        if pos >= len {
            return out;
        }
    }
}

impl Schedule {
    /// `segment`: the registration size (a page multiple; `u64::MAX` for one registration).
    /// Time and memory in proportion to the plan's flows of `endpoint` (a held plan's: the
    /// rank's own), never to its peers times its flows.
    pub fn build(plan: &Plan, endpoint: usize, lanes: &Lanes, chunk: u64, segment: u64) -> Schedule {
        let channels = lanes.channels;
        let mut s = Schedule {
            send: vec![Vec::new(); lanes.send_peers.len() * channels],
            recv: vec![Vec::new(); lanes.recv_peers.len() * channels],
            ..Schedule::default()
        };
        s.ops_per_round = vec![0; plan.rounds()];
        // This endpoint's network flows by peer, each list in plan order (the order both ends
        // walk a pair's flows in).
        let mut incoming: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut outgoing: HashMap<usize, Vec<usize>> = HashMap::new();
        for (fi, f) in plan.flows.iter().enumerate().filter(|(_, f)| !f.is_local()) {
            if f.dst == endpoint {
                incoming.entry(f.src).or_default().push(fi);
            }
            if f.src == endpoint {
                outgoing.entry(f.dst).or_default().push(fi);
            }
        }

        // Receives first: they assign the slots that forwarded sends wait on.
        let mut first_slot_of_flow: HashMap<usize, u32> = HashMap::new();
        // Where each received range lands: (offset, length) -> flow (ring forwarding's feeders).
        let mut landing: HashMap<(u64, u64), usize> = HashMap::new();
        for (p, peer) in lanes.recv_peers.iter().enumerate() {
            let mut j = 0usize;
            for &fi in incoming.get(peer).map_or(&[][..], Vec::as_slice) {
                let f = &plan.flows[fi];
                first_slot_of_flow.insert(fi, s.recv_slots as u32);
                landing.entry((f.dst_off, f.len)).or_insert(fi);
                for (off, len) in pieces(f.len, chunk, segment, f.src_off, f.dst_off) {
                    let lane = p * channels + j % channels;
                    let op = RecvOp {
                        off: f.dst_off + off,
                        len,
                        reg: ((f.dst_off + off) / segment) as u32,
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
        for (p, peer) in lanes.send_peers.iter().enumerate() {
            let mut j = 0usize;
            for &fi in outgoing.get(peer).map_or(&[][..], Vec::as_slice) {
                let f = &plan.flows[fi];
                // Ring forwarding: the range was filled by an incoming flow of the same length,
                // whose pieces may be cut elsewhere (segment boundaries of other offsets).
                let feeder = f.forwards.then(|| {
                    let g = *landing
                        .get(&(f.src_off, f.len))
                        .expect("a forwarded range is filled by an incoming flow of the same length");
                    let first = first_slot_of_flow[&g];
                    let g = &plan.flows[g];
                    (first, pieces(g.len, chunk, segment, g.src_off, g.dst_off))
                });
                let mut fed_at = 0usize;
                for (off, len) in pieces(f.len, chunk, segment, f.src_off, f.dst_off) {
                    let lane = p * channels + j % channels;
                    // The fed pieces overlapping [off, off + len): both lists are in offset order.
                    let dep = feeder.as_ref().map(|(first, fed)| {
                        while fed_at + 1 < fed.len() && fed[fed_at].0 + fed[fed_at].1 <= off {
                            fed_at += 1;
                        }
                        let mut last = fed_at;
                        while last + 1 < fed.len() && fed[last + 1].0 < off + len {
                            last += 1;
                        }
                        (first + fed_at as u32, first + last as u32)
                    });
                    s.send[lane].push(SendOp {
                        off: f.src_off + off,
                        len,
                        reg: ((f.src_off + off) / segment) as u32,
                        dep,
                        flow: fi as u32,
                        round: f.round,
                    });
                    s.ops_per_round[f.round as usize] += 1;
                    j += 1;
                }
            }
        }
        s.add_local_copies(plan, endpoint);
        s
    }

    /// The endpoint's self-copies (fullmesh's own block).
    fn add_local_copies(&mut self, plan: &Plan, endpoint: usize) {
        let own = plan
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_local() && f.src == endpoint);
        for (fi, f) in own {
            self.local.push(LocalCopy {
                src_off: f.src_off,
                dst_off: f.dst_off,
                len: f.len,
                flow: fi as u32,
                round: f.round,
            });
            self.ops_per_round[f.round as usize] += 1;
        }
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
                let sched: Vec<Schedule> = (0..3)
                    .map(|e| Schedule::build(&p, e, &lanes[e], 4096, u64::MAX))
                    .collect();
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
        let s = Schedule::build(&p, 0, &lanes, 4096, u64::MAX);
        // 2 steps of 8192 bytes in 4096-byte chunks: the second step's chunks wait on slots 0, 1.
        let deps: Vec<Option<(u32, u32)>> = s.send[0].iter().map(|o| o.dep).collect();
        assert_eq!(deps, vec![None, None, Some((0, 0)), Some((1, 1))]);
    }

    #[test]
    fn zero_length_flows_still_post_one_message() {
        let p = plan(Pattern::Sendrecv, 2, 0);
        let conns = p.connections();
        let s = Schedule::build(&p, 0, &Lanes::of(0, &conns, 1), 4096, u64::MAX);
        assert_eq!(s.send[0].len(), 1);
        assert_eq!(s.recv[0].len(), 1);
        assert_eq!(s.send[0][0].len, 0);
    }

    #[test]
    fn fullmesh_self_block_is_a_local_copy() {
        let p = plan(Pattern::Fullmesh, 3, 3000);
        let conns = p.connections();
        let s = Schedule::build(&p, 1, &Lanes::of(1, &conns, 1), 512, u64::MAX);
        assert_eq!(s.local.len(), 1);
        assert_eq!(s.recv_bytes, 2000);
    }

    /// With registrations of `segment` bytes, every piece lies inside one segment on both sides,
    /// both sides still agree, the pieces tile each flow, and forwarded pieces wait for exactly
    /// the received pieces they overlap.
    #[test]
    fn segment_cuts_agree_and_stay_inside_one_registration() {
        let segment = 3 * 4096;
        for pattern in [Pattern::Sendrecv, Pattern::Ring, Pattern::Fullmesh] {
            for n in [2, 3, 5] {
                let p = plan(pattern, n, n as u64 * 10_000 + 7);
                let conns = p.connections();
                for (chunk, channels) in [(4096, 1), (5000, 2), (1 << 20, 3)] {
                    let lanes: Vec<Lanes> = (0..n).map(|e| Lanes::of(e, &conns, channels)).collect();
                    let sched: Vec<Schedule> = (0..n)
                        .map(|e| Schedule::build(&p, e, &lanes[e], chunk, segment))
                        .collect();
                    for &(a, b) in &conns {
                        for ch in 0..channels {
                            let sends = &sched[a].send[lanes[a].send_lane(b, ch)];
                            let recvs = &sched[b].recv[lanes[b].recv_lane(a, ch)];
                            let s_len: Vec<u64> = sends.iter().map(|o| o.len).collect();
                            let r_len: Vec<u64> = recvs.iter().map(|o| o.len).collect();
                            assert_eq!(s_len, r_len, "{pattern} n={n} {a}->{b} ch {ch}");
                            for o in sends {
                                assert!(o.len <= chunk);
                                assert!(o.len == 0 || o.off / segment == (o.off + o.len - 1) / segment, "{o:?}");
                                assert_eq!(u64::from(o.reg), o.off / segment);
                            }
                            for o in recvs {
                                assert!(o.len == 0 || o.off / segment == (o.off + o.len - 1) / segment, "{o:?}");
                                assert_eq!(u64::from(o.reg), o.off / segment);
                            }
                        }
                    }
                    for (e, s) in sched.iter().enumerate() {
                        let received: u64 = s.recv.iter().flatten().map(|o| o.len).sum();
                        let planned: u64 = p
                            .flows
                            .iter()
                            .filter(|f| f.dst == e && !f.is_local())
                            .map(|f| f.len)
                            .sum();
                        assert_eq!(received, planned, "pieces tile the flows of endpoint {e}");
                        let slots: Vec<&RecvOp> = {
                            let mut v: Vec<&RecvOp> = s.recv.iter().flatten().collect();
                            v.sort_by_key(|o| o.slot);
                            v
                        };
                        for op in s.send.iter().flatten() {
                            if let Some((first, last)) = op.dep {
                                // The waited-for slots cover the forwarded range, and no more.
                                let lo = slots[first as usize];
                                let hi = slots[last as usize];
                                assert!(lo.off <= op.off && hi.off + hi.len >= op.off + op.len, "{op:?}");
                                assert!(first == last || hi.off < op.off + op.len, "{op:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
