//! One rank's placement: its endpoints' NICs and CPUs, its preflight findings, and the report
//! rows it contributes to the node tables.

use super::cpus::{self, CpuSet};
use super::dry_run::{RankReport, Row};
use super::preflight::{self, Finding, Local};
use super::resources::{self, check, limits::Limits, JobShape, Memory, PluginModel};
use super::sysfs::Sysfs;
use super::{choose_cpus, choose_nics, locate_gpus, locate_nics, CpuBind, NetDevSpec};
use crate::plan::Lanes;
use crate::topology::Topology;

/// What the engine needs per local endpoint.
#[derive(Debug, Clone)]
pub struct EndpointPlace {
    /// Plugin device per channel.
    pub net_devs: Vec<usize>,
    /// CPUs to pin the endpoint's thread to; None = unpinned.
    pub cpus: Option<CpuSet>,
}

/// The inputs of [`plan`].
pub struct RankInput<'a> {
    pub topo: &'a Topology,
    pub rank: usize,
    pub connections: &'a [(usize, usize)],
    pub channels: usize,
    pub spread_channels: bool,
    pub net_dev: Option<&'a NetDevSpec>,
    pub cpu_bind: &'a CpuBind,
    pub props: &'a [nccl_net::Properties],
    pub plugin_name: &'a str,
    pub plugin_sha256: &'a str,
    pub memory: Memory,
    /// The largest buffer of one endpoint over the sweep.
    pub buffer_len: u64,
    /// The plan copies blocks locally (host memory then starts copy threads).
    pub local_copies: bool,
    /// Every endpoint's peers in each phase (every comm at once, or with `--connect rounds`
    /// one round's), the job's: a rank's node sums need its node's other ranks'.
    pub peers: &'a resources::Counted,
    /// Connects each endpoint has under way at once (the engine's).
    pub connects_in_flight: usize,
    /// The nodes on this rank's kernel, its own included (the rig's namespaces share one).
    pub kernel_nodes: &'a [usize],
}

