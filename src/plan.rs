//! Traffic patterns turned into a plan: which bytes move from which endpoint buffer to which.
//!
//! Every endpoint owns one buffer. A [`Flow`] copies `len` bytes from `src`'s buffer at `src_off`
//! to `dst`'s buffer at `dst_off`; the bytes carry the data pattern of endpoint `origin` at
//! `origin_off` (see [`tcpx_gpu::pattern`]), so the receiver can verify them without knowing the route.
//! The plan is a pure function of the pattern, the topology and the size: every rank computes the
//! same plan, which is what lets both sides of a connection derive identical post sequences
//! without exchanging anything but plugin handles.

use crate::topology::Topology;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use tcpx_units::TimeReduction;

/// `--channels` default: the comms per peer and direction NCCL 2.28 opens on tcpx-emu (2 ring
/// channels for all-reduce, 2 p2p channels per peer), measured in
/// docs/runs/h100x2-20261125T1742Z-issue22.
pub const DEFAULT_CHANNELS: usize = 2;

/// What the sweep runs (`--pattern --scope --dir -b -e -f -i --max-peers`), typed once from the
/// flags by `crate::run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSettings {
    pub pattern: Pattern,
    /// `None`: `--scope auto`, inter-node when the job spans several nodes, else all.
    pub scope: Option<Scope>,
    pub dir: Direction,
    /// The message sizes, ascending.
    pub sizes: Vec<u64>,
    pub max_peers: Option<usize>,
}

impl SweepSettings {
    /// The scope on a job of `nodes` nodes.
    pub fn scope_on(&self, nodes: usize) -> Scope {
        match self.scope {
            Some(scope) => scope,
            None if nodes > 1 => Scope::InterNode,
            None => Scope::All,
        }
    }

    /// The plan of every size (identical on every rank), and the sizes skipped because they
    /// are smaller than one byte per endpoint. An error when no size is left.
    pub fn plans(&self, topo: &Topology) -> Result<(Vec<Arc<Plan>>, Vec<u64>), String> {
        let scope = self.scope_on(topo.nodes);
        let mut plans = Vec::new();
        let mut skipped = Vec::new();
        for &size in &self.sizes {
            let plan = Plan::build(self.pattern, scope, self.dir, topo, size, self.max_peers)?;
            if plan.is_degenerate(size) {
                skipped.push(size);
            } else {
                plans.push(Arc::new(plan));
            }
        }
        if plans.is_empty() {
            return Err(format!(
                "every size is smaller than the {} endpoints it must be split over; raise -b",
                topo.len()
            ));
        }
        Ok((plans, skipped))
    }
}

/// How each size is sampled (`-w -n -c -a`): shared by tcpx-perf's sweep and the NCCL baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iterations {
    /// Untimed iterations before the timed ones.
    pub warmup: usize,
    /// Timed iterations.
    pub iters: usize,
    /// Whether every received byte of the timed iterations is checked.
    pub check: bool,
    /// How per-rank times are reduced to one number.
    pub average: TimeReduction,
    /// How each timed iteration's per-rank times are reduced for the spread statistics
    /// (`--iter-time`): `-a`'s reduction, or the slowest rank's as nccl-tests `-I`.
    pub iteration_reduction: TimeReduction,
}

/// The traffic pattern (`--pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Endpoint e sends to e+1 and receives from e-1 (nccl-tests sendrecv).
    Sendrecv,
    /// Endpoint e exchanges with e + n/2 (GPU i <-> GPU i on two nodes).
    Pairs,
    /// The traffic of a ring all-reduce: 2(n-1) steps of size/n blocks, no arithmetic.
    Ring,
    /// All-to-all: size/n to every endpoint (nccl-tests alltoall).
    Fullmesh,
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::Sendrecv => "sendrecv",
            Pattern::Pairs => "pairs",
            Pattern::Ring => "ring",
            Pattern::Fullmesh => "fullmesh",
        })
    }
}

