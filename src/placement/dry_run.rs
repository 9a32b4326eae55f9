//! The placement report: every rank's rows and findings gathered on rank 0, the checks that
//! compare ranks, and the per-node table that `--dry-run` prints (and every run's header).

use super::preflight::{Finding, Level};
use super::Choice;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One NIC's root shaper ([`crate::shaper::Shaper`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicShaper {
    pub nic: String,
    #[serde(flatten)]
    pub shaper: crate::shaper::Shaper,
}

/// [`Row::gpu_pci`] of an endpoint whose GPU placement did not find (no GPU at its index, no CUDA).
pub const NO_GPU: &str = "-";

/// One endpoint's placement, ready to print.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Row {
    pub endpoint: usize,
    pub rank: usize,
    pub host: String,
    pub gpu: usize,
    pub gpu_pci: String,
    pub gpu_numa: String,
    /// Device name(s), `+`-joined when channels are spread.
    pub nic: String,
    pub nic_dev: usize,
    pub nic_pci: String,
    pub nic_numa: String,
    pub speed_gbps: f64,
    /// The egress shapers at the root of the endpoint's NICs (the rig's tbf), where set: the
    /// most its flows can carry ([`crate::report::PairResult::above_link`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapers: Vec<NicShaper>,
    pub mtu: Option<u32>,
    pub distance: String,
    pub choice: Choice,
    /// The CPUs the endpoint's thread runs on.
    pub cpus: String,
    pub cpus_why: String,
}

/// What one rank sends to rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub host: String,
    pub node: usize,
    pub plugin_sha256: String,
    pub tcpx_env: Vec<(String, String)>,
    pub rows: Vec<Row>,
    pub findings: Vec<Finding>,
    /// Comms this rank opens and their sockets (data + ctrl).
    pub comms: usize,
    pub sockets: usize,
}

/// A finding with the hosts that reported it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeFinding {
    pub level: Level,
    pub text: String,
    pub hosts: Vec<String>,
}

/// How long connection setup took (rank 0's view of the slowest rank).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SetupReport {
    /// Listen, handle exchange and every connect/accept, to the last rank's last comm.
    pub seconds: f64,
    /// Of which the slowest endpoint's connect/accept phase.
    pub connect_seconds: f64,
    pub comms: usize,
    /// Sockets (data + ctrl) per node, by host.
    pub sockets_per_node: BTreeMap<String, usize>,
    /// The most setup threads one endpoint used.
    pub max_setup_threads: usize,
    /// Threads each rank (by index) had once its comms were set up (`/proc/self/task`): the
    /// setup pool gone, and helpers that start at a comm's first transfer (TCPX's, tcpx-emu's)
    /// not yet. Beside the resource model's figures.
    pub threads_after_setup: Vec<u64>,
    /// Open files each rank had then (`/proc/self/fd`): every comm's sockets, the listeners
    /// closed. With `--connect rounds`, the most over every round's setup.
    pub fds_after_setup: Vec<u64>,
    /// `--connect`: `all` (every comm before the first byte) or `rounds` (one `--max-peers`
    /// round's at a time).
    pub connect: String,
    /// The connects of the run by round (with `--connect all`, one: every comm, round 0).
    pub rounds: Vec<RoundSetup>,
    /// Every connect of the run, each the slowest rank's (listen, handle exchange,
    /// connect/accept), in seconds; none of it inside a timed iteration.
    pub connect_seconds_total: f64,
    /// From the launch of the slowest rank's process (its start in `/proc`) to the start of its
    /// first timed iteration, in seconds; null when no timed iteration started.
    pub first_timed_s: Option<f64>,
    /// Threads (`/proc/self/task`) each rank had at most, by rank: sampled after every
    /// connect and after every round's (size's) iterations, helper threads included.
    pub threads_peak: Vec<u64>,
    /// Open files each rank had at most, sampled as `threads_peak`.
    pub fds_peak: Vec<u64>,
}

/// The connects of one `--max-peers` round index over the run (`--connect rounds` opens a
/// round's comms before its warm-up in every size, unless they are already open).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct RoundSetup {
    pub round: usize,
    /// How many times its comms were connected.
    pub connects: usize,
    /// Comms of the job per connect (send and receive, every rank).
    pub comms: usize,
    /// Its connects' seconds (each the slowest rank's), summed and the longest.
    pub seconds_total: f64,
    pub seconds_max: f64,
}

