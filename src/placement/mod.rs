//! Where each endpoint runs: the NIC (plugin device) its GPU uses and the CPUs its thread runs on.
//!
//! NICs are chosen as NCCL chooses them: by PCIe distance between the GPU and each plugin device
//! (PIX < PXB < PHB < SYS, [`pci`]), from the GPU's bus id (CUDA, or `TCPX_PERF_GPU_PCI`) and the
//! device's `pciPath` (its properties), both located in sysfs ([`sysfs`]). GPUs that tie are spread
//! evenly over the NICs at their distance. Where a path is unknown (tcpx-emu on `lo`, a container
//! without sysfs) the old arithmetic applies, with a note. `--net-dev` overrides per GPU.
//!
//! The endpoint's thread is pinned to its GPU's local CPUs (its NIC's where the GPU has none),
//! less the CPUs TCPX's helper threads are bound to ([`cpus`]); `--cpu-bind` overrides.

pub mod cpus;
pub mod devmem;
pub mod dry_run;
pub mod finding;
pub mod fixture;
pub mod pci;
pub mod preflight;
pub mod rank;
pub mod resources;
pub mod sysfs;

use cpus::CpuSet;
use pci::{Distance, PciPlace};
use serde::Serialize;
use sysfs::Sysfs;

/// Environment variable standing in for the GPUs' CUDA bus ids (comma list in CUDA order).
pub const GPU_PCI_ENV: &str = "TCPX_PERF_GPU_PCI";

/// Where endpoints run (`--channels --spread-channels --net-dev --cpu-bind`), typed once from
/// the flags by `crate::run`.
#[derive(Debug, Clone)]
pub struct PlacementSettings {
    /// Communicators per peer.
    pub channels: usize,
    /// Spread an endpoint's channels over the devices as close to its GPU as its own.
    pub spread_channels: bool,
    /// The plugin device per GPU; `None`: by PCIe distance.
    pub net_dev: Option<NetDevSpec>,
    pub cpu_bind: CpuBind,
}

/// One entry of `--net-dev`: a plugin device index or name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum NetDevToken {
    Index(usize),
    Name(String),
}

/// `--net-dev`: one device for every GPU, or one per GPU index on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetDevSpec(pub Vec<NetDevToken>);

impl std::str::FromStr for NetDevSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let tokens: Vec<NetDevToken> = s
            .split(',')
            .map(str::trim)
            .map(|t| match t.parse::<usize>() {
                Ok(i) => Ok(NetDevToken::Index(i)),
                Err(_) if !t.is_empty() => Ok(NetDevToken::Name(t.to_string())),
                Err(_) => Err(format!(
                    "'{s}' has an empty entry: give device indices or names, e.g. 0,0,1,1 or eth1,eth2"
                )),
            })
            .collect::<Result<_, _>>()?;
        Ok(NetDevSpec(tokens))
    }
}

impl std::fmt::Display for NetDevSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|t| match t {
                NetDevToken::Index(i) => i.to_string(),
                NetDevToken::Name(n) => n.clone(),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// `--cpu-bind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum CpuBind {
    /// The GPU's (else the NIC's) local CPUs less TCPX's helper CPUs; unpinned where unknown.
    Auto,
    /// No pinning.
    None,
    /// One cpulist for every endpoint, or one per GPU index on the node.
    Lists(Vec<CpuSet>),
}

impl std::str::FromStr for CpuBind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(CpuBind::Auto),
            "none" => Ok(CpuBind::None),
            lists => {
                let sets = lists.split(';').map(CpuSet::parse).collect::<Result<Vec<_>, _>>()?;
                if sets.iter().any(CpuSet::is_empty) {
                    return Err(format!(
                        "'{s}' has an empty CPU list: use auto, none, or e.g. 0-7 or '0-7;52-59'"
                    ));
                }
                Ok(CpuBind::Lists(sets))
            }
        }
    }
}

/// A GPU of the node as sysfs sees it.
#[derive(Debug, Clone, Default)]
pub struct Gpu {
    pub index: usize,
    pub pci: Option<String>,
    pub place: Option<PciPlace>,
    pub cpus: Option<CpuSet>,
}

/// A plugin device as its properties and sysfs describe it.
#[derive(Debug, Clone, Default)]
pub struct Nic {
    pub dev: usize,
    pub name: String,
    pub pci_path: Option<String>,
    pub place: Option<PciPlace>,
    pub cpus: Option<CpuSet>,
    pub speed_mbps: i32,
    pub mtu: Option<u32>,
    /// The interface's `operstate` (None where sysfs has no interface by that name).
    pub operstate: Option<String>,
}

