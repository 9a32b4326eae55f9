//! The model's inputs in closed form, for `tcpx-perf --plan`: a job of NODES x GPUS x NICS is
//! uniform (every node holds the same ranks, every rank the same endpoints, endpoints numbered
//! node-major), so an endpoint's peers depend only on its pattern, its index within its node
//! and, for pairs one way, on which half of the job it is in. Nothing here lists connections:
//! a 65536-node plan costs what a 2-node one does. `tests/resource_plan.rs` holds every count
//! equal to the counted plan ([`super::Counted`] over `Plan::build`) on small shapes.
//!
//! Fullmesh sends from endpoint `e` to `e + s` for every shift `s` in `1..n`; the shifts whose
//! destination (source) sits on another node form one interval, and a `--max-peers` round is
//! an interval of shifts (`Plan::build`): a round's peers are the overlap of two intervals. A
//! rank's figures change only at the rounds holding an interval's ends, so those rounds and
//! their neighbours are the only ones evaluated.

use super::{Layout, PeerCounts, Phase};
use crate::plan::{shifts_per_round, Direction, Pattern, Scope};
use std::collections::BTreeSet;
use std::ops::Range;

/// The most endpoints a plan takes (2^31): past it the per-endpoint figures stop meaning
/// anything for one host, and the counts would approach what a `usize` holds.
pub const MAX_ENDPOINTS: u64 = 1 << 31;

/// A uniform job: `nodes` nodes of `ranks_per_node` ranks of `gpus_per_rank` endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uniform {
    pub nodes: usize,
    pub ranks_per_node: usize,
    pub gpus_per_rank: usize,
}

impl Uniform {
    /// The shape, or one line naming the limit it crosses.
    pub fn new(nodes: usize, ranks_per_node: usize, gpus_per_rank: usize) -> Result<Uniform, String> {
        let endpoints = (nodes as u128) * (ranks_per_node as u128) * (gpus_per_rank as u128);
        if endpoints == 0 {
            return Err("a shape with no endpoints: every figure must be at least 1".into());
        }
        if endpoints > u128::from(MAX_ENDPOINTS) {
            return Err(format!(
                "{endpoints} endpoints ({nodes} nodes x {ranks_per_node} ranks x -g {gpus_per_rank}) exceed the 2^31 ({MAX_ENDPOINTS}) --plan takes: plan fewer nodes"
            ));
        }
        Ok(Uniform {
            nodes,
            ranks_per_node,
            gpus_per_rank,
        })
    }

    pub fn endpoints(&self) -> usize {
        self.nodes * self.per_node()
    }

    /// Endpoints per node.
    pub fn per_node(&self) -> usize {
        self.ranks_per_node * self.gpus_per_rank
    }

    /// The GPU index on its node of endpoint `e` (as `Topology` numbers them).
    pub fn gpu_of(&self, e: usize) -> usize {
        e % self.per_node()
    }

    /// Nodes that stand for every node: each node's figures equal one of theirs. Endpoints
    /// see the same peers at the same index within any node, except pairs one way, where the
    /// first half sends and the second receives: the first node, the node(s) holding the
    /// middle, and the last.
    pub fn representative_nodes(&self) -> Vec<usize> {
        let (n, m) = (self.endpoints(), self.per_node());
        let half = n / 2;
        let set: BTreeSet<usize> = [0, half.saturating_sub(1) / m, half / m, self.nodes - 1]
            .into_iter()
            .map(|x| x.min(self.nodes - 1))
            .collect();
        set.into_iter().collect()
    }

    /// The ranks of [`Self::representative_nodes`].
    pub fn representative_ranks(&self) -> Vec<usize> {
        self.representative_nodes()
            .into_iter()
            .flat_map(|node| self.ranks_on(node))
            .collect()
    }
}

impl Layout for Uniform {
    fn ranks(&self) -> usize {
        self.nodes * self.ranks_per_node
    }
    fn endpoints_of(&self, rank: usize) -> Range<usize> {
        rank * self.gpus_per_rank..(rank + 1) * self.gpus_per_rank
    }
    fn node_of(&self, rank: usize) -> usize {
        rank / self.ranks_per_node
    }
    fn ranks_on(&self, node: usize) -> Vec<usize> {
        (node * self.ranks_per_node..(node + 1) * self.ranks_per_node).collect()
    }
}

/// Inclusive interval of shifts.
type Shifts = (usize, usize);

fn overlap(a: Shifts, b: Shifts) -> usize {
    let (lo, hi) = (a.0.max(b.0), a.1.min(b.1));
    if hi >= lo {
        hi - lo + 1
    } else {
        0
    }
}

