//! `#[repr(C)]` definitions of NCCL's network-plugin ABI (`ncclNet_v7_t` .. `ncclNet_v12_t`) and of the
//! device-unpack structures (`NCCL_NET_DEVICE_UNPACK`, version 7) that GPUDirect-TCPX fills.
//!
//! This is the `sys` layer of tcpx-perf: plain data, no behaviour. It is shared by the loader in
//! `tcpx-perf` (which reads these tables out of a `dlopen`ed plugin) and by `tcpx-emu` (which exports
//! them). Every struct's size and field offsets are checked at compile time against the x86-64 layout
//! computed from NCCL's own headers (`src/include/plugin/net/net_v{7..12}.h`), so a typo here cannot
//! silently shift a field.
//!
//! Naming: the C type `ncclNetProperties_v8_t` is [`PropertiesV8`], `ncclNet_v8_t` is [`NetV8`], and so on.
//! Function-table entries are `Option<unsafe extern "C" fn ..>` because plugins leave entries NULL
//! (TCPX has no `regMrDmaBuf`).
//!
//! Reading what a plugin reported, as a loader does after `getProperties` (here a table filled by
//! hand, as GPUDirect-TCPX fills it):
//!
//! ```
//! use nccl_net_abi::*;
//!
//! // Loaders look the symbols up newest first, as NCCL does; TCPX exports only the last.
//! assert_eq!(PLUGIN_SYMBOLS.last(), Some(&(7, "ncclNetPlugin_v7")));
//!
//! let props = PropertiesV7 {
//!     name: core::ptr::null_mut(),
//!     pci_path: core::ptr::null_mut(),
//!     guid: 0,
//!     ptr_support: NCCL_PTR_HOST | NCCL_PTR_CUDA,
//!     speed: 200_000, // Mb/s
//!     port: 0,
//!     latency: 0.0,
//!     max_comms: 65536,
//!     max_recvs: 1,
//!     net_device_type: NCCL_NET_DEVICE_UNPACK,
//!     net_device_version: NCCL_NET_DEVICE_UNPACK_VERSION,
//! };
//! let takes_gpu_memory = props.ptr_support & NCCL_PTR_CUDA != 0;
//! let needs_device_unpack = props.net_device_type == NCCL_NET_DEVICE_UNPACK;
//! assert!(takes_gpu_memory && needs_device_unpack);
//! assert_eq!(result_name(NCCL_SYSTEM_ERROR), "ncclSystemError");
//! ```

#![no_std]
#![allow(clippy::upper_case_acronyms)]

use core::ffi::{c_char, c_int, c_ulong, c_void};
use core::mem::{offset_of, size_of};

/// `ncclResult_t`: a C enum, hence a 4-byte `int` across the ABI.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
pub const NCCL_INVALID_USAGE: NcclResult = 5;
pub const NCCL_REMOTE_ERROR: NcclResult = 6;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
pub const NCCL_TIMEOUT: NcclResult = 8;

/// The name NCCL gives a result code (`ncclSuccess`, `ncclSystemError`, ...), for error messages.
pub fn result_name(code: NcclResult) -> &'static str {
    match code {
        NCCL_SUCCESS => "ncclSuccess",
        NCCL_UNHANDLED_CUDA_ERROR => "ncclUnhandledCudaError",
        NCCL_SYSTEM_ERROR => "ncclSystemError",
        NCCL_INTERNAL_ERROR => "ncclInternalError",
        NCCL_INVALID_ARGUMENT => "ncclInvalidArgument",
        NCCL_INVALID_USAGE => "ncclInvalidUsage",
        NCCL_REMOTE_ERROR => "ncclRemoteError",
        NCCL_IN_PROGRESS => "ncclInProgress",
        NCCL_TIMEOUT => "ncclTimeout",
        _ => "ncclUnknownResult",
    }
}

/// `ncclDebugLogLevel`.
pub type LogLevel = c_int;
pub const NCCL_LOG_NONE: LogLevel = 0;
pub const NCCL_LOG_VERSION: LogLevel = 1;
pub const NCCL_LOG_WARN: LogLevel = 2;
pub const NCCL_LOG_INFO: LogLevel = 3;
pub const NCCL_LOG_ABORT: LogLevel = 4;
pub const NCCL_LOG_TRACE: LogLevel = 5;

