//! The node verdicts ([`crate::verdict`]) as the footer's table and as the two lists a
//! scheduler takes (docs/drain.md): `--healthy-hostfile` (an Open MPI hostfile of the healthy
//! nodes) and `--drain-list` (the bad nodes, one a line with the reason). Both are written
//! whole to a temporary sibling and renamed into place. Before the run measures, each path is
//! claimed as an output of the run (a regular file or nothing, in a directory that exists, no
//! other output's path: [`tcpx_files::claim_output`]) and proved writable, and a list an earlier
//! run left there is removed, so either this job's list is there, complete, or none is. A file
//! there that is not such a list (no `# tcpx-perf: ` header, no `HOST tcpx-perf: ` lines) is not
//! the run's to replace or remove: the run is refused instead (docs/files.md).

use crate::report::{Health, NodeVerdict};
use crate::verdict::Thresholds;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write as _};
use std::path::PathBuf;

/// The longest footer line (the evidence is cut there; summary.json has it whole).
const LINE_MAX: usize = 200;

/// The footer's table: a count per verdict and one line per node that is not healthy, the
/// worst first; without verdicts, the line saying why none (`none_why`), or nothing.
pub fn footer(verdicts: &[NodeVerdict], shares: Thresholds, none_why: Option<&str>) -> String {
    if verdicts.is_empty() {
        return none_why.map_or(String::new(), |why| format!("# Node verdicts: none: {why}\n"));
    }
    let count = |h: Health| verdicts.iter().filter(|v| v.verdict == h).count();
    let mut counts = vec![format!("{} healthy", count(Health::Healthy))];
    for h in [Health::Suspect, Health::Bad] {
        if count(h) > 0 {
            counts.push(format!("{} {}", count(h), h.as_str()));
        }
    }
    let mut s = format!(
        "# Node verdicts: {} (a NIC side is suspect below {} and bad below {} of the median)\n",
        counts.join(", "),
        shares.suspect,
        shares.bad
    );
    let mut named: Vec<&NodeVerdict> = verdicts.iter().filter(|v| v.verdict != Health::Healthy).collect();
    named.sort_by_key(|v| std::cmp::Reverse(v.verdict));
    let width = named.iter().map(|v| v.host.chars().count()).max().unwrap_or(0);
    for v in named {
        let head = format!("#   {:<width$}  {:<7}  ", v.host, v.verdict.as_str());
        let room = LINE_MAX.saturating_sub(head.chars().count());
        let evidence: String = if v.evidence.chars().count() <= room {
            v.evidence.clone()
        } else {
            let cut: String = v.evidence.chars().take(room.saturating_sub(3)).collect();
            format!("{cut}...")
        };
        let _ = writeln!(s, "{head}{evidence}");
    }
    s
}

pub use tcpx_units::shorten;

/// The first line of every `--healthy-hostfile`, which marks it as tcpx-perf's.
const HOSTFILE_HEAD: &str = "# tcpx-perf: ";
/// What follows the host on every line of a `--drain-list`, which marks it as tcpx-perf's.
const DRAIN_MARK: &str = " tcpx-perf: ";

