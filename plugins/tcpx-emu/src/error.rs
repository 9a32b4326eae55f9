//! The one error type of the core: an NCCL result code plus a message.
//!
//! The core never logs errors itself; the FFI layer (`lib.rs`) logs the message as a WARN when it
//! turns an error into a result code. That keeps one WARN per failed call, and lets the Rust-level
//! tests look at the message (for example, that a peer failure names the peer's address).

use std::fmt;
use std::io;

use nccl_net_abi::{
    result_name, NcclResult, NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_REMOTE_ERROR,
    NCCL_SYSTEM_ERROR,
};

/// An NCCL result code other than `ncclSuccess`, with a human-readable reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetError {
    pub code: NcclResult,
    pub msg: String,
}

impl NetError {
    pub fn new(code: NcclResult, msg: impl Into<String>) -> Self {
        Self { code, msg: msg.into() }
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(NCCL_INTERNAL_ERROR, msg)
    }
    pub fn invalid_argument(msg: impl Into<String>) -> Self {
        Self::new(NCCL_INVALID_ARGUMENT, msg)
    }
    pub fn invalid_usage(msg: impl Into<String>) -> Self {
        Self::new(NCCL_INVALID_USAGE, msg)
    }
    pub fn system(msg: impl Into<String>) -> Self {
        Self::new(NCCL_SYSTEM_ERROR, msg)
    }
    pub fn remote(msg: impl Into<String>) -> Self {
        Self::new(NCCL_REMOTE_ERROR, msg)
    }

    /// Classifies an I/O error seen on a connected socket: the peer going away (EOF, reset,
    /// broken pipe, keepalive/user timeout) is `ncclRemoteError`, anything else `ncclSystemError`.
    pub fn from_io(err: &io::Error, context: impl fmt::Display) -> Self {
        let remote = matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::TimedOut
                | io::ErrorKind::WriteZero
        ) || err.raw_os_error() == Some(libc::ETIMEDOUT);
        let code = if remote { NCCL_REMOTE_ERROR } else { NCCL_SYSTEM_ERROR };
        Self::new(code, format!("{context}: {err}"))
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.msg, result_name(self.code))
    }
}

impl std::error::Error for NetError {}

pub type NetResult<T> = Result<T, NetError>;
