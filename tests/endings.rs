//! Every ending keeps what was measured: SIGTERM and SIGINT (to mpirun and to one rank), a rank
//! that stops (SIGSTOP) under `-T`, a rank killed with SIGKILL, an `--out` that cannot be written
//! and one that fills up. Real `mpirun`, real ranks, real tcpx-emu sockets; each test asserts the
//! exit status, the message and what is on disk.
//!
//! The sweep is slowed with tcpx-emu's own `slow` fault (1 ms per chunk) so that a signal lands
//! in the middle of it: each test waits until results.csv holds two sizes, then strikes.

mod common;
use common::{mpirun_command, show, spawn_piped, summary, wait_within};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");
/// Seven sizes, slow enough (about 2 s in all on 4 ranks of 2 cores) to strike mid-way.
const SLOW_SWEEP: &str = "--pattern sendrecv -b 64K -e 4M -n 150 -w 1 --progress never";
const SIZES: usize = 7;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-perf-endings-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn mpirun(np: usize, args: &str, out: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = mpirun_command();
    cmd.arg("-np").arg(np.to_string()).arg(BIN);
    cmd.args(args.split_whitespace()).arg("--out").arg(out);
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn spawn(mut cmd: Command) -> Child {
    spawn_piped(&mut cmd, "mpirun")
}

/// Waits for mpirun to end within `limit` (killing it and failing otherwise).
fn finish(child: Child, limit: Duration) -> Output {
    wait_within(child, limit, "mpirun")
}

/// Data rows of results.csv (0 when it does not exist yet).
fn rows(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("results.csv")).map_or(0, |t| t.lines().count().saturating_sub(1))
}

/// Waits until results.csv holds `n` sizes: the sweep is under way and has results to lose.
fn wait_for_rows(child: &mut Child, dir: &Path, n: usize) {
    let start = Instant::now();
    while rows(dir) < n {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("mpirun ended ({status}) before results.csv had {n} rows");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "results.csv never had {n} rows in {}: sizes are not written as they are measured",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid of `rank` among mpirun's children.
fn rank_pid(mpirun: &Child, rank: usize) -> i32 {
    rank_pid_under(mpirun.id() as i32, rank)
}

/// The pid of `rank` among the children of `mpirun` (a pid).
fn rank_pid_under(mpirun: i32, rank: usize) -> i32 {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for pid in children(mpirun) {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return pid;
        }
    }
    panic!("no process of rank {rank} under mpirun {mpirun}");
}

/// The processes whose parent is `parent`.
fn children(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1));
        if ppid == Some(&parent.to_string()) {
            found.push(pid);
        }
    }
    found
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: sends a signal to a process this test started (through mpirun).
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill({pid}, {signal})");
}

/// What every early ending leaves: every finished size in results.csv, as many as summary.json
/// says were done, fewer than planned, and `complete: false`.
fn assert_partial(dir: &Path, o: &Output) -> serde_json::Value {
    let s = summary(dir);
    let done = s["sizes_done"].as_u64().expect("sizes_done") as usize;
    assert!((2..SIZES).contains(&done), "sizes_done {done}\n{}", show(o));
    assert_eq!(rows(dir), done, "results.csv has every finished size\n{}", show(o));
    assert_eq!(s["sizes_planned"], SIZES);
    assert_eq!(s["complete"], false, "{}", show(o));
    assert_eq!(s["results"].as_array().map(Vec::len), Some(done));
    s
}

/// `interrupted` by `signal`, said in summary.json and on stderr with the sizes done; the sender
/// the record names (`mpirun (pid 4242)`).
fn assert_interrupted(dir: &Path, o: &Output, s: &serde_json::Value, signal: &str) -> String {
    assert_eq!(s["status"], "interrupted", "{}", show(o));
    assert_eq!(s["signal"], signal);
    let error = s["error"].as_str().unwrap_or_default();
    // Rank 0 signalled by a process other than mpirun is named as the rank signalled.
    let rank_0 = format!("rank 0 ({}) ", hostname());
    let from = error
        .strip_prefix(&rank_0)
        .unwrap_or(error)
        .strip_prefix(&format!("interrupted by {signal} from "))
        .unwrap_or_else(|| panic!("error names no sender: {error}"));
    let said = format!(
        "tcpx-perf: {error} after {} of {SIZES} sizes; every size measured is in {}",
        s["sizes_done"],
        dir.display()
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains(&said), "{}", show(o));
    from.to_string()
}