/// How a GPU's NIC was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// Closest by PCIe topology.
    Topology,
    /// `--net-dev`.
    Explicit,
    /// GPU index spread over the devices in order (paths unknown).
    Arithmetic,
}

/// A GPU's NICs: one per channel (all the same unless channels are spread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNics {
    pub gpu: usize,
    pub nics: Vec<usize>,
    pub distance: Distance,
    pub choice: Choice,
}

/// Chooses the NICs of every GPU of a node (`gpus` in index order). Returns the choices and
/// notes for the header.
pub fn choose_nics(
    gpus: &[Gpu],
    nics: &[Nic],
    spec: Option<&NetDevSpec>,
    channels: usize,
    spread_channels: bool,
) -> Result<(Vec<GpuNics>, Vec<String>), String> {
    if nics.is_empty() {
        return Err("the plugin reports no devices; check its interface settings".into());
    }
    let dist = |g: &Gpu, n: &Nic| pci::distance(g.place.as_ref(), n.place.as_ref());
    if let Some(spec) = spec {
        let devs = resolve_spec(spec, nics, gpus)?;
        let out = gpus
            .iter()
            .zip(devs)
            .map(|(g, d)| GpuNics {
                gpu: g.index,
                nics: vec![d; channels],
                distance: dist(g, &nics[d]),
                choice: Choice::Explicit,
            })
            .collect();
        return Ok((out, Vec::new()));
    }
    let unknown: Vec<String> = gpus
        .iter()
        .filter(|g| nics.iter().all(|n| dist(g, n) == Distance::Unknown))
        .map(|g| g.index.to_string())
        .collect();
    if !unknown.is_empty() {
        let why = if nics.iter().all(|n| n.place.is_none()) {
            "no plugin device has a PCI path"
        } else {
            "the GPUs' PCI paths are unknown"
        };
        let out = gpus
            .iter()
            .map(|g| GpuNics {
                gpu: g.index,
                nics: vec![arithmetic_nic(g.index, gpus.len(), nics.len()); channels],
                distance: Distance::Unknown,
                choice: Choice::Arithmetic,
            })
            .collect();
        let note = format!(
            "NICs chosen by GPU index ({why}; GPU(s) {}): set TCPX_PERF_SYSFS_ROOT/TCPX_PERF_GPU_PCI or --net-dev to place by topology",
            unknown.join(",")
        );
        return Ok((out, vec![note]));
    }
    let mut load = vec![0usize; nics.len()];
    let mut out = Vec::with_capacity(gpus.len());
    for g in gpus {
        let best = nics.iter().map(|n| dist(g, n)).min().unwrap_or(Distance::Unknown);
        let ties: Vec<usize> = (0..nics.len()).filter(|&d| dist(g, &nics[d]) == best).collect();
        let first = ties
            .iter()
            .position(|&d| load[d] == ties.iter().map(|&t| load[t]).min().unwrap_or(0))
            .unwrap_or(0);
        load[ties[first]] += 1;
        let per_channel = (0..channels)
            .map(|c| {
                if spread_channels {
                    ties[(first + c) % ties.len()]
                } else {
                    ties[first]
                }
            })
            .collect();
        out.push(GpuNics {
            gpu: g.index,
            nics: per_channel,
            distance: best,
            choice: Choice::Topology,
        });
    }
    Ok((out, Vec::new()))
}

/// The pre-topology rule: GPUs spread evenly over the devices in order (modulo when there are
/// more devices than GPUs).
pub fn arithmetic_nic(gpu: usize, gpus_on_node: usize, devices: usize) -> usize {
    let gpus_on_node = gpus_on_node.max(1);
    if gpus_on_node >= devices {
        (gpu * devices / gpus_on_node).min(devices - 1)
    } else {
        gpu % devices
    }
}

fn resolve_spec(spec: &NetDevSpec, nics: &[Nic], gpus: &[Gpu]) -> Result<Vec<usize>, String> {
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    let devs = spec
        .0
        .iter()
        .map(|t| match t {
            NetDevToken::Index(i) if *i < nics.len() => Ok(*i),
            NetDevToken::Index(i) => Err(format!(
                "--net-dev {i} does not exist: the plugin has {} device(s) ({})",
                nics.len(),
                names.join(",")
            )),
            NetDevToken::Name(n) => names.iter().position(|x| x == n).ok_or_else(|| {
                format!(
                    "--net-dev {n}: the plugin has no such device (it has {})",
                    names.join(",")
                )
            }),
        })
        .collect::<Result<Vec<usize>, String>>()?;
    gpus.iter()
        .map(|g| match devs.as_slice() {
            [one] => Ok(*one),
            list => list.get(g.index).copied().ok_or_else(|| {
                format!(
                    "--net-dev {spec} names {} device(s) but this node drives GPU {}: give one device, or one per GPU index 0..{}",
                    list.len(),
                    g.index,
                    g.index
                )
            }),
        })
        .collect()
}

