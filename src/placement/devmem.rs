//! Devmem-TCP counters: the ground truth that TCPX's GPU receive path is active on a NIC
//! (`ethtool -S ethX` `rx_devmem_pkts`, tcpx-contracts.md #15), read with the `SIOCETHTOOL`
//! ioctl (no `ethtool` binary needed), and the check that every NIC that carried payload into
//! GPU memory counted devmem packets.

use super::preflight::Finding;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// No driver has this many statistics; a larger count is a malformed reply.
const MAX_STATS: usize = 1 << 16;

fn ethtool(ifname: &str, data: *mut u8) -> std::io::Result<()> {
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut u8,
        _pad: [u8; 16],
    }
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
    // SAFETY: a datagram socket for the ioctl, closed below; `req` and `data` outlive the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Every driver statistic of `ifname` (`ethtool -S`), by name.
pub fn nic_stats(ifname: &str) -> Result<Vec<(String, u64)>, String> {
    let fail = |what: &str, e: std::io::Error| format!("{ifname}: {what}: {e}");
    // ethtool_sset_info { cmd, reserved, u64 sset_mask, u32 data[1] }
    let mut info = [0u32; 5];
    info[0] = ETHTOOL_GSSET_INFO;
    info[2] = 1 << ETH_SS_STATS;
    ethtool(ifname, info.as_mut_ptr().cast()).map_err(|e| fail("ETHTOOL_GSSET_INFO", e))?;
    let count = if info[2] & (1 << ETH_SS_STATS) != 0 {
        info[4] as usize
    } else {
        0
    };
    if count == 0 || count > MAX_STATS {
        return Ok(Vec::new());
    }
    // ethtool_gstrings { cmd, string_set, len, u8 data[] }
    let mut strings = vec![0u8; 12 + count * ETH_GSTRING_LEN];
    strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
    strings[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ethtool(ifname, strings.as_mut_ptr()).map_err(|e| fail("ETHTOOL_GSTRINGS", e))?;
    // ethtool_stats { cmd, n_stats, u64 data[] }
    let mut stats = vec![0u64; 1 + count];
    stats[0] = u64::from(ETHTOOL_GSTATS) | ((count as u64) << 32);
    ethtool(ifname, stats.as_mut_ptr().cast()).map_err(|e| fail("ETHTOOL_GSTATS", e))?;
    Ok(strings[12..]
        .chunks_exact(ETH_GSTRING_LEN)
        .zip(&stats[1..])
        .map(|(name, &v)| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(ETH_GSTRING_LEN);
            (String::from_utf8_lossy(&name[..end]).into_owned(), v)
        })
        .collect())
}

/// The devmem packet counter among a NIC's statistics: `rx_devmem_pkts` (gve with Google's TCPX
/// kernel), else the first `rx*devmem*pkt*` a driver names differently.
pub fn devmem_counter(stats: &[(String, u64)]) -> Option<(&str, u64)> {
    stats
        .iter()
        .find(|(n, _)| n == "rx_devmem_pkts")
        .or_else(|| {
            stats
                .iter()
                .find(|(n, _)| n.starts_with("rx") && n.contains("devmem") && n.contains("pkt"))
        })
        .map(|(n, v)| (n.as_str(), *v))
}

/// A NIC's devmem packet count now: Ok(None) when the driver has no such counter.
pub fn devmem_packets(ifname: &str) -> Result<Option<u64>, String> {
    Ok(devmem_counter(&nic_stats(ifname)?).map(|(_, v)| v))
}

/// What one NIC did during a run: payload bytes it received into GPU memory (from the plan or
/// the NIC's byte counters) and its devmem packet counter before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicTraffic {
    pub nic: String,
    pub gpu_payload_bytes: u64,
    pub devmem_before: Option<u64>,
    pub devmem_after: Option<u64>,
}

/// The post-run check for GPUDirect-TCPX: a NIC that received payload into GPU memory but whose
/// devmem counter did not move delivered through the host path (or not at all): an error.
/// Host-memory receives never use devmem, so callers pass only bytes received into CUDA memory.
pub fn devmem_findings(traffic: &[NicTraffic]) -> Vec<Finding> {
    traffic
        .iter()
        .filter(|t| t.gpu_payload_bytes > 0)
        .map(|t| match (t.devmem_before, t.devmem_after) {
            (Some(b), Some(a)) if a > b => Finding::ok(format!(
                "{}: {} devmem packets for {:.1} GB received into GPU memory",
                t.nic,
                a - b,
                t.gpu_payload_bytes as f64 / 1e9
            )),
            (Some(b), Some(a)) => Finding::error(format!(
                "{}: {} devmem packets for {:.1} GB received into GPU memory: devmem-TCP is not active on it (flow steering, RxDM, or a NIC the GPU cannot reach)",
                t.nic,
                a.saturating_sub(b),
                t.gpu_payload_bytes as f64 / 1e9
            )),
            _ => Finding::warning(format!(
                "{}: no devmem packet counter readable, so {:.1} GB received into GPU memory are unverified",
                t.nic,
                t.gpu_payload_bytes as f64 / 1e9
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::preflight::Level;
    use super::*;

    fn traffic(nic: &str, bytes: u64, before: Option<u64>, after: Option<u64>) -> NicTraffic {
        NicTraffic {
            nic: nic.into(),
            gpu_payload_bytes: bytes,
            devmem_before: before,
            devmem_after: after,
        }
    }

    #[test]
    fn a_nic_that_carried_gpu_payload_without_devmem_is_an_error() {
        let f = devmem_findings(&[
            traffic("eth1", 4_300_000_000, Some(10), Some(520_000)),
            traffic("eth2", 4_300_000_000, Some(7), Some(7)),
            traffic("eth3", 0, Some(7), Some(7)),
            traffic("eth4", 1_000_000_000, None, None),
        ]);
        assert_eq!(f.len(), 3, "a NIC without payload has nothing to prove: {f:?}");
        assert_eq!(f[0].level, Level::Ok);
        assert_eq!(f[1].level, Level::Error);
        assert!(
            f[1].text.starts_with("eth2: 0 devmem packets for 4.3 GB"),
            "{}",
            f[1].text
        );
        assert_eq!(f[2].level, Level::Warning);
    }

    #[test]
    fn counter_names() {
        let s = |names: &[&str]| names.iter().map(|n| (n.to_string(), 5)).collect::<Vec<_>>();
        assert_eq!(
            devmem_counter(&s(&["rx_packets", "rx_devmem_pkts"])),
            Some(("rx_devmem_pkts", 5))
        );
        assert_eq!(
            devmem_counter(&s(&["rx_devmem_dropped", "rx_q0_devmem_pkts"])),
            Some(("rx_q0_devmem_pkts", 5))
        );
        assert_eq!(devmem_counter(&s(&["rx_packets"])), None);
    }

    #[test]
    fn loopback_has_no_driver_statistics() {
        // `lo` answers ETHTOOL_GSSET_INFO with EOPNOTSUPP (or no stats): never a devmem counter.
        assert!(!matches!(devmem_packets("lo"), Ok(Some(_))));
        assert!(nic_stats("no-such-if0").is_err());
    }
}