impl SetupReport {
    /// The header line.
    pub fn line(&self) -> String {
        let busiest = self.sockets_per_node.iter().max_by_key(|(_, n)| **n);
        let per_node = busiest.map_or(String::new(), |(h, n)| {
            format!(", at most {n} sockets on one node ({h})")
        });
        let rounds = if self.connect == "rounds" {
            let connects: usize = self.rounds.iter().map(|r| r.connects).sum();
            let most = self.rounds.iter().map(|r| r.comms).max().unwrap_or(0);
            let slowest = self.rounds.iter().map(|r| r.seconds_max).fold(0.0, f64::max);
            format!(
                "; --connect rounds: {} round(s), {connects} connect(s) so far of up to {most} comms, {:.3} s in all, slowest {slowest:.3} s",
                self.rounds.len(),
                self.connect_seconds_total
            )
        } else {
            String::new()
        };
        let first = self.first_timed_s.map_or(String::new(), |s| {
            format!("; first timed iteration {s:.3} s after launch")
        });
        format!(
            "# setup: {:.3} s (buffers, listen, handle exchange, connect/accept) for {} comms{per_node}; slowest endpoint's connect/accept {:.3} s, up to {} setup thread(s) per endpoint{rounds}{first}\n",
            self.seconds, self.comms, self.connect_seconds, self.max_setup_threads
        )
    }
}

/// One rank's value of a setting that differs between ranks (`None`: unset there).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct RankValue {
    pub rank: usize,
    pub host: String,
    pub value: Option<String>,
}

/// The whole job's placement: `summary.json`'s `placement`.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct PlacementReport {
    pub rows: Vec<Row>,
    pub findings: Vec<NodeFinding>,
    /// Every TCPX setting whose value differs between ranks, with every rank's value.
    pub disagreements: BTreeMap<String, Vec<RankValue>>,
    pub comms: usize,
    pub setup: Option<SetupReport>,
    #[serde(skip)]
    pub sockets_per_node: BTreeMap<String, usize>,
    /// The summary.json the run will write the findings to in full, where a long finding's line
    /// is cut; None (a dry run, `--no-out`): no file holds them, so every line is printed whole.
    #[serde(skip)]
    pub findings_file: Option<std::path::PathBuf>,
}

impl PlacementReport {
    /// Rank 0 merges every rank's report and adds the checks that compare ranks.
    pub fn merge(mut reports: Vec<RankReport>) -> PlacementReport {
        reports.sort_by_key(|r| r.rank);
        let mut out = PlacementReport::default();
        let mut findings: Vec<NodeFinding> = Vec::new();
        let mut add =
            |f: Finding, host: &str| match findings.iter_mut().find(|x| x.level == f.level && x.text == f.text) {
                Some(x) if !x.hosts.iter().any(|h| h == host) => x.hosts.push(host.to_string()),
                Some(_) => {}
                None => findings.push(NodeFinding {
                    level: f.level,
                    text: f.text,
                    hosts: vec![host.to_string()],
                }),
            };
        if let Some(first) = reports.first() {
            for (what, differs) in [
                (
                    "plugin sha256",
                    reports.iter().any(|r| r.plugin_sha256 != first.plugin_sha256),
                ),
                (
                    "TCPX settings (NCCL_GPUDIRECTTCPX_*, socket and chunk variables)",
                    reports.iter().any(|r| r.tcpx_env != first.tcpx_env),
                ),
            ] {
                let f = if differs {
                    Finding::error(format!("{what} differ between ranks: {}", differences(&reports, what)))
                } else {
                    Finding::ok(format!("{what} identical on all {} ranks", reports.len()))
                };
                add(f, &first.host);
            }
        }
        out.disagreements = disagreements(&reports);
        for r in reports {
            for f in r.findings {
                add(f, &r.host);
            }
            *out.sockets_per_node.entry(r.host.clone()).or_default() += r.sockets;
            out.comms += r.comms;
            out.rows.extend(r.rows);
        }
        findings.extend(rail_mtu_findings(&out.rows));
        findings.sort_by_key(|f| f.level);
        out.findings = findings;
        out
    }

