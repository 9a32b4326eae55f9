//! Fault injection for the benchmark's failure tests (`TCPXEMU_FAULT`). Off by default.
//!
//! * `stall`: the sender's helper threads stop moving data for requests `>= AFTER`; the requests
//!   never complete and nothing errors (models a hung peer NIC).
//! * `close`: when request `AFTER` is posted, every socket of the comm is aborted (RST), so the
//!   peer sees a reset and this side reports an error too.
//! * `corrupt`: each received request `>= AFTER` gets one byte flipped (XOR 0x5a at `size / 2`)
//!   before `test` reports it done.
//! * `slow`: helper threads sleep [`SLOW_CHUNK_DELAY`] after every chunk.
//! * `short`: each send `>= AFTER` moves only the first half of its bytes (the control message
//!   announces half) and reports success; the receiver completes with half its bytes written.
//! * `short-lie`: as `short` on the sending side, and each receive `>= AFTER` reports the size it
//!   was posted for, whatever arrived (seen with `TCPXEMU_REPORT_SIZES=1`): a plugin whose own
//!   sizes lie, so only the data check can tell (the wire counters too, on an interface no other
//!   traffic crosses).
//! * `stale`: each CUDA/host receive `>= AFTER` lands its bytes somewhere else (a per-slot scratch
//!   buffer; CUDA receives publish no descriptors), so the user buffer keeps what it held before
//!   (the previous iteration's bytes) while the receive completes normally.
//! * `drop`: receive `AFTER` never completes (its bytes are consumed, so the peer's send
//!   completes and the peer keeps going); FIFO `test` then holds every later receive too.
//! * `accept`: every `accept` on the process's listen comms `>= AFTER` (counted from its first
//!   `listen`) fails at once (a system error, as a process out of threads or descriptors sees):
//!   a rank that fails at setup, for the benchmark's tests of the record a failure leaves (with
//!   `TCPXEMU_FAULT_RANK`, one rank of the job), or at a later round's (`--connect rounds`).
//!
//! `TCPXEMU_FAULT_RANK` restricts the fault to one process of an MPI job; see [`crate::config`].

use std::os::fd::RawFd;
use std::time::Duration;

/// Which fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    Stall,
    Close,
    Corrupt,
    Slow,
    Short,
    ShortLie,
    Stale,
    Drop,
    Accept,
}

/// An armed fault: `kind` hits every request with sequence number `>= after` on each comm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub after: u64,
}

/// The byte `corrupt` flips.
pub const CORRUPT_XOR: u8 = 0x5a;
/// The delay `slow` adds per chunk.
pub const SLOW_CHUNK_DELAY: Duration = Duration::from_millis(1);

impl FaultKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "stall" => Some(Self::Stall),
            "close" => Some(Self::Close),
            "corrupt" => Some(Self::Corrupt),
            "slow" => Some(Self::Slow),
            "short" => Some(Self::Short),
            "short-lie" => Some(Self::ShortLie),
            "stale" => Some(Self::Stale),
            "drop" => Some(Self::Drop),
            "accept" => Some(Self::Accept),
            _ => None,
        }
    }
}

impl Fault {
    /// True when this fault is of `kind` and applies to request `seq`.
    pub fn hits(fault: Option<Fault>, kind: FaultKind, seq: u64) -> bool {
        matches!(fault, Some(f) if f.kind == kind && seq >= f.after)
    }

    /// True when send `seq` moves only [`short_len`] of its bytes (`short`, `short-lie`).
    pub fn shortens(fault: Option<Fault>, seq: u64) -> bool {
        Self::hits(fault, FaultKind::Short, seq) || Self::hits(fault, FaultKind::ShortLie, seq)
    }
}

/// What `accept` on the process's listen comm `listen_seq` returns under the `accept` fault, if
/// armed.
pub fn accept_refused(fault: Option<Fault>, listen_seq: u64) -> Option<crate::error::NetError> {
    Fault::hits(fault, FaultKind::Accept, listen_seq)
        .then(|| crate::error::NetError::system("accept: TCPXEMU_FAULT=accept (injected failure)"))
}

/// Offset of the byte `corrupt` flips in a request of `size` (> 0) bytes.
pub fn corrupt_offset(size: usize) -> usize {
    size / 2
}

/// Bytes a `short` send of `size` bytes moves.
pub fn short_len(size: usize) -> usize {
    size / 2
}

/// Aborts a connected socket so that the peer gets a RST, without closing the descriptor.
///
/// Closing the fd while helper threads may still use it would let the number be reused by an
/// unrelated file. Instead: `SO_LINGER {1, 0}` (so the final release resets), `shutdown` (which
/// wakes threads blocked in send/recv on it), then `dup2` a fresh unconnected socket over the fd,
/// which releases the original socket once those threads have left their system calls, while the
/// fd number stays owned by us until the comm is closed.
pub fn abort_socket(fd: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: plain system calls on a descriptor this comm owns; failures are harmless here (the
    // socket is being torn down anyway).
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
        libc::shutdown(fd, libc::SHUT_RDWR);
        let spare = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if spare >= 0 {
            libc::dup2(spare, fd);
            libc::close(spare);
        }
    }
}