/// The peers of every endpoint of a [`Uniform`] job, in closed form.
#[derive(Debug, Clone)]
pub struct ShapePeers {
    pattern: Pattern,
    inter: bool,
    one_way: bool,
    /// Endpoints in all, and per node.
    n: usize,
    m: usize,
    /// `--connect rounds`: the shifts of one part (fullmesh; every other pattern is one round).
    window: Option<usize>,
}

impl ShapePeers {
    /// The peers of `pattern` on `shape`, or the plan's own refusal (`Plan::check_shape`).
    pub fn new(
        pattern: Pattern,
        scope: Scope,
        dir: Direction,
        shape: Uniform,
        max_peers: Option<usize>,
        // `--connect rounds`: only one part's comms open at a time, of this many
        // `--max-peers` rounds (`plan::rounds_per_connect`).
        rounds: Option<usize>,
    ) -> Result<ShapePeers, String> {
        let (n, m) = (shape.endpoints(), shape.per_node());
        crate::plan::Plan::check_shape(pattern, scope, n, shape.nodes)?;
        let inter = scope == Scope::InterNode;
        // (endpoint, shift) pairs that carry traffic, as `Plan::build` counts them.
        let cross = if inter { n - m } else { n - 1 };
        let window = rounds.map(|per_part| shifts_per_round(max_peers, n, n as u128 * cross as u128) * per_part.max(1));
        Ok(ShapePeers {
            pattern,
            inter,
            one_way: pattern == Pattern::Pairs && dir == Direction::Uni,
            n,
            m,
            window,
        })
    }

    /// The shifts of `phase` (every shift when all comms are open at once).
    fn shifts(&self, phase: Phase) -> Shifts {
        match (phase, self.window) {
            (Some(r), Some(w)) => (r as usize * w + 1, ((r as usize + 1) * w).min(self.n - 1)),
            _ => (1, self.n - 1),
        }
    }

    /// Fullmesh: the shifts that reach another node from (send) and into (receive) the
    /// endpoint at index `j` of its node; every shift with `--scope all`.
    fn peer_shifts(&self, j: usize) -> (Shifts, Shifts) {
        let (n, m) = (self.n, self.m);
        if self.inter {
            ((m - j, n - j - 1), (j + 1, n - m + j))
        } else {
            ((1, n - 1), (1, n - 1))
        }
    }

    /// Rounds in all under `--connect rounds`.
    fn rounds(&self, w: usize) -> usize {
        (self.n - 1).div_ceil(w)
    }
}

impl PeerCounts for ShapePeers {
    fn phases(&self, endpoints: Range<usize>) -> Vec<Phase> {
        let Some(w) = self.window else { return vec![None] };
        if self.pattern != Pattern::Fullmesh {
            return vec![Some(0)];
        }
        let last = self.rounds(w) - 1;
        let mut rounds = BTreeSet::new();
        for e in endpoints {
            let (send, recv) = self.peer_shifts(e % self.m);
            for s in [1, self.n - 1, send.0, send.1, send.1 + 1, recv.0, recv.1, recv.1 + 1] {
                let r = (s.clamp(1, self.n - 1) - 1) / w;
                rounds.extend([r.saturating_sub(1), r, (r + 1).min(last)]);
            }
        }
        rounds.into_iter().map(|r| Some(r as u32)).collect()
    }

    fn counts(&self, e: usize, phase: Phase) -> (usize, usize) {
        let half = self.n / 2;
        match self.pattern {
            Pattern::Pairs if self.one_way => (usize::from(e < half), usize::from(e >= half)),
            Pattern::Sendrecv | Pattern::Ring | Pattern::Pairs => (1, 1),
            Pattern::Fullmesh => {
                let (send, recv) = self.peer_shifts(e % self.m);
                let window = self.shifts(phase);
                (overlap(window, send), overlap(window, recv))
            }
        }
    }
}

/// Channels of a peer that carry data at `size`: a peer's bytes go in `chunk`-sized pieces
/// dealt to its channels in turn (engine/schedule.rs), so a block smaller than `channels`
/// chunks leaves channels idle, and their comms never start helpers.
pub fn active_channels(pattern: Pattern, endpoints: usize, size: u64, chunk: u64, channels: usize) -> usize {
    let n = endpoints as u64;
    let pieces = |len: u64| len.div_ceil(chunk.max(1)).max(1);
    let per_peer = match pattern {
        Pattern::Sendrecv | Pattern::Pairs => pieces(size),
        // 2(n-1) steps of one block each to the same peer.
        Pattern::Ring => (2 * (n - 1)).saturating_mul(pieces(size / n)),
        Pattern::Fullmesh => pieces(size / n),
    };
    channels.min(usize::try_from(per_peer).unwrap_or(usize::MAX))
}
