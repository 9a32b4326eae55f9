//! Send and receive comms: the request ring, matching, completion, and TCPX's rules.
//!
//! A comm is one direction of one connection: a ctrl socket plus `nsocks` data sockets, served
//! from the comm's first transfer on by one helper thread each or by the process's shared event
//! loops ([`crate::worker`], [`crate::threads`]).
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
//! Data moves only inside `test` (TCPX contract #6): `isend`/`irecv` only queue a request; `test`
//! releases every queued request of the comm to the helper threads at once (sends: their control
//! messages in one `send`, then one publication; receives: the control messages that arrived are
//! matched), so a caller that tests continuously loses nothing, and one that never tests moves
//! nothing, as on TCPX. With `TCPXEMU_STRICT=0` `isend` releases at once and `irecv` matches.
//!
//! The caller-side state sits behind a mutex that is uncontended in practice (NCCL drives a comm
//! from one proxy thread); the workers only touch [`Shared`].

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::config::ZeroCopy;
use crate::contracts;
use crate::error::{NetError, NetResult};
use crate::fault::{abort_socket, corrupt_offset, short_len, Fault, FaultKind, CORRUPT_XOR};
use crate::gpu::CommGpu;
use crate::scramble::{MAX_DESCRIPTORS, MAX_RECV};
use crate::threads::{Census, Model, ThreadOpts};
use crate::worker::{evloop, send_all, Dir, Job, Shared, MAX_REQUESTS};
use tcpx_gpu::unpack::Rng;

mod ctrl;
pub use ctrl::READ_ANYWAY;
mod serve;
mod stats;

use stats::{PostStats, UnpackStats};

const CTRL_MAGIC: [u8; 4] = *b"TXCM";
const CTRL_LEN: usize = 16;
/// The receive side's control buffer: a full ring's messages (a sender has at most
/// [`MAX_REQUESTS`] outstanding), taken by one `recv`.
const CTRL_BUF: usize = CTRL_LEN * MAX_REQUESTS;
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
    /// Zero-copy sends: which chunks the send side splices; unless `Off`, the receive side
    /// acknowledges every chunk (for a receive comm only that distinction matters).
    pub zerocopy: ZeroCopy,
}

#[derive(Debug, Clone, Copy, Default)]
struct ReqInfo {
    ptr: usize,
    /// Posted size (capacity, for receives).
    cap: usize,
    /// Actual size (for receives: announced by the sender).
    size: usize,
    /// Device memory (unpack mode).
    cuda: bool,
    /// Descriptors written to the slot's `netUnpackMeta` entry (CUDA receives).
    cnt: u64,
}

/// Unpack-mode options of a comm (`TCPXEMU_MODE=unpack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackOpts {
    /// Largest run of consecutive pages kept together in the bounce buffer.
    pub max_run: usize,
    /// Seed of the comm's scramble RNG (mixed with a per-comm random value unless fixed).
    pub seed: u64,
    /// Size of the GPU's bounce pool, should this comm be the first to need it.
    pub pool_bytes: usize,
}

/// How a comm behaves, from the plugin's [`Config`](crate::Config) (see
/// [`crate::conn::comm_opts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommOpts {
    /// `test` writes `*sizes` (`TCPXEMU_REPORT_SIZES`).
    pub report_sizes: bool,
    pub fault: Option<Fault>,
    /// Unpack mode's options; None in host mode.
    pub unpack: Option<UnpackOpts>,
    /// Enforce the TCPX contracts (`TCPXEMU_STRICT`): requests move only once `test` released
    /// them, CUDA receives are limited per the MTU.
    pub strict: bool,
    /// MTU that sizes a devmem fragment (contract #2).
    pub mtu: u32,
    /// Helper-thread model (`TCPXEMU_THREADS` and its two numbers).
    pub threads: ThreadOpts,
}

impl Default for CommOpts {
    fn default() -> Self {
        Self {
            report_sizes: false,
            fault: None,
            unpack: None,
            strict: true,
            mtu: crate::device::DEFAULT_MTU,
            threads: ThreadOpts::default(),
        }
    }
}

