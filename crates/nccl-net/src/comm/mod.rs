//! Connections and transfers: listen/connect/accept, memory registration, isend/irecv/test and
//! irecvConsumed, with ownership rules that make the plugin's contracts hard to break.
//!
//! Rules encoded here (plugin-abi.md §1.6, §3.2, §3.8):
//! - the 128-byte handle given to `connect` stays at one address across retries ([`PendingConnect`]
//!   owns it boxed): plugins, TCPX included, keep their async connect state in it;
//! - `accept` always gets a pointer to a pointer to a live `DeviceHandleV7` owned by the future
//!   [`RecvComm`] (TCPX writes through it unconditionally);
//! - a [`Request`] is consumed by `test`, so a completed request cannot be tested again, and it
//!   carries its comm's id, so it cannot be tested on another comm;
//! - completed receives are acknowledged with `irecvConsumed` strictly in posting order (what NCCL
//!   does and TCPX checks), enforced through the [`RecvDone`] token;
//! - dropping a comm deregisters its memory, then closes it; failures are logged, never panicked.
//!
//! The hot path (isend/irecv/test/consume) performs no allocation and no logging on success:
//! bookkeeping is counters plus a fixed ring of post instants.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_net_abi as abi;

use crate::error::NetError;
use crate::loader::Plugin;
use crate::logger;
use crate::table::IntLimit;

/// The 128-byte handle `listen` produces and `connect` consumes; ship it to the peer out of band.
pub type NetHandle = [u8; abi::NET_HANDLE_MAXSIZE];

/// Kind of memory being registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemType {
    /// Host memory (`NCCL_PTR_HOST`).
    Host,
    /// CUDA device memory (`NCCL_PTR_CUDA`).
    Cuda,
    /// CUDA device memory handed over as a DMA-BUF file descriptor (`regMrDmaBuf`, for plugins
    /// with `NCCL_PTR_DMABUF`): `fd` exports the registered range from byte `offset`. The caller
    /// keeps `fd` open for the call and may close it after (as NCCL does).
    CudaDmaBuf { fd: std::ffi::c_int, offset: u64 },
}

/// A memory registration of one comm. Ids are unique in the process, so one from another comm (or
/// a deregistered one) is recognised and refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrId(u32);

/// Progress counters of one comm, for stall diagnostics.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommCounters {
    /// Requests posted (isend/irecv returned a request).
    pub posted: u64,
    /// Requests `test` reported done.
    pub completed: u64,
    /// Receives acknowledged with [`RecvComm::consume`] (always 0 for send comms).
    pub consumed: u64,
    /// Age of the oldest posted, not yet completed request.
    pub oldest_outstanding_age: Option<Duration>,
}

/// An outstanding isend/irecv. Not `Clone`: [`SendComm::test`]/[`RecvComm::test`] consume it and
/// give it back only while it is pending.
#[must_use = "a request must be tested until done, or the plugin's slot is never freed"]
#[derive(Debug)]
pub struct Request {
    comm: u64,
    ptr: *mut c_void,
    seq: u64,
    posted: Instant,
}

// SAFETY: a request is an opaque token; it is only ever handed back to the plugin through the
// `&mut` comm it belongs to (checked by id), so moving it between threads moves no plugin access.
unsafe impl Send for Request {}

impl Request {
    /// When the request was posted.
    pub fn posted_at(&self) -> Instant {
        self.posted
    }

