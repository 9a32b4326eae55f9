//! One size: warm-up, the timed iterations with the data check, the byte check, and the reductions
//! over ranks into one [`SizeResult`].

use super::*;

pub(super) fn progress_bar(cli: &Cli, rank: usize, total: usize) -> Option<indicatif::ProgressBar> {
    if rank != 0 || !cli.progress_enabled(std::io::stderr().is_terminal()) {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} iterations {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Measures one size: warm-up, timed iterations with the data check, reductions over ranks.
#[allow(clippy::too_many_arguments)]
pub(super) fn measure(
    cli: &Cli,
    mpi: &Mpi,
    engine: &Engine,
    topo: &Topology,
    probe: &WireProbe,
    plan: &Arc<Plan>,
    pattern_iter: &mut u32,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<SizeResult, Fatal> {
    let check = cli.check_enabled();
    engine.prepare(plan.clone()).map_err(Fatal::Here)?;
    if let Some(bar) = progress {
        bar.set_message(format!("size {}", tcpx_units::format_size(plan.size)));
    }
    let mut times = Vec::with_capacity(cli.iters);
    let mut delivered = Delivered::default();
    let mut peers_in_flight = [0.0f64; 2];
    let (mut cpu, mut cpu_window) = (crate::cputime::CpuTime::default(), 0.0f64);
    let mut wire_before = None;
    let mut wrong = 0u64;
    for i in 0..cli.warmup_iters + cli.iters {
        let timed = i >= cli.warmup_iters;
        if i == cli.warmup_iters {
            // Every rank of the host is done with the warm-up before its counters are read.
            mpi.barrier();
            wire_before = Some(probe.snapshot());
        }
        *pattern_iter = pattern_iter.wrapping_add(1);
        if check || i == 0 {
            engine.fill(*pattern_iter).map_err(Fatal::Here)?;
        }
        let it = engine.run(mpi, timed).map_err(|e| {
            if engine.shared().stalled.load(std::sync::atomic::Ordering::Relaxed) {
                Fatal::Stalled(e)
            } else {
                Fatal::Here(e)
            }
        })?;
        if timed {
            times.push(it.elapsed.as_secs_f64() * 1e6);
            delivered.add(&it.delivered);
            peers_in_flight[0] = peers_in_flight[0].max(it.peers_in_flight.0 as f64);
            peers_in_flight[1] = peers_in_flight[1].max(it.peers_in_flight.1 as f64);
            cpu.add(it.cpu);
            cpu_window += it.window.as_secs_f64();
            if check {
                wrong += engine.verify(*pattern_iter).map_err(Fatal::Here)?;
            }
        }
        if let Some(bar) = progress {
            bar.inc(1);
        }
    }

    // Reductions over ranks.
    let all = mpi.gather_f64(&times);
    let samples_us = tcpx_units::reduce_each_iteration(&all, cli.iters, cli.average);
    // The host's counters are read once every rank on it has its last byte: a rank whose own
    // iterations ended first must not read while others still receive.
    mpi.barrier();
    let wire_after = probe.snapshot();
    let everyone = mpi.gather_f64(&peers_in_flight);
    let peer_max = |k: usize| everyone.iter().skip(k).step_by(2).fold(0.0f64, |a, &b| a.max(b)) as u32;
    let peers_in_flight = (peer_max(0), peer_max(1));
    let cpu = CpuCost::from_ranks(
        &mpi.gather_f64(&CpuCost::local(cpu, cpu_window)),
        plan.network_bytes() * cli.iters as u64,
    );
    let mut counters = [wrong];
    mpi.sum_u64(&mut counters);
    let [wrong] = counters;
    let mut sums = delivered.to_array();
    mpi.sum_u64(&mut sums);
    let delivered = Delivered::from_array(sums);
    let wire = probe.exchange(
        mpi,
        topo,
        &wire_before.expect("at least one timed iteration"),
        &wire_after,
    );
    let mut flow_sums = vec![0.0; plan.flows.len()];
    for totals in engine.totals().map_err(Fatal::Here)? {
        for (flow, sum) in totals.flow_time_sum {
            flow_sums[flow as usize] += sum;
        }
    }
    mpi.sum_f64(&mut flow_sums);

    let bytes = delivery::check(plan, topo, cli.iters as u64, &delivered, wire).map_err(Fatal::Everywhere)?;
    if probe.devmem_required {
        let errors = bytes.devmem_errors();
        if !errors.is_empty() {
            return Err(Fatal::Everywhere(format!("size {}: {}", plan.size, errors.join("; "))));
        }
    }
    let stats = stats::summarize(&samples_us);
    // nccl-tests' -a: each rank's mean time over the iterations, then reduced over ranks.
    let time_us = tcpx_units::reduce(&tcpx_units::rank_means(&all, cli.iters), cli.average);
    let algbw = tcpx_units::gbps(plan.size, time_us);
    let factor = plan.busbw_factor();
    let netbw = algbw * plan.netbw_factor();
    let pairs = pair_results(plan, topo, &flow_sums, cli.iters);
    Ok(SizeResult {
        size_bytes: plan.size,
        count: plan.size / 4,
        iters: cli.iters,
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * factor,
        wrong: check.then_some(wrong),
        stats,
        bytes_planned: plan.network_bytes(),
        bytes,
        samples_us,
        busbw_factor: factor,
        netbw_gbps: netbw,
        peers_in_flight,
        cpu,
        rank_samples_us: all,
        pairs,
        nccl: None,
    })
}

/// The link matrix: per directed network pair, bytes per iteration and the receiver's mean time.
pub(super) fn pair_results(plan: &Plan, topo: &Topology, flow_sums: &[f64], iters: usize) -> Vec<PairResult> {
    let mut pairs: Vec<((usize, usize), u64, f64)> = Vec::new();
    for (i, f) in plan.flows.iter().enumerate().filter(|(_, f)| !f.is_local()) {
        let time = flow_sums[i] / iters as f64;
        match pairs.iter_mut().find(|p| p.0 == (f.src, f.dst)) {
            Some(p) => {
                p.1 += f.len;
                p.2 = p.2.max(time);
            }
            None => pairs.push(((f.src, f.dst), f.len, time)),
        }
    }
    pairs
        .into_iter()
        .map(|((src, dst), bytes, secs)| {
            let (s, d) = (&topo.endpoints[src], &topo.endpoints[dst]);
            let time_us = secs * 1e6;
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
            }
        })
        .collect()
}
