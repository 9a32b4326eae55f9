//! A NIC's egress shaper, read from the kernel (rtnetlink, `RTM_GETQDISC`): the root `tbf`
//! qdisc's rate and bucket, the most its NIC's flows can carry. The rig (launch/cluster.sh)
//! shapes every NIC so; a pair figure above it is an error of measurement
//! ([`crate::report::PairResult::above_link`]). Other root qdiscs (mq, fq, htb's classes) set no
//! single rate and read as none.

use serde::{Deserialize, Serialize};

/// A root token bucket: bytes per second, and the bytes it lets through at once when full.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shaper {
    /// The rate, bytes per second.
    pub rate_bytes_per_s: f64,
    /// The bucket: bytes that may pass at line rate after an idle spell.
    pub burst_bytes: f64,
}

impl Shaper {
    /// The root shaper of interface `iface` in this process's network namespace, or None (no
    /// such interface, no tbf at its root, no netlink).
    pub fn of(iface: &str) -> Option<Shaper> {
        let index = ifindex(iface)?;
        let ticks_per_us = psched_ticks_per_us()?;
        let reply = dump_qdiscs()?;
        parse_dump(&reply, index, ticks_per_us)
    }

    /// The fewest seconds `bytes` take through this shaper (a full bucket passes at once).
    pub fn min_seconds(&self, bytes: f64) -> f64 {
        ((bytes - self.burst_bytes) / self.rate_bytes_per_s).max(0.0)
    }
}

fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The packet scheduler's clock: tbf's bucket is in its ticks (`/proc/net/psched`: ticks to
/// microseconds, microseconds to ticks, the clock's resolution; as tc reads it).
fn psched_ticks_per_us() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/net/psched").ok()?;
    let v: Vec<u64> = text
        .split_whitespace()
        .take(3)
        .map(|h| u64::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    let [t2us, us2t, res] = v[..] else { return None };
    if us2t == 0 || t2us == 0 {
        return None;
    }
    // tc's tick_in_usec: t2us / us2t, times the clock factor (resolution / 1e6), 1 when the
    // resolution is 1 GHz's nanoseconds reported as 1e9.
    let clock_factor = if res == 1_000_000_000 { 1.0 } else { res as f64 / 1e6 };
    Some(t2us as f64 / us2t as f64 * clock_factor)
}

const NLMSG_HDR: usize = 16;
const TCMSG: usize = 20;
const RTM_GETQDISC: u16 = 38;
const RTM_NEWQDISC: u16 = 36;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;

/// Every qdisc of the namespace, as the kernel's netlink messages back to back; None when the
/// socket cannot be had or the dump does not end within a second.
fn dump_qdiscs() -> Option<Vec<u8>> {
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        );
        if fd < 0 {
            return None;
        }
        let out = dump_on(fd);
        libc::close(fd);
        out
    }
}

/// # Safety
/// `fd` is an open netlink socket.
unsafe fn dump_on(fd: i32) -> Option<Vec<u8>> {
    let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
    libc::setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        std::ptr::addr_of!(timeout).cast(),
        std::mem::size_of::<libc::timeval>() as u32,
    );
    let mut req = [0u8; NLMSG_HDR + TCMSG];
    req[0..4].copy_from_slice(&((NLMSG_HDR + TCMSG) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    if libc::send(fd, req.as_ptr().cast(), req.len(), 0) != req.len() as isize {
        return None;
    }
    let mut all = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
        if n <= 0 {
            return None;
        }
        let chunk = &buf[..n as usize];
        let mut ended = false;
        for (kind, _) in messages(chunk) {
            ended |= kind == NLMSG_DONE || kind == NLMSG_ERROR;
        }
        all.extend_from_slice(chunk);
        if ended {
            return Some(all);
        }
    }
}

/// (type, payload) of each netlink message in `buf`.
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let hdr = buf.get(at..at + NLMSG_HDR)?;
        let len = u32::from_ne_bytes(hdr[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(hdr[4..6].try_into().ok()?);
        if len < NLMSG_HDR || at + len > buf.len() {
            return None;
        }
        let payload = &buf[at + NLMSG_HDR..at + len];
        at += (len + 3) & !3;
        Some((kind, payload))
    })
}

/// (type, payload) of each route attribute in `buf`.
fn attributes(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let hdr = buf.get(at..at + 4)?;
        let len = u16::from_ne_bytes([hdr[0], hdr[1]]) as usize;
        let kind = u16::from_ne_bytes([hdr[2], hdr[3]]) & 0x3fff;
        if len < 4 || at + len > buf.len() {
            return None;
        }
        let payload = &buf[at + 4..at + len];
        at += (len + 3) & !3;
        Some((kind, payload))
    })
}

