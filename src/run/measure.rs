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
use crate::matrix::{FlowTimes, Halves, Matrix};
use crate::mpi_boot::Mpi;
use crate::plan::{Iterations, Plan, Timing};
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
    /// Start signals of the timed iterations (one each per iteration; one per round back to
    /// back).
    starts: usize,
    /// The host's counters around each stretch of timed traffic (one per round).
    wire: Vec<(delivery::Snapshot, delivery::Snapshot)>,
    wrong: u64,
    /// Per held flow of the size's plan, this rank's sums over the timed iterations of its
    /// first post (where it sends it) and its last byte (where it receives it), on both clocks.
    flow_sums: Vec<FlowTimes>,
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
        self.starts += round.starts;
        self.wire.extend(round.wire);
        self.wrong += round.wrong;
        if self.flow_sums.is_empty() {
            self.flow_sums = round.flow_sums;
        } else {
            // Each flow runs in one part: the part that timed it says its times.
            for (s, r) in self.flow_sums.iter_mut().zip(&round.flow_sums) {
                if r.posted.is_some() || r.done.is_some() {
                    *s = *r;
                }
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
    /// The link matrix's layout: where each endpoint is, which clock a flow's two ends share.
    pub matrix: &'a Matrix,
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

    /// Per rank, its kernel's index (`None` where its boot id could not be read).
    pub fn kernels(&self) -> &[Option<usize>] {
        &self.kernel
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
    // How the timed iterations ran: their start signals and the time from those signals to
    // the rank's last completions (barriers between them excluded).
    crate::trace::trace(&format!(
        "size {} iterations done: {} timed from {} start(s) in {:.6} s",
        plan.size, it.iters, sampled.starts, sampled.cpu_window
    ));
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
    for round in links.order(plan, bench.mpi) {
        let part = links.part(plan, round);
        links.open(engine, bench.mpi, round, part.plan.connections())?;
        engine.prepare(part.plan.clone()).map_err(Fatal::Here)?;
        let mut s = iterate(it, bench.mpi, engine, bench.probe, pattern_iter, bench.progress)?;
        links.sample();
        if let Some(t) = s.first_timed {
            links.timed_start(t);
        }
        // Each held flow's sums over the timed iterations, where it is the whole plan's.
        s.flow_sums = vec![FlowTimes::default(); plan.flows.len()];
        let sums = |t: Instants| (t.monotonic, t.since_start);
        for totals in engine.totals().map_err(Fatal::Here)? {
            for (flow, t) in totals.flow_done {
                let f = &mut s.flow_sums[part.whole_index[flow as usize] as usize];
                (f.part, f.done) = (round as u32, Some(sums(t)));
            }
            for (flow, t) in totals.flow_posted {
                let f = &mut s.flow_sums[part.whole_index[flow as usize] as usize];
                (f.part, f.posted) = (round as u32, Some(sums(t)));
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
        starts: 0,
        wire: Vec::new(),
        wrong: 0,
        flow_sums: Vec::new(),
        first_timed: None,
    };
    let mut wire_before = None;
    let mut first = true;
    // `count` iterations from one start signal (back to back when more than one), each timed
    // one's data checked: the buffers are filled with a fresh pattern before them, so that a
    // byte an earlier iteration left is never taken for this one's.
    let mut run = |s: &mut Sampled, timed: bool, count: usize| -> Result<(), Fatal> {
        // A signal is ending the process: move no more data while the signal thread writes.
        mpi.hold_if_ending(None);
        *pattern_iter = pattern_iter.wrapping_add(1);
        if it.check || first {
            engine.fill(*pattern_iter).map_err(Fatal::Here)?;
        }
        first = false;
        let done = engine.run(mpi, timed, count).map_err(|e| {
            if engine.shared().stalled.load(std::sync::atomic::Ordering::Relaxed) {
                Fatal::Stalled(e)
            } else {
                Fatal::Here(e)
            }
        })?;
        if timed {
            s.times.extend(done.times.iter().map(|t| t.as_secs_f64() * 1e6));
            s.delivered.add(&done.delivered);
            s.peers_in_flight[0] = s.peers_in_flight[0].max(f64::from(done.peers_in_flight.0));
            s.peers_in_flight[1] = s.peers_in_flight[1].max(f64::from(done.peers_in_flight.1));
            s.cpu.add(done.cpu);
            s.cpu_window += done.window.as_secs_f64();
            s.starts += 1;
            if it.check {
                s.wrong += engine.verify(*pattern_iter).map_err(Fatal::Here)?;
            }
        }
        if let Some(bar) = progress {
            bar.inc(count as u64);
        }
        Ok(())
    };
    for _ in 0..it.warmup {
        run(&mut s, false, 1)?;
    }
    if it.iters > 0 {
        // Every rank of the host is done with the warm-up before its counters are read.
        engine.meet(mpi, "barrier after the warm-up").map_err(Fatal::Stalled)?;
        wire_before = Some(probe.snapshot());
        s.first_timed = Some(Instant::now());
        match it.timing {
            Timing::PerIteration => {
                for _ in 0..it.iters {
                    run(&mut s, true, 1)?;
                }
            }
            // nccl-tests' pace: one start, the iterations back to back, one data check after
            // the last (each iteration writes the same bytes: the last one's are checked).
            Timing::BackToBack => run(&mut s, true, it.iters)?,
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
    let arriving = delivery::arriving(plan, topo, mpi.rank());
    let exchanged = probe.exchange(mpi, topo, &s.wire, arriving);
    engine.phase("reductions: link halves to rank 0");
    let pairs = link_matrix(bench.matrix, plan, &s.flow_sums, it.iters, mpi)?;
    engine.phase("reductions: the byte check");

    let mut bytes = delivery::check(plan, it.iters as u64, &delivered, exchanged.wire, &exchanged.arriving)
        .map_err(Fatal::Everywhere)?;
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
        requested_bytes: plan.requested,
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
        pairs,
        tcp: exchanged.tcp,
        nccl: None,
    })
}

/// The link matrix of one size (rank 0; empty elsewhere): this rank's halves of its links
/// from its held flows' mean times, gathered to rank 0, which joins them once per link
/// ([`Matrix::merge`]). A link's time runs from the sender's first post of its first flow to
/// the receiver's last byte of its last flow, any wait in the receiver's queue included; no
/// byte crosses the link before it is posted, so it is never shorter than the link's time for
/// the bytes (but for a clock error across kernels: the two ends' starts of an iteration are one
/// barrier apart).
fn link_matrix(
    matrix: &Matrix,
    plan: &Plan,
    sums: &[FlowTimes],
    iters: usize,
    mpi: &Mpi,
) -> Result<Vec<PairResult>, Fatal> {
    let per_iteration = |t: (f64, f64)| (t.0 / iters as f64, t.1 / iters as f64);
    let means: Vec<FlowTimes> = sums
        .iter()
        .map(|t| FlowTimes {
            part: t.part,
            posted: t.posted.map(per_iteration),
            done: t.done.map(per_iteration),
        })
        .collect();
    let mine = matrix.halves(plan, &means).encode();
    let Some(all) = mpi.gather_f64_to_root(&mine) else {
        return Ok(Vec::new());
    };
    // A message this build did not write (never seen) loses a rank's links: an error, not a
    // thinner matrix.
    let halves = all
        .iter()
        .enumerate()
        .map(|(rank, m)| {
            Halves::decode(m)
                .ok_or_else(|| Fatal::Here(format!("rank {rank}'s halves of the link matrix are malformed")))
        })
        .collect::<Result<Vec<Halves>, Fatal>>()?;
    Ok(matrix.merge(&halves))
}
