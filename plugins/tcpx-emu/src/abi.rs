//! The `extern "C"` adapters for ABI v7..v12 (same-signature entries shared by every table) and
//! the exported `ncclNetPlugin_v7` .. `ncclNetPlugin_v12` tables (only v7 in the v7-only build).
//! Every adapter body runs inside [`guard`]: an error becomes its code plus a WARN, a panic
//! `ncclInternalError`, never an unwind into C.

// The shims are thin wrappers over lib.rs's core_* functions and the ABI types it imports.
#[allow(clippy::wildcard_imports)]
use super::*;

// ---------------------------------------------------------------------------------------------
// extern "C" adapters. Same-signature entries are shared by every table.
// ---------------------------------------------------------------------------------------------

unsafe extern "C" fn init_v7(logger: DebugLogger) -> NcclResult {
    guard("init", || core_init(logger))
}

unsafe extern "C" fn init_v10(logger: DebugLogger, _prof: ProfilerCallback) -> NcclResult {
    guard("init", || core_init(logger))
}

unsafe extern "C" fn init_v11(
    ctx: *mut *mut c_void,
    comm_id: u64,
    _config: *mut CommConfigV11,
    logger: DebugLogger,
    _prof: ProfilerCallback,
) -> NcclResult {
    guard("init", || {
        let ctx = unsafe { out(ctx, "ctx") }?;
        core_init(logger)?;
        *ctx = Box::into_raw(Box::new(Ctx { _comm_id: comm_id })).cast();
        Ok(())
    })
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || {
        if !ctx.is_null() {
            // SAFETY: created by init_v11.
            drop(unsafe { Box::from_raw(ctx.cast::<Ctx>()) });
        }
        let _ = INIT_COUNT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        Ok(())
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    guard("devices", || unsafe { core_devices(ndev) })
}

/// One `getProperties` adapter per older layout: the v12 properties ([`core_props`]) copied into
/// `$t`: the fields every layout has, plus the ones `$t` adds. The mirror image of nccl-net's
/// `normalize!`, which reads each layout back into one type.
macro_rules! get_properties {
    ($fn_name:ident, $t:ident, |$p:ident| { $($field:ident: $value:expr),* $(,)? }) => {
        unsafe extern "C" fn $fn_name(dev: c_int, props: *mut $t) -> NcclResult {
            guard("getProperties", || {
                let $p = core_props(dev)?;
                *unsafe { out(props, "props") }? = $t {
                    name: $p.name,
                    pci_path: $p.pci_path,
                    guid: $p.guid,
                    ptr_support: $p.ptr_support,
                    speed: $p.speed,
                    port: $p.port,
                    latency: $p.latency,
                    max_comms: $p.max_comms,
                    max_recvs: $p.max_recvs,
                    net_device_type: $p.net_device_type,
                    net_device_version: $p.net_device_version,
                    $($field: $value,)*
                };
                Ok(())
            })
        }
    };
}

get_properties!(get_properties_v7, PropertiesV7, |p| {});
get_properties!(get_properties_v8, PropertiesV8, |p| { reg_is_global: p.reg_is_global });
get_properties!(get_properties_v9, PropertiesV9, |p| {
    reg_is_global: p.reg_is_global,
    force_flush: p.force_flush,
    v_props: v_props_v9(&p),
    max_p2p_bytes: p.max_p2p_bytes,
    max_coll_bytes: p.max_coll_bytes,
});
get_properties!(get_properties_v11, PropertiesV11, |p| {
    reg_is_global: p.reg_is_global,
    force_flush: p.force_flush,
    v_props: v_props_v9(&p),
    max_p2p_bytes: p.max_p2p_bytes,
    max_coll_bytes: p.max_coll_bytes,
    max_multi_request_size: p.max_multi_request_size,
});

unsafe extern "C" fn get_properties_v12(dev: c_int, props: *mut PropertiesV12) -> NcclResult {
    guard("getProperties", || {
        *unsafe { out(props, "props") }? = core_props(dev)?;
        Ok(())
    })
}

unsafe extern "C" fn listen(dev: c_int, handle: *mut c_void, lc: *mut *mut c_void) -> NcclResult {
    guard("listen", || unsafe { core_listen(dev, handle, lc) })
}

unsafe extern "C" fn listen_v11(
    _ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    lc: *mut *mut c_void,
) -> NcclResult {
    guard("listen", || unsafe { core_listen(dev, handle, lc) })
}

unsafe extern "C" fn connect_v7(
    dev: c_int,
    handle: *mut c_void,
    sc: *mut *mut c_void,
    _dh: *mut *mut DeviceHandleV7,
) -> NcclResult {
    guard("connect", || unsafe { core_connect(dev, handle, sc) })
}

unsafe extern "C" fn connect_v10(
    dev: c_int,
    _config: *mut CommConfigV10,
    handle: *mut c_void,
    sc: *mut *mut c_void,
    _dh: *mut *mut DeviceHandleV7,
) -> NcclResult {
    guard("connect", || unsafe { core_connect(dev, handle, sc) })
}

unsafe extern "C" fn connect_v11(
    _ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    sc: *mut *mut c_void,
    _dh: *mut *mut DeviceHandleV7,
) -> NcclResult {
    guard("connect", || unsafe { core_connect(dev, handle, sc) })
}

unsafe extern "C" fn accept(lc: *mut c_void, rc: *mut *mut c_void, dh: *mut *mut DeviceHandleV7) -> NcclResult {
    guard("accept", || unsafe { core_accept(lc, rc, dh) })
}

unsafe extern "C" fn reg_mr_v7(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    ptr_type: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    guard("regMr", || {
        if let Some(m) = unsafe { mh.as_mut() } {
            *m = std::ptr::null_mut();
        }
        let size = contracts::v7_size("regMr", size)?;
        unsafe { core_reg_mr(comm, data, size, ptr_type, mh) }
    })
}

unsafe extern "C" fn reg_mr_v8(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    guard("regMr", || unsafe { core_reg_mr(comm, data, size, ptr_type, mh) })
}

/// v8+ only: the v7 table, TCPX's, has no `regMrDmaBuf`.
unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
    offset: u64,
    fd: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    guard("regMrDmaBuf", || unsafe {
        core_reg_mr_dma_buf(comm, data, size, ptr_type, offset, fd, mh)
    })
}

