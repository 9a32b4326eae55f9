//! What the integration tests share: running a child process under a deadline.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` with its output captured, killing it after `limit`: a hang fails the test (with
/// what the child printed) instead of hanging CI. `what` names the child in that message.
pub fn output_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {what} (is it installed? launch/setup.sh installs what the tests need): {e}")
        });
    let start = Instant::now();
    while child.try_wait().expect("wait on the child").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the child's output");
            panic!(
                "{what} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect the child's output")
}
