//! tcpx-perf: an `mpirun`-launched benchmark suite for NCCL net plugins.
//!
//! Modules, bottom up; each knows only modules listed before it (`tests/source_shape.rs`
//! checks that the imports form no circle, and that nothing below [`run`] knows the command line):
//! - crates below: `nccl-net-abi` (`#[repr(C)]` plugin ABI and the NCCL/TCPX limits), `nccl-net`
//!   (loader and safe ownership types), `tcpx-gpu` (CUDA at run time), `tcpx-plot` (SVGs),
//!   `tcpx-units` (sizes, GB/s, medians, the `-a` reduction).
//! - [`collectives`], [`topology`], [`contracts`], [`cputime`], [`wire`], [`tcp_stats`], [`stats`],
//!   [`signals`], [`blame`]: vocabulary with no dependency inside the crate: the MPI operations the layers
//!   above need, endpoints and nodes, the plugin contracts tcpx-perf keeps, CPU time, NIC
//!   counters, TCP loss counters, per-iteration statistics, SIGINT/SIGTERM turned into an event,
//!   the blame graph that names the rank which ended a run.
//! - [`mpi_boot`]: MPI itself (implements [`collectives::Collectives`]).
//! - [`plan`]: patterns turned into per-endpoint flows and buffers, the sweep's and the
//!   iterations' settings.
//! - [`placement`]: which NIC and CPUs each endpoint uses, preflight checks, `--dry-run`'s report.
//! - [`engine`]: workers, connections, the progress loop and the timed iterations.
//! - [`delivery`]: the byte check of every size (plugin sizes, unpack descriptors, NIC counters).
//! - [`cli`]: the flags and their values (the door; only [`run`] reads it).
//! - [`report`]: the result model every output is written from; [`matrix`]: the link matrix,
//!   each link's figure joined at rank 0 from the halves its two ends measured; [`slow_nic`] and [`incast`]: the
//!   findings the measurements make (a slow NIC; TCP timeouts that stalled a size); [`verdict`]:
//!   a verdict per node (healthy, suspect, bad) from them and the findings that name a node.
//! - [`baseline`]: `--baseline nccl`, NCCL itself measured beside tcpx-perf in the same job.
//! - [`export`]: one module per output format (table, CSVs, SVGs, `summary.json`), reading the
//!   result model only.
//! - [`run`]: one benchmark run: the flags typed once ([`run`]'s `settings`), then the phases
//!   plan, vet plugin, place, connect, sweep, finish.

// print!/println!/eprint!/eprintln! that never panic on a closed stdout or stderr (a pipe to
// `head`): the exit status stays the run's (see tcpx_files::console).
#[macro_use]
extern crate tcpx_files;

pub mod baseline;
pub mod blame;
pub mod cli;
pub mod clock;
pub mod collectives;
pub mod contracts;
pub mod cost;
pub mod cputime;
pub mod delivery;
pub mod engine;
pub mod export;
pub mod incast;
pub mod link_check;
pub mod matrix;
pub mod mpi_boot;
pub mod placement;
pub mod plan;
pub mod report;
pub mod run;
pub mod shaper;
pub mod signals;
pub mod slow_nic;
pub mod stats;
pub mod tcp_stats;
pub mod topology;
pub mod trace;
pub mod verdict;
pub mod wire;