/// This rank's placement and report.
pub struct RankPlan {
    pub endpoints: Vec<EndpointPlace>,
    pub report: RankReport,
    pub notes: Vec<String>,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// Places this rank's endpoints and runs the local preflight checks.
pub fn plan(input: &RankInput) -> Result<RankPlan, String> {
    let topo = input.topo;
    let sys = Sysfs::from_env();
    let mine = topo.endpoints_of(input.rank);
    let node = topo.endpoints[mine.start].node;
    // Every GPU of the node, so that ties spread the same way on each of its ranks.
    let mut node_gpus: Vec<usize> = topo
        .endpoints
        .iter()
        .filter(|e| e.node == node)
        .map(|e| e.gpu)
        .collect();
    node_gpus.sort_unstable();
    node_gpus.dedup();
    let gpus = locate_gpus(&sys, &node_gpus, &super::gpu_bus_ids());
    let nics = locate_nics(&sys, input.props);
    let (choice, notes) = choose_nics(&gpus, &nics, input.net_dev, input.channels, input.spread_channels)?;
    let (helpers, binding_problems) = cpus::helper_cpus(env);
    let allowed = CpuSet::allowed();

    let mut endpoints = Vec::new();
    let mut rows = Vec::new();
    let mut checked = Vec::new();
    let mut comms = 0;
    for e in mine {
        let ep = &topo.endpoints[e];
        let at = node_gpus
            .binary_search(&ep.gpu)
            .map_err(|_| "GPU of an endpoint is not on its node")?;
        let (gpu, chosen) = (&gpus[at], &choice[at]);
        let nic = &nics[chosen.nics[0]];
        let binding = choose_cpus(input.cpu_bind, gpu, nic, &helpers, &allowed)?;
        let lanes = Lanes::of(e, input.connections, input.channels);
        comms += (lanes.send_peers.len() + lanes.recv_peers.len()) * input.channels;
        let names: Vec<&str> = dedup(chosen.nics.iter().map(|&d| nics[d].name.as_str()).collect());
        rows.push(Row {
            endpoint: e,
            rank: ep.rank,
            host: topo.hostnames[ep.rank].clone(),
            gpu: ep.gpu,
            gpu_pci: gpu.pci.clone().unwrap_or_else(|| super::dry_run::NO_GPU.into()),
            gpu_numa: numa(gpu.place.as_ref().and_then(|p| p.numa)),
            nic: names.join("+"),
            nic_dev: chosen.nics[0],
            nic_pci: nic.place.as_ref().map_or("-".into(), |p| p.bdf().to_string()),
            nic_numa: numa(nic.place.as_ref().and_then(|p| p.numa)),
            speed_gbps: f64::from(nic.speed_mbps.max(0)) / 1000.0,
            shapers: shapers_of(&names),
            mtu: nic.mtu,
            distance: chosen.distance.to_string(),
            choice: chosen.choice,
            cpus: binding.cpus.as_ref().unwrap_or(&allowed).to_string(),
            cpus_why: binding.why.clone(),
        });
        checked.push((gpu, nic, chosen.distance));
        endpoints.push(EndpointPlace {
            net_devs: chosen.nics.clone(),
            cpus: binding.cpus,
        });
    }
    let mut findings: Vec<Finding> = binding_problems.into_iter().map(Finding::error).collect();
    findings.extend(preflight::local(&Local {
        plugin_name: input.plugin_name,
        endpoints: checked,
        env: &env,
    }));
    let nic_of_gpu = |gpu: usize| node_gpus.binary_search(&gpu).map_or(0, |at| choice[at].nics[0]);
    let names: Vec<String> = nics.iter().map(|n| n.name.clone()).collect();
    let mine = topo.endpoints_of(input.rank).len();
    let helpers = match PluginModel::from_env(input.plugin_name, &env) {
        Ok(plugin) => {
            findings.extend(resource_findings(input, &plugin, node, &nic_of_gpu, &names));
            plugin.helper_threads(comms, input.memory == Memory::Cuda)
        }
        // A socket count TCPX refuses: tcpx_settings' error finding says so for TCPX-like plugins.
        Err(_) if crate::contracts::is_tcpx_like(input.plugin_name) => mine,
        Err(e) => {
            findings.push(Finding::error(e));
            mine
        }
    };
    findings.extend(preflight::affinity(&allowed, mine, helpers));
    let sockets = preflight::data_sockets(&env).unwrap_or(1);
    let report = RankReport {
        rank: input.rank,
        host: topo.hostnames[input.rank].clone(),
        node,
        plugin_sha256: input.plugin_sha256.to_string(),
        tcpx_env: tcpx_env(),
        rows,
        findings,
        comms,
        sockets: comms * (sockets + 1),
    };
    Ok(RankPlan {
        endpoints,
        report,
        notes,
    })
}

/// This rank's and its node's needs against this machine's limits (every run's preflight).
fn resource_findings(
    input: &RankInput,
    plugin: &PluginModel,
    node: usize,
    nic_of_gpu: &dyn Fn(usize) -> usize,
    nics: &[String],
) -> Vec<Finding> {
    let topo = input.topo;
    let nic_of = |e: usize| nic_of_gpu(topo.endpoints[e].gpu);
    let limits = Limits::read();
    let job = JobShape {
        layout: topo,
        peers: input.peers,
        channels: input.channels,
        active_channels: input.channels,
        buffer_len: input.buffer_len,
        memory: input.memory,
        local_copies: input.local_copies,
        connects_in_flight: input.connects_in_flight,
        plugin,
        nic_of: &nic_of,
        nic_names: nics,
        cuda_runtime: input.memory != Memory::Host || limits.gpu_memory.is_some(),
    };
    let model = resources::Model::new(&job);
    // The node's sums are checked once, by its first rank: one line per node, not per rank.
    // Nodes that share this kernel share its pids and memory: the first of them checks their
    // sums (a rig of 64 namespaces on one host, each node alone within pid_max, ran out of pids
    // together); the others their own, a part of what the first checked.
    let first = (0..topo.ranks()).find(|&r| topo.endpoints[topo.endpoints_of(r).start].node == node);
    let node_need = (first == Some(input.rank)).then(|| {
        if input.kernel_nodes.first() == Some(&node) {
            model.kernel(node, input.kernel_nodes)
        } else {
            model.node(node)
        }
    });
    let needs = check::Needs {
        host: "",
        process: &model.process(input.rank),
        node: node_need.as_ref(),
        plugin,
        memory: input.memory,
    };
    check::findings(&needs, &limits)
}

fn numa(n: Option<u32>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

/// The settings TCPX reads, which must agree across nodes.
fn tcpx_env() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("NCCL_GPUDIRECTTCPX_")
                || k.starts_with("NCCL_TCPX_")
                || matches!(
                    k.as_str(),
                    "NCCL_DYNAMIC_CHUNK_SIZE"
                        | "NCCL_NSOCKS_PERTHREAD"
                        | "NCCL_SOCKET_NTHREADS"
                        | "NCCL_MIN_ZCOPY_SIZE"
                )
        })
        .collect();
    vars.sort();
    vars
}

