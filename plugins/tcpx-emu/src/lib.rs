//! tcpx-emu: the project's reference NCCL net plugin, with GPUDirect-TCPX's semantics over plain
//! kernel TCP sockets and host memory.
//!
//! Why it exists: the real TCPX plugin needs a GPU, devmem-TCP and Google's RxDM, so it cannot run
//! in CI or on one host. tcpx-emu behaves like it where a benchmark can tell (16 requests per comm
//! and a hard error on the 17th, strict FIFO `test`, mandatory FIFO `irecvConsumed`, no sizes from
//! `test`, `maxRecvs = 1`, chunk striping over `NSOCKS_PERTHREAD x SOCKET_NTHREADS` data sockets,
//! asynchronous connect state kept inside the handle), while being fast enough to be a baseline.
//!
//! Layout: one core, thin per-ABI adapters.
//! * [`config`]: environment knobs, read once at the first `init`.
//! * [`contracts`]: TCPX's contracts, one named check each, enforced by default
//!   (`TCPXEMU_STRICT=1`).
//! * [`device`]: interfaces and their properties.
//! * [`handle`]: the 128-byte handle format.
//! * [`conn`]: listen / asynchronous connect; [`accept`]: the listener's acceptor thread;
//!   [`wire`]: the hello and socket options both sides share.
//! * [`comm`]: request ring, matching, completion (the TCPX rules live here).
//! * [`worker`]: per-data-socket helper threads, or the shared event loops.
//! * [`threads`]: which of the two a comm takes (`TCPXEMU_THREADS`), and the threads a process
//!   runs as a result ([`threads::helper_threads`]).
//! * [`scramble`]: device unpack, CPU part: where received pages land in the bounce buffer and
//!   the `loadMeta` descriptors (unit-tested without a GPU).
//! * [`gpu`]: device unpack, CUDA part: `netUnpackMeta` ring, and from a comm's first CUDA
//!   registration its bounce region and staging.
//! * [`fault`]: `TCPXEMU_FAULT` injection.
//! * [`log`], [`error`]: NCCL logger and the error type.
//! * [`abi`]: the `extern "C"` adapters and the exported tables.
//!
//! This file holds the process-wide state (config and devices) and the version-independent entry
//! points; [`abi`] holds the `extern "C"` adapters for ABI v7..v12 and the exported
//! `ncclNetPlugin_v7` .. `ncclNetPlugin_v12` tables. Every adapter body runs inside
//! `catch_unwind`: a panic becomes `ncclInternalError`, never an unwind into C.

#![allow(clippy::missing_safety_doc)]
// The v7-only build (package tcpx-emu-v7) leaves the v8..v12 adapters unused.
#![cfg_attr(feature = "v7-only", allow(dead_code))]

pub mod abi;
pub mod accept;
pub mod comm;
pub mod config;
pub mod conn;
pub mod contracts;
pub mod ctrl_watch;
pub mod device;
pub mod error;
pub mod fault;
pub mod gpu;
pub mod handle;
pub mod log;
pub mod scramble;
pub mod threads;
pub mod wire;
pub mod worker;

// The unit tests run in package tcpx-emu only (they use every table).
#[cfg(all(test, not(feature = "v7-only")))]
mod tests;

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

// The ABI crate is this plugin's vocabulary (C types and constants of every version).
#[allow(clippy::wildcard_imports)]
use nccl_net_abi::*;

pub use abi::*;
pub use comm::{Comm, Connected, Request};
pub use config::{Config, Mode};
pub use conn::{connect, ListenComm};
pub use device::Device;
pub use error::{NetError, NetResult};
pub use fault::{Fault, FaultKind};

/// The name in every exported table.
#[cfg(not(feature = "v7-only"))]
pub const PLUGIN_NAME: &std::ffi::CStr = c"tcpx-emu";
/// The name of the v7-only build (TCPX calls itself "GPUDirectTCPX_v7").
#[cfg(feature = "v7-only")]
pub const PLUGIN_NAME: &std::ffi::CStr = c"tcpx-emu_v7";
/// `maxComms` reported per device.
pub const MAX_COMMS: c_int = 65_536;
/// `maxP2pBytes` reported by the v9+ adapters (NCCL caps v7/v8 at `MAX_NET_SIZE` itself).
pub const MAX_P2P_BYTES: usize = MAX_NET_SIZE;
/// `maxCollBytes` (NCCL's `MAX_COLLNET_SIZE`).
pub const MAX_COLL_BYTES: usize = MAX_COLLNET_SIZE;

