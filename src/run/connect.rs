//! The connect phase: the engine's workers and every comm, then the NCCL baseline's
//! communicators; rank 0 prints the setup line and the baseline's header.

use super::place::Ready;
use super::settings::Settings;
use super::vet::Resources;
use super::{agree, Fatal, Job};
use crate::baseline::NcclBaseline;
use crate::collectives::Collectives;
use crate::engine::{Engine, EngineConfig};
use crate::mpi_boot::Mpi;
use crate::placement::dry_run::SetupReport;
use crate::report::RunInfo;

/// What the sweep drives: this rank's engine, connected, and the baseline when asked for.
pub(super) struct Connected {
    pub engine: Engine,
    pub nccl: Option<NcclBaseline>,
}

/// Starts the engine and connects every comm; records the setup in `info.placement.setup`.
pub(super) fn connect(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    resources: Resources,
    placed: Ready,
) -> Result<(Connected, RunInfo), Fatal> {
    let Ready { mut info, endpoints } = placed;
    let tr = &settings.transport;
    let config = EngineConfig {
        mem: resources.mem,
        channels: tr.channels,
        window: tr.window,
        chunk: tr.chunk,
        timeout: settings.timeout,
        setup_threads: tr
            .setup_threads
            .unwrap_or_else(|| crate::placement::resources::plugin::default_setup_threads(resources.plugin.name())),
        reg_segment: resources.reg_segment,
        poll: tr.poll,
    };
    let setup_start = std::time::Instant::now();
    let engine = agree(
        mpi,
        Engine::start(
            resources.plugin,
            job.topo.clone(),
            job.connections.clone(),
            config,
            mpi.rank(),
            endpoints,
        ),
    )?;
    let timing = engine.connect(mpi, job.buffer_len).map_err(Fatal::Here)?;
    // The slowest rank's setup, from starting its workers to its last comm.
    let (threads, fds) = crate::placement::resources::limits::own_usage();
    let all = mpi.gather_f64(&[
        setup_start.elapsed().as_secs_f64(),
        timing.connect.as_secs_f64(),
        timing.threads as f64,
        threads as f64,
        fds as f64,
    ]);
    let max = |i: usize| all.iter().skip(i).step_by(5).copied().fold(0.0, f64::max);
    let each = |i: usize| all.iter().skip(i).step_by(5).map(|&x| x as u64).collect();
    let setup_report = SetupReport {
        seconds: max(0),
        connect_seconds: max(1),
        comms: info.placement.comms,
        sockets_per_node: std::mem::take(&mut info.placement.sockets_per_node),
        max_setup_threads: max(2) as usize,
        threads_after_setup: each(3),
        fds_after_setup: each(4),
    };
    if mpi.rank() == 0 {
        print!("{}", setup_report.line());
    }
    info.placement.setup = Some(setup_report);
    let nccl = match resources.nccl {
        Some(p) => Some(agree(mpi, NcclBaseline::start(p, mpi, &job.plans, settings.timeout))?),
        None => None,
    };
    if let (0, Some(b)) = (mpi.rank(), &nccl) {
        print!("{}", b.header_lines());
    }
    Ok((Connected { engine, nccl }, info))
}
