//! What tcpx-perf keeps of a plugin's contracts, derived from what the plugin says about itself
//! (ABI version, name, device properties) before any comm exists.
//!
//! Each limit here is a caller contract of a real plugin (GPUDirect-TCPX's are listed in
//! `plugins/tcpx-emu/README.md`, "TCPX contracts"); tcpx-emu enforces the same ones, so a run
//! that passes over tcpx-emu does not trip them on the real plugin. A flag combination that
//! would break one is refused up front with one line naming the flag that fixes it.

use nccl_net::abi;
use nccl_net::Properties;

/// Registration segment for ABIs with `int` sizes: the largest power of two an `int` holds.
pub const INT_ABI_SEGMENT: u64 = 1 << 30;

/// Largest request GPUDirect-TCPX can receive into CUDA memory: 2048 fragments per receive
/// (`sock/tcpx.h`), about 4 MiB with 4 KiB devmem fragments (MTU 8244); a larger receive makes
/// the plugin call `exit(1)`.
pub const UNPACK_MAX_REQUEST: u64 = 4 << 20;

/// Above this, a 1460-byte MTU already needs more than 2048 fragments (about 2.8 MiB).
pub const UNPACK_SAFE_REQUEST: u64 = 2 << 20;

/// Environment variable TCPX reads its request chunking from; unset or 0 moves no data.
pub const DYNAMIC_CHUNK_ENV: &str = "NCCL_DYNAMIC_CHUNK_SIZE";

/// The value GKE's TCPX setup exports.
pub const DYNAMIC_CHUNK_DEFAULT: &str = "524288";

/// Whether a plugin is GPUDirect-TCPX or behaves as it does (tcpx-emu): by its reported name.
pub fn is_tcpx_like(plugin_name: &str) -> bool {
    plugin_name.to_ascii_lowercase().contains("tcpx")
}

/// Requests a plugin can hold per comm: TCPX's 16 for TCPX and tcpx-emu, NCCL's 32 otherwise.
pub fn request_limit(plugin_name: &str) -> usize {
    if is_tcpx_like(plugin_name) {
        abi::TCPX_MAX_REQUESTS
    } else {
        abi::NCCL_NET_MAX_REQUESTS
    }
}

/// The largest single registration the ABI can express: v7/v8 pass `int` sizes.
pub fn registration_segment(abi_version: u32, max_reg: Option<u64>) -> u64 {
    let abi_limit = if abi_version <= 8 { INT_ABI_SEGMENT } else { u64::MAX };
    // A user limit is rounded down to whole pages (registrations cover whole pages).
    max_reg.map_or(abi_limit, |m| abi_limit.min(m / 4096 * 4096))
}

/// The largest request (`isend`/`irecv` size) the plugin takes: its `maxP2pBytes` (v9+), NCCL's
/// `MAX_NET_SIZE` for v7/v8.
pub fn request_cap(abi_version: u32, props: &Properties) -> u64 {
    match props.max_p2p_bytes {
        Some(bytes) if abi_version >= 9 && bytes > 0 => bytes as u64,
        _ => abi::MAX_NET_SIZE as u64,
    }
}

/// The request size checks: one line naming `--chunk` when it breaks a limit, else optional
/// notes for the header.
pub fn check_chunk(chunk: u64, abi_version: u32, props: &Properties, cuda_unpack: bool) -> Result<Vec<String>, String> {
    let cap = request_cap(abi_version, props);
    if chunk > cap {
        return Err(format!(
            "--chunk {} exceeds the {} bytes per request that plugin ABI v{abi_version} allows (maxP2pBytes, or NCCL's MAX_NET_SIZE before v9): use --chunk {} or less",
            tcpx_units::format_size(chunk),
            cap,
            tcpx_units::format_size(cap)
        ));
    }
    let mut notes = Vec::new();
    if cuda_unpack {
        if chunk > UNPACK_MAX_REQUEST {
            return Err(format!(
                "--chunk {} is above 4M: a device-unpack plugin (GPUDirect-TCPX) receives at most 2048 fragments per request and exit(1)s beyond; use --chunk 4M or less (2M is safe at any MTU)",
                tcpx_units::format_size(chunk)
            ));
        }
        if chunk > UNPACK_SAFE_REQUEST {
            notes.push(format!(
                "--chunk {} fits TCPX's 2048 fragments per receive only with 4 KiB fragments (MTU 8244); at MTU 1460 use --chunk 2M or less",
                tcpx_units::format_size(chunk)
            ));
        }
    }
    Ok(notes)
}