    /// Position of this request in its comm's posting order (0-based).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// A completed receive that still has to be acknowledged with [`RecvComm::consume`], in order.
#[must_use = "completed receives must be passed to RecvComm::consume, in posting order"]
#[derive(Debug)]
pub struct RecvDone {
    comm: u64,
    ptr: *mut c_void,
    seq: u64,
}

// SAFETY: as for `Request`.
unsafe impl Send for RecvDone {}

impl RecvDone {
    /// Position of the receive in its comm's posting order (0-based).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// Result of a `test`.
#[must_use]
#[derive(Debug)]
pub enum Poll {
    /// Not done: test it again later.
    Pending(Request),
    /// Done. `size` only when the plugin reported it (TCPX never does); `recv` is `Some` for
    /// receives and must be passed to [`RecvComm::consume`].
    Done {
        size: Option<usize>,
        recv: Option<RecvDone>,
    },
}

static NEXT_COMM_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_MR_ID: AtomicU32 = AtomicU32::new(1);

/// Post instants kept per comm. More than this many outstanding requests (no plugin allows that
/// many: NCCL asks for 32, TCPX has 16) only makes the oldest age an underestimate.
const POST_RING: usize = 64;

/// The device-handle and config a connect/accept passes, boxed so their addresses are stable and
/// owned by the comm for its whole life (plugins may keep the pointers).
struct DevSlot {
    handle: abi::DeviceHandleV7,
    /// What `accept`/`connect` get a pointer to: initially `&handle`. A plugin following the other
    /// convention may replace it with a pointer to its own struct; that is copied into `handle`.
    ptr: *mut abi::DeviceHandleV7,
    config: abi::CommConfigV10,
}

impl DevSlot {
    // Boxed on purpose: the plugin keeps the slot's address, so it must never move.
    #[allow(clippy::unnecessary_box_returns)]
    fn new() -> Box<DevSlot> {
        let mut slot = Box::new(DevSlot {
            handle: abi::DeviceHandleV7::zeroed(),
            ptr: std::ptr::null_mut(),
            config: abi::CommConfigV10 {
                traffic_class: abi::NCCL_NET_TRAFFIC_CLASS_UNDEF,
            },
        });
        slot.ptr = &raw mut slot.handle;
        slot
    }

    /// After a successful accept: adopt a plugin-allocated handle if the plugin swapped the pointer.
    fn settle(&mut self) {
        let own: *mut abi::DeviceHandleV7 = &raw mut self.handle;
        if !self.ptr.is_null() && self.ptr != own {
            // SAFETY: the plugin stored a pointer to its own, live device-handle struct.
            self.handle = unsafe { *self.ptr };
        }
        self.ptr = own;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Recv,
}

/// State shared by send and recv comms.
struct Core {
    plugin: Arc<Plugin>,
    comm: *mut c_void,
    kind: Kind,
    id: u64,
    peer: String,
    /// (id, mhandle, base, len) of each registration; a handful per comm, scanned linearly.
    mrs: Vec<(MrId, *mut c_void, usize, usize)>,
    posted: u64,
    completed: u64,
    consumed: u64,
    /// Post instant of request `seq` at `seq % POST_RING`, cleared on completion.
    ring: [(u64, Option<Instant>); POST_RING],
    /// Never read after setup, but owned here: the plugin may hold pointers into it.
    dev: Box<DevSlot>,
}

impl Core {
    fn new(plugin: Arc<Plugin>, comm: *mut c_void, kind: Kind, peer: String, dev: Box<DevSlot>) -> Core {
        Core {
            plugin,
            comm,
            kind,
            id: NEXT_COMM_ID.fetch_add(1, Ordering::Relaxed),
            peer,
            mrs: Vec::new(),
            posted: 0,
            completed: 0,
            consumed: 0,
            ring: [(0, None); POST_RING],
            dev,
        }
    }

