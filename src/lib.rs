//! tcpx-perf: an `mpirun`-launched benchmark suite for NCCL net plugins.
//!
//! Layers, bottom up (each a module or crate of its own):
//! - `nccl-net-abi` (crate): `#[repr(C)]` plugin ABI, one struct per version.
//! - `nccl-net` (crate): loader and safe ownership types over every ABI version.
//! - [`plan`]: patterns (sendrecv, pairs, ring, fullmesh) turned into per-endpoint flows and buffers.
//! - [`engine`]: connections, the progress loop and the timed iterations.
//! - [`check`], [`stats`]: data validation and per-iteration statistics.
//! - [`report`], [`export`]: the result model and one module per output format.
//! - [`placement`]: which NIC and CPUs each endpoint uses, preflight checks, `--dry-run`.
//! - [`mpi_boot`], [`topology`]: MPI, nodes and endpoints at the edges.
//! - [`baseline`]: `--baseline nccl`, NCCL itself measured beside tcpx-perf in the same job.
//! - [`run`]: one benchmark run from parsed flags to the result directory.

pub mod baseline;
pub mod cli;
pub mod collectives;
pub mod contracts;
pub mod cputime;
pub mod delivery;
pub mod engine;
pub mod export;
pub mod mpi_boot;
pub mod placement;
pub mod plan;
pub mod report;
pub mod run;
pub mod stats;
pub mod topology;
pub mod wire;
