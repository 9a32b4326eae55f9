//! A node's limits as this machine states them. Each is optional: one that cannot be read (or is
//! unlimited) is not enforced. Files under `/proc` and `/sys` are read through a root directory
//! so tests can stand a fake machine up.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// `CAP_SYS_ADMIN` and `CAP_SYS_RESOURCE` (linux/capability.h): either exempts a process from
/// `RLIMIT_NPROC`, as does a real uid of 0 (kernel/fork.c `copy_process`).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;

/// The limits that bound a job on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// RLIMIT_NOFILE (soft; mpirun's ranks inherit it).
    pub nofile: Option<u64>,
    /// RLIMIT_NPROC (soft), only where the kernel enforces it on this process: every thread of
    /// the user on the node counts.
    pub nproc: Option<u64>,
    /// RLIMIT_MEMLOCK (soft), bytes.
    pub memlock: Option<u64>,
    /// cgroup v2 `pids.max`, the tightest on the path from this process's cgroup to the root.
    pub cgroup_pids: Option<u64>,
    /// cgroup v2 `memory.max`, the tightest on the path, bytes.
    pub cgroup_memory: Option<u64>,
    /// `kernel.threads-max`.
    pub threads_max: Option<u64>,
    /// `kernel.pid_max`: every thread takes a pid.
    pub pid_max: Option<u64>,
    /// Threads that exist on the machine now (`/proc/loadavg`'s fourth field).
    pub threads_in_use: Option<u64>,
    /// `net.ipv4.ip_local_port_range`: (low, high).
    pub port_range: Option<(u64, u64)>,
    /// `MemAvailable`, bytes.
    pub mem_available: Option<u64>,
    /// Device memory of the smallest visible GPU, bytes (None: no GPU or no driver).
    pub gpu_memory: Option<u64>,
    /// `gpu_memory` is not this machine's but assumed (`--plan` without a GPU: A3-high's H100).
    pub gpu_memory_assumed: bool,
}

impl Limits {
    /// This machine's limits (`/proc`, `/sys/fs/cgroup`, getrlimit, CUDA where a driver exists).
    pub fn read() -> Limits {
        let mut l = Limits::from_root(Path::new("/"), &self_rlimit);
        l.nproc = l
            .nproc
            .filter(|_| nproc_enforced(&read(Path::new("/proc/self/status"))));
        l.gpu_memory = match tcpx_gpu::Gpu::probe() {
            Ok(Some(info)) => info.devices.iter().map(|d| d.total_mem).min(),
            _ => None,
        };
        l
    }

    /// The limits under `root` (a machine's `/`), with `rlimit` for the resource limits. NPROC
    /// is taken as enforced and no GPU is known.
    pub fn from_root(root: &Path, rlimit: &dyn Fn(libc::__rlimit_resource_t) -> Option<u64>) -> Limits {
        let proc = |p: &str| read(&root.join("proc").join(p));
        let number = |p: &str| proc(p).and_then(|s| s.trim().parse::<u64>().ok());
        let port_range = proc("sys/net/ipv4/ip_local_port_range").and_then(|s| {
            let mut it = s.split_whitespace().filter_map(|x| x.parse::<u64>().ok());
            Some((it.next()?, it.next()?))
        });
        let cgroup = proc("self/cgroup").and_then(|s| cgroup_dir(root, &s));
        Limits {
            nofile: rlimit(libc::RLIMIT_NOFILE),
            nproc: rlimit(libc::RLIMIT_NPROC),
            memlock: rlimit(libc::RLIMIT_MEMLOCK),
            cgroup_pids: cgroup.as_deref().and_then(|d| tightest(root, d, "pids.max")),
            cgroup_memory: cgroup.as_deref().and_then(|d| tightest(root, d, "memory.max")),
            threads_max: number("sys/kernel/threads-max"),
            pid_max: number("sys/kernel/pid_max"),
            threads_in_use: proc("loadavg").and_then(|s| {
                let field = s.split_whitespace().nth(3)?;
                field.split('/').nth(1)?.parse().ok()
            }),
            port_range,
            mem_available: proc("meminfo").and_then(|s| meminfo_bytes(&s, "MemAvailable:")),
            gpu_memory: None,
            gpu_memory_assumed: false,
        }
    }

    /// Ports in the ephemeral range.
    pub fn ports(&self) -> Option<u64> {
        self.port_range.map(|(lo, hi)| hi.saturating_sub(lo) + 1)
    }
}

