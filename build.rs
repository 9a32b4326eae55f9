//! Records the git commit the binary was built from (for the provenance in summary.json).
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let dirty = Command::new("git")
        // --no-optional-locks: status would otherwise rewrite the index it is watched by.
        .args(["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    if !commit.is_empty() {
        let suffix = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=TCPX_PERF_GIT_COMMIT={commit}{suffix}");
    }
    // Where HEAD and the index live: `.git/` in a clone, `.git/worktrees/NAME/` in a worktree
    // (whose `.git` is a file: watching `.git/index` there re-ran this script on every build).
    for file in ["HEAD", "index"] {
        let path = Command::new("git")
            .args(["rev-parse", "--git-path", file])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map_or_else(|| format!(".git/{file}"), |s| s.trim().to_string());
        println!("cargo:rerun-if-changed={path}");
    }
}
