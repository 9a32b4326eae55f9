//! GPU building blocks for the TCPX data path.
//!
//! With GPUDirect-TCPX the NIC writes received payload into a GPU *bounce buffer* in
//! scattered 4 KiB pages, and the consumer must gather them into the destination buffer
//! before it may hand the pages back (`irecvConsumed`). NCCL does this inside its collective
//! kernels; a benchmark that drives the plugin directly must do it itself, fast, and must
//! also generate and check payload on the GPU so that host copies do not dominate. This crate
//! provides exactly that, and nothing else:
//!
//! - [`Gpu::probe`]: which GPUs exist, `Ok(None)` with no driver (CI), never a panic.
//! - [`Device`]: a GPU's primary context (shared with NCCL and the plugin), a stream, and the
//!   kernels from `kernels/*.cu`, compiled by NVRTC for the GPU's `sm_XY` once per process
//!   (at [`Device::open`], or at the first launch with [`Device::open_lazy`] /
//!   [`Device::current`], which a net plugin uses: no NVRTC needed for memory and copies).
//! - Memory: [`DeviceBuffer`] (4 KiB-aligned), [`PinnedHostBuffer`] (optionally mapped),
//!   [`Stream`], [`Event`]: RAII, `Send + Sync`, raw addresses out for plugin calls.
//! - Kernels: [`Device::fill`] / [`Device::verify`] (the [`pattern`] of tcpx-perf's data
//!   check, bit-exact), and [`Device::unpack`], NCCL's device-unpack contract batched over many
//!   receives.
//! - Host side of unpack ([`unpack`]): job descriptors, limit checks, a CPU reference and
//!   layout generators, testable without a GPU.
//!
//! Built on cudarc's driver bindings (dynamic loading, CUDA 12.2 API level so 12.2+ drivers
//! work); NVRTC is loaded by [`nvrtc`] itself so that CUDA 13's `libnvrtc.so.13` is found.

mod device;
mod driver;
mod error;
mod memory;
pub mod nvrtc;
pub mod pattern;
pub mod unpack;

pub use device::{Device, KernelInfo};
pub use driver::{pointer_is_device, DeviceInfo, Gpu, GpuInfo};
pub use error::GpuError;
pub use memory::{DeviceBuffer, Event, PinnedFlags, PinnedHostBuffer, Stream, DEVICE_BUFFER_ALIGN};
pub use nccl_net_abi::LoadMeta;
pub use pattern::pattern_byte;
pub use unpack::{unpack_reference, UnpackJob, MAX_FRAGMENTS, MAX_JOBS_PER_LAUNCH, MAX_RECEIVE_BYTES};
