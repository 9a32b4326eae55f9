//! What the integration tests share: running a child process under a deadline, mpirun's
//! launcher flags, and reading a result directory.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` with its output captured, killing it after `limit`: a hang fails the test (with
/// what the child printed) instead of hanging CI. `what` names the child in that message.
pub fn output_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    wait_within(spawn_piped(cmd, what), limit, what)
}

/// Starts `cmd` with its output captured (for [`wait_within`]).
pub fn spawn_piped(cmd: &mut Command, what: &str) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {what} (is it installed? launch/setup.sh --tests installs what the tests need): {e}")
        })
}

/// Waits for `child` to end within `limit`, killing it and failing the test (with what it
/// printed) otherwise.
pub fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("wait on the child").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the child's output");
            panic!("{what} did not finish within {limit:?}\n{}", show(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect the child's output")
}

/// `mpirun` with the flags every test run needs on a small shared host: more ranks than cores,
/// no binding (the plugin's helper threads would share one core), and no CMA single-copy (refused
/// in containers).
pub fn mpirun_command() -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "--bind-to", "none"])
        .args(["--mca", "btl_vader_single_copy_mechanism", "none"]);
    cmd
}

/// A result directory's `summary.json`, parsed.
pub fn summary(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json is there");
    serde_json::from_str(&text).expect("summary.json is whole")
}

/// One of a result directory's CSV files as column -> value maps.
pub fn csv_rows(dir: &Path, file: &str) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let headers = reader.headers().expect("header").clone();
    reader
        .records()
        .map(|r| {
            let r = r.expect("record");
            headers
                .iter()
                .map(String::from)
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

/// A child's exit status and everything it printed, for assertion messages.
/// Where the tests keep rig `id`'s state (`CLUSTER_STATE_DIR`): one place per rig id, not per
/// test process, so that a test run killed while its rig was up (or while `down` ran) leaves the
/// record of what it made where the next run's first `down` finds it and removes just that. A
/// per-process directory left the rig's names behind for good, and every later `up` of that
/// id refused them as someone else's.
pub fn rig_state_dir(id: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tcpx-perf-test-rig{id}"))
}

pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A 16 KiB tmpfs at `dir` (needs root, as CI has; without it the caller skips, saying so),
/// unmounted on drop: the full disk of the complete-or-absent tests.
pub struct SmallTmpfs(pub std::path::PathBuf);

impl SmallTmpfs {
    pub fn mount(dir: &Path) -> Option<SmallTmpfs> {
        std::fs::create_dir_all(dir).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs at {} (needs root)", dir.display());
        }
        ok.then(|| SmallTmpfs(dir.to_path_buf()))
    }

    /// The same, filled to the brim.
    pub fn mount_full(dir: &Path) -> Option<SmallTmpfs> {
        let t = Self::mount(dir)?;
        let _ = std::fs::write(dir.join("filler"), vec![b'x'; 64 << 10]);
        Some(t)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