/// Whether a list may name `host`: a host name an Open MPI hostfile parses and `while read -r
/// node reason` takes as one word (letters, digits, `.`, `-`, `_`; a letter or digit first).
pub fn listable(host: &str) -> bool {
    host.len() <= 255
        && host.starts_with(|c: char| c.is_ascii_alphanumeric())
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The names of `hosts` no list can hold ([`listable`]), as Rust writes strings (quoted, a
/// line break as `\n`), comma-separated.
fn unlistable(hosts: &[&String]) -> String {
    hosts.iter().map(|h| format!("{h:?}")).collect::<Vec<_>>().join(", ")
}

/// `--healthy-hostfile`: `HOST slots=N` for each healthy node, N its ranks in this job, after a
/// comment line saying what the file is; a healthy node whose name no hostfile can hold
/// ([`listable`]) is left out, named in a comment line.
pub fn healthy_hostfile(verdicts: &[NodeVerdict], slots: &[(String, usize)], start_time: &str) -> String {
    let healthy: Vec<&(String, usize)> = slots
        .iter()
        .filter(|(h, _)| verdicts.iter().any(|v| &v.host == h && v.verdict == Health::Healthy))
        .collect();
    let mut s = format!(
        "{HOSTFILE_HEAD}the {} healthy node(s) of {} in the run started {start_time}\n",
        healthy.len(),
        slots.len()
    );
    let left: Vec<&String> = healthy.iter().map(|(h, _)| h).filter(|h| !listable(h)).collect();
    if !left.is_empty() {
        let _ = writeln!(
            s,
            "# left out, names an Open MPI hostfile cannot hold: {}",
            unlistable(&left)
        );
    }
    for (host, n) in healthy.into_iter().filter(|(h, _)| listable(h)) {
        let _ = writeln!(s, "{host} slots={n}");
    }
    s
}

/// `--drain-list`: each bad node, a space, the reason (one line, `tcpx-perf: ` and the
/// evidence), as `while read -r node reason` takes it; empty when no node is bad. A node whose
/// name is not one word ([`listable`]) is left out (the console says so).
pub fn drain_list(verdicts: &[NodeVerdict]) -> String {
    verdicts
        .iter()
        .filter(|v| v.verdict == Health::Bad && listable(&v.host))
        .map(|v| format!("{}{DRAIN_MARK}{}\n", v.host, v.evidence.replace(['\n', '\r'], " ")))
        .collect()
}

/// Whether `text` is a list tcpx-perf writes for `flag`: a hostfile starting with its header, a
/// drain list whose every line is `HOST tcpx-perf: ...`; an empty drain list only with tcpx-perf's
/// mark on the file (`marked`): an empty file says nothing of who wrote it (on 1dfe633 a
/// read-only empty file of someone else's was removed by a run that judged no node).
fn is_own_list(flag: &str, text: &str, marked: bool) -> bool {
    if flag == "--healthy-hostfile" {
        return text.starts_with(HOSTFILE_HEAD);
    }
    (!text.is_empty() || marked)
        && text.lines().all(|l| {
            l.split_once(DRAIN_MARK)
                .is_some_and(|(host, _)| !host.is_empty() && !host.contains(char::is_whitespace))
        })
}

/// The extended attribute every list tcpx-perf writes carries (its flag): how an empty drain
/// list is known as its own. Where the file system keeps no extended attributes, an empty list
/// is not recognised (the next run asks for it to be moved).
const LIST_MARK: &str = "user.tcpx-perf.list";

fn mark_list(flag: &str, path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(p), Ok(name)) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()),
        std::ffi::CString::new(LIST_MARK),
    ) else {
        return;
    };
    // SAFETY: two NUL-terminated strings and a buffer of ours; never follows a link.
    unsafe {
        libc::lsetxattr(p.as_ptr(), name.as_ptr(), flag.as_ptr().cast(), flag.len(), 0);
    }
}

fn is_marked(flag: &str, path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(p), Ok(name)) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()),
        std::ffi::CString::new(LIST_MARK),
    ) else {
        return false;
    };
    let mut buf = [0u8; 64];
    // SAFETY: as above, into a buffer of ours of the length given.
    let n = unsafe { libc::lgetxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).is_ok_and(|n| &buf[..n] == flag.as_bytes())
}

/// The lists asked for and where (`--healthy-hostfile`, `--drain-list`).
#[derive(Debug, Clone, Default)]
pub struct Lists {
    pub healthy_hostfile: Option<PathBuf>,
    pub drain_list: Option<PathBuf>,
}

impl Lists {
    fn each(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        [
            ("--healthy-hostfile", &self.healthy_hostfile),
            ("--drain-list", &self.drain_list),
        ]
        .into_iter()
        .filter_map(|(flag, p)| p.as_ref().map(|p| (flag, p)))
    }