    fn abi_limit(&self, what: &str, len: usize, e: IntLimit) -> NetError {
        NetError::Usage(format!(
            "{what} of {len} bytes with peer {}: net ABI v{} passes sizes as int (at most {} bytes); \
             split the transfer or use a plugin with ABI >= v9",
            self.peer,
            e.abi,
            c_int::MAX
        ))
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError> {
        let mut mh: *mut c_void = std::ptr::null_mut();
        let (call, rc) = match mem {
            MemType::Host | MemType::Cuda => {
                let ty = if mem == MemType::Host {
                    abi::NCCL_PTR_HOST
                } else {
                    abi::NCCL_PTR_CUDA
                };
                // SAFETY: the comm is open; the caller guarantees the memory outlives the
                // registration.
                let rc = unsafe { self.plugin.table.reg_mr(self.comm, ptr.cast(), len, ty, &mut mh) }
                    .map_err(|e| self.abi_limit("regMr", len, e))?;
                ("regMr", rc)
            }
            MemType::CudaDmaBuf { fd, offset } => {
                // SAFETY: as above; `fd` exports the range (the caller's contract).
                let rc = unsafe {
                    self.plugin.table.reg_mr_dma_buf(
                        self.comm,
                        ptr.cast(),
                        len,
                        abi::NCCL_PTR_CUDA,
                        offset,
                        fd,
                        &mut mh,
                    )
                };
                ("regMrDmaBuf", rc)
            }
        };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call(
                call,
                rc,
                &self.peer,
                format!("{len} bytes of {mem:?} memory at {ptr:p}"),
            ));
        }
        let id = MrId(NEXT_MR_ID.fetch_add(1, Ordering::Relaxed));
        self.mrs.push((id, mh, ptr as usize, len));
        Ok(id)
    }

    fn deregister(&mut self, mr: MrId) -> Result<(), NetError> {
        let Some(i) = self.mrs.iter().position(|m| m.0 == mr) else {
            return Err(NetError::Usage(format!(
                "deregister: {mr:?} is not registered on the comm with {}",
                self.peer
            )));
        };
        // Receives hold their buffer until consumed (TCPX recycles the slot only then).
        let settled = match self.kind {
            Kind::Send => self.completed,
            Kind::Recv => self.consumed,
        };
        if self.posted != settled {
            return Err(NetError::Usage(format!(
                "deregister with {} requests in flight on the comm with {}: finish (and consume) them first",
                self.posted - settled,
                self.peer
            )));
        }
        let (_, mh, _, _) = self.mrs.swap_remove(i);
        // SAFETY: `mh` came from regMr on this comm and no request is outstanding.
        let rc = unsafe { self.plugin.table.dereg_mr(self.comm, mh) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call("deregMr", rc, &self.peer, ""));
        }
        Ok(())
    }

    /// The mhandle for `mr`, checking `[ptr, ptr+len)` lies inside the registration. Hot path.
    #[inline]
    fn mhandle(&self, mr: MrId, ptr: usize, len: usize) -> Result<*mut c_void, NetError> {
        for &(id, mh, base, mlen) in &self.mrs {
            if id == mr {
                let inside = ptr >= base && ptr.checked_add(len).is_some_and(|end| end <= base + mlen);
                return if inside {
                    Ok(mh)
                } else {
                    Err(self.outside(mr, ptr, len, base, mlen))
                };
            }
        }
        Err(self.unknown_mr(mr))
    }

    #[cold]
    fn outside(&self, mr: MrId, ptr: usize, len: usize, base: usize, mlen: usize) -> NetError {
        NetError::Usage(format!(
            "buffer {ptr:#x}+{len} lies outside {mr:?} ({base:#x}+{mlen}) on the comm with {}",
            self.peer
        ))
    }

    #[cold]
    fn unknown_mr(&self, mr: MrId) -> NetError {
        NetError::Usage(format!(
            "{mr:?} is not registered on the comm with {} (another comm's, or deregistered)",
            self.peer
        ))
    }

    /// Records a posted request. Hot path.
    #[inline]
    fn posted(&mut self, ptr: *mut c_void) -> Request {
        let seq = self.posted;
        let now = Instant::now();
        self.ring[(seq % POST_RING as u64) as usize] = (seq, Some(now));
        self.posted += 1;
        Request {
            comm: self.id,
            ptr,
            seq,
            posted: now,
        }
    }