/// `ncclDebugLogSubSys` bits used by net plugins.
pub const NCCL_INIT: c_ulong = 0x1;
pub const NCCL_NET: c_ulong = 0x10;
pub const NCCL_ALL: c_ulong = !0;

/// `ncclDebugLogger_t`: `void (*)(level, flags, file, line, fmt, ...)`. Identical since NCCL 2.12.
/// Stable Rust can declare and call a C-variadic function pointer, but cannot define one; the loader
/// in tcpx-perf therefore passes a small C shim.
pub type DebugLogger = Option<
    unsafe extern "C" fn(level: LogLevel, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...),
>;

/// `ncclProfilerCallback_t` (v10+). Drivers pass NULL; plugins must tolerate that.
pub type ProfilerCallback = Option<
    unsafe extern "C" fn(
        e_handle: *mut *mut c_void,
        kind: c_int,
        p_handle: *mut c_void,
        plugin_id: i64,
        ext_data: *mut c_void,
    ) -> NcclResult,
>;

/// Size of the opaque connection handle exchanged out of band (`NCCL_NET_HANDLE_MAXSIZE`).
pub const NET_HANDLE_MAXSIZE: usize = 128;
/// The 128-byte handle `listen` writes and `connect` reads. Plugins (TCPX included) keep their
/// asynchronous connect state inside it, so one copy must stay in place across `connect` retries.
pub type NetHandle = [u8; NET_HANDLE_MAXSIZE];

pub const NCCL_PTR_HOST: c_int = 0x1;
pub const NCCL_PTR_CUDA: c_int = 0x2;
pub const NCCL_PTR_DMABUF: c_int = 0x4;

/// Outstanding requests per comm NCCL (>= 2.19; 8 before) asks a plugin to support
/// (`NCCL_NET_MAX_REQUESTS`, `src/include/plugin/nccl_net.h`). GPUDirect-TCPX supports only
/// [`TCPX_MAX_REQUESTS`].
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// Largest size NCCL passes to plugins whose sizes are `int` (v7/v8 isend/irecv): 1 GiB
/// (`MAX_NET_SIZE`, `src/include/plugin/nccl_net.h`; applied in `src/plugin/net/net_v7.cc`).
/// It is also the `maxP2pBytes` NCCL fills in for those ABIs.
pub const MAX_NET_SIZE: usize = 1 << 30;
/// The `maxCollBytes` NCCL fills in for ABIs without it (`MAX_COLLNET_SIZE`, 512 MiB,
/// `src/plugin/net/net_v7.cc`).
pub const MAX_COLLNET_SIZE: usize = 512 << 20;

// Limits of GPUDirect-TCPX itself (google/nccl-plugin-gpudirecttcpx), which tcpx-perf honours
// and tcpx-emu enforces; the contracts are listed in plugins/tcpx-emu/README.md.

/// Outstanding requests per comm GPUDirect-TCPX accepts (`MAX_REQUESTS 16`, `work_queue.h:20`),
/// counting receives not yet released by `irecvConsumed` (`net_tcpx.cc:1477-1543`); one more
/// fails with "unable to allocate requests". Fewer than NCCL's [`NCCL_NET_MAX_REQUESTS`].
pub const TCPX_MAX_REQUESTS: usize = 16;
/// v10+ `ncclNetCommConfig.trafficClass` "undefined".
pub const NCCL_NET_TRAFFIC_CLASS_UNDEF: c_int = -1;
/// v11+ `ncclNetAttr` "undefined".
pub const NCCL_NET_ATTR_UNDEF: i32 = -1;
pub const NCCL_NET_MAX_DEVS_PER_NIC_V11: usize = 4;
pub const NCCL_NET_MAX_DEVS_PER_NIC_V12: usize = 8;

/// `ncclNetDeviceType` (a C enum: 4 bytes).
pub type NetDeviceType = c_int;
pub const NCCL_NET_DEVICE_HOST: NetDeviceType = 0;
pub const NCCL_NET_DEVICE_UNPACK: NetDeviceType = 1;
pub const NCCL_NET_DEVICE_INVALID_VERSION: c_int = 0;
/// `NCCL_NET_DEVICE_UNPACK_VERSION`: constant in every NCCL release 2.19 .. 2.30.
pub const NCCL_NET_DEVICE_UNPACK_VERSION: c_int = 0x7;
pub const NCCL_NET_MTU_SIZE: usize = 4096;

