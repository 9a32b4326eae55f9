//! [`Properties`]: one device description over every `ncclNetProperties_vN_t` layout.
//!
//! The C structs change layout at v8 (`regIsGlobal` inserted), v9 (`forceFlush`, vProps, max sizes),
//! v11 and v12, so each version is read with its own `#[repr(C)]` type from `nccl-net-abi` and then
//! normalised here. Fields a version lacks get the value NCCL's adapter gives them (`regIsGlobal=0`),
//! or `None` where inventing a value would mislead (`max_p2p_bytes` before v9).

use std::ffi::{c_char, CStr};

use nccl_net_abi as abi;

/// A net device's properties, normalised over ABI versions.
#[derive(Clone, Debug)]
pub struct Properties {
    /// Interface or device name (`eth1`, `lo`, ...).
    pub name: String,
    /// PCI path in sysfs; `None` when the plugin reports NULL (virtual devices such as `lo`).
    pub pci_path: Option<String>,
    pub guid: u64,
    /// `NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF` bits.
    pub ptr_support: i32,
    /// v8+; `false` for v7 (what NCCL assumes).
    pub reg_is_global: bool,
    pub speed_mbps: i32,
    pub port: i32,
    pub latency_us: f32,
    pub max_comms: i32,
    pub max_recvs: i32,
    /// `NCCL_NET_DEVICE_HOST` (0) or `NCCL_NET_DEVICE_UNPACK` (1).
    pub net_device_type: i32,
    pub net_device_version: i32,
    /// v9+ `maxP2pBytes`; `None` before v9 (NCCL then caps at 1 GiB, `MAX_NET_SIZE`).
    pub max_p2p_bytes: Option<usize>,
    /// v9+ `forceFlush`: GPUDirect receives need `iflush` before the GPU reads them; `false`
    /// before v9 (what NCCL's adapter fills in).
    pub force_flush: bool,
}

/// Copies a plugin-owned C string; NULL gives `None`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string alive for the duration of the call.
unsafe fn opt_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: per the contract above.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Generates `from_vN(&PropertiesVN) -> Properties` for the layouts, which share field names.
/// `$rig`/`$p2p`/`$flush` give the fields whose presence depends on the version.
macro_rules! normalize {
    ($fn_name:ident, $t:ty, |$p:ident| $rig:expr, $p2p:expr, $flush:expr) => {
        /// Normalises one layout. The C strings are copied here, right after `getProperties`,
        /// while the plugin's storage is certainly alive.
        ///
        /// # Safety
        /// The string pointers of the struct are NULL or valid NUL-terminated strings.
        pub(crate) unsafe fn $fn_name($p: &$t) -> Properties {
            Properties {
                // SAFETY: forwarded from the caller.
                name: unsafe { opt_string($p.name) }.unwrap_or_default(),
                // SAFETY: forwarded from the caller.
                pci_path: unsafe { opt_string($p.pci_path) },
                guid: $p.guid,
                ptr_support: $p.ptr_support,
                reg_is_global: $rig,
                speed_mbps: $p.speed,
                port: $p.port,
                latency_us: $p.latency,
                max_comms: $p.max_comms,
                max_recvs: $p.max_recvs,
                net_device_type: $p.net_device_type,
                net_device_version: $p.net_device_version,
                max_p2p_bytes: $p2p,
                force_flush: $flush,
            }
        }
    };
}

normalize!(from_v7, abi::PropertiesV7, |p| false, None, false);
normalize!(from_v8, abi::PropertiesV8, |p| p.reg_is_global != 0, None, false);
normalize!(
    from_v9,
    abi::PropertiesV9,
    |p| p.reg_is_global != 0,
    Some(p.max_p2p_bytes),
    p.force_flush != 0
);
normalize!(
    from_v11,
    abi::PropertiesV11,
    |p| p.reg_is_global != 0,
    Some(p.max_p2p_bytes),
    p.force_flush != 0
);
normalize!(
    from_v12,
    abi::PropertiesV12,
    |p| p.reg_is_global != 0,
    Some(p.max_p2p_bytes),
    p.force_flush != 0
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_normalise_alike() {
        let name = c"lo";
        let v7 = abi::PropertiesV7 {
            name: name.as_ptr().cast_mut(),
            pci_path: std::ptr::null_mut(),
            guid: 7,
            ptr_support: abi::NCCL_PTR_HOST,
            speed: 10_000,
            port: 0,
            latency: 1.5,
            max_comms: 65_536,
            max_recvs: 1,
            net_device_type: abi::NCCL_NET_DEVICE_UNPACK,
            net_device_version: abi::NCCL_NET_DEVICE_UNPACK_VERSION,
        };
        // SAFETY: the name is a valid C string, pciPath is NULL.
        let p = unsafe { from_v7(&v7) };
        assert_eq!((p.name.as_str(), p.pci_path.as_deref(), p.guid), ("lo", None, 7));
        assert!(!p.reg_is_global && p.max_p2p_bytes.is_none() && p.max_recvs == 1);

        // SAFETY: all-zero is a valid value of this plain-data struct.
        let mut v12: abi::PropertiesV12 = unsafe { std::mem::zeroed() };
        v12.name = name.as_ptr().cast_mut();
        v12.pci_path = c"/sys/devices/pci0000:00".as_ptr().cast_mut();
        v12.reg_is_global = 1;
        v12.max_p2p_bytes = 1 << 30;
        v12.speed = 200_000;
        // SAFETY: as above.
        let p = unsafe { from_v12(&v12) };
        assert_eq!(p.pci_path.as_deref(), Some("/sys/devices/pci0000:00"));
        assert!(p.reg_is_global);
        assert_eq!((p.max_p2p_bytes, p.speed_mbps), (Some(1 << 30), 200_000));
    }
}