    /// Before the run measures: each destination is claimed and proved writable (no directory
    /// is made), and a list an earlier run left there is removed (a run that judges nothing must
    /// not leave it looking like this job's); anything else there is refused, left as it was.
    /// Every error is one line naming the flag and the path.
    pub fn prepare(&self) -> io::Result<()> {
        for (flag, path) in self.each() {
            super::nccl_json::check_writable(flag, path)?;
            if own_or_absent(flag, path)? {
                match fs::remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("{flag} {}: cannot remove the earlier list: {e}", path.display()),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Writes the lists (nothing without verdicts: no list then, rather than a guess); the
    /// lines saying where, and which nodes no list could name.
    pub fn write(&self, verdicts: &[NodeVerdict], slots: &[(String, usize)], start_time: &str) -> io::Result<String> {
        let mut said = String::new();
        if verdicts.is_empty() {
            for (flag, path) in self.each() {
                let _ = writeln!(said, "# {flag} {}: not written, no node was judged", path.display());
            }
            return Ok(said);
        }
        for (flag, path) in self.each() {
            let (text, wanted) = if flag == "--drain-list" {
                (drain_list(verdicts), Health::Bad)
            } else {
                (healthy_hostfile(verdicts, slots, start_time), Health::Healthy)
            };
            // A file put there during the run is not this run's to replace.
            own_or_absent(flag, path)?;
            super::write_atomically(path, |w| {
                w.write_all(text.as_bytes())?;
                w.flush()?;
                w.get_ref().sync_all()
            })?;
            mark_list(flag, path);
            let _ = writeln!(said, "# {flag} written to {}", path.display());
            let left: Vec<&String> = verdicts
                .iter()
                .filter(|v| v.verdict == wanted && !listable(&v.host))
                .map(|v| &v.host)
                .collect();
            if !left.is_empty() {
                let _ = writeln!(
                    said,
                    "# {flag}: left out {} {} node(s) whose names no hostfile or `read` takes as one word: {}",
                    left.len(),
                    wanted.as_str(),
                    unlistable(&left)
                );
            }
        }
        Ok(said)
    }
}

/// Whether `path` holds a list of tcpx-perf's for `flag` (true: the run's own, to remove or
/// replace) or nothing (false); the refusal naming the flag when it holds anything else. Read
/// without blocking and bounded ([`tcpx_files::read`]).
fn own_or_absent(flag: &str, path: &std::path::Path) -> io::Result<bool> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{flag} {}: {e}", path.display()));
    tcpx_files::refuse_non_file(path).map_err(named)?;
    let bytes = match tcpx_files::read::read_own(path, tcpx_files::Bound::NODE_LIST) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(named(e)),
    };
    if is_own_list(flag, &String::from_utf8_lossy(&bytes), is_marked(flag, path)) {
        return Ok(true);
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{flag} {}: holds a file that is not a list tcpx-perf wrote: refusing to replace or remove it; move it away or choose another path",
            path.display()
        ),
    ))
}