/// `ncclNetDeviceHandle_v7_t` (v8..v12 are typedef aliases). A host struct the caller owns and
/// `accept` fills; TCPX writes through the pointer unconditionally, so never pass a pointer to NULL.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceHandleV7 {
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
    pub handle: *mut c_void,
    pub size: usize,
    pub needs_proxy_progress: c_int,
}

impl DeviceHandleV7 {
    pub const fn zeroed() -> Self {
        Self {
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
            handle: core::ptr::null_mut(),
            size: 0,
            needs_proxy_progress: 0,
        }
    }
}

/// `ncclNetProperties_v7_t` (TCPX's ABI).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV7 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
}

/// `ncclNetProperties_v8_t`: `regIsGlobal` is inserted after `ptrSupport`, shifting everything after.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV8 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
}

/// `ncclNetVDeviceProps_v9_t` (also v10 and v11).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VDevicePropsV9 {
    pub ndevs: c_int,
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V11],
}
pub type VDevicePropsV10 = VDevicePropsV9;
pub type VDevicePropsV11 = VDevicePropsV9;

/// `ncclNetVDeviceProps_v12_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VDevicePropsV12 {
    pub ndevs: c_int,
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V12],
}

/// `ncclNetProperties_v9_t` (v10 is identical).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV9 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
    pub v_props: VDevicePropsV9,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
}
pub type PropertiesV10 = PropertiesV9;

/// `ncclNetProperties_v11_t`: v9 plus `maxMultiRequestSize`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV11 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
    pub v_props: VDevicePropsV11,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
}

/// `ncclNetProperties_v12_t`: 8-entry `vProps`, `railId`/`planeId` at the end.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV12 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: NetDeviceType,
    pub net_device_version: c_int,
    pub v_props: VDevicePropsV12,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    pub rail_id: i16,
    pub plane_id: i16,
}

/// `ncclNetCommConfig_v10_t` (same for v11, v12).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CommConfigV10 {
    pub traffic_class: c_int,
}
pub type CommConfigV11 = CommConfigV10;
pub type CommConfigV12 = CommConfigV10;

/// `ncclNetCommAttr_v11_t` / `_v12_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NetCommAttrV11 {
    pub max_concurrent_peers: i32,
    pub min_concurrent_peers: i32,
    pub max_flows_per_peer: i32,
    pub min_flows_per_peer: i32,
}
pub type NetCommAttrV12 = NetCommAttrV11;

/// `ncclNetAttr_v11_t` / `_v12_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NetAttrV11 {
    pub send_comm_attr: NetCommAttrV11,
    pub recv_comm_attr: NetCommAttrV11,
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}
pub type NetAttrV12 = NetAttrV11;

type Comm = *mut c_void;
type Out<T> = *mut T;

// ---------------------------------------------------------------------------------------------
// Function tables. Field order is ABI order; see `net_v{7..12}.h`.
// ---------------------------------------------------------------------------------------------

/// Entries identical in every version from v7 on (same position, same signature).
macro_rules! fnptr {
    ($($arg:ty),*) => { Option<unsafe extern "C" fn($($arg),*) -> NcclResult> };
}