/// Which endpoint pairs carry traffic (`--scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    All,
    InterNode,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::All => "all",
            Scope::InterNode => "inter-node",
        })
    }
}

/// `pairs` direction (`--dir`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Uni,
    Bi,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Uni => "uni",
            Direction::Bi => "bi",
        })
    }
}

/// One contiguous copy from one endpoint's buffer to another's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flow {
    pub src: usize,
    pub dst: usize,
    pub src_off: u64,
    pub dst_off: u64,
    pub len: u64,
    /// The bytes are `pattern(origin, iter, origin_off + i)`.
    pub origin: usize,
    pub origin_off: u64,
    /// The source range is itself filled by an incoming flow during the same iteration (ring
    /// forwarding): chunk c may be sent only after chunk c of that flow has arrived.
    pub forwards: bool,
    /// Schedule round (`--max-peers`): an endpoint works on round r+1 only after its round r.
    pub round: u32,
}

impl Flow {
    /// A self-copy (fullmesh's block to itself): a local memcpy, never a network transfer.
    pub fn is_local(&self) -> bool {
        self.src == self.dst
    }
}

/// A range an endpoint fills with its own pattern before each iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fill {
    pub off: u64,
    pub len: u64,
    pub origin_off: u64,
}

/// The plan for one pattern at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub pattern: Pattern,
    pub scope: Scope,
    pub dir: Direction,
    /// The size reported in the table (nccl-tests' "size"); may be rounded down so that it splits
    /// into whole per-peer blocks.
    pub size: u64,
    /// Buffer length of each endpoint.
    pub buffer_len: Vec<u64>,
    /// Ranges each endpoint fills with its own pattern.
    pub fills: Vec<Vec<Fill>>,
    pub flows: Vec<Flow>,
}

impl Plan {
    /// Builds the plan. `max_peers` bounds how many distinct peers an endpoint sends to at once
    /// (fullmesh): peers are taken in shifted rounds (e+1..e+W, then e+W+1..e+2W, ...), where
    /// the window W holds `max_peers` peers: with `--scope inter-node` some shifts land on the
    /// endpoint's own node and carry nothing, so W grows by the share of shifts that do.
    pub fn build(
        pattern: Pattern,
        scope: Scope,
        dir: Direction,
        topo: &Topology,
        size: u64,
        max_peers: Option<usize>,
    ) -> Result<Plan, String> {
        let n = topo.len();
        Self::check_shape(pattern, scope, n, topo.nodes)?;
        let inter = scope == Scope::InterNode;
        let mut plan = Plan {
            pattern,
            scope,
            dir,
            size,
            buffer_len: vec![0; n],
            fills: vec![Vec::new(); n],
            flows: Vec::new(),
        };
        match pattern {
            Pattern::Sendrecv => plan.sendrecv_flows(topo, inter)?,
            Pattern::Pairs => plan.pairs_flows(topo, inter),
            Pattern::Ring => plan.ring_flows(topo, inter)?,
            Pattern::Fullmesh => plan.fullmesh_flows(topo, inter, max_peers),
        }
        Ok(plan)
    }

    /// Node against node: for each `(a, b)` of `pairs` (node indices), the i-th endpoint of `a`
    /// and the i-th of `b` send each other `size` bytes (the node verdicts' probe: one round of
    /// node pairs). Laid out as `pairs`: the own block first, the partner's
    /// after it. Every endpoint of a node in no pair idles.
    pub fn node_pairs(topo: &Topology, pairs: &[(usize, usize)], size: u64) -> Plan {
        let n = topo.len();
        let mut plan = Plan {
            pattern: Pattern::Pairs,
            scope: Scope::InterNode,
            dir: Direction::Bi,
            size,
            buffer_len: vec![0; n],
            fills: vec![Vec::new(); n],
            flows: Vec::new(),
        };
        let on = |node: usize| (0..n).filter(move |&e| topo.endpoints[e].node == node);
        for &(a, b) in pairs {
            for (x, y) in on(a).zip(on(b)) {
                for (src, dst) in [(x, y), (y, x)] {
                    plan.buffer_len[src] = 2 * size;
                    plan.fills[src] = vec![Fill {
                        off: 0,
                        len: size,
                        origin_off: 0,
                    }];
                    plan.flows.push(Flow::plain(src, dst, 0, size, size, 0));
                }
            }
        }
        plan
    }