unsafe extern "C" fn dereg_mr(_comm: *mut c_void, mh: *mut c_void) -> NcclResult {
    guard("deregMr", || unsafe { core_dereg_mr(mh) })
}

unsafe extern "C" fn isend_v7(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    _tag: c_int,
    mh: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("isend", || {
        if let Some(r) = unsafe { req.as_mut() } {
            *r = std::ptr::null_mut();
        }
        let size = contracts::v7_size("isend", size)?;
        unsafe { core_isend(comm, data, size, mh, req) }
    })
}

unsafe extern "C" fn isend_v9(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    _tag: c_int,
    mh: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("isend", || unsafe { core_isend(comm, data, size, mh, req) })
}

unsafe extern "C" fn isend_v10(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    _tag: c_int,
    mh: *mut c_void,
    _phandle: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("isend", || unsafe { core_isend(comm, data, size, mh, req) })
}

unsafe extern "C" fn irecv_v7(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    _tags: *mut c_int,
    mh: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("irecv", || unsafe {
        core_irecv(comm, n, data, || int_size(sizes), mh, req)
    })
}

unsafe fn usize_size(sizes: *mut usize) -> NetResult<usize> {
    // SAFETY: NCCL passes an array of n (== 1) sizes.
    unsafe { sizes.as_ref() }
        .copied()
        .ok_or_else(|| NetError::invalid_argument("sizes is NULL"))
}