/// What `accept` reports about a receive comm's device-unpack resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackInfo {
    /// Device address of the `unpackNetDeviceHandle`.
    pub handle: u64,
    /// Device address of the host-mapped `netUnpackMeta` ring.
    pub meta: u64,
    /// `bounce_buf`: the base of the GPU's bounce pool, shared by its receive comms; 0 while no
    /// comm of this GPU has registered CUDA memory (the pool is made then, see [`crate::gpu`]).
    pub bounce: u64,
    /// This comm's region of the pool (`src_off` values fall inside it): `(pool bytes, region
    /// offset, region bytes)`, once the comm's first CUDA registration reserved it.
    pub region: Option<(usize, usize, usize)>,
    /// CUDA ordinal of the comm's GPU.
    pub gpu: usize,
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
    /// Sends released to the helper threads (control message sent, job published).
    released: u64,
    next_chunk: u64,
    reqs: [ReqInfo; MAX_REQUESTS],
    /// Control bytes read: messages from `ctrl_start` to `ctrl_have` not matched yet.
    ctrl_buf: [u8; CTRL_BUF],
    ctrl_start: usize,
    ctrl_have: usize,
    /// `recv` calls on the ctrl socket (receive comms).
    ctrl_reads: u64,
    /// Tests since the last read that found the watcher's flag down ([`READ_ANYWAY`]).
    ctrl_skips: u32,
    /// The peer closed the ctrl socket.
    peer_closed: bool,
    close_fault_fired: bool,
    rng: Rng,
    stats: UnpackStats,
    post_stats: PostStats,
    /// `stale` fault: per receive slot, where the bytes land instead of the caller's buffer.
    scratch: Vec<Vec<u8>>,
    /// The thread model, chosen at the first transfer ([`Comm::start`]).
    model: Option<Model>,
    /// Per-socket model: the helper threads.
    workers: Vec<JoinHandle<()>>,
}

/// A send or receive comm.
pub struct Comm {
    dir: Dir,
    /// Receive comms: the ctrl socket in the watcher's set (declared before `ctrl`: it leaves
    /// the set before the socket closes).
    watch: Option<crate::ctrl_watch::Watch>,
    ctrl: TcpStream,
    shared: Arc<Shared>,
    caller: Mutex<Caller>,
    report_sizes: bool,
    max_run: usize,
    strict: bool,
    mtu: u32,
    threads: ThreadOpts,
    /// The comm's place in the process counts ([`crate::threads`]).
    _census: Census,
}

