//! CPU sets: Linux cpulist syntax (`0-51,104-155`), TCPX's per-NIC bindings
//! (`eth1:8-21,112-125;eth2:...`), and pinning the calling thread.

use std::collections::BTreeSet;
use std::fmt;

/// A set of logical CPU numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(into = "String")]
pub struct CpuSet(BTreeSet<usize>);

/// The largest CPU number accepted (the kernel's `cpu_set_t` holds 1024).
const MAX_CPU: usize = 1023;

impl CpuSet {
    /// Parses a cpulist: comma-separated numbers and inclusive ranges; empty means no CPU.
    pub fn parse(text: &str) -> Result<CpuSet, String> {
        let mut set = BTreeSet::new();
        for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("'{part}' in cpulist '{}' is not N or N-M", text.trim());
            let (lo, hi) = if let Some((a, b)) = part.split_once('-') {
                (
                    a.trim().parse::<usize>().map_err(|_| bad())?,
                    b.trim().parse::<usize>().map_err(|_| bad())?,
                )
            } else {
                let n = part.parse::<usize>().map_err(|_| bad())?;
                (n, n)
            };
            if lo > hi || hi > MAX_CPU {
                return Err(bad());
            }
            set.extend(lo..=hi);
        }
        Ok(CpuSet(set))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    #[must_use]
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    #[must_use]
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    #[must_use]
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    /// The CPUs this thread may run on now (`sched_getaffinity`); empty if the call fails.
    pub fn allowed() -> CpuSet {
        // SAFETY: cpu_set_t is plain data; the kernel fills at most its size.
        unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut mask) != 0 {
                return CpuSet::default();
            }
            CpuSet((0..=MAX_CPU).filter(|&c| libc::CPU_ISSET(c, &mask)).collect())
        }
    }

    /// Pins the calling thread to this set (threads it starts later inherit it).
    pub fn pin_current_thread(&self) -> Result<(), String> {
        if self.is_empty() {
            return Err("cannot pin a thread to an empty CPU set".into());
        }
        // SAFETY: as above; CPU_SET stays within the set's size (MAX_CPU).
        let rc = unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            for c in self.iter() {
                libc::CPU_SET(c, &mut mask);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const mask)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "sched_setaffinity({self}): {}",
                std::io::Error::last_os_error()
            ))
        }
    }
}

/// Formats as a compact cpulist: `0-7,36-51`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        f.write_str(&parts.join(","))
    }
}

impl From<CpuSet> for String {
    fn from(set: CpuSet) -> String {
        set.to_string()
    }
}

/// TCPX's `NCCL_GPUDIRECTTCPX_TX_BINDINGS` / `_RX_BINDINGS`: `NIC:cpulist` entries separated by
/// `;`. Returns (NIC name, CPUs) pairs.
pub fn parse_bindings(text: &str) -> Result<Vec<(String, CpuSet)>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (nic, list) = entry
                .split_once(':')
                .ok_or_else(|| format!("binding '{entry}' is not NIC:cpulist"))?;
            Ok((nic.trim().to_string(), CpuSet::parse(list)?))
        })
        .collect()
}

/// The environment variables naming the CPUs of TCPX's helper threads.
pub const BINDING_VARS: [&str; 2] = ["NCCL_GPUDIRECTTCPX_TX_BINDINGS", "NCCL_GPUDIRECTTCPX_RX_BINDINGS"];

/// Every CPU TCPX's helper threads are bound to (both variables, every NIC), with the problems
/// found reading them.
pub fn helper_cpus(get: impl Fn(&str) -> Option<String>) -> (CpuSet, Vec<String>) {
    let mut all = CpuSet::default();
    let mut problems = Vec::new();
    for var in BINDING_VARS {
        if let Some(text) = get(var) {
            match parse_bindings(&text) {
                Ok(entries) => entries.iter().for_each(|(_, c)| all = all.union(c)),
                Err(e) => problems.push(format!("{var}: {e}")),
            }
        }
    }
    (all, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_round_trip() {
        let s = CpuSet::parse("0-51,104-155").unwrap();
        assert_eq!(s.len(), 104);
        assert_eq!(s.to_string(), "0-51,104-155");
        assert_eq!(CpuSet::parse(" 3, 1,2 ,7\n").unwrap().to_string(), "1-3,7");
        assert!(CpuSet::parse("").unwrap().is_empty());
        for bad in ["a", "3-1", "1-", "5000", "1,,x"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_algebra() {
        let node0 = CpuSet::parse("0-51,104-155").unwrap();
        let helpers = CpuSet::parse("8-21,112-125,22-35,126-139").unwrap();
        assert_eq!(node0.difference(&helpers).to_string(), "0-7,36-51,104-111,140-155");
        assert_eq!(
            node0.intersection(&CpuSet::parse("50-60").unwrap()).to_string(),
            "50-51"
        );
    }

    #[test]
    fn tcpx_bindings() {
        let b = parse_bindings("eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;").unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b[2].0, "eth3");
        assert_eq!(b[2].1.to_string(), "60-73,164-177");
        assert!(parse_bindings("eth1=8-21").is_err());
        let (cpus, problems) = helper_cpus(|v| match v {
            "NCCL_GPUDIRECTTCPX_TX_BINDINGS" => Some("eth1:8-21".into()),
            "NCCL_GPUDIRECTTCPX_RX_BINDINGS" => Some("eth1:22-35;bad".into()),
            _ => None,
        });
        assert_eq!(cpus.to_string(), "8-21");
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn pinning_to_an_allowed_cpu_sticks() {
        let allowed = CpuSet::allowed();
        let first = CpuSet(allowed.iter().take(1).collect());
        std::thread::spawn(move || {
            first.pin_current_thread().unwrap();
            assert_eq!(CpuSet::allowed(), first);
        })
        .join()
        .unwrap();
        assert!(CpuSet::default().pin_current_thread().is_err());
    }
}
