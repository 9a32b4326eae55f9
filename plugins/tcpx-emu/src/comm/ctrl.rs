//! The receive side's control messages: reading them (only when the ctrl watcher saw bytes
//! arrive, [`crate::ctrl_watch`]) and matching each with the oldest posted receive.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::{Caller, Comm, CTRL_BUF, CTRL_LEN, CTRL_MAGIC};
use crate::error::NetError;
use crate::fault::{Fault, FaultKind};
use crate::worker::{Job, MAX_REQUESTS};

/// Tests of an unmatched receive without the watcher's word after which `test` reads anyway.
pub const READ_ANYWAY: u32 = 64;

impl Comm {
    /// Receive side: reads the control messages that have arrived (never blocking, and only
    /// when the ctrl watcher saw bytes arrive: [`crate::ctrl_watch`]) and schedules the receives
    /// they match. One `recv` takes every message waiting, up to a full ring's worth.
    pub(super) fn progress(&self, c: &mut Caller) {
        let fd = self.ctrl.as_raw_fd();
        let mut took = false;
        loop {
            while c.matched < c.posted && c.ctrl_have - c.ctrl_start >= CTRL_LEN {
                let at = c.ctrl_start;
                c.ctrl_start += CTRL_LEN;
                let msg: [u8; CTRL_LEN] = c.ctrl_buf[at..at + CTRL_LEN].try_into().unwrap_or_default();
                if self.match_one(c, &msg).is_err() {
                    return;
                }
            }
            if c.matched >= c.posted || c.peer_closed || self.shared.error().is_some() {
                // Stopped before `recv` said there is nothing more: read again next time.
                if took {
                    self.raise_ctrl();
                }
                return;
            }
            if !took {
                if !self.ctrl_ready(c) {
                    return;
                }
                took = true;
            }
            // Here fewer than CTRL_LEN bytes are left unmatched, so the buffer has room.
            if c.ctrl_start > 0 {
                c.ctrl_buf.copy_within(c.ctrl_start..c.ctrl_have, 0);
                c.ctrl_have -= c.ctrl_start;
                c.ctrl_start = 0;
            }
            let have = c.ctrl_have;
            c.ctrl_reads += 1;
            // SAFETY: reading into the unfilled tail of our own buffer.
            let n = unsafe {
                libc::recv(
                    fd,
                    c.ctrl_buf[have..].as_mut_ptr().cast(),
                    CTRL_BUF - have,
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => {
                        self.shared.set_error(NetError::from_io(
                            &e,
                            format_args!("ctrl socket receiving from peer {}", self.peer()),
                        ));
                        return;
                    }
                }
            }
            if n == 0 {
                c.peer_closed = true;
                self.shared.set_error(NetError::remote(format!(
                    "peer {} closed the connection with {} receive(s) outstanding",
                    self.peer(),
                    c.posted - c.matched
                )));
                return;
            }
            c.ctrl_have += n as usize;
        }
    }

    /// Whether the ctrl socket may have bytes (lowering the watcher's flag: read until `recv`
    /// has nothing more, or [`Comm::raise_ctrl`]).
    fn ctrl_ready(&self, c: &mut Caller) -> bool {
        if self.watch.as_ref().is_none_or(crate::ctrl_watch::Watch::take) {
            c.ctrl_skips = 0;
            return true;
        }
        // Every READ_ANYWAY-th skipped test reads all the same: a watcher that waits for a core
        // on a crowded host delays a match by at most that many of the caller's tests.
        c.ctrl_skips += 1;
        if c.ctrl_skips >= READ_ANYWAY {
            c.ctrl_skips = 0;
            return true;
        }
        false
    }

    fn raise_ctrl(&self) {
        if let Some(w) = &self.watch {
            w.raise();
        }
    }

    /// Matches one control message with the oldest unmatched receive and publishes its job;
    /// Err once the comm's error is set.
    fn match_one(&self, c: &mut Caller, msg: &[u8; CTRL_LEN]) -> Result<(), ()> {
        let seq = c.matched;
        let wire_seq = u32::from_le_bytes(msg[4..8].try_into().unwrap_or_default());
        let size = u64::from_le_bytes(msg[8..16].try_into().unwrap_or_default());
        if msg[0..4] != CTRL_MAGIC || wire_seq != seq as u32 {
            self.shared.set_error(NetError::internal(format!(
                "corrupt control message from peer {} (expected request {seq}, got {wire_seq})",
                self.peer()
            )));
            return Err(());
        }
        let slot = seq as usize % MAX_REQUESTS;
        let cap = c.reqs[slot].cap;
        let Some(size) = usize::try_from(size).ok().filter(|&s| s <= cap) else {
            self.shared.set_error(NetError::invalid_usage(format!(
                "message truncated: peer {} sent {size} bytes but the receive (request {seq}) was posted for {cap} bytes",
                self.peer()
            )));
            return Err(());
        };
        c.reqs[slot].size = size;
        let cuda = c.reqs[slot].cuda;
        if cuda && size > 0 {
            if let Err(e) = self.plan_unpack(c, slot, size) {
                self.shared.set_error(e);
                return Err(());
            }
        }
        self.shared.pending[slot].store(size, Ordering::Relaxed);
        let mut ptr = c.reqs[slot].ptr;
        if !cuda && Fault::hits(self.shared.fault, FaultKind::Stale, seq) {
            // The slot's previous receive is consumed, so its scratch is free to grow.
            c.scratch.resize_with(MAX_REQUESTS, Vec::new);
            let scratch = &mut c.scratch[slot];
            scratch.resize(size.max(scratch.len()), 0);
            ptr = scratch.as_mut_ptr() as usize;
        }
        let job = Job {
            seq,
            ptr,
            len: size,
            first_chunk: c.next_chunk,
            cuda,
        };
        c.next_chunk += self.shared.chunks(size);
        c.matched += 1;
        self.shared.publish(&[job]);
        Ok(())
    }
}
