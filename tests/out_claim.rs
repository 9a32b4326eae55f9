//! One job per result directory (`--out`): two real `mpirun` jobs started together on one
//! directory, one refused naming the other, the directory holding one run; a claim left by a job
//! that is gone is taken over. Real ranks, real tcpx-emu sockets, real file locks. And what
//! tcpx-perf writes never goes through a link, is whole or absent on a full disk (`--plan-json`),
//! and a closed pipe does not turn an exit status into a panic; the node lists replace or remove
//! only their own files, no two outputs of a run share a path, none makes a directory, and the
//! healthy hostfile holds only names Open MPI parses (issue 44, docs/files.md).

mod common;
use common::{mpirun_command, show, spawn_piped, summary, wait_within, SmallTmpfs};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");
/// The claim file (`tcpx_perf::export::claim::CLAIM_FILE`).
const CLAIM_FILE: &str = ".tcpx-perf-claim";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-perf-claim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn job(args: &str, out: &Path) -> Command {
    let mut cmd = mpirun_command();
    cmd.args(["-np", "2", BIN])
        .args(args.split_whitespace())
        .arg("--out")
        .arg(out);
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two jobs on one `--out`, started together (each slowed by tcpx-emu's `slow` fault so that
/// they overlap): exactly one runs and exits 0; the other exits 1 with one line naming the
/// winner as its claim file does (host, pid, start time) and writes nothing; the directory holds
/// the winner's run alone (its `-n`, every size once, complete).
#[test]
fn two_jobs_on_one_out_one_is_refused_naming_the_other() {
    let out = scratch("two");
    let sweep = "--pattern sendrecv -b 64K -e 1M -w 1 --progress never -T 30";
    // About 4 s each: the loser's setup ends long before the winner's sweep.
    let iters = [300, 301];
    let mut jobs: Vec<_> = iters
        .iter()
        .map(|n| {
            let mut c = job(&format!("{sweep} -n {n}"), &out);
            c.env("TCPXEMU_FAULT", "slow");
            spawn_piped(&mut c, "mpirun")
        })
        .collect();
    let b = wait_within(jobs.pop().unwrap(), Duration::from_secs(60), "second job");
    let a = wait_within(jobs.pop().unwrap(), Duration::from_secs(60), "first job");
    let both = format!("first job:\n{}\nsecond job:\n{}", show(&a), show(&b));
    let codes = (a.status.code(), b.status.code());
    let (won, lost, n) = match codes {
        (Some(0), Some(1)) => (&a, &b, iters[0]),
        (Some(1), Some(0)) => (&b, &a, iters[1]),
        _ => panic!("one job must run (0) and one be refused (1), not {codes:?}\n{both}"),
    };
    let holder = std::fs::read_to_string(out.join(CLAIM_FILE)).expect("the claim file stays");
    let holder = holder.trim();
    assert!(
        holder.starts_with("host ") && holder.contains(", pid ") && holder.contains(", started "),
        "{holder}"
    );
    let refusal = format!(
        "tcpx-perf: rank 0: error: result directory {} is in use by another job ({holder}): wait for it to end, or choose another --out",
        out.display()
    );
    let said: Vec<String> = stderr(lost)
        .lines()
        .filter(|l| l.starts_with("tcpx-perf"))
        .map(String::from)
        .collect();
    assert_eq!(said, [refusal], "one line naming the holder\n{both}");
    assert!(
        !String::from_utf8_lossy(&lost.stdout).contains("# Results written to"),
        "{both}"
    );
    assert!(
        String::from_utf8_lossy(&won.stdout).contains("# Results written to"),
        "{both}"
    );
    let s = summary(&out);
    assert_eq!(s["complete"], true, "{both}");
    assert_eq!(s["iters"], n, "the directory holds the winner's run\n{both}");
    let rows = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    assert_eq!(rows.lines().count(), 1 + 5, "5 sizes, each once\n{both}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A claim whose job is gone (its file unlocked: a `kill -9`, a crash) is taken over: the run
/// goes ahead, the header says whose claim it took, and the claim file now names this job.
#[test]
fn a_stale_claim_is_taken_over() {
    let out = scratch("stale");
    std::fs::create_dir_all(&out).unwrap();
    let gone = "host elsewhere, pid 999999, started 2026-01-01T00:00:00Z";
    std::fs::write(out.join(CLAIM_FILE), format!("{gone}\n")).unwrap();
    let mut c = job("--pattern sendrecv -b 1M -e 1M -n 2 -w 1", &out);
    let o = wait_within(spawn_piped(&mut c, "mpirun"), Duration::from_secs(60), "mpirun");
    assert!(o.status.success(), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!(
            "# note: {} held a claim of a job that is gone ({gone}); this job took it over",
            out.display()
        )),
        "{}",
        show(&o)
    );
    let now = std::fs::read_to_string(out.join(CLAIM_FILE)).unwrap();
    assert!(!now.contains("999999") && now.contains(", pid "), "{now}");
    assert_eq!(summary(&out)["complete"], true);
    let _ = std::fs::remove_dir_all(&out);
}

/// The `tcpx-perf` lines a job printed on stderr.
fn said(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("tcpx-perf"))
        .map(String::from)
        .collect()
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A claim file that is a symbolic link, to a file elsewhere or dangling, is refused in one line
/// naming it (exit 1): the file it points to is neither read, overwritten nor created, and the
/// directory keeps just the link. (Before: the victim was overwritten with the job's line, its
/// old first line printed as a stale claim, exit 0; a dangling link created its target.)
#[test]
fn a_claim_file_that_is_a_link_is_refused_and_nothing_is_written_through_it() {
    let base = scratch("link");
    let out = base.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let victim = base.join("victim");
    std::fs::write(&victim, "root:x:0:0:precious\n").unwrap();
    let outside = base.join("created-outside");
    for target in [&victim, &outside] {
        let link = out.join(CLAIM_FILE);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
        let mut c = job("--pattern sendrecv -b 1M -e 1M -n 2 -w 1", &out);
        let o = wait_within(spawn_piped(&mut c, "mpirun"), Duration::from_secs(60), "mpirun");
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        assert_eq!(
            said(&o),
            [format!(
                "tcpx-perf: rank 0: error: {} is a symbolic link, not a file: refusing to write through it; remove it or choose another path",
                link.display()
            )],
            "{}",
            show(&o)
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains("precious"), "{}", show(&o));
        assert_eq!(entries(&out), [CLAIM_FILE], "nothing written in --out\n{}", show(&o));
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0:precious\n");
    assert!(!outside.exists(), "the dangling link's target was created");
    let _ = std::fs::remove_dir_all(&base);
}

/// A job refused because `--out` holds a finished run changes nothing there: the claim keeps
/// the line of the job that wrote the run, and no file is added. (Before: the refused job
/// rewrote the claim with its own host and pid.)
#[test]
fn a_job_refused_by_a_finished_folder_changes_nothing_in_it() {
    let out = scratch("finished");
    std::fs::create_dir_all(&out).unwrap();
    let writer = "host elsewhere, pid 999999, started 2026-01-01T00:00:00Z\n";
    std::fs::write(out.join(CLAIM_FILE), writer).unwrap();
    std::fs::write(out.join("results.csv"), "size_bytes\n").unwrap();
    let mut c = job("--pattern sendrecv -b 1M -e 1M -n 2 -w 1", &out);
    let o = wait_within(spawn_piped(&mut c, "mpirun"), Duration::from_secs(60), "mpirun");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        said(&o),
        [format!(
            "tcpx-perf: rank 0: error: result directory {} exists and is not empty: choose another --out",
            out.display()
        )],
        "{}",
        show(&o)
    );
    assert_eq!(std::fs::read_to_string(out.join(CLAIM_FILE)).unwrap(), writer);
    assert_eq!(entries(&out), [CLAIM_FILE, "results.csv"]);
    let _ = std::fs::remove_dir_all(&out);
}

/// `tcpx-perf ARGS` (no mpirun: `--plan` runs alone), with stdout and stderr captured.
fn alone(args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    common::output_within(&mut c, Duration::from_secs(60), "tcpx-perf --plan")
}

/// `--plan-json` is written whole or not at all, never through a link: on a full disk one line
/// naming the file and the cause, a non-zero exit and no file (before: a 0-byte file); a link
/// at the path is refused, the file it points to untouched.
#[test]
fn plan_json_is_whole_or_absent_and_never_through_a_link() {
    let base = scratch("plan-json");
    std::fs::create_dir_all(&base).unwrap();
    let victim = base.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = base.join("plan.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = alone(&["--plan", "2x8x4", "--plan-json", link.to_str().unwrap()]);
    assert!(!matches!(o.status.code(), Some(0 | 101)), "{}", show(&o));
    assert_eq!(
        said(&o),
        [format!(
            "tcpx-perf: error: --plan-json {0}: {0} is a symbolic link, not a file: refusing to write through it; remove it or choose another path",
            link.display()
        )],
        "{}",
        show(&o)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    if let Some(full) = SmallTmpfs::mount_full(&base.join("full")) {
        let file = full.0.join("plan.json");
        let o = alone(&[
            "--plan",
            "64x8x4",
            "--pattern",
            "fullmesh",
            "--plan-json",
            file.to_str().unwrap(),
        ]);
        assert!(!matches!(o.status.code(), Some(0 | 101)), "{}", show(&o));
        assert_eq!(
            said(&o),
            [format!(
                "tcpx-perf: error: --plan-json {0}: cannot write {0}: No space left on device (os error 28)",
                file.display()
            )],
            "{}",
            show(&o)
        );
        assert_eq!(entries(&full.0), ["filler"], "no cut-off plan, no temporary");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A closed stdout and stderr (`tcpx-perf --plan ... 2>&1 | head -1`) keep the plan's exit
/// status (1: does not fit) instead of a panic's 101.
#[test]
fn a_closed_pipe_keeps_the_plan_s_exit_status() {
    let args = ["--plan", "64x8x4", "--pattern", "fullmesh"];
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n 1024; exec {BIN} \"$@\""))
        .arg("sh")
        .args(args);
    let reference = common::output_within(&mut c, Duration::from_secs(60), "tcpx-perf --plan");
    assert_eq!(reference.status.code(), Some(1), "{}", show(&reference));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = c.stdout(writer.try_clone().unwrap()).stderr(writer).status().unwrap();
    assert_eq!(status.code(), Some(1));
}

/// `tcpx-perf -g 2 -b 1M -e 1M -n 1 -w 0 ARGS` alone: one rank of two endpoints, a one-node run
/// that judges no node.
fn one_node(args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args([
        "-g",
        "2",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "1",
        "-w",
        "0",
        "--progress",
        "never",
    ])
    .args(args);
    common::output_within(&mut c, Duration::from_secs(60), "tcpx-perf")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Makes `path` with `tool ARGS` (mkfifo, mknod); false where this machine refuses.
fn make_special(tool: &str, path: &Path, args: &[&str]) -> bool {
    Command::new(tool)
        .arg(path)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Issue 44, items 1 and 2: `--healthy-hostfile` and `--drain-list` at a character device, a
/// FIFO, or a read-only file of other content are refused in one line naming the flag and the
/// path, exit 1 before any data moves, and the thing at the path is left as it was; a list an
/// earlier run wrote (its header line, or its `HOST tcpx-perf: ...` lines) is the run's own and
/// removed, so a run that judges no node leaves none. (Before: the device and the file were
/// deleted, exit 0, "not written".)
#[test]
fn node_lists_never_replace_or_remove_a_file_that_is_not_their_own() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let base = scratch("lists");
    std::fs::create_dir_all(&base).unwrap();
    let dev = base.join("dev");
    let fifo = base.join("fifo");
    let foreign = base.join("foreign");
    assert!(make_special("mkfifo", &fifo, &[]), "mkfifo");
    let have_dev = make_special("mknod", &dev, &["c", "1", "3"]);
    std::fs::write(&foreign, "my own hosts\n").unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o444)).unwrap();
    let mut cases = vec![
        ("--drain-list", &fifo, "not a regular file"),
        ("--healthy-hostfile", &fifo, "not a regular file"),
        ("--healthy-hostfile", &foreign, "not a list tcpx-perf wrote"),
        ("--drain-list", &foreign, "not a list tcpx-perf wrote"),
    ];
    if have_dev {
        cases.push(("--healthy-hostfile", &dev, "not a regular file"));
        cases.push(("--drain-list", &dev, "not a regular file"));
    }
    for (flag, path, why) in cases {
        let o = one_node(&[flag, s(path), "--no-out"]);
        assert_eq!(o.status.code(), Some(1), "{flag} {}: {}", path.display(), show(&o));
        let lines = said(&o);
        assert_eq!(lines.len(), 1, "{}", show(&o));
        assert!(
            lines[0].contains(&format!("{flag} {}", path.display())) && lines[0].contains(why),
            "{}",
            lines[0]
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains("1048576"), "no data moved");
    }
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    if have_dev {
        assert!(std::fs::symlink_metadata(&dev).unwrap().file_type().is_char_device());
    }
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "my own hosts\n");
    let hostfile = base.join("healthy.txt");
    let drain = base.join("drain.txt");
    std::fs::write(
        &hostfile,
        "# tcpx-perf: the 2 healthy node(s) of 2 in the run started 2026-11-27T01:44:19Z\nnode0 slots=2\nnode1 slots=2\n",
    )
    .unwrap();
    std::fs::write(&drain, "node5 tcpx-perf: eth2 sending at 0.15 of the median\n").unwrap();
    let o = one_node(&[
        "--healthy-hostfile",
        s(&hostfile),
        "--drain-list",
        s(&drain),
        "--no-out",
    ]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        !hostfile.exists() && !drain.exists(),
        "an earlier run's lists are removed"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("not written, no node was judged"),
        "{}",
        show(&o)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 44, item 3: no two outputs of one run share a path and none makes a directory: a list
/// at the run's own summary.json or results.csv, both lists at one path, `-J` and a list at one
/// path, and a list in a directory that does not exist are each refused in one line before any
/// data moves (exit 1), the result directory holding no result and no directory made. (Before:
/// exit 0, the run's results replaced by the lists, `/nonexistent/dir` created.)
#[test]
fn outputs_of_one_run_never_share_a_path_and_make_no_directory() {
    let base = scratch("share");
    std::fs::create_dir_all(&base).unwrap();
    let out = base.join("out");
    let at = |f: &str| out.join(f).display().to_string();
    let one = base.join("list").display().to_string();
    let missing = base.join("no/such/dir/x").display().to_string();
    let cases: [(Vec<String>, &str); 5] = [
        (vec!["--drain-list".into(), at("summary.json")], "summary.json"),
        (vec!["--healthy-hostfile".into(), at("results.csv")], "results.csv"),
        (
            vec![
                "--healthy-hostfile".into(),
                one.clone(),
                "--drain-list".into(),
                one.clone(),
            ],
            "--healthy-hostfile",
        ),
        (vec!["-J".into(), one.clone(), "--drain-list".into(), one.clone()], "-J"),
        (vec!["--drain-list".into(), missing], "does not exist"),
    ];
    for (args, why) in &cases {
        let _ = std::fs::remove_dir_all(&out);
        let mut all: Vec<&str> = vec!["--out", s(&out)];
        all.extend(args.iter().map(String::as_str));
        let o = one_node(&all);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", show(&o));
        let lines = said(&o);
        assert_eq!(lines.len(), 1, "{args:?}: {}", show(&o));
        assert!(lines[0].contains(why), "{args:?}: {}", lines[0]);
        for f in ["summary.json", "results.csv"] {
            assert!(!out.join(f).exists(), "{args:?}: {f} written");
        }
        assert!(!Path::new(&one).exists(), "{args:?}: a list written");
    }
    assert!(!base.join("no").exists(), "a directory was made");
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 53, files: an empty read-only file at `--drain-list` that tcpx-perf did not write is
/// refused in one line and kept (on 1dfe633 a run that judged no node deleted it, exit 0);
/// `-J j` where `j` exists (the file lands on `j.0`) with `--drain-list j.0` is refused before
/// any data moves (on 1dfe633 only after the whole run), and a run refused so leaves no new
/// `--out` behind (on 1dfe633 the new directory held only `.tcpx-perf-claim`).
#[test]
fn an_empty_foreign_list_and_where_j_lands_are_refused_before_anything_is_made() {
    use std::os::unix::fs::PermissionsExt;
    let base = scratch("files53");
    std::fs::create_dir_all(&base).unwrap();
    let empty = base.join("empty");
    std::fs::write(&empty, "").unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = one_node(&["--drain-list", s(&empty), "--no-out"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let lines = said(&o);
    assert_eq!(lines.len(), 1, "{}", show(&o));
    assert!(lines[0].contains("not a list tcpx-perf wrote"), "{}", lines[0]);
    assert!(empty.exists(), "someone else's empty file is kept");

    let j = base.join("j");
    std::fs::write(&j, "an earlier -J\n").unwrap();
    let lands = base.join("j.0");
    let out = base.join("new-out");
    let o = one_node(&["--out", s(&out), "-J", s(&j), "--drain-list", s(&lands)]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let lines = said(&o);
    assert_eq!(lines.len(), 1, "{}", show(&o));
    assert!(lines[0].contains("-J") && lines[0].contains(s(&lands)), "{}", lines[0]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("1048576"), "no data moved");
    assert!(
        !out.exists(),
        "the refused run's new --out is gone: {:?}",
        entries(&out)
    );
    assert!(!lands.exists());
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 44, item 9: the healthy hostfile holds only host names an Open MPI hostfile can parse;
/// a healthy node whose name holds a space or a quote is left out of it, said on stdout and in a
/// comment line. 4 ranks, each pair under a host name of its own (unshare --uts), one of them
/// `bad "name`. (Before: `bad "name slots=2`, which Open MPI cannot parse.)
#[test]
fn the_healthy_hostfile_holds_only_names_open_mpi_can_parse() {
    let unshare_works = Command::new("unshare")
        .args(["--uts", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !unshare_works {
        eprintln!("skipped: unshare --uts is refused here (needs root)");
        return;
    }
    let base = scratch("hostnames");
    std::fs::create_dir_all(&base).unwrap();
    let hostfile = base.join("healthy.txt");
    // Rank r's node is r / 2: good0, or `bad "name`.
    let wrap = r#"n=good0; [ $((OMPI_COMM_WORLD_RANK / 2)) = 0 ] || n='bad "name'; exec unshare --uts sh -c 'printf %s "$0" > /proc/sys/kernel/hostname && exec "$@"' "$n" "$@""#;
    let mut c = mpirun_command();
    c.args(["-np", "4", "sh", "-c", wrap, "sh", BIN])
        .args([
            "-b",
            "1M",
            "-e",
            "1M",
            "-n",
            "2",
            "-w",
            "1",
            "--progress",
            "never",
            "--no-out",
        ])
        // Both nodes healthy however loaded the host is (the other tests run beside this one).
        .args(["--suspect-share", "0.01", "--bad-share", "0.005"])
        .args(["--healthy-hostfile", s(&hostfile)])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let o = common::output_within(&mut c, Duration::from_secs(60), "mpirun");
    assert!(o.status.success(), "{}", show(&o));
    let text = std::fs::read_to_string(&hostfile).unwrap();
    let hosts: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(hosts, ["good0 slots=2"], "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with('#') && l.contains(r#""bad \"name""#)),
        "{text}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("--healthy-hostfile") && l.contains("left out") && l.contains(r#""bad \"name""#)),
        "{}",
        show(&o)
    );
    let _ = std::fs::remove_dir_all(&base);
}