    /// Whether `pattern` runs on `endpoints` endpoints over `nodes` nodes: the refusals that do
    /// not depend on where the endpoints sit (`--plan` checks a shape without building it).
    pub fn check_shape(pattern: Pattern, scope: Scope, endpoints: usize, nodes: usize) -> Result<(), String> {
        if endpoints < 2 {
            return Err(format!(
                "pattern {pattern} needs at least 2 endpoints, the job has {endpoints}; launch more ranks (mpirun -np 2) or use -g 2"
            ));
        }
        if scope == Scope::InterNode && nodes < 2 {
            return Err("--scope inter-node needs at least 2 nodes; use --scope all or --ranks-per-node".into());
        }
        if pattern == Pattern::Pairs && !endpoints.is_multiple_of(2) {
            return Err(format!(
                "pattern pairs needs an even number of endpoints, the job has {endpoints}"
            ));
        }
        Ok(())
    }

    /// The size reported and every endpoint's buffer length of `pattern` over `endpoints`
    /// endpoints at `size`: ring and fullmesh round the size down to whole blocks of
    /// size/endpoints (0: too small to split).
    pub fn sized(pattern: Pattern, endpoints: usize, size: u64) -> (u64, u64) {
        let n = endpoints as u64;
        match pattern {
            Pattern::Sendrecv | Pattern::Pairs => (size, size.saturating_mul(2)),
            // Region 0 and one region per step of 2(n-1).
            Pattern::Ring => (size / n * n, (size / n).saturating_mul(2 * (n - 1) + 1)),
            // The send half and the receive half.
            Pattern::Fullmesh => (size / n * n, (size / n * n).saturating_mul(2)),
        }
    }

    /// sendrecv: endpoint e sends to the next in the (node-interleaved with inter) order.
    fn sendrecv_flows(&mut self, topo: &Topology, inter: bool) -> Result<(), String> {
        let (n, size) = (topo.len(), self.size);
        let order = topo.order(inter)?;
        self.two_region_buffers(size);
        for (p, &src) in order.iter().enumerate() {
            let dst = order[(p + 1) % n];
            self.flows.push(Flow::plain(src, dst, 0, size, size, 0));
        }
        Ok(())
    }

    /// pairs: endpoint e with e + n/2 (the lower half only with `--dir uni`).
    fn pairs_flows(&mut self, topo: &Topology, inter: bool) {
        let (n, size) = (topo.len(), self.size);
        let node = |e: usize| topo.endpoints[e].node;
        self.two_region_buffers(size);
        for src in 0..n {
            let dst = (src + n / 2) % n;
            if (self.dir == Direction::Uni && src >= n / 2) || (inter && node(src) == node(dst)) {
                continue;
            }
            self.flows.push(Flow::plain(src, dst, 0, size, size, 0));
        }
    }

