//! The scripts of `launch/` (users') and `tools/` (maintainers', the GPU host's): they must
//! parse, and the tuning sweep that `tools/h200-gpu-tests.sh` builds on must run a real variant
//! over real `mpirun` here, and refuse a knob it does not know before it starts anything.

mod common;

use common::output_within;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `bash script args` from the repository root with `env`, killed after `limit`.
fn bash(script: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script).args(args).current_dir(repo());
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, limit, &format!("bash {}", script.display()))
}

#[test]
fn every_launch_script_parses() {
    let mut checked = 0;
    for dir in ["launch", "tools"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect("launch/ and tools/ exist") {
            let path = entry.expect("directory entry").path();
            if path.extension().is_some_and(|e| e == "sh") {
                let out = Command::new("bash").arg("-n").arg(&path).output().expect("run bash -n");
                assert!(
                    out.status.success(),
                    "{} does not parse:\n{}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} scripts found in launch/ and tools/");
}

#[test]
fn sweep_runs_a_variant_over_mpi() {
    let bin_dir = Path::new(BIN).parent().expect("binary directory").display().to_string();
    let env = [
        ("BIN_DIR", bin_dir.as_str()),
        ("PATTERN", "sendrecv"),
        ("MEM", "host"),
        ("SIZES", "1M 4M"),
        ("NP", "2"),
        ("ITERS", "2"),
        ("WARMUP", "1"),
    ];
    let out = bash(
        Path::new("tools/sweep.sh"),
        &["nsocks=2,ch=1,cs=262144,buf=0,chunk=1M,win=4"],
        &env,
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let why = format!("stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{why}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "one line per variant\n{why}");
    // `variant  1M algbw/busbw  4M algbw/busbw`, both sizes measured (a failed run prints FAILED).
    let fields: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(fields.len(), 5, "{why}");
    assert_eq!((fields[1], fields[3]), ("1M", "4M"), "{why}");
    for bw in [fields[2], fields[4]] {
        let (alg, bus) = bw
            .split_once('/')
            .unwrap_or_else(|| panic!("'{bw}' is not algbw/busbw\n{why}"));
        let (alg, bus): (f64, f64) = (alg.parse().expect("algbw"), bus.parse().expect("busbw"));
        assert!(alg > 0.0 && alg == bus, "sendrecv: busbw = algbw > 0 ('{bw}')\n{why}");
    }
}

#[test]
fn sweep_refuses_an_unknown_knob_before_running() {
    let out = bash(
        Path::new("tools/sweep.sh"),
        &["nsocks=2,sockets=4"],
        &[("BIN_DIR", "/nonexistent")],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one error line:\n{stderr}");
    assert!(
        lines[0].contains("unknown knob 'sockets'") && lines[0].contains("nsocks cs buf ch chunk win bind"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).lines().all(|l| l.starts_with('#')),
        "no variant line for a refused variant"
    );
}

/// The harness-overhead benchmark runs here too: the bare plugin and tcpx-perf alternated per
/// socket count, one table row per (sockets, size) with both figures, their ratio and both CPU
/// costs. Without its binaries it stops at once, naming the fix.
#[test]
fn overhead_compares_the_bare_plugin_with_tcpx_perf() {
    let bin_dir = Path::new(BIN).parent().expect("binary directory").display().to_string();
    let env = [
        ("BIN_DIR", bin_dir.as_str()),
        ("SOCKS", "1 2"),
        ("SIZES", "1M 2M"),
        ("CHUNK", "1M"),
        ("ITERS", "2"),
        ("WARMUP", "1"),
        ("ROUNDS", "1"),
    ];
    let out = bash(Path::new("tools/overhead.sh"), &[], &env, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let why = format!("stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{why}");
    let rows: Vec<Vec<f64>> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("bare") && !l.starts_with("tcpx-perf"))
        .map(|l| l.split_whitespace().map(|f| f.parse().expect("number")).collect())
        .collect();
    assert_eq!(rows.len(), 4, "2 socket counts x 2 sizes\n{why}");
    for (r, (k, size)) in rows
        .iter()
        .zip([(1.0, 1048576.0), (1.0, 2097152.0), (2.0, 1048576.0), (2.0, 2097152.0)])
    {
        // sockets size bare perf perf/bare t_med-ratio bare_cpu perf_cpu
        assert_eq!((r.len(), r[0], r[1]), (8, k, size), "{why}");
        assert!(r[2..].iter().all(|v| v.is_finite() && *v > 0.0), "{r:?}\n{why}");
        // bare and perf are printed with 2 decimals, their ratio with 3: the ratio must lie in
        // the interval the rounded figures allow (an absolute 0.01 fails for small bare figures).
        let (lo, hi) = ((r[3] - 0.005) / (r[2] + 0.005), (r[3] + 0.005) / (r[2] - 0.005));
        assert!(
            (lo - 0.0005..=hi + 0.0005).contains(&r[4]),
            "ratio {} outside [{lo}, {hi}] that the two figures allow: {r:?}",
            r[4]
        );
    }

    let out = bash(
        Path::new("tools/overhead.sh"),
        &[],
        &[("BIN_DIR", "/nonexistent")],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is missing") && stderr.contains("BIN_DIR"), "{stderr}");
}
