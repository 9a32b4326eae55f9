//! The connect phase: the engine's workers and the first comms (every comm of the job, or with
//! `--connect rounds` the first round's: [`Links`]), then the NCCL baseline's communicators;
//! rank 0 prints the baseline's header (the setup line follows with the first size's row, once
//! the time to the first timed iteration is known).

use super::links::Links;
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
    /// The open comms and the account of every connect.
    pub links: Links,
    /// The first connect's figures, completed by [`Links::complete`].
    pub setup: SetupReport,
    /// The link matrix's layout (placement's NICs, the ranks' kernels).
    pub matrix: crate::matrix::Matrix,
}

/// Starts the engine and connects the first comms; records the setup in `info.placement.setup`.
pub(super) fn connect(
    settings: &Settings,
    mpi: &Mpi,
    job: &Job,
    resources: Resources,
    placed: Ready,
) -> Result<(Connected, RunInfo), Fatal> {
    let Ready {
        mut info,
        endpoints,
        matrix,
    } = placed;
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
        connects_in_flight: job.connects_in_flight,
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
    let mut links = Links::new(tr.connect, settings.rounds_per_connect(), job.buffer_len, tr.channels);
    let first = links.part(&job.plans[0], 0).plan.connections();
    let connect = links.open(&engine, mpi, 0, first)?.expect("nothing was open before");
    // The slowest rank's setup, from starting its workers to its last comm.
    let started = mpi.gather_f64(&[setup_start.elapsed().as_secs_f64()]);
    let mut setup_report = SetupReport {
        seconds: started.iter().copied().fold(0.0, f64::max),
        connect_seconds: connect.endpoint_seconds,
        comms: connect.comms,
        sockets_per_node: std::mem::take(&mut info.placement.sockets_per_node),
        max_setup_threads: connect.setup_threads,
        threads_after_setup: Vec::new(),
        fds_after_setup: Vec::new(),
        connect: String::new(),
        rounds: Vec::new(),
        connect_seconds_total: 0.0,
        first_timed_s: None,
        threads_peak: Vec::new(),
        fds_peak: Vec::new(),
    };
    links.complete(mpi, &mut setup_report);
    info.placement.setup = Some(setup_report.clone());
    let nccl = match resources.nccl {
        Some(p) => Some(agree(mpi, NcclBaseline::start(p, mpi, &job.plans, settings.timeout))?),
        None => None,
    };
    if let (0, Some(b)) = (mpi.rank(), &nccl) {
        print!("{}", b.header_lines());
    }
    Ok((
        Connected {
            engine,
            nccl,
            links,
            setup: setup_report,
            matrix,
        },
        info,
    ))
}
