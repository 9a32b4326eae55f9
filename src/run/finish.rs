//! The run's output around the sweep: [`announce`] (the result directory and the header, before
//! any comm exists) and [`finish`] (the baseline and engine closed, the run's CPU cost, the
//! footers and the files, `summary.json` last).

use super::connect::Connected;
use super::record::{self, Record};
use super::settings::Settings;
use super::sweep::Swept;
use super::{Fatal, Job, EXIT_BAD_NODE, EXIT_MIN_BW, EXIT_OK, EXIT_WRONG_DATA};
use crate::collectives::Collectives;
use crate::cputime::{CpuCost, CpuTime};
use crate::export::{self, json::RunStatus, nccl_json, table};
use crate::mpi_boot::Mpi;
use crate::report::{BandwidthGate, Health, RunInfo, SizeResult};
use std::time::Instant;

/// Rank 0 prepares the result directory (refusing one with results in it, proving it takes a
/// file) and prints the header.
pub(super) fn announce(settings: &Settings, mpi: &Mpi, job: &Job, info: &RunInfo) -> Result<(), Fatal> {
    // The header is rank 0's longest block (a row per rank): the other ranks wait while it
    // prints, so that no line of theirs (a trace, a warning) lands inside it (tcpx_files::console).
    // The setup watchdog bounds both barriers.
    mpi.barrier();
    let printed = header(settings, job, info, mpi.rank());
    mpi.barrier();
    printed
}

fn header(settings: &Settings, job: &Job, info: &RunInfo, rank: usize) -> Result<(), Fatal> {
    if rank != 0 {
        return Ok(());
    }
    let checked = check_outputs(settings);
    if checked.is_err() {
        // Refused before anything is measured: nothing new is left, not even the claim.
        export::claim::abandon_if_new();
    }
    checked?;
    print!("{}", table::header(info));
    for s in &job.skipped {
        println!("# skipped size {s}: smaller than one byte per endpoint");
    }
    Ok(())
}

/// Every output's place proved before any data moves: the result directory, `-J` (and where it
/// lands), the node lists.
fn check_outputs(settings: &Settings) -> Result<(), Fatal> {
    if let Some(dir) = &settings.output.dir {
        // Before any data moves: a directory that cannot take the results ends the run now, and
        // its files are the run's, no other output's (-J, the node lists).
        export::probe_out_dir(dir)
            .and_then(|()| export::claim_dir_files(dir))
            .map_err(|e| Fatal::Here(e.to_string()))?;
    }
    if let Some(path) = &settings.output.nccl_json {
        nccl_json::check_destination(path).map_err(|e| Fatal::Here(e.to_string()))?;
    }
    settings
        .output
        .node_lists
        .prepare()
        .map_err(|e| Fatal::Here(e.to_string()))
}

