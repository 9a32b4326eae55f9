//! One size: warm-up, the timed iterations with the data check, the byte check, and the reductions
//! over ranks into one [`SizeResult`]. With `--connect rounds` a size runs round by round
//! ([`Links`]): each round's warm-up and timed iterations on its own comms, and the size's
//! figures are the rounds' summed (an iteration's time on a rank is the sum of its rounds').

use super::links::Links;
use super::Fatal;
use crate::collectives::Collectives;
use crate::cputime::{CpuCost, CpuTime};
use crate::delivery::{self, WireProbe};
use crate::engine::progress::Delivered;
use crate::engine::{Engine, Instants};
use crate::mpi_boot::Mpi;
use crate::plan::{Iterations, Plan};
use crate::report::{PairResult, SizeResult};
use crate::stats;
use crate::topology::Topology;
use std::sync::Arc;
use std::time::Instant;

/// This rank's view of one size's timed iterations, before the reductions over ranks.
struct Sampled {
    /// Per timed iteration, microseconds.
    times: Vec<f64>,
    delivered: Delivered,
    /// [sends, receives]: the most distinct peers in flight at once.
    peers_in_flight: [f64; 2],
    cpu: CpuTime,
    cpu_window: f64,
    /// The host's counters around each stretch of timed traffic (one per round).
    wire: Vec<(delivery::Snapshot, delivery::Snapshot)>,
    wrong: u64,
    /// Per flow of the whole plan, this rank's sums over the timed iterations of the flows'
    /// completions (first `flows` entries: the receiver's), then of their first posts (the
    /// sender's), each on the clock both ends share ([`Clocks`]).
    flow_sums: Vec<f64>,
    /// When the first timed iteration started.
    first_timed: Option<Instant>,
}

impl Sampled {
    /// Adds a later round of the same size: its times to the same iterations' times.
    fn merge(&mut self, round: Sampled) {
        if self.times.is_empty() {
            self.times = round.times;
        } else {
            for (t, r) in self.times.iter_mut().zip(&round.times) {
                *t += r;
            }
        }
        self.delivered.add(&round.delivered);
        for k in 0..2 {
            self.peers_in_flight[k] = self.peers_in_flight[k].max(round.peers_in_flight[k]);
        }
        self.cpu.add(round.cpu);
        self.cpu_window += round.cpu_window;
        self.wire.extend(round.wire);
        self.wrong += round.wrong;
        if self.flow_sums.is_empty() {
            self.flow_sums = round.flow_sums;
        } else {
            for (s, r) in self.flow_sums.iter_mut().zip(&round.flow_sums) {
                *s += r;
            }
        }
        self.first_timed = self.first_timed.or(round.first_timed);
    }
}

/// What a size is measured with: the job's engine, its comms, and the counters.
pub(super) struct Bench<'a> {
    pub mpi: &'a Mpi,
    pub engine: &'a Engine,
    pub topo: &'a Topology,
    pub probe: &'a WireProbe,
    pub progress: Option<&'a indicatif::ProgressBar>,
    /// Which ranks share a kernel's monotonic clock.
    pub clocks: &'a Clocks,
}

/// Which ranks share one kernel (one boot id), and so one monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct Clocks {
    /// Per rank, its kernel's index; `None` where the boot id could not be read.
    kernel: Vec<Option<usize>>,
}

impl Clocks {
    /// From every rank's boot id (empty: unknown).
    pub fn from_boot_ids(boot_ids: &[String]) -> Clocks {
        let mut seen: Vec<&str> = Vec::new();
        let kernel = boot_ids
            .iter()
            .map(|id| {
                (!id.is_empty()).then(|| {
                    seen.iter().position(|s| *s == id.as_str()).unwrap_or_else(|| {
                        seen.push(id);
                        seen.len() - 1
                    })
                })
            })
            .collect();
        Clocks { kernel }
    }

    /// Whether ranks `a` and `b` read one monotonic clock.
    pub fn same(&self, a: usize, b: usize) -> bool {
        a == b || matches!((self.kernel.get(a), self.kernel.get(b)), (Some(Some(x)), Some(Some(y))) if x == y)
    }
}

/// Measures one size: warm-up, timed iterations with the data check, reductions over ranks.
pub(super) fn measure(
    it: &Iterations,
    bench: &Bench<'_>,
    links: &mut Links,
    plan: &Arc<Plan>,
    pattern_iter: &mut u32,
) -> Result<SizeResult, Fatal> {
    if let Some(bar) = bench.progress {
        bar.set_message(format!("size {}", tcpx_units::format_size(plan.size)));
    }
    let sampled = by_parts(it, bench, links, plan, pattern_iter).map_err(|f| f.at_size(plan.size))?;
    reduce(it, bench, plan, sampled).map_err(|f| f.at_size(plan.size))
}