/// The CPUs an endpoint's thread is pinned to, and why (None = left unpinned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    pub cpus: Option<CpuSet>,
    pub why: String,
}

/// Chooses an endpoint's CPUs. `helpers`: TCPX's helper-thread CPUs; `allowed`: this process's
/// affinity (empty = unknown, no restriction).
pub fn choose_cpus(
    bind: &CpuBind,
    gpu: &Gpu,
    nic: &Nic,
    helpers: &CpuSet,
    allowed: &CpuSet,
) -> Result<Binding, String> {
    let within = |s: &CpuSet| {
        if allowed.is_empty() {
            s.clone()
        } else {
            s.intersection(allowed)
        }
    };
    match bind {
        CpuBind::None => Ok(Binding {
            cpus: None,
            why: "--cpu-bind none".into(),
        }),
        CpuBind::Lists(lists) => {
            let list = match lists.as_slice() {
                [one] => one,
                many => many.get(gpu.index).ok_or_else(|| {
                    format!(
                        "--cpu-bind has {} list(s) but this node drives GPU {}: give one list, or one per GPU index",
                        many.len(),
                        gpu.index
                    )
                })?,
            };
            let cpus = within(list);
            if cpus.is_empty() {
                return Err(format!(
                    "--cpu-bind {list}: none of these CPUs is allowed for this process (allowed: {allowed})"
                ));
            }
            Ok(Binding {
                cpus: Some(cpus),
                why: "--cpu-bind".into(),
            })
        }
        CpuBind::Auto => {
            let (local, whose) = match (&gpu.cpus, &nic.cpus) {
                (Some(c), _) => (c, format!("GPU {} local CPUs", gpu.index)),
                (None, Some(c)) => (c, format!("{} local CPUs", nic.name)),
                (None, None) => {
                    return Ok(Binding {
                        cpus: None,
                        why: "not pinned: neither the GPU nor the NIC has local CPUs in sysfs".into(),
                    })
                }
            };
            let local = within(local);
            if local.is_empty() {
                return Ok(Binding {
                    cpus: None,
                    why: format!("not pinned: the {whose} are outside this process's affinity ({allowed})"),
                });
            }
            let free = local.difference(helpers);
            Ok(if free.is_empty() {
                Binding {
                    cpus: Some(local),
                    why: format!("{whose} (all of them are TCPX helper CPUs)"),
                }
            } else if helpers.is_empty() {
                Binding {
                    cpus: Some(free),
                    why: whose,
                }
            } else {
                Binding {
                    cpus: Some(free),
                    why: format!("{whose} less TCPX helper CPUs"),
                }
            })
        }
    }
}

/// The GPUs' bus ids in CUDA order: `TCPX_PERF_GPU_PCI` where set, else CUDA's; empty without
/// either.
pub fn gpu_bus_ids() -> Vec<String> {
    if let Ok(list) = std::env::var(GPU_PCI_ENV) {
        return list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    match tcpx_gpu::Gpu::probe() {
        Ok(Some(info)) => info.devices.iter().map(|d| d.pci_bus_id.clone()).collect(),
        _ => Vec::new(),
    }
}

/// The node's GPUs (`indices`) located in sysfs.
pub fn locate_gpus(sys: &Sysfs, indices: &[usize], bus_ids: &[String]) -> Vec<Gpu> {
    indices
        .iter()
        .map(|&index| {
            let pci = bus_ids.get(index).map(|b| sysfs::normalize_bus_id(b));
            let info = pci.as_deref().map(|b| sys.pci(b)).unwrap_or_default();
            Gpu {
                index,
                pci,
                place: info.place,
                cpus: info.cpus,
            }
        })
        .collect()
}

/// The plugin's devices located in sysfs.
pub fn locate_nics(sys: &Sysfs, props: &[nccl_net::Properties]) -> Vec<Nic> {
    props
        .iter()
        .enumerate()
        .map(|(dev, p)| {
            let info = sys.nic(&p.name, p.pci_path.as_deref());
            Nic {
                dev,
                name: p.name.clone(),
                pci_path: p.pci_path.clone(),
                place: info.place,
                cpus: info.cpus,
                speed_mbps: p.speed_mbps,
                mtu: sys.mtu(&p.name),
                operstate: sys.operstate(&p.name),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