    /// `test`, shared by both kinds. Hot path.
    #[inline]
    fn test(&mut self, req: Request) -> Result<Poll, NetError> {
        if req.comm != self.id {
            return Err(self.foreign("test", req.seq));
        }
        let mut done: c_int = 0;
        // TCPX never writes sizes: -1 marks "not reported".
        let mut size: c_int = -1;
        // SAFETY: `req` is a live request of this comm (checked by id; consumed on completion).
        let rc = unsafe { self.plugin.table.test(req.ptr, &mut done, &mut size) };
        if rc != abi::NCCL_SUCCESS {
            return Err(self.test_failed(rc, &req));
        }
        if done == 0 {
            return Ok(Poll::Pending(req));
        }
        self.completed += 1;
        let slot = &mut self.ring[(req.seq % POST_RING as u64) as usize];
        if slot.0 == req.seq {
            slot.1 = None;
        }
        let size = usize::try_from(size).ok();
        let recv = (self.kind == Kind::Recv).then_some(RecvDone {
            comm: self.id,
            ptr: req.ptr,
            seq: req.seq,
        });
        Ok(Poll::Done { size, recv })
    }

    #[cold]
    fn foreign(&self, what: &str, seq: u64) -> NetError {
        NetError::Usage(format!(
            "{what}: request/receive #{seq} belongs to another comm, not the one with {}",
            self.peer
        ))
    }

    #[cold]
    fn test_failed(&self, rc: c_int, req: &Request) -> NetError {
        NetError::call(
            "test",
            rc,
            &self.peer,
            format!(
                "request #{} posted {:.3} s ago; {} posted, {} completed on this comm",
                req.seq,
                req.posted.elapsed().as_secs_f64(),
                self.posted,
                self.completed
            ),
        )
    }

    #[cold]
    fn post_failed(&self, call: &'static str, rc: c_int, len: usize, tag: c_int) -> NetError {
        NetError::call(
            call,
            rc,
            &self.peer,
            format!(
                "{len} bytes, tag {tag}; {} requests outstanding",
                self.posted - self.completed
            ),
        )
    }

    fn counters(&self) -> CommCounters {
        let now = Instant::now();
        CommCounters {
            posted: self.posted,
            completed: self.completed,
            consumed: self.consumed,
            oldest_outstanding_age: self
                .ring
                .iter()
                .filter_map(|&(_, t)| t)
                .min()
                .map(|t| now.duration_since(t)),
        }
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        let table = &self.plugin.table;
        for (id, mh, _, _) in self.mrs.drain(..) {
            // SAFETY: `mh` came from regMr on this comm, which is still open; nothing will use it again.
            let rc = unsafe { table.dereg_mr(self.comm, mh) };
            if rc != abi::NCCL_SUCCESS {
                logger::local_warn(format_args!(
                    "deregMr({id:?}) on close of the comm with {} failed: {} ({rc})",
                    self.peer,
                    abi::result_name(rc)
                ));
            }
        }
        // SAFETY: the comm is open and closed exactly once, here, after its registrations.
        let (call, rc) = unsafe {
            match self.kind {
                Kind::Send => ("closeSend", table.close_send(self.comm)),
                Kind::Recv => ("closeRecv", table.close_recv(self.comm)),
            }
        };
        if rc != abi::NCCL_SUCCESS {
            logger::local_warn(format_args!(
                "{call} of the comm with {} failed: {} ({rc})",
                self.peer,
                abi::result_name(rc)
            ));
        }
        // `self.dev` is dropped after this, i.e. after the close: the plugin may use it until then.
    }
}

/// The sending end of a connection. `Send`, not `Sync`: drive each comm from one thread at a time.
pub struct SendComm {
    core: Core,
}

/// The receiving end of a connection. `Send`, not `Sync`.
pub struct RecvComm {
    core: Core,
}

// SAFETY: a comm's plugin state is only touched through `&mut self`, i.e. by one thread at a time;
// plugins (TCPX included) allow a comm to be driven from any one thread (NCCL's proxy thread is not
// the thread that created it). Not Sync: the raw pointers keep the auto trait off.
unsafe impl Send for SendComm {}
// SAFETY: as above.
unsafe impl Send for RecvComm {}

/// What send and receive comms share for memory registration, so that code registering a
/// buffer (in segments, say) serves both.
pub trait Registrar {
    /// Registers `len` bytes at `ptr` (see [`SendComm::register`]).
    ///
    /// # Safety
    /// As [`SendComm::register`].
    unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError>;
}

impl Registrar for SendComm {
    unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.register(ptr, len, mem) }
    }
}

