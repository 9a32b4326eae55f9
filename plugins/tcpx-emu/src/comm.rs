//! Send and receive comms: the request ring, matching, completion, and TCPX's rules.
//!
//! A comm is one direction of one connection: a ctrl socket plus `nsocks` data sockets, each data
//! socket with its helper thread ([`crate::worker`]).
//!
//! Per request the sender writes one 16-byte control message on the ctrl socket:
//! `{ magic u32 = "TXCM", seq u32 (low bits of the request number), size u64 }`, little-endian.
//! The receiver matches control messages to posted receives strictly in posting order (tags are
//! ignored, as in TCPX), learns the real size (a receive may be larger than the send; a smaller
//! one is an error), and only then hands the job to its workers, so both sides stripe identically.
//!
//! Requests are the comm's address with a 15-bit generation tag in bits 48..63 (user-space
//! addresses fit in 48 bits on x86-64 and AArch64 Linux). Nothing is allocated per request, a
//! stale handle is detected by its tag instead of being dereferenced, and `test` finds the comm
//! from the handle alone.
//!
//! The caller-side state sits behind a mutex that is uncontended in practice (NCCL drives a comm
//! from one proxy thread); the workers only touch [`Shared`].

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::error::{NetError, NetResult};
use crate::fault::{abort_socket, corrupt_offset, Fault, FaultKind, CORRUPT_XOR};
use crate::worker::{self, send_all, Dir, Job, Shared, MAX_REQUESTS};

const CTRL_MAGIC: [u8; 4] = *b"TXCM";
const CTRL_LEN: usize = 16;
const TAG_SHIFT: u32 = 48;
const ADDR_MASK: usize = (1 << TAG_SHIFT) - 1;

/// An opaque request handle, as handed to NCCL.
pub type Request = *mut std::ffi::c_void;

/// An established connection, before it becomes a comm.
pub struct Connected {
    pub ctrl: TcpStream,
    pub data: Vec<TcpStream>,
    pub peer: SocketAddr,
    pub chunk_size: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct ReqInfo {
    ptr: usize,
    /// Posted size (capacity, for receives).
    cap: usize,
    /// Actual size (for receives: announced by the sender).
    size: usize,
}

struct Caller {
    /// Requests posted (next sequence number).
    posted: u64,
    /// Receives matched with a control message (sends: == posted).
    matched: u64,
    /// Oldest request `test` has not reported done.
    tested: u64,
    /// Oldest request still holding a slot (receives: until `irecvConsumed`; sends: == tested).
    consumed: u64,
    next_chunk: u64,
    reqs: [ReqInfo; MAX_REQUESTS],
    ctrl_buf: [u8; CTRL_LEN],
    ctrl_have: usize,
    /// The peer closed the ctrl socket.
    peer_closed: bool,
    close_fault_fired: bool,
}

/// A send or receive comm.
pub struct Comm {
    dir: Dir,
    ctrl: TcpStream,
    shared: Arc<Shared>,
    caller: Mutex<Caller>,
    workers: Vec<JoinHandle<()>>,
    report_sizes: bool,
}

impl Comm {
    /// Builds a comm over an established connection and starts its helper threads.
    pub fn new(dir: Dir, conn: Connected, report_sizes: bool, fault: Option<Fault>) -> NetResult<Box<Comm>> {
        let shared = Arc::new(Shared::new(dir, conn.peer, conn.data, conn.chunk_size, fault));
        let mut comm = Box::new(Comm {
            dir,
            ctrl: conn.ctrl,
            shared: Arc::clone(&shared),
            caller: Mutex::new(Caller {
                posted: 0,
                matched: 0,
                tested: 0,
                consumed: 0,
                next_chunk: 0,
                reqs: [ReqInfo::default(); MAX_REQUESTS],
                ctrl_buf: [0; CTRL_LEN],
                ctrl_have: 0,
                peer_closed: false,
                close_fault_fired: false,
            }),
            workers: Vec::new(),
            report_sizes,
        });
        if (&*comm as *const Comm as usize) & !ADDR_MASK != 0 {
            return Err(NetError::internal(
                "comm allocated above 2^48: request tagging unsupported on this address space",
            ));
        }
        let tag = match dir {
            Dir::Send => "tx",
            Dir::Recv => "rx",
        };
        for idx in 0..shared.socks.len() {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("tcpxemu-{tag}{idx}"))
                .spawn(move || worker::run(s, idx));
            match spawned {
                Ok(h) => comm.workers.push(h),
                Err(e) => {
                    // Dropping `comm` stops the workers already started.
                    return Err(NetError::system(format!("spawning helper thread: {e}")));
                }
            }
        }
        Ok(comm)
    }

    /// The peer's address (for messages).
    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    /// Number of data sockets.
    pub fn nsocks(&self) -> usize {
        self.shared.socks.len()
    }