/// `maxComms`: the comms one process opens on one device (listen comms included, as they are
/// open at the same time as the first connects).
pub fn check_comms(needed: usize, device: usize, props: &Properties, channels: usize) -> Result<(), String> {
    if props.max_comms > 0 && needed > props.max_comms as usize {
        return Err(format!(
            "this rank needs {needed} comms on plugin device {device} ({}), which allows {} (maxComms): lower --channels (now {channels}) or --max-peers, or spread endpoints over more devices with --net-dev",
            props.name, props.max_comms
        ));
    }
    Ok(())
}

/// Why CUDA memory cannot go to a device, if it cannot: a GPUDirect device (UNPACK, or one that
/// takes `NCCL_PTR_CUDA`) without a PCI path has no GPU it can reach (TCPX crashed in `regMr`
/// on `lo`), and a plugin without `NCCL_PTR_CUDA` takes device memory only through staging.
pub fn cuda_unreachable(props: &Properties) -> Option<String> {
    let gdr = props.ptr_support & abi::NCCL_PTR_CUDA != 0;
    if gdr && props.pci_path.is_none() {
        return Some(format!(
            "plugin device {} has no PCI path, so no GPU is reachable from it for GPUDirect",
            props.name
        ));
    }
    None
}

/// Whether a completed receive into GPU memory needs `iflush` before the GPU may read it, as
/// NCCL decides (`graph/paths.cc`, `transport/net.cc`): GPUDirect receives (the plugin writes
/// device memory itself, not through device unpack) on a plugin asking `forceFlush`, or on a
/// GPU older than Hopper (compute capability < 9). TCPX (UNPACK) is never flushed: its `iflush`
/// dereferences a NULL request.
pub fn needs_flush(props: &Properties, gpudirect_receive: bool, gpu_major: u32) -> bool {
    gpudirect_receive && props.net_device_type != abi::NCCL_NET_DEVICE_UNPACK && (props.force_flush || gpu_major < 9)
}

/// Whether GPU memory is registered through DMA-BUF (`regMrDmaBuf`), as NCCL prefers
/// (`transport/net.cc`): the plugin reports `NCCL_PTR_DMABUF` and implements the call, the GPU's
/// driver exports DMA-BUFs, and `NCCL_DMABUF_ENABLE` (the variable's value, if set) is not 0.
/// TCPX leaves `regMrDmaBuf` NULL, so it always gets `regMr`.
pub fn prefers_dmabuf(props: &Properties, has_reg_mr_dma_buf: bool, gpu_exports: bool, enable: Option<&str>) -> bool {
    let enabled = enable.is_none_or(|v| v.trim() != "0");
    enabled && has_reg_mr_dma_buf && gpu_exports && props.ptr_support & abi::NCCL_PTR_DMABUF != 0
}

