//! The link matrix: each link's bytes and time per size, from the halves its two ends measured.
//!
//! A link's figure is its bytes over the time from the sender's first post of them to the
//! receiver's last byte (docs/measurements.md#per-pair-figures). The sender knows the posts, the
//! receiver the deliveries, so each rank sums its own flows into halves ([`Halves`]: per link it
//! sends on, its bytes and earliest post; per link it receives on, its latest delivery) and rank
//! 0 alone gathers them and joins each link's two halves by key, once per link: a size costs a
//! rank its own flows, and rank 0 the links it writes ([`Matrix::merge`]).
//!
//! What a link is depends on the job's size ([`Level`]): a directed endpoint pair while the job
//! has at most [`LINKS_MAX`] of them; past that, a NIC's link (sender node, receiver node, the
//! receiver's NIC: the rail every byte of it crosses, [`crate::slow_nic`]'s path), and past
//! [`LINKS_MAX`] of those, a node pair. A 64 x 8 x 4 fullmesh (258048 endpoint pairs) is judged
//! per NIC (16128 links); a 512-node one (16.7 million endpoint pairs, a million NIC links) per
//! node pair (261632), so pairs.csv and links.svg stay within tens of MB (docs/scale.md).

use crate::plan::Plan;
pub use crate::report::Level;
use crate::report::PairResult;
use crate::topology::Topology;
use std::collections::HashMap;

/// The most links a size reports at a level finer than node pairs.
pub const LINKS_MAX: u64 = 65_536;

/// The finest level at which a job of `links` directed endpoint pairs, over `nodes` nodes and
/// `rails` NICs, reports at most [`LINKS_MAX`] links a size; node pairs beyond.
pub fn choose(links: u64, nodes: usize, rails: usize) -> Level {
    let node_pairs = (nodes as u64).saturating_mul(nodes as u64);
    if links <= LINKS_MAX {
        Level::Endpoint
    } else if links.min(node_pairs.saturating_mul(rails.max(1) as u64)) <= LINKS_MAX {
        Level::Nic
    } else {
        Level::Node
    }
}

/// A link: (sender endpoint or node, receiver endpoint or node and rail).
type Key = (u64, u64);

/// Who is where, as the matrix reads it: every endpoint's rank, GPU, node and rail, every
/// node's host and kernel (one monotonic clock), and the level of the job's links.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub level: Level,
    ends: Vec<End>,
    /// Host name per rank.
    rank_host: Vec<String>,
    /// Host name per node (its first rank's).
    node_host: Vec<String>,
    /// Per node, the index of its kernel (one boot id); `None` where unknown.
    node_kernel: Vec<Option<usize>>,
    rails: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
struct End {
    rank: u32,
    gpu: u32,
    node: u32,
    rail: u16,
}

/// One rank's halves of its links at one size: what it sent (bytes, endpoint pairs, earliest
/// post) and what it received (latest delivery), per link, mean seconds per iteration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Halves {
    sent: Vec<(Key, u64, u64, f64)>,
    received: Vec<(Key, f64)>,
}

/// One flow's times on this rank, as the engine summed them over the timed iterations.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowTimes {
    /// The sender's first post, seconds: on the monotonic clock, and since the rank's start of
    /// the iteration.
    pub posted: Option<(f64, f64)>,
    /// The receiver's last byte, the same two ways.
    pub done: Option<(f64, f64)>,
}

impl Matrix {
    /// `rails`: every endpoint's NIC as placement named it (`eth1`, `eth1+eth2` when spread);
    /// `kernels`: every rank's kernel index (None where its boot id is unknown); `links`: the
    /// job's directed endpoint pairs ([`crate::plan::Totals::links`]).
    pub fn new(topo: &Topology, rails: &[String], kernels: &[Option<usize>], links: u64) -> Matrix {
        let mut names: Vec<String> = Vec::new();
        let mut index: HashMap<&str, u16> = HashMap::new();
        let mut ends = Vec::with_capacity(topo.len());
        for (e, ep) in topo.endpoints.iter().enumerate() {
            let name = rails.get(e).map_or("", String::as_str);
            let rail = *index.entry(name).or_insert_with(|| {
                names.push(name.to_string());
                (names.len() - 1) as u16
            });
            ends.push(End {
                rank: ep.rank as u32,
                gpu: ep.gpu as u32,
                node: ep.node as u32,
                rail,
            });
        }
        let mut node_host = vec![String::new(); topo.nodes];
        let mut node_kernel = vec![None; topo.nodes];
        let mut seen = vec![false; topo.nodes];
        for ep in &topo.endpoints {
            if !seen[ep.node] {
                seen[ep.node] = true;
                node_host[ep.node] = topo.hostnames.get(ep.rank).cloned().unwrap_or_default();
                node_kernel[ep.node] = kernels.get(ep.rank).copied().flatten();
            }
        }
        Matrix {
            level: choose(links, topo.nodes, names.len()),
            ends,
            rank_host: topo.hostnames.clone(),
            node_host,
            node_kernel,
            rails: names,
        }
    }