impl Registrar for RecvComm {
    unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.register(ptr, len, mem) }
    }
}

impl SendComm {
    /// Registers `len` bytes at `ptr` for sending.
    ///
    /// # Safety
    /// The memory is of type `mem`, stays valid (and is not freed) until this comm is dropped or the
    /// registration is deregistered; it is deregistered automatically before the comm closes.
    pub unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.register(ptr, len, mem) }
    }

    /// Deregisters `mr`; refused while requests are in flight on this comm.
    pub fn deregister(&mut self, mr: MrId) -> Result<(), NetError> {
        self.core.deregister(mr)
    }

    /// Posts a send of `len` bytes at `ptr`, which must lie inside registration `mr`.
    /// `Ok(None)`: the plugin could not start it now (NULL request); call again later.
    ///
    /// # Safety
    /// The bytes stay valid and unmodified until `test` reports the request done.
    #[inline]
    pub unsafe fn isend(
        &mut self,
        mr: MrId,
        ptr: *const u8,
        len: usize,
        tag: i32,
    ) -> Result<Option<Request>, NetError> {
        let c = &mut self.core;
        let mh = c.mhandle(mr, ptr as usize, len)?;
        let mut req: *mut c_void = std::ptr::null_mut();
        // SAFETY: open send comm, buffer inside a registration of it, kept alive by the caller.
        let rc = unsafe {
            c.plugin
                .table
                .isend(c.comm, ptr.cast_mut().cast(), len, tag, mh, &mut req)
        }
        .map_err(|e| c.abi_limit("isend", len, e))?;
        if rc != abi::NCCL_SUCCESS {
            return Err(c.post_failed("isend", rc, len, tag));
        }
        Ok((!req.is_null()).then(|| c.posted(req)))
    }

    /// Tests a send. Consumes the request; gives it back while pending.
    #[inline]
    pub fn test(&mut self, req: Request) -> Result<Poll, NetError> {
        self.core.test(req)
    }

    /// The peer label given at connect time.
    pub fn peer(&self) -> &str {
        &self.core.peer
    }

    /// Progress counters.
    pub fn counters(&self) -> CommCounters {
        self.core.counters()
    }

    /// The plugin this comm belongs to.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.core.plugin
    }
}

