//! PCIe distance between two devices, in NCCL's classes (`graph/paths.cc`, `nvidia-smi topo -m`):
//! PIX (one PCIe switch), PXB (several switches, no host bridge), PHB (through the host bridge /
//! CPU of one NUMA node), SYS (across NUMA nodes).
//!
//! Devices are located by their sysfs path below `/sys/devices`, e.g.
//! `pci0000:01/0000:01:00.0/0000:02:00.0/0000:03:02.0/0000:06:00.0`: a root bus, then one PCI
//! function per level. A switch appears as its upstream port with one downstream port per
//! device, so two devices on one switch share an ancestor two levels above each of them.

use serde::Serialize;
use std::fmt;

/// How far apart two PCI devices are; the order is closest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Distance {
    /// Through at most one PCIe switch.
    #[serde(rename = "PIX")]
    Pix,
    /// Through several switches below one root port, not through the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the host bridge (the CPU) of one NUMA node.
    #[serde(rename = "PHB")]
    Phb,
    /// Across NUMA nodes (the inter-socket link).
    #[serde(rename = "SYS")]
    Sys,
    /// A path is unknown (no PCI device: `lo`, a container without sysfs).
    #[serde(rename = "unknown")]
    Unknown,
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Phb => "PHB",
            Distance::Sys => "SYS",
            Distance::Unknown => "unknown",
        })
    }
}

/// A device's place: its path components below `/sys/devices` and its NUMA node (-1 or
/// unreadable = None).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciPlace {
    pub path: Vec<String>,
    pub numa: Option<u32>,
}

impl PciPlace {
    /// From a sysfs path such as `/sys/devices/pci0000:01/.../0000:06:00.0` (or one already
    /// relative to `/sys/devices`); None when the path holds no PCI root.
    pub fn from_sysfs_path(path: &str, numa: Option<u32>) -> Option<PciPlace> {
        let parts: Vec<String> = path.split('/').filter(|p| !p.is_empty()).map(String::from).collect();
        let root = parts.iter().position(|p| p.starts_with("pci"))?;
        Some(PciPlace {
            path: parts[root..].to_vec(),
            numa,
        })
    }

    /// The device's own address (the last component).
    pub fn bdf(&self) -> &str {
        self.path.last().map_or("", String::as_str)
    }
}

/// Levels from a device up to the ancestor it shares with a device on the same switch.
const ONE_SWITCH: usize = 2;

/// NCCL's distance class between two devices (symmetric).
pub fn distance(a: Option<&PciPlace>, b: Option<&PciPlace>) -> Distance {
    let (Some(a), Some(b)) = (a, b) else {
        return Distance::Unknown;
    };
    let common = a.path.iter().zip(&b.path).take_while(|(x, y)| x == y).count();
    if common >= 2 {
        // A PCI function (bridge) is a common ancestor: a switch, or a chain of them.
        let up = (a.path.len() - common).max(b.path.len() - common);
        return if up <= ONE_SWITCH { Distance::Pix } else { Distance::Pxb };
    }
    if common == 1 {
        return Distance::Phb;
    }
    // Different root buses: through the CPU, on one NUMA node or across two.
    if a.numa == b.numa {
        Distance::Phb
    } else {
        Distance::Sys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(path: &str, numa: u32) -> PciPlace {
        PciPlace::from_sysfs_path(path, Some(numa)).unwrap()
    }

    #[test]
    fn classes_follow_the_tree() {
        let gpu0 = place(
            "/sys/devices/pci0000:01/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0",
            0,
        );
        let eth1 = place(
            "/sys/devices/pci0000:01/0000:01:00.0/0000:02:00.0/0000:03:02.0/0000:06:00.0",
            0,
        );
        let eth2 = place(
            "/sys/devices/pci0000:07/0000:07:00.0/0000:08:00.0/0000:09:02.0/0000:0c:00.0",
            0,
        );
        let eth3 = place(
            "/sys/devices/pci0000:81/0000:81:00.0/0000:82:00.0/0000:83:02.0/0000:86:00.0",
            1,
        );
        assert_eq!(gpu0.bdf(), "0000:04:00.0");
        assert_eq!(distance(Some(&gpu0), Some(&eth1)), Distance::Pix);
        assert_eq!(distance(Some(&eth1), Some(&gpu0)), Distance::Pix);
        assert_eq!(distance(Some(&gpu0), Some(&eth2)), Distance::Phb);
        assert_eq!(distance(Some(&gpu0), Some(&eth3)), Distance::Sys);
        assert_eq!(distance(Some(&gpu0), None), Distance::Unknown);
        // Two switches below one root port; one host bridge.
        let deep = place(
            "pci0000:01/0000:01:00.0/0000:02:00.0/0000:03:01.0/0000:05:00.0/0000:06:00.0/0000:07:00.0",
            0,
        );
        assert_eq!(distance(Some(&gpu0), Some(&deep)), Distance::Pxb);
        let other_port = place("pci0000:01/0000:01:01.0/0000:0f:00.0", 0);
        assert_eq!(distance(Some(&gpu0), Some(&other_port)), Distance::Phb);
        assert!(Distance::Pix < Distance::Pxb && Distance::Phb < Distance::Sys && Distance::Sys < Distance::Unknown);
        assert!(PciPlace::from_sysfs_path("/sys/devices/virtual/net/lo", None).is_none());
    }
}
