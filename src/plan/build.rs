//! Each pattern's flows as one holder holds them, and the job's [`Totals`] in closed form.
//!
//! Every pattern walks its flows in one order, the job's: (sender position, step) for sendrecv,
//! pairs and ring, (sender, shift) for fullmesh. A holder walks only the part of that order its
//! endpoints touch (the positions or (sender, shift) pairs of its flows, found from its own
//! endpoints), so a rank's plan costs its own flows and the job's endpoints, and both ends of a
//! pair list the pair's flows in the same order without either building the other's.

use super::{shifts_per_round, Fill, Flow, Pattern, Plan, Totals};
use crate::topology::Topology;

impl Plan {
    /// Node to node: for each `(a, b)` of `directed` (node indices), the i-th endpoint of `a`
    /// sends the i-th of `b` `size` bytes (the node verdicts' probe: a round of node pairs, one
    /// way or both). Laid out as `pairs`: the own block first, the partner's after it, on both
    /// ends. Every endpoint of a node in no pair idles.
    pub fn node_pairs(topo: &Topology, directed: &[(usize, usize)], size: u64, holder: &super::Holder) -> Plan {
        let n = topo.len();
        let mut plan = Plan {
            pattern: Pattern::Pairs,
            scope: super::Scope::InterNode,
            dir: super::Direction::Bi,
            size,
            requested: size,
            holder: holder.clone(),
            buffer_len: vec![0; n],
            fills: vec![Vec::new(); n],
            flows: Vec::new(),
            totals: Totals {
                rounds: 1,
                ..Totals::default()
            },
        };
        let mut on: Vec<Vec<usize>> = vec![Vec::new(); topo.nodes];
        for (e, ep) in topo.endpoints.iter().enumerate() {
            on[ep.node].push(e);
        }
        for &(a, b) in directed {
            for (&src, &dst) in on[a].iter().zip(&on[b]) {
                plan.buffer_len[src] = 2 * size;
                plan.buffer_len[dst] = 2 * size;
                plan.count(size, 1);
                if size > 0 {
                    plan.totals.senders += 1;
                }
                if holder.holds(src) {
                    plan.fills[src] = vec![Fill {
                        off: 0,
                        len: size,
                        origin_off: 0,
                    }];
                }
                if holder.keeps(src, dst) {
                    plan.flows.push(Flow::plain(src, dst, 0, size, size, 0));
                }
            }
        }
        plan
    }

    /// Counts `links` directed pairs carrying `bytes` each in the job's totals.
    fn count(&mut self, bytes: u64, links: u64) {
        self.totals.network_bytes += bytes * links;
        self.totals.links += links;
    }

    /// sendrecv: endpoint e sends to the next in the (node-interleaved with inter) order.
    pub(super) fn sendrecv_flows(&mut self, topo: &Topology, inter: bool) -> Result<(), String> {
        let (n, size) = (topo.len(), self.size);
        let order = topo.order(inter)?;
        self.two_region_buffers(size);
        self.totals.rounds = 1;
        self.count(size, n as u64);
        self.totals.senders = if size > 0 { n } else { 0 };
        for (p, &src) in order.iter().enumerate() {
            let dst = order[(p + 1) % n];
            if self.holder.keeps(src, dst) {
                self.flows.push(Flow::plain(src, dst, 0, size, size, 0));
            }
        }
        Ok(())
    }

    /// pairs: endpoint e with e + n/2 (the lower half only with `--dir uni`).
    pub(super) fn pairs_flows(&mut self, topo: &Topology, inter: bool) {
        let (n, size) = (topo.len(), self.size);
        let node = |e: usize| topo.endpoints[e].node;
        self.two_region_buffers(size);
        self.totals.rounds = 1;
        for src in 0..n {
            let dst = (src + n / 2) % n;
            if (self.dir == super::Direction::Uni && src >= n / 2) || (inter && node(src) == node(dst)) {
                continue;
            }
            self.count(size, 1);
            if size > 0 {
                self.totals.senders += 1;
            }
            if self.holder.keeps(src, dst) {
                self.flows.push(Flow::plain(src, dst, 0, size, size, 0));
            }
        }
    }