    /// ring: 2(n-1) steps of one size/n block each to the next endpoint.
    fn ring_flows(&mut self, topo: &Topology, inter: bool) -> Result<(), String> {
        let n = topo.len();
        let order = topo.order(inter)?;
        let block = self.size / n as u64;
        let buffer_len;
        (self.size, buffer_len) = Self::sized(Pattern::Ring, n, self.size);
        let steps = 2 * (n - 1);
        // Region 0 holds the endpoint's own block; step k sends region k and receives into
        // region k+1, which step k+1 forwards: the dependency chain of a ring all-reduce.
        for &e in &order {
            self.buffer_len[e] = buffer_len;
            self.fills[e].push(Fill {
                off: 0,
                len: block,
                origin_off: 0,
            });
        }
        for (p, &src) in order.iter().enumerate() {
            let dst = order[(p + 1) % n];
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
    fn fullmesh_flows(&mut self, topo: &Topology, inter: bool, max_peers: Option<usize>) {
        let n = topo.len();
        let node = |e: usize| topo.endpoints[e].node;
        let block = self.size / n as u64;
        let buffer_len;
        (self.size, buffer_len) = Self::sized(Pattern::Fullmesh, n, self.size);
        let half = self.size;
        for e in 0..n {
            self.buffer_len[e] = buffer_len;
            self.fills[e].push(Fill {
                off: 0,
                len: half,
                origin_off: 0,
            });
        }
        // Shifts per round: every shift is a peer with --scope all; inter-node, only those that
        // cross nodes, on average over the endpoints (the window then holds about `max_peers`
        // peers for every endpoint, sending and receiving alike, since a shift window's
        // receivers are its senders shifted).
        let shifts = n - 1;
        let peers: usize = (0..n)
            .map(|src| (1..n).filter(|s| !inter || node(src) != node((src + s) % n)).count())
            .sum();
        debug_assert_eq!(shifts, n - 1);
        let per_round = shifts_per_round(max_peers, n, peers as u128);
        for src in 0..n {
            for shift in 0..n {
                let dst = (src + shift) % n;
                if inter && node(src) == node(dst) {
                    continue;
                }
                let round = if shift == 0 {
                    0
                } else {
                    ((shift - 1) / per_round) as u32
                };
                self.flows.push(Flow::plain(
                    src,
                    dst,
                    dst as u64 * block,
                    half + src as u64 * block,
                    block,
                    round,
                ));
            }
        }
    }

    /// sendrecv / pairs: the send half [0, size) filled, the receive half [size, 2 size).
    fn two_region_buffers(&mut self, size: u64) {
        let (_, buffer_len) = Self::sized(self.pattern, self.buffer_len.len(), size);
        for e in 0..self.buffer_len.len() {
            self.buffer_len[e] = buffer_len;
            self.fills[e].push(Fill {
                off: 0,
                len: size,
                origin_off: 0,
            });
        }
    }

    /// True when the requested size is too small to give every peer a non-empty block (ring and
    /// fullmesh split the size by the endpoint count); such sizes are skipped, not run.
    pub fn is_degenerate(&self, requested: u64) -> bool {
        requested > 0 && self.size == 0
    }

    /// Bytes that cross the network per iteration (local copies excluded).
    pub fn network_bytes(&self) -> u64 {
        self.flows.iter().filter(|f| !f.is_local()).map(|f| f.len).sum()
    }

    /// Endpoints that send at least one network byte.
    pub fn senders(&self) -> usize {
        let mut seen = vec![false; self.buffer_len.len()];
        for f in self.flows.iter().filter(|f| !f.is_local() && f.len > 0) {
            seen[f.src] = true;
        }
        seen.iter().filter(|&&s| s).count()
    }

    /// busbw / algbw: nccl-tests' factor for the operation the pattern stands for, with n the
    /// endpoints (sendrecv and pairs 1, ring = all-reduce 2(n-1)/n, fullmesh = alltoall (n-1)/n),
    /// whatever the scope, so busbw compares with nccl-tests' on the same job. With scope
    /// `inter-node`, fullmesh leaves same-node blocks out (NCCL moves them over NVLink, beside
    /// the network); [`Self::netbw_factor`] says what crossed the network.
    pub fn busbw_factor(&self) -> f64 {
        let n = self.buffer_len.len() as f64;
        if self.size == 0 || n < 2.0 {
            return 0.0;
        }
        match self.pattern {
            Pattern::Sendrecv | Pattern::Pairs => 1.0,
            Pattern::Ring => 2.0 * (n - 1.0) / n,
            Pattern::Fullmesh => (n - 1.0) / n,
        }
    }

    /// netbw / algbw: network bytes sent per sending endpoint, relative to the size. Equal to
    /// [`Self::busbw_factor`] with scope `all`; smaller for fullmesh with scope `inter-node`.
    pub fn netbw_factor(&self) -> f64 {
        let senders = self.senders();
        if senders == 0 || self.size == 0 {
            return 0.0;
        }
        self.network_bytes() as f64 / senders as f64 / self.size as f64
    }

    /// Directed endpoint pairs that need a connection, sorted and deduplicated. This is the same
    /// for every size of a pattern, so connections are made once per run.
    pub fn connections(&self) -> Vec<(usize, usize)> {
        let mut pairs: Vec<(usize, usize)> = self
            .flows
            .iter()
            .filter(|f| !f.is_local())
            .map(|f| (f.src, f.dst))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }
}

/// One `--max-peers` round of a plan on its own (`--connect rounds`): its flows as round 0 of a
/// plan, the fills they send from, and where each flow sits in the whole plan.
#[derive(Debug, Clone)]
pub struct RoundPlan {
    pub plan: Arc<Plan>,
    /// Per flow of `plan`, its index in the whole plan (per-pair times are the whole plan's).
    pub whole_index: Vec<u32>,
}

impl Plan {
    /// How many `--max-peers` rounds the plan's flows take (at least 1).
    pub fn rounds(&self) -> usize {
        self.flows.iter().map(|f| f.round as usize + 1).max().unwrap_or(1)
    }

    /// Rounds `rounds` alone: their flows (renumbered from round 0, so that they are timed from
    /// the part's start), and every endpoint's fills cut to the ranges those flows send from, so
    /// that a part's iteration writes no more than it sends. Ring forwarding never spans rounds
    /// (ring has one).
    pub fn rounds_only(self: &Arc<Plan>, rounds: std::ops::Range<usize>) -> RoundPlan {
        if rounds.start == 0 && rounds.end >= self.rounds() {
            return RoundPlan {
                plan: self.clone(),
                whole_index: (0..self.flows.len() as u32).collect(),
            };
        }
        let mut whole_index = Vec::new();
        let mut flows = Vec::new();
        for (i, f) in self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| rounds.contains(&(f.round as usize)))
        {
            whole_index.push(i as u32);
            flows.push(Flow {
                round: f.round - rounds.start as u32,
                ..f.clone()
            });
        }
        let fills = self
            .fills
            .iter()
            .enumerate()
            .map(|(e, fills)| {
                let mut cut = Vec::new();
                for f in flows.iter().filter(|f| f.src == e && !f.forwards) {
                    for fill in fills {
                        let lo = fill.off.max(f.src_off);
                        let hi = (fill.off + fill.len).min(f.src_off + f.len);
                        if lo < hi {
                            cut.push(Fill {
                                off: lo,
                                len: hi - lo,
                                origin_off: fill.origin_off + (lo - fill.off),
                            });
                        }
                    }
                }
                cut
            })
            .collect();
        RoundPlan {
            plan: Arc::new(Plan {
                fills,
                flows,
                ..Plan::clone(self)
            }),
            whole_index,
        }
    }
}

/// `--connect rounds`: the consecutive `--max-peers` rounds one connect opens, so that an
/// endpoint has comms with about `connect_peers` peers at once (`--connect-peers`), at least one
/// round. Every round (and with it each connect's fixed cost: the closes, the handle exchange,
/// the barriers of its iterations) then serves that many peers' bytes.
pub fn rounds_per_connect(max_peers: Option<usize>, connect_peers: usize) -> usize {
    match max_peers {
        Some(p) if p > 0 => (connect_peers / p).max(1),
        _ => 1,
    }
}

/// Shifts per `--max-peers` round of fullmesh over `endpoints` endpoints, `peers` of whose
/// `endpoints x (endpoints - 1)` (endpoint, shift) pairs carry traffic: a window in which each
/// endpoint has about `max_peers` peers; every shift at once without a bound.
pub fn shifts_per_round(max_peers: Option<usize>, endpoints: usize, peers: u128) -> usize {
    let n = endpoints as u128;
    match max_peers {
        Some(p) if peers > 0 => (p as u128 * (n - 1) * n).div_ceil(peers).clamp(1, n) as usize,
        _ => endpoints,
    }
}

impl Flow {
    fn plain(src: usize, dst: usize, src_off: u64, dst_off: u64, len: u64, round: u32) -> Self {
        Flow {
            src,
            dst,
            src_off,
            dst_off,
            len,
            origin: src,
            origin_off: src_off,
            forwards: false,
            round,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(ranks: usize, per_node: usize) -> Topology {
        Topology::with_ranks_per_node(ranks, per_node, 1, (0..ranks).map(|r| format!("h{r}")).collect())
    }

    fn build(p: Pattern, s: Scope, t: &Topology, size: u64) -> Plan {
        Plan::build(p, s, Direction::Bi, t, size, None).unwrap()
    }

    /// Rounds on their own cover the whole plan once, each with only its own round's
    /// connections, and fill exactly the ranges they send.
    #[test]
    fn rounds_alone_cover_the_plan_once() {
        let t = topo(5, 5);
        let plan = Arc::new(Plan::build(Pattern::Fullmesh, Scope::All, Direction::Bi, &t, 5000, Some(1)).unwrap());
        assert_eq!(plan.rounds(), 4);
        let mut seen = vec![0; plan.flows.len()];
        for r in 0..plan.rounds() {
            let round = plan.rounds_only(r..r + 1);
            assert!(round.plan.flows.iter().all(|f| f.round == 0));
            for (f, &w) in round.plan.flows.iter().zip(&round.whole_index) {
                assert_eq!(
                    (f.src, f.dst, f.len),
                    (plan.flows[w as usize].src, plan.flows[w as usize].dst, f.len)
                );
                seen[w as usize] += 1;
            }
            assert_eq!(round.plan.connections().len(), 5, "one peer per endpoint in round {r}");
            for e in 0..5 {
                let filled: u64 = round.plan.fills[e].iter().map(|f| f.len).sum();
                let sent: u64 = round.plan.flows.iter().filter(|f| f.src == e).map(|f| f.len).sum();
                assert_eq!(filled, sent, "round {r} endpoint {e}");
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        let ring = Arc::new(build(Pattern::Ring, Scope::All, &topo(3, 3), 3000));
        assert!(Arc::ptr_eq(&ring.rounds_only(0..1).plan, &ring));
    }

    #[test]
    fn sendrecv_factor_is_one() {
        let plan = build(Pattern::Sendrecv, Scope::All, &topo(4, 4), 1 << 20);
        assert_eq!(plan.flows.len(), 4);
        assert_eq!(plan.flows[3].dst, 0);
        assert_eq!(plan.busbw_factor(), 1.0);
    }

    #[test]
    fn ring_factor_matches_allreduce() {
        let plan = build(Pattern::Ring, Scope::All, &topo(4, 4), 4096);
        assert!((plan.busbw_factor() - 2.0 * 3.0 / 4.0).abs() < 1e-12);
        assert_eq!(plan.flows.len(), 4 * 6);
    }

    #[test]
    fn ring_forwards_what_it_received() {
        let plan = build(Pattern::Ring, Scope::All, &topo(3, 3), 3000);
        // Step k+1 of endpoint e sends the region step k of e-1 wrote into e, with the same origin.
        for f in plan.flows.iter().filter(|f| f.forwards) {
            let feeder = plan
                .flows
                .iter()
                .find(|g| g.dst == f.src && g.dst_off == f.src_off)
                .unwrap();
            assert_eq!(feeder.origin, f.origin);
            assert_eq!(feeder.len, f.len);
        }
    }

    #[test]
    fn fullmesh_self_block_is_local_and_not_network() {
        let plan = build(Pattern::Fullmesh, Scope::All, &topo(4, 4), 4000);
        assert_eq!(plan.flows.iter().filter(|f| f.is_local()).count(), 4);
        assert_eq!(plan.network_bytes(), 4 * 3 * 1000);
        assert!((plan.busbw_factor() - 0.75).abs() < 1e-12);
    }

    #[test]
    fn inter_node_scope_keeps_nccl_tests_busbw_and_counts_network_bytes_apart() {
        let plan = build(Pattern::Fullmesh, Scope::InterNode, &topo(4, 2), 4000);
        assert!(plan.flows.iter().all(|f| f.src / 2 != f.dst / 2));
        assert!((plan.busbw_factor() - 0.75).abs() < 1e-12, "alltoall's (n-1)/n");
        assert!(
            (plan.netbw_factor() - 0.5).abs() < 1e-12,
            "2 of 4 blocks cross the network"
        );
        for p in [Pattern::Sendrecv, Pattern::Ring, Pattern::Fullmesh] {
            let all = build(p, Scope::All, &topo(4, 2), 4000);
            assert!(
                (all.busbw_factor() - all.netbw_factor()).abs() < 1e-12,
                "{p}: equal with scope all"
            );
        }
        let ring = build(Pattern::Ring, Scope::InterNode, &topo(4, 2), 4000);
        assert!(ring.flows.iter().all(|f| f.src / 2 != f.dst / 2));
    }

    #[test]
    fn pairs_uni_and_odd_counts() {
        let t = topo(4, 2);
        let plan = Plan::build(Pattern::Pairs, Scope::All, Direction::Uni, &t, 100, None).unwrap();
        assert_eq!(
            plan.flows.iter().map(|f| (f.src, f.dst)).collect::<Vec<_>>(),
            vec![(0, 2), (1, 3)]
        );
        let err = Plan::build(Pattern::Pairs, Scope::All, Direction::Bi, &topo(3, 3), 100, None).unwrap_err();
        assert!(err.contains("even number"));
    }

    #[test]
    fn max_peers_makes_shifted_rounds() {
        let plan = Plan::build(Pattern::Fullmesh, Scope::All, Direction::Bi, &topo(5, 5), 5000, Some(2)).unwrap();
        let rounds: Vec<u32> = plan.flows.iter().filter(|f| f.src == 0).map(|f| f.round).collect();
        assert_eq!(rounds, vec![0, 0, 0, 1, 1]);
    }

    #[test]
    fn max_peers_counts_only_peers_that_carry_traffic() {
        // 2 nodes x 8: each endpoint has 8 inter-node peers among 15 shifts; a bound of 8 keeps
        // them in one round instead of splitting them by shift.
        let plan = Plan::build(
            Pattern::Fullmesh,
            Scope::InterNode,
            Direction::Bi,
            &topo(16, 8),
            16 << 10,
            Some(8),
        )
        .unwrap();
        assert!(plan.flows.iter().all(|f| f.round == 0));
        // 8 nodes x 8 (56 peers of 63 shifts): rounds of 9 shifts, at most 9 peers at once for
        // any sender or receiver, 7 rounds.
        let plan = Plan::build(
            Pattern::Fullmesh,
            Scope::InterNode,
            Direction::Bi,
            &topo(64, 8),
            64 << 10,
            Some(8),
        )
        .unwrap();
        let rounds = plan.flows.iter().map(|f| f.round).max().unwrap() + 1;
        assert_eq!(rounds, 7);
        for r in 0..rounds {
            for e in 0..64 {
                let out = plan
                    .flows
                    .iter()
                    .filter(|f| f.round == r && f.src == e && !f.is_local())
                    .count();
                let inn = plan
                    .flows
                    .iter()
                    .filter(|f| f.round == r && f.dst == e && !f.is_local())
                    .count();
                assert!(out <= 9 && inn <= 9, "round {r} endpoint {e}: {out} out, {inn} in");
            }
        }
    }

    #[test]
    fn single_endpoint_is_refused() {
        let err = Plan::build(Pattern::Sendrecv, Scope::All, Direction::Bi, &topo(1, 1), 8, None).unwrap_err();
        assert!(err.contains("at least 2 endpoints"));
    }
}
