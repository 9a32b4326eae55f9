//! Driver bring-up: loading libcuda without panicking, probing GPUs, and the primary context.
//!
//! cudarc's dynamic loading panics when `libcuda` is missing, so every entry point goes
//! through [`init`], which first asks `is_culib_present()` and runs the first driver call
//! inside `catch_unwind`: on a CI box with no driver, [`Gpu::probe`] returns `Ok(None)`.
//!
//! We use the device's *primary* context (the one the CUDA runtime, NCCL and the TCPX plugin
//! use), so pointers we allocate are valid in the plugin's calls and vice versa.

use crate::error::{check, GpuError};
use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute, CUresult};
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.lines().next().unwrap_or("").to_string()
    } else {
        "unknown panic".to_string()
    }
}

/// Loads libcuda and runs `cuInit(0)`, once per process.
pub(crate) fn init() -> Result<(), GpuError> {
    static INIT: OnceLock<Result<(), GpuError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // An empty CUDA_VISIBLE_DEVICES hides every GPU: cuInit would say NO_DEVICE, but only
        // after the driver's own setup, which is serialized across processes (~115 ms each on
        // the 4 x H100 host: 128 ranks waited 14.5 s for it; docs/runs/h100x4-20261127b-issue33).
        if hides_every_gpu(std::env::var_os("CUDA_VISIBLE_DEVICES").as_deref()) {
            return Err(GpuError::NoDevice);
        }
        // SAFETY: is_culib_present only tries to dlopen the candidate names.
        let present = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err(GpuError::NoDriver);
        }
        // SAFETY: cuInit has no preconditions; a panic (missing symbol) is caught.
        match catch_unwind(AssertUnwindSafe(|| unsafe { sys::cuInit(0) })) {
            Ok(CUresult::CUDA_SUCCESS) => Ok(()),
            Ok(CUresult::CUDA_ERROR_NO_DEVICE) => Err(GpuError::NoDevice),
            Ok(r) => check(r, "cuInit"),
            Err(p) => Err(GpuError::Panicked(panic_message(p))),
        }
    })
    .clone()
}

/// Whether `CUDA_VISIBLE_DEVICES` (its value, if set) leaves CUDA no device: set and empty (or
/// only blanks). Other values are the driver's to read (a list it may partly reject).
fn hides_every_gpu(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| v.to_string_lossy().trim().is_empty())
}

/// What one GPU is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// CUDA ordinal (after `CUDA_VISIBLE_DEVICES` remapping).
    pub ordinal: usize,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability (major, minor), e.g. (9, 0).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory in bytes.
    pub total_mem: u64,
    /// PCI bus id, `dddd:bb:dd.f` (for NIC affinity).
    pub pci_bus_id: String,
    /// Whether the driver exports this GPU's memory as DMA-BUF file descriptors
    /// (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`; false where the driver cannot say).
    pub dmabuf_supported: bool,
}

/// What [`Gpu::probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// Visible devices, in ordinal order.
    pub devices: Vec<DeviceInfo>,
}

impl GpuInfo {
    /// Number of visible GPUs (honours `CUDA_VISIBLE_DEVICES`, which CUDA applies itself).
    pub fn count(&self) -> usize {
        self.devices.len()
    }
}

/// Entry point for discovering GPUs.
pub struct Gpu;

impl Gpu {
    /// `Ok(None)` when there is no CUDA driver or no visible GPU (never panics); `Err` when a
    /// driver is present but broken.
    pub fn probe() -> Result<Option<GpuInfo>, String> {
        match init() {
            Ok(()) => {}
            Err(GpuError::NoDriver | GpuError::NoDevice) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
        let r = catch_unwind(|| -> Result<Option<GpuInfo>, GpuError> {
            let mut version = 0;
            // SAFETY: out-pointer to a live c_int.
            check(
                unsafe { sys::cuDriverGetVersion(&raw mut version) },
                "cuDriverGetVersion",
            )?;
            let mut count: c_int = 0;
            // SAFETY: out-pointer to a live c_int.
            check(unsafe { sys::cuDeviceGetCount(&raw mut count) }, "cuDeviceGetCount")?;
            if count <= 0 {
                return Ok(None);
            }
            let devices = (0..count as usize).map(device_info).collect::<Result<Vec<_>, _>>()?;
            Ok(Some(GpuInfo {
                driver_version: version,
                devices,
            }))
        });
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(p) => Err(GpuError::Panicked(panic_message(p)).to_string()),
        }
    }
}

pub(crate) fn cu_device(ordinal: usize) -> Result<CUdevice, GpuError> {
    init()?;
    let mut dev: CUdevice = 0;
    // SAFETY: out-pointer to a live CUdevice; the driver is initialised.
    check(
        unsafe { sys::cuDeviceGet(&raw mut dev, ordinal as c_int) },
        "cuDeviceGet",
    )?;
    Ok(dev)
}

fn attr(dev: CUdevice, a: CUdevice_attribute) -> Result<i32, GpuError> {
    let mut v = 0;
    // SAFETY: out-pointer to a live c_int; dev is valid.
    check(
        unsafe { sys::cuDeviceGetAttribute(&raw mut v, a, dev) },
        "cuDeviceGetAttribute",
    )?;
    Ok(v)
}