/// The hostnames of the job in rank order, each with its number of ranks (a hostfile's slots).
pub fn slots(hostnames: impl IntoIterator<Item = String>) -> Vec<(String, usize)> {
    let mut slots: Vec<(String, usize)> = Vec::new();
    for h in hostnames {
        match slots.iter_mut().find(|(n, _)| *n == h) {
            Some((_, n)) => *n += 1,
            None => slots.push((h, 1)),
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(host: &str, verdict: Health, evidence: &str) -> NodeVerdict {
        NodeVerdict {
            host: host.into(),
            verdict,
            evidence: evidence.into(),
            decided_by: None,
            lowest_share: Some(0.9),
            slow_sides: Vec::new(),
        }
    }

    fn run() -> Vec<NodeVerdict> {
        vec![
            verdict("node0", Health::Healthy, "lowest NIC side at 0.91 of the median"),
            verdict("node1", Health::Suspect, "eth1 sending at 0.55 of the median"),
            verdict(
                "node2",
                Health::Bad,
                &format!("eth2 sending at 0.12 of the median{}", " x".repeat(150)),
            ),
            verdict("node3", Health::Healthy, "lowest NIC side at 0.88 of the median"),
        ]
    }

    #[test]
    fn the_footer_counts_the_healthy_and_lists_the_others_worst_first_in_short_lines() {
        let f = footer(&run(), Thresholds { suspect: 0.6, bad: 0.4 }, None);
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(
            lines[0],
            "# Node verdicts: 2 healthy, 1 suspect, 1 bad (a NIC side is suspect below 0.6 and bad below 0.4 of the median)"
        );
        assert!(
            lines[1].starts_with("#   node2  bad      eth2 sending at 0.12"),
            "{}",
            lines[1]
        );
        assert!(
            lines[1].ends_with("...") && lines[1].chars().count() == LINE_MAX,
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], "#   node1  suspect  eth1 sending at 0.55 of the median");
        assert_eq!(lines.len(), 3);
        assert_eq!(footer(&[], Thresholds::default(), None), "");
        assert_eq!(
            footer(&[], Thresholds::default(), Some("one node")),
            "# Node verdicts: none: one node\n"
        );
    }

    #[test]
    fn the_lists_hold_the_healthy_nodes_with_their_slots_and_the_bad_ones_with_a_reason() {
        let slots = slots(["node0", "node0", "node1", "node1", "node2", "node2", "node3", "node3"].map(String::from));
        let hostfile = healthy_hostfile(&run(), &slots, "2026-11-27T01:00:00Z");
        assert_eq!(
            hostfile,
            "# tcpx-perf: the 2 healthy node(s) of 4 in the run started 2026-11-27T01:00:00Z\nnode0 slots=2\nnode3 slots=2\n"
        );
        let drain = drain_list(&run());
        assert!(
            drain.starts_with("node2 tcpx-perf: eth2 sending at 0.12 of the median x"),
            "{drain}"
        );
        assert_eq!(drain.lines().count(), 1);
    }

    #[test]
    fn lists_are_written_whole_an_earlier_one_is_removed_first_and_none_without_verdicts() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let lists = Lists {
            healthy_hostfile: Some(dir.path().join("healthy")),
            drain_list: Some(dir.path().join("sub/drain")),
        };
        fs::write(dir.path().join("healthy"), "stale\n").expect("write");
        let e = lists.prepare().unwrap_err().to_string();
        assert!(e.contains("not a list tcpx-perf wrote"), "{e}");
        assert_eq!(fs::read_to_string(dir.path().join("healthy")).expect("kept"), "stale\n");
        fs::write(dir.path().join("healthy"), "# tcpx-perf: the 1 healthy node(s) of 1\n").expect("write");
        // An empty file says nothing of who wrote it: someone else's is refused, kept (issue 53).
        fs::write(dir.path().join("sub/drain"), "").expect("write");
        let e = lists.prepare().unwrap_err().to_string();
        assert!(
            e.contains("--drain-list") && e.contains("not a list tcpx-perf wrote"),
            "{e}"
        );
        assert!(dir.path().join("sub/drain").exists());
        // One tcpx-perf wrote (its mark on the file) is its own to remove.
        mark_list("--drain-list", &dir.path().join("sub/drain"));
        lists.prepare().expect("prepare");
        assert!(!dir.path().join("sub/drain").exists(), "the earlier empty list is gone");
        assert!(!dir.path().join("healthy").exists(), "the earlier list is gone");
        let said = lists.write(&[], &[], "t").expect("write");
        assert!(said.contains("not written, no node was judged"), "{said}");
        assert!(!dir.path().join("healthy").exists() && !dir.path().join("sub/drain").exists());
        let slots = slots(["node0", "node1", "node2", "node3"].map(String::from));
        lists.write(&run(), &slots, "t").expect("write");
        let hostfile = fs::read_to_string(dir.path().join("healthy")).expect("hostfile");
        assert!(hostfile.ends_with("node0 slots=1\nnode3 slots=1\n"), "{hostfile}");
        assert!(fs::read_to_string(dir.path().join("sub/drain"))
            .expect("drain")
            .starts_with("node2 "));
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temporary left: {names:?}");
        let bad = Lists {
            drain_list: Some(dir.path().to_path_buf()),
            ..Lists::default()
        };
        let e = bad.prepare().unwrap_err().to_string();
        assert!(
            e.starts_with("--drain-list ") && e.contains("a directory, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_name_no_list_can_hold_is_left_out_and_a_list_is_known_by_its_marks() {
        let mut v = run();
        v[0].host = "node 0".into();
        let slots = slots(["node 0", "node3"].map(String::from));
        let hostfile = healthy_hostfile(&v, &slots, "t");
        assert!(
            hostfile.ends_with("# left out, names an Open MPI hostfile cannot hold: \"node 0\"\nnode3 slots=1\n"),
            "{hostfile}"
        );
        for (host, ok) in [
            ("node-1.a_b", true),
            ("a b", false),
            ("a\"b", false),
            ("-x", false),
            ("", false),
            ("n\nx", false),
        ] {
            assert_eq!(listable(host), ok, "{host:?}");
        }
        // An empty drain list is tcpx-perf's only with its mark (issue 53).
        assert!(is_own_list("--drain-list", "", true));
        assert!(!is_own_list("--drain-list", "", false));
        assert!(is_own_list(
            "--drain-list",
            "node2 tcpx-perf: eth1 slow\nnode5 tcpx-perf: x\n",
            false
        ));
        assert!(!is_own_list(
            "--drain-list",
            "node2 tcpx-perf: eth1 slow\nmy notes\n",
            true
        ));
        assert!(!is_own_list("--drain-list", " tcpx-perf: x\n", true));
        assert!(is_own_list(
            "--healthy-hostfile",
            "# tcpx-perf: the 2 healthy node(s)\n",
            false
        ));
        assert!(!is_own_list("--healthy-hostfile", "node0 slots=8\n", true));
    }
}