    /// The same job's matrix at `level` (the probe's rounds: one pair per endpoint, always
    /// endpoint pairs).
    #[must_use]
    pub fn at(&self, level: Level) -> Matrix {
        Matrix { level, ..self.clone() }
    }

    /// Whether both ends of a flow from endpoint `src` to `dst` read one monotonic clock: their
    /// nodes run on one kernel (a node is one host, one kernel: its ranks' host identity holds
    /// the boot id). Else each end's time counts from its own start of the iteration (one barrier
    /// apart).
    fn one_clock(&self, src: usize, dst: usize) -> bool {
        let (a, b) = (self.ends[src].node as usize, self.ends[dst].node as usize);
        a == b || matches!((self.node_kernel[a], self.node_kernel[b]), (Some(x), Some(y)) if x == y)
    }

    fn key(&self, src: usize, dst: usize) -> Key {
        let (s, d) = (self.ends[src], self.ends[dst]);
        match self.level {
            Level::Endpoint => (src as u64, (dst as u64) << 16),
            Level::Nic => (u64::from(s.node), (u64::from(d.node) << 16) | u64::from(d.rail)),
            Level::Node => (u64::from(s.node), u64::from(d.node) << 16),
        }
    }

    /// This rank's halves of `plan`'s links: `times[i]` is held flow i's (means over the timed
    /// iterations). A flow this rank only receives gives no sent half, and the other way round.
    pub fn halves(&self, plan: &Plan, times: &[FlowTimes]) -> Halves {
        let mut sent: Vec<(Key, usize, usize, u64, f64)> = Vec::new();
        let mut received: HashMap<Key, f64> = HashMap::new();
        for (f, t) in plan.flows.iter().zip(times).filter(|(f, _)| !f.is_local()) {
            let pick = |t: (f64, f64)| if self.one_clock(f.src, f.dst) { t.0 } else { t.1 };
            let key = self.key(f.src, f.dst);
            // Each half from the end that measured it: a held flow's other end is another rank's.
            if let Some(p) = t.posted.filter(|_| plan.holder.holds(f.src)) {
                sent.push((key, f.src, f.dst, f.len, pick(p)));
            }
            if let Some(d) = t.done.filter(|_| plan.holder.holds(f.dst)) {
                let at = received.entry(key).or_insert(f64::NEG_INFINITY);
                *at = at.max(pick(d));
            }
        }
        // Per link: its bytes, its endpoint pairs (each counted by its sender alone) and its
        // earliest post.
        sent.sort_unstable_by_key(|a| (a.0, a.1, a.2));
        let mut out: Vec<(Key, u64, u64, f64)> = Vec::new();
        let mut last_pair = None;
        for (key, src, dst, len, posted) in sent {
            let new_pair = last_pair != Some((key, src, dst));
            last_pair = Some((key, src, dst));
            match out.last_mut() {
                Some(l) if l.0 == key => {
                    l.1 += len;
                    l.2 += u64::from(new_pair);
                    l.3 = l.3.min(posted);
                }
                _ => out.push((key, len, 1, posted)),
            }
        }
        let mut received: Vec<(Key, f64)> = received.into_iter().collect();
        received.sort_unstable_by_key(|r| r.0);
        Halves { sent: out, received }
    }

