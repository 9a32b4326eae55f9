//! Preflight checks: what would make TCPX fail or run slow, found before any data moves.
//!
//! Each check yields findings (error / warning / ok, one line each). The checks here are local
//! to a rank and cheap (environment, sysfs, a few `stat`s and ioctls): every run does them and
//! prints what is not ok in the header; `--dry-run` prints all of them. Checks that compare
//! ranks (same plugin, same TCPX settings everywhere) are in [`super::dry_run`]; the job's needs
//! (files, threads, ports, memory) against the node's limits in [`super::resources`].

use super::pci::Distance;
use super::{Gpu, Nic};
use std::path::Path;

/// Findings have their own module (devmem's post-run check makes them too); named here as well,
/// where the rest of the crate has always found them.
pub use super::finding::{Finding, Level};

/// The socket count and the TCPX test belong to the plugin's resource model; named here too.
pub use super::resources::plugin::{data_sockets, is_real_tcpx};

/// What the checks look at on this rank.
pub struct Local<'a> {
    pub plugin_name: &'a str,
    /// This rank's endpoints: (GPU, its first channel's NIC, their distance).
    pub endpoints: Vec<(&'a Gpu, &'a Nic, Distance)>,
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// Every local check.
pub fn local(ctx: &Local) -> Vec<Finding> {
    let mut out = Vec::new();
    let real = is_real_tcpx(ctx.plugin_name);
    let tcpx_like = crate::contracts::is_tcpx_like(ctx.plugin_name);
    placement(ctx, real, &mut out);
    if tcpx_like {
        tcpx_settings(ctx, real, &mut out);
    }
    if real {
        rxdm(ctx, &mut out);
        let mut seen = Vec::new();
        for (_, nic, _) in &ctx.endpoints {
            if !seen.contains(&nic.dev) {
                seen.push(nic.dev);
                devmem_counter(nic, &mut out);
            }
        }
    }
    let mut seen = Vec::new();
    for (_, nic, _) in &ctx.endpoints {
        if !seen.contains(&nic.dev) {
            seen.push(nic.dev);
            mtu(nic, real, &mut out);
            link(nic, &mut out);
        }
    }
    out
}

/// The CPUs the launcher left this rank: each endpoint runs its progress thread, and the plugin
/// its helper threads (`helpers`, as the resource model counts them). Open MPI binds every rank
/// to one core when it starts two ranks or fewer (`--bind-to core`), which puts all of them on
/// that core.
pub fn affinity(allowed: &super::cpus::CpuSet, endpoints: usize, helpers: usize) -> Vec<Finding> {
    let threads = endpoints + helpers;
    if allowed.is_empty() {
        return Vec::new();
    }
    if allowed.len() < threads.min(2 * endpoints) {
        vec![Finding::warning(format!(
            "this rank may run on {} CPU(s) ({allowed}) for {threads} busy threads (progress and plugin helpers): the launcher bound it (Open MPI binds to a core for 2 ranks or fewer); use mpirun --bind-to none or --bind-to numa",
            allowed.len()
        ))]
    } else {
        vec![Finding::ok(format!(
            "{} CPU(s) allowed for {threads} busy threads",
            allowed.len()
        ))]
    }
}

#[cfg(test)]
mod affinity_tests {
    use super::super::cpus::CpuSet;
    use super::*;

    #[test]
    fn a_rank_bound_to_one_core_is_a_warning() {
        let one = CpuSet::parse("3").unwrap();
        let w = affinity(&one, 1, 2);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].level, Level::Warning);
        assert!(w[0].text.contains("--bind-to none"), "{}", w[0].text);
        let many = CpuSet::parse("0-15").unwrap();
        assert_eq!(affinity(&many, 1, 2)[0].level, Level::Ok);
    }
}

fn numa(n: Option<u32>) -> String {
    n.map_or("?".into(), |n| n.to_string())
}

fn placement(ctx: &Local, real: bool, out: &mut Vec<Finding>) {
    for (gpu, nic, distance) in &ctx.endpoints {
        let pci = gpu.pci.as_deref().unwrap_or("bus id unknown");
        let gpu_numa = gpu.place.as_ref().and_then(|p| p.numa);
        let nic_numa = nic.place.as_ref().and_then(|p| p.numa);
        let line = format!(
            "GPU {} ({pci}, NUMA {}) uses {} (NUMA {}): {distance}",
            gpu.index,
            numa(gpu_numa),
            nic.name,
            numa(nic_numa)
        );
        out.push(match distance {
            Distance::Sys if real => Finding::error(format!(
                "{line}: the NIC is on the other NUMA node, where TCPX's devmem receive cannot reach the GPU (\"rx no cmsg\"); drop --net-dev or pick the GPU's NIC"
            )),
            Distance::Phb if real => Finding::warning(format!(
                "{line}: through the host bridge; TCPX's flow steering expects the NIC on the GPU's PCIe switch"
            )),
            Distance::Unknown if real => {
                Finding::warning(format!("{line}: PCI paths unknown, so the NIC's reach is unverified"))
            }
            Distance::Sys if gpu_numa.is_some() && gpu_numa != nic_numa => {
                Finding::warning(format!("{line}: GPU and NIC are on different NUMA nodes"))
            }
            _ => Finding::ok(line),
        });
    }
}

