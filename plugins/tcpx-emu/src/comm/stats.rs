//! What a comm counts for its close-time INFO lines: device-unpack receives, and how the caller
//! posted (bytes, requests outstanding after each post).

use super::Caller;
use crate::worker::MAX_REQUESTS;

/// Counters of an unpack-mode receive comm, logged when it closes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct UnpackStats {
    pub cuda_recvs: u64,
    pub cuda_bytes: u64,
    pub descriptors: u64,
    pub host_recvs: u64,
}

/// What the caller posted: bytes and, per post, how many requests it then had outstanding.
/// Logged at close, so a log shows how a client (NCCL, tcpx-perf) drives the comm.
#[derive(Clone, Copy)]
pub(super) struct PostStats {
    pub bytes: u64,
    /// `[k]`: posts that left k requests outstanding (1..=16).
    pub by_outstanding: [u64; MAX_REQUESTS + 1],
}

impl PostStats {
    pub fn note(c: &mut Caller, size: usize) {
        c.post_stats.bytes += size as u64;
        let outstanding = (c.posted - c.consumed) as usize;
        c.post_stats.by_outstanding[outstanding.min(MAX_REQUESTS)] += 1;
    }

    /// `N posts, B bytes (mean M B), outstanding after post k:count ..., mean X`.
    pub fn summary(&self, posts: u64) -> String {
        let hist: Vec<String> = (1..=MAX_REQUESTS)
            .filter(|&k| self.by_outstanding[k] > 0)
            .map(|k| format!("{k}:{}", self.by_outstanding[k]))
            .collect();
        let weighted: u64 = (1..=MAX_REQUESTS).map(|k| k as u64 * self.by_outstanding[k]).sum();
        format!(
            "{posts} posts, {} bytes (mean {} B), outstanding after each post {} (mean {:.1})",
            self.bytes,
            self.bytes / posts.max(1),
            if hist.is_empty() {
                "-".to_owned()
            } else {
                hist.join(" ")
            },
            weighted as f64 / posts.max(1) as f64
        )
    }
}
