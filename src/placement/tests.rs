//! Placement on fake A3 sysfs trees (`tests/fixtures/sysfs`), without the hardware.

use super::*;
use std::path::PathBuf;

const A3_HIGH: &str = include_str!("../../tests/fixtures/sysfs/a3-high.txt");
const A3_MEGA: &str = include_str!("../../tests/fixtures/sysfs/a3-mega.txt");
/// launch/a3-high.sh's TCPX helper bindings (GKE's).
const TX: &str = "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177";
const RX: &str = "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191";

struct Node {
    _dir: TempDir,
    sys: Sysfs,
    fixture: fixture::Fixture,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node(description: &str, name: &str) -> Node {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tcpx-perf-sysfs-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let fixture = fixture::build(description, &dir).expect("fixture builds");
    Node {
        sys: Sysfs::at(&dir),
        _dir: TempDir(dir),
        fixture,
    }
}

pub(super) fn props(name: &str, pci_path: Option<String>) -> nccl_net::Properties {
    nccl_net::Properties {
        name: name.into(),
        pci_path,
        guid: 0,
        ptr_support: nccl_net::abi::NCCL_PTR_HOST | nccl_net::abi::NCCL_PTR_CUDA,
        reg_is_global: false,
        speed_mbps: 200_000,
        port: 0,
        latency_us: 0.0,
        max_comms: 65536,
        max_recvs: 1,
        net_device_type: nccl_net::abi::NCCL_NET_DEVICE_UNPACK,
        net_device_version: nccl_net::abi::NCCL_NET_DEVICE_UNPACK_VERSION,
        max_p2p_bytes: None,
        force_flush: false,
    }
}

impl Node {
    /// The data NICs as TCPX reports them (`pciPath` = the realpath under /sys/devices).
    fn data_nics(&self) -> Vec<Nic> {
        let props: Vec<_> = self
            .fixture
            .nics
            .iter()
            .filter(|n| *n != "eth0")
            .map(|n| {
                let real = self
                    .sys
                    .root()
                    .join("class/net")
                    .join(n)
                    .join("device")
                    .canonicalize()
                    .unwrap();
                let rel = real.strip_prefix(self.sys.root().canonicalize().unwrap()).unwrap();
                props(n, Some(format!("/sys/{}", rel.display())))
            })
            .collect();
        locate_nics(&self.sys, &props)
    }

    fn gpus(&self, count: usize) -> Vec<Gpu> {
        locate_gpus(&self.sys, &(0..count).collect::<Vec<_>>(), &self.fixture.gpu_pci)
    }

