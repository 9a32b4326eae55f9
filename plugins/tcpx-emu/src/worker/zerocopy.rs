//! Zero-copy sends: chunks handed to the socket by reference (`vmsplice` + `splice`) and
//! counted once the receiver acknowledged them (see the module docs of [`super`]).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::io::{moved, peer_closed, send_all, write_zero};
use super::{credit, Chunk, ChunkError, Shared, MAX_REQUESTS};
use crate::config::ZeroCopy;
use crate::gpu::STAGING_BUFS;

/// The byte a zero-copy receiver writes back on a data socket for every chunk it has read.
const ACK: u8 = 0xac;

/// A receiver has read a chunk out of socket `fd`: on zero-copy comms, acknowledge it (the
/// sender's pages are free again).
pub(super) fn chunk_read(sh: &Shared, fd: i32) -> std::io::Result<()> {
    if !sh.acks() {
        return Ok(());
    }
    // SAFETY: one readable byte.
    unsafe { send_all(fd, &ACK, 1) }
}

/// The socket side of a send helper thread: hands a chunk's bytes to the socket and decides
/// when the chunk counts as moved (see the module docs).
pub struct Tx {
    fd: i32,
    /// Zero-copy comms only.
    zc: Option<Acked>,
    /// Chunks spliced so far.
    pub spliced: u64,
}

// `acked` is the count the struct is about; `Acked.acked` reads as intended.
#[allow(clippy::struct_field_names)]
struct Acked {
    /// Host-memory chunks are spliced too (`TCPXEMU_ZEROCOPY=all`), not only staged ones.
    splice_host: bool,
    /// `(read end, write end)`; None if the pipe could not be made (then chunks are copied,
    /// and still acknowledged).
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Chunks handed to the socket and not acknowledged yet, oldest first, each with whether it
    /// counts only once acknowledged (spliced) or counted already (copied).
    unacked: VecDeque<(Chunk, bool)>,
    /// Chunks acknowledged so far (chunks handed over: this plus `unacked.len()`).
    acked: u64,
    /// Per staging buffer: the number of chunks handed over right after its last chunk went
    /// out; the buffer may be written again once `acked` reached it.
    busy_until: [u64; STAGING_BUFS],
}

impl Tx {
    /// A send helper's socket side under `policy`; `chunk_size` sizes the pipe.
    pub fn new(fd: i32, policy: ZeroCopy, chunk_size: usize) -> Self {
        let zc = (policy != ZeroCopy::Off).then(|| Acked {
            splice_host: policy == ZeroCopy::All,
            pipe: splice_pipe(chunk_size),
            unacked: VecDeque::with_capacity(4 * MAX_REQUESTS),
            acked: 0,
            busy_until: [0; STAGING_BUFS],
        });
        Self { fd, zc, spliced: 0 }
    }

    /// Sends chunk `c`'s bytes from `ptr` (from staging buffer `buf`, if any). A copied chunk
    /// counts now; a spliced one (zero-copy comms: staged chunks, and host chunks under `all`)
    /// once acknowledged.
    ///
    /// # Safety
    /// `ptr..ptr+c.len` must be readable, and stay unmodified until the chunk counts.
    pub unsafe fn send(&mut self, sh: &Shared, c: &Chunk, ptr: *const u8, buf: Option<usize>) -> std::io::Result<()> {
        let pipe = self
            .zc
            .as_ref()
            .filter(|z| buf.is_some() || z.splice_host)
            .and_then(|z| z.pipe.as_ref());
        let spliced = pipe.is_some();
        match pipe {
            // SAFETY: the caller's contract.
            Some((r, w)) => unsafe { splice_all(self.fd, r.as_raw_fd(), w.as_raw_fd(), ptr, c.len) }?,
            // SAFETY: as above.
            None => unsafe { send_all(self.fd, ptr, c.len) }?,
        }
        self.spliced += u64::from(spliced);
        self.handed(sh, c, buf, spliced);
        self.poll(sh)
    }

    /// Chunk `c` went into the socket (from staging buffer `buf`, if any), by reference
    /// (`spliced`) or copied.
    pub fn handed(&mut self, sh: &Shared, c: &Chunk, buf: Option<usize>, spliced: bool) {
        if !spliced {
            credit(sh, c);
        }
        if let Some(z) = self.zc.as_mut() {
            z.unacked.push_back((*c, spliced));
            if let (Some(b), true) = (buf, spliced) {
                z.busy_until[b] = z.acked + z.unacked.len() as u64;
            }
        }
    }