    /// ring: 2(n-1) steps of one size/n block each to the next endpoint.
    pub(super) fn ring_flows(&mut self, topo: &Topology, inter: bool) -> Result<(), String> {
        let n = topo.len();
        let order = topo.order(inter)?;
        let block = self.size / n as u64;
        let buffer_len;
        (self.size, buffer_len) = Self::sized(Pattern::Ring, n, self.size);
        let steps = 2 * (n - 1);
        self.totals.rounds = 1;
        self.totals.network_bytes = (n * steps) as u64 * block;
        self.totals.links = n as u64;
        self.totals.senders = if block > 0 { n } else { 0 };
        // Region 0 holds the endpoint's own block; step k sends region k and receives into
        // region k+1, which step k+1 forwards: the dependency chain of a ring all-reduce.
        for &e in &order {
            self.buffer_len[e] = buffer_len;
            if self.holder.holds(e) {
                self.fills[e].push(Fill {
                    off: 0,
                    len: block,
                    origin_off: 0,
                });
            }
        }
        // The positions whose sender or receiver is held, in the job's order.
        let mut position = vec![0; n];
        for (p, &e) in order.iter().enumerate() {
            position[e] = p;
        }
        let mut senders: Vec<usize> = self
            .holder
            .endpoints(n)
            .flat_map(|e| [position[e], (position[e] + n - 1) % n])
            .collect();
        senders.sort_unstable();
        senders.dedup();
        for p in senders {
            let (src, dst) = (order[p], order[(p + 1) % n]);
            if !self.holder.keeps(src, dst) {
                continue;
            }
            for k in 0..steps {
                let origin = order[(p + n - k % n) % n];
                self.flows.push(Flow {
                    src,
                    dst,
                    src_off: k as u64 * block,
                    dst_off: (k as u64 + 1) * block,
                    len: block,
                    origin,
                    origin_off: 0,
                    forwards: k > 0,
                    round: 0,
                });
            }
        }
        Ok(())
    }

    /// fullmesh: size/n to every endpoint, peers in shifted rounds of `max_peers`.
    pub(super) fn fullmesh_flows(&mut self, topo: &Topology, inter: bool, max_peers: Option<usize>) {
        let n = topo.len();
        let node = |e: usize| topo.endpoints[e].node;
        let block = self.size / n as u64;
        let buffer_len;
        (self.size, buffer_len) = Self::sized(Pattern::Fullmesh, n, self.size);
        let half = self.size;
        for e in 0..n {
            self.buffer_len[e] = buffer_len;
            if self.holder.holds(e) {
                self.fills[e].push(Fill {
                    off: 0,
                    len: half,
                    origin_off: 0,
                });
            }
        }
        // Each endpoint's peers: every other endpoint, or inter-node those on other nodes.
        let mut on_node = vec![0usize; topo.nodes.max(1)];
        for e in &topo.endpoints {
            on_node[e.node] += 1;
        }
        let peers_of = |e: usize| if inter { n - on_node[node(e)] } else { n - 1 };
        let peers: u64 = (0..n).map(|e| peers_of(e) as u64).sum();
        self.count(block, peers);
        self.totals.senders = if block > 0 {
            (0..n).filter(|&e| peers_of(e) > 0).count()
        } else {
            0
        };
        // Shifts per round: every shift is a peer with --scope all; inter-node, only those that
        // cross nodes, on average over the endpoints (the window then holds about `max_peers`
        // peers for every endpoint, sending and receiving alike, since a shift window's
        // receivers are its senders shifted).
        let per_round = shifts_per_round(max_peers, n, u128::from(peers));
        let crosses = |src: usize, shift: usize| !inter || node(src) != node((src + shift) % n);
        let round_of = |shift: usize| {
            if shift == 0 {
                0
            } else {
                ((shift - 1) / per_round) as u32
            }
        };
        // The job's last round: that of the largest shift any sender's flow takes.
        let widest = (1..n).rev().find(|&s| (0..n).any(|src| crosses(src, s)));
        self.totals.rounds = widest.map_or(1, |s| round_of(s) as usize + 1);
        // (sender, shift) of every held flow, in the job's order: a held endpoint's every
        // shift as a sender, and as a receiver every sender's shift that lands on it.
        let mut walk: Vec<(usize, usize)> = self
            .holder
            .endpoints(n)
            .flat_map(|e| {
                (0..n)
                    .map(move |s| (e, s))
                    .chain((1..n).map(move |s| ((e + n - s) % n, s)))
            })
            .collect();
        walk.sort_unstable();
        walk.dedup();
        for (src, shift) in walk {
            let dst = (src + shift) % n;
            // Shift 0 is the block to itself: a local copy, with --scope all only.
            if !crosses(src, shift) {
                continue;
            }
            self.flows.push(Flow::plain(
                src,
                dst,
                dst as u64 * block,
                half + src as u64 * block,
                block,
                round_of(shift),
            ));
        }
    }

    /// sendrecv / pairs: the send half [0, size) filled, the receive half [size, 2 size).
    fn two_region_buffers(&mut self, size: u64) {
        let (_, buffer_len) = Self::sized(self.pattern, self.buffer_len.len(), size);
        for e in 0..self.buffer_len.len() {
            self.buffer_len[e] = buffer_len;
            if self.holder.holds(e) {
                self.fills[e].push(Fill {
                    off: 0,
                    len: size,
                    origin_off: 0,
                });
            }
        }
    }
}
