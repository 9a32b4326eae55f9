//! The sweep phase: every size measured in order (tcpx-perf, then the NCCL baseline when asked
//! for), rank 0 printing each row as it lands; a hook sees each size's result.

use super::connect::Connected;
use super::measure::{measure, warm_up, Bench};
use super::settings::Settings;
use super::{Fatal, Job};
use crate::collectives::Collectives;
use crate::delivery::WireProbe;
use crate::export::table;
use crate::mpi_boot::Mpi;
use crate::plan::Plan;
use crate::report::SizeResult;

/// What the sweep produced: every size measured, in order, and why it stopped early if it did.
pub(super) struct Swept {
    pub results: Vec<SizeResult>,
    pub failure: Option<Fatal>,
}

/// Called after each size is measured (on every rank, in the same order), before the next: the
/// run checks its pairs against the links and records it. An error stops the sweep there (the
/// size is kept).
pub(super) type AfterSize<'a> = dyn FnMut(&Plan, &mut SizeResult) -> Result<(), Fatal> + 'a;

/// Measures every size of the job in order; stops at the first failure, keeping what was measured.
pub(super) fn sweep(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    probe: &WireProbe,
    connected: &mut Connected,
    after_size: &mut AfterSize<'_>,
) -> Swept {
    let it = &settings.iterations;
    let rank = mpi.rank();
    let parts: usize = job.plans.iter().map(|p| connected.links.parts_of(p)).sum();
    let progress = progress_bar(settings, rank, parts * (it.iters + it.warmup));
    let bench = Bench {
        mpi,
        engine: &connected.engine,
        topo: &job.topo,
        probe,
        matrix: &connected.matrix,
        progress: progress.as_ref(),
    };
    let links = &mut connected.links;
    let mut results = Vec::new();
    let mut pattern_iter: u32 = 0;
    let mut failure = None;
    // --warmup-once: every size's warm-up first, then the timed sweep without any.
    let mut timed_it = *it;
    if settings.warmup_once {
        for plan in &job.plans {
            let warmed = warm_up(it, &bench, links, plan, &mut pattern_iter);
            if let Err(e) = warmed {
                return Swept {
                    results,
                    failure: Some(e),
                };
            }
        }
        timed_it.warmup = 0;
    }
    for plan in &job.plans {
        let started = std::time::Instant::now();
        let measured = measure(&timed_it, &bench, links, plan, &mut pattern_iter);
        // --baseline nccl: NCCL's figures of this size, right after tcpx-perf's.
        let measured = match (measured, connected.nccl.as_mut()) {
            (Ok(mut r), Some(b)) => b
                .measure(it, mpi, plan, r.busbw_gbps, started)
                .map_err(Fatal::Here)
                .map(|f| {
                    r.nccl = Some(f);
                    r
                }),
            (m, _) => m,
        };
        match measured {
            Ok(mut r) => {
                if results.is_empty() {
                    // Now that the first timed iteration has run: the setup line, with it.
                    links.complete(mpi, &mut connected.setup);
                    if let (0, Some(bar)) = (rank, &progress) {
                        bar.println(connected.setup.line().trim_end());
                    } else if rank == 0 {
                        print!("{}", connected.setup.line());
                    }
                }
                if rank == 0 {
                    let line = table::row(&r, &settings.sweep.pattern.to_string());
                    if let Some(bar) = &progress {
                        bar.println(line.trim_end());
                    } else {
                        println!("{}", line.trim_end());
                    }
                }
                crate::trace::trace(&format!("size {} done", plan.size));
                crate::trace::memory(&format!("size {}", plan.size));
                let after = after_size(plan, &mut r);
                results.push(r);
                if let Err(e) = after {
                    failure = Some(e);
                    break;
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    Swept { results, failure }
}

fn progress_bar(settings: &Settings, rank: usize, total: usize) -> Option<indicatif::ProgressBar> {
    if rank != 0 || !settings.output.progress {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} iterations {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}
