//! The scripts of `launch/` (users') and `tools/` (maintainers', the GPU host's): they must
//! parse, and the tuning sweep that `tools/h200-gpu-tests.sh` builds on must run a real variant
//! over real `mpirun` here, and refuse a knob it does not know before it starts anything.

mod common;

use common::{output_within, show};
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

/// Writes a stand-in for nccl-tests' binaries (CI has no GPU and no NCCL; the device-machine run
/// in docs/runs/h100x2-20261125T1742Z-issue22 drives the real ones): NCCL's two log lines that
/// name the plugin and the network it used (`FAKE_NETWORK` overrides the latter), then, on rank
/// 0, a table nccl-tests 2.19.6 printed (with `-I` columns) cut to 1-4 MiB; `FAKE_WRONG=N` puts N
/// in the out-of-place `#wrong` column.
fn stand_in_nccl_tests(dir: &Path) {
    let fixture = repo().join("analysis/tests/fixtures/nccl-tests/nccl_sendrecv_socket_np4.txt");
    let script = format!(
        r#"#!/usr/bin/env bash
log=${{NCCL_DEBUG_FILE//%h/$(hostname)}}; log=${{log//%p/$$}}
printf '%s\n' "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin $NCCL_NET (v7)" \
  "h:1:1 [0] NCCL INFO Using network ${{FAKE_NETWORK:-$NCCL_NET}}" >"$log"
[ "${{OMPI_COMM_WORLD_RANK:-0}}" = 0 ] || exit 0
awk -v wrong="${{FAKE_WRONG:-0}}" '/^#/ {{print; next}} $1 <= 4194304 {{if (wrong) $9 = wrong; print}}' '{}'
"#,
        fixture.display()
    );
    let build = dir.join("build");
    std::fs::create_dir_all(&build).expect("stand-in dir");
    for name in ["sendrecv_perf", "all_reduce_perf", "alltoall_perf"] {
        let path = build.join(name);
        std::fs::write(&path, &script).expect("write stand-in");
        let status = Command::new("chmod").arg("+x").arg(&path).status().expect("chmod");
        assert!(status.success());
    }
}

/// `launch/vs-nccl-tests.sh` runs tcpx-perf (real, over mpirun) and an nccl-tests binary
/// alternately and prints both busbw medians, their ratio and the geomean. The nccl-tests column
/// must be the out-of-place busbw of nccl-tests' table (2.62, 2.88; in-place says 2.59, 2.83),
/// the tcpx-perf column its results.csv figure, and the ratio theirs. Wrong data, NCCL not using
/// the plugin, and no nccl-tests at all stop it with the reason.
#[test]
fn vs_nccl_tests_pairs_the_two_tools_figures() {
    let tmp = std::env::temp_dir().join(format!("tcpx-perf-vs-nccl-tests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    stand_in_nccl_tests(&tmp);
    let nt = tmp.display().to_string();
    let run = |name: &str, extra: &[(&str, &str)]| {
        let out_dir = tmp.join(name).display().to_string();
        let mut env = vec![
            ("NCCL_TESTS", nt.as_str()),
            ("TCPX_PERF", BIN),
            ("TCPXEMU_MODE", "host"),
            ("PATTERNS", "sendrecv"),
            ("MINB", "1M"),
            ("MAXB", "4M"),
            ("ITERS", "2"),
            ("WARMUP", "1"),
            ("ROUNDS", "1"),
        ];
        env.push(("VS_OUT", out_dir.as_str()));
        env.extend_from_slice(extra);
        let out = bash(
            Path::new("launch/vs-nccl-tests.sh"),
            &[],
            &env,
            Duration::from_secs(120),
        );
        (out, PathBuf::from(out_dir))
    };

    let (out, dir) = run("ok", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let why = format!("stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{why}");
    let csv = std::fs::read_to_string(dir.join("runs/r1-sendrecv-tcpx-perf/results.csv")).expect("results.csv");
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).expect("column");
    let tcpx: Vec<f64> = lines
        .map(|l| {
            l.split(',')
                .nth(col("busbw_gbps"))
                .expect("busbw")
                .parse()
                .expect("number")
        })
        .collect();
    let mut ratios = Vec::new();
    for (i, (size, nccl)) in [("1 MiB", 2.62), ("4 MiB", 2.88)].into_iter().enumerate() {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| sendrecv | {size} |")))
            .unwrap_or_else(|| panic!("no {size} row\n{why}"));
        let f: Vec<f64> = row.split('|').skip(3).filter_map(|c| c.trim().parse().ok()).collect();
        assert_eq!(f.len(), 3, "{row}");
        assert_eq!(f[0], nccl, "nccl-tests' out-of-place busbw: {row}");
        assert!(
            (f[1] - tcpx[i]).abs() < 0.006,
            "tcpx-perf's results.csv busbw {}: {row}",
            tcpx[i]
        );
        assert!((f[2] - tcpx[i] / nccl).abs() < 0.006, "ratio: {row}");
        ratios.push(tcpx[i] / nccl);
    }
    let geo = stdout
        .lines()
        .find(|l| l.starts_with("| sendrecv | geomean |"))
        .expect("geomean row");
    let g: f64 = geo
        .trim_end_matches([' ', '|'])
        .rsplit('|')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("geomean");
    assert!(
        (g - (ratios[0] * ratios[1]).sqrt()).abs() < 0.006,
        "{geo} vs {ratios:?}"
    );

    let (out, _) = run("wrong", &[("FAKE_WRONG", "3")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("wrong data"), "{stderr}");

    let (out, _) = run("socket", &[("FAKE_NETWORK", "Socket")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("does not show it loaded and used plugin tcpx-emu_v7"),
        "{stderr}"
    );

    let out = bash(
        Path::new("launch/vs-nccl-tests.sh"),
        &[],
        &[("TCPX_PERF", BIN)],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("NCCL_TESTS") && stderr.contains("NCCL_TESTS_SRC"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Markdown files that tell users which scripts to run.
const DOCS: [&str; 3] = ["README.md", "docs", "tools/README.md"];

/// Every `launch/*.sh` and `tools/*` script that the README or docs/ name (and that this
/// repository holds) has its run bits, in the checkout and in git's index: the README runs
/// `launch/cluster.sh up ...` directly, and a script committed 100644 answers "Permission denied".
#[test]
fn every_script_the_docs_name_is_executable() {
    use std::os::unix::fs::PermissionsExt;
    let mut texts = Vec::new();
    for doc in DOCS {
        let path = repo().join(doc);
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("docs/") {
                let p = entry.expect("directory entry").path();
                if p.extension().is_some_and(|e| e == "md") {
                    texts.push(std::fs::read_to_string(&p).expect("read a doc"));
                }
            }
        } else {
            texts.push(std::fs::read_to_string(&path).expect("read a doc"));
        }
    }
    let named = scripts_named(&texts.join("\n"));
    assert!(
        named.contains("launch/cluster.sh"),
        "the README names launch/cluster.sh: {named:?}"
    );
    let index = Command::new("git")
        .args(["ls-files", "-s", "launch", "tools"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let mut wrong = Vec::new();
    for script in &named {
        let path = repo().join(script);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // another project's script (nccl-tests' tools/analyze_perf_json.py)
        };
        if meta.permissions().mode() & 0o111 != 0o111 {
            wrong.push(format!("{script}: mode {:o} here", meta.permissions().mode() & 0o777));
        }
        if let Some(index) = &index {
            let line = index.lines().find(|l| l.ends_with(&format!("\t{script}")));
            if !line.is_some_and(|l| l.starts_with("100755 ")) {
                wrong.push(format!(
                    "{script}: {} in git (git update-index --chmod=+x {script})",
                    line.unwrap_or("not tracked")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "scripts the docs run without their run bits:\n{}",
        wrong.join("\n")
    );
}

/// `launch/x.sh`, `tools/y.py`, ... named in `text`, without duplicates.
fn scripts_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for dir in ["launch/", "tools/"] {
        for (at, _) in text.match_indices(dir) {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "/._-".contains(*c))
                .collect();
            let name = name.trim_end_matches('.');
            if Path::new(name).extension().is_some_and(|e| e == "sh" || e == "py") {
                found.insert(name.to_string());
            }
        }
    }
    found
}

/// The README promises what `launch/test.sh` ends with: `tests: N passed, 0 failed, K skipped`,
/// where K is every `#[ignore]` test of the workspace (cargo counts them as ignored and test.sh
/// as skipped). An ignored test added without the README saying so fails here.
#[test]
fn the_readme_says_how_many_tests_test_sh_skips() {
    fn ignored_in(dir: &Path, count: &mut usize) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "target" && !name.to_string_lossy().starts_with('.') {
                    ignored_in(&path, count);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                *count += text.lines().filter(|l| l.trim_start().starts_with("#[ignore")).count();
            }
        }
    }
    let mut ignored = 0;
    for dir in ["src", "tests", "crates", "plugins", "analysis", "examples"] {
        ignored_in(&repo().join(dir), &mut ignored);
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let promised = format!("`tests: N passed, 0 failed, {ignored} skipped`");
    assert!(
        readme.contains(&promised),
        "the workspace has {ignored} #[ignore] test(s): the README must say test.sh ends with {promised}"
    );
}

/// The scripts a user runs pass shellcheck at warning level (`-x`: what they source too).
/// Skipped where shellcheck is missing, unless `CI` is set (CI installs it).
#[test]
fn launch_scripts_pass_shellcheck() {
    let mut scripts = Vec::new();
    for dir in ["launch", "launch/slurm", "launch/k8s", "launch/postgres"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect("launch/ exists") {
            let path = entry.expect("directory entry").path();
            if path.extension().is_some_and(|e| e == "sh" || e == "sbatch") {
                scripts.push(path.strip_prefix(repo()).expect("under the repository").to_path_buf());
            }
        }
    }
    assert!(scripts.len() >= 10, "only {} scripts in launch/", scripts.len());
    let out = match Command::new("shellcheck")
        .args(["-x", "-S", "warning"])
        .args(&scripts)
        .current_dir(repo())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "no shellcheck in CI ({e}): launch/setup.sh --tests installs it"
            );
            eprintln!("skipped: no shellcheck ({e}); launch/setup.sh --tests installs it");
            return;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A copy of the launch scripts in a temporary tree whose PATH holds stand-ins for the package
/// manager, cargo, mpirun and python3 (each logs how it was called) and the few real tools the
/// scripts use, nothing else: a fresh root machine where every package is missing.
struct StubMachine {
    root: tempfile::TempDir,
}

impl StubMachine {
    const STUB: &'static str = r#"#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$(basename "$0") $1" in
  "id "*) echo 0 ;;
  "dpkg-query "*) exit 1 ;;
  "mpirun --version") echo "mpirun (Open MPI) 4.1.6" ;;
  "cargo --version" | "cargo clippy" | "cargo fmt") echo "cargo 1.91.0" ;;
  "cargo test") cat "$STUB_TEST_LOG" ;;
  "python3 -c") exit 1 ;;
esac
exit 0
"#;

    fn new() -> Self {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        for dir in ["launch", "stubs", "tools", "home", "target/release"] {
            std::fs::create_dir_all(r.join(dir)).expect("mkdir");
        }
        for script in ["setup.sh", "build.sh", "quickstart.sh", "test.sh", "mpirun-args.sh"] {
            std::fs::copy(repo().join("launch").join(script), r.join("launch").join(script)).expect("copy");
        }
        let stub = r.join("stubs/stub");
        std::fs::write(&stub, Self::STUB).expect("write the stub");
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for name in ["id", "dpkg-query", "apt-get", "cargo", "rustup", "mpirun", "python3"] {
            symlink(&stub, r.join("stubs").join(name)).expect("link a stub");
        }
        for tool in [
            "bash", "basename", "dirname", "cat", "head", "timeout", "ln", "mktemp", "rm", "tee", "awk", "sort",
        ] {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.exists());
            symlink(real.unwrap_or_else(|| panic!("no {tool}")), r.join("tools").join(tool)).expect("link a tool");
        }
        std::fs::write(
            r.join("test.log"),
            "     Running unittests src/lib.rs (target/release/deps/tcpx_perf-0123abcd)\n\
             test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.50s\n\
             \x20    Running tests/cluster.rs (target/release/deps/cluster-89ab0123)\n\
             test result: ok. 30 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 123.45s\n\
             \x20    Running tests/gate.rs (target/release/deps/gate-deadbeef)\n\
             test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 12.00s\n\
             \x20  Doc-tests tcpx_perf\n\
             test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
        )
        .expect("write the test log");
        StubMachine { root }
    }

    /// Runs `bash launch/<script> ARGS` there, whatever its exit status: how it ended and what
    /// the stand-ins were asked.
    fn exec(&self, script: &str, args: &[&str]) -> (Output, String) {
        let r = self.root.path();
        let mut cmd = Command::new(r.join("tools/bash"));
        cmd.arg(format!("launch/{script}"))
            .args(args)
            .current_dir(r)
            .env_clear();
        cmd.env(
            "PATH",
            format!("{}:{}", r.join("stubs").display(), r.join("tools").display()),
        )
        .env("HOME", r.join("home"))
        .env("STUB_LOG", r.join("calls.log"))
        .env("STUB_TEST_LOG", r.join("test.log"));
        let out = output_within(&mut cmd, Duration::from_secs(60), script);
        let calls = std::fs::read_to_string(r.join("calls.log")).unwrap_or_default();
        (out, calls)
    }

    /// Runs `bash launch/<script>` there, which must succeed; returns its stdout and what the
    /// stand-ins were asked.
    fn run(&self, script: &str) -> (String, String) {
        let (out, calls) = self.exec(script, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{script}: {}\nstdout:\n{stdout}\nstderr:\n{}\ncalls:\n{calls}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        (stdout, calls)
    }
}

/// The calls that start with `prefix`, joined by newlines.
fn calls_to(calls: &str, prefix: &str) -> String {
    calls
        .lines()
        .filter(|l| l.starts_with(prefix))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The quick start installs what building and running need and nothing only the tests use,
/// builds tcpx-perf and the plugins (not tcpx-analyze), and runs the job.
#[test]
fn quickstart_installs_and_builds_only_what_the_run_needs() {
    let (_, calls) = StubMachine::new().run("quickstart.sh");
    let installs = calls_to(&calls, "apt-get install");
    for pkg in [
        "openmpi-bin",
        "libopenmpi-dev",
        "libclang-dev",
        "pkg-config",
        "build-essential",
    ] {
        assert!(installs.contains(pkg), "{pkg} not installed:\n{calls}");
    }
    for only_tests in ["chromium", "shellcheck", "slurm", "munge", "iproute2", "postgresql"] {
        assert!(
            !calls.contains(only_tests),
            "quickstart installs {only_tests}, which only the tests need:\n{calls}"
        );
    }
    assert_eq!(
        calls_to(&calls, "python3 -m pip"),
        "",
        "no PyPI package is the quick start's"
    );
    assert_eq!(calls_to(&calls, "rustup"), "", "clippy and rustfmt are the tests'");
    assert_eq!(
        calls.matches("apt-get update").count(),
        1,
        "one apt-get update:\n{calls}"
    );
    assert_eq!(
        calls_to(&calls, "cargo build"),
        "cargo build --release -p tcpx-perf -p tcpx-emu -p tcpx-emu-v7",
        "tcpx-analyze is built when first needed"
    );
    assert!(
        calls_to(&calls, "mpirun -").contains("-np 4 target/release/tcpx-perf --pattern fullmesh"),
        "{calls}"
    );
}

/// test.sh sets up what the suite needs besides (Slurm, shellcheck, chromium, the PyPI
/// validators), builds the whole workspace, and ends with the slowest test binaries and the
/// counts.
#[test]
fn test_sh_installs_the_suite_s_tools_and_names_the_slowest_binaries() {
    let (stdout, calls) = StubMachine::new().run("test.sh");
    let installs = calls_to(&calls, "apt-get install");
    for pkg in [
        "openmpi-bin",
        "libclang-dev",
        "iproute2",
        "shellcheck",
        "slurmctld",
        "slurmd",
        "munge",
        "postgresql",
        "chromium",
    ] {
        assert!(installs.contains(pkg), "{pkg} not installed:\n{calls}");
    }
    assert_eq!(
        calls.matches("apt-get update").count(),
        1,
        "one apt-get update:\n{calls}"
    );
    assert!(
        calls_to(&calls, "python3 -m pip").contains("kubernetes-validate==1.37.0"),
        "{calls}"
    );
    assert!(
        calls.lines().any(|l| l == "cargo build --release --workspace"),
        "{calls}"
    );
    let slowest: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("slowest test binaries"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(
        slowest[..3],
        [
            "123.5  tests/cluster.rs (cluster)",
            "12.0  tests/gate.rs (gate)",
            "1.5  src/lib.rs (tcpx_perf)"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("tests: 37 passed, 0 failed, 1 skipped"), "{stdout}");
}

/// An argument setup.sh does not know, after one it knows (`--tests --bogus`), is refused in one
/// usage line, exit 2, before anything is installed. (Before: only the first argument was read,
/// and setup.sh installed everything and exited 0.)
#[test]
fn setup_sh_refuses_any_unknown_argument_before_installing() {
    for args in [&["--tests", "--bogus"][..], &["--bogus", "--tests"], &["--tests", "x"]] {
        let (out, calls) = StubMachine::new().exec("setup.sh", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}\n{}", show(&out));
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line\n{stderr}");
        assert!(
            stderr.starts_with("setup: ") && stderr.contains("usage: bash launch/setup.sh [--tests]"),
            "{args:?}: {stderr}"
        );
        assert_eq!(calls, "", "{args:?}: nothing was run before the refusal");
    }
}

/// `launch/vs-nccl-tests.sh` writes only into a folder it made: a `VS_OUT` that exists, or is
/// a link (to a folder elsewhere, or dangling), is refused in one line (exit 2) before anything
/// is written, and nothing appears where the link points. (Before: raw.csv, logs and runs were
/// written through the link.)
#[test]
fn vs_nccl_tests_refuses_an_existing_or_linked_out_folder() {
    let tmp = std::env::temp_dir().join(format!("tcpx-perf-vs-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    stand_in_nccl_tests(&tmp);
    let elsewhere = tmp.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let linked = tmp.join("linked");
    std::os::unix::fs::symlink(&elsewhere, &linked).expect("symlink");
    let dangling = tmp.join("dangling");
    std::os::unix::fs::symlink(tmp.join("nowhere"), &dangling).expect("symlink");
    let nt = tmp.display().to_string();
    for out in [&linked, &dangling, &elsewhere] {
        let out_dir = out.display().to_string();
        let env = [
            ("NCCL_TESTS", nt.as_str()),
            ("TCPX_PERF", BIN),
            ("TCPXEMU_MODE", "host"),
            ("VS_OUT", out_dir.as_str()),
        ];
        let o = bash(Path::new("launch/vs-nccl-tests.sh"), &[], &env, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{out_dir}: {stderr}");
        assert_eq!(
            stderr,
            format!("vs-nccl-tests: VS_OUT {out_dir} exists (or cannot be made): choose a new folder\n")
        );
    }
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("read").count(),
        0,
        "written through the link"
    );
    assert!(!tmp.join("nowhere").exists());
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `launch/a3-high.sh` with the shipped hostfile (every line a comment) says in one line which
/// file to fill and how, before mpirun (whose own answer is "No nodes are available for this
/// job"); a hostfile that names a node goes on to mpirun (a stand-in here, which shows its
/// arguments).
#[test]
fn a3_high_names_the_hostfile_to_fill_before_mpirun() {
    let stub = std::env::temp_dir().join(format!("tcpx-a3-high-{}", std::process::id()));
    std::fs::create_dir_all(&stub).expect("stub dir");
    let mpirun = stub.join("mpirun");
    std::fs::write(&mpirun, "#!/bin/sh\necho \"mpirun $*\"\n").expect("stub mpirun");
    std::fs::set_permissions(&mpirun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", stub.display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new("launch/a3-high.sh");
    let shipped = bash(script, &["--dry-run"], &[("PATH", &path)], Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&shipped.stderr);
    assert_eq!(shipped.status.code(), Some(64), "{}", show(&shipped));
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    assert!(
        stderr
            .starts_with("a3-high: hostfiles/tcpx.txt names no node: add a line 'HOST slots=8' for each of your nodes"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&shipped.stdout).contains("mpirun"),
        "mpirun was not to run"
    );
    let missing = bash(
        script,
        &["--dry-run"],
        &[("PATH", &path), ("HOSTFILE", "/nonexistent/hosts")],
        Duration::from_secs(30),
    );
    assert_eq!(missing.status.code(), Some(64), "{}", show(&missing));
    assert!(String::from_utf8_lossy(&missing.stderr).starts_with("a3-high: /nonexistent/hosts cannot be read:"));
    let hosts = stub.join("hosts");
    std::fs::write(&hosts, "# two nodes\nnode-a slots=8\n  node-b slots=8\n").expect("hostfile");
    let filled = bash(
        script,
        &["--dry-run"],
        &[("PATH", &path), ("HOSTFILE", &hosts.display().to_string())],
        Duration::from_secs(30),
    );
    assert_eq!(filled.status.code(), Some(0), "{}", show(&filled));
    let stdout = String::from_utf8_lossy(&filled.stdout);
    assert!(
        stdout.contains(&format!("-hostfile {}", hosts.display())) && stdout.trim_end().ends_with("--dry-run"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&stub);
}