/// Process-wide state, built by the first `init` and kept for the process lifetime (the device
/// strings handed to NCCL must stay valid anyway).
struct Plugin {
    cfg: Config,
    devices: Vec<Device>,
}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// `init` calls minus v11 `finalize` calls (informational: state is never torn down).
static INIT_COUNT: AtomicUsize = AtomicUsize::new(0);

fn plugin() -> NetResult<&'static Plugin> {
    PLUGIN
        .get()
        .ok_or_else(|| NetError::invalid_usage("called before a successful init"))
}

/// Idempotent initialisation: reads the environment and finds devices on the first call.
fn core_init(logger: DebugLogger) -> NetResult<()> {
    log::set_logger(logger);
    let _guard = INIT_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if PLUGIN.get().is_none() {
        let (mut cfg, warns) = Config::from_env();
        for w in warns {
            warn!(NCCL_INIT | NCCL_NET, "{w}");
        }
        check_config(&cfg)?;
        resolve_mode(&mut cfg)?;
        let (devices, warns) = device::discover(&cfg.ifnames, cfg.mode == Mode::Unpack);
        for w in warns {
            warn!(NCCL_INIT | NCCL_NET, "{w}");
        }
        if devices.is_empty() {
            return Err(NetError::internal(format!(
                "no usable interface in TCPXEMU_IFNAMES={}",
                cfg.ifnames.join(",")
            )));
        }
        if let Some(f) = cfg.fault {
            warn!(
                NCCL_INIT | NCCL_NET,
                "fault armed: TCPXEMU_FAULT={} after {} request(s) per comm",
                format!("{:?}", f.kind).to_lowercase(),
                f.after
            );
        }
        let list: Vec<String> = devices
            .iter()
            .enumerate()
            .map(|(i, d)| format!("[{i}]{}:{}", d.ifname, d.ip))
            .collect();
        let strict = if cfg.strict {
            "TCPX contracts enforced (TCPXEMU_STRICT=1)"
        } else {
            "lenient (TCPXEMU_STRICT=0): TCPX contracts NOT enforced"
        };
        let mode = match cfg.mode {
            Mode::Unpack => format!(
                "mode unpack (ptrSupport HOST|CUDA, netDeviceType UNPACK v{NCCL_NET_DEVICE_UNPACK_VERSION}; per-GPU bounce pool {} MiB, 16 x {} KiB per recv comm, runs of 1..={} pages)",
                cfg.bounce_pool_mb,
                scramble::Geometry::new(cfg.chunk_size).map_or(0, |g| g.slot_bytes() >> 10),
                cfg.unpack_max_run
            ),
            _ if cfg.host_as_unpack => {
                "mode host (ptrSupport HOST, presented as netDeviceType UNPACK v7 as TCPX)".to_owned()
            }
            _ => "mode host (ptrSupport HOST)".to_owned(),
        };
        info!(
            NCCL_INIT | NCCL_NET,
            "using {} ; {} data socket(s) per comm, chunk {} B, sockbuf {} B; {mode}; {strict}",
            list.join(" "),
            cfg.nsocks,
            cfg.chunk_size,
            cfg.sockbuf
        );
        if cfg.connect_ms > 0 || cfg.flow_steering_ms > 0 {
            info!(
                NCCL_INIT | NCCL_NET,
                "setup cost model on ({}): connect {} ms, accept {} ms per connection with {} data socket(s)",
                contracts::SETUP_LATENCY.tag(),
                conn::setup_delay(&cfg, cfg.nsocks, false).as_millis(),
                conn::setup_delay(&cfg, cfg.nsocks, true).as_millis(),
                cfg.nsocks
            );
        }
        // Cannot fail: we hold INIT_LOCK and checked it is unset.
        let _ = PLUGIN.set(Plugin { cfg, devices });
    }
    INIT_COUNT.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// The contracts checked once, at init (strict mode): `NCCL_DYNAMIC_CHUNK_SIZE` (#13).
pub fn check_config(cfg: &Config) -> NetResult<()> {
    if cfg.strict {
        contracts::dynamic_chunk_size(cfg.chunk_size_raw.as_deref())?;
    }
    Ok(())
}

/// Resolves `TCPXEMU_MODE` (auto/host/unpack) against the CUDA driver.
fn resolve_mode(cfg: &mut Config) -> NetResult<()> {
    match cfg.mode {
        Mode::Host => {}
        Mode::Auto => {
            cfg.mode = match gpu::cuda_present() {
                Ok(true) => Mode::Unpack,
                Ok(false) => Mode::Host,
                Err(e) => {
                    warn!(
                        NCCL_INIT | NCCL_NET,
                        "TCPXEMU_MODE=auto: the CUDA driver failed ({e}); using host mode"
                    );
                    Mode::Host
                }
            }
        }
        Mode::Unpack => match gpu::cuda_present() {
            Ok(true) => {}
            Ok(false) => {
                return Err(NetError::invalid_usage(
                    "TCPXEMU_MODE=unpack needs a CUDA driver (libcuda.so.1) and a visible GPU, and none was found: run on a GPU host, or set TCPXEMU_MODE=host (or auto) for host memory only",
                ))
            }
            Err(e) => {
                return Err(NetError::system(format!(
                    "TCPXEMU_MODE=unpack: the CUDA driver failed ({e}): fix the driver, or set TCPXEMU_MODE=host for host memory only"
                )))
            }
        },
    }
    Ok(())
}

fn unpack_mode() -> bool {
    plugin().is_ok_and(|p| p.cfg.mode == Mode::Unpack)
}

/// Whether the TCPX contracts are enforced (before a successful init: yes).
fn strict() -> bool {
    plugin().map_or(true, |p| p.cfg.strict)
}

/// Host mode presenting itself as TCPX (`TCPXEMU_HOST_DEVICE_TYPE=unpack`).
fn host_as_unpack() -> bool {
    plugin().is_ok_and(|p| p.cfg.mode != Mode::Unpack && p.cfg.host_as_unpack)
}

/// Runs an adapter body: errors are logged as WARN and turned into their code, panics into
/// `ncclInternalError`.
fn guard(what: &str, f: impl FnOnce() -> NetResult<()>) -> NcclResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            warn!(NCCL_NET, "{what}: {}", e.msg);
            e.code
        }
        Err(_) => {
            warn!(NCCL_NET, "{what}: internal panic");
            NCCL_INTERNAL_ERROR
        }
    }
}