pub type InitV7 = fnptr!(DebugLogger);
pub type InitV10 = fnptr!(DebugLogger, ProfilerCallback);
pub type InitV11 = fnptr!(Out<*mut c_void>, u64, *mut CommConfigV11, DebugLogger, ProfilerCallback);
pub type Devices = fnptr!(Out<c_int>);
pub type GetProperties<P> = fnptr!(c_int, Out<P>);
pub type Listen = fnptr!(c_int, *mut c_void, Out<Comm>);
pub type ListenV11 = fnptr!(*mut c_void, c_int, *mut c_void, Out<Comm>);
pub type ConnectV7 = fnptr!(c_int, *mut c_void, Out<Comm>, *mut *mut DeviceHandleV7);
pub type ConnectV10 = fnptr!(
    c_int,
    *mut CommConfigV10,
    *mut c_void,
    Out<Comm>,
    *mut *mut DeviceHandleV7
);
pub type ConnectV11 = fnptr!(*mut c_void, c_int, *mut c_void, Out<Comm>, *mut *mut DeviceHandleV7);
pub type Accept = fnptr!(Comm, Out<Comm>, *mut *mut DeviceHandleV7);
pub type RegMrV7 = fnptr!(Comm, *mut c_void, c_int, c_int, Out<*mut c_void>);
pub type RegMrV8 = fnptr!(Comm, *mut c_void, usize, c_int, Out<*mut c_void>);
pub type RegMrDmaBuf = fnptr!(Comm, *mut c_void, usize, c_int, u64, c_int, Out<*mut c_void>);
pub type DeregMr = fnptr!(Comm, *mut c_void);
pub type IsendV7 = fnptr!(Comm, *mut c_void, c_int, c_int, *mut c_void, Out<*mut c_void>);
pub type IsendV9 = fnptr!(Comm, *mut c_void, usize, c_int, *mut c_void, Out<*mut c_void>);
pub type IsendV10 = fnptr!(
    Comm,
    *mut c_void,
    usize,
    c_int,
    *mut c_void,
    *mut c_void,
    Out<*mut c_void>
);
pub type IrecvV7 = fnptr!(
    Comm,
    c_int,
    *mut *mut c_void,
    *mut c_int,
    *mut c_int,
    *mut *mut c_void,
    Out<*mut c_void>
);
pub type IrecvV9 = fnptr!(
    Comm,
    c_int,
    *mut *mut c_void,
    *mut usize,
    *mut c_int,
    *mut *mut c_void,
    Out<*mut c_void>
);
pub type IrecvV10 = fnptr!(
    Comm,
    c_int,
    *mut *mut c_void,
    *mut usize,
    *mut c_int,
    *mut *mut c_void,
    *mut *mut c_void,
    Out<*mut c_void>
);
pub type Iflush = fnptr!(
    Comm,
    c_int,
    *mut *mut c_void,
    *mut c_int,
    *mut *mut c_void,
    Out<*mut c_void>
);
pub type Test = fnptr!(*mut c_void, Out<c_int>, *mut c_int);
pub type Close = fnptr!(Comm);
pub type GetDeviceMr = fnptr!(Comm, *mut c_void, Out<*mut c_void>);
pub type IrecvConsumed = fnptr!(Comm, c_int, *mut c_void);
pub type MakeVDevice<V> = fnptr!(Out<c_int>, *mut V);
pub type Finalize = fnptr!(*mut c_void);
pub type SetNetAttr = fnptr!(*mut c_void, *mut NetAttrV11);

/// `ncclNet_v7_t`: GPUDirect-TCPX's ABI. `int` sizes everywhere.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV7 {
    pub name: *const c_char,
    pub init: InitV7,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV7>,
    pub listen: Listen,
    pub connect: ConnectV7,
    pub accept: Accept,
    pub reg_mr: RegMrV7,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV7,
    pub irecv: IrecvV7,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
}

/// `ncclNet_v8_t`: v7 with `regMr(size_t)`; isend/irecv still `int`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV8 {
    pub name: *const c_char,
    pub init: InitV7,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV8>,
    pub listen: Listen,
    pub connect: ConnectV7,
    pub accept: Accept,
    pub reg_mr: RegMrV8,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV7,
    pub irecv: IrecvV7,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
}

/// `ncclNet_v9_t`: `size_t` isend/irecv sizes, `makeVDevice`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV9 {
    pub name: *const c_char,
    pub init: InitV7,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV9>,
    pub listen: Listen,
    pub connect: ConnectV7,
    pub accept: Accept,
    pub reg_mr: RegMrV8,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV9,
    pub irecv: IrecvV9,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
    pub make_v_device: MakeVDevice<VDevicePropsV9>,
}

/// `ncclNet_v10_t`: `init(log, prof)`, `connect(dev, config, ...)`, isend/irecv phandles.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV10 {
    pub name: *const c_char,
    pub init: InitV10,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV10>,
    pub listen: Listen,
    pub connect: ConnectV10,
    pub accept: Accept,
    pub reg_mr: RegMrV8,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV10,
    pub irecv: IrecvV10,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
    pub make_v_device: MakeVDevice<VDevicePropsV10>,
}