/// TCPX moves no data while `NCCL_DYNAMIC_CHUNK_SIZE` is unset or 0. Returns the fix for a
/// TCPX-like plugin that would run without it, given the variable's value.
pub fn dynamic_chunk_problem(value: Option<&str>) -> Option<String> {
    match value.map(str::trim) {
        Some(v) if v.parse::<u64>().is_ok_and(|n| n > 0) => None,
        Some(v) => Some(format!(
            "{DYNAMIC_CHUNK_ENV}={v} makes GPUDirect-TCPX move no data: export {DYNAMIC_CHUNK_ENV}={DYNAMIC_CHUNK_DEFAULT} (GKE's value)"
        )),
        None => Some(format!(
            "{DYNAMIC_CHUNK_ENV} is unset, so GPUDirect-TCPX would move no data: export {DYNAMIC_CHUNK_ENV}={DYNAMIC_CHUNK_DEFAULT} (GKE's value)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(max_p2p: Option<usize>, ptr: i32, pci: Option<&str>, max_comms: i32) -> Properties {
        Properties {
            name: "eth1".into(),
            pci_path: pci.map(str::to_string),
            guid: 0,
            ptr_support: ptr,
            reg_is_global: false,
            speed_mbps: 200_000,
            port: 0,
            latency_us: 0.0,
            max_comms,
            max_recvs: 1,
            net_device_type: abi::NCCL_NET_DEVICE_UNPACK,
            net_device_version: abi::NCCL_NET_DEVICE_UNPACK_VERSION,
            max_p2p_bytes: max_p2p,
            force_flush: false,
        }
    }

    #[test]
    fn int_abis_register_in_one_gib_segments() {
        assert_eq!(registration_segment(7, None), 1 << 30);
        assert_eq!(registration_segment(8, None), 1 << 30);
        assert_eq!(registration_segment(9, None), u64::MAX);
        assert_eq!(registration_segment(12, Some((256 << 20) + 5)), 256 << 20);
        assert_eq!(registration_segment(7, Some(4 << 30)), 1 << 30);
    }

    #[test]
    fn request_cap_follows_the_abi() {
        let p = props(Some(16 << 30), abi::NCCL_PTR_HOST, None, 0);
        assert_eq!(
            request_cap(7, &p),
            abi::MAX_NET_SIZE as u64,
            "v7 ignores maxP2pBytes, NCCL caps at 1 GiB"
        );
        assert_eq!(request_cap(9, &p), 16 << 30);
        let err = check_chunk(2 << 30, 7, &p, false).unwrap_err();
        assert!(err.contains("--chunk 1G or less"), "{err}");
        assert!(check_chunk(1 << 30, 7, &p, false).unwrap().is_empty());
    }

    #[test]
    fn unpack_requests_stay_within_2048_fragments() {
        let p = props(None, abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA, Some("/sys/x"), 0);
        let err = check_chunk(8 << 20, 7, &p, true).unwrap_err();
        assert!(err.contains("2048 fragments") && err.contains("--chunk 4M"), "{err}");
        assert_eq!(check_chunk(4 << 20, 7, &p, true).unwrap().len(), 1, "above 2M: a note");
        assert!(check_chunk(2 << 20, 7, &p, true).unwrap().is_empty());
        assert!(
            check_chunk(8 << 20, 7, &p, false).unwrap().is_empty(),
            "host receives have no fragments"
        );
    }

    #[test]
    fn max_comms_names_the_flags() {
        let p = props(None, abi::NCCL_PTR_HOST, None, 16);
        assert!(check_comms(16, 0, &p, 2).is_ok());
        let err = check_comms(17, 0, &p, 2).unwrap_err();
        assert!(err.contains("maxComms") && err.contains("--channels (now 2)"), "{err}");
        assert!(
            check_comms(1000, 0, &props(None, 1, None, 0), 1).is_ok(),
            "0 = no limit reported"
        );
    }

    #[test]
    fn gdr_without_pci_path_cannot_reach_a_gpu() {
        assert!(cuda_unreachable(&props(None, abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA, None, 0)).is_some());
        assert!(cuda_unreachable(&props(None, abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA, Some("/sys/p"), 0)).is_none());
        assert!(
            cuda_unreachable(&props(None, abi::NCCL_PTR_HOST, None, 0)).is_none(),
            "staged path"
        );
    }

    #[test]
    fn flushes_where_nccl_flushes() {
        let mut p = props(None, abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA, Some("/sys/p"), 0);
        assert!(!needs_flush(&p, true, 9), "UNPACK devices are never flushed (TCPX)");
        assert!(!needs_flush(&p, true, 8));
        p.net_device_type = abi::NCCL_NET_DEVICE_HOST;
        assert!(!needs_flush(&p, true, 9), "Hopper without forceFlush");
        assert!(needs_flush(&p, true, 8), "Ampere GDR receives are flushed");
        assert!(!needs_flush(&p, false, 8), "host-memory or staged receives never");
        p.force_flush = true;
        assert!(needs_flush(&p, true, 9));
    }

    #[test]
    fn dmabuf_where_nccl_uses_it() {
        let dmabuf = abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA | abi::NCCL_PTR_DMABUF;
        let p = props(None, dmabuf, Some("/sys/p"), 0);
        assert!(prefers_dmabuf(&p, true, true, None));
        assert!(prefers_dmabuf(&p, true, true, Some("1")));
        assert!(!prefers_dmabuf(&p, true, true, Some("0")), "NCCL_DMABUF_ENABLE=0");
        assert!(!prefers_dmabuf(&p, false, true, None), "no regMrDmaBuf entry (TCPX)");
        assert!(
            !prefers_dmabuf(&p, true, false, None),
            "the GPU driver exports no DMA-BUF"
        );
        let tcpx = props(None, abi::NCCL_PTR_HOST | abi::NCCL_PTR_CUDA, Some("/sys/p"), 0);
        assert!(!prefers_dmabuf(&tcpx, true, true, None), "no NCCL_PTR_DMABUF");
    }

    #[test]
    fn dynamic_chunk_size_must_be_positive() {
        assert!(dynamic_chunk_problem(None).unwrap().contains("unset"));
        assert!(dynamic_chunk_problem(Some("0")).unwrap().contains("=0"));
        assert!(dynamic_chunk_problem(Some("abc")).is_some());
        assert!(dynamic_chunk_problem(Some("524288")).is_none());
    }

    #[test]
    fn request_limits() {
        assert_eq!(request_limit("GPUDirectTCPX"), 16);
        assert_eq!(request_limit("tcpx-emu"), 16);
        assert_eq!(request_limit("AWS Libfabric"), abi::NCCL_NET_MAX_REQUESTS);
    }
}