pub(crate) fn device_info(ordinal: usize) -> Result<DeviceInfo, GpuError> {
    let dev = cu_device(ordinal)?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes, as passed; the driver NUL-terminates.
    check(
        unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev) },
        "cuDeviceGetName",
    )?;
    // SAFETY: NUL-terminated by the driver within the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let mut bus = [0 as c_char; 64];
    // SAFETY: as above.
    check(
        unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev) },
        "cuDeviceGetPCIBusId",
    )?;
    // SAFETY: as above.
    let pci_bus_id = unsafe { CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().to_lowercase();
    let mut total = 0usize;
    // SAFETY: out-pointer to a live usize.
    check(
        unsafe { sys::cuDeviceTotalMem_v2(&raw mut total, dev) },
        "cuDeviceTotalMem",
    )?;
    use CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    };
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (
            attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        ),
        sm_count: attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        total_mem: total as u64,
        pci_bus_id,
        dmabuf_supported: attr(dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).is_ok_and(|v| v != 0),
    })
}

/// A retained primary context. Every GPU object holds an `Arc<Ctx>` so the context outlives
/// it, and binds it (`cuCtxSetCurrent`, a thread-local store in the driver) before each call,
/// so objects can be used from any thread.
pub(crate) struct Ctx {
    pub(crate) dev: CUdevice,
    pub(crate) raw: CUcontext,
    /// Whether we hold a primary-context retain to release in Drop (false: a borrowed,
    /// non-primary context that its creator keeps alive).
    pub(crate) owned: bool,
}

// SAFETY: a CUDA context handle may be used from any thread (the driver API is thread-safe
// and we make it current on the calling thread before each use).
unsafe impl Send for Ctx {}
// SAFETY: as above; Ctx has no interior mutability of its own.
unsafe impl Sync for Ctx {}

impl Ctx {
    pub(crate) fn retain(ordinal: usize) -> Result<Arc<Ctx>, GpuError> {
        let dev = cu_device(ordinal)?;
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live CUcontext; dev is valid. Released in Drop.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&raw mut raw, dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        let ctx = Arc::new(Ctx { dev, raw, owned: true });
        ctx.bind()?;
        Ok(ctx)
    }

    /// The context current on the calling thread (what NCCL's `cudaSetDevice` made current
    /// before calling a plugin), or GPU 0's primary context when none is current (what
    /// `cudaGetDevice` would pick). A primary context is retained (so it outlives its users);
    /// any other context is borrowed: its creator must keep it alive.
    pub(crate) fn current() -> Result<Arc<Ctx>, GpuError> {
        init()?;
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live CUcontext.
        check(unsafe { sys::cuCtxGetCurrent(&raw mut raw) }, "cuCtxGetCurrent")?;
        if raw.is_null() {
            return Ctx::retain(0);
        }
        let mut dev: CUdevice = 0;
        // SAFETY: out-pointer to a live CUdevice; a context is current.
        check(unsafe { sys::cuCtxGetDevice(&raw mut dev) }, "cuCtxGetDevice")?;
        let mut primary: CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live CUcontext; dev is valid. Released below or in Drop.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&raw mut primary, dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        if primary == raw {
            return Ok(Arc::new(Ctx { dev, raw, owned: true }));
        }
        // SAFETY: balances the retain just above.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
        Ok(Arc::new(Ctx { dev, raw, owned: false }))
    }

    /// The CUDA ordinal of the context's device.
    pub(crate) fn ordinal(&self) -> usize {
        self.dev as usize
    }

    /// Makes this context current on the calling thread.
    #[inline]
    pub(crate) fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: raw is a retained (live) context.
        check(unsafe { sys::cuCtxSetCurrent(self.raw) }, "cuCtxSetCurrent")
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: balances the retain in Ctx::retain; all objects holding this Ctx are gone.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// Whether `addr` is device memory (`CU_MEMORYTYPE_DEVICE`, cuMem/VMM allocations included)
/// according to `cuPointerGetAttribute`. Host memory, pinned host memory and addresses CUDA
/// does not know are `false`; no driver is an error.
pub fn pointer_is_device(addr: u64) -> Result<bool, GpuError> {
    init()?;
    let mut ty: u32 = 0;
    // SAFETY: out-pointer to a live u32 (the attribute is a CUmemorytype, 4 bytes).
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut ty).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            addr,
        )
    };
    match r {
        CUresult::CUDA_SUCCESS => Ok(ty == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32),
        CUresult::CUDA_ERROR_INVALID_VALUE => Ok(false),
        r => check(r, "cuPointerGetAttribute").map(|()| false),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn an_empty_visible_device_list_hides_every_gpu() {
        assert!(super::hides_every_gpu(Some(OsStr::new(""))));
        assert!(super::hides_every_gpu(Some(OsStr::new("  "))));
        assert!(!super::hides_every_gpu(None), "unset: every GPU");
        assert!(!super::hides_every_gpu(Some(OsStr::new("0,1"))));
        assert!(!super::hides_every_gpu(Some(OsStr::new("-1"))), "the driver's to read");
    }
}