    pub fn errors(&self) -> usize {
        self.findings.iter().filter(|f| f.level == Level::Error).count()
    }

    /// The per-node table, each line starting with `# `.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let mut host = None;
        for r in &self.rows {
            if host != Some(&r.host) {
                host = Some(&r.host);
                let _ = writeln!(s, "# placement on {}:", r.host);
                let _ = writeln!(
                    s,
                    "#   {:>4} {:>4} {:>3} {:>12} {:>4}  {:<10} {:>12} {:>4} {:>6} {:>5} {:<7} {:<10} cpus",
                    "ep",
                    "rank",
                    "gpu",
                    "gpu pci",
                    "numa",
                    "nic",
                    "nic pci",
                    "numa",
                    "Gb/s",
                    "mtu",
                    "dist",
                    "chosen by"
                );
            }
            let _ = writeln!(
                s,
                "#   {:>4} {:>4} {:>3} {:>12} {:>4}  {:<10} {:>12} {:>4} {:>6} {:>5} {:<7} {:<10} {} ({})",
                r.endpoint,
                r.rank,
                r.gpu,
                r.gpu_pci,
                r.gpu_numa,
                format!("{}[{}]", r.nic, r.nic_dev),
                r.nic_pci,
                r.nic_numa,
                format!("{:.0}", r.speed_gbps),
                r.mtu.map_or("-".into(), |m| m.to_string()),
                r.distance,
                format!("{:?}", r.choice).to_lowercase(),
                r.cpus,
                r.cpus_why
            );
        }
        s
    }

    /// One line per finding at `min` level or worse ([`finding_line`], cut only where
    /// [`PlacementReport::findings_file`] holds the whole text).
    pub fn finding_lines(&self, min: Level) -> String {
        let mut s = String::new();
        for f in self.findings.iter().filter(|f| f.level <= min) {
            let _ = writeln!(s, "{}", finding_line(f, self.findings_file.as_deref()));
        }
        s
    }
}

/// NICs of one name are one rail (rail-aligned clusters such as A3-high: ethN of every node on
/// one segment). An MTU that differs between nodes on a rail caps every flow across it at the
/// smaller MTU, and TCPX's devmem fragments with it: a warning naming each node's MTU.
pub fn rail_mtu_findings(rows: &[Row]) -> Vec<NodeFinding> {
    let mut rails: BTreeMap<&str, BTreeMap<u32, Vec<String>>> = BTreeMap::new();
    for r in rows {
        let Some(mtu) = r.mtu else { continue };
        // A spread row ("eth1+eth2") names its first channel's NIC, whose MTU it carries.
        let nic = r.nic.split('+').next().unwrap_or(&r.nic);
        let hosts = rails.entry(nic).or_default().entry(mtu).or_default();
        if !hosts.contains(&r.host) {
            hosts.push(r.host.clone());
        }
    }
    rails
        .into_iter()
        .filter(|(_, mtus)| mtus.len() > 1)
        .map(|(nic, mtus)| {
            let each: Vec<String> = mtus
                .iter()
                .map(|(mtu, hosts)| format!("{mtu} on {}", hosts.join(",")))
                .collect();
            NodeFinding {
                level: Level::Warning,
                text: format!(
                    "{nic} MTU differs between nodes on its rail ({}): flows across it run at the smallest; set one MTU on every node's {nic}",
                    each.join("; ")
                ),
                hosts: mtus.into_values().flatten().collect(),
            }
        })
        .collect()
}

/// The most characters a finding's line takes in the header or footer: at scale a finding can
/// list dozens of flows, ranks or hosts, and the table must stay readable; the whole text is in
/// summary.json (`placement.findings`; a slow NIC's every flow in `slow_nics`).
pub const FINDING_LINE_MAX: usize = 200;

/// The fewest characters of a cut finding its line keeps, however long the file's path.
pub const FINDING_KEPT_MIN: usize = 80;