/// One struck job at a time: each times how fast its ranks end (rank 0 has the others' one-second
/// linger to write), and a second 4-rank job on a 2-core host would eat into that.
static ONE_JOB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A slow sweep on 4 ranks, struck by `signal` sent to `target` (None: mpirun itself) once two
/// sizes are on disk.
fn strike(name: &str, signal: i32, target: Option<usize>, extra: &str) -> (PathBuf, Output, Duration) {
    strike_with(name, signal, target, extra, &[])
}

/// As [`strike`], with more of tcpx-emu's environment (`TCPXEMU_THREADS=shared`).
fn strike_with(
    name: &str,
    signal: i32,
    target: Option<usize>,
    extra: &str,
    env: &[(&str, &str)],
) -> (PathBuf, Output, Duration) {
    let _alone = alone();
    let dir = scratch(name);
    let mut env = env.to_vec();
    env.push(("TCPXEMU_FAULT", "slow"));
    let mut child = spawn(mpirun(4, &format!("{SLOW_SWEEP} {extra}"), &dir, &env));
    wait_for_rows(&mut child, &dir, 2);
    let struck = Instant::now();
    kill(target.map_or(child.id() as i32, |r| rank_pid(&child, r)), signal);
    let o = finish(child, Duration::from_secs(30));
    (dir, o, struck.elapsed())
}

/// Slurm and Kubernetes end jobs with SIGTERM; mpirun turns SIGTERM and SIGINT into SIGTERM for
/// every rank a second later, sends SIGKILL as soon as any rank exits, and itself exits 1 (Open
/// MPI 4.1). The other ranks linger, so rank 0 always writes `interrupted` first (before they did,
/// about 1 run in 12 left `running`: a rank's exit set off the SIGKILL within milliseconds).
#[test]
fn sigterm_to_mpirun_keeps_every_finished_size() {
    let (dir, o, took) = strike("term-mpirun", libc::SIGTERM, None, "-T 20");
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    // Whoever pressed Ctrl-C or sent SIGTERM, the ranks hear it from mpirun: the record says so.
    let from = assert_interrupted(&dir, &o, &s, "SIGTERM");
    assert!(from.starts_with("mpirun (pid "), "{s}");
    // Every rank answered mpirun's SIGTERM: no rank is to blame.
    assert!(s.get("failure").is_none(), "{s}");
    assert!(
        took < Duration::from_secs(5),
        "mpirun's second, then rank 0's write: took {took:?}"
    );
}

/// mpirun's way of ending a job, played fast: SIGTERM to every rank at once, then SIGKILL to all
/// the moment any one exits. Rank 0 must be that one, with `interrupted` on disk; the others wait
/// for it (before, they exited first and rank 0 died before it wrote, about 1 run in 12).
#[test]
fn after_sigterm_to_every_rank_rank_0_exits_first() {
    let _alone = alone();
    let dir = scratch("term-all");
    let mut child = spawn(mpirun(
        4,
        &format!("{SLOW_SWEEP} -T 20"),
        &dir,
        &[("TCPXEMU_FAULT", "slow")],
    ));
    wait_for_rows(&mut child, &dir, 2);
    let pids: Vec<i32> = (0..4).map(|r| rank_pid(&child, r)).collect();
    for &pid in &pids {
        kill(pid, libc::SIGTERM);
    }
    let start = Instant::now();
    let first = loop {
        if let Some(rank) = pids.iter().position(|&pid| has_exited(pid)) {
            break rank;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no rank exited after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    for &pid in &pids {
        // SAFETY: SIGKILL to processes this test started; one may be gone already.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let o = finish(child, Duration::from_secs(30));
    assert_eq!(
        first,
        0,
        "rank {first} exited before rank 0 wrote its record\n{}",
        show(&o)
    );
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "interrupted", "{}", show(&o));
}

/// `pid` has ended (a zombie waiting for mpirun to reap it counts).
fn has_exited(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) == Some("Z")
    })
}