/// `ncclNet_v11_t`: per-communicator context from `init`, passed to listen/connect/finalize.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV11 {
    pub name: *const c_char,
    pub init: InitV11,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV11>,
    pub listen: ListenV11,
    pub connect: ConnectV11,
    pub accept: Accept,
    pub reg_mr: RegMrV8,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV10,
    pub irecv: IrecvV10,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
    pub make_v_device: MakeVDevice<VDevicePropsV11>,
    pub finalize: Finalize,
    pub set_net_attr: SetNetAttr,
}

/// `ncclNet_v12_t`: the v11 function list with v12 properties and vProps.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV12 {
    pub name: *const c_char,
    pub init: InitV11,
    pub devices: Devices,
    pub get_properties: GetProperties<PropertiesV12>,
    pub listen: ListenV11,
    pub connect: ConnectV11,
    pub accept: Accept,
    pub reg_mr: RegMrV8,
    pub reg_mr_dma_buf: RegMrDmaBuf,
    pub dereg_mr: DeregMr,
    pub isend: IsendV10,
    pub irecv: IrecvV10,
    pub iflush: Iflush,
    pub test: Test,
    pub close_send: Close,
    pub close_recv: Close,
    pub close_listen: Close,
    pub get_device_mr: GetDeviceMr,
    pub irecv_consumed: IrecvConsumed,
    pub make_v_device: MakeVDevice<VDevicePropsV12>,
    pub finalize: Finalize,
    pub set_net_attr: SetNetAttr,
}

// SAFETY: the tables are immutable data (a name pointer to a static string and function pointers);
// plugins export them as `const`/`volatile` globals that are never written after load.
unsafe impl Sync for NetV7 {}
unsafe impl Sync for NetV8 {}
unsafe impl Sync for NetV9 {}
unsafe impl Sync for NetV10 {}
unsafe impl Sync for NetV11 {}
unsafe impl Sync for NetV12 {}

/// The symbol name of each ABI version, newest first: the order NCCL 2.30 probes in.
pub const PLUGIN_SYMBOLS: [(u32, &str); 6] = [
    (12, "ncclNetPlugin_v12"),
    (11, "ncclNetPlugin_v11"),
    (10, "ncclNetPlugin_v10"),
    (9, "ncclNetPlugin_v9"),
    (8, "ncclNetPlugin_v8"),
    (7, "ncclNetPlugin_v7"),
];

// ---------------------------------------------------------------------------------------------
// Device unpack (NCCL_NET_DEVICE_UNPACK, version 7): `src/device/network/unpack/unpack_defs.h`.
// ---------------------------------------------------------------------------------------------

/// Receive slots in the metadata ring (`NCCL_NET_DEVICE_UNPACK_MAX_QUEUE_DEPTH`).
pub const UNPACK_QUEUE_DEPTH: usize = 16;
/// Largest payload of one receive that device unpack supports (`NET_UNPACK_MAX_SLICE_SIZE`).
pub const UNPACK_MAX_SLICE_SIZE: usize = 4 * 1024 * 1024;
/// Fragment (devmem page) size (`SLICE_PAGE_SIZE`).
pub const UNPACK_PAGE_SIZE: usize = 4096;
/// Fragment descriptors per slot (`NET_UNPACK_MAX_SLICE_PAGES`), twice the page count "for slack".
pub const UNPACK_MAX_SLICE_PAGES: usize = UNPACK_MAX_SLICE_SIZE / UNPACK_PAGE_SIZE * 2;

/// `union loadMeta`: copy `len` bytes from `bounce_buf + src_off` to `recv_buffer + dst_off`.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadMeta {
    pub src_off: u32,
    pub len: u32,
    pub dst_off: u64,
}

/// `struct netUnpackMeta`: 16 slots of fragment lists and their counts, host-mapped.
#[repr(C)]
pub struct NetUnpackMeta {
    pub mem: [[LoadMeta; UNPACK_MAX_SLICE_PAGES]; UNPACK_QUEUE_DEPTH],
    pub cnt: [u64; UNPACK_QUEUE_DEPTH],
}

/// `struct unpackNetDeviceHandle`: lives in device memory; `head` starts at `u64::MAX` (-1) because
/// the consumer increments it before each copy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct UnpackNetDeviceHandle {
    pub meta: *mut NetUnpackMeta,
    pub bounce_buf: *mut c_void,
    pub head: u64,
}