/// `# LEVEL: TEXT [HOSTS]`. With `full_in` (the summary.json that will hold the whole text), in
/// at most [`FINDING_LINE_MAX`] characters: a longer text is cut and names that file. Without
/// (no file will hold it: a dry run, `--no-out`), the whole text, however long.
pub fn finding_line(f: &NodeFinding, full_in: Option<&std::path::Path>) -> String {
    let level = match f.level {
        Level::Error => "error",
        Level::Warning => "warning",
        Level::Ok => "ok",
    };
    let head = format!("# {level}: ");
    let tail = format!(" [{}]", hosts(&f.hosts));
    let room = FINDING_LINE_MAX.saturating_sub(head.chars().count() + tail.chars().count());
    let Some(file) = full_in.filter(|_| f.text.chars().count() > room) else {
        return format!("{head}{}{tail}", f.text);
    };
    let cut = format!("... (in full: {})", file.display());
    // A long --out path takes the room, but never the whole finding: its first words stay.
    let kept = room.saturating_sub(cut.chars().count()).max(FINDING_KEPT_MIN);
    let text: String = f.text.chars().take(kept).collect();
    format!("{head}{}{cut}{tail}", text.trim_end())
}

fn hosts(list: &[String]) -> String {
    let few = if list.len() <= 4 {
        list.join(",")
    } else {
        format!("{},... ({} hosts)", list[..3].join(","), list.len())
    };
    // Long host names (cloud VMs) take a finding's room: then the first and the count.
    match list {
        [first, _, ..] if few.len() > 60 => format!("{first},... ({} hosts)", list.len()),
        _ => few,
    }
}

/// Every TCPX setting some rank set differently (or not at all): each rank's value.
fn disagreements(reports: &[RankReport]) -> BTreeMap<String, Vec<RankValue>> {
    let value = |r: &RankReport, key: &str| r.tcpx_env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let keys: std::collections::BTreeSet<&String> =
        reports.iter().flat_map(|r| r.tcpx_env.iter().map(|(k, _)| k)).collect();
    keys.into_iter()
        .filter_map(|key| {
            let values: Vec<RankValue> = reports
                .iter()
                .map(|r| RankValue {
                    rank: r.rank,
                    host: r.host.clone(),
                    value: value(r, key),
                })
                .collect();
            let first = &values.first()?.value;
            values.iter().any(|v| &v.value != first).then(|| (key.clone(), values))
        })
        .collect()
}

