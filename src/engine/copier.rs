//! Host memory's local copies (fullmesh's own block) on a few helper threads.
//!
//! The block an endpoint sends to itself is a quarter of a 4-rank fullmesh: 256 MiB of cold memory
//! per rank at 1 GiB. Copied by the progress thread alone, a step per pass, it ran at a few GB/s
//! under the network's memory traffic and finished well after the last network byte (80 ms against
//! 54 ms on the 4 x H200 host), so it, not the network, set the pattern's time. Split over
//! [`THREADS`] threads it overlaps the network phase. GPU buffers do not need this: their copy is
//! one device-to-device copy on the GPU.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Copy threads per endpoint (the copy is memory-bound: more threads stop helping, and each one
/// takes a core from the socket threads while it runs).
pub const THREADS: usize = 4;

/// Below this, one piece: splitting costs more than it saves.
const MIN_PIECE: usize = 1 << 20;

#[derive(Clone, Copy)]
struct Piece {
    src: usize,
    dst: usize,
    len: usize,
}

#[derive(Default)]
struct Queue {
    pieces: Vec<Piece>,
    closing: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    /// Pieces queued or being copied.
    outstanding: AtomicUsize,
    idle: Condvar,
    idle_lock: Mutex<()>,
}

/// A pool of copy threads; one per endpoint worker, idle (blocked) between copies.
pub struct Copier {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Copier {
    /// Starts `threads` copy threads (at least one). Fails only if no thread could be spawned.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        // The progress loop never allocates: room for several copies' pieces up front.
        shared
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pieces = Vec::with_capacity(4 * threads.max(1));
        let mut handles = Vec::with_capacity(threads.max(1));
        for i in 0..threads.max(1) {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("tcpx-perf-copy{i}"))
                .spawn(move || copy_loop(&s))
            {
                Ok(h) => handles.push(h),
                Err(e) if handles.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(Self {
            shared,
            threads: handles,
        })
    }

    /// Starts copying `len` bytes from `src` to `dst`, cut into up to one piece per thread.
    ///
    /// # Safety
    /// Both ranges must be valid, must not overlap, and must not be touched by anyone else until
    /// [`is_idle`](Self::is_idle) returns true or [`wait`](Self::wait) returns.
    pub unsafe fn start(&self, src: *const u8, dst: *mut u8, len: usize) {
        if len == 0 {
            return;
        }
        let n = self.threads.len().min(len.div_ceil(MIN_PIECE)).max(1);
        let step = len.div_ceil(n);
        let mut q = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut off = 0;
        while off < len {
            let piece = step.min(len - off);
            q.pieces.push(Piece {
                src: src as usize + off,
                dst: dst as usize + off,
                len: piece,
            });
            self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
            off += piece;
        }
        drop(q);
        self.shared.work.notify_all();
    }

    /// Whether every started copy has completed (its bytes are visible to the caller).
    pub fn is_idle(&self) -> bool {
        self.shared.outstanding.load(Ordering::Acquire) == 0
    }

    /// Blocks until every started copy has completed.
    pub fn wait(&self) {
        let mut guard = self
            .shared
            .idle_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while !self.is_idle() {
            guard = self
                .shared
                .idle
                .wait(guard)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        self.wait();
        self.shared
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .closing = true;
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn copy_loop(s: &Shared) {
    loop {
        let piece = {
            let mut q = s.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if let Some(p) = q.pieces.pop() {
                    break p;
                }
                if q.closing {
                    return;
                }
                q = s.work.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        // SAFETY: `start`'s contract: valid, non-overlapping ranges nobody else touches until
        // the copy is reported complete (after this decrement).
        unsafe { std::ptr::copy_nonoverlapping(piece.src as *const u8, piece.dst as *mut u8, piece.len) };
        if s.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Take the lock so a waiter between its check and its wait cannot miss this.
            let _guard = s.idle_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            s.idle.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_in_pieces_and_reports_idle() {
        let c = Copier::new(THREADS).unwrap();
        assert!(c.is_idle());
        for &len in &[0usize, 1, 4095, MIN_PIECE - 1, MIN_PIECE + 7, 5 * MIN_PIECE + 3] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            let mut dst = vec![0u8; len + 2];
            // SAFETY: distinct vectors, untouched until `wait` returns.
            unsafe { c.start(src.as_ptr(), dst.as_mut_ptr().add(1), len) };
            c.wait();
            assert!(c.is_idle());
            assert!(dst[1..=len] == src[..], "len {len}");
            assert_eq!((dst[0], dst[len + 1]), (0, 0), "nothing outside the range is written");
        }
    }

    #[test]
    fn several_copies_at_once_all_complete() {
        let c = Copier::new(2).unwrap();
        let srcs: Vec<Vec<u8>> = (0..5).map(|k| vec![k as u8 + 1; 3 * MIN_PIECE + k]).collect();
        let mut dsts: Vec<Vec<u8>> = srcs.iter().map(|s| vec![0; s.len()]).collect();
        for (s, d) in srcs.iter().zip(dsts.iter_mut()) {
            // SAFETY: distinct vectors, untouched until `wait` returns.
            unsafe { c.start(s.as_ptr(), d.as_mut_ptr(), s.len()) };
        }
        c.wait();
        assert!(srcs == dsts);
    }
}