/// A NULL-checked out-pointer.
unsafe fn out<'a, T>(p: *mut T, what: &str) -> NetResult<&'a mut T> {
    // SAFETY: non-NULL pointers from NCCL point to writable storage of type T.
    unsafe { p.as_mut() }.ok_or_else(|| NetError::invalid_argument(format!("{what} is NULL")))
}

fn device(dev: c_int) -> NetResult<&'static Device> {
    let p = plugin()?;
    usize::try_from(dev)
        .ok()
        .and_then(|d| p.devices.get(d))
        .ok_or_else(|| NetError::invalid_argument(format!("device {dev} out of range (0..{})", p.devices.len())))
}

fn ptr_type_name(t: c_int) -> &'static str {
    match t {
        NCCL_PTR_HOST => "NCCL_PTR_HOST",
        NCCL_PTR_CUDA => "NCCL_PTR_CUDA",
        NCCL_PTR_DMABUF => "NCCL_PTR_DMABUF",
        _ => "unknown",
    }
}

/// What `regMr` returns: a record of the registration (host memory needs no pinning for TCP).
#[derive(Debug)]
pub struct MemRegion {
    pub ptr: usize,
    pub len: usize,
    pub ptr_type: c_int,
}

/// The v11+ per-communicator context.
struct Ctx {
    _comm_id: u64,
}

// ---------------------------------------------------------------------------------------------
// Version-independent entry points.
// ---------------------------------------------------------------------------------------------

unsafe fn core_devices(ndev: *mut c_int) -> NetResult<()> {
    let n = plugin()?.devices.len();
    // SAFETY: forwarded out-pointer.
    *unsafe { out(ndev, "ndev") }? = n as c_int;
    Ok(())
}