/// `--warmup-once`: the `-w` untimed iterations of one size, with nothing timed (the sweep runs
/// this for every size before the first timed iteration, as nccl-tests warms up once).
pub(super) fn warm_up(
    it: &Iterations,
    bench: &Bench<'_>,
    links: &mut Links,
    plan: &Arc<Plan>,
    pattern_iter: &mut u32,
) -> Result<(), Fatal> {
    let untimed = Iterations { iters: 0, ..*it };
    by_parts(&untimed, bench, links, plan, pattern_iter).map(|_| ())
}

/// The size's parts one after another (its rounds with `--connect rounds`, else the whole
/// plan), each on its own comms ([`Links::open`]), summed.
fn by_parts(
    it: &Iterations,
    bench: &Bench<'_>,
    links: &mut Links,
    plan: &Arc<Plan>,
    pattern_iter: &mut u32,
) -> Result<Sampled, Fatal> {
    let engine = bench.engine;
    let mut total: Option<Sampled> = None;
    for round in links.order(plan) {
        let part = links.part(plan, round);
        links.open(engine, bench.mpi, round, part.plan.connections())?;
        engine.prepare(part.plan.clone()).map_err(Fatal::Here)?;
        let mut s = iterate(it, bench.mpi, engine, bench.probe, pattern_iter, bench.progress)?;
        links.sample();
        if let Some(t) = s.first_timed {
            links.timed_start(t);
        }
        let n = plan.flows.len();
        s.flow_sums = vec![0.0; 2 * n];
        // Both ends of a flow on one kernel: its monotonic clock; else each end's time since
        // its own start of the iteration (one barrier apart).
        let instant = |flow: usize, t: Instants| {
            let f = &plan.flows[flow];
            let rank = |e: usize| bench.topo.endpoints[e].rank;
            if bench.clocks.same(rank(f.src), rank(f.dst)) {
                t.monotonic
            } else {
                t.since_start
            }
        };
        for totals in engine.totals().map_err(Fatal::Here)? {
            for (flow, t) in totals.flow_done {
                let whole = part.whole_index[flow as usize] as usize;
                s.flow_sums[whole] += instant(whole, t);
            }
            for (flow, t) in totals.flow_posted {
                let whole = part.whole_index[flow as usize] as usize;
                s.flow_sums[n + whole] += instant(whole, t);
            }
        }
        match &mut total {
            Some(t) => t.merge(s),
            None => total = Some(s),
        }
    }
    Ok(total.expect("a plan has at least one part"))
}

