//! tcpx-analyze: statistical comparison of tcpx-perf and nccl-tests results
//! against baselines, a fail-closed CI regression gate, and SVG plots.
//!
//! The binary (`src/main.rs`) is a thin clap front end over this library.

pub mod admit;
pub mod baseline;
pub mod compare;
pub mod decision;
pub mod error;
pub mod history;
pub mod model;
pub mod parse;
pub mod plot;
pub mod report;
pub mod stats;
pub mod validate;