/// Properties of `dev` in the newest layout; older layouts copy from it.
fn core_props(dev: c_int) -> NetResult<PropertiesV12> {
    let d = device(dev)?;
    let unpack = unpack_mode();
    let device_unpack = unpack || host_as_unpack();
    let mut devs = [0; NCCL_NET_MAX_DEVS_PER_NIC_V12];
    devs[0] = dev;
    Ok(PropertiesV12 {
        name: d.name_ptr(),
        pci_path: d.pci_path_ptr(),
        guid: dev as u64,
        // DMA-BUF only where a table has `regMrDmaBuf`: not in the build presented as TCPX.
        ptr_support: match (
            unpack,
            !cfg!(feature = "v7-only") && plugin().is_ok_and(|p| p.cfg.dmabuf),
        ) {
            (true, true) => NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF,
            (true, false) => NCCL_PTR_HOST | NCCL_PTR_CUDA,
            (false, _) => NCCL_PTR_HOST,
        },
        reg_is_global: 0,
        force_flush: 0,
        speed: d.speed_mbps,
        port: 0,
        latency: 0.0,
        max_comms: MAX_COMMS,
        max_recvs: 1,
        net_device_type: if device_unpack {
            NCCL_NET_DEVICE_UNPACK
        } else {
            NCCL_NET_DEVICE_HOST
        },
        net_device_version: if device_unpack {
            NCCL_NET_DEVICE_UNPACK_VERSION
        } else {
            NCCL_NET_DEVICE_INVALID_VERSION
        },
        v_props: VDevicePropsV12 { ndevs: 1, devs },
        max_p2p_bytes: MAX_P2P_BYTES,
        max_coll_bytes: MAX_COLL_BYTES,
        max_multi_request_size: 1,
        rail_id: -1,
        plane_id: -1,
    })
}

fn v_props_v9(p: &PropertiesV12) -> VDevicePropsV9 {
    let mut devs = [0; NCCL_NET_MAX_DEVS_PER_NIC_V11];
    devs.copy_from_slice(&p.v_props.devs[..NCCL_NET_MAX_DEVS_PER_NIC_V11]);
    VDevicePropsV9 {
        ndevs: p.v_props.ndevs,
        devs,
    }
}

unsafe fn core_listen(dev: c_int, handle: *mut c_void, lc: *mut *mut c_void) -> NetResult<()> {
    let p = plugin()?;
    let d = device(dev)?;
    // SAFETY: NCCL passes a 128-byte handle buffer and a comm out-pointer.
    let handle = unsafe { out(handle.cast::<NetHandle>(), "handle") }?;
    let lc = unsafe { out(lc, "listenComm") }?;
    *lc = std::ptr::null_mut();
    let mut cfg = p.cfg.clone();
    cfg.mtu.get_or_insert(d.mtu);
    let (comm, h) = ListenComm::bind(d.ip, d.scope_id, &cfg)?;
    *handle = h;
    *lc = Box::into_raw(comm).cast();
    Ok(())
}

unsafe fn core_connect(dev: c_int, handle: *mut c_void, sc: *mut *mut c_void) -> NetResult<()> {
    let p = plugin()?;
    let d = device(dev)?;
    // The sending device's address is each socket's source, as TCPX binds it.
    let local = match d.ip {
        std::net::IpAddr::V4(ip) => std::net::SocketAddr::from((ip, 0)),
        std::net::IpAddr::V6(ip) => std::net::SocketAddr::V6(std::net::SocketAddrV6::new(ip, 0, 0, d.scope_id)),
    };
    // SAFETY: as in listen; the handle buffer stays in place between retries (NCCL's contract).
    let handle = unsafe { out(handle.cast::<NetHandle>(), "handle") }?;
    let sc = unsafe { out(sc, "sendComm") }?;
    *sc = std::ptr::null_mut();
    if let Some(comm) = until_ready(p.cfg.setup_blocking, || conn::connect(handle, &p.cfg, Some(local)))? {
        *sc = Box::into_raw(comm).cast();
    }
    Ok(())
}