/// Warm-up and timed iterations of the prepared size on this rank.
fn iterate(
    it: &Iterations,
    mpi: &Mpi,
    engine: &Engine,
    probe: &WireProbe,
    pattern_iter: &mut u32,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<Sampled, Fatal> {
    let mut s = Sampled {
        times: Vec::with_capacity(it.iters),
        delivered: Delivered::default(),
        peers_in_flight: [0.0f64; 2],
        cpu: CpuTime::default(),
        cpu_window: 0.0,
        wire: Vec::new(),
        wrong: 0,
        flow_sums: Vec::new(),
        first_timed: None,
    };
    let mut wire_before = None;
    for i in 0..it.warmup + it.iters {
        // A signal is ending the process: move no more data while the signal thread writes.
        mpi.hold_if_ending(None);
        let timed = i >= it.warmup;
        if i == it.warmup {
            // Every rank of the host is done with the warm-up before its counters are read.
            engine.meet(mpi, "barrier after the warm-up").map_err(Fatal::Stalled)?;
            wire_before = Some(probe.snapshot());
            s.first_timed = Some(Instant::now());
        }
        *pattern_iter = pattern_iter.wrapping_add(1);
        if it.check || i == 0 {
            engine.fill(*pattern_iter).map_err(Fatal::Here)?;
        }
        let one = engine.run(mpi, timed).map_err(|e| {
            if engine.shared().stalled.load(std::sync::atomic::Ordering::Relaxed) {
                Fatal::Stalled(e)
            } else {
                Fatal::Here(e)
            }
        })?;
        if timed {
            s.times.push(one.elapsed.as_secs_f64() * 1e6);
            s.delivered.add(&one.delivered);
            s.peers_in_flight[0] = s.peers_in_flight[0].max(f64::from(one.peers_in_flight.0));
            s.peers_in_flight[1] = s.peers_in_flight[1].max(f64::from(one.peers_in_flight.1));
            s.cpu.add(one.cpu);
            s.cpu_window += one.window.as_secs_f64();
            if it.check {
                s.wrong += engine.verify(*pattern_iter).map_err(Fatal::Here)?;
            }
        }
        if let Some(bar) = progress {
            bar.inc(1);
        }
    }
    if let Some(before) = wire_before {
        // The host's counters are read once every rank on it has its last byte: a rank whose
        // own iterations ended first must not read while others still receive.
        engine
            .meet(mpi, "barrier after the timed iterations")
            .map_err(Fatal::Stalled)?;
        s.wire.push((before, probe.snapshot()));
    }
    Ok(s)
}

/// Reductions over ranks, the byte check, and the size's result.
fn reduce(it: &Iterations, bench: &Bench<'_>, plan: &Plan, s: Sampled) -> Result<SizeResult, Fatal> {
    let Bench {
        mpi,
        engine,
        topo,
        probe,
        ..
    } = *bench;
    // Every rank is here before the reductions, which have no deadline of their own.
    engine
        .meet(mpi, "barrier before the reductions")
        .map_err(Fatal::Stalled)?;
    // Each collective its own phase, so that a watchdog names the one that stalls (512 ranks
    // on 32 cores: docs/runs/h200x2-20261128-issue42).
    engine.phase("reductions: iteration times");
    let all = mpi.gather_f64(&s.times);
    let samples_us = tcpx_units::reduce_each_iteration(&all, it.iters, it.iteration_reduction);
    let everyone = mpi.gather_f64(&s.peers_in_flight);
    let peer_max = |k: usize| everyone.iter().skip(k).step_by(2).fold(0.0f64, |a, &b| a.max(b)) as u32;
    let peers_in_flight = (peer_max(0), peer_max(1));
    let cpu = CpuCost::from_ranks(
        &mpi.gather_f64(&CpuCost::local(s.cpu, s.cpu_window)),
        plan.network_bytes() * it.iters as u64,
    );
    let mut counters = [s.wrong];
    mpi.sum_u64(&mut counters);
    let [wrong] = counters;
    let mut sums = s.delivered.to_array();
    mpi.sum_u64(&mut sums);
    let delivered = Delivered::from_array(sums);
    engine.phase("reductions: interface counters");
    let (wire, tcp) = probe.exchange(mpi, topo, &s.wire);
    let mut flow_sums = s.flow_sums;
    engine.phase("reductions: pair times");
    mpi.sum_f64(&mut flow_sums);
    engine.phase("reductions: the byte check");

    let mut bytes = delivery::check(plan, topo, it.iters as u64, &delivered, wire).map_err(Fatal::Everywhere)?;
    if it.check && wrong == 0 {
        bytes.witnessed_by_data_check(plan.network_bytes());
    }
    if probe.devmem_required {
        let errors = bytes.devmem_errors();
        if !errors.is_empty() {
            return Err(Fatal::Everywhere(format!("size {}: {}", plan.size, errors.join("; "))));
        }
    }
    let stats = stats::summarize(&samples_us);
    // nccl-tests' -a: each rank's mean time over the iterations, then reduced over ranks.
    let time_us = tcpx_units::reduce(&tcpx_units::rank_means(&all, it.iters), it.average);
    let algbw = tcpx_units::gbps(plan.size, time_us);
    let factor = plan.busbw_factor();
    Ok(SizeResult {
        size_bytes: plan.size,
        count: plan.size / 4,
        iters: it.iters,
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * factor,
        wrong: it.check.then_some(wrong),
        stats,
        bytes_planned: plan.network_bytes(),
        bytes,
        samples_us,
        busbw_factor: factor,
        netbw_gbps: algbw * plan.netbw_factor(),
        peers_in_flight,
        cpu,
        rank_samples_us: all,
        pairs: pair_results(plan, topo, &flow_sums, it.iters),
        tcp,
        nccl: None,
    })
}

/// The link matrix: per directed network pair, bytes per iteration and its mean time, from the
/// sender's first post of the pair's first flow to the receiver's last byte of its last flow
/// (`flow_sums`: the flows' summed completions, then their summed first posts, as
/// [`Sampled::flow_sums`]). The time includes any wait in the receiver's queue; no byte crosses
/// the link before it is posted, so it is never shorter than the link's time for the bytes
/// (but for a clock error across kernels: the two ends' starts of an iteration are one barrier
/// apart).
pub(super) fn pair_results(plan: &Plan, topo: &Topology, flow_sums: &[f64], iters: usize) -> Vec<PairResult> {
    let n = plan.flows.len();
    // (pair, bytes, earliest post, latest completion), mean seconds on the pair's clock.
    let mut pairs: Vec<((usize, usize), u64, f64, f64)> = Vec::new();
    for (i, f) in plan.flows.iter().enumerate().filter(|(_, f)| !f.is_local()) {
        let done = flow_sums[i] / iters as f64;
        let posted = flow_sums[n + i] / iters as f64;
        match pairs.iter_mut().find(|p| p.0 == (f.src, f.dst)) {
            Some(p) => {
                p.1 += f.len;
                p.2 = p.2.min(posted);
                p.3 = p.3.max(done);
            }
            None => pairs.push(((f.src, f.dst), f.len, posted, done)),
        }
    }
    pairs
        .into_iter()
        .map(|((src, dst), bytes, posted, done)| {
            let (s, d) = (&topo.endpoints[src], &topo.endpoints[dst]);
            let time_us = (done - posted).max(0.0) * 1e6;
            PairResult {
                src_rank: s.rank,
                src_gpu: s.gpu,
                src_host: topo.hostnames[s.rank].clone(),
                dst_rank: d.rank,
                dst_gpu: d.gpu,
                dst_host: topo.hostnames[d.rank].clone(),
                bytes,
                time_us,
                gbps: tcpx_units::gbps(bytes, time_us),
                link_gbps: None,
                above_link: false,
                impossible: false,
            }
        })
        .collect()
}