    fn chosen(&self, count: usize) -> Vec<String> {
        let nics = self.data_nics();
        let (choice, notes) = choose_nics(&self.gpus(count), &nics, None, 1, false).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        choice
            .iter()
            .map(|c| {
                assert_eq!((c.distance, c.choice), (Distance::Pix, Choice::Topology));
                nics[c.nics[0]].name.clone()
            })
            .collect()
    }
}

#[test]
fn a3_high_pairs_gpus_with_their_switch_nic_at_any_gpu_count() {
    let n = node(A3_HIGH, "high");
    let expected = ["eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"];
    for count in [8, 4, 2, 1] {
        assert_eq!(n.chosen(count), expected[..count], "{count} GPUs per node");
    }
    // Today's arithmetic sends GPUs 2-3 of a 4-GPU node across the PCIe tree.
    let arithmetic: Vec<usize> = (0..4).map(|g| arithmetic_nic(g, 4, 4)).collect();
    assert_eq!(arithmetic, [0, 1, 2, 3]);
    let gpus = n.gpus(4);
    let nics = n.data_nics();
    assert_eq!(
        pci::distance(gpus[2].place.as_ref(), nics[2].place.as_ref()),
        Distance::Sys
    );
}

#[test]
fn a3_high_eth0_is_never_a_data_nic() {
    let n = node(A3_HIGH, "eth0");
    let props: Vec<_> = n.fixture.nics.iter().map(|name| props(name, None)).collect();
    let nics = locate_nics(&n.sys, &props);
    assert_eq!(nics[0].name, "eth0");
    assert!(
        nics[0].place.is_some(),
        "class/net/eth0/device resolves without a pciPath"
    );
    let (choice, _) = choose_nics(&n.gpus(8), &nics, None, 1, false).unwrap();
    assert!(choice.iter().all(|c| c.nics[0] != 0), "{choice:?}");
}

#[test]
fn a3_high_threads_bind_to_their_numa_node_less_tcpx_helpers() {
    let n = node(A3_HIGH, "cpus");
    let nics = n.data_nics();
    let gpus = n.gpus(8);
    let (helpers, problems) = cpus::helper_cpus(|v| match v {
        "NCCL_GPUDIRECTTCPX_TX_BINDINGS" => Some(TX.into()),
        "NCCL_GPUDIRECTTCPX_RX_BINDINGS" => Some(RX.into()),
        _ => None,
    });
    assert!(problems.is_empty());
    let (choice, _) = choose_nics(&gpus, &nics, None, 1, false).unwrap();
    for (g, c) in gpus.iter().zip(&choice) {
        let nic = &nics[c.nics[0]];
        let plain = choose_cpus(&CpuBind::Auto, g, nic, &CpuSet::default(), &CpuSet::default()).unwrap();
        let bound = choose_cpus(&CpuBind::Auto, g, nic, &helpers, &CpuSet::default()).unwrap();
        let (node_cpus, free) = if g.index < 4 {
            ("0-51,104-155", "0-7,36-51,104-111,140-155")
        } else {
            ("52-103,156-207", "52-59,88-103,156-163,192-207")
        };
        assert_eq!(plain.cpus.unwrap().to_string(), node_cpus, "GPU {}", g.index);
        let cpus = bound.cpus.unwrap();
        assert_eq!(cpus.to_string(), free, "GPU {}", g.index);
        assert!(cpus.intersection(&helpers).is_empty());
        assert!(bound.why.contains("less TCPX helper CPUs"), "{}", bound.why);
        assert_eq!(n.sys.node_cpus(g.index as u32 / 4).unwrap().to_string(), node_cpus);
    }
    // A process confined elsewhere (a cgroup cpuset) is left unpinned rather than failing.
    let elsewhere = CpuSet::parse("200-207").unwrap();
    let b = choose_cpus(&CpuBind::Auto, &gpus[0], &nics[0], &helpers, &elsewhere).unwrap();
    assert!(b.cpus.is_none() && b.why.contains("outside"), "{b:?}");
}

#[test]
fn a3_mega_gives_every_gpu_its_own_nic() {
    let n = node(A3_MEGA, "mega");
    let expected = ["eth1", "eth2", "eth3", "eth4", "eth5", "eth6", "eth7", "eth8"];
    for count in [8, 4, 2, 1] {
        assert_eq!(n.chosen(count), expected[..count], "{count} GPUs per node");
    }
    // Channels spread over the two NICs of the switch, each GPU starting on its own.
    let nics = n.data_nics();
    let (choice, _) = choose_nics(&n.gpus(2), &nics, None, 3, true).unwrap();
    let names = |c: &GpuNics| c.nics.iter().map(|&d| nics[d].name.as_str()).collect::<Vec<_>>();
    assert_eq!(names(&choice[0]), ["eth1", "eth2", "eth1"]);
    assert_eq!(names(&choice[1]), ["eth2", "eth1", "eth2"]);
    // On A3-high there is one NIC per switch: nothing to spread over.
    let h = node(A3_HIGH, "spread");
    let (choice, _) = choose_nics(&h.gpus(1), &h.data_nics(), None, 2, true).unwrap();
    assert_eq!(choice[0].nics, [0, 0]);
}

#[test]
fn unknown_paths_fall_back_to_arithmetic_with_a_note() {
    let sys = Sysfs::at("/nonexistent");
    let nics = locate_nics(&sys, &[props("lo", None)]);
    let gpus = locate_gpus(&sys, &[0, 1], &[]);
    let (choice, notes) = choose_nics(&gpus, &nics, None, 1, false).unwrap();
    assert!(choice.iter().all(|c| c.choice == Choice::Arithmetic && c.nics == [0]));
    assert!(notes[0].contains("no plugin device has a PCI path"), "{notes:?}");
    let b = choose_cpus(
        &CpuBind::Auto,
        &gpus[0],
        &nics[0],
        &CpuSet::default(),
        &CpuSet::default(),
    )
    .unwrap();
    assert!(b.cpus.is_none(), "{b:?}");
}

#[test]
fn explicit_net_dev_and_cpu_lists() {
    let n = node(A3_HIGH, "explicit");
    let nics = n.data_nics();
    let gpus = n.gpus(4);
    let spec: NetDevSpec = "eth4,3,eth1,0".parse().unwrap();
    let (choice, _) = choose_nics(&gpus, &nics, Some(&spec), 1, false).unwrap();
    let devs: Vec<usize> = choice.iter().map(|c| c.nics[0]).collect();
    assert_eq!(devs, [3, 3, 0, 0]);
    assert_eq!(
        choice[0].distance,
        Distance::Sys,
        "the report shows what the user chose"
    );
    assert!(choice.iter().all(|c| c.choice == Choice::Explicit));
    let one: NetDevSpec = "1".parse().unwrap();
    assert!(choose_nics(&gpus, &nics, Some(&one), 1, false)
        .unwrap()
        .0
        .iter()
        .all(|c| c.nics == [1]));
    let err = choose_nics(&gpus, &nics, Some(&"0,1".parse().unwrap()), 1, false).unwrap_err();
    assert!(err.contains("one per GPU"), "{err}");
    let err = choose_nics(&gpus, &nics, Some(&"eth9".parse().unwrap()), 1, false).unwrap_err();
    assert!(
        err.contains("no such device") && err.contains("eth1,eth2,eth3,eth4"),
        "{err}"
    );
    assert!(choose_nics(&gpus, &nics, Some(&"7".parse().unwrap()), 1, false)
        .unwrap_err()
        .contains("does not exist"));
    assert!("0,,1".parse::<NetDevSpec>().is_err());

    let bind: CpuBind = "0-3;52-55".parse().unwrap();
    let b = choose_cpus(&bind, &gpus[1], &nics[0], &CpuSet::default(), &CpuSet::default()).unwrap();
    assert_eq!(b.cpus.unwrap().to_string(), "52-55");
    assert!(choose_cpus(&bind, &gpus[2], &nics[0], &CpuSet::default(), &CpuSet::default()).is_err());
    assert_eq!("none".parse::<CpuBind>().unwrap(), CpuBind::None);
    assert!("x".parse::<CpuBind>().is_err() && "1;".parse::<CpuBind>().is_err());
    let allowed = CpuSet::parse("100-107").unwrap();
    assert!(choose_cpus(
        &"0-3".parse().unwrap(),
        &gpus[0],
        &nics[0],
        &CpuSet::default(),
        &allowed
    )
    .is_err());
}