    fn lock(&self) -> MutexGuard<'_, Caller> {
        self.caller.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, seq: u64) -> Request {
        let tag = (seq as usize & 0x7fff) + 1;
        ((self as *const Comm as usize) | (tag << TAG_SHIFT)) as Request
    }

    fn tag_of(req: Request) -> usize {
        req as usize >> TAG_SHIFT
    }

    fn same_request(&self, req: Request, seq: u64) -> bool {
        req as usize & ADDR_MASK == self as *const Comm as usize && Self::tag_of(req) == (seq as usize & 0x7fff) + 1
    }

    /// The comm a request handle belongs to.
    ///
    /// # Safety
    /// `req` must be a handle returned by `isend`/`irecv` of a comm that is still open.
    pub unsafe fn from_request<'a>(req: Request) -> Option<&'a Comm> {
        let addr = req as usize & ADDR_MASK;
        // SAFETY: per the contract, the address part is a live `Comm`.
        (addr != 0).then(|| unsafe { &*(addr as *const Comm) })
    }

    fn dir_name(&self) -> &'static str {
        match self.dir {
            Dir::Send => "send",
            Dir::Recv => "recv",
        }
    }

    /// Shared checks of `isend`/`irecv`: a failed comm, the 16-request limit, the close fault.
    fn admit(&self, c: &mut Caller) -> NetResult<u64> {
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        if c.posted - c.consumed >= MAX_REQUESTS as u64 {
            return Err(NetError::internal(format!(
                "unable to allocate requests: {MAX_REQUESTS} already outstanding on {} comm with peer {}",
                self.dir_name(),
                self.peer()
            )));
        }
        let seq = c.posted;
        if Fault::hits(self.shared.fault, FaultKind::Close, seq) && !c.close_fault_fired {
            c.close_fault_fired = true;
            abort_socket(self.ctrl.as_raw_fd());
            for s in &self.shared.socks {
                abort_socket(s.as_raw_fd());
            }
            let err = NetError::system(format!(
                "fault injected (TCPXEMU_FAULT=close): connection to peer {} aborted at request {seq}",
                self.peer()
            ));
            self.shared.set_error(err.clone());
            return Err(err);
        }
        Ok(seq)
    }

    /// Posts a send of `size` bytes at `ptr`. Fails with `ncclInternalError` when 16 requests are
    /// outstanding (TCPX never returns a NULL request as back-pressure).
    ///
    /// # Safety
    /// `ptr..ptr+size` must stay readable until `test` reports the request done (or the comm is
    /// closed).
    pub unsafe fn isend(&self, ptr: *const u8, size: usize) -> NetResult<Request> {
        if self.dir != Dir::Send {
            return Err(NetError::invalid_usage("isend on a receive comm"));
        }
        let mut c = self.lock();
        let seq = self.admit(&mut c)?;
        let mut msg = [0u8; CTRL_LEN];
        msg[0..4].copy_from_slice(&CTRL_MAGIC);
        msg[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
        msg[8..16].copy_from_slice(&(size as u64).to_le_bytes());
        // SAFETY: `msg` is a local buffer of CTRL_LEN bytes.
        if let Err(e) = unsafe { send_all(self.ctrl.as_raw_fd(), msg.as_ptr(), CTRL_LEN) } {
            let err = NetError::from_io(&e, format_args!("ctrl socket sending to peer {}", self.peer()));
            self.shared.set_error(err.clone());
            return Err(err);
        }
        let slot = seq as usize % MAX_REQUESTS;
        c.reqs[slot] = ReqInfo {
            ptr: ptr as usize,
            cap: size,
            size,
        };
        self.shared.pending[slot].store(size, Ordering::Relaxed);
        let job = Job {
            seq,
            ptr: ptr as usize,
            len: size,
            first_chunk: c.next_chunk,
        };
        c.next_chunk += self.shared.chunks(size);
        c.posted += 1;
        c.matched = c.posted;
        self.shared.publish(job);
        Ok(self.handle(seq))
    }

    /// Posts a receive of up to `cap` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+cap` must stay writable until the request completes (or the comm is closed).
    pub unsafe fn irecv(&self, ptr: *mut u8, cap: usize) -> NetResult<Request> {
        if self.dir != Dir::Recv {
            return Err(NetError::invalid_usage("irecv on a send comm"));
        }
        let mut c = self.lock();
        let seq = self.admit(&mut c)?;
        let slot = seq as usize % MAX_REQUESTS;
        c.reqs[slot] = ReqInfo {
            ptr: ptr as usize,
            cap,
            size: 0,
        };
        c.posted += 1;
        self.progress(&mut c);
        Ok(self.handle(seq))
    }

    /// Receive side: reads the control messages that have arrived (never blocking) and schedules
    /// the receives they match.
    fn progress(&self, c: &mut Caller) {
        let fd = self.ctrl.as_raw_fd();
        while c.matched < c.posted && !c.peer_closed && self.shared.error().is_none() {
            let have = c.ctrl_have;
            // SAFETY: reading into the unfilled tail of our own buffer.
            let n = unsafe {
                libc::recv(
                    fd,
                    c.ctrl_buf[have..].as_mut_ptr().cast(),
                    CTRL_LEN - have,
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
            if c.ctrl_have < CTRL_LEN {
                continue;
            }
            c.ctrl_have = 0;
            let seq = c.matched;
            let wire_seq = u32::from_le_bytes(c.ctrl_buf[4..8].try_into().unwrap_or_default());
            let size = u64::from_le_bytes(c.ctrl_buf[8..16].try_into().unwrap_or_default());
            if c.ctrl_buf[0..4] != CTRL_MAGIC || wire_seq != seq as u32 {
                self.shared.set_error(NetError::internal(format!(
                    "corrupt control message from peer {} (expected request {seq}, got {wire_seq})",
                    self.peer()
                )));
                return;
            }
            let slot = seq as usize % MAX_REQUESTS;
            let cap = c.reqs[slot].cap;
            let Some(size) = usize::try_from(size).ok().filter(|&s| s <= cap) else {
                self.shared.set_error(NetError::invalid_usage(format!(
                    "message truncated: peer {} sent {size} bytes but the receive (request {seq}) was posted for {cap} bytes",
                    self.peer()
                )));
                return;
            };
            c.reqs[slot].size = size;
            self.shared.pending[slot].store(size, Ordering::Relaxed);
            let job = Job {
                seq,
                ptr: c.reqs[slot].ptr,
                len: size,
                first_chunk: c.next_chunk,
            };
            c.next_chunk += self.shared.chunks(size);
            c.matched += 1;
            self.shared.publish(job);
        }
    }

    /// Tests `req`, which must be the oldest request not yet reported done. Returns the size on
    /// completion (the sender's size, for receives), None while in flight.
    pub fn test(&self, req: Request) -> NetResult<Option<usize>> {
        let mut c = self.lock();
        let seq = c.tested;
        if seq >= c.posted || !self.same_request(req, seq) {
            return Err(NetError::internal(format!(
                "test called with invalid request {req:p} ({} comm with peer {}: {} outstanding, oldest is {seq})",
                self.dir_name(),
                self.peer(),
                c.posted - c.tested
            )));
        }
        if self.dir == Dir::Recv {
            self.progress(&mut c);
        }
        let slot = seq as usize % MAX_REQUESTS;
        if seq < c.matched && self.shared.pending[slot].load(Ordering::Acquire) == 0 {
            let info = c.reqs[slot];
            if self.dir == Dir::Recv && info.size > 0 && Fault::hits(self.shared.fault, FaultKind::Corrupt, seq) {
                // SAFETY: the offset is inside the received bytes of the caller's buffer.
                unsafe { *((info.ptr + corrupt_offset(info.size)) as *mut u8) ^= CORRUPT_XOR };
            }
            c.tested += 1;
            if self.dir == Dir::Send {
                c.consumed = c.tested;
            }
            return Ok(Some(info.size));
        }
        match self.shared.error() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Whether `test` should write `*sizes` (`TCPXEMU_REPORT_SIZES`).
    pub fn report_sizes(&self) -> bool {
        self.report_sizes
    }

    /// Frees the slot of a completed receive. Must come in FIFO order, as in TCPX.
    pub fn irecv_consumed(&self, req: Request) -> NetResult<()> {
        if self.dir != Dir::Recv {
            return Err(NetError::invalid_usage("irecvConsumed on a send comm"));
        }
        let mut c = self.lock();
        let seq = c.consumed;
        if seq >= c.tested || !self.same_request(req, seq) {
            return Err(NetError::internal(format!(
                "irecvConsumed called with invalid request {req:p} (peer {}): the oldest completed, unconsumed receive is {}",
                self.peer(),
                if seq < c.tested { seq.to_string() } else { "none".to_owned() }
            )));
        }
        c.consumed += 1;
        Ok(())
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("dir", &self.dir)
            .field("peer", &self.peer())
            .field("nsocks", &self.nsocks())
            .finish_non_exhaustive()
    }
}

impl Drop for Comm {
    /// Stops and joins the helper threads (shutting the sockets down unblocks them, even with
    /// requests outstanding), then the sockets close as the fields drop.
    fn drop(&mut self) {
        self.shared.begin_close();
        // SAFETY: shutdown on our own descriptor.
        unsafe { libc::shutdown(self.ctrl.as_raw_fd(), libc::SHUT_RDWR) };
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}