unsafe extern "C" fn irecv_v9(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    _tags: *mut c_int,
    mh: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("irecv", || unsafe {
        core_irecv(comm, n, data, || usize_size(sizes), mh, req)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn irecv_v10(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    _tags: *mut c_int,
    mh: *mut *mut c_void,
    _phandles: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("irecv", || unsafe {
        core_irecv(comm, n, data, || usize_size(sizes), mh, req)
    })
}

/// TCPX crashes in `iflush` (contract #9): refused in strict mode. Lenient: host memory needs no
/// flush, so succeed with a NULL request (NCCL treats NULL as done).
unsafe extern "C" fn iflush(
    _comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _mh: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("iflush", || {
        if let Some(r) = unsafe { req.as_mut() } {
            *r = std::ptr::null_mut();
        }
        if strict() {
            return Err(contracts::iflush());
        }
        Ok(())
    })
}

unsafe extern "C" fn test(req: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> NcclResult {
    guard("test", || unsafe { core_test(req, done, sizes) })
}

unsafe extern "C" fn close_comm(comm: *mut c_void) -> NcclResult {
    guard("close", || unsafe { core_close_comm(comm) })
}

unsafe extern "C" fn close_listen(lc: *mut c_void) -> NcclResult {
    guard("closeListen", || {
        if !lc.is_null() {
            // SAFETY: a `Box<ListenComm>` from listen, closed once.
            drop(unsafe { Box::from_raw(lc.cast::<ListenComm>()) });
        }
        Ok(())
    })
}

unsafe extern "C" fn get_device_mr(_comm: *mut c_void, _mh: *mut c_void, dptr: *mut *mut c_void) -> NcclResult {
    guard("getDeviceMr", || {
        if let Some(d) = unsafe { dptr.as_mut() } {
            *d = std::ptr::null_mut();
        }
        Ok(())
    })
}

unsafe extern "C" fn irecv_consumed(comm: *mut c_void, n: c_int, req: *mut c_void) -> NcclResult {
    guard("irecvConsumed", || {
        contracts::irecv_n(n)?;
        unsafe { comm_ref(comm) }?.irecv_consumed(req)
    })
}

fn make_v_device_common(d: *mut c_int, ndevs: c_int, devs: &[c_int]) -> NetResult<()> {
    let n = plugin()?.devices.len() as c_int;
    if ndevs != 1 || !(0..n).contains(&devs[0]) {
        return Err(NetError::invalid_usage(format!(
            "only single-device virtual devices are supported (ndevs = {ndevs})"
        )));
    }
    *unsafe { out(d, "d") }? = devs[0];
    Ok(())
}

unsafe extern "C" fn make_v_device_v9(d: *mut c_int, props: *mut VDevicePropsV9) -> NcclResult {
    guard("makeVDevice", || {
        let p = unsafe { props.as_ref() }.ok_or_else(|| NetError::invalid_argument("props is NULL"))?;
        make_v_device_common(d, p.ndevs, &p.devs)
    })
}

unsafe extern "C" fn make_v_device_v12(d: *mut c_int, props: *mut VDevicePropsV12) -> NcclResult {
    guard("makeVDevice", || {
        let p = unsafe { props.as_ref() }.ok_or_else(|| NetError::invalid_argument("props is NULL"))?;
        make_v_device_common(d, p.ndevs, &p.devs)
    })
}

/// Hints for the plugin's flow/peer counts: accepted and ignored.
unsafe extern "C" fn set_net_attr(_ctx: *mut c_void, _attr: *mut NetAttrV11) -> NcclResult {
    NCCL_SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Exported tables: v7 .. v12, or only v7 in the v7-only build (package tcpx-emu-v7), as TCPX.
// ---------------------------------------------------------------------------------------------

/// One exported table: the entries every version shares, plus the ones that differ (listed per
/// version below, so the differences between ABI versions read at a glance).
macro_rules! export_table {
    ($(#[$attr:meta])* $symbol:ident: $t:ident { $($field:ident: $value:expr),* $(,)? }) => {
        $(#[$attr])*
        #[allow(non_upper_case_globals)]
        #[no_mangle]
        pub static $symbol: $t = $t {
            name: PLUGIN_NAME.as_ptr(),
            devices: Some(devices),
            accept: Some(accept),
            dereg_mr: Some(dereg_mr),
            iflush: Some(iflush),
            test: Some(test),
            close_send: Some(close_comm),
            close_recv: Some(close_comm),
            close_listen: Some(close_listen),
            get_device_mr: Some(get_device_mr),
            irecv_consumed: Some(irecv_consumed),
            $($field: $value,)*
        };
    };
}

export_table!(ncclNetPlugin_v7: NetV7 {
    init: Some(init_v7),
    get_properties: Some(get_properties_v7),
    listen: Some(listen),
    connect: Some(connect_v7),
    reg_mr: Some(reg_mr_v7),
    reg_mr_dma_buf: None,
    isend: Some(isend_v7),
    irecv: Some(irecv_v7),
});

export_table!(#[cfg(not(feature = "v7-only"))] ncclNetPlugin_v8: NetV8 {
    init: Some(init_v7),
    get_properties: Some(get_properties_v8),
    listen: Some(listen),
    connect: Some(connect_v7),
    reg_mr: Some(reg_mr_v8),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    isend: Some(isend_v7),
    irecv: Some(irecv_v7),
});

export_table!(#[cfg(not(feature = "v7-only"))] ncclNetPlugin_v9: NetV9 {
    init: Some(init_v7),
    get_properties: Some(get_properties_v9),
    listen: Some(listen),
    connect: Some(connect_v7),
    reg_mr: Some(reg_mr_v8),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    isend: Some(isend_v9),
    irecv: Some(irecv_v9),
    make_v_device: Some(make_v_device_v9),
});

export_table!(#[cfg(not(feature = "v7-only"))] ncclNetPlugin_v10: NetV10 {
    init: Some(init_v10),
    get_properties: Some(get_properties_v9),
    listen: Some(listen),
    connect: Some(connect_v10),
    reg_mr: Some(reg_mr_v8),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    isend: Some(isend_v10),
    irecv: Some(irecv_v10),
    make_v_device: Some(make_v_device_v9),
});

export_table!(#[cfg(not(feature = "v7-only"))] ncclNetPlugin_v11: NetV11 {
    init: Some(init_v11),
    get_properties: Some(get_properties_v11),
    listen: Some(listen_v11),
    connect: Some(connect_v11),
    reg_mr: Some(reg_mr_v8),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    isend: Some(isend_v10),
    irecv: Some(irecv_v10),
    make_v_device: Some(make_v_device_v9),
    finalize: Some(finalize),
    set_net_attr: Some(set_net_attr),
});

export_table!(#[cfg(not(feature = "v7-only"))] ncclNetPlugin_v12: NetV12 {
    init: Some(init_v11),
    get_properties: Some(get_properties_v12),
    listen: Some(listen_v11),
    connect: Some(connect_v11),
    reg_mr: Some(reg_mr_v8),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    isend: Some(isend_v10),
    irecv: Some(irecv_v10),
    make_v_device: Some(make_v_device_v12),
    finalize: Some(finalize),
    set_net_attr: Some(set_net_attr),
});