/// The root tbf of interface `index` in a qdisc dump.
fn parse_dump(dump: &[u8], index: u32, ticks_per_us: f64) -> Option<Shaper> {
    for (kind, msg) in messages(dump) {
        if kind != RTM_NEWQDISC || msg.len() < TCMSG {
            continue;
        }
        let ifindex = u32::from_ne_bytes(msg[4..8].try_into().ok()?);
        let parent = u32::from_ne_bytes(msg[12..16].try_into().ok()?);
        if ifindex != index || parent != TC_H_ROOT {
            continue;
        }
        let attrs: Vec<(u16, &[u8])> = attributes(&msg[TCMSG..]).collect();
        let is_tbf = attrs.iter().any(|(k, v)| *k == TCA_KIND && v.starts_with(b"tbf\0"));
        let options = attrs.iter().find(|(k, _)| *k == TCA_OPTIONS).map(|(_, v)| *v);
        return match (is_tbf, options) {
            (true, Some(options)) => tbf(options, ticks_per_us),
            _ => None,
        };
    }
    None
}

/// tbf's options: `tc_tbf_qopt` (rate spec of 12 bytes whose last field is the rate in bytes
/// per second, a peak rate spec, limit, buffer in ticks, mtu) and the 64-bit rate above 4 GB/s.
fn tbf(options: &[u8], ticks_per_us: f64) -> Option<Shaper> {
    let mut rate = None;
    let mut buffer_ticks = None;
    for (kind, v) in attributes(options) {
        match kind {
            TCA_TBF_PARMS if v.len() >= 36 => {
                rate = rate.or(Some(f64::from(u32::from_ne_bytes(v[8..12].try_into().ok()?))));
                buffer_ticks = Some(f64::from(u32::from_ne_bytes(v[28..32].try_into().ok()?)));
            }
            TCA_TBF_RATE64 if v.len() >= 8 => {
                rate = Some(u64::from_ne_bytes(v[0..8].try_into().ok()?) as f64);
            }
            _ => {}
        }
    }
    let rate = rate.filter(|r| *r > 0.0)?;
    // The bucket's time at the rate, as tc shows `burst`: ticks -> microseconds -> bytes.
    let burst = buffer_ticks? / ticks_per_us * 1e-6 * rate;
    Some(Shaper {
        rate_bytes_per_s: rate,
        burst_bytes: burst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own tbf, set by tc in a namespace of the test's: the rate and bucket read
    /// back as tc was told (skips where namespaces or tc are not to be had).
    #[test]
    fn a_tbf_reads_back_as_tc_set_it() {
        let ns = format!("tcpxshaper{}", std::process::id());
        let run = |args: &[&str]| {
            std::process::Command::new(args[0])
                .args(&args[1..])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !run(&["ip", "netns", "add", &ns]) {
            eprintln!("skipped: no network namespace here");
            return;
        }
        let ok = run(&[
            "ip", "-n", &ns, "link", "add", "shp0", "type", "veth", "peer", "name", "shp1",
        ]) && run(&["ip", "-n", &ns, "link", "set", "shp0", "up"])
            && run(&[
                "tc", "-n", &ns, "qdisc", "replace", "dev", "shp0", "root", "tbf", "rate", "10mbit", "burst", "131072",
                "limit", "1000000",
            ]);
        let read = if ok {
            // The reader runs in the namespace, as a rank of the rig does.
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(std::env::current_exe().expect("test binary"))
                .args([
                    "--exact",
                    "shaper::tests::read_shp0_here",
                    "--nocapture",
                    "--include-ignored",
                ])
                .output()
                .expect("ip netns exec");
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            String::new()
        };
        run(&["ip", "netns", "del", &ns]);
        assert!(ok, "setting up the namespace's tbf failed");
        let line = read
            .lines()
            .find(|l| l.starts_with("shaper "))
            .unwrap_or_else(|| panic!("{read}"));
        let v: Vec<f64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
        assert_eq!(v[0], 1_250_000.0, "{line}");
        assert!((v[1] - 131_072.0).abs() < 1500.0, "{line}");
    }

    /// Helper for the test above, run inside its namespace.
    #[test]
    #[ignore = "run by a_tbf_reads_back_as_tc_set_it inside its namespace"]
    fn read_shp0_here() {
        let s = Shaper::of("shp0").expect("a root tbf on shp0");
        println!("shaper {} {}", s.rate_bytes_per_s, s.burst_bytes);
    }

    #[test]
    fn no_shaper_on_loopback_or_a_missing_interface() {
        assert_eq!(Shaper::of("no-such-nic0"), None);
        // Loopback has noqueue at its root.
        assert_eq!(Shaper::of("lo"), None);
    }

    #[test]
    fn the_bucket_passes_at_once_then_the_rate() {
        let s = Shaper {
            rate_bytes_per_s: 1e6,
            burst_bytes: 1e5,
        };
        assert_eq!(s.min_seconds(5e4), 0.0);
        assert!((s.min_seconds(1.1e6) - 1.0).abs() < 1e-12);
    }
}
