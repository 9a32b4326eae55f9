//! The run's output around the sweep: [`announce`] (the result directory and the header, before
//! any comm exists) and [`finish`] (the baseline and engine closed, the run's CPU cost, the
//! footers and the files, `summary.json` last).

use super::connect::Connected;
use super::record::{self, Record};
use super::settings::Settings;
use super::sweep::Swept;
use super::{Fatal, Job, EXIT_OK, EXIT_WRONG_DATA};
use crate::collectives::Collectives;
use crate::cputime::{CpuCost, CpuTime};
use crate::export::{self, json::RunStatus, table};
use crate::mpi_boot::Mpi;
use crate::report::RunInfo;
use std::time::Instant;

/// Rank 0 prepares the result directory (refusing one with results in it, proving it takes a
/// file) and prints the header.
pub(super) fn announce(settings: &Settings, mpi: &Mpi, job: &Job, info: &RunInfo) -> Result<(), Fatal> {
    if mpi.rank() != 0 {
        return Ok(());
    }
    if let Some(dir) = &settings.output.dir {
        // Before any data moves: a directory that cannot take the results ends the run now.
        export::probe_out_dir(dir).map_err(|e| Fatal::Here(e.to_string()))?;
    }
    print!("{}", table::header(info));
    for s in &job.skipped {
        println!("# skipped size {s}: smaller than one byte per endpoint");
    }
    Ok(())
}

/// Closes the baseline and the engine and writes the results; the exit status. A sweep that
/// stopped early keeps the rows it measured (written after each size), under a summary that
/// says why: `failed`, or `timeout` with every rank's account ([`record::timed_out`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    connected: Connected,
    swept: Swept,
    mut info: RunInfo,
    run_start: (CpuTime, Instant),
    record: &Record,
) -> Result<i32, Fatal> {
    let Connected { engine, mut nccl } = connected;
    let Swept { results, failure } = swept;
    let rank = mpi.rank();
    if let Some(b) = &nccl {
        info.nccl = Some(b.info().clone());
    }
    if let Some(fatal) = failure {
        if let Fatal::Stalled(msg) = &fatal {
            engine.disarm_watchdog();
            return Err(record::timed_out(settings, mpi, record, msg));
        }
        let mut msg = match &fatal {
            Fatal::Usage(m) | Fatal::Everywhere(m) | Fatal::Here(m) | Fatal::Stalled(m) => m.clone(),
            Fatal::Reported | Fatal::TimedOut => "see the error printed by the failing rank".to_string(),
        };
        // Another rank's error that came first is the cause: rank 0's own (a peer that closed its
        // connections when it ended) is its consequence.
        if let Some((first, error)) = (rank == 0).then(|| mpi.reported_failure()).flatten() {
            if !msg.starts_with(&format!("rank {first} failed")) {
                msg = format!("rank {first} failed first: {error}; then rank 0: {msg}");
            }
        }
        let _ = record.end(&RunStatus::Failed(msg));
        if matches!(fatal, Fatal::Everywhere(_)) {
            let _ = engine.close(mpi);
        }
        return Err(fatal);
    }
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

    let wrong = export::wrong_total(&results).unwrap_or(0);
    let status = if wrong > 0 { RunStatus::WrongData } else { RunStatus::Ok };
    if rank == 0 {
        print!("{}", table::footer(&results));
        print!("{}", table::cpu_footer(&results, info.cpu.as_ref()));
        // Said only once every file is in place.
        if let Some(dir) = record.finish(&info, &status).map_err(Fatal::Here)? {
            println!("# Results written to {}", dir.display());
        }
    }
    Ok(if wrong > 0 { EXIT_WRONG_DATA } else { EXIT_OK })
}