/// Closes the baseline and the engine and writes the results; the exit status. A sweep that
/// stopped early keeps the rows it measured (written after each size), under a summary that
/// says why: `failed`, or `timeout` with every rank's account ([`record::timed_out`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    mut connected: Connected,
    swept: Swept,
    mut info: RunInfo,
    run_start: (CpuTime, Instant),
    record: &Record,
    phase: &std::cell::Cell<&'static str>,
) -> Result<i32, Fatal> {
    let (engine, mut nccl) = (connected.engine, connected.nccl);
    let Swept { results, failure } = swept;
    let rank = mpi.rank();
    let link_findings = add_link_findings(&mut info, &results, settings.verdicts);
    if let Some(b) = &nccl {
        info.nccl = Some(b.info().clone());
    }
    if let Some(fatal) = failure {
        // A signal is ending the job: this rank's error goes to rank 0 as what it saw (it
        // names the peer it blames), and the signal thread ends the process.
        mpi.hold_if_ending(fatal.message().map(|m| (phase.get(), m)));
        if let Fatal::Stalled(msg) = &fatal {
            engine.disarm_watchdog();
            return Err(record::timed_out(settings, mpi, record, msg));
        }
        let everywhere = matches!(fatal, Fatal::Everywhere(_));
        let fatal = record.fail(mpi, phase.get(), fatal);
        if rank == 0 {
            print!("{link_findings}");
            let msg = match &fatal {
                Fatal::Here(m) | Fatal::Everywhere(m) => m.clone(),
                Fatal::Reported { error, .. } => error.clone(),
                _ => "see the error printed by the failing rank".to_string(),
            };
            write_nccl_json(settings, &info, &results, Some(&msg));
        }
        if everywhere {
            let _ = engine.close(mpi);
        }
        return Err(fatal);
    }
    phase.set(super::PHASES[4]);
    record.set_phase(super::PHASES[4]);
    // Every connect of the run and the peaks over all of them (every rank got here).
    connected.links.complete(mpi, &mut connected.setup);
    info.placement.setup = Some(connected.setup);
    if let Some(b) = nccl.take() {
        info.nccl = Some(b.finish().map_err(Fatal::Here)?);
    }
    engine.close(mpi).map_err(Fatal::Here)?;
    // The whole run's CPU cost (setup, warm-up, checks and every size) per every network byte
    // it moved, warm-up included.
    let it = &settings.iterations;
    let moved = job
        .plans
        .iter()
        .map(|p| p.network_bytes() * (it.iters + it.warmup) as u64)
        .sum();
    let mine = CpuCost::local(CpuTime::now().since(run_start.0), run_start.1.elapsed().as_secs_f64());
    info.cpu = Some(CpuCost::from_ranks(&mpi.gather_f64(&mine), moved));

    info.bandwidth_gate = settings
        .min_bw
        .map(|min| BandwidthGate::judge(min, export::avg_busbw(&results)));
    let status = run_status(&info, &results);
    if rank == 0 {
        let probe_wrong = info.probe.as_ref().and_then(|p| p.wrong);
        print!("{}", table::footer(&results, info.bandwidth_gate.as_ref(), probe_wrong));
        print!("{}", table::concluded(&info.settings.pattern));
        print!("{}", table::cpu_footer(&results, info.cpu.as_ref()));
        print!("{link_findings}");
        print!(
            "{}",
            export::nodes::footer(&info.node_verdicts, settings.verdicts, no_verdict_why(&info).as_deref())
        );
        write_nccl_json(settings, &info, &results, None);
        // Said only once every file is in place.
        if let Some(dir) = record.finish(&info, &status).map_err(Fatal::Here)? {
            println!("# Results written to {}", dir.display());
        }
    }
    // Rank 0 alone holds the link matrix, and with it the node verdicts: its exit status is
    // every rank's.
    let mine = match rank {
        0 if !write_node_lists(settings, &info) => super::EXIT_ERROR,
        0 => exit_status(&status, &info),
        _ => 0,
    };
    let mut code = [mine as u64];
    mpi.sum_u64(&mut code);
    Ok(code[0] as i32)
}

/// Why a run of several nodes judged none: the probe's reason (one node, `--probe-rounds 0`,
/// sizes below 1 MiB), or the sweep's.
fn no_verdict_why(info: &RunInfo) -> Option<String> {
    let nodes = info.settings.nodes;
    if nodes < 2 || !info.node_verdicts.is_empty() {
        return None;
    }
    if let Some(w) = info.probe.as_ref().and_then(|p| p.wrong).filter(|&w| w > 0) {
        return Some(format!(
            "the probe received {w} wrong bytes, and wrong data decides no verdict"
        ));
    }
    Some(info.probe.as_ref().and_then(|p| p.skipped.clone()).unwrap_or_else(|| {
        format!(
            "no size of at least {} with flows between nodes to judge by",
            tcpx_units::format_size_label(crate::slow_nic::MIN_SIZE)
        )
    }))
}

/// summary.json's status of a run that measured every size: wrong data, unchecked (-c 0 exits
/// 0 as nccl-tests does; its footer and status say so), below `NCCL_TESTS_MIN_BW` (said in
/// summary.json too, for the gate to refuse), or ok.
fn run_status(info: &RunInfo, results: &[SizeResult]) -> RunStatus {
    if export::run_wrong(info, results).unwrap_or(0) > 0 {
        RunStatus::WrongData
    } else if info.bandwidth_gate.as_ref().is_some_and(|g| !g.passed) {
        RunStatus::BelowMinBw
    } else if results.iter().any(|r| !r.verified()) {
        RunStatus::Unchecked
    } else {
        RunStatus::Ok
    }
}

