//! Builds a fake sysfs tree from a node description (`tests/fixtures/sysfs/*.txt`), for tests and
//! for trying placement on a machine without the hardware (`TCPX_PERF_SYSFS_ROOT`).
//!
//! Description lines: `node N CPULIST`, `gpu INDEX PATH NUMA`, `nic IFNAME PATH NUMA MTU`, where
//! PATH is below `/sys/devices`; `#` starts a comment.

use std::path::Path;

/// What a built tree holds besides its files: GPU bus ids in CUDA order, NIC names.
#[derive(Debug, Clone, Default)]
pub struct Fixture {
    pub gpu_pci: Vec<String>,
    pub nics: Vec<String>,
}

/// Writes the tree for `description` under `dir` (which must not exist yet or be empty).
pub fn build(description: &str, dir: &Path) -> Result<Fixture, String> {
    let io = |e: std::io::Error| format!("building the fake sysfs in {}: {e}", dir.display());
    let mut node_cpus = std::collections::BTreeMap::new();
    let mut devices = Vec::new();
    let mut fixture = Fixture::default();
    for (n, line) in description.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("fixture line {}: '{line}'", n + 1);
        match f.as_slice() {
            [] => {}
            ["node", id, cpus] => {
                node_cpus.insert(id.parse::<u32>().map_err(|_| bad())?, cpus.to_string());
            }
            ["gpu", index, path, numa] => {
                if index.parse::<usize>().ok() != Some(fixture.gpu_pci.len()) {
                    return Err(bad());
                }
                let bdf = path.rsplit('/').next().unwrap_or_default().to_string();
                fixture.gpu_pci.push(bdf);
                devices.push((path.to_string(), numa.parse::<u32>().map_err(|_| bad())?, None));
            }
            ["nic", name, path, numa, mtu] => {
                fixture.nics.push(name.to_string());
                let mtu: u32 = mtu.parse().map_err(|_| bad())?;
                devices.push((
                    path.to_string(),
                    numa.parse::<u32>().map_err(|_| bad())?,
                    Some((name.to_string(), mtu)),
                ));
            }
            _ => return Err(bad()),
        }
    }
    for (node, cpus) in &node_cpus {
        let d = dir.join(format!("devices/system/node/node{node}"));
        std::fs::create_dir_all(&d).map_err(io)?;
        std::fs::write(d.join("cpulist"), format!("{cpus}\n")).map_err(io)?;
    }
    std::fs::create_dir_all(dir.join("bus/pci/devices")).map_err(io)?;
    std::fs::create_dir_all(dir.join("class/net")).map_err(io)?;
    for (path, numa, nic) in devices {
        let cpus = node_cpus
            .get(&numa)
            .ok_or_else(|| format!("fixture: NUMA node {numa} has no 'node' line"))?;
        // Every PCI function on the way gets the attributes a real one has.
        let parts: Vec<&str> = path.split('/').collect();
        for depth in 2..=parts.len() {
            let d = dir.join("devices").join(parts[..depth].join("/"));
            std::fs::create_dir_all(&d).map_err(io)?;
            std::fs::write(d.join("numa_node"), format!("{numa}\n")).map_err(io)?;
            std::fs::write(d.join("local_cpulist"), format!("{cpus}\n")).map_err(io)?;
            let link = dir.join("bus/pci/devices").join(parts[depth - 1]);
            if !link.exists() {
                std::os::unix::fs::symlink(&d, &link).map_err(io)?;
            }
        }
        if let Some((name, mtu)) = nic {
            let net = dir.join("class/net").join(&name);
            std::fs::create_dir_all(&net).map_err(io)?;
            std::os::unix::fs::symlink(dir.join("devices").join(&path), net.join("device")).map_err(io)?;
            std::fs::write(net.join("mtu"), format!("{mtu}\n")).map_err(io)?;
        }
    }
    Ok(fixture)
}