    /// Waits until the socket no longer references staging buffer `b`.
    pub fn wait_buffer(&mut self, sh: &Shared, b: usize) -> std::io::Result<()> {
        while self.zc.as_ref().is_some_and(|z| z.acked < z.busy_until[b]) {
            self.read_acks(sh, true)?;
        }
        Ok(())
    }

    /// Counts the chunks acknowledged so far (never blocks).
    pub fn poll(&mut self, sh: &Shared) -> std::io::Result<()> {
        self.read_acks(sh, false)
    }

    /// Waits until every chunk handed over is acknowledged (before the thread sleeps: requests
    /// complete only through it).
    pub fn settle(&mut self, sh: &Shared) -> Result<(), ChunkError> {
        while let Some((oldest, _)) = self.zc.as_ref().and_then(|z| z.unacked.front().copied()) {
            self.read_acks(sh, true).map_err(|e| (e, oldest))?;
        }
        Ok(())
    }

    fn read_acks(&mut self, sh: &Shared, block: bool) -> std::io::Result<()> {
        let Some(z) = self.zc.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; 64];
        let want = z.unacked.len().min(buf.len());
        if want == 0 {
            return Ok(());
        }
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `want` writable bytes.
        let ret = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), want, flags) };
        let n = match moved(ret, peer_closed) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
        if let Some(bad) = buf[..n].iter().find(|&&b| b != ACK) {
            return Err(std::io::Error::other(format!(
                "protocol: byte {bad:#04x} instead of a chunk acknowledgement on the data socket"
            )));
        }
        for _ in 0..n {
            if let Some((c, true)) = z.unacked.pop_front() {
                credit(sh, &c);
            }
        }
        z.acked += n as u64;
        Ok(())
    }
}

/// A pipe for [`splice_all`], as large as a chunk where the kernel allows (fewer, larger
/// hand-overs); None if no pipe could be made.
fn splice_pipe(chunk_size: usize) -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        crate::warn!(
            nccl_net_abi::NCCL_NET,
            "zero-copy sends: pipe2 failed ({}); copying instead",
            std::io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Unprivileged processes may go up to /proc/sys/fs/pipe-max-size (1 MiB by default); the
    // default 64 KiB also works, in more system calls.
    for size in [chunk_size.clamp(4096, 4 << 20), 1 << 20] {
        // SAFETY: fcntl on our descriptor.
        if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) } >= 0 {
            break;
        }
    }
    Some((r, w))
}

/// Hands `len` bytes at `ptr` to socket `fd` by reference: `vmsplice` puts the pages in the
/// pipe, `splice` moves them into the socket. The pages must stay unmodified until the receiver
/// has read them.
///
/// # Safety
/// `ptr..ptr+len` must be readable, and stay unmodified until the receiver acknowledged them.
unsafe fn splice_all(fd: i32, pipe_r: i32, pipe_w: i32, mut ptr: *const u8, mut len: usize) -> std::io::Result<()> {
    while len > 0 {
        let iov = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: one iovec over the caller's readable range; the pipe is empty here.
        let ret = unsafe { libc::vmsplice(pipe_w, &raw const iov, 1, 0) };
        let Some(n) = moved(ret, write_zero)? else {
            continue;
        };
        let more = if n < len { libc::SPLICE_F_MORE } else { 0 };
        let mut left = n;
        while left > 0 {
            // SAFETY: moves pipe buffers into the socket; no user memory is touched.
            let ret = unsafe {
                libc::splice(
                    pipe_r,
                    std::ptr::null_mut(),
                    fd,
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_MOVE | more,
                )
            };
            if let Some(m) = moved(ret, write_zero)? {
                left -= m;
            }
        }
        // SAFETY: n <= len: still inside the caller's range.
        ptr = unsafe { ptr.add(n) };
        len -= n;
    }
    Ok(())
}

/// Blocks SIGPIPE on the calling thread: `splice` into a socket the peer closed raises it (it
/// has no MSG_NOSIGNAL), and a C host program would die of it; the call fails with EPIPE instead.
pub(super) fn block_sigpipe() {
    // SAFETY: plain signal-mask calls on a local, initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
    }
}
