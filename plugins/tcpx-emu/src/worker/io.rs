//! Byte-moving system calls: EINTR retried, a return of 0 named.

pub(super) fn gpu_io(what: &str, e: tcpx_gpu::GpuError) -> std::io::Error {
    std::io::Error::other(format!("device unpack: {what}: {e}"))
}

/// Receives exactly the bytes the iovecs describe (recvmsg with MSG_WAITALL, resumed after
/// partial reads); EOF first is `UnexpectedEof`.
///
/// # Safety
/// Every iovec must describe writable memory for the duration of the call.
pub(super) unsafe fn recv_iov_all(fd: i32, iov: &mut [libc::iovec]) -> std::io::Result<()> {
    let mut first = 0;
    while first < iov.len() && iov[first].iov_len == 0 {
        first += 1;
    }
    while first < iov.len() {
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov[first..].as_mut_ptr();
        msg.msg_iovlen = (iov.len() - first) as _;
        // SAFETY: the iovecs describe writable memory (the caller's contract).
        let ret = unsafe { libc::recvmsg(fd, &raw mut msg, libc::MSG_WAITALL) };
        let Some(mut n) = moved(ret, peer_closed)? else {
            continue;
        };
        while n > 0 {
            let l = iov[first].iov_len;
            if n >= l {
                n -= l;
                first += 1;
            } else {
                // SAFETY: advancing inside the same iovec.
                iov[first].iov_base = unsafe { iov[first].iov_base.cast::<u8>().add(n) }.cast();
                iov[first].iov_len -= n;
                n = 0;
            }
        }
        while first < iov.len() && iov[first].iov_len == 0 {
            first += 1;
        }
    }
    Ok(())
}

/// The result of a system call that moves bytes: `Ok(Some(n))` for `n > 0` bytes, `Ok(None)` if
/// it was interrupted (call again), the error otherwise; a return of 0 becomes `zero`.
pub(super) fn moved(ret: isize, zero: impl FnOnce() -> std::io::Error) -> std::io::Result<Option<usize>> {
    match ret {
        n if n > 0 => Ok(Some(n as usize)),
        0 => Err(zero()),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

pub(super) fn write_zero() -> std::io::Error {
    std::io::ErrorKind::WriteZero.into()
}

/// End of stream where bytes were expected.
pub(super) fn peer_closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed by peer")
}

/// Sends exactly `len` bytes (MSG_NOSIGNAL: a dead peer is EPIPE, never SIGPIPE).
///
/// # Safety
/// `ptr..ptr+len` must be readable for the duration of the call.
pub unsafe fn send_all(fd: i32, mut ptr: *const u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        // SAFETY: the caller guarantees `ptr..ptr+len` is readable for the request's lifetime.
        let ret = unsafe { libc::send(fd, ptr.cast(), len, libc::MSG_NOSIGNAL) };
        let Some(n) = moved(ret, write_zero)? else {
            continue;
        };
        // SAFETY: n <= len, so the pointer stays within the buffer.
        ptr = unsafe { ptr.add(n) };
        len -= n;
    }
    Ok(())
}

/// Receives exactly `len` bytes; EOF before that is `UnexpectedEof`.
///
/// # Safety
/// `ptr..ptr+len` must be writable for the duration of the call.
pub(super) unsafe fn recv_all(fd: i32, ptr: *mut u8, len: usize) -> std::io::Result<()> {
    let mut iov = [libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    }];
    // SAFETY: the one iovec is the caller's writable range.
    unsafe { recv_iov_all(fd, &mut iov) }
}