impl Comm {
    /// Builds a comm over an established connection; its sockets get their helper threads or
    /// event loop at the first transfer.
    pub fn new(dir: Dir, conn: Connected, opts: CommOpts) -> NetResult<Box<Comm>> {
        let CommOpts {
            report_sizes,
            fault,
            unpack,
            strict,
            mtu,
            threads,
        } = opts;
        // GPU resources come first, on the calling thread (its current CUDA context).
        let gpu = match unpack {
            Some(u) => Some(CommGpu::new(
                dir == Dir::Recv,
                conn.data.len(),
                conn.chunk_size,
                u.pool_bytes,
            )?),
            None => None,
        };
        let seed = unpack.map_or(0, |u| u.seed);
        let census = Census::new(conn.data.len());
        let shared = Arc::new(Shared::new(
            dir,
            conn.peer,
            conn.data,
            conn.chunk_size,
            conn.zerocopy,
            fault,
            gpu,
        ));
        let watch = (dir == Dir::Recv).then(|| crate::ctrl_watch::Watch::new(conn.ctrl.as_raw_fd()));
        let comm = Box::new(Comm {
            dir,
            watch,
            ctrl: conn.ctrl,
            shared: Arc::clone(&shared),
            caller: Mutex::new(Caller {
                posted: 0,
                matched: 0,
                tested: 0,
                consumed: 0,
                released: 0,
                next_chunk: 0,
                reqs: [ReqInfo::default(); MAX_REQUESTS],
                ctrl_buf: [0; CTRL_BUF],
                ctrl_start: 0,
                ctrl_have: 0,
                ctrl_reads: 0,
                ctrl_skips: 0,
                peer_closed: false,
                close_fault_fired: false,
                rng: Rng::new(seed),
                stats: UnpackStats::default(),
                post_stats: PostStats {
                    bytes: 0,
                    by_outstanding: [0; MAX_REQUESTS + 1],
                },
                scratch: Vec::new(),
                model: None,
                workers: Vec::new(),
            }),
            report_sizes,
            max_run: unpack.map_or(1, |u| u.max_run),
            strict,
            mtu,
            threads,
            _census: census,
        });
        if (&raw const *comm as usize) & !ADDR_MASK != 0 {
            return Err(NetError::internal(
                "comm allocated above 2^48: request tagging unsupported on this address space",
            ));
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

    /// The helper-thread model the comm took at its first transfer (None before).
    pub fn thread_model(&self) -> Option<Model> {
        self.lock().model
    }

    /// Receive comms: the `recv` calls made on the ctrl socket so far.
    pub fn ctrl_reads(&self) -> u64 {
        self.lock().ctrl_reads
    }

    /// Whether the comm has GPU resources (unpack mode).
    pub fn is_unpack(&self) -> bool {
        self.shared.gpu.is_some()
    }

    /// Receive comms in unpack mode: where the device-unpack resources are.
    pub fn unpack_handle(&self) -> Option<UnpackInfo> {
        let g = self.shared.gpu.as_ref()?;
        let r = g.recv.as_ref()?;
        let region = g.cuda().and_then(|c| c.region.as_ref());
        Some(UnpackInfo {
            handle: r.handle_ptr(),
            meta: r.meta_dev,
            bounce: region.map_or(0, crate::gpu::Region::bounce_base),
            region: region.map(|x| (x.pool.buf.len(), x.off, x.len)),
            gpu: g.dev.ordinal(),
        })
    }

    /// Receive comms in unpack mode: `cnt[slot]` of the `netUnpackMeta` ring (for tests).
    pub fn unpack_cnt(&self, slot: usize) -> Option<u64> {
        Some(self.shared.gpu.as_ref()?.recv.as_ref()?.cnt(slot))
    }

    fn lock(&self) -> MutexGuard<'_, Caller> {
        self.caller.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn handle(&self, seq: u64) -> Request {
        let tag = (seq as usize & 0x7fff) + 1;
        ((std::ptr::from_ref::<Comm>(self) as usize) | (tag << TAG_SHIFT)) as Request
    }

    fn tag_of(req: Request) -> usize {
        req as usize >> TAG_SHIFT
    }

    fn same_request(&self, req: Request, seq: u64) -> bool {
        req as usize & ADDR_MASK == std::ptr::from_ref::<Comm>(self) as usize
            && Self::tag_of(req) == (seq as usize & 0x7fff) + 1
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

    /// Everything `isend`/`irecv` do before filling their slot: [`Comm::admit`]'s checks, the
    /// comm's helpers at its first transfer, and CUDA resources for a caller that never
    /// registered its buffer. The request's sequence number.
    fn admit_and_start(&self, c: &mut Caller, cuda: bool) -> NetResult<u64> {
        let seq = self.admit(c)?;
        self.start(c, cuda)?;
        if cuda {
            self.cuda_ready()?;
        }
        Ok(seq)
    }

    /// Shared checks of `isend`/`irecv`: a failed comm, the 16-request limit, the close fault.
    fn admit(&self, c: &mut Caller) -> NetResult<u64> {
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        if c.posted - c.consumed >= MAX_REQUESTS as u64 {
            return Err(contracts::MAX_REQUESTS.refuse(
                nccl_net_abi::NCCL_INTERNAL_ERROR,
                format_args!(
                    "unable to allocate requests: {MAX_REQUESTS} already outstanding on {} comm with peer {}",
                    self.dir_name(),
                    self.peer()
                ),
                "test (and irecvConsumed) the oldest request before posting another",
            ));
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
        // SAFETY: forwarded contract.
        unsafe { self.isend_mem(ptr, size, false) }
    }

    /// [`isend`](Self::isend) of host (`cuda = false`) or device memory (unpack mode only:
    /// staged through pinned memory by the helper threads).
    ///
    /// # Safety
    /// As [`isend`](Self::isend); device memory must belong to the comm's CUDA context.
    pub unsafe fn isend_mem(&self, ptr: *const u8, size: usize, cuda: bool) -> NetResult<Request> {
        if self.dir != Dir::Send {
            return Err(NetError::invalid_usage("isend on a receive comm"));
        }
        if cuda && !self.is_unpack() {
            return Err(NetError::invalid_argument(
                "isend of CUDA memory on a host-mode comm: set TCPXEMU_MODE=unpack (or auto on a GPU host)",
            ));
        }
        let mut c = self.lock();
        let seq = self.admit_and_start(&mut c, cuda)?;
        let slot = seq as usize % MAX_REQUESTS;
        c.reqs[slot] = ReqInfo {
            ptr: ptr as usize,
            cap: size,
            size,
            cuda,
            cnt: 0,
        };
        c.posted += 1;
        PostStats::note(&mut c, size);
        c.matched = c.posted;
        if !self.strict {
            self.release_sends(&mut c)?;
        }
        Ok(self.handle(seq))
    }

    /// Send side: hands every queued send to the helper threads: one `send` of their control
    /// messages, one publication. Called by `test` (strict) or `isend` (lenient); a no-op when
    /// nothing is queued, so a caller testing in a loop pays one comparison.
    fn release_sends(&self, c: &mut Caller) -> NetResult<()> {
        let (first, end) = (c.released, c.posted);
        if first == end {
            return Ok(());
        }
        let mut msgs = [0u8; CTRL_LEN * MAX_REQUESTS];
        let mut jobs = [Job::default(); MAX_REQUESTS];
        for (k, seq) in (first..end).enumerate() {
            let slot = seq as usize % MAX_REQUESTS;
            let info = c.reqs[slot];
            // `short`, `short-lie`: half the bytes move, and the control message says so.
            let len = if Fault::shortens(self.shared.fault, seq) {
                short_len(info.size)
            } else {
                info.size
            };
            let msg = &mut msgs[k * CTRL_LEN..(k + 1) * CTRL_LEN];
            msg[0..4].copy_from_slice(&CTRL_MAGIC);
            msg[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
            msg[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            self.shared.pending[slot].store(len, Ordering::Relaxed);
            jobs[k] = Job {
                seq,
                ptr: info.ptr,
                len,
                first_chunk: c.next_chunk,
                cuda: info.cuda,
            };
            c.next_chunk += self.shared.chunks(len);
        }
        let n = (end - first) as usize;
        // SAFETY: `msgs` is a local buffer of at least n * CTRL_LEN bytes.
        if let Err(e) = unsafe { send_all(self.ctrl.as_raw_fd(), msgs.as_ptr(), n * CTRL_LEN) } {
            let err = NetError::from_io(&e, format_args!("ctrl socket sending to peer {}", self.peer()));
            self.shared.set_error(err.clone());
            return Err(err);
        }
        c.released = end;
        self.shared.publish(&jobs[..n]);
        Ok(())
    }

    /// Posts a receive of up to `cap` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+cap` must stay writable until the request completes (or the comm is closed).
    pub unsafe fn irecv(&self, ptr: *mut u8, cap: usize) -> NetResult<Request> {
        // SAFETY: forwarded contract.
        unsafe { self.irecv_mem(ptr, cap, false) }
    }

    /// [`irecv`](Self::irecv) into host (`cuda = false`) or device memory. A CUDA receive (unpack
    /// mode only) never touches `ptr`: its bytes land in the bounce buffer and the slot's
    /// `netUnpackMeta` entry says where; at most 4 MiB (2048 fragments), as TCPX.
    ///
    /// # Safety
    /// As [`irecv`](Self::irecv).
    pub unsafe fn irecv_mem(&self, ptr: *mut u8, cap: usize, cuda: bool) -> NetResult<Request> {
        if self.dir != Dir::Recv {
            return Err(NetError::invalid_usage("irecv on a send comm"));
        }
        if cuda && self.strict {
            contracts::cuda_recv_size(cap, self.mtu)?;
        } else if cuda && cap > MAX_RECV {
            return Err(NetError::invalid_argument(format!(
                "CUDA receive of {cap} bytes exceeds the device-unpack limit of {MAX_RECV} bytes ({MAX_DESCRIPTORS} fragments of 4 KiB per receive, NET_UNPACK_MAX_SLICE_SIZE): post receives of at most {MAX_RECV} bytes (TCPX exits on this)"
            )));
        }
        if cuda && !self.is_unpack() {
            return Err(NetError::invalid_argument(
                "irecv into CUDA memory on a host-mode comm: set TCPXEMU_MODE=unpack (or auto on a GPU host)",
            ));
        }
        let mut c = self.lock();
        let seq = self.admit_and_start(&mut c, cuda)?;
        let slot = seq as usize % MAX_REQUESTS;
        c.reqs[slot] = ReqInfo {
            ptr: ptr as usize,
            cap,
            size: 0,
            cuda,
            cnt: 0,
        };
        c.posted += 1;
        PostStats::note(&mut c, cap);
        if !self.strict {
            self.progress(&mut c);
        }
        Ok(self.handle(seq))
    }

    /// Plans where the pages of CUDA receive `slot` land and writes its descriptors into the
    /// slot's (free) `netUnpackMeta` entry; the count is published when `test` reports it done.
    fn plan_unpack(&self, c: &mut Caller, slot: usize, size: usize) -> NetResult<()> {
        let g = self.shared.gpu.as_ref();
        let (Some(ru), Some(region)) = (
            g.and_then(|g| g.recv.as_ref()),
            g.and_then(|g| g.cuda()).and_then(|c| c.region.as_ref()),
        ) else {
            return Err(NetError::internal("CUDA receive without a bounce buffer"));
        };
        let mut plan = self.shared.plans[slot]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        plan.build(size, &ru.geo, self.max_run, &mut c.rng)
            .map_err(NetError::invalid_argument)?;
        // SAFETY: the slot is free (its previous receive was consumed: at most 16 outstanding)
        // and only this thread writes descriptors.
        let metas = unsafe { ru.slot_metas(slot) };
        let slot_off = u32::try_from(region.slot_off(slot))
            .map_err(|_| NetError::internal("bounce slot beyond 4 GiB: src_off is 32-bit"))?;
        let n = plan
            .descriptors(slot_off, metas, &mut c.rng)
            .map_err(NetError::internal)?;
        c.reqs[slot].cnt = n as u64;
        Ok(())
    }

    /// Tests `req`, which must be the oldest request not yet reported done. Returns the size on
    /// completion (the sender's size, for receives), None while in flight.
    pub fn test(&self, req: Request) -> NetResult<Option<usize>> {
        let mut c = self.lock();
        let seq = c.tested;
        if seq >= c.posted || !self.same_request(req, seq) {
            return Err(contracts::FIFO_TEST.refuse(
                nccl_net_abi::NCCL_INTERNAL_ERROR,
                format_args!(
                    "test called with invalid request {req:p} ({} comm with peer {}: {} outstanding, oldest is {seq})",
                    self.dir_name(),
                    self.peer(),
                    c.posted - c.tested
                ),
                "test the oldest request of the comm that is not done yet",
            ));
        }
        match self.dir {
            Dir::Recv => self.progress(&mut c),
            Dir::Send => self.release_sends(&mut c)?,
        }
        let slot = seq as usize % MAX_REQUESTS;
        let dropped = self.dir == Dir::Recv && Fault::hits(self.shared.fault, FaultKind::Drop, seq);
        if seq < c.matched && self.shared.pending[slot].load(Ordering::Acquire) == 0 && !dropped {
            let info = c.reqs[slot];
            let stale = self.dir == Dir::Recv && Fault::hits(self.shared.fault, FaultKind::Stale, seq);
            if self.dir == Dir::Recv {
                if let Some(ru) = self.shared.gpu.as_ref().and_then(|g| g.recv.as_ref()) {
                    // Host receives carry no descriptors (TCPX does the same).
                    // `stale`: no descriptors, so the unpack leaves the buffer as it was.
                    let cnt = if info.cuda && !stale { info.cnt } else { 0 };
                    ru.publish_cnt(slot, cnt);
                    if info.cuda {
                        if c.stats.cuda_recvs == 0 && info.size > 0 {
                            crate::info!(
                                nccl_net_abi::NCCL_NET,
                                "first device-unpack receive from peer {}: {} bytes in {cnt} scrambled 4 KiB fragments (slot {slot})",
                                self.peer(),
                                info.size
                            );
                        }
                        c.stats.cuda_recvs += 1;
                        c.stats.cuda_bytes += info.size as u64;
                        c.stats.descriptors += cnt;
                    } else {
                        c.stats.host_recvs += 1;
                    }
                }
            }
            if self.dir == Dir::Recv
                && !info.cuda
                && info.size > 0
                && Fault::hits(self.shared.fault, FaultKind::Corrupt, seq)
            {
                // SAFETY: the offset is inside the received bytes of the caller's buffer.
                unsafe { *((info.ptr + corrupt_offset(info.size)) as *mut u8) ^= CORRUPT_XOR };
            }
            c.tested += 1;
            if self.dir == Dir::Send {
                c.consumed = c.tested;
            }
            if self.dir == Dir::Recv && Fault::hits(self.shared.fault, FaultKind::ShortLie, seq) {
                // `short-lie`: the size the receive was posted for, whatever arrived.
                return Ok(Some(info.cap));
            }
            return Ok(Some(info.size));
        }
        match self.shared.error() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Bytes this comm moved in all, and those of them moved inline by the publishing thread
    /// (the shared model; 0 on per-socket threads).
    pub fn moved_bytes(&self) -> (u64, u64) {
        let t = &self.shared.timing;
        (t.bytes.load(Ordering::Relaxed), t.inline_bytes.load(Ordering::Relaxed))
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
            return Err(contracts::MAX_REQUESTS.refuse(
                nccl_net_abi::NCCL_INTERNAL_ERROR,
                format_args!(
                    "irecvConsumed called with invalid request {req:p} (peer {}): the oldest completed, unconsumed receive is {}",
                    self.peer(),
                    if seq < c.tested { seq.to_string() } else { "none".to_owned() }
                ),
                "call irecvConsumed once per completed receive, in posting order",
            ));
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
        if self.dir == Dir::Recv && self.is_unpack() {
            let st = self.lock().stats;
            crate::info!(
                nccl_net_abi::NCCL_NET,
                "closing recv comm from peer {}: {} device-unpack receives ({} bytes, {} descriptors), {} host-memory receives",
                self.peer(),
                st.cuda_recvs,
                st.cuda_bytes,
                st.descriptors,
                st.host_recvs
            );
        }
        self.shared.begin_close();
        // SAFETY: shutdown on our own descriptor.
        unsafe { libc::shutdown(self.ctrl.as_raw_fd(), libc::SHUT_RDWR) };
        let (workers, model) = {
            let mut c = self.lock();
            (std::mem::take(&mut c.workers), c.model)
        };
        let threads = workers.len();
        for h in workers {
            let _ = h.join();
        }
        if let Err(e) = evloop::detach(&self.shared) {
            crate::warn!(nccl_net_abi::NCCL_NET, "{}", e.msg);
        }
        let posts = {
            let c = self.lock();
            c.post_stats.summary(c.posted)
        };
        crate::info!(
            nccl_net_abi::NCCL_NET,
            "closed {} comm {} peer {}: {}; {posts}",
            if self.dir == Dir::Recv { "recv" } else { "send" },
            if self.dir == Dir::Recv { "from" } else { "to" },
            self.peer(),
            if model == Some(Model::Shared) {
                let (bytes, inline) = self.moved_bytes();
                format!("{bytes} bytes moved on the shared model, {inline} of them inline by test")
            } else {
                self.shared.timing.summary(threads)
            }
        );
    }
}