// ---------------------------------------------------------------------------------------------
// Layout checks (x86-64 / any LP64 target), from plugin-abi.md §1.3 and §2.1.
// ---------------------------------------------------------------------------------------------

macro_rules! assert_layout {
    ($t:ty, size = $size:expr $(, $field:ident @ $off:expr)* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
            $( assert!(offset_of!($t, $field) == $off, concat!(stringify!($t), ".", stringify!($field))); )*
        };
    };
}

#[cfg(target_pointer_width = "64")]
mod layout {
    use super::{
        offset_of, size_of, DeviceHandleV7, LoadMeta, NetAttrV11, NetUnpackMeta, NetV10, NetV11, NetV12, NetV7, NetV8,
        NetV9, PropertiesV11, PropertiesV12, PropertiesV7, PropertiesV8, PropertiesV9, UnpackNetDeviceHandle,
        VDevicePropsV12, VDevicePropsV9,
    };
    assert_layout!(DeviceHandleV7, size = 32, handle @ 8, size @ 16, needs_proxy_progress @ 24);
    assert_layout!(PropertiesV7, size = 56, guid @ 16, ptr_support @ 24, speed @ 28, port @ 32, latency @ 36,
        max_comms @ 40, max_recvs @ 44, net_device_type @ 48, net_device_version @ 52);
    assert_layout!(PropertiesV8, size = 64, ptr_support @ 24, reg_is_global @ 28, speed @ 32, latency @ 40,
        max_recvs @ 48, net_device_type @ 52, net_device_version @ 56);
    assert_layout!(PropertiesV9, size = 104, force_flush @ 32, speed @ 36, max_recvs @ 52,
        net_device_version @ 60, v_props @ 64, max_p2p_bytes @ 88, max_coll_bytes @ 96);
    assert_layout!(PropertiesV11, size = 112, v_props @ 64, max_p2p_bytes @ 88, max_coll_bytes @ 96,
        max_multi_request_size @ 104);
    assert_layout!(PropertiesV12, size = 128, v_props @ 64, max_p2p_bytes @ 104, max_coll_bytes @ 112,
        max_multi_request_size @ 120, rail_id @ 124, plane_id @ 126);
    assert_layout!(VDevicePropsV9, size = 20);
    assert_layout!(VDevicePropsV12, size = 36);
    assert_layout!(NetAttrV11, size = 44, recv_comm_attr @ 16, op @ 32, algo @ 36, proto @ 40);
    assert_layout!(NetV7, size = 19 * 8, init @ 8, connect @ 40, reg_mr_dma_buf @ 64, isend @ 80, test @ 104,
        get_device_mr @ 136, irecv_consumed @ 144);
    assert_layout!(NetV8, size = 19 * 8, irecv_consumed @ 144);
    assert_layout!(NetV9, size = 20 * 8, make_v_device @ 152);
    assert_layout!(NetV10, size = 20 * 8, connect @ 40, make_v_device @ 152);
    assert_layout!(NetV11, size = 22 * 8, listen @ 32, finalize @ 160, set_net_attr @ 168);
    assert_layout!(NetV12, size = 22 * 8, finalize @ 160, set_net_attr @ 168);
    assert_layout!(LoadMeta, size = 16, len @ 4, dst_off @ 8);
    assert_layout!(NetUnpackMeta, size = 524_416, cnt @ 524_288);
    assert_layout!(UnpackNetDeviceHandle, size = 24, bounce_buf @ 8, head @ 16);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_names_match_nccl() {
        assert_eq!(result_name(NCCL_INTERNAL_ERROR), "ncclInternalError");
        assert_eq!(result_name(NCCL_REMOTE_ERROR), "ncclRemoteError");
        assert_eq!(result_name(42), "ncclUnknownResult");
    }

    #[test]
    fn unpack_slot_holds_a_full_slice_of_pages() {
        assert_eq!(UNPACK_MAX_SLICE_PAGES, 2048);
        const { assert!(UNPACK_MAX_SLICE_PAGES * UNPACK_PAGE_SIZE >= UNPACK_MAX_SLICE_SIZE) };
    }

    #[test]
    fn probe_order_is_newest_first() {
        let versions: [u32; 6] = core::array::from_fn(|i| PLUGIN_SYMBOLS[i].0);
        assert_eq!(versions, [12, 11, 10, 9, 8, 7]);
    }
}