    /// Every rank's halves, joined link by link into the matrix (rank 0), ordered by sender then
    /// receiver. A link both halves of which did not arrive is left out (it cannot be timed).
    pub fn merge<'a>(&self, halves: impl IntoIterator<Item = &'a Halves>) -> Vec<PairResult> {
        #[derive(Clone, Copy)]
        struct Link {
            bytes: u64,
            pairs: u64,
            posted: f64,
            done: f64,
        }
        let mut links: HashMap<Key, Link> = HashMap::new();
        let empty = Link {
            bytes: 0,
            pairs: 0,
            posted: f64::INFINITY,
            done: f64::NEG_INFINITY,
        };
        for h in halves {
            for &(key, bytes, pairs, posted) in &h.sent {
                let l = links.entry(key).or_insert(empty);
                l.bytes += bytes;
                l.pairs += pairs;
                l.posted = l.posted.min(posted);
            }
            for &(key, done) in &h.received {
                let l = links.entry(key).or_insert(empty);
                l.done = l.done.max(done);
            }
        }
        let mut keyed: Vec<(Key, Link)> = links
            .into_iter()
            .filter(|(_, l)| l.posted.is_finite() && l.done.is_finite())
            .collect();
        keyed.sort_unstable_by_key(|k| k.0);
        keyed
            .into_iter()
            .map(|((a, b), l)| {
                let time_us = (l.done - l.posted).max(0.0) * 1e6;
                self.pair(a, b >> 16, (b & 0xffff) as u16, l.bytes, l.pairs, time_us)
            })
            .collect()
    }

    /// The figure of link (a, b, rail) at this level.
    fn pair(&self, a: u64, b: u64, rail: u16, bytes: u64, pairs: u64, time_us: f64) -> PairResult {
        let (a, b) = (a as usize, b as usize);
        // (rank, GPU) of each end where the link is an endpoint pair, the hosts and the rail.
        let (ends, src_host, dst_host, rail) = match self.level {
            Level::Endpoint => {
                let (s, d) = (self.ends[a], self.ends[b]);
                (
                    Some(((s.rank as usize, s.gpu as usize), (d.rank as usize, d.gpu as usize))),
                    &self.rank_host[s.rank as usize],
                    &self.rank_host[d.rank as usize],
                    self.rail_name(d.rail),
                )
            }
            Level::Nic => (None, &self.node_host[a], &self.node_host[b], self.rail_name(rail)),
            Level::Node => (None, &self.node_host[a], &self.node_host[b], None),
        };
        PairResult {
            src_rank: ends.map(|e| e.0 .0),
            src_gpu: ends.map(|e| e.0 .1),
            src_host: src_host.clone(),
            dst_rank: ends.map(|e| e.1 .0),
            dst_gpu: ends.map(|e| e.1 .1),
            dst_host: dst_host.clone(),
            rail,
            endpoint_pairs: pairs,
            bytes,
            time_us,
            gbps: tcpx_units::gbps(bytes, time_us),
            link_gbps: None,
            above_link: false,
            impossible: false,
        }
    }

    fn rail_name(&self, rail: u16) -> Option<String> {
        self.rails.get(rail as usize).filter(|r| !r.is_empty()).cloned()
    }
}

impl Halves {
    /// As one message of f64 (exact below 2^53): the sent count, then 5 numbers a sent half,
    /// then 3 a received half.
    pub fn encode(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(1 + 5 * self.sent.len() + 3 * self.received.len());
        out.push(self.sent.len() as f64);
        for &((a, b), bytes, pairs, posted) in &self.sent {
            out.extend([a as f64, b as f64, bytes as f64, pairs as f64, posted]);
        }
        for &((a, b), done) in &self.received {
            out.extend([a as f64, b as f64, done]);
        }
        out
    }

    /// What [`Self::encode`] wrote; None for a message of another shape.
    pub fn decode(msg: &[f64]) -> Option<Halves> {
        let (&count, rest) = msg.split_first()?;
        let sent_len = 5 * usize::try_from(count as u64).ok()?;
        if count < 0.0 || rest.len() < sent_len || !(rest.len() - sent_len).is_multiple_of(3) {
            return None;
        }
        let (sent, received) = rest.split_at(sent_len);
        Some(Halves {
            sent: sent
                .chunks_exact(5)
                .map(|c| ((c[0] as u64, c[1] as u64), c[2] as u64, c[3] as u64, c[4]))
                .collect(),
            received: received
                .chunks_exact(3)
                .map(|c| ((c[0] as u64, c[1] as u64), c[2]))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests;
