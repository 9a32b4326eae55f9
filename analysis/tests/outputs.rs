//! What tcpx-analyze writes (issue 34): reports and baselines whole or absent (a full disk is
//! one line and a non-zero exit, no cut-off file, no temporary), never through a link; a closed
//! stdout or stderr (`| head -1`) does not turn the verdict into a panic; Markdown shows folder
//! names literally.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-analyze");

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `n` runs under `dir/name`, each `scale` times the default figures.
fn runs(dir: &Path, name: &str, n: usize, scale: f64) -> PathBuf {
    let top = dir.join(name);
    for i in 0..n {
        let spread = [1.0, 1.02, 0.99, 1.01, 0.98][i % 5];
        write_run(
            &top.join(format!("r{i}")),
            &Spec {
                scale: scale * spread,
                seed: 7 + i as u64,
                ..Spec::default()
            },
        );
    }
    top
}

/// A gate whose verdict is a regression (exit 1).
fn regression(dir: &Path) -> (PathBuf, PathBuf) {
    (runs(dir, "cand", 5, 0.8), runs(dir, "base", 5, 1.0))
}

/// `tcpx-analyze ARGS` with stdout and stderr on a pipe nobody reads any more (as
/// `2>&1 | head -1` once head has its line): its exit status.
fn with_closed_pipe(args: &[&str]) -> Option<i32> {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(BIN)
        .args(args)
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap();
    status.code()
}

/// The verdict's exit status survives a closed pipe: 1 for a regression, 3 (invalid input)
/// for a missing folder, as with a reader. (Before: 101, a panic writing stdout or stderr.)
#[test]
fn a_closed_pipe_keeps_the_verdict_s_exit_status() {
    let d = tmpdir("outputs-pipe");
    let (cand, base) = regression(&d);
    let args = ["gate", s(&cand), "--baseline", s(&base)];
    assert_eq!(run_analyze(&args).0, 1);
    assert_eq!(with_closed_pipe(&args), Some(1));
    let missing = d.join("missing");
    let args = ["gate", s(&missing), "--baseline", s(&base)];
    let (code, out) = run_analyze(&args);
    assert_ne!(code, 101, "{out}");
    assert_eq!(with_closed_pipe(&args), Some(code), "{out}");
}

/// A folder name holding `<!--` (or a tag, or `|`) is shown as text in the Markdown verdict: it
/// cannot hide the rest of a PR comment or break the table.
#[test]
fn markdown_shows_a_folder_name_literally() {
    let d = tmpdir("outputs-markdown");
    let (cand, base) = regression(&d);
    let hostile = d.join("cand<!--hide <b>x a|b");
    std::fs::rename(&cand, &hostile).unwrap();
    let md = d.join("verdict.md");
    let (code, out) = run_analyze(&["gate", s(&hostile), "--baseline", s(&base), "--markdown", s(&md)]);
    assert_eq!(code, 1, "{out}");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(!text.contains("<!--") && !text.contains("<b>"), "{text}");
    assert!(text.contains("cand&lt;!--hide &lt;b>x a|b"), "{text}");
}

/// `--markdown`, `--json`, `make-baseline -o`, `history report -o` and `history add --db` naming
/// a symbolic link
/// (to a file elsewhere, or dangling) are refused in one line naming it; the file it points to
/// is neither written nor created.
#[test]
fn no_report_or_baseline_is_written_through_a_link() {
    let d = tmpdir("outputs-link");
    let (cand, base) = regression(&d);
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let outside = d.join("created-outside");
    let link = d.join("out.link");
    let refusal = format!(
        "tcpx-analyze: invalid input: {} is a symbolic link, not a file: refusing to write through it; remove it or choose another path",
        link.display()
    );
    let db = d.join("h.db");
    let (code, out) = run_analyze(&["history", "add", "--db", s(&db), s(&base)]);
    assert_eq!(code, 0, "{out}");
    let cases: [Vec<&str>; 5] = [
        vec!["history", "add", "--db", s(&link), s(&base)],
        vec!["gate", s(&cand), "--baseline", s(&base), "--markdown", s(&link)],
        vec!["gate", s(&cand), "--baseline", s(&base), "--json", s(&link)],
        vec!["make-baseline", "--name", "x", "-o", s(&link), s(&base)],
        vec!["history", "report", "--db", s(&db), "-o", s(&link)],
    ];
    for args in &cases {
        for target in [&victim, &outside] {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link).unwrap();
            let (code, out) = run_analyze(args);
            assert!(code != 0 && code != 101, "{args:?}: {code}\n{out}");
            assert_eq!(out.lines().last(), Some(refusal.as_str()), "{args:?}\n{out}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "{args:?}");
        assert!(!outside.exists(), "{args:?}: the dangling link's target was created");
    }
}

/// A 16 KiB tmpfs mounted at `dir` (this test needs root, as CI has; without it, the test says
/// so and checks nothing), unmounted on drop.
struct Tmpfs(PathBuf);
impl Tmpfs {
    fn full(dir: &Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs", s(dir)])
            .status()
            .is_ok_and(|st| st.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs at {} (needs root)", dir.display());
            return None;
        }
        let t = Tmpfs(dir.to_path_buf());
        // Filled but for a few bytes: a file's first block cannot be had.
        let _ = std::fs::write(dir.join("filler"), vec![b'x'; 64 << 10]);
        Some(t)
    }
}
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// On a full disk, make-baseline, gate --json/--markdown and history report each exit non-zero
/// with one line naming the file and the cause, leaving neither the file nor a temporary.
/// (Before: make-baseline and report left a cut-off or empty file.)
#[test]
fn a_full_disk_leaves_no_report_or_baseline() {
    let d = tmpdir("outputs-full");
    let (cand, base) = regression(&d);
    let db = d.join("h.db");
    assert_eq!(run_analyze(&["history", "add", "--db", s(&db), s(&base)]).0, 0);
    let Some(full) = Tmpfs::full(&d.join("full")) else {
        return;
    };
    let target = full.0.join("out");
    let cases: [Vec<&str>; 4] = [
        vec!["make-baseline", "--name", "x", "-o", s(&target), s(&base)],
        vec!["gate", s(&cand), "--baseline", s(&base), "--json", s(&target)],
        vec!["gate", s(&cand), "--baseline", s(&base), "--markdown", s(&target)],
        vec!["history", "report", "--db", s(&db), "-o", s(&target)],
    ];
    for args in &cases {
        let (code, out) = run_analyze(args);
        assert!(code != 0 && code != 101, "{args:?}: {code}\n{out}");
        assert_eq!(
            out.lines().last().unwrap_or(""),
            format!(
                "tcpx-analyze: invalid input: cannot write {}: No space left on device (os error 28)",
                target.display()
            ),
            "{args:?}\n{out}"
        );
        let mut left: Vec<String> = std::fs::read_dir(&full.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["filler"], "{args:?}: a cut-off file or a temporary is left");
    }
}