/// Ctrl-C on a rank (as srun delivers it to every task): the rank exits 128 + 2, which mpirun
/// returns as the job's status.
#[test]
fn sigint_to_rank_0_exits_130_with_the_sizes_done() {
    let (dir, o, took) = strike("int-rank0", libc::SIGINT, Some(0), "-T 20");
    assert_eq!(o.status.code(), Some(130), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    let from = assert_interrupted(&dir, &o, &s, "SIGINT");
    assert!(
        from.ends_with(&format!("(pid {})", std::process::id())),
        "the sender is this test: {s}"
    );
    assert_culprit(&s, &o, 0, &["signalled"]);
    assert!(took < Duration::from_secs(5), "every rank stops at once, took {took:?}");
}

/// SIGTERM to one other rank (from this test, not its launcher): it stops, exits 143 a second
/// later (its linger), mpirun ends the job with that status, and rank 0 still writes what was
/// measured, naming rank 2 and this test as the sender.
#[test]
fn sigterm_to_one_rank_exits_143() {
    let (dir, o, took) = strike("term-rank2", libc::SIGTERM, Some(2), "-T 20");
    assert_eq!(o.status.code(), Some(143), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "interrupted", "{}", show(&o));
    let c = assert_culprit(&s, &o, 2, &["signalled"]);
    let sender = format!("(pid {})", std::process::id());
    assert!(c["sender"].as_str().is_some_and(|f| f.ends_with(&sender)), "{s}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// summary.json's `failure.culprit` is `rank` on this host for one of `reasons`, and `error`
/// says so first; the culprit.
fn assert_culprit(s: &serde_json::Value, o: &Output, rank: usize, reasons: &[&str]) -> serde_json::Value {
    let c = &s["failure"]["culprit"];
    assert_eq!(c["rank"], rank, "the culprit: {s}\n{}", show(o));
    assert_eq!(s["failure"]["rank"], rank, "{s}");
    assert_eq!(c["host"], hostname().as_str(), "{s}");
    let reason = c["reason"].as_str().unwrap_or_default();
    assert!(
        reasons.contains(&reason),
        "reason {reason}, not one of {reasons:?}: {s}"
    );
    let error = s["error"].as_str().unwrap_or_default();
    if s["status"] != "timeout" {
        assert!(
            error.starts_with(&format!("rank {rank} ({}", hostname())),
            "error names the culprit first: {error}"
        );
    }
    c.clone()
}

/// A rank that stops (SIGSTOP) hangs every other: after -T, rank 0 names it, writes
/// `status: "timeout"` with the diagnosis, and the job exits 3.
#[test]
fn a_stopped_rank_is_a_timeout_naming_it() {
    let (dir, o, took) = strike("stop-rank2", libc::SIGSTOP, Some(2), "-T 2");
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "timeout", "{}", show(&o));
    let t = &s["timeout"];
    assert_eq!(t["limit_s"], 2);
    // Rank 2 is always named; under load a stalled partner may answer after the grace too.
    let silent = t["silent_ranks"].as_array().expect("silent_ranks");
    assert!(silent.contains(&serde_json::json!(2)), "{s}\n{}", show(&o));
    let absent = t["absent_ranks"].as_array().expect("absent_ranks");
    assert!(absent.is_empty() || absent.contains(&serde_json::json!(2)), "{s}");
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("tcpx-perf: timeout: "))
        .unwrap_or_else(|| panic!("no diagnosis line\n{}", show(&o)));
    assert!(line.contains("rank(s) 2 did not"), "{line}");
    // -T 2 s, then up to 2 s for the accounts: well before the old watchdog's -T + 10 s.
    assert!(took < Duration::from_secs(9), "took {took:?}\n{}", show(&o));
}

/// kill -9 of rank 2: it has no chance to speak; the others' errors blame it, or it does not
/// answer mpirun's SIGTERM as they do. Rank 2 is the culprit, never a living rank, and the
/// record says `failed` (before: often `interrupted by SIGTERM from mpirun`, rank 2 unnamed).
#[test]
fn a_killed_rank_is_named_by_its_own_number() {
    let (dir, o, _) = strike("kill-rank2", libc::SIGKILL, Some(2), "-T 20");
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "failed", "{}", show(&o));
    assert_culprit(&s, &o, 2, &["killed", "silent"]);
}

