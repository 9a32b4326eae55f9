//! The rig the cluster tests share: `launch/cluster.sh` up under a rig id of the test's own,
//! torn down when dropped, one moving traffic at a time; and what tests read of it.
// Each test binary uses some of these.
#![allow(dead_code)]

use super::common::{output_within, rig_state_dir, show};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/launch/cluster.sh");

/// One rig, torn down when dropped (a failing test leaves nothing behind either).
pub struct Rig {
    pub id: u32,
    pub state_dir: PathBuf,
    /// One rig moves traffic at a time: the tests compare rates measured in one run, and a
    /// sibling rig's traffic on a 2-core host once made a NIC at a quarter rate look like half.
    _alone: std::sync::MutexGuard<'static, ()>,
}

pub static ONE_RIG_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Rig {
    /// `up`s a rig, or None (with a line on stderr) where this machine cannot have one.
    pub fn up(id: u32, args: &str) -> Option<Rig> {
        let state_dir = rig_state_dir(id);
        let alone = ONE_RIG_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let rig = Rig {
            id,
            state_dir,
            _alone: alone,
        };
        rig.down();
        let o = rig.cmd(&format!("up {args}"));
        if o.status.code() == Some(77) {
            eprintln!(
                "skipped: no cluster rig on this machine: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        assert!(o.status.success(), "cluster.sh up {args}: {}", show(&o));
        Some(rig)
    }

    pub fn cmd(&self, args: &str) -> Output {
        self.cmd_with(args, &[])
    }

    /// `cmd` with `env` set (after the rig's own variables, so it may override them).
    pub fn cmd_with(&self, args: &str, env: &[(&str, &str)]) -> Output {
        let mut c = self.script();
        c.args(args.split_whitespace()).envs(env.iter().copied());
        output_within(&mut c, Duration::from_secs(120), &format!("cluster.sh {args}"))
    }

    /// `bash cluster.sh` on this rig, with tcpx-perf and mpirun's root flags; the caller adds
    /// the command and its arguments (and may override the environment).
    pub fn script(&self) -> Command {
        let mut c = Command::new("bash");
        c.arg(SCRIPT)
            .env("CLUSTER_RIG", self.id.to_string())
            .env("CLUSTER_STATE_DIR", &self.state_dir)
            .env("TCPX_PERF", BIN)
            .env("NCCL_DYNAMIC_CHUNK_SIZE", "524288")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        c
    }

    pub fn ok(&self, args: &str) {
        let o = self.cmd(args);
        assert!(o.status.success(), "cluster.sh {args}: {}", show(&o));
    }

    pub fn down(&self) -> Output {
        self.cmd("down")
    }

    /// Namespaces, links and state files of this rig still on the host.
    pub fn leftovers(&self) -> Vec<String> {
        leftovers(self.id, &self.state_dir)
    }
}

/// Namespaces, links, qdiscs and state files of rig `id` (state in `state_dir`) on the host.
pub fn leftovers(id: u32, state_dir: &Path) -> Vec<String> {
    let text = |prog: &str, args: &[&str]| {
        let o = Command::new(prog).args(args).output().expect("run ip");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let ns = format!("r{id}-node");
    let link = format!("cx{id}");
    let mut left: Vec<String> = text("ip", &["netns", "list"])
        .lines()
        .filter(|l| l.starts_with(&ns) || l.starts_with(&format!("{link}probe")))
        .map(|l| format!("netns {l}"))
        .collect();
    left.extend(
        text("ip", &["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n))
            .filter(|n| n.starts_with(&link) && n[link.len()..].starts_with(|c: char| !c.is_ascii_digit()))
            .map(|n| format!("link {n}")),
    );
    left.extend(
        text("tc", &["qdisc", "show"])
            .lines()
            .filter(|l| l.contains(&format!(" dev {link}")))
            .map(|l| format!("qdisc {l}")),
    );
    if let Ok(dir) = std::fs::read_dir(state_dir) {
        left.extend(dir.flatten().map(|e| format!("state {}", e.path().display())));
    }
    left
}

impl Drop for Rig {
    fn drop(&mut self) {
        // A failed down keeps its state for the next one, and says why.
        let o = self.down();
        if o.status.success() {
            let _ = std::fs::remove_dir_all(&self.state_dir);
        } else {
            eprintln!("cluster.sh down failed: {}", show(&o));
        }
    }
}

/// The node lists (`--healthy-hostfile`, `--drain-list`) a test's runs write, in a scratch
/// folder of their own.
pub struct NodeLists {
    pub hostfile: PathBuf,
    pub drain: PathBuf,
}

impl NodeLists {
    pub fn new(name: &str) -> NodeLists {
        let dir = scratch(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        NodeLists {
            hostfile: dir.join("healthy.txt"),
            drain: dir.join("drain.txt"),
        }
    }

    /// The healthy hostfile's node lines (its comments left out).
    pub fn healthy(&self) -> Vec<String> {
        std::fs::read_to_string(&self.hostfile)
            .expect("healthy hostfile")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect()
    }
}

impl Rig {
    /// `cluster.sh run ARGS` into a fresh `--out` folder `name`, writing `lists`: the run and its
    /// summary.json.
    pub fn judged(&self, name: &str, args: &str, lists: &NodeLists) -> (Output, serde_json::Value) {
        let out = scratch(name);
        let o = self.cmd(&format!(
            "run {args} --out {} --healthy-hostfile {} --drain-list {}",
            out.display(),
            lists.hostfile.display(),
            lists.drain.display()
        ));
        let summary = summary_of(&out, &o);
        (o, summary)
    }
}

/// A run's summary.json (`o`: the run, shown when there is none).
pub fn summary_of(out: &Path, o: &Output) -> serde_json::Value {
    let text =
        std::fs::read_to_string(out.join("summary.json")).unwrap_or_else(|e| panic!("summary.json: {e}\n{}", show(o)));
    serde_json::from_str(&text).expect("summary.json parses")
}

/// The process of `rank` (`OMPI_COMM_WORLD_RANK`) among the descendants of `root`.
pub fn rank_pid_below(root: i32, rank: usize) -> Option<i32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    let mut parents = vec![root];
    let mut seen = Vec::new();
    while let Some(parent) = parents.pop() {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1));
            if ppid == Some(&parent.to_string()) && !seen.contains(&pid) {
                seen.push(pid);
                parents.push(pid);
            }
        }
    }
    seen.into_iter().find(|pid| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        comm.trim() == "tcpx-perf" && env.split(|&b| b == 0).any(|v| v == want.as_bytes())
    })
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-perf-cluster-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let headers = reader.headers().expect("header").clone();
    reader
        .records()
        .map(|r| {
            headers
                .iter()
                .map(String::from)
                .zip(r.expect("record").iter().map(String::from))
                .collect()
        })
        .collect()
}

/// `tc qdisc show` of NIC `dev` in namespace `ns`.
pub fn qdisc_of(ns: &str, dev: &str) -> String {
    let o = Command::new("tc")
        .args(["-n", ns, "qdisc", "show", "dev", dev])
        .output()
        .expect("tc");
    String::from_utf8_lossy(&o.stdout).into_owned()
}
