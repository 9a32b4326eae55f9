//! [`Table`]: the plugin's function table, one variant per ABI version, and the per-call conversions
//! that let the rest of the crate speak one API.
//!
//! What differs between versions (plugin-abi.md §0.5, §1.4):
//! - v7: `regMr` and `isend`/`irecv` take `int` sizes; v8: `regMr` takes `size_t`; v9: isend/irecv too.
//!   A size an `int` cannot hold is refused here ([`IntLimit`]), never truncated.
//! - v10: `init(log, prof)`, `connect(dev, config, handle, ...)`, isend/irecv gain `phandle(s)`
//!   (always NULL here: no profiler).
//! - v11/v12: `init(&ctx, commId, config, log, prof)`, ctx-first `listen`/`connect`, `finalize(ctx)`.
//!
//! Entries that are identical in every version (accept, test, deregMr, close*, irecvConsumed, ...)
//! are read through the [`common!`] macro. Every method returns the raw `ncclResult_t`; turning it
//! into a [`crate::NetError`] (with peer and context) is the caller's job, off the success path.
//!
//! The table is a *copy* of the plugin's exported data object, read once at load time with a volatile
//! read (TCPX declares it `volatile`). Its function pointers stay valid because the library is never
//! unloaded (see `loader.rs`).

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use nccl_net_abi as abi;

use crate::props::{self, Properties};

/// The plugin's function table, by ABI version.
#[derive(Clone, Copy)]
pub(crate) enum Table {
    V7(abi::NetV7),
    V8(abi::NetV8),
    V9(abi::NetV9),
    V10(abi::NetV10),
    V11(abi::NetV11),
    V12(abi::NetV12),
}

/// A size that does not fit the `int` of an old ABI: the caller turns it into `NetError::Usage`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntLimit {
    pub(crate) abi: u32,
}

/// Returned for an entry the plugin left NULL. Required entries are checked at load time
/// ([`Table::missing_entries`]), so this is a defensive value, not an expected one.
const NULL_ENTRY: abi::NcclResult = abi::NCCL_INTERNAL_ERROR;

/// Reads a field that has the same type in every version.
macro_rules! common {
    ($table:expr, $field:ident) => {
        match $table {
            Table::V7(t) => t.$field,
            Table::V8(t) => t.$field,
            Table::V9(t) => t.$field,
            Table::V10(t) => t.$field,
            Table::V11(t) => t.$field,
            Table::V12(t) => t.$field,
        }
    };
}

/// Evaluates an expression on whichever version's table this is (for fields whose type differs
/// between versions but whose use does not).
macro_rules! each {
    ($table:expr, |$t:ident| $e:expr) => {
        match $table {
            Table::V7($t) => $e,
            Table::V8($t) => $e,
            Table::V9($t) => $e,
            Table::V10($t) => $e,
            Table::V11($t) => $e,
            Table::V12($t) => $e,
        }
    };
}

/// Calls an `Option<fn>` entry, or yields [`NULL_ENTRY`] when it is NULL.
macro_rules! call {
    ($f:expr, $($arg:expr),* $(,)?) => {
        match $f {
            Some(f) => f($($arg),*),
            None => NULL_ENTRY,
        }
    };
}

fn to_int(len: usize, abi: u32) -> Result<c_int, IntLimit> {
    c_int::try_from(len).map_err(|_| IntLimit { abi })
}

impl Table {
    /// Copies the table out of the plugin's exported data object.
    ///
    /// # Safety
    /// `sym` is the address of the plugin's `ncclNetPlugin_v{version}` object, which has the layout of
    /// that version, and `version` is in 7..=12.
    pub(crate) unsafe fn read(version: u32, sym: *const c_void) -> Option<Table> {
        // SAFETY: per the contract; a volatile read because TCPX exports a `volatile` object.
        unsafe {
            Some(match version {
                7 => Table::V7(ptr::read_volatile(sym.cast())),
                8 => Table::V8(ptr::read_volatile(sym.cast())),
                9 => Table::V9(ptr::read_volatile(sym.cast())),
                10 => Table::V10(ptr::read_volatile(sym.cast())),
                11 => Table::V11(ptr::read_volatile(sym.cast())),
                12 => Table::V12(ptr::read_volatile(sym.cast())),
                _ => return None,
            })
        }
    }

    pub(crate) fn version(&self) -> u32 {
        match self {
            Table::V7(_) => 7,
            Table::V8(_) => 8,
            Table::V9(_) => 9,
            Table::V10(_) => 10,
            Table::V11(_) => 11,
            Table::V12(_) => 12,
        }
    }

    pub(crate) fn name_ptr(&self) -> *const c_char {
        common!(self, name)
    }