/// The same with tcpx-emu's shared helper threads (`TCPXEMU_THREADS=shared`), where the
/// survivors seldom see the dead peer before mpirun's SIGTERM: before, summary.json said
/// `interrupted by SIGTERM from mpirun` and never named rank 2.
#[test]
fn a_killed_rank_is_named_in_shared_thread_mode() {
    let (dir, o, _) = strike_with(
        "kill-rank2-shared",
        libc::SIGKILL,
        Some(2),
        "-T 20",
        &[("TCPXEMU_THREADS", "shared")],
    );
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "failed", "{}", show(&o));
    assert_culprit(&s, &o, 2, &["killed", "silent"]);
}

/// A result directory that cannot be made: one line naming the path, exit 1, and no size
/// measured (the table has no row).
#[test]
fn unwritable_out_fails_before_any_data_moves() {
    let base = scratch("unwritable");
    std::fs::create_dir_all(&base).expect("scratch");
    let file = base.join("a-file");
    std::fs::write(&file, "").expect("file");
    let mut targets = vec![file.join("run")];
    // A read-only bind mount where the tests may mount (root in CI).
    let ro = base.join("ro");
    std::fs::create_dir_all(&ro).expect("ro");
    let mounted = Command::new("mount")
        .args(["--bind", "-o", "ro"])
        .arg(&base)
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        targets.push(ro.join("run"));
    }
    for out in &targets {
        let start = Instant::now();
        let o = finish(
            spawn(mpirun(4, "-b 64K -e 4M -n 3 -w 1 --progress never -T 20", out, &[])),
            Duration::from_secs(30),
        );
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("tcpx-perf")).collect();
        assert!(
            ours.len() == 1 && ours[0].contains(&out.display().to_string()) && ours[0].contains("--out"),
            "one line naming the path and the flag\n{}",
            show(&o)
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            !stdout.lines().any(|l| l.trim_start().starts_with("65536")),
            "a size was measured before the directory was checked\n{}",
            show(&o)
        );
        assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    }
    if mounted {
        let _ = Command::new("umount").arg(&ro).status();
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A disk that fills up mid-run: the error names the file, the run exits 1, and nothing on disk
/// or on stdout says complete.
#[test]
fn a_full_out_never_says_complete() {
    let base = scratch("full");
    std::fs::create_dir_all(&base).expect("scratch");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tcpx-perf-full"])
        .arg(&base)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    }
    let out = base.join("run");
    let o = finish(
        spawn(mpirun(4, "-b 64K -e 4M -n 20 -w 1 --progress never -T 20", &out, &[])),
        Duration::from_secs(30),
    );
    let on_disk = std::fs::read_to_string(out.join("summary.json")).ok();
    let _ = Command::new("umount").arg(&base).status();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("cannot write {}/", out.display())) && err.contains("No space left"),
        "the error names the file\n{}",
        show(&o)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        !stdout.contains("# Results written") && !err.contains("are complete"),
        "{}",
        show(&o)
    );
    if let Some(text) = on_disk {
        let s: serde_json::Value = serde_json::from_str(&text).expect("summary.json is whole");
        assert_eq!(s["complete"], false, "{s}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// This host's name, as MPI names the ranks' nodes (every rank of these tests runs here).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string()
}

/// A 4-rank job in which tcpx-emu's every `accept` fails (on `rank` only, or on all); what it
/// leaves: summary.json, which must exist.
fn failing_at_accept(name: &str, pattern: &str, rank: Option<usize>) -> (PathBuf, Output, serde_json::Value) {
    let _alone = alone();
    let dir = scratch(name);
    let rank_s = rank.map(|r| r.to_string());
    let mut env = vec![("TCPXEMU_FAULT", "accept")];
    if let Some(r) = &rank_s {
        env.push(("TCPXEMU_FAULT_RANK", r.as_str()));
    }
    let start = Instant::now();
    let args = format!("--pattern {pattern} -b 64K -e 1M -n 5 -w 1 --progress never -T 20");
    let o = finish(spawn(mpirun(4, &args, &dir, &env)), Duration::from_secs(40));
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "a failure at setup ends the job at once, not after -T: {:?}\n{}",
        start.elapsed(),
        show(&o)
    );
    assert!(
        dir.join("summary.json").exists(),
        "a failure at setup leaves summary.json in {}\n{}",
        dir.display(),
        show(&o)
    );
    let s = summary(&dir);
    assert_eq!(s["complete"], false, "{}", show(&o));
    assert_eq!(s["sizes_done"], 0, "{s}");
    assert_eq!(s["status"], "failed", "{s}\n{}", show(&o));
    (dir, o, s)
}