/// `KEY=value` (or `KEY unset`) of the given keys in `env`.
fn env_values(env: &[(String, String)], keys: &std::collections::BTreeSet<String>) -> String {
    keys.iter()
        .map(|key| match env.iter().find(|(k, _)| k == key) {
            Some((_, v)) => format!("{key}={v}"),
            None => format!("{key} unset"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn differences(reports: &[RankReport], what: &str) -> String {
    let first = &reports[0];
    // Rank 0's values of the keys each odd rank differs in.
    let mut theirs: Vec<String> = Vec::new();
    let odd: Vec<String> = reports
        .iter()
        .filter(|r| {
            if what.starts_with("plugin") {
                r.plugin_sha256 != first.plugin_sha256
            } else {
                r.tcpx_env != first.tcpx_env
            }
        })
        .map(|r| {
            let detail = if what.starts_with("plugin") {
                r.plugin_sha256.chars().take(12).collect::<String>()
            } else {
                let diff: std::collections::BTreeSet<String> = r
                    .tcpx_env
                    .iter()
                    .filter(|kv| !first.tcpx_env.contains(kv))
                    .chain(first.tcpx_env.iter().filter(|kv| !r.tcpx_env.contains(kv)))
                    .map(|(k, _)| k.clone())
                    .collect();
                theirs.push(env_values(&first.tcpx_env, &diff));
                env_values(&r.tcpx_env, &diff)
            };
            format!("rank {} on {} ({detail})", r.rank, r.host)
        })
        .collect();
    theirs.dedup();
    if theirs.is_empty() {
        format!("{} vs rank 0", odd.join("; "))
    } else {
        format!("{} vs rank 0 ({})", odd.join("; "), theirs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rank: usize, host: &str, sha: &str, env: &[(&str, &str)]) -> RankReport {
        RankReport {
            rank,
            host: host.into(),
            node: rank,
            plugin_sha256: sha.into(),
            tcpx_env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            rows: Vec::new(),
            findings: vec![Finding::ok("eth1 MTU 8244"), Finding::warning("w")],
            comms: 3,
            sockets: 6,
        }
    }

    fn row(host: &str, nic: &str, mtu: u32) -> Row {
        Row {
            endpoint: 0,
            rank: 0,
            host: host.into(),
            gpu: 0,
            gpu_pci: "-".into(),
            gpu_numa: "-".into(),
            nic: nic.into(),
            nic_dev: 0,
            nic_pci: "-".into(),
            nic_numa: "-".into(),
            speed_gbps: 10.0,
            shapers: Vec::new(),
            mtu: Some(mtu),
            distance: "unknown".into(),
            choice: Choice::Arithmetic,
            cpus: "0-1".into(),
            cpus_why: String::new(),
        }
    }

    #[test]
    fn an_mtu_that_differs_on_a_rail_is_a_warning_naming_the_nodes() {
        let same = [
            row("node0", "eth1", 1500),
            row("node1", "eth1", 1500),
            row("node1", "eth2", 9000),
        ];
        assert!(rail_mtu_findings(&same).is_empty(), "different rails may differ");
        let odd = [
            row("node0", "eth2", 1500),
            row("node0", "eth2", 1500),
            row("node1", "eth2", 9000),
            row("node2", "eth2", 1500),
        ];
        let f = rail_mtu_findings(&odd);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Warning);
        assert!(
            f[0].text
                .starts_with("eth2 MTU differs between nodes on its rail (1500 on node0,node2; 9000 on node1)"),
            "{}",
            f[0].text
        );
    }

    #[test]
    fn ranks_that_disagree_are_named() {
        let env = [("NCCL_DYNAMIC_CHUNK_SIZE", "524288")];
        let merged = PlacementReport::merge(vec![
            report(1, "b", "abc", &[("NCCL_DYNAMIC_CHUNK_SIZE", "1048576")]),
            report(0, "a", "abc", &env),
            report(2, "c", "def", &env),
        ]);
        assert_eq!(merged.errors(), 2, "{:?}", merged.findings);
        let text = merged.finding_lines(Level::Ok);
        assert!(
            text.contains("plugin sha256 differ between ranks: rank 2 on c (def)"),
            "{text}"
        );
        assert!(
            text.contains("rank 1 on b (NCCL_DYNAMIC_CHUNK_SIZE=1048576) vs rank 0 (NCCL_DYNAMIC_CHUNK_SIZE=524288)"),
            "{text}"
        );
        let values: Vec<Option<&str>> = merged.disagreements["NCCL_DYNAMIC_CHUNK_SIZE"]
            .iter()
            .map(|v| v.value.as_deref())
            .collect();
        assert_eq!(
            values,
            [Some("524288"), Some("1048576"), Some("524288")],
            "every rank's value"
        );
        assert_eq!(merged.disagreements.len(), 1);
        assert!(text.contains("# ok: eth1 MTU 8244 [a,b,c]"), "{text}");
        assert!(text.find("# error").unwrap() < text.find("# warning").unwrap());
        assert!(!merged.finding_lines(Level::Warning).contains("# ok"));
        assert_eq!((merged.comms, merged.sockets_per_node["a"]), (9, 6));
        let same = PlacementReport::merge(vec![report(0, "a", "x", &env), report(1, "b", "x", &env)]);
        assert_eq!(same.errors(), 0);
    }

    /// A finding's line is cut only where a file will hold its whole text, and then names that
    /// file; a dry run (no file) prints it whole (issue 55: "... (in full: summary.json)" pointed
    /// at a file a dry run never writes).
    #[test]
    fn a_line_is_cut_only_where_a_file_holds_the_rest() {
        let long = NodeFinding {
            level: Level::Warning,
            text: format!("{} end", "word ".repeat(100)),
            hosts: vec!["a".into()],
        };
        let mut report = PlacementReport {
            findings: vec![long.clone()],
            ..PlacementReport::default()
        };
        let whole = report.finding_lines(Level::Ok);
        assert_eq!(whole, format!("# warning: {} [a]\n", long.text));
        report.findings_file = Some(std::path::PathBuf::from("results/r1/summary.json"));
        let cut = report.finding_lines(Level::Ok);
        assert!(cut.chars().count() <= FINDING_LINE_MAX + 1, "{cut}");
        assert!(cut.ends_with("... (in full: results/r1/summary.json) [a]\n"), "{cut}");
    }
}
