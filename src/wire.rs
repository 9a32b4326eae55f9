//! Bytes on the wire: the kernel's per-interface counters and the driver's statistics.
//!
//! A benchmark that counts its own completions only proves that requests completed; a plugin
//! that sends half of every message and reports success passes that. The interface counters
//! (`/sys/class/net/<if>/statistics/{rx,tx}_bytes`) are kept by the kernel, below the plugin:
//! payload that never reached the interface cannot show up there. They include headers,
//! retransmissions and any other traffic on the interface, so they bound the payload from
//! below only: a delta smaller than the payload is a certain shortfall, a larger one proves
//! nothing more. Driver statistics (`ETHTOOL_GSTATS`, what `ethtool -S` prints) add devmem
//! counters such as TCPX's `rx_devmem_pkts`, when the driver has them.
//!
//! `TCPX_PERF_SYSFS_ROOT` replaces `/sys` (tests use a fake tree).

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// One interface's counters at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IfaceCounters {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Sum of the driver's devmem packet counters (e.g. `rx_devmem_pkts`; drops and errors left out);
    /// `None` where the driver has none (or no ethtool statistics at all, as `lo`).
    pub devmem_pkts: Option<u64>,
}

impl IfaceCounters {
    /// `later - self`, counter by counter (wrapping, as the kernel's counters do).
    #[must_use]
    pub fn delta(&self, later: &IfaceCounters) -> IfaceCounters {
        IfaceCounters {
            rx_bytes: later.rx_bytes.wrapping_sub(self.rx_bytes),
            tx_bytes: later.tx_bytes.wrapping_sub(self.tx_bytes),
            devmem_pkts: match (self.devmem_pkts, later.devmem_pkts) {
                (Some(a), Some(b)) => Some(b.wrapping_sub(a)),
                _ => None,
            },
        }
    }
}

fn sysfs_root() -> PathBuf {
    std::env::var_os("TCPX_PERF_SYSFS_ROOT").map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// Reads `name`'s counters; `None` when it has no kernel counters (not an interface here).
/// A fake tree (`TCPX_PERF_SYSFS_ROOT`) that describes a node's PCI layout but holds no counters
/// for an interface leaves them to the real `/sys`: placement rehearsed from a fixture on a rig
/// of real interfaces (launch/cluster.sh) still counts the bytes they carried.
pub fn read(name: &str) -> Option<IfaceCounters> {
    read_with_fallback(&sysfs_root(), Path::new("/sys"), name)
}

fn read_with_fallback(root: &Path, real: &Path, name: &str) -> Option<IfaceCounters> {
    read_at(root, name).or_else(|| if root == real { None } else { read_at(real, name) })
}

fn read_at(root: &Path, name: &str) -> Option<IfaceCounters> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let stats = root.join("class/net").join(name).join("statistics");
    let counter = |file: &str| -> Option<u64> { std::fs::read_to_string(stats.join(file)).ok()?.trim().parse().ok() };
    Some(IfaceCounters {
        rx_bytes: counter("rx_bytes")?,
        tx_bytes: counter("tx_bytes")?,
        devmem_pkts: devmem_packets(name),
    })
}

/// `name`'s link state when it is not up: the kernel's `operstate` (`down`, `lowerlayerdown`,
/// ...), read from the real `/sys` at the moment of asking (a stall names a NIC that died
/// mid-run). `None` when up, `unknown` (as `lo` and many virtual NICs say) or not an interface.
pub fn link_not_up(name: &str) -> Option<String> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let state = std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("operstate")).ok()?;
    let state = state.trim();
    (state != "up" && state != "unknown").then(|| state.to_string())
}

/// Where loopback traffic is counted: the same host's flows cross it whatever address the
/// plugin bound (the kernel routes local addresses over `lo`).
pub fn is_loopback(name: &str) -> bool {
    name == "lo"
}

/// The driver's devmem packet counters (`ethtool -S <if>` names containing "devmem"), summed.
fn devmem_packets(name: &str) -> Option<u64> {
    let stats = ethtool::stats(name)?;
    // Delivered packets only: drivers also count devmem drops and errors under similar names.
    let devmem: Vec<u64> = stats
        .iter()
        .filter(|(n, _)| n.contains("devmem") && n.contains("pkts") && !n.contains("drop") && !n.contains("err"))
        .map(|(_, v)| *v)
        .collect();
    (!devmem.is_empty()).then(|| devmem.iter().sum())
}