/// The record of `rank`'s accept failure: rank, host, phase and its own words, in `failure` and
/// in `error`; and rank 0's stderr names it too.
fn assert_names(s: &serde_json::Value, o: &Output, rank: usize) {
    let f = &s["failure"];
    assert_eq!(f["rank"], rank, "{s}\n{}", show(o));
    assert_eq!(f["host"], hostname().as_str(), "{s}");
    assert_eq!(f["phase"], "connect", "{s}");
    assert!(
        f["error"].as_str().unwrap_or("").contains("TCPXEMU_FAULT=accept"),
        "{s}"
    );
    let error = s["error"].as_str().expect("error");
    let named = format!("rank {rank} ({}) failed in connect: ", hostname());
    assert!(error.starts_with(&named), "{error}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines().any(|l| l.starts_with("tcpx-perf") && l.contains(&named)),
        "rank 0 says who failed first\n{}",
        show(o)
    );
}

/// Rank 2 fails at setup; in a ring of 4 rank 0 is not its neighbour, so rank 0's own comms are
/// fine and it waits in the next collective until mpirun, told of rank 2's abort, sends it
/// SIGTERM. The record names rank 2 (before: `interrupted by SIGTERM from mpirun`, the cause
/// lost), the signal at most as what followed.
#[test]
fn a_rank_failing_at_setup_is_the_record_even_after_mpiruns_sigterm() {
    let (_, o, s) = failing_at_accept("accept-rank2", "ring", Some(2));
    assert_names(&s, &o, 2);
    if let Some(then) = s["failure"]["then"].as_str() {
        assert!(
            then.starts_with("interrupted by SIGTERM") || then.starts_with("rank 0: "),
            "{s}"
        );
    }
    assert!(s.get("signal").is_none(), "status failed, not interrupted: {s}");
}

/// Rank 1 fails at setup where rank 0 connects to it: rank 0's own connect may fail too, as a
/// consequence, or wait; rank 1 is the cause either way.
#[test]
fn a_failing_neighbour_of_rank_0_is_the_cause_not_rank_0() {
    let (_, o, s) = failing_at_accept("accept-rank1", "ring", Some(1));
    assert_names(&s, &o, 1);
}

/// Every rank fails at setup (the accept errors seen at 8 x 8 x 4): the folder still has
/// summary.json (before: empty), naming a failing rank and its error.
#[test]
fn every_rank_failing_at_setup_still_writes_summary_json() {
    let (_, o, s) = failing_at_accept("accept-all", "fullmesh", None);
    let rank = s["failure"]["rank"].as_u64().expect("failure.rank") as usize;
    assert!(rank < 4, "{s}");
    assert_names(&s, &o, rank);
}