/// The exit status of a run that measured every size, from its status (wrong data first, then
/// the bandwidth gate), then a bad node.
fn exit_status(status: &RunStatus, info: &RunInfo) -> i32 {
    match status {
        RunStatus::WrongData => EXIT_WRONG_DATA,
        RunStatus::BelowMinBw => EXIT_MIN_BW,
        _ if info.node_verdicts.iter().any(|v| v.verdict == Health::Bad) => EXIT_BAD_NODE,
        _ => EXIT_OK,
    }
}

/// `--healthy-hostfile`, `--drain-list` (rank 0, after the results): false when one cannot be
/// written (its place was proved before the sweep), said on stderr; the measurements stay.
fn write_node_lists(settings: &Settings, info: &RunInfo) -> bool {
    let slots = export::nodes::slots(info.hosts.iter().map(|h| h.hostname.clone()));
    match settings
        .output
        .node_lists
        .write(&info.node_verdicts, &slots, &info.start_time)
    {
        Ok(said) => {
            print!("{said}");
            true
        }
        Err(e) => {
            eprintln!("tcpx-perf: error: {e}");
            false
        }
    }
}

/// `-J`: nccl-tests' JSON of the run (rank 0). A file that cannot be written is a warning: the
/// table is printed and the result directory still follows.
fn write_nccl_json(settings: &Settings, info: &RunInfo, results: &[SizeResult], error: Option<&str>) {
    let Some(path) = &settings.output.nccl_json else { return };
    let doc = nccl_json::document(info, results, error, &crate::report::now_rfc3339());
    match nccl_json::write(path, &doc) {
        Ok(written) => println!("# nccl-tests JSON written to {}", written.display()),
        Err(e) => eprintln!("tcpx-perf: warning: nccl-tests JSON not written: {e}"),
    }
}

/// The findings the measurements make (a slow NIC, from the link matrix and the NICs'
/// counters: [`crate::slow_nic`]; sizes stalled by TCP timeouts: [`crate::incast`]) join
/// placement's in `summary.json`, with a slow NIC's evidence in `slow_nics` and the TCP counters
/// in each size's `tcp`; their footer lines, one short line each. The node verdicts
/// ([`crate::verdict`]) are made first, from the flows and preflight's findings (the measured
/// ones name no node's fault: the verdicts read the flows themselves).
pub(super) fn add_link_findings(
    info: &mut RunInfo,
    results: &[SizeResult],
    thresholds: crate::verdict::Thresholds,
) -> String {
    info.node_verdicts = crate::verdict::of_run(info, results, None, thresholds);
    let mut lines = String::new();
    let mut slow = crate::slow_nic::find(&info.placement.rows, results);
    if info.probe.as_ref().is_some_and(|p| !p.rounds.is_empty()) {
        // The sweep's flows wait on each other: a side it finds slow stands only where the
        // probe, which measured each NIC alone, found it slow too.
        let confirmed = |s: &crate::slow_nic::SlowNic| {
            info.node_verdicts.iter().any(|v| {
                v.host == s.side.host
                    && v.slow_sides
                        .iter()
                        .any(|x| x.nic == s.side.nic && x.sending == s.side.sending)
            })
        };
        let cleared: Vec<String> = slow
            .iter()
            .filter(|s| !confirmed(s))
            .map(|s| format!("{} ({:.2})", s.side.describe(), s.share))
            .collect();
        if !cleared.is_empty() {
            lines.push_str(&format!(
                "# the sweep's slow NIC sides that the probe cleared (their flows waited on others'): {}\n",
                crate::export::nodes::shorten(&cleared, 6)
            ));
        }
        slow.retain(confirmed);
    }
    info.slow_nics = slow;
    for line in crate::link_check::lines(results) {
        lines.push_str(&line);
        lines.push('\n');
    }
    let loads: Vec<Option<f64>> = results
        .iter()
        .map(|r| crate::cost::busiest_nic_load(&info.placement.rows, r))
        .collect();
    let slow = info.slow_nics.iter().map(crate::slow_nic::SlowNic::finding);
    let measured: Vec<_> = slow
        .chain(crate::incast::finding(results, !info.slow_nics.is_empty(), &loads))
        .chain(crate::cost::finding(&info.placement.rows, results))
        .collect();
    for f in measured {
        lines.push_str(&crate::placement::dry_run::finding_line(
            &f,
            info.placement.findings_file.as_deref(),
        ));
        lines.push('\n');
        info.placement.findings.push(f);
    }
    info.placement.findings.sort_by_key(|f| f.level);
    lines
}
