//! Needs against limits: a need above its limit is an error (the job would fail there, so it is
//! refused before any comm exists), one above 80% of it a warning. Each verdict is one line that
//! names the node, the resource, the need, the limit and the fix.

use super::limits::Limits;
use super::plugin::{Kind, PluginModel};
use super::{Memory, NodeNeed, ProcessNeed};
use crate::placement::finding::{Finding, Level};
use serde::Serialize;

/// Above this share of a limit a need is a warning.
const NEAR: f64 = 0.8;
/// The largest `kernel.pid_max` a 64-bit kernel takes (`PID_MAX_LIMIT`, 2^22).
const PID_MAX_LIMIT: u64 = 1 << 22;

/// One need checked against one limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub level: Level,
    /// `open files`, `threads`, `ports on eth1`, ...
    pub resource: String,
    /// `process`, `node` or `GPU`: whose need.
    pub per: &'static str,
    pub need: u64,
    pub limit: u64,
    /// Which limit (`RLIMIT_NOFILE`, `kernel.pid_max`, ...).
    pub limit_name: String,
    pub text: String,
}

impl Verdict {
    pub fn finding(&self) -> Finding {
        Finding {
            level: self.level,
            text: self.text.clone(),
        }
    }
}

/// What is checked: one node's needs (the process that needs most of each, the node's sums).
pub struct Needs<'a> {
    /// Prefixed to every line (`"node0: "`); empty where the report lists hosts itself.
    pub host: &'a str,
    pub process: &'a ProcessNeed,
    /// The node's sums; None where another rank of the node checks them (one line per node).
    pub node: Option<&'a NodeNeed>,
    pub plugin: &'a PluginModel,
    pub memory: Memory,
}