/// SIGTERM to rank 2 from a plain process (a shell, not the launcher): rank 2 names the sender
/// by its command and pid on stderr, once, and tells rank 0 before it stops, so that neither
/// the job's output nor summary.json leaves mpirun (whose SIGTERM is all rank 0 hears as the
/// job ends) as the only sender named; rank 2 still exits 143.
#[test]
fn a_signal_from_a_plain_process_is_named_by_its_command() {
    let _alone = alone();
    let dir = scratch("term-by-sh");
    let mut child = spawn(mpirun(
        4,
        &format!("{SLOW_SWEEP} -T 20"),
        &dir,
        &[("TCPXEMU_FAULT", "slow")],
    ));
    wait_for_rows(&mut child, &dir, 2);
    let target = rank_pid(&child, 2);
    let mpirun_pid = child.id();
    let (o, sh_pid) = sigterm_from_sh(child, target);
    assert_eq!(o.status.code(), Some(143), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let named: Vec<&str> = err.lines().filter(|l| l.starts_with("tcpx-perf: rank 2: ")).collect();
    assert_eq!(
        named,
        [format!(
            "tcpx-perf: rank 2: SIGTERM from sh (pid {sh_pid}): this rank stops, and mpirun then ends the job"
        )],
        "{}",
        show(&o)
    );
    assert!(
        !err.lines()
            .any(|l| l.starts_with("tcpx-perf: rank ") && l.contains(": SIGTERM from mpirun")),
        "no rank reports mpirun's own SIGTERM: {}",
        show(&o)
    );
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "interrupted", "{}", show(&o));
    assert_eq!(s["signal"], "SIGTERM");
    let error = s["error"].as_str().unwrap_or_default();
    let cause = format!(
        "rank 2 ({}) interrupted by SIGTERM from sh (pid {}); then SIGTERM from mpirun (pid {})",
        hostname(),
        sh_pid,
        mpirun_pid
    );
    assert_eq!(error, cause, "{}", show(&o));
}

/// SIGTERM from `sh` to rank 2 while every rank is still connecting (tcpx-emu's accept made
/// to take 8 s with `TCPXEMU_FLOW_STEERING_MS`): the main thread waits for its setup workers
/// there, and must still tell rank 0 (before, summary.json said `interrupted by SIGTERM from
/// mpirun`; only rank 2's stderr named sh).
#[test]
fn a_signal_from_sh_during_connect_names_sh_and_the_rank() {
    let _alone = alone();
    let dir = scratch("term-by-sh-connect");
    let env = [("TCPXEMU_FLOW_STEERING_MS", "8000")];
    let mut child = spawn(mpirun(4, &format!("{SLOW_SWEEP} -T 20"), &dir, &env));
    let start = Instant::now();
    // The result directory exists once rank 0 has announced the run: connect comes next.
    while !dir.exists() {
        assert!(child.try_wait().expect("wait").is_none(), "mpirun ended before connect");
        assert!(start.elapsed() < Duration::from_secs(20), "no result directory");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let target = rank_pid(&child, 2);
    let (o, sh_pid) = sigterm_from_sh(child, target);
    assert_eq!(o.status.code(), Some(143), "{}", show(&o));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "ended in connect, not after it\n{}",
        show(&o)
    );
    let s = summary(&dir);
    assert_eq!(
        (s["status"].as_str(), s["sizes_done"].as_u64()),
        (Some("interrupted"), Some(0)),
        "{s}"
    );
    let c = assert_culprit(&s, &o, 2, &["signalled"]);
    assert_eq!(c["sender"], format!("sh (pid {sh_pid})"), "{s}");
    assert_eq!(c["phase"], "connect", "{s}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!(
            "rank 2 ({}) interrupted by SIGTERM from sh (pid {})",
            hostname(),
            sh_pid
        )),
        "{error}"
    );
}

