//! Network devices: the interfaces named in `TCPXEMU_IFNAMES`, with real properties.
//!
//! Addresses come from `getifaddrs` (IPv4 preferred, IPv6 otherwise); PCI path and speed from
//! sysfs, as TCPX does. The strings handed to NCCL in the properties must outlive every caller, so
//! each device's C strings are leaked once when the device list is built (once per process).

use std::ffi::{c_char, CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Speed reported when sysfs has none (`lo`) or it is unreadable, in Mbps (TCPX's default).
pub const DEFAULT_SPEED_MBPS: i32 = 10_000;

/// MTU assumed when sysfs has none: TCPX's A3 data NICs run MTU 8244 (4 KiB fragments).
pub const DEFAULT_MTU: u32 = 8244;

/// One device (= one interface).
#[derive(Debug, Clone)]
pub struct Device {
    pub ifname: String,
    pub ip: IpAddr,
    /// IPv6 scope id (link-local addresses); 0 otherwise.
    pub scope_id: u32,
    pub speed_mbps: i32,
    /// The interface's MTU (sizes a devmem fragment: contract #2); [`DEFAULT_MTU`] if unreadable.
    pub mtu: u32,
    /// Leaked, NUL-terminated copy of `ifname`.
    name_c: usize,
    /// Leaked `realpath(/sys/class/net/<if>/device)`; for a virtual interface in unpack mode
    /// the interface's own sysfs path (see [`discover`]); else 0.
    pci_c: usize,
}

impl Device {
    pub fn name_ptr(&self) -> *mut c_char {
        self.name_c as *mut c_char
    }
    pub fn pci_path_ptr(&self) -> *mut c_char {
        self.pci_c as *mut c_char
    }
}

fn leak(s: &str) -> usize {
    CString::new(s).map_or(0, |c| c.into_raw() as usize)
}

/// Finds the devices named in `ifnames`, in that order. Names without an IP address are skipped
/// and reported in the returned warnings.
///
/// `unpack`: the plugin takes CUDA memory. A GPUDirect NIC always has a PCI path, and callers
/// (tcpx-perf, NCCL's topology) refuse GPU memory on a device without one: the real TCPX crashes
/// in `regMr` on `lo`. tcpx-emu reaches GPU memory through pinned staging instead of PCIe
/// peer-to-peer, so any GPU is reachable from its virtual interfaces; it reports their sysfs
/// path (`/sys/devices/virtual/net/lo`), which says "virtual" to whoever reads it.
pub fn discover(ifnames: &[String], unpack: bool) -> (Vec<Device>, Vec<String>) {
    let addrs = interface_addresses();
    let mut devices = Vec::new();
    let mut warns = Vec::new();
    for name in ifnames {
        let mine: Vec<&(String, IpAddr, u32)> = addrs.iter().filter(|a| &a.0 == name).collect();
        let pick = mine.iter().find(|a| a.1.is_ipv4()).or_else(|| mine.first()).copied();
        let Some((_, ip, scope_id)) = pick else {
            warns.push(format!("interface {name} not found or has no IP address, skipped"));
            continue;
        };
        let sys = format!("/sys/class/net/{name}");
        let pci = std::fs::canonicalize(format!("{sys}/device"))
            .or_else(|e| if unpack { std::fs::canonicalize(&sys) } else { Err(e) })
            .ok()
            .and_then(|p| p.to_str().map(leak))
            .unwrap_or(0);
        let speed_mbps = std::fs::read_to_string(format!("{sys}/speed"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|&s| s > 0)
            .unwrap_or(DEFAULT_SPEED_MBPS);
        let mtu = std::fs::read_to_string(format!("{sys}/mtu"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .filter(|&m| m > 0)
            .unwrap_or(DEFAULT_MTU);
        devices.push(Device {
            ifname: name.clone(),
            ip: *ip,
            scope_id: *scope_id,
            speed_mbps,
            mtu,
            name_c: leak(name),
            pci_c: pci,
        });
    }
    (devices, warns)
}

/// All (ifname, address, scope id) triples of the host.
fn interface_addresses() -> Vec<(String, IpAddr, u32)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&raw mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned; its fields are valid until
        // freeifaddrs. `ifa_addr` is checked for NULL and its family decides the cast.
        unsafe {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
                let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
                // getifaddrs allocates each address as the struct its family names, aligned for it.
                #[allow(clippy::cast_ptr_alignment)]
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                        out.push((name, IpAddr::V4(ip), 0));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                        let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                        out.push((name, IpAddr::V6(ip), sin6.sin6_scope_id));
                    }
                    _ => {}
                }
            }
            cur = ifa.ifa_next;
        }
    }
    // SAFETY: `head` came from a successful getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found() {
        let (devs, warns) = discover(&["lo".to_owned(), "no-such-if0".to_owned()], false);
        assert_eq!(devs.len(), 1, "{warns:?}");
        assert_eq!(devs[0].ifname, "lo");
        assert!(devs[0].ip.is_loopback());
        assert_eq!(devs[0].speed_mbps, DEFAULT_SPEED_MBPS);
        assert!(devs[0].pci_path_ptr().is_null());
        assert_eq!(warns.len(), 1);
        // SAFETY: leaked, NUL-terminated, never freed.
        let name = unsafe { CStr::from_ptr(devs[0].name_ptr()) };
        assert_eq!(name.to_str().ok(), Some("lo"));
    }

    #[test]
    fn unpack_mode_gives_virtual_interfaces_their_sysfs_path() {
        let (devs, _) = discover(&["lo".to_owned()], true);
        // SAFETY: leaked, NUL-terminated, never freed.
        let path = unsafe { CStr::from_ptr(devs[0].pci_path_ptr()) };
        assert_eq!(path.to_str().ok(), Some("/sys/devices/virtual/net/lo"));
    }
}