/// `v` without consecutive repeats.
fn dedup(mut v: Vec<&str>) -> Vec<&str> {
    v.dedup();
    v
}

/// The root shapers of NICs `names` in this namespace, where set.
fn shapers_of(names: &[&str]) -> Vec<super::dry_run::NicShaper> {
    names
        .iter()
        .filter_map(|n| {
            crate::shaper::Shaper::of(n).map(|shaper| super::dry_run::NicShaper {
                nic: (*n).to_string(),
                shaper,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Direction, Pattern, Plan, Scope};

    /// Rank `rank`'s findings in a 4-rank fullmesh on one node over `lo`.
    fn findings_of(rank: usize) -> Vec<Finding> {
        findings_on(rank, &["h"; 4], &[0])
    }

    /// Rank `rank`'s findings in a 4-rank fullmesh on the nodes `hosts` name, whose nodes
    /// `kernel_nodes` share rank `rank`'s kernel.
    fn findings_on(rank: usize, hosts: &[&str], kernel_nodes: &[usize]) -> Vec<Finding> {
        let per_node = hosts.iter().filter(|h| **h == hosts[0]).count();
        let topo = Topology::with_ranks_per_node(4, per_node, 1, hosts.iter().map(|h| (*h).into()).collect());
        let flows = Plan::build(Pattern::Fullmesh, Scope::All, Direction::Bi, &topo, 4096, None).unwrap();
        let props = [super::super::tests::props("lo", None)];
        let peers = resources::Counted::all(topo.len(), &flows.connections());
        let input = RankInput {
            topo: &topo,
            rank,
            peers: &peers,
            connections: &flows.connections(),
            channels: 2,
            spread_channels: false,
            net_dev: None,
            cpu_bind: &CpuBind::None,
            props: &props,
            plugin_name: "tcpx-emu",
            plugin_sha256: "",
            memory: Memory::Host,
            buffer_len: 8192,
            local_copies: true,
            connects_in_flight: usize::MAX,
            kernel_nodes,
        };
        plan(&input).unwrap().report.findings
    }

    /// Two nodes on one kernel (the rig): node0's first rank checks both nodes' threads against
    /// the kernel's pids, naming them; on kernels of their own, each node its two ranks.
    #[test]
    fn nodes_that_share_a_kernel_are_checked_together() {
        let hosts = ["node0", "node0", "node1", "node1"];
        let threads = |f: &[Finding]| {
            f.iter()
                .find(|x| x.text.contains(" threads for "))
                .map(|x| x.text.clone())
                .unwrap_or_default()
        };
        let together = threads(&findings_on(0, &hosts, &[0, 1]));
        assert!(
            together.contains("threads for 4 ranks of 2 nodes on this kernel"),
            "{together}"
        );
        let alone = threads(&findings_on(0, &hosts, &[0]));
        assert!(alone.contains("threads for 2 ranks"), "{alone}");
        let need = |t: &str| {
            t.split(" threads")
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        assert!(need(&together) > need(&alone), "{together} / {alone}");
        // node1's first rank checks node1 alone (a part of what node0's checked): one sum per kernel.
        let node1 = threads(&findings_on(2, &hosts, &[0, 1]));
        assert!(
            node1.contains("threads for 2 ranks") && !node1.contains("on this kernel"),
            "{node1}"
        );
    }

    #[test]
    fn the_node_s_sums_are_checked_by_its_first_rank_only() {
        let node_wide = |f: &[Finding]| f.iter().filter(|x| x.text.contains("threads for 4 ranks")).count();
        let (first, second) = (findings_of(0), findings_of(1));
        assert_eq!(node_wide(&first), 1, "{first:?}");
        assert_eq!(node_wide(&second), 0, "one line per node, not per rank: {second:?}");
        // Every rank checks its own files.
        for f in [&first, &second] {
            assert!(f.iter().any(|x| x.text.starts_with("open files limit")), "{f:?}");
        }
    }
}