/// Threads and open files this process has now (`/proc/self/task`, `/proc/self/fd`; 0 where
/// unreadable), to set beside what the model predicted.
pub fn own_usage() -> (u64, u64) {
    let count = |dir: &str| std::fs::read_dir(dir).map_or(0, |d| d.count() as u64);
    // Reading /proc/self/fd opens a descriptor of its own, listed with the rest.
    (count("/proc/self/task"), count("/proc/self/fd").saturating_sub(1))
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// This process's soft limit; None where unlimited or unreadable.
fn self_rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    // SAFETY: getrlimit fills the struct.
    let r = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(resource, &raw mut r) == 0).then_some(r)
    }?;
    (r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Whether the kernel holds a process with this `/proc/self/status` to RLIMIT_NPROC: not when
/// its real uid is 0 or it has CAP_SYS_RESOURCE or CAP_SYS_ADMIN in its effective set.
pub fn nproc_enforced(status: &Option<String>) -> bool {
    let Some(status) = status else { return true };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let real_root = field("Uid:").and_then(|u| u.split_whitespace().next()) == Some("0");
    let caps = field("CapEff:")
        .and_then(|c| u64::from_str_radix(c, 16).ok())
        .unwrap_or(0);
    let exempt = caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0;
    !(real_root || exempt)
}

/// This process's cgroup v2 directory (the `0::PATH` line), under `root`'s `sys/fs/cgroup`.
fn cgroup_dir(root: &Path, self_cgroup: &str) -> Option<PathBuf> {
    let path = self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(root.join("sys/fs/cgroup").join(path.trim().trim_start_matches('/')))
}

/// The smallest value of `file` from `dir` up to the cgroup root (`max` = none): a parent's
/// limit binds its children.
fn tightest(root: &Path, dir: &Path, file: &str) -> Option<u64> {
    let top = root.join("sys/fs/cgroup");
    let mut at = Some(dir);
    let mut best: Option<u64> = None;
    while let Some(d) = at.filter(|d| d.starts_with(&top)) {
        if let Some(v) = read(&d.join(file)).and_then(|s| s.trim().parse::<u64>().ok()) {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
        at = d.parent();
    }
    best
}

/// A `/proc/meminfo` field in bytes (the file says kB).
fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn a_fake_machine_s_limits_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "proc/sys/kernel/pid_max", "65536\n");
        write(root, "proc/sys/kernel/threads-max", "1000000\n");
        write(root, "proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
        write(root, "proc/loadavg", "0.10 0.20 0.30 2/1234 999\n");
        write(root, "proc/meminfo", "MemTotal: 100 kB\nMemAvailable:   2048 kB\n");
        write(root, "proc/self/cgroup", "0::/job/rank\n");
        write(root, "sys/fs/cgroup/job/pids.max", "4096\n");
        write(root, "sys/fs/cgroup/job/rank/pids.max", "max\n");
        write(root, "sys/fs/cgroup/job/rank/memory.max", "1073741824\n");
        let l = Limits::from_root(root, &|r| (r == libc::RLIMIT_NOFILE).then_some(1024));
        assert_eq!(l.pid_max, Some(65536));
        assert_eq!(l.threads_max, Some(1_000_000));
        assert_eq!(l.ports(), Some(28232));
        assert_eq!(l.threads_in_use, Some(1234));
        assert_eq!(l.mem_available, Some(2048 * 1024));
        assert_eq!(l.cgroup_pids, Some(4096), "the parent's limit binds");
        assert_eq!(l.cgroup_memory, Some(1 << 30));
        assert_eq!((l.nofile, l.nproc, l.memlock), (Some(1024), None, None));
    }

    #[test]
    fn nproc_binds_only_unprivileged_processes() {
        let status =
            |uid: &str, caps: &str| Some(format!("Name: x\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{caps}\n"));
        assert!(nproc_enforced(&status("1000", "0000000000000000")));
        assert!(!nproc_enforced(&status("0", "0000000000000000")), "real uid 0");
        assert!(!nproc_enforced(&status("1000", "0000000001000000")), "CAP_SYS_RESOURCE");
        assert!(!nproc_enforced(&status("1000", "0000000000200000")), "CAP_SYS_ADMIN");
        assert!(nproc_enforced(&status("1000", "0000000000000001")), "CAP_CHOWN alone");
    }
}