/// How long a blocking `connect`/`accept` (`TCPXEMU_SETUP_BLOCKING=1`) waits for its comm.
const BLOCKING_SETUP_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Polls `step` until it yields a comm when `blocking`, else once.
fn until_ready<T>(blocking: bool, mut step: impl FnMut() -> NetResult<Option<T>>) -> NetResult<Option<T>> {
    let deadline = std::time::Instant::now() + BLOCKING_SETUP_LIMIT;
    loop {
        let comm = step()?;
        if comm.is_some() || !blocking {
            return Ok(comm);
        }
        if std::time::Instant::now() > deadline {
            return Err(NetError::system(format!(
                "TCPXEMU_SETUP_BLOCKING: no comm after {} s; is the peer connecting?",
                BLOCKING_SETUP_LIMIT.as_secs()
            )));
        }
        // A blocked thread should cost no CPU: other setup threads run meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `accept`. The device handle must point to a caller-owned struct (contract #10; with
/// `TCPXEMU_STRICT=0` it may be NULL or point to NULL). Unpack mode fills it as TCPX:
/// `{UNPACK, 7, <device ptr to unpackNetDeviceHandle>, 24, needsProxyProgress 1}`; host mode
/// presenting itself as TCPX fills `{UNPACK, 7, NULL, 24, 1}` (no device memory: its receives
/// carry no descriptors); plain host mode leaves it alone.
unsafe fn core_accept(lc: *mut c_void, rc: *mut *mut c_void, dev_handle: *mut *mut DeviceHandleV7) -> NetResult<()> {
    // SAFETY: `lc` came from our listen.
    let lc =
        unsafe { lc.cast::<ListenComm>().as_ref() }.ok_or_else(|| NetError::invalid_argument("listenComm is NULL"))?;
    let rc = unsafe { out(rc, "recvComm") }?;
    *rc = std::ptr::null_mut();
    if strict() {
        // SAFETY: NCCL passes a pointer to its device-handle pointer, or NULL.
        match unsafe { dev_handle.as_ref() } {
            None => return Err(contracts::device_handle(true)),
            Some(p) if p.is_null() => return Err(contracts::device_handle(false)),
            Some(_) => {}
        }
    }
    let blocking = plugin()?.cfg.setup_blocking;
    if let Some(comm) = until_ready(blocking, || lc.accept())? {
        if comm.unpack_handle().is_none() && host_as_unpack() {
            // SAFETY: as above; the inner pointer is the caller's struct.
            if let Some(dh) = unsafe { dev_handle.as_ref() }.and_then(|p| unsafe { p.as_mut() }) {
                *dh = DeviceHandleV7 {
                    net_device_type: NCCL_NET_DEVICE_UNPACK,
                    net_device_version: NCCL_NET_DEVICE_UNPACK_VERSION,
                    handle: std::ptr::null_mut(),
                    size: std::mem::size_of::<UnpackNetDeviceHandle>(),
                    needs_proxy_progress: 1,
                };
            }
        }
        if let Some(u) = comm.unpack_handle() {
            // SAFETY: NCCL passes a pointer to its (allocated) device-handle pointer, or NULL.
            let dh = unsafe { dev_handle.as_ref() }.and_then(|p| unsafe { p.as_mut() });
            match dh {
                Some(dh) => {
                    *dh = DeviceHandleV7 {
                        net_device_type: NCCL_NET_DEVICE_UNPACK,
                        net_device_version: NCCL_NET_DEVICE_UNPACK_VERSION,
                        handle: u.handle as usize as *mut c_void,
                        size: std::mem::size_of::<UnpackNetDeviceHandle>(),
                        needs_proxy_progress: 1,
                    };
                    info!(
                        NCCL_INIT | NCCL_NET,
                        "accept from {}: device-unpack handle netDeviceType UNPACK v{NCCL_NET_DEVICE_UNPACK_VERSION} on GPU {}: unpackNetDeviceHandle {:#x} {{meta {:#x} (host-mapped), bounce_buf {:#x}{}, head -1}}; this comm's bounce region is reserved at its first CUDA registration",
                        comm.peer(),
                        u.gpu,
                        u.handle,
                        u.meta,
                        u.bounce,
                        if u.bounce == 0 { " (the GPU's pool is made by its first CUDA receive comm)" } else { " (the GPU's pool)" }
                    );
                }
                None => info!(
                    NCCL_NET,
                    "accept from {}: unpack mode but no device handle to fill (NULL); CUDA receives still land in the bounce buffer",
                    comm.peer()
                ),
            }
        }
        *rc = Box::into_raw(comm).cast();
    }
    Ok(())
}

/// `regMr`. A CUDA registration on a send or receive comm (`comm` non-NULL) makes that comm's
/// CUDA-only resources ([`Comm::register_cuda`]); host registrations cost nothing.
unsafe fn core_reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
    mhandle: *mut *mut c_void,
) -> NetResult<()> {
    let mh = unsafe { out(mhandle, "mhandle") }?;
    *mh = std::ptr::null_mut();
    if ptr_type == NCCL_PTR_CUDA && strict() {
        contracts::cuda_registration(data as usize, size)?;
    }
    let cuda_ok = ptr_type == NCCL_PTR_CUDA && unpack_mode();
    if ptr_type != NCCL_PTR_HOST && !cuda_ok {
        return Err(NetError::invalid_argument(format!(
            "memory type {} ({ptr_type}) not supported in {} mode: tcpx-emu takes NCCL_PTR_HOST, and NCCL_PTR_CUDA with TCPXEMU_MODE=unpack",
            ptr_type_name(ptr_type),
            if unpack_mode() { "unpack" } else { "host" }
        )));
    }
    if cuda_ok && !comm.is_null() {
        // SAFETY: NCCL passes the send or receive comm the memory is registered for.
        unsafe { comm_ref(comm) }?.register_cuda()?;
    }
    *mh = Box::into_raw(Box::new(MemRegion {
        ptr: data as usize,
        len: size,
        ptr_type,
    }))
    .cast();
    Ok(())
}

/// DMA-BUF registrations made (for the close-time INFO line and tests).
pub static DMABUF_REGISTRATIONS: AtomicUsize = AtomicUsize::new(0);

/// `regMrDmaBuf`: GPU memory handed over as a DMA-BUF. tcpx-emu moves GPU bytes through pinned
/// staging, so it needs only the address; it checks that `fd` really is a DMA-BUF (a caller that
/// passed any other descriptor would fail on a real GPUDirect plugin), then registers as `regMr`.
unsafe fn core_reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> NetResult<()> {
    if !plugin().is_ok_and(|p| p.cfg.dmabuf && p.cfg.mode == Mode::Unpack) {
        return Err(NetError::invalid_usage(
            "regMrDmaBuf without NCCL_PTR_DMABUF: tcpx-emu offers DMA-BUF only in unpack mode with TCPXEMU_DMABUF=1",
        ));
    }
    if ptr_type != NCCL_PTR_CUDA {
        return Err(NetError::invalid_argument(format!(
            "regMrDmaBuf of memory type {} ({ptr_type}): DMA-BUF registrations are NCCL_PTR_CUDA",
            ptr_type_name(ptr_type)
        )));
    }
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| NetError::invalid_argument(format!("regMrDmaBuf: fd {fd} is not open ({e})")))?;
    if !target.to_string_lossy().contains("dmabuf") {
        return Err(NetError::invalid_argument(format!(
            "regMrDmaBuf: fd {fd} is {} , not a DMA-BUF (export one with cuMemGetHandleForAddressRange)",
            target.display()
        )));
    }
    if offset != 0 {
        return Err(NetError::invalid_argument(format!(
            "regMrDmaBuf: offset {offset} into the DMA-BUF; tcpx-emu takes buffers exported from their first byte"
        )));
    }
    // SAFETY: forwarded contract.
    unsafe { core_reg_mr(comm, data, size, ptr_type, mhandle) }?;
    if DMABUF_REGISTRATIONS.fetch_add(1, Ordering::Relaxed) == 0 {
        info!(
            NCCL_NET,
            "regMrDmaBuf: {size} bytes at {data:p} through fd {fd} ({})",
            target.display()
        );
    }
    Ok(())
}