fn tcpx_settings(ctx: &Local, real: bool, out: &mut Vec<Finding>) {
    let env = ctx.env;
    match crate::contracts::dynamic_chunk_problem(env(crate::contracts::DYNAMIC_CHUNK_ENV).as_deref()) {
        Some(problem) => out.push(Finding::error(problem)),
        None => out.push(Finding::ok(format!(
            "{}={}",
            crate::contracts::DYNAMIC_CHUNK_ENV,
            env(crate::contracts::DYNAMIC_CHUNK_ENV).unwrap_or_default()
        ))),
    }
    match data_sockets(env) {
        Ok(n) => out.push(Finding::ok(format!("{n} data socket(s) per comm"))),
        Err(e) => out.push(Finding::error(e)),
    }
    if !real {
        return;
    }
    match env("NCCL_GPUDIRECTTCPX_FLOW_STEERING_STRATEGY").as_deref().map(str::trim) {
        None | Some("3") => {}
        Some(v) => out.push(Finding::error(format!(
            "NCCL_GPUDIRECTTCPX_FLOW_STEERING_STRATEGY={v}: TCPX's init refuses every strategy but 3 (UNIX_CLIENT); unset it"
        ))),
    }
    if env("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME").is_none() {
        out.push(Finding::warning(
            "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME is unset: TCPX picks interfaces itself (GKE: eth1,eth2,eth3,eth4)",
        ));
    }
    if env("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS").is_none() {
        out.push(Finding::warning(
            "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS is unset: every accept sleeps 5 s (GKE: 50000 or 1000000)",
        ));
    }
    for var in super::cpus::BINDING_VARS {
        match env(var) {
            None => out.push(Finding::warning(format!(
                "{var} is unset: TCPX's helper threads may run on any CPU of the NIC's NUMA node, the endpoint threads' too"
            ))),
            Some(text) => match super::cpus::parse_bindings(&text) {
                Err(e) => out.push(Finding::error(format!("{var}: {e}"))),
                Ok(entries) => {
                    for (_, nic, _) in &ctx.endpoints {
                        if !entries.iter().any(|(n, _)| *n == nic.name) {
                            out.push(Finding::warning(format!("{var} has no entry for {}", nic.name)));
                        }
                    }
                }
            },
        }
    }
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// RxDM's Unix sockets (tcpx-contracts.md #14): without them TCPX `exit(1)`s inside accept.
fn rxdm(ctx: &Local, out: &mut Vec<Finding>) {
    let prefix = (ctx.env)("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX").unwrap_or_else(|| "/tmp".into());
    let rule = Path::new(&prefix).join("rx_rule_manager");
    out.push(if is_socket(&rule) {
        Finding::ok(format!("RxDM socket {}", rule.display()))
    } else {
        Finding::error(format!(
            "RxDM socket {} is missing: TCPX cannot program flow steering and exits inside accept; start the receive-datapath-manager (tcpgpudmarxd) or fix NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX",
            rule.display()
        ))
    });
    if (ctx.env)("NCCL_TCPX_RXMEM_IMPORT_USE_GPU_PCI_CLIENT").is_some_and(|v| v.trim() == "0") {
        return;
    }
    for (gpu, _, _) in &ctx.endpoints {
        let Some(pci) = &gpu.pci else { continue };
        let fd = Path::new(&prefix).join(format!("get_gpu_fd_{pci}"));
        if !is_socket(&fd) {
            out.push(Finding::error(format!(
                "RxDM socket {} is missing: TCPX cannot import GPU {}'s receive buffer and exits inside accept",
                fd.display(),
                gpu.index
            )));
        }
    }
}

fn devmem_counter(nic: &Nic, out: &mut Vec<Finding>) {
    out.push(match super::devmem::devmem_packets(&nic.name) {
        Ok(Some(n)) => Finding::ok(format!("{}: devmem counter readable ({n} packets so far)", nic.name)),
        Ok(None) => Finding::warning(format!(
            "{}: the driver has no rx_devmem_pkts counter, so devmem delivery cannot be verified after the run",
            nic.name
        )),
        Err(e) => Finding::warning(format!("devmem counter unreadable: {e}")),
    });
}

fn mtu(nic: &Nic, real: bool, out: &mut Vec<Finding>) {
    match nic.mtu {
        Some(m) if real && m < 8244 => out.push(Finding::warning(format!(
            "{} MTU {m}: devmem fragments are smaller than 4 KiB (TCPX's 2048 fragments per receive then hold less than 4 MiB; GCP's data NICs use 8244)",
            nic.name
        ))),
        Some(m) => out.push(Finding::ok(format!("{} MTU {m}", nic.name))),
        None => {}
    }
}

/// A NIC whose link is down (cable pulled, switch port off, interface set down) keeps its
/// address, so the plugin still lists it; every connection over it would then hang until the
/// deadline. `unknown` is what virtual interfaces without carrier tracking (`lo`) report.
fn link(nic: &Nic, out: &mut Vec<Finding>) {
    match nic.operstate.as_deref() {
        None | Some("up" | "unknown") => {}
        Some(state) => out.push(Finding::error(format!(
            "{} link is {state}: no data can cross it, and every peer that connects to it waits until -T; bring the link up, or leave {} out of the plugin's interfaces",
            nic.name, nic.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::pci::PciPlace;

    fn gpu() -> Gpu {
        Gpu {
            index: 0,
            pci: Some("0000:04:00.0".into()),
            place: PciPlace::from_sysfs_path(
                "pci0000:01/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0",
                Some(0),
            ),
            cpus: None,
        }
    }

    fn nic(name: &str, numa: u32) -> Nic {
        Nic {
            name: name.into(),
            place: PciPlace::from_sysfs_path("pci0000:81/0000:81:00.0/0000:86:00.0", Some(numa)),
            mtu: Some(1460),
            ..Nic::default()
        }
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn errors(f: &[Finding]) -> Vec<&str> {
        f.iter()
            .filter(|f| f.level == Level::Error)
            .map(|f| f.text.as_str())
            .collect()
    }

    #[test]
    fn missing_rxdm_socket_is_an_error_for_tcpx_only() {
        let dir = std::env::temp_dir().join(format!("tcpx-perf-rxdm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.display().to_string();
        let env = move |k: &str| match k {
            "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX" => Some(prefix.clone()),
            "NCCL_DYNAMIC_CHUNK_SIZE" => Some("524288".into()),
            _ => None,
        };
        let (g, n) = (gpu(), nic("eth1", 0));
        let ctx = |name| Local {
            plugin_name: name,
            endpoints: vec![(&g, &n, Distance::Pix)],
            env: &env,
        };
        let f = local(&ctx("GPUDirectTCPX_v7"));
        let errs = errors(&f);
        assert!(errs.iter().any(|e| e.contains("rx_rule_manager is missing")), "{f:?}");
        assert!(
            errs.iter().any(|e| e.contains("get_gpu_fd_0000:04:00.0 is missing")),
            "{f:?}"
        );
        // With the sockets present (real Unix sockets), no RxDM error remains.
        let _l1 = std::os::unix::net::UnixListener::bind(dir.join("rx_rule_manager")).unwrap();
        let _l2 = std::os::unix::net::UnixListener::bind(dir.join("get_gpu_fd_0000:04:00.0")).unwrap();
        let f = local(&ctx("GPUDirectTCPX_v7"));
        assert!(errors(&f).iter().all(|e| !e.contains("RxDM")), "{f:?}");
        assert!(f.iter().any(|x| x.level == Level::Ok && x.text.contains("RxDM socket")));
        // tcpx-emu needs no RxDM.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(local(&ctx("tcpx-emu")).iter().all(|x| !x.text.contains("RxDM")));
    }

    #[test]
    fn tcpx_settings_and_cross_numa_nics() {
        let env = env_of(&[("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_SOCKET_NTHREADS", "4")]);
        let (g, far) = (gpu(), nic("eth3", 1));
        let ctx = Local {
            plugin_name: "GPUDirectTCPX_v7",
            endpoints: vec![(&g, &far, Distance::Sys)],
            env: &env,
        };
        let f = local(&ctx);
        let errs = errors(&f);
        assert!(
            errs.iter().any(|e| e.contains("NCCL_DYNAMIC_CHUNK_SIZE is unset")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("= 16") && e.contains("1 to 8")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.contains("uses eth3 (NUMA 1): SYS") && e.contains("rx no cmsg")),
            "{errs:?}"
        );
        assert!(f
            .iter()
            .any(|x| x.level == Level::Warning && x.text.contains("eth3 MTU 1460")));
        // The same placement over tcpx-emu is only a NUMA warning.
        let emu = Local {
            plugin_name: "tcpx-emu",
            ..ctx
        };
        let f = local(&emu);
        assert!(
            f.iter()
                .any(|x| x.level == Level::Warning && x.text.contains("different NUMA nodes")),
            "{f:?}"
        );
    }

    #[test]
    fn a_nic_whose_link_is_down_is_an_error() {
        let env = env_of(&[]);
        let g = gpu();
        let state = |s: Option<&str>| Nic {
            operstate: s.map(String::from),
            ..nic("eth2", 0)
        };
        let check = |n: &Nic| {
            errors(&local(&Local {
                plugin_name: "tcpx-emu",
                endpoints: vec![(&g, n, Distance::Unknown)],
                env: &env,
            }))
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
        };
        let down = check(&state(Some("lowerlayerdown")));
        assert!(
            down.iter().any(|e| e.starts_with("eth2 link is lowerlayerdown")),
            "{down:?}"
        );
        for fine in [Some("up"), Some("unknown"), None] {
            assert!(check(&state(fine)).iter().all(|e| !e.contains("link is")), "{fine:?}");
        }
    }
}