impl RecvComm {
    /// Registers `len` bytes at `ptr` for receiving.
    ///
    /// # Safety
    /// As [`SendComm::register`].
    pub unsafe fn register(&mut self, ptr: *mut u8, len: usize, mem: MemType) -> Result<MrId, NetError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.register(ptr, len, mem) }
    }

    /// Deregisters `mr`; refused while receives are in flight or unconsumed on this comm.
    pub fn deregister(&mut self, mr: MrId) -> Result<(), NetError> {
        self.core.deregister(mr)
    }

    /// Posts one receive (`n = 1`) of up to `len` bytes into `ptr`, inside registration `mr`.
    /// `Ok(None)`: the plugin could not start it now; call again later.
    ///
    /// # Safety
    /// The memory stays valid and is not accessed by the caller until `test` reports it done.
    #[inline]
    pub unsafe fn irecv(&mut self, mr: MrId, ptr: *mut u8, len: usize, tag: i32) -> Result<Option<Request>, NetError> {
        let c = &mut self.core;
        let mh = c.mhandle(mr, ptr as usize, len)?;
        let mut req: *mut c_void = std::ptr::null_mut();
        // SAFETY: open recv comm, buffer inside a registration of it, kept alive by the caller.
        let rc = unsafe { c.plugin.table.irecv(c.comm, ptr.cast(), len, tag, mh, &mut req) }
            .map_err(|e| c.abi_limit("irecv", len, e))?;
        if rc != abi::NCCL_SUCCESS {
            return Err(c.post_failed("irecv", rc, len, tag));
        }
        Ok((!req.is_null()).then(|| c.posted(req)))
    }

    /// Tests a receive. On completion, the returned [`RecvDone`] must be passed to [`Self::consume`].
    #[inline]
    pub fn test(&mut self, req: Request) -> Result<Poll, NetError> {
        self.core.test(req)
    }

    /// Tells the plugin a completed receive has been consumed (`irecvConsumed(comm, 1, req)` when the
    /// plugin has it). Receives must be consumed in posting order; anything else is refused without
    /// calling the plugin.
    #[inline]
    pub fn consume(&mut self, done: RecvDone) -> Result<(), NetError> {
        let c = &mut self.core;
        if done.comm != c.id {
            return Err(c.foreign("consume", done.seq));
        }
        if done.seq != c.consumed {
            return Err(out_of_order(c, done.seq));
        }
        // SAFETY: `done.ptr` is this comm's oldest completed, unconsumed receive.
        let rc = unsafe { c.plugin.table.irecv_consumed(c.comm, done.ptr) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call(
                "irecvConsumed",
                rc,
                &c.peer,
                format!("receive #{}", done.seq),
            ));
        }
        c.consumed += 1;
        Ok(())
    }

    /// Flushes a completed GPUDirect receive of `len` bytes at `ptr` (in registration `mr`) so
    /// that the GPU sees its bytes, as NCCL does for plugins asking `forceFlush` and for GPUs older
    /// than Hopper; waits for the flush until `deadline`. Never call it on TCPX (it dereferences
    /// a NULL request).
    ///
    /// # Safety
    /// The range is the buffer of a receive of this comm that has completed.
    pub unsafe fn flush(&mut self, mr: MrId, ptr: *mut u8, len: usize, deadline: Instant) -> Result<(), NetError> {
        let c = &mut self.core;
        if !c.plugin.table.has_iflush() {
            return Err(NetError::Usage(format!(
                "plugin '{}' asks for flushes but has no iflush entry",
                c.plugin.name()
            )));
        }
        let size = c_int::try_from(len).map_err(|_| c.abi_limit("iflush", len, IntLimit { abi: c.plugin.abi() }))?;
        let mh = c.mhandle(mr, ptr as usize, len)?;
        let mut req: *mut c_void = std::ptr::null_mut();
        // SAFETY: open recv comm; the range lies in registration `mh` (checked by `mhandle`).
        let rc = unsafe { c.plugin.table.iflush(c.comm, ptr.cast(), size, mh, &mut req) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call("iflush", rc, &c.peer, format!("{len} bytes")));
        }
        // A NULL request: the plugin had nothing to flush.
        while !req.is_null() {
            let (mut done, mut size): (c_int, c_int) = (0, -1);
            // SAFETY: `req` is the flush request just returned, tested until done.
            let rc = unsafe { c.plugin.table.test(req, &mut done, &mut size) };
            if rc != abi::NCCL_SUCCESS {
                return Err(NetError::call("test", rc, &c.peer, "of an iflush request".to_string()));
            }
            if done != 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(NetError::Usage(format!(
                    "iflush on the comm with {} did not complete before the deadline",
                    c.peer
                )));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The device handle `accept` filled, when the plugin offloads receives to the device
    /// (type other than `NCCL_NET_DEVICE_HOST`, e.g. TCPX's UNPACK).
    pub fn device_handle(&self) -> Option<&abi::DeviceHandleV7> {
        let h = &self.core.dev.handle;
        (h.net_device_type != abi::NCCL_NET_DEVICE_HOST).then_some(h)
    }

    /// The peer label given at accept time.
    pub fn peer(&self) -> &str {
        &self.core.peer
    }

    /// Progress counters.
    pub fn counters(&self) -> CommCounters {
        self.core.counters()
    }

    /// The plugin this comm belongs to.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.core.plugin
    }
}

#[cold]
fn out_of_order(c: &Core, seq: u64) -> NetError {
    NetError::Usage(format!(
        "consume of receive #{seq} on the comm with {}: receives must be consumed in posting order, \
         and the oldest unconsumed one is #{}",
        c.peer, c.consumed
    ))
}

mod setup;
pub use setup::{ListenComm, PendingConnect};
