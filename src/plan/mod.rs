//! Traffic patterns turned into a plan: which bytes move from which endpoint buffer to which.
//!
//! Every endpoint owns one buffer. A [`Flow`] copies `len` bytes from `src`'s buffer at `src_off`
//! to `dst`'s buffer at `dst_off`; the bytes carry the data pattern of endpoint `origin` at
//! `origin_off` (see [`tcpx_gpu::pattern`]), so the receiver can verify them without knowing the route.
//! The plan is a pure function of the pattern, the topology and the size: both ends of a flow
//! derive it alike, which is what lets them agree on identical post sequences without exchanging
//! anything but plugin handles. A run's rank holds only its own endpoints' flows ([`Holder`]):
//! what it sends and receives, and their order among the job's, built in time proportional to
//! them and the job's endpoints, never to the job's flows ([`build`]); the job's sums (bytes,
//! senders, pairs, rounds) come in closed form ([`Totals`]). The whole job's plan is built only
//! where a test compares the two.

use crate::topology::Topology;
use serde::Serialize;
use std::fmt;
use std::ops::Range;
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

    /// The plan of every size as `holder` holds it (the job's sums alike on every rank), and the
    /// sizes skipped because they are smaller than one byte per endpoint. An error when no size
    /// is left.
    pub fn plans(&self, topo: &Topology, holder: &Holder) -> Result<(Vec<Arc<Plan>>, Vec<u64>), String> {
        let scope = self.scope_on(topo.nodes);
        let mut plans = Vec::new();
        let mut skipped = Vec::new();
        for &size in &self.sizes {
            let plan = Plan::build_held(holder, self.pattern, scope, self.dir, topo, size, self.max_peers)?;
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
    /// Each timed iteration alone after a barrier, or all of them back to back (`--timing`).
    pub timing: Timing,
}

/// How the timed iterations run (`--timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Timing {
    /// Every iteration starts after a barrier of every rank, and is timed alone: its time is a
    /// sample of its own, the slowest rank's start included in no other.
    #[default]
    PerIteration,
    /// The iterations run back to back from one barrier, each endpoint starting the next as its
    /// previous one completes (nccl-tests' timing: time = total / iterations); an iteration's
    /// sample is from the previous one's end on its rank to its own.
    BackToBack,
}

impl Timing {
    /// As summary.json and the table's header write it.
    pub fn name(self) -> &'static str {
        match self {
            Timing::PerIteration => "per-iteration",
            Timing::BackToBack => "back-to-back",
        }
    }
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

/// Whose flows a plan holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Holder {
    /// Every flow of the job (tests, and cross-checks of the held plans).
    Job,
    /// The flows these endpoints (one rank's) send or receive, and nothing else.
    Endpoints(Range<usize>),
}

impl Holder {
    /// Whether endpoint `e`'s own work (its fills, its local copies) is held.
    pub fn holds(&self, e: usize) -> bool {
        match self {
            Holder::Job => true,
            Holder::Endpoints(r) => r.contains(&e),
        }
    }

    /// Whether a flow from `src` to `dst` is held: one of its ends is.
    pub fn keeps(&self, src: usize, dst: usize) -> bool {
        self.holds(src) || self.holds(dst)
    }

    /// The held endpoints among the job's `n`.
    pub fn endpoints(&self, n: usize) -> Range<usize> {
        match self {
            Holder::Job => 0..n,
            Holder::Endpoints(r) => r.start.min(n)..r.end.min(n),
        }
    }
}

/// The whole job's sums of a plan, the same on every rank whatever it holds: computed from
/// the shape, in time proportional to the endpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Network bytes per iteration (local copies excluded).
    pub network_bytes: u64,
    /// Endpoints that send at least one network byte.
    pub senders: usize,
    /// Directed endpoint pairs that carry a network flow (the job's connections).
    pub links: u64,
    /// `--max-peers` rounds (at least 1).
    pub rounds: usize,
}

/// The plan for one pattern at one size, as one holder holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub pattern: Pattern,
    pub scope: Scope,
    pub dir: Direction,
    /// The size reported in the table (nccl-tests' "size"); may be rounded down so that it splits
    /// into whole per-peer blocks.
    pub size: u64,
    /// The size asked for (`-b`..`-e`), before that rounding: what a threshold the user reads as
    /// "1 MiB" is compared with.
    pub requested: u64,
    /// Whose flows and fills are here.
    pub holder: Holder,
    /// Buffer length of each endpoint of the job.
    pub buffer_len: Vec<u64>,
    /// Ranges each held endpoint fills with its own pattern (empty for the others).
    pub fills: Vec<Vec<Fill>>,
    /// The held flows, in the job's order (both ends of a pair list its flows alike).
    pub flows: Vec<Flow>,
    /// The whole job's sums.
    pub totals: Totals,
}