/// Ctrl-C at a terminal running `timeout 60 mpirun ...`: SIGINT to the foreground process group,
/// which holds timeout and mpirun but no rank (Open MPI puts each in a group of its own). mpirun
/// gets it twice (the terminal's, and the one timeout forwards to its group), takes the second
/// as "forcibly terminate" and exits at once, signalling no rank: before the ranks asked for
/// SIGTERM on their launcher's exit, rank 0 died of its broken stdout and left
/// `status: "running"` (9 of 10 trials). The ranks' ends are awaited, then the record read.
#[test]
fn ctrl_c_through_timeout_says_interrupted() {
    use std::os::unix::process::CommandExt;
    let _alone = alone();
    let dir = scratch("ctrl-c-timeout");
    let inner = mpirun(4, &format!("{SLOW_SWEEP} -T 20"), &dir, &[("TCPXEMU_FAULT", "slow")]);
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(inner.get_program()).args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    // A process group of its own, as a terminal's foreground job has.
    cmd.process_group(0);
    let mut child = spawn(cmd);
    wait_for_rows(&mut child, &dir, 2);
    let mpirun_pid = *children(child.id() as i32).first().expect("mpirun under timeout");
    let ranks: Vec<i32> = (0..4).map(|r| rank_pid_under(mpirun_pid, r)).collect();
    kill(-(child.id() as i32), libc::SIGINT);
    let o = finish(child, Duration::from_secs(30));
    let start = Instant::now();
    while !ranks.iter().all(|&pid| has_exited(pid)) {
        if start.elapsed() > Duration::from_secs(10) {
            for &pid in &ranks {
                // SAFETY: SIGKILL to processes this test started; some may be gone already.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("ranks left running 10 s after mpirun ended\n{}", show(&o));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = assert_partial(&dir, &o);
    assert_eq!(s["status"], "interrupted", "{}", show(&o));
    assert_eq!(s["signal"], "SIGTERM", "{s}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("interrupted by SIGTERM from "), "{error}");
}

/// A stopped rank 0 (SIGSTOP) cannot write summary.json: the other ranks, finding it absent
/// after -T and the job not ended by it after their grace, name it and its host on stderr.
#[test]
fn a_stopped_rank_0_is_named_by_the_others() {
    let _alone = alone();
    let dir = scratch("stop-rank0");
    let mut child = spawn(mpirun(
        4,
        &format!("{SLOW_SWEEP} -T 3"),
        &dir,
        &[("TCPXEMU_FAULT", "slow")],
    ));
    wait_for_rows(&mut child, &dir, 2);
    let rank0 = rank_pid(&child, 0);
    let struck = Instant::now();
    kill(rank0, libc::SIGSTOP);
    let o = finish(child, Duration::from_secs(40));
    let took = struck.elapsed();
    // SAFETY: SIGKILL to a process this test started; it may be gone already.
    unsafe { libc::kill(rank0, libc::SIGKILL) };
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let said = format!("timeout: rank 0 ({}) did not arrive within -T 3 s", hostname());
    assert!(
        err.lines()
            .any(|l| l.starts_with("tcpx-perf: rank ") && l.contains(&said)),
        "no rank named rank 0\n{}",
        show(&o)
    );
    // -T 3 s, then the other ranks' 2 x 3 s grace and 5 s: about 14 s.
    assert!(took < Duration::from_secs(25), "took {took:?}\n{}", show(&o));
    // Continued by mpirun as it ends the job, rank 0 knows it was stopped: summary.json names
    // it too (before: `timeout` with no rank absent or silent).
    let s = summary(&dir);
    assert_eq!(s["status"], "timeout", "{s}\n{}", show(&o));
    assert_eq!(s["complete"], false);
    for list in ["absent_ranks", "silent_ranks"] {
        assert_eq!(s["timeout"][list], serde_json::json!([0]), "{list}: {s}");
    }
    assert_culprit(&s, &o, 0, &["silent"]);
    let error = s["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("timeout: rank(s) 0 did not arrive within -T 3 s and did not answer"),
        "{error}"
    );
}

/// SIGTERM to `target` from a plain `sh` that stays a while (as a person's shell or a script
/// would), then the job's end and the shell's pid.
fn sigterm_from_sh(child: Child, target: i32) -> (Output, u32) {
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -TERM {target}; sleep 5"))
        .spawn()
        .expect("sh");
    let o = finish(child, Duration::from_secs(30));
    let _ = sh.kill();
    let _ = sh.wait();
    (o, sh.id())
}
