//! One error type for every GPU operation. Each message is one line and names the fix, because
//! these errors end a benchmark run and the operator reads them in a log.

use cudarc::driver::sys::{self, CUresult};
use std::fmt;

/// Why a GPU operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// `libcuda.so.1` could not be loaded.
    NoDriver,
    /// The driver loaded but reports no GPU.
    NoDevice,
    /// A CUDA driver call returned an error.
    Driver {
        /// The driver function, e.g. `cuMemAlloc`.
        call: &'static str,
        /// The `CUresult` value.
        code: i32,
        /// The `CUresult` name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
    },
    /// NVRTC could not be loaded or could not compile the kernels.
    Nvrtc(String),
    /// A caller-supplied argument is out of range (the message says which and the limit).
    Invalid(String),
    /// cudarc panicked (a driver symbol it needs is missing: the driver is too old).
    Panicked(String),
}

impl GpuError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        GpuError::Invalid(msg.into())
    }
}

fn hint(r: CUresult) -> &'static str {
    use CUresult::{
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    };
    match r {
        CUDA_ERROR_OUT_OF_MEMORY => "free GPU memory or use smaller buffers",
        CUDA_ERROR_NO_DEVICE => "no GPU visible: check nvidia-smi and CUDA_VISIBLE_DEVICES",
        CUDA_ERROR_INVALID_DEVICE => {
            "GPU ordinal out of range: use 0..count-1 of the GPUs CUDA_VISIBLE_DEVICES exposes"
        }
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => {
            "the NVIDIA kernel driver and libcuda disagree: reinstall or reboot into one driver"
        }
        CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUDA_ERROR_INVALID_IMAGE
        | CUDA_ERROR_INVALID_PTX
        | CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            "the NVRTC library is newer than the driver: upgrade the driver or set TCPX_GPU_NVRTC to a libnvrtc no newer than the driver"
        }
        CUDA_ERROR_ILLEGAL_ADDRESS | CUDA_ERROR_LAUNCH_FAILED => {
            "a kernel touched invalid memory (the context is now unusable): check the buffer pointers and unpack descriptors"
        }
        CUDA_ERROR_INVALID_VALUE => {
            "an argument was rejected by the driver: check sizes and pointers passed to this call"
        }
        CUDA_ERROR_NOT_INITIALIZED | CUDA_ERROR_DEINITIALIZED => {
            "the CUDA driver is not initialised or shutting down: call Gpu::probe first and keep the Device alive"
        }
        _ => "see the CUDA driver API docs for this code; check nvidia-smi and dmesg",
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoDriver => write!(
                f,
                "no CUDA driver library (libcuda.so.1) could be loaded: run on a GPU host with the NVIDIA driver installed"
            ),
            GpuError::NoDevice => write!(
                f,
                "the CUDA driver reports no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES"
            ),
            GpuError::Driver { call, code, name } => {
                let hint = hint_for_code(*code);
                write!(f, "{call} failed with {name} ({code}): {hint}")
            }
            GpuError::Nvrtc(m) | GpuError::Invalid(m) => write!(f, "{m}"),
            GpuError::Panicked(m) => write!(
                f,
                "the CUDA binding panicked ({m}): the driver is too old, install driver >= 535 (CUDA 12.2)"
            ),
        }
    }
}

impl std::error::Error for GpuError {}

fn hint_for_code(code: i32) -> &'static str {
    // CUresult is a C enum; map back by matching the few codes we hint on.
    use CUresult::{
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_UNKNOWN,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    };
    for r in [
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUDA_ERROR_INVALID_IMAGE,
        CUDA_ERROR_INVALID_PTX,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
    ] {
        if r as i32 == code {
            return hint(r);
        }
    }
    hint(CUDA_ERROR_UNKNOWN)
}

/// Turns a driver return code into `Result`, naming the call.
#[inline]
pub(crate) fn check(r: CUresult, call: &'static str) -> Result<(), GpuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Driver {
            call,
            code: r as i32,
            name: format!("{r:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_a_fix() {
        let errs = [
            GpuError::NoDriver,
            GpuError::NoDevice,
            check(CUresult::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc").unwrap_err(),
            check(CUresult::CUDA_ERROR_LAUNCH_TIMEOUT, "cuLaunchKernel").unwrap_err(),
            GpuError::Panicked("x".into()),
        ];
        for e in errs {
            let s = e.to_string();
            assert!(!s.contains('\n'), "{s}");
            assert!(s.contains(':'), "{s}");
        }
        let s = check(CUresult::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc")
            .unwrap_err()
            .to_string();
        assert!(
            s.starts_with("cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2)"),
            "{s}"
        );
        assert!(s.contains("smaller buffers"), "{s}");
        assert!(check(CUresult::CUDA_SUCCESS, "x").is_ok());
    }
}