impl Plan {
    /// The whole job's plan (every flow). `max_peers` bounds how many distinct peers an endpoint
    /// sends to at once (fullmesh): peers are taken in shifted rounds (e+1..e+W, then
    /// e+W+1..e+2W, ...), where the window W holds `max_peers` peers: with `--scope inter-node`
    /// some shifts land on the endpoint's own node and carry nothing, so W grows by the share of
    /// shifts that do.
    pub fn build(
        pattern: Pattern,
        scope: Scope,
        dir: Direction,
        topo: &Topology,
        size: u64,
        max_peers: Option<usize>,
    ) -> Result<Plan, String> {
        Self::build_held(&Holder::Job, pattern, scope, dir, topo, size, max_peers)
    }

    /// The plan as `holder` holds it: the same flows, in the same order, as the whole job's
    /// plan has for them ([`Self::build`]), and the whole job's [`Totals`].
    pub fn build_held(
        holder: &Holder,
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
            requested: size,
            holder: holder.clone(),
            buffer_len: vec![0; n],
            fills: vec![Vec::new(); n],
            flows: Vec::new(),
            totals: Totals::default(),
        };
        match pattern {
            Pattern::Sendrecv => plan.sendrecv_flows(topo, inter)?,
            Pattern::Pairs => plan.pairs_flows(topo, inter),
            Pattern::Ring => plan.ring_flows(topo, inter)?,
            Pattern::Fullmesh => plan.fullmesh_flows(topo, inter, max_peers),
        }
        Ok(plan)
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

    /// The job's endpoints.
    pub fn endpoints(&self) -> usize {
        self.buffer_len.len()
    }

    /// True when the requested size is too small to give every peer a non-empty block (ring and
    /// fullmesh split the size by the endpoint count); such sizes are skipped, not run.
    pub fn is_degenerate(&self, requested: u64) -> bool {
        requested > 0 && self.size == 0
    }

    /// Bytes that cross the network per iteration over the whole job (local copies excluded).
    pub fn network_bytes(&self) -> u64 {
        self.totals.network_bytes
    }

    /// Endpoints of the job that send at least one network byte.
    pub fn senders(&self) -> usize {
        self.totals.senders
    }

    /// busbw / algbw: nccl-tests' factor for the operation the pattern stands for, with n the
    /// endpoints (sendrecv and pairs 1, ring = all-reduce 2(n-1)/n, fullmesh = alltoall (n-1)/n),
    /// whatever the scope, so busbw compares with nccl-tests' on the same job. With scope
    /// `inter-node`, fullmesh leaves same-node blocks out (NCCL moves them over NVLink, beside
    /// the network); [`Self::netbw_factor`] says what crossed the network.
    pub fn busbw_factor(&self) -> f64 {
        let n = self.endpoints() as f64;
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

    /// Directed endpoint pairs of the held flows that need a connection, sorted and
    /// deduplicated. This is the same for every size of a pattern, so connections are made once
    /// per run.
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
    /// How many `--max-peers` rounds the job's flows take (at least 1): the same on every rank,
    /// whatever its own flows' rounds.
    pub fn rounds(&self) -> usize {
        self.totals.rounds.max(1)
    }

    /// Rounds `rounds` alone: their flows (renumbered from round 0, so that they are timed from
    /// the part's start), and every held endpoint's fills cut to the ranges those flows send
    /// from, so that a part's iteration writes no more than it sends. Ring forwarding never
    /// spans rounds (ring has one).
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
        let mut fills = vec![Vec::new(); self.fills.len()];
        for f in flows.iter().filter(|f| !f.forwards && self.holder.holds(f.src)) {
            for fill in &self.fills[f.src] {
                let lo = fill.off.max(f.src_off);
                let hi = (fill.off + fill.len).min(f.src_off + f.len);
                if lo < hi {
                    fills[f.src].push(Fill {
                        off: lo,
                        len: hi - lo,
                        origin_off: fill.origin_off + (lo - fill.off),
                    });
                }
            }
        }
        let totals = Totals {
            rounds: rounds.len(),
            ..self.totals
        };
        RoundPlan {
            plan: Arc::new(Plan {
                fills,
                flows,
                totals,
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
    pub(crate) fn plain(src: usize, dst: usize, src_off: u64, dst_off: u64, len: u64, round: u32) -> Self {
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
    /// `connections` sorted (as [`Plan::connections`] gives them): each list of peers ascends.
    pub fn of(endpoint: usize, connections: &[(usize, usize)], channels: usize) -> Self {
        let send_peers: Vec<usize> = connections.iter().filter(|c| c.0 == endpoint).map(|c| c.1).collect();
        let mut recv_peers: Vec<usize> = connections.iter().filter(|c| c.1 == endpoint).map(|c| c.0).collect();
        debug_assert!(send_peers.is_sorted());
        recv_peers.sort_unstable();
        Self {
            send_peers,
            recv_peers,
            channels,
        }
    }

    /// The lane of `channel` to `peer` (the peers are in ascending order: a binary search).
    pub fn send_lane(&self, peer: usize, channel: usize) -> usize {
        let p = self.send_peers.binary_search(&peer).expect("peer has a send lane");
        p * self.channels + channel
    }

    /// The lane of `channel` from `peer`.
    pub fn recv_lane(&self, peer: usize, channel: usize) -> usize {
        let p = self.recv_peers.binary_search(&peer).expect("peer has a receive lane");
        p * self.channels + channel
    }
}

mod build;

#[cfg(test)]
mod tests;
