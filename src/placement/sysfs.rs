//! What sysfs says about PCI devices, NICs and NUMA nodes.
//!
//! The root is `/sys`, or `TCPX_PERF_SYSFS_ROOT` (a directory laid out like `/sys`: `bus/pci/devices`,
//! `class/net`, `devices`), so tests and machines without the hardware can stand in a fixture.
//! Paths the plugin reports (`pciPath`, always under `/sys/devices`) are read below the same root.

use super::cpus::CpuSet;
use super::pci::PciPlace;
use std::path::{Path, PathBuf};

/// Environment variable overriding the sysfs root.
pub const SYSFS_ENV: &str = "TCPX_PERF_SYSFS_ROOT";

/// One sysfs tree.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

/// What sysfs says about one PCI device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciInfo {
    pub place: Option<PciPlace>,
    pub cpus: Option<CpuSet>,
}

impl Sysfs {
    /// `/sys`, or the directory `TCPX_PERF_SYSFS_ROOT` names.
    pub fn from_env() -> Sysfs {
        Sysfs {
            root: std::env::var_os(SYSFS_ENV).map_or_else(|| PathBuf::from("/sys"), PathBuf::from),
        }
    }

    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, rel: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// A device directory (absolute below this root) as a place: its path below `devices`,
    /// its NUMA node and local CPUs.
    fn device(&self, dir: &Path) -> PciInfo {
        let Ok(real) = dir.canonicalize() else {
            return PciInfo::default();
        };
        let devices = self
            .root
            .join("devices")
            .canonicalize()
            .unwrap_or_else(|_| self.root.join("devices"));
        let Ok(rel) = real.strip_prefix(&devices) else {
            return PciInfo::default();
        };
        let read = |f: &str| std::fs::read_to_string(real.join(f)).ok().map(|s| s.trim().to_string());
        let numa = read("numa_node")
            .and_then(|n| n.parse::<i64>().ok())
            .and_then(|n| u32::try_from(n).ok());
        PciInfo {
            place: PciPlace::from_sysfs_path(&rel.to_string_lossy(), numa),
            cpus: read("local_cpulist")
                .and_then(|l| CpuSet::parse(&l).ok())
                .filter(|c| !c.is_empty()),
        }
    }

    /// A PCI device by bus id (`0000:04:00.0`, any case; CUDA's 8-digit domain accepted).
    pub fn pci(&self, bus_id: &str) -> PciInfo {
        let id = normalize_bus_id(bus_id);
        self.device(&self.root.join("bus/pci/devices").join(id))
    }

    /// A plugin device: its reported `pciPath` (re-rooted here), else `class/net/<name>/device`.
    pub fn nic(&self, name: &str, pci_path: Option<&str>) -> PciInfo {
        if let Some(path) = pci_path {
            let rel = path.strip_prefix("/sys/").unwrap_or(path.trim_start_matches('/'));
            let info = self.device(&self.root.join(rel));
            if info.place.is_some() {
                return info;
            }
        }
        self.device(&self.root.join("class/net").join(name).join("device"))
    }

    /// `class/net/<name>/mtu`.
    pub fn mtu(&self, ifname: &str) -> Option<u32> {
        self.read(Path::new("class/net").join(ifname).join("mtu"))?.parse().ok()
    }

    /// `class/net/<name>/operstate` (RFC 2863: `up`, `down`, `lowerlayerdown`, `unknown`, ...).
    /// A fake tree without it leaves the link state to the real `/sys` (a fixture's PCI layout
    /// over real interfaces, as on launch/cluster.sh's rig).
    pub fn operstate(&self, ifname: &str) -> Option<String> {
        let rel = Path::new("class/net").join(ifname).join("operstate");
        self.read(&rel).or_else(|| {
            let real = Sysfs::at("/sys");
            (real.root != self.root).then(|| real.read(&rel)).flatten()
        })
    }

    /// A NUMA node's CPUs (`devices/system/node/nodeN/cpulist`).
    pub fn node_cpus(&self, node: u32) -> Option<CpuSet> {
        CpuSet::parse(&self.read(format!("devices/system/node/node{node}/cpulist"))?).ok()
    }
}

/// `0000:04:00.0` in sysfs' spelling: lower case, 4-digit domain (CUDA prints 8 digits).
pub fn normalize_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => format!("{:0>4}:{rest}", domain.trim_start_matches('0')),
        _ => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_take_sysfs_spelling() {
        assert_eq!(normalize_bus_id("00000000:0A:00.0"), "0000:0a:00.0");
        assert_eq!(normalize_bus_id("0000:04:00.0"), "0000:04:00.0");
        assert_eq!(normalize_bus_id("00010000:04:00.0"), "10000:04:00.0");
    }

    #[test]
    fn missing_devices_have_no_place() {
        let sys = Sysfs::at("/nonexistent-sysfs");
        assert_eq!(sys.pci("0000:04:00.0"), PciInfo::default());
        assert_eq!(
            sys.nic("eth1", Some("/sys/devices/pci0000:01/0000:01:00.0")),
            PciInfo::default()
        );
        assert!(sys.mtu("eth1").is_none());
    }
}
