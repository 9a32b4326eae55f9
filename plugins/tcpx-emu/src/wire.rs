//! What both ends of a connection agree on before a comm exists: the hello every socket starts
//! with, and the options every socket gets. [`crate::conn`] (the dialing side) and
//! [`crate::accept`] (the listening side) both use it, so it lives apart from either.
//!
//! Every socket of a connection (one ctrl socket plus `nsocks` data sockets) starts with a 32-byte
//! hello (little-endian):
//! `{ magic "TXHL", version u16, kind u8 (0 ctrl, 1 data), index u8, nsocks u8, flags u8,
//!    pad[2], chunk_size u32, listener token u64, connection id u64 }`; flag bit 0: the receiver
//! acknowledges every chunk (the sender splices some of them: [`crate::worker`]).
//!
//! Socket options: data sockets get `SO_SNDBUF`/`SO_RCVBUF` before connect/listen (so the window
//! scale is negotiated for them); all sockets get `TCP_NODELAY`, keepalive (10 s idle, 5 s
//! interval, 3 probes) and `TCP_USER_TIMEOUT` 30 s, so a vanished host turns into an error.

use std::os::fd::RawFd;

const HELLO_MAGIC: [u8; 4] = *b"TXHL";
const HELLO_VERSION: u16 = 1;
pub(crate) const HELLO_LEN: usize = 32;
pub(crate) const KIND_CTRL: u8 = 0;
pub(crate) const KIND_DATA: u8 = 1;
/// Hello flag: the receiver acknowledges every chunk (zero-copy sends).
pub(crate) const FLAG_ACKS: u8 = 1;
/// `TCP_USER_TIMEOUT`: unacknowledged data older than this kills the connection.
pub(crate) const USER_TIMEOUT_MS: libc::c_int = 30_000;

fn setopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: T) -> std::io::Result<()> {
    // SAFETY: `val` is a plain value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const val).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Options every socket gets: no Nagle, keepalive, user timeout. Best effort.
pub(crate) fn tune_common(fd: RawFd) {
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1 as libc::c_int);
    let _ = setopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1 as libc::c_int);
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10 as libc::c_int);
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5 as libc::c_int);
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3 as libc::c_int);
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, USER_TIMEOUT_MS);
}

/// Socket buffer sizes for data sockets (0: leave autotuning on). Best effort: the kernel caps
/// the value at `net.core.{r,w}mem_max`.
pub(crate) fn tune_bufs(fd: RawFd, sockbuf: usize) {
    if sockbuf > 0 {
        let v = sockbuf.min(i32::MAX as usize) as libc::c_int;
        let _ = setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v);
        let _ = setopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v);
    }
}

pub(crate) struct Hello {
    pub kind: u8,
    pub index: u8,
    pub nsocks: u8,
    pub flags: u8,
    pub chunk_size: u32,
    pub token: u64,
    pub conn_id: u64,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[6] = self.kind;
        b[7] = self.index;
        b[8] = self.nsocks;
        b[9] = self.flags;
        b[12..16].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.token.to_le_bytes());
        b[24..32].copy_from_slice(&self.conn_id.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; HELLO_LEN]) -> Option<Self> {
        if b[0..4] != HELLO_MAGIC || u16::from_le_bytes([b[4], b[5]]) != HELLO_VERSION {
            return None;
        }
        Some(Self {
            kind: b[6],
            index: b[7],
            nsocks: b[8],
            flags: b[9],
            chunk_size: u32::from_le_bytes(b[12..16].try_into().ok()?),
            token: u64::from_le_bytes(b[16..24].try_into().ok()?),
            conn_id: u64::from_le_bytes(b[24..32].try_into().ok()?),
        })
    }
}