fn level(need: u64, limit: u64) -> Level {
    if need > limit {
        Level::Error
    } else if need as f64 > NEAR * limit as f64 {
        Level::Warning
    } else {
        Level::Ok
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// Every verdict for one node.
pub fn verdicts(n: &Needs, l: &Limits) -> Vec<Verdict> {
    let mut out = Vec::new();
    files(n, l, &mut out);
    if let Some(node) = n.node {
        threads(n, node, l, &mut out);
        ports(n, node, l, &mut out);
        memory(n, node, l, &mut out);
    }
    locked(n, l, &mut out);
    gpu(n, l, &mut out);
    out
}

/// The same as findings.
pub fn findings(n: &Needs, l: &Limits) -> Vec<Finding> {
    verdicts(n, l).iter().map(Verdict::finding).collect()
}

fn files(n: &Needs, l: &Limits, out: &mut Vec<Verdict>) {
    let Some(have) = l.nofile else { return };
    let (need, p) = (n.process.files, n.process);
    let sockets = n.plugin.data_sockets + 1;
    let text = match level(need, have) {
        Level::Error => format!(
            "{}open files limit {have} is below the {need} a rank needs ({} comms x {sockets} sockets + listeners + MPI's): raise `ulimit -n` to {need} (mpirun inherits it), or fewer --channels",
            n.host, p.comms
        ),
        Level::Warning => format!(
            "{}open files limit {have} is near the {need} a rank needs ({} comms x {sockets} sockets + listeners + MPI's): raise `ulimit -n`",
            n.host, p.comms
        ),
        Level::Ok => format!("{}open files limit {have} >= {need} needed", n.host),
    };
    out.push(Verdict {
        level: level(need, have),
        resource: "open files".into(),
        per: "process",
        need,
        limit: have,
        limit_name: "RLIMIT_NOFILE".into(),
        text,
    });
}

/// `4 ranks`, or `512 ranks of 64 nodes on this kernel` where the nodes share one (the rig).
fn ranks_of(node: &NodeNeed) -> String {
    if node.kernel_nodes > 1 {
        format!("{} ranks of {} nodes on this kernel", node.ranks, node.kernel_nodes)
    } else {
        format!("{} ranks", node.ranks)
    }
}

fn threads(n: &Needs, node: &NodeNeed, l: &Limits, out: &mut Vec<Verdict>) {
    let need = node.threads as u64;
    let used = l.threads_in_use.unwrap_or(0);
    // (limit name, room left for the job, the fix)
    let system = |limit: u64| limit.saturating_sub(used);
    let candidates = [
        (
            "kernel.pid_max",
            l.pid_max.map(system),
            l.pid_max
                .map(|_| format!("sysctl -w kernel.pid_max={}", ((need + used) * 2).min(PID_MAX_LIMIT))),
        ),
        (
            "kernel.threads-max",
            l.threads_max.map(system),
            l.threads_max
                .map(|_| format!("sysctl -w kernel.threads-max={}", (need + used) * 2)),
        ),
        (
            "cgroup pids.max",
            l.cgroup_pids,
            Some("raise the job's cgroup pids.max (systemd TasksMax, container pids limit)".into()),
        ),
        ("RLIMIT_NPROC", l.nproc, Some(format!("ulimit -u {}", need * 2))),
    ];
    let Some((name, room, fix)) = candidates
        .into_iter()
        .filter_map(|(name, room, fix)| Some((name, room?, fix?)))
        .min_by_key(|(_, room, _)| *room)
    else {
        return;
    };
    let per = n.process.threads;
    let (in_use, limit_name) = if name.starts_with("kernel") {
        (format!(", {used} in use"), format!("{name} less {used} in use"))
    } else {
        (String::new(), name.to_string())
    };
    let text = match level(need, room) {
        Level::Ok => format!("{}{need} threads for {} fit {name} (room {room})", n.host, ranks_of(node)),
        lv => format!(
            "{}{need} threads for {} (up to {per} each) {} {name} (room {room}{in_use}): {fix}, or fewer ranks per node, --channels, {}",
            n.host,
            ranks_of(node),
            if lv == Level::Error { "exceed" } else { "near" },
            match n.plugin.kind {
                Kind::TcpxEmu => "TCPXEMU_THREADS=shared",
                Kind::Tcpx => "lower NCCL_SOCKET_NTHREADS",
                Kind::Unknown => "fewer comms",
            }
        ),
    };
    out.push(Verdict {
        level: level(need, room),
        resource: "threads".into(),
        per: "node",
        need,
        limit: room,
        limit_name,
        text,
    });
}

fn ports(n: &Needs, node: &NodeNeed, l: &Limits, out: &mut Vec<Verdict>) {
    let (Some(range), Some((lo, hi))) = (l.ports(), l.port_range) else {
        return;
    };
    // tcpx-emu binds connecting sockets with IP_BIND_ADDRESS_NO_PORT (tcpx-emu conn.rs
    // `bind_source`), so the kernel shares their ports between destinations: only listeners hold
    // ports of their own. TCPX binds each socket to its device address before connecting
    // (plugin-abi.md §3.2 listen/connect): every socket is counted.
    let exclusive_connects = n.plugin.kind == Kind::Tcpx;
    for p in &node.ports {
        let total = p.listening + p.connecting;
        let need = if exclusive_connects { total } else { p.listening };
        let lv = match level(need, range) {
            Level::Ok if !exclusive_connects && level(total, range) != Level::Ok => Level::Warning,
            lv => lv,
        };
        let text = match lv {
            Level::Ok => format!(
                "{}{total} local ports on {} fit ip_local_port_range {lo}-{hi}",
                n.host, p.address
            ),
            _ => format!(
                "{}{} sockets listen and {} connect on {} against {range} ports of ip_local_port_range {lo}-{hi}: sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\", or fewer --channels/ranks",
                n.host, p.listening, p.connecting, p.address
            ),
        };
        out.push(Verdict {
            level: lv,
            resource: format!("ports on {}", p.address),
            per: "node",
            need: total,
            limit: range,
            limit_name: "ip_local_port_range".into(),
            text,
        });
    }
}

fn memory(n: &Needs, node: &NodeNeed, l: &Limits, out: &mut Vec<Verdict>) {
    let need = node.host_bytes;
    for (name, limit) in [
        ("MemAvailable", l.mem_available),
        ("cgroup memory.max", l.cgroup_memory),
    ] {
        let Some(have) = limit else { continue };
        let lv = level(need, have);
        let text = match lv {
            Level::Ok => format!("{}host memory {} fits {name} {}", n.host, gb(need), gb(have)),
            _ => format!(
                "{}host memory for {} ({} buffers, pinned {}) {} {name} {}: -e smaller, or fewer ranks per node",
                n.host,
                ranks_of(node),
                gb(need),
                gb(node.pinned_bytes),
                if lv == Level::Error { "exceeds" } else { "nears" },
                gb(have)
            ),
        };
        out.push(Verdict {
            level: lv,
            resource: "host memory".into(),
            per: "node",
            need,
            limit: have,
            limit_name: name.into(),
            text,
        });
    }
}

/// MSG_ZEROCOPY host sends pin their pages against RLIMIT_MEMLOCK (TCPX only).
fn locked(n: &Needs, l: &Limits, out: &mut Vec<Verdict>) {
    if n.plugin.kind == Kind::Tcpx && n.memory == Memory::Host {
        if let Some(have) = l.memlock.filter(|&h| h < 64 << 20) {
            out.push(Verdict {
                level: Level::Warning,
                resource: "locked memory".into(),
                per: "process",
                need: 64 << 20,
                limit: have,
                limit_name: "RLIMIT_MEMLOCK".into(),
                text: format!(
                    "{}locked memory limit {have} B: MSG_ZEROCOPY host sends pin their pages against it; raise `ulimit -l`",
                    n.host
                ),
            });
        }
    }
}

fn gpu(n: &Needs, l: &Limits, out: &mut Vec<Verdict>) {
    let p = n.process;
    if let Some(have) = l.gpu_memory.filter(|_| p.gpu_bytes > 0) {
        let lv = level(p.gpu_bytes, have);
        let (of, assumed) = if l.gpu_memory_assumed {
            ("A3-high's H100 (assumed)", " (assumed: no GPU here)")
        } else {
            ("device memory", "")
        };
        let pooled = n.plugin.bounce_region() > 0;
        let (pool, fix) = if pooled {
            ("buffer + tcpx-emu bounce pool", " or TCPXEMU_BOUNCE_POOL_MB lower")
        } else {
            ("buffer", "")
        };
        out.push(Verdict {
            level: lv,
            resource: "GPU memory".into(),
            per: "GPU",
            need: p.gpu_bytes,
            limit: have,
            limit_name: of.into(),
            text: match lv {
                Level::Ok => format!("{}GPU memory {} fits {}{assumed}", n.host, gb(p.gpu_bytes), gb(have)),
                _ => format!(
                    "{}GPU memory {} ({pool}) {} the {} of one GPU{assumed}: -e smaller{fix}",
                    n.host,
                    gb(p.gpu_bytes),
                    if lv == Level::Error { "exceeds" } else { "nears" },
                    gb(have),
                ),
            },
        });
    }
    let region = n.plugin.bounce_region();
    if region == 0 || p.gpu_recv_comms == 0 {
        return;
    }
    let (need, pool) = (p.gpu_recv_comms as u64 * region, n.plugin.bounce_pool);
    let lv = level(need, pool);
    out.push(Verdict {
        level: lv,
        resource: "bounce pool".into(),
        per: "GPU",
        need,
        limit: pool,
        limit_name: "TCPXEMU_BOUNCE_POOL_MB".into(),
        text: match lv {
            Level::Ok => format!("{}{} CUDA receive comms fit a GPU's bounce pool", n.host, p.gpu_recv_comms),
            _ => format!(
                "{}{} CUDA receive comms x {} MiB on one GPU against tcpx-emu's bounce pool of {} MiB: TCPXEMU_BOUNCE_POOL_MB=4095 (max), fewer --channels, or --mem host",
                n.host,
                p.gpu_recv_comms,
                region >> 20,
                pool >> 20
            ),
        },
    });
}