// Every core_* returns NetResult: the shims run them all through one guard.
#[allow(clippy::unnecessary_wraps)]
unsafe fn core_dereg_mr(mhandle: *mut c_void) -> NetResult<()> {
    if !mhandle.is_null() {
        // SAFETY: created by core_reg_mr.
        drop(unsafe { Box::from_raw(mhandle.cast::<MemRegion>()) });
    }
    Ok(())
}

unsafe fn comm_ref<'a>(comm: *mut c_void) -> NetResult<&'a Comm> {
    // SAFETY: send/recv comms are `Box<Comm>` pointers from connect/accept.
    unsafe { comm.cast::<Comm>().as_ref() }.ok_or_else(|| NetError::invalid_argument("comm is NULL"))
}

/// Whether a buffer is device memory: from its registration when NCCL passes one, else (unpack
/// mode) from the CUDA driver.
unsafe fn mem_is_cuda(mh: *mut c_void, ptr: *mut c_void) -> bool {
    // SAFETY: non-NULL mhandles come from our regMr.
    match unsafe { mh.cast::<MemRegion>().as_ref() } {
        Some(r) => r.ptr_type == NCCL_PTR_CUDA,
        None => unpack_mode() && !ptr.is_null() && gpu::is_device_pointer(ptr as usize),
    }
}

