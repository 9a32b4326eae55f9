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

/// A link in one part of a size (`--connect rounds` runs a size part by part, each timed from
/// its own start): (sender endpoint or node, receiver endpoint or node and rail, part).
type Key = (u64, u64, u32);

/// A link's parts summed: bytes, endpoint pairs, seconds.
type Summed = (u64, u64, f64);

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
    /// The part of the size it ran in (0 but with `--connect rounds`).
    pub part: u32,
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
        // A node's kernel where every one of its ranks reads that one (a node of
        // `--ranks-per-node` may span two hosts).
        let mut node_kernel: Vec<Option<Option<usize>>> = vec![None; topo.nodes];
        for ep in &topo.endpoints {
            let k = kernels.get(ep.rank).copied().flatten();
            match &mut node_kernel[ep.node] {
                slot @ None => {
                    *slot = Some(k);
                    node_host[ep.node] = topo.hostnames.get(ep.rank).cloned().unwrap_or_default();
                }
                Some(seen) if *seen != k => *seen = None,
                Some(_) => {}
            }
        }
        let node_kernel = node_kernel.into_iter().map(Option::flatten).collect();
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

    /// Whether both ends of a flow from endpoint `src` to `dst` read one monotonic clock: every
    /// rank of both nodes runs on one kernel (one boot id). Else each end's time counts from its
    /// own start of the iteration (one barrier apart). Decided by the nodes, so that every flow
    /// of a NIC's or a node pair's link reads the same clock.
    fn one_clock(&self, src: usize, dst: usize) -> bool {
        let (a, b) = (self.ends[src].node as usize, self.ends[dst].node as usize);
        matches!((self.node_kernel[a], self.node_kernel[b]), (Some(x), Some(y)) if x == y)
    }

    fn key(&self, src: usize, dst: usize, part: u32) -> Key {
        let (s, d) = (self.ends[src], self.ends[dst]);
        match self.level {
            Level::Endpoint => (src as u64, (dst as u64) << 16, part),
            Level::Nic => (u64::from(s.node), (u64::from(d.node) << 16) | u64::from(d.rail), part),
            Level::Node => (u64::from(s.node), u64::from(d.node) << 16, part),
        }
    }

    /// This rank's halves of `plan`'s links: `times[i]` is held flow i's (means over the timed
    /// iterations). A flow this rank only receives gives no sent half, and the other way round.
    pub fn halves(&self, plan: &Plan, times: &[FlowTimes]) -> Halves {
        let mut sent: Vec<(Key, usize, usize, u64, f64)> = Vec::new();
        let mut received: HashMap<Key, f64> = HashMap::new();
        for (f, t) in plan.flows.iter().zip(times).filter(|(f, _)| !f.is_local()) {
            let pick = |t: (f64, f64)| if self.one_clock(f.src, f.dst) { t.0 } else { t.1 };
            let key = self.key(f.src, f.dst, t.part);
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
    /// receiver. A link's time is its time in each part of the size, summed (as the size's own
    /// time is with `--connect rounds`). A part of a link both halves of which did not arrive is
    /// left out (it cannot be timed).
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
        // Each link's parts summed.
        let mut whole: HashMap<(u64, u64), Summed> = HashMap::new();
        for ((a, b, _), l) in links
            .into_iter()
            .filter(|(_, l)| l.posted.is_finite() && l.done.is_finite())
        {
            let w = whole.entry((a, b)).or_insert((0, 0, 0.0));
            w.0 += l.bytes;
            w.1 += l.pairs;
            w.2 += (l.done - l.posted).max(0.0);
        }
        let mut keyed: Vec<((u64, u64), Summed)> = whole.into_iter().collect();
        keyed.sort_unstable_by_key(|k| k.0);
        keyed
            .into_iter()
            .map(|((a, b), (bytes, pairs, seconds))| {
                self.pair(a, b >> 16, (b & 0xffff) as u16, bytes, pairs, seconds * 1e6)
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
    /// As one message of f64 (exact below 2^53): the sent count, then 6 numbers a sent half,
    /// then 4 a received half.
    pub fn encode(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(1 + 6 * self.sent.len() + 4 * self.received.len());
        out.push(self.sent.len() as f64);
        for &((a, b, part), bytes, pairs, posted) in &self.sent {
            out.extend([a as f64, b as f64, f64::from(part), bytes as f64, pairs as f64, posted]);
        }
        for &((a, b, part), done) in &self.received {
            out.extend([a as f64, b as f64, f64::from(part), done]);
        }
        out
    }

    /// What [`Self::encode`] wrote; None for a message of another shape (a count that is not a
    /// whole number, halves cut short, a key or figure that is not a whole number where one is).
    pub fn decode(msg: &[f64]) -> Option<Halves> {
        let whole = |v: f64| (v >= 0.0 && v.fract() == 0.0 && v < 9.007_199_254_740_992e15).then_some(v as u64);
        let (&count, rest) = msg.split_first()?;
        let sent_len = usize::try_from(whole(count)?).ok()?.checked_mul(6)?;
        if rest.len() < sent_len || !(rest.len() - sent_len).is_multiple_of(4) {
            return None;
        }
        let (sent, received) = rest.split_at(sent_len);
        let key = |c: &[f64]| Some((whole(c[0])?, whole(c[1])?, u32::try_from(whole(c[2])?).ok()?));
        Some(Halves {
            sent: sent
                .chunks_exact(6)
                .map(|c| Some((key(c)?, whole(c[3])?, whole(c[4])?, c[5])))
                .collect::<Option<Vec<_>>>()?,
            received: received
                .chunks_exact(4)
                .map(|c| Some((key(c)?, c[3])))
                .collect::<Option<Vec<_>>>()?,
        })
    }
}

#[cfg(test)]
mod tests;
