//! Devmem-TCP delivery: the check that every NIC that carried payload into GPU memory counted
//! devmem packets (`ethtool -S ethX` `rx_devmem_pkts`, the ground truth that TCPX's GPU receive
//! path is active, tcpx-contracts.md #15). The counters are read by [`crate::wire`].

use super::finding::Finding;

/// A NIC's devmem packet count now: `Err` when the interface has no counters here, `Ok(None)`
/// when its driver has no devmem counter.
pub fn devmem_packets(ifname: &str) -> Result<Option<u64>, String> {
    crate::wire::read(ifname)
        .map(|c| c.devmem_pkts)
        .ok_or_else(|| format!("{ifname}: no interface counters in sysfs"))
}

/// What one NIC did during a run: payload bytes it received into GPU memory (from the plan or
/// the NIC's byte counters) and how far its devmem packet counter moved
/// ([`crate::wire::IfaceCounters::delta`]'s `devmem_pkts`; None = no counter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicTraffic {
    pub nic: String,
    pub gpu_payload_bytes: u64,
    pub devmem_delta: Option<u64>,
}

/// The post-run check for GPUDirect-TCPX: a NIC that received payload into GPU memory but whose
/// devmem counter did not move delivered through the host path (or not at all): an error.
/// Host-memory receives never use devmem, so callers pass only bytes received into CUDA memory.
pub fn devmem_findings(traffic: &[NicTraffic]) -> Vec<Finding> {
    traffic
        .iter()
        .filter(|t| t.gpu_payload_bytes > 0)
        .map(|t| match t.devmem_delta {
            Some(n) if n > 0 => Finding::ok(format!(
                "{}: {n} devmem packets for {:.1} GB received into GPU memory",
                t.nic,
                t.gpu_payload_bytes as f64 / 1e9
            )),
            Some(n) => Finding::error(format!(
                "{}: {n} devmem packets for {:.1} GB received into GPU memory: devmem-TCP is not active on it (flow steering, RxDM, or a NIC the GPU cannot reach)",
                t.nic,
                t.gpu_payload_bytes as f64 / 1e9
            )),
            None => Finding::warning(format!(
                "{}: no devmem packet counter readable, so {:.1} GB received into GPU memory are unverified",
                t.nic,
                t.gpu_payload_bytes as f64 / 1e9
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::finding::Level;
    use super::*;

    fn traffic(nic: &str, bytes: u64, delta: Option<u64>) -> NicTraffic {
        NicTraffic {
            nic: nic.into(),
            gpu_payload_bytes: bytes,
            devmem_delta: delta,
        }
    }

    #[test]
    fn a_nic_that_carried_gpu_payload_without_devmem_is_an_error() {
        let f = devmem_findings(&[
            traffic("eth1", 4_300_000_000, Some(519_990)),
            traffic("eth2", 4_300_000_000, Some(0)),
            traffic("eth3", 0, Some(0)),
            traffic("eth4", 1_000_000_000, None),
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
    fn loopback_has_no_devmem_counter() {
        assert!(!matches!(devmem_packets("lo"), Ok(Some(_))));
        assert!(devmem_packets("no-such-if0").is_err());
    }
}
