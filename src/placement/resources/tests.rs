//! The model's counts on small jobs worked out by hand, and its verdicts against fake limits.

use super::check::{self, Needs};
use super::limits::Limits;
use super::*;
use crate::placement::finding::Level;
use crate::plan::{Direction, Pattern, Plan, Scope};

fn emu(vars: &[(&str, &str)]) -> PluginModel {
    named("tcpx-emu", vars)
}

fn named(name: &str, vars: &[(&str, &str)]) -> PluginModel {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    PluginModel::from_env(name, &|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap()
}

/// tcpx-emu reads `TCPXEMU_SHARED_THREADS` outside 1..=64 as its default (4), not clamped: the
/// model must predict the threads the plugin really starts.
#[test]
fn shared_threads_out_of_range_is_the_plugins_default() {
    assert_eq!(emu(&[("TCPXEMU_SHARED_THREADS", "100")]).emu_shared_threads, 4);
    assert_eq!(emu(&[("TCPXEMU_SHARED_THREADS", "0")]).emu_shared_threads, 4);
    assert_eq!(emu(&[("TCPXEMU_SHARED_THREADS", "64")]).emu_shared_threads, 64);
}

/// `nodes` x `per_node` ranks of one endpoint each, NIC = GPU * nics / per_node.
struct Fixture {
    topo: Topology,
    plan: Plan,
    names: Vec<String>,
    per_node: usize,
}

fn fixture(pattern: Pattern, scope: Scope, nodes: usize, per_node: usize, nics: usize, size: u64) -> Fixture {
    let ranks = nodes * per_node;
    let topo = Topology::with_ranks_per_node(
        ranks,
        per_node,
        1,
        (0..ranks).map(|r| format!("h{}", r / per_node)).collect(),
    );
    let plan = Plan::build(pattern, scope, Direction::Bi, &topo, size, None).unwrap();
    Fixture {
        topo,
        plan,
        names: (0..nics).map(|n| format!("eth{}", n + 1)).collect(),
        per_node,
    }
}

fn needs_of(f: &Fixture, plugin: &PluginModel, memory: Memory, mut check: impl FnMut(&ProcessNeed, &NodeNeed)) {
    let peers = Counted::all(f.topo.len(), &f.plan.connections());
    let nics = f.names.len();
    let nic_of = |e: usize| crate::placement::arithmetic_nic(f.topo.endpoints[e].gpu, f.per_node, nics);
    let job = JobShape {
        layout: &f.topo,
        peers: &peers,
        channels: 2,
        active_channels: 2,
        buffer_len: f.plan.buffer_len.iter().copied().max().unwrap(),
        memory,
        local_copies: f.plan.flows.iter().any(crate::plan::Flow::is_local),
        connects_in_flight: usize::MAX,
        plugin,
        nic_of: &nic_of,
        nic_names: &f.names,
        cuda_runtime: memory != Memory::Host,
    };
    let model = Model::new(&job);
    check(&model.worst_process(0..f.topo.ranks()), &model.node(0));
}

#[test]
fn fullmesh_on_one_node_counts_comms_files_threads_and_ports() {
    let f = fixture(Pattern::Fullmesh, Scope::All, 1, 4, 1, 4 << 20);
    needs_of(&f, &emu(&[("NCCL_NSOCKS_PERTHREAD", "4")]), Memory::Host, |p, n| {
        // 3 peers x 2 channels each way.
        assert_eq!((p.comms, p.listens, p.sockets), (12, 6, 60));
        assert_eq!(
            p.files,
            60 + 6 + FDS_BASE + 1,
            "tcpx-emu: one listening socket per listen comm, the ctrl watcher's epoll set"
        );
        assert_eq!(p.helper_threads, 48, "48 sockets <= 64: one thread each");
        // The endpoint, tcpx-emu's acceptor and ctrl watcher; setup: 2 pool threads (its
        // connects start none); sweep: 4 copiers + 48 helpers.
        assert_eq!(p.threads, PROCESS_THREADS + 1 + 2 + 52);
        assert_eq!(p.host_bytes, 8 << 20, "fullmesh's two halves of -e");
        assert_eq!(n.threads, 4 * p.threads);
        assert_eq!(n.ports.len(), 1);
        assert_eq!((n.ports[0].listening, n.ports[0].connecting), (24, 4 * 6 * 5));
    });
}

#[test]
fn tcpx_counts_two_listeners_and_its_ctrl_dev_apart() {
    let f = fixture(Pattern::Sendrecv, Scope::InterNode, 2, 8, 4, 1 << 20);
    let tcpx = named(
        "GPUDirectTCPX_v7",
        &[("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0")],
    );
    needs_of(&f, &tcpx, Memory::Cuda, |p, n| {
        // One peer each way, 2 channels: 4 comms of 4 data + 1 ctrl sockets.
        assert_eq!((p.comms, p.listens, p.sockets), (4, 2, 20));
        assert_eq!(p.files, 20 + 2 * 2 + FDS_BASE + CUDA_FDS);
        assert_eq!(p.helper_threads, 4, "NCCL_SOCKET_NTHREADS=1 per comm");
        assert_eq!(p.gpu_recv_comms, 0, "RxDM owns TCPX's bounce buffer");
        let addrs: Vec<&str> = n.ports.iter().map(|p| p.address.as_str()).collect();
        assert_eq!(addrs, ["eth1", "eth2", "eth3", "eth4", "eth0"]);
        // 8 ranks, 2 per NIC: data listeners and data sockets on the NIC, ctrl on eth0.
        assert_eq!((n.ports[0].listening, n.ports[0].connecting), (2 * 2, 2 * 2 * 4));
        assert_eq!((n.ports[4].listening, n.ports[4].connecting), (8 * 2, 8 * 2));
    });
}

fn limits() -> Limits {
    Limits {
        nofile: Some(1024),
        pid_max: Some(65536),
        threads_in_use: Some(500),
        port_range: Some((32768, 60999)),
        mem_available: Some(2_000_000_000_000),
        gpu_memory: Some(80_000_000_000),
        ..Limits::default()
    }
}

fn verdicts(f: &Fixture, plugin: &PluginModel, memory: Memory, l: &Limits) -> Vec<check::Verdict> {
    let mut out = Vec::new();
    needs_of(f, plugin, memory, |p, n| {
        out = check::verdicts(
            &Needs {
                host: "node0: ",
                process: p,
                node: Some(n),
                plugin,
                memory,
            },
            l,
        );
    });
    out
}

#[test]
fn a_64_node_fullmesh_crosses_1024_files_and_the_bounce_pool() {
    let f = fixture(Pattern::Fullmesh, Scope::InterNode, 64, 8, 4, 64 << 20);
    let v = verdicts(&f, &emu(&[]), Memory::Cuda, &limits());
    let files = v.iter().find(|v| v.resource == "open files").unwrap();
    // 504 peers x 2 channels x 2 directions = 2016 comms x 2 sockets + 1008 listeners + MPI's
    // and CUDA's + the ctrl watcher's epoll set.
    assert_eq!(
        (files.level, files.need, files.limit),
        (Level::Error, 4032 + 1008 + FDS_BASE + CUDA_FDS + 1, 1024)
    );
    assert!(
        files.text.starts_with("node0: open files limit 1024 is below the 5107") && files.text.contains("ulimit -n"),
        "{}",
        files.text
    );
    assert!(files.text.len() <= 200, "{}", files.text.len());
    let pool = v.iter().find(|v| v.resource == "bounce pool").unwrap();
    assert_eq!((pool.level, pool.need), (Level::Error, 1008 * (64 << 20)));
    assert!(pool.text.contains("TCPXEMU_BOUNCE_POOL_MB"), "{}", pool.text);
    // Host memory fits: no host buffers with --mem cuda.
    assert!(v
        .iter()
        .filter(|v| v.resource == "host memory")
        .all(|v| v.level == Level::Ok));
    // The same job on 2 nodes fits every limit here.
    let small = fixture(Pattern::Fullmesh, Scope::InterNode, 2, 8, 4, 64 << 20);
    let v = verdicts(&small, &emu(&[]), Memory::Cuda, &limits());
    assert!(v.iter().all(|v| v.level == Level::Ok), "{v:#?}");
}

#[test]
fn threads_near_and_over_pid_max_name_the_sysctl() {
    let f = fixture(Pattern::Fullmesh, Scope::All, 1, 8, 4, 1 << 20);
    let per_socket = emu(&[("TCPXEMU_THREADS", "per-socket"), ("NCCL_NSOCKS_PERTHREAD", "8")]);
    // 8 ranks of 28 comms x 8 sockets, a helper each, 4 copiers, the endpoint, the acceptor
    // and the ctrl watcher.
    let tight = Limits {
        pid_max: Some(1900),
        threads_in_use: Some(100),
        ..limits()
    };
    let v = verdicts(&f, &per_socket, Memory::Host, &tight);
    let t = v.iter().find(|v| v.resource == "threads").unwrap();
    assert_eq!(t.level, Level::Error, "{}", t.text);
    assert_eq!(t.limit, 1800, "room = pid_max - threads in use");
    assert_eq!(t.need, 8 * (PROCESS_THREADS as u64 + 3 + 4 + 224));
    assert!(t.text.contains("sysctl -w kernel.pid_max="), "{}", t.text);
    assert!(
        t.text.contains("TCPXEMU_THREADS=shared") && t.text.len() <= 200,
        "{}",
        t.text
    );
    // Shared threads bring the same job under the limit.
    let shared = emu(&[("TCPXEMU_THREADS", "shared"), ("NCCL_NSOCKS_PERTHREAD", "8")]);
    let v = verdicts(&f, &shared, Memory::Host, &tight);
    assert_ne!(v.iter().find(|v| v.resource == "threads").unwrap().level, Level::Error);
    // A cgroup tighter than pid_max is the one named.
    let cg = Limits {
        cgroup_pids: Some(100),
        ..tight
    };
    let v = verdicts(&f, &shared, Memory::Host, &cg);
    let t = v.iter().find(|v| v.resource == "threads").unwrap();
    assert_eq!((t.level, t.limit_name.as_str()), (Level::Error, "cgroup pids.max"));
    assert!(t.text.contains("pids.max"), "{}", t.text);
}

#[test]
fn ports_bind_listeners_always_and_connects_only_on_tcpx() {
    let f = fixture(Pattern::Fullmesh, Scope::All, 1, 8, 1, 1 << 20);
    let narrow = Limits {
        port_range: Some((60000, 60299)),
        ..limits()
    };
    // 8 ranks x 7 peers x 2 channels: 112 listeners, 112 x 2 connecting sockets on one address.
    let v = verdicts(&f, &emu(&[]), Memory::Host, &narrow);
    let p = v.iter().find(|v| v.resource == "ports on eth1").unwrap();
    assert_eq!((p.level, p.need), (Level::Warning, 112 + 224), "{}", p.text);
    let tcpx = named("GPUDirectTCPX_v7", &[]);
    let v = verdicts(&f, &tcpx, Memory::Host, &narrow);
    let p = v.iter().find(|v| v.resource == "ports on eth1").unwrap();
    assert_eq!((p.level, p.need), (Level::Error, 224 + 224), "{}", p.text);
    assert!(p.text.contains("ip_local_port_range"), "{}", p.text);
}
