//! What tcpx-perf says when it refuses or reports, from the real binary: a command line carried
//! over from nccl-tests gets one line naming tcpx-perf's way (exit 64), and `--dry-run`, which
//! writes no file, prints every finding whole instead of pointing at a summary.json it never
//! writes (issue 55).

mod common;

use common::{mpirun_command, output_within, show};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

/// nccl-tests 2.19's flags that tcpx-perf refuses, with a value, short and long.
const REFUSED: &[(&str, &str)] = &[
    ("-t", "--nthreads"),
    ("-m", "--agg_iters"),
    ("-N", "--run_cycles"),
    ("-p", "--parallel_init"),
    ("-I", "--per_iter_timing"),
    ("-K", "--per_iter_skip"),
    ("-o", "--op"),
    ("-d", "--datatype"),
    ("-r", "--root"),
    ("-z", "--blocking"),
    ("-y", "--stream_null"),
    ("-G", "--cudagraph"),
    ("-C", "--report_cputime"),
    ("-R", "--local_register"),
    ("-x", "--cta_policy"),
    ("-D", "--device_implementation"),
    ("-V", "--device_cta_count"),
    ("-S", "--report_timestamps"),
    ("-M", "--memory"),
    ("-u", "--unalign"),
];

/// Each refused nccl-tests flag, inside an otherwise good nccl-tests command line, ends the
/// process before anything starts: exit 64 and one line on stderr naming the flag, its long
/// name and what to use instead; nothing on stdout.
#[test]
fn nccl_tests_flags_are_refused_in_one_line_naming_the_way() {
    for (short, long) in REFUSED {
        for args in [
            vec!["-b", "8", "-e", "128M", "-f", "2", short, "1"],
            vec!["-b", "8", "-e", "128M", "-f", "2", &format!("{long}=1")],
        ] {
            let o = output_within(Command::new(BIN).args(&args), Duration::from_secs(20), "tcpx-perf");
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(64), "{args:?}: {}", show(&o));
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!(
                    "tcpx-perf: usage error: nccl-tests' {short} ({long}) is not a tcpx-perf flag: "
                )),
                "{args:?}: {stderr}"
            );
            assert!(o.stdout.is_empty(), "{args:?}: {}", show(&o));
        }
    }
    let o = output_within(
        Command::new(BIN).args(["-N", "5"]),
        Duration::from_secs(20),
        "tcpx-perf",
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("launch/repeat.sh N OUT -- FLAGS..."),
        "{}",
        show(&o)
    );
    let o = output_within(Command::new(BIN).arg("--version"), Duration::from_secs(20), "tcpx-perf");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("tcpx-perf "),
        "{}",
        show(&o)
    );
}

/// A dry run whose ranks disagree on a TCPX setting with a long value: the error finding is
/// printed whole (every character of the value), and no line points to a summary.json, which
/// a dry run never writes (`--out` is not even made).
#[test]
fn dry_run_prints_every_finding_whole() {
    let out = std::env::temp_dir().join(format!("tcpx-perf-test-{}-dry-whole", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let value: String = (0..40).map(|i| format!("v{i:03}-")).collect();
    let setting = format!("NCCL_GPUDIRECTTCPX_H55_LONG={value}");
    let mut cmd = mpirun_command();
    let dry = ["--dry-run", "-b", "64K", "-e", "64K", "--out"];
    cmd.args(["-np", "1", BIN])
        .args(dry)
        .arg(&out)
        .args([":", "-np", "1", "env", &setting, BIN])
        .args(dry)
        .arg(&out)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    let o = output_within(&mut cmd, Duration::from_secs(120), "mpirun --dry-run");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "an error finding: {}", show(&o));
    let finding = stdout
        .lines()
        .find(|l| l.starts_with("# error:") && l.contains("NCCL_GPUDIRECTTCPX_H55_LONG"))
        .unwrap_or_else(|| panic!("no finding on the setting:\n{stdout}"));
    assert!(finding.contains(&setting), "the value in full: {finding}");
    assert!(!stdout.contains("summary.json"), "{stdout}");
    assert!(!out.exists(), "a dry run makes no --out");
}
