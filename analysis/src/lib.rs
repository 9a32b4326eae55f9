//! tcpx-analyze: statistical comparison of tcpx-perf and nccl-tests results
//! against baselines, a fail-closed CI regression gate, and SVG plots.
//!
//! The binary (`src/main.rs`) is a thin clap front end over this library.

// print!/println!/eprint!/eprintln! that never panic on a closed stdout or stderr (a pipe to
// `head`): the exit status stays the run's (see tcpx_files::console).
#[macro_use]
extern crate tcpx_files;

pub mod admit;
pub mod baseline;
pub mod comparable;
pub mod compare;
pub mod decision;
pub mod error;
pub mod history;
pub mod input;
pub mod model;
pub mod parse;
pub mod plot;
pub mod report;
pub mod stats;
pub mod validate;
