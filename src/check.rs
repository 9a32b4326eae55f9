//! The deterministic data pattern used to check every timed iteration.
//!
//! Byte `a` of the data endpoint `origin` sends in iteration `iter` is a splitmix64 hash of
//! `(origin, iter, a / 8)`: see [`tcpx_gpu::pattern`], the single definition shared with the CUDA
//! fill/verify kernels, so host and GPU buffers are checked against the same bytes.

pub use tcpx_gpu::pattern::{fill, first_mismatch, pattern_byte, verify};