    /// The required entries the plugin left NULL (empty = usable). `regMrDmaBuf`, `iflush`,
    /// `getDeviceMr`, `irecvConsumed`, `makeVDevice` and `setNetAttr` are optional.
    pub(crate) fn missing_entries(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        let mut check = |present: bool, name: &'static str| {
            if !present {
                missing.push(name);
            }
        };
        check(each!(self, |t| t.init.is_some()), "init");
        check(common!(self, devices).is_some(), "devices");
        check(each!(self, |t| t.get_properties.is_some()), "getProperties");
        check(
            each!(self, |t| t.listen.is_some() && t.connect.is_some()),
            "listen/connect",
        );
        check(common!(self, accept).is_some(), "accept");
        check(each!(self, |t| t.reg_mr.is_some()), "regMr");
        check(common!(self, dereg_mr).is_some(), "deregMr");
        check(each!(self, |t| t.isend.is_some() && t.irecv.is_some()), "isend/irecv");
        check(common!(self, test).is_some(), "test");
        check(common!(self, close_send).is_some(), "closeSend");
        check(common!(self, close_recv).is_some(), "closeRecv");
        check(common!(self, close_listen).is_some(), "closeListen");
        missing
    }

    /// `init`, in the version's form. `ctx` and `config` are only used by v11/v12; `config` must stay
    /// valid for the plugin's lifetime (a plugin may keep the pointer).
    ///
    /// # Safety
    /// `logger` is a valid logger; `config` points to a live config.
    pub(crate) unsafe fn init(
        &self,
        logger: abi::DebugLogger,
        ctx: &mut *mut c_void,
        config: *mut abi::CommConfigV10,
        comm_id: u64,
    ) -> abi::NcclResult {
        // SAFETY: entry points of a loaded plugin, called with the arguments their ABI expects.
        unsafe {
            match self {
                Table::V7(t) => call!(t.init, logger),
                Table::V8(t) => call!(t.init, logger),
                Table::V9(t) => call!(t.init, logger),
                Table::V10(t) => call!(t.init, logger, None),
                Table::V11(t) => call!(t.init, ctx, comm_id, config, logger, None),
                Table::V12(t) => call!(t.init, ctx, comm_id, config, logger, None),
            }
        }
    }

    /// `finalize(ctx)` for v11/v12; `None` for older versions (they have no finalize).
    ///
    /// # Safety
    /// `ctx` is the context `init` returned; no comm of this context is still open.
    pub(crate) unsafe fn finalize(&self, ctx: *mut c_void) -> Option<abi::NcclResult> {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Table::V11(t) => t.finalize.map(|f| f(ctx)),
                Table::V12(t) => t.finalize.map(|f| f(ctx)),
                _ => None,
            }
        }
    }

    /// # Safety
    /// The plugin is initialised.
    pub(crate) unsafe fn devices(&self, n: &mut c_int) -> abi::NcclResult {
        // SAFETY: `n` is a valid out-pointer.
        unsafe { call!(common!(self, devices), n) }
    }

    /// `getProperties(dev)`, normalised.
    ///
    /// # Safety
    /// The plugin is initialised.
    pub(crate) unsafe fn properties(&self, dev: c_int) -> Result<Properties, abi::NcclResult> {
        macro_rules! get {
            ($t:expr, $cty:ty, $norm:path) => {{
                // SAFETY: the properties structs are plain data (ints and pointers): all-zero is a
                // valid value, and NULL string pointers read as absent.
                let mut p: $cty = unsafe { std::mem::zeroed() };
                // SAFETY: `p` is a valid out-pointer of the version's layout.
                let rc = unsafe { call!($t.get_properties, dev, &mut p) };
                if rc != abi::NCCL_SUCCESS {
                    return Err(rc);
                }
                // SAFETY: the plugin just filled `p`; its strings are NULL or valid C strings.
                Ok(unsafe { $norm(&p) })
            }};
        }
        match self {
            Table::V7(t) => get!(t, abi::PropertiesV7, props::from_v7),
            Table::V8(t) => get!(t, abi::PropertiesV8, props::from_v8),
            Table::V9(t) => get!(t, abi::PropertiesV9, props::from_v9),
            Table::V10(t) => get!(t, abi::PropertiesV10, props::from_v9),
            Table::V11(t) => get!(t, abi::PropertiesV11, props::from_v11),
            Table::V12(t) => get!(t, abi::PropertiesV12, props::from_v12),
        }
    }

    /// # Safety
    /// `handle` points to 128 writable bytes; `ctx` is the v11+ context (ignored before).
    pub(crate) unsafe fn listen(
        &self,
        ctx: *mut c_void,
        dev: c_int,
        handle: *mut c_void,
        lc: &mut *mut c_void,
    ) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Table::V7(t) => call!(t.listen, dev, handle, lc),
                Table::V8(t) => call!(t.listen, dev, handle, lc),
                Table::V9(t) => call!(t.listen, dev, handle, lc),
                Table::V10(t) => call!(t.listen, dev, handle, lc),
                Table::V11(t) => call!(t.listen, ctx, dev, handle, lc),
                Table::V12(t) => call!(t.listen, ctx, dev, handle, lc),
            }
        }
    }

    /// # Safety
    /// `handle` is the listener's 128-byte handle, at the same address on every retry; `config` and
    /// `dev_handle` are live for the connection's lifetime.
    pub(crate) unsafe fn connect(
        &self,
        ctx: *mut c_void,
        dev: c_int,
        config: *mut abi::CommConfigV10,
        handle: *mut c_void,
        sc: &mut *mut c_void,
        dev_handle: *mut *mut abi::DeviceHandleV7,
    ) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Table::V7(t) => call!(t.connect, dev, handle, sc, dev_handle),
                Table::V8(t) => call!(t.connect, dev, handle, sc, dev_handle),
                Table::V9(t) => call!(t.connect, dev, handle, sc, dev_handle),
                Table::V10(t) => call!(t.connect, dev, config, handle, sc, dev_handle),
                Table::V11(t) => call!(t.connect, ctx, dev, handle, sc, dev_handle),
                Table::V12(t) => call!(t.connect, ctx, dev, handle, sc, dev_handle),
            }
        }
    }

    /// # Safety
    /// `lc` is an open listen comm; `dev_handle` points to a pointer to a live `DeviceHandleV7`.
    pub(crate) unsafe fn accept(
        &self,
        lc: *mut c_void,
        rc: &mut *mut c_void,
        dev_handle: *mut *mut abi::DeviceHandleV7,
    ) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, accept), lc, rc, dev_handle) }
    }

    /// # Safety
    /// `comm` is an open send/recv comm; `data..data+len` is memory of type `ty` that outlives the
    /// registration.
    pub(crate) unsafe fn reg_mr(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        len: usize,
        ty: c_int,
        mh: &mut *mut c_void,
    ) -> Result<abi::NcclResult, IntLimit> {
        // SAFETY: per the contract.
        unsafe {
            Ok(match self {
                Table::V7(t) => call!(t.reg_mr, comm, data, to_int(len, 7)?, ty, mh),
                Table::V8(t) => call!(t.reg_mr, comm, data, len, ty, mh),
                Table::V9(t) => call!(t.reg_mr, comm, data, len, ty, mh),
                Table::V10(t) => call!(t.reg_mr, comm, data, len, ty, mh),
                Table::V11(t) => call!(t.reg_mr, comm, data, len, ty, mh),
                Table::V12(t) => call!(t.reg_mr, comm, data, len, ty, mh),
            })
        }
    }

    /// Whether the plugin implements `regMrDmaBuf`.
    pub(crate) fn has_reg_mr_dma_buf(&self) -> bool {
        common!(self, reg_mr_dma_buf).is_some()
    }

    /// `regMrDmaBuf(comm, data, size, type, offset, fd, &mh)` (`size_t` size in every version).
    ///
    /// # Safety
    /// `comm` is an open comm; `fd` is a DMA-BUF exporting `[data, data + len)` from `offset`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reg_mr_dma_buf(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        len: usize,
        ty: c_int,
        offset: u64,
        fd: c_int,
        mh: &mut *mut c_void,
    ) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, reg_mr_dma_buf), comm, data, len, ty, offset, fd, mh) }
    }

    /// # Safety
    /// `mh` came from `reg_mr` on `comm` and no request using it is outstanding.
    pub(crate) unsafe fn dereg_mr(&self, comm: *mut c_void, mh: *mut c_void) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, dereg_mr), comm, mh) }
    }

    /// Hot path: no allocation.
    ///
    /// # Safety
    /// `comm` is an open send comm; `data..data+len` lies in the registration `mh` and stays valid
    /// until the request completes.
    #[inline]
    pub(crate) unsafe fn isend(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        len: usize,
        tag: c_int,
        mh: *mut c_void,
        req: &mut *mut c_void,
    ) -> Result<abi::NcclResult, IntLimit> {
        let none: *mut c_void = ptr::null_mut();
        // SAFETY: per the contract.
        unsafe {
            Ok(match self {
                Table::V7(t) => call!(t.isend, comm, data, to_int(len, 7)?, tag, mh, req),
                Table::V8(t) => call!(t.isend, comm, data, to_int(len, 8)?, tag, mh, req),
                Table::V9(t) => call!(t.isend, comm, data, len, tag, mh, req),
                Table::V10(t) => call!(t.isend, comm, data, len, tag, mh, none, req),
                Table::V11(t) => call!(t.isend, comm, data, len, tag, mh, none, req),
                Table::V12(t) => call!(t.isend, comm, data, len, tag, mh, none, req),
            })
        }
    }

    /// One receive (`n = 1`). The arrays NCCL passes live on its stack too: plugins copy them.
    /// Hot path: no allocation.
    ///
    /// # Safety
    /// As [`Table::isend`], for a recv comm and writable memory.
    #[inline]
    pub(crate) unsafe fn irecv(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        len: usize,
        tag: c_int,
        mh: *mut c_void,
        req: &mut *mut c_void,
    ) -> Result<abi::NcclResult, IntLimit> {
        let mut datas = [data];
        let mut tags = [tag];
        let mut mhs = [mh];
        let phandles: *mut *mut c_void = ptr::null_mut();
        // NCCL may pre-set *request to NCCL_NET_OPTIONAL_RECV_COMPLETION; we never do.
        *req = ptr::null_mut();
        macro_rules! go {
            ($t:expr, $sizes:expr $(, $ph:expr)?) => {{
                let mut sizes = [$sizes];
                call!($t.irecv, comm, 1, datas.as_mut_ptr(), sizes.as_mut_ptr(), tags.as_mut_ptr(),
                    mhs.as_mut_ptr(), $($ph,)? req)
            }};
        }
        // SAFETY: per the contract; the arrays hold one element each, matching n = 1.
        unsafe {
            Ok(match self {
                Table::V7(t) => go!(t, to_int(len, 7)?),
                Table::V8(t) => go!(t, to_int(len, 8)?),
                Table::V9(t) => go!(t, len),
                Table::V10(t) => go!(t, len, phandles),
                Table::V11(t) => go!(t, len, phandles),
                Table::V12(t) => go!(t, len, phandles),
            })
        }
    }

    /// `test(req, &done, &size)`; `test` keeps `int*` sizes in every version. Hot path.
    ///
    /// # Safety
    /// `req` is a live request of this plugin.
    #[inline]
    pub(crate) unsafe fn test(&self, req: *mut c_void, done: &mut c_int, size: &mut c_int) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, test), req, done, size) }
    }

    /// Whether the plugin implements `iflush`.
    pub(crate) fn has_iflush(&self) -> bool {
        common!(self, iflush).is_some()
    }

    /// `iflush(comm, 1, data, size, mh, req)`: makes a completed GPUDirect receive visible to the
    /// GPU. `size` is an `int` in every version.
    ///
    /// # Safety
    /// `comm` is an open recv comm; `data` lies in the registration `mh` of that comm.
    pub(crate) unsafe fn iflush(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        size: c_int,
        mh: *mut c_void,
        req: &mut *mut c_void,
    ) -> abi::NcclResult {
        let mut datas = [data];
        let mut sizes = [size];
        let mut mhs = [mh];
        *req = ptr::null_mut();
        // SAFETY: per the contract; one element each, n = 1.
        unsafe {
            call!(
                common!(self, iflush),
                comm,
                1,
                datas.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                req
            )
        }
    }

    /// Whether the plugin implements `irecvConsumed` (TCPX requires it for every receive).
    pub(crate) fn has_irecv_consumed(&self) -> bool {
        common!(self, irecv_consumed).is_some()
    }

    /// `irecvConsumed(comm, 1, req)`; success when the plugin has no such entry. Hot path.
    ///
    /// # Safety
    /// `req` is the oldest completed, unconsumed receive of `comm`.
    #[inline]
    pub(crate) unsafe fn irecv_consumed(&self, comm: *mut c_void, req: *mut c_void) -> abi::NcclResult {
        match common!(self, irecv_consumed) {
            // SAFETY: per the contract.
            Some(f) => unsafe { f(comm, 1, req) },
            None => abi::NCCL_SUCCESS,
        }
    }

    /// # Safety
    /// `comm` is an open send comm, closed at most once.
    pub(crate) unsafe fn close_send(&self, comm: *mut c_void) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, close_send), comm) }
    }

    /// # Safety
    /// `comm` is an open recv comm, closed at most once.
    pub(crate) unsafe fn close_recv(&self, comm: *mut c_void) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, close_recv), comm) }
    }

    /// # Safety
    /// `comm` is an open listen comm, closed at most once.
    pub(crate) unsafe fn close_listen(&self, comm: *mut c_void) -> abi::NcclResult {
        // SAFETY: per the contract.
        unsafe { call!(common!(self, close_listen), comm) }
    }
}