unsafe fn core_isend(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    mh: *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    let comm = unsafe { comm_ref(comm) }?;
    let request = unsafe { out(request, "request") }?;
    *request = std::ptr::null_mut();
    if data.is_null() && size > 0 {
        return Err(NetError::invalid_argument("data is NULL"));
    }
    // SAFETY: NCCL keeps the buffer alive until the request completes.
    let cuda = unsafe { mem_is_cuda(mh, data) };
    *request = unsafe { comm.isend_mem(data.cast(), size, cuda) }?;
    Ok(())
}

unsafe fn core_irecv(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    size0: impl FnOnce() -> NetResult<usize>,
    mhs: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NetResult<()> {
    let comm = unsafe { comm_ref(comm) }?;
    let request = unsafe { out(request, "request") }?;
    *request = std::ptr::null_mut();
    contracts::irecv_n(n)?;
    // SAFETY: n == 1, so `data` has one entry.
    let ptr = unsafe { data.as_ref() }
        .copied()
        .ok_or_else(|| NetError::invalid_argument("data is NULL"))?;
    let size = size0()?;
    if ptr.is_null() && size > 0 {
        return Err(NetError::invalid_argument("data[0] is NULL"));
    }
    // SAFETY: NCCL keeps the buffer alive until the request completes.
    // SAFETY: when non-NULL, `mhs` has n == 1 entries.
    let mh = unsafe { mhs.as_ref() }.copied().unwrap_or(std::ptr::null_mut());
    let cuda = unsafe { mem_is_cuda(mh, ptr) };
    if !cuda && (unpack_mode() || host_as_unpack()) {
        // TCPX's line for every host-memory receive (contract #16), so that callers meet the
        // same log volume as on the real plugin.
        warn!(NCCL_NET, "NET/GPUDirectTCPX requested receive on host mem buffer");
    }
    *request = unsafe { comm.irecv_mem(ptr.cast(), size, cuda) }?;
    Ok(())
}

/// Reads `sizes[0]` of an `int` sizes array (v7/v8); negative is invalid.
unsafe fn int_size(sizes: *mut c_int) -> NetResult<usize> {
    // SAFETY: NCCL passes an array of n (== 1) sizes.
    let s = unsafe { sizes.as_ref() }.ok_or_else(|| NetError::invalid_argument("sizes is NULL"))?;
    contracts::v7_size("irecv", *s)
}

unsafe fn core_test(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> NetResult<()> {
    let done = unsafe { out(done, "done") }?;
    *done = 0;
    // SAFETY: requests come from isend/irecv of an open comm (NCCL's contract).
    let comm = unsafe { Comm::from_request(request) }.ok_or_else(|| NetError::invalid_argument("request is NULL"))?;
    if let Some(size) = comm.test(request)? {
        *done = 1;
        if comm.report_sizes() {
            // SAFETY: when non-NULL, `sizes` has room for one int.
            if let Some(s) = unsafe { sizes.as_mut() } {
                *s = c_int::try_from(size).unwrap_or(c_int::MAX);
            }
        }
    }
    Ok(())
}

// Every core_* returns NetResult: the shims run them all through one guard.
#[allow(clippy::unnecessary_wraps)]
unsafe fn core_close_comm(comm: *mut c_void) -> NetResult<()> {
    if !comm.is_null() {
        // SAFETY: a `Box<Comm>` from connect/accept, closed once.
        drop(unsafe { Box::from_raw(comm.cast::<Comm>()) });
    }
    Ok(())
}