/// `SIOCETHTOOL` statistics: names (`ETHTOOL_GSTRINGS` of `ETH_SS_STATS`) and values
/// (`ETHTOOL_GSTATS`), the interface `ethtool -S` uses.
mod ethtool {
    use super::CString;

    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GSTRINGS: u32 = 0x1b;
    const ETHTOOL_GSTATS: u32 = 0x1d;
    const ETHTOOL_GSSET_INFO: u32 = 0x37;
    const ETH_SS_STATS: u32 = 1;
    const ETH_GSTRING_LEN: usize = 32;
    /// More statistics than any driver has: a bound on what a broken reply can make us allocate.
    const MAX_STATS: usize = 1 << 16;

    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }

    /// Sends one ethtool command whose buffer starts with the `cmd` word.
    fn call(fd: libc::c_int, name: &CString, buf: *mut u32) -> bool {
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: buf.cast(),
            _pad: [0; 16],
        };
        for (dst, &src) in req.name.iter_mut().zip(name.as_bytes().iter().take(libc::IFNAMSIZ - 1)) {
            *dst = src as libc::c_char;
        }
        // SAFETY: a valid ifreq whose data points at a command buffer sized for the reply.
        unsafe { libc::ioctl(fd, SIOCETHTOOL, &mut req) == 0 }
    }

    /// `(name, value)` of every statistic the driver exports; `None` when it exports none.
    pub fn stats(ifname: &str) -> Option<Vec<(String, u64)>> {
        let name = CString::new(ifname).ok()?;
        // SAFETY: a plain datagram socket, closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            return None;
        }
        let result = stats_on(fd, &name);
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        result
    }

    fn stats_on(fd: libc::c_int, name: &CString) -> Option<Vec<(String, u64)>> {
        // ethtool_sset_info: cmd, reserved, sset_mask (u64), then one u32 per set in the mask.
        let mut info = [0u32; 6];
        info[0] = ETHTOOL_GSSET_INFO;
        info[2] = 1 << ETH_SS_STATS;
        if !call(fd, name, info.as_mut_ptr()) || info[2] & (1 << ETH_SS_STATS) == 0 {
            return None;
        }
        let n = info[4] as usize;
        if n == 0 || n > MAX_STATS {
            return None;
        }
        // ethtool_gstrings: cmd, string_set, len, then len * 32 bytes.
        let mut strings = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
        strings[0] = ETHTOOL_GSTRINGS;
        strings[1] = ETH_SS_STATS;
        strings[2] = n as u32;
        if !call(fd, name, strings.as_mut_ptr()) {
            return None;
        }
        // ethtool_stats: cmd, n_stats, then n u64 (8-byte aligned at offset 8).
        let mut values = vec![0u64; 1 + n];
        values[0] = u64::from(ETHTOOL_GSTATS);
        if !call(fd, name, values.as_mut_ptr().cast()) {
            return None;
        }
        // SAFETY: `strings` holds n * 32 bytes of names after its 12-byte header.
        let bytes = unsafe { std::slice::from_raw_parts(strings.as_ptr().cast::<u8>().add(12), n * ETH_GSTRING_LEN) };
        Some(
            bytes
                .chunks(ETH_GSTRING_LEN)
                .zip(&values[1..])
                .map(|(raw, &v)| {
                    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                    (String::from_utf8_lossy(&raw[..end]).into_owned(), v)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_counts_what_a_socket_sends_through_it() {
        let Some(before) = read("lo") else {
            return; // no /sys/class/net/lo in this sandbox: nothing to read
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let payload = vec![7u8; 4 << 20];
        let sender = std::thread::spawn(move || {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(&payload).unwrap();
        });
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut conn, &mut got).unwrap();
        sender.join().unwrap();
        let delta = before.delta(&read("lo").unwrap());
        assert_eq!(got.len(), 4 << 20);
        assert!(
            delta.rx_bytes >= 4 << 20,
            "lo saw {} bytes of a 4 MiB transfer",
            delta.rx_bytes
        );
        assert_eq!(delta.devmem_pkts, None, "lo has no devmem counters");
    }

    #[test]
    fn fake_sysfs_tree_and_missing_interfaces() {
        let root = tempfile::tempdir().unwrap();
        let stats = root.path().join("class/net/eth9/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(stats.join("rx_bytes"), "1000\n").unwrap();
        std::fs::write(stats.join("tx_bytes"), "250\n").unwrap();
        let c = read_at(root.path(), "eth9").expect("fake interface read");
        let missing = read_at(root.path(), "mlx5_0");
        assert_eq!((c.rx_bytes, c.tx_bytes), (1000, 250));
        assert!(missing.is_none(), "an InfiniBand device name is no interface");
        let later = IfaceCounters {
            rx_bytes: 5,
            tx_bytes: 300,
            devmem_pkts: None,
        };
        assert_eq!(c.delta(&later).rx_bytes, 5u64.wrapping_sub(1000), "counters wrap");
        // An interface the fake tree lacks is read from the real tree.
        let real = tempfile::tempdir().unwrap();
        let stats = real.path().join("class/net/eth1/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(stats.join("rx_bytes"), "7\n").unwrap();
        std::fs::write(stats.join("tx_bytes"), "8\n").unwrap();
        let got = |name| read_with_fallback(root.path(), real.path(), name).map(|c| (c.rx_bytes, c.tx_bytes));
        assert_eq!(got("eth1"), Some((7, 8)));
        assert_eq!(got("eth9"), Some((1000, 250)), "the fake tree's own counters win");
        assert_eq!(got("eth5"), None);
    }
}

#[cfg(test)]
mod ethtool_tests {
    /// Where the machine has a NIC whose driver exports statistics (virtio, gve, mlx5 do), the
    /// ioctl path reads names and values; `lo` exports none.
    #[test]
    fn driver_statistics_are_read_where_the_driver_has_them() {
        assert!(super::ethtool::stats("lo").is_none());
        assert!(super::ethtool::stats("no-such-if0").is_none());
        let nics: Vec<String> = std::fs::read_dir("/sys/class/net")
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        for nic in nics.iter().filter(|n| n.starts_with("eth") || n.starts_with("en")) {
            if let Some(stats) = super::ethtool::stats(nic) {
                assert!(
                    !stats.is_empty() && stats.iter().all(|(n, _)| !n.is_empty()),
                    "{nic}: {stats:?}"
                );
                eprintln!(
                    "{nic}: {} driver statistics, e.g. {:?}",
                    stats.len(),
                    &stats[..stats.len().min(3)]
                );
            }
        }
    }
}
