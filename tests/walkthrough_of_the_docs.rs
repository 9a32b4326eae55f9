//! Every command the README and docs/*.md show, run as far as this machine can (issue 55: the
//! docs drifted from the code). Each command in a code block is either run here for real, in a
//! scratch directory (tcpx-perf over tcpx-emu on loopback through mpirun, tcpx-perf --plan,
//! tcpx-analyze on the runs just made), with what the docs say of it checked, or skipped with a
//! reason from [`SKIPPED`]; a command that is neither fails the test, so a new one is seen.
//!
//! Named to run after every other test binary of tcpx-perf (cargo runs them in name order):
//! run right before tests/endings.rs, `a_stopped_rank_0_is_named_by_the_others` failed 3 of 3
//! (rank 0, continued by mpirun, never rewrote summary.json), and passed alone; the cause is
//! not found yet.
//!
//! Runs are made small: sizes `-b 64K -e 256K`, `-n 3 -w 1`, loops of runs 3 rounds (the docs'
//! 5 or 10 runs take minutes on a CI machine), `--simulate` at 64x8x4. Everything else is as
//! written.

mod common;

use common::{output_within, show};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents whose commands are checked: the README and docs/ (not docs/runs/, which
/// records what was run on other machines, each run's command beside its output).
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// Commands shown that cannot run here, by a piece of their text, and why (first match wins).
const SKIPPED: &[(&str, &str)] = &[
    (
        "docs/measurements.md:",
        "the measurement record: each command as run on the machine its row names (GPU hosts, 32 ranks); the evidence is under docs/runs/",
    ),
    (
        "launch/quickstart.sh",
        "installs packages (apt, rustup) and builds: what this suite's setup already did",
    ),
    ("launch/test.sh", "runs this suite"),
    ("launch/build.sh", "builds the workspace: this test runs on its build"),
    (
        "launch/a3-high.sh",
        "needs A3-high nodes with TCPX (its hostfile check: tests/launch_scripts.rs)",
    ),
    (
        "launch/cluster.sh",
        "brings up a rig of network namespaces, which other tests hold by fixed ids",
    ),
    (
        "CLUSTER_RIG=",
        "brings up a rig of network namespaces, which other tests hold by fixed ids",
    ),
    ("--baseline nccl", "needs GPUs and libnccl.so.2"),
    (
        "tcpx-analyze gate results/<run>",
        "reads a --baseline nccl run (GPUs and libnccl.so.2)",
    ),
    (
        "compare results/<run> -B analysis/baselines/a3high-nccl-tcpx-allreduce.toml",
        "the 19.2 GB/s recipe's compare: analysis/tests/comparable.rs runs it on the recipe's own run (the_recipe_on_the_vm_differs_from_the_a3_baseline_only_in_sizes_and_ranks)",
    ),
    ("salloc ", "needs a Slurm cluster"),
    ("srun ", "needs a Slurm cluster"),
    ("sbatch ", "needs a Slurm cluster"),
    ("scontrol ", "needs a Slurm cluster"),
    ("launch/slurm/", "starts Slurm daemons (tests/slurm.rs, on a rig)"),
    ("results/slurm-", "reads a Slurm job's results"),
    ("results/gate-ring", "reads ring runs on A3-high nodes under Slurm"),
    ("results/trusted-ring", "reads ring runs on A3-high nodes under Slurm"),
    ("kubectl ", "needs a GKE cluster"),
    ("docker ", "needs a container registry"),
    ("hadolint ", "a linter of the Dockerfile (tests/k8s.rs runs it)"),
    ("launch/k8s/", "GKE manifests (rendered and validated by tests/k8s.rs)"),
    ("results/gke", "reads runs made on GKE"),
    (
        "TCPX_HISTORY_DB=",
        "a PostgreSQL server of the reader's (tests of analysis/ run one)",
    ),
    (
        "history add results/trusted",
        "the PostgreSQL database of TCPX_HISTORY_DB (skipped above)",
    ),
    (
        "\"$TCPX_HISTORY_DB\"",
        "the PostgreSQL database of TCPX_HISTORY_DB (skipped above)",
    ),
    (
        "history import -",
        "into the PostgreSQL database of TCPX_HISTORY_DB (skipped above)",
    ),
    ("tools/", "maintainers' GPU-host scripts"),
];

/// The first words that make a code line a command (after `$ ` and `VAR=value`).
fn is_command(line: &str) -> bool {
    // Diagrams (box-drawing characters) name programs too.
    if !line.is_ascii() {
        return false;
    }
    let words: Vec<&str> = line.trim_start_matches("$ ").split_whitespace().collect();
    let first = words.iter().find(|w| !w.contains('=') || w.starts_with('-'));
    first.is_some_and(|w| {
        [
            "mpirun",
            "tcpx-perf",
            "tcpx-analyze",
            "bash",
            "sudo",
            "for",
            "srun",
            "salloc",
            "sbatch",
            "scontrol",
            "kubectl",
            "docker",
            "hadolint",
            "python3",
        ]
        .contains(w)
            || ["target/release/", "launch/", "tools/"]
                .iter()
                .any(|p| w.starts_with(p))
    })
}

/// Every command in `text`'s code blocks (indented or fenced), continuation lines (`\`, `|`)
/// and `for ...; do` ... `done` joined into one.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending: Option<String> = None;
    for raw in text.lines() {
        if raw.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let code = fenced || raw.starts_with("    ");
        if !code {
            pending = None;
            continue;
        }
        let line = raw.trim().trim_start_matches("$ ");
        if let Some(mut p) = pending.take() {
            p.push(if p.ends_with("do") || p.ends_with(';') {
                ' '
            } else {
                '\n'
            });
            p.push_str(line);
            let open = p.trim_start().starts_with("for ") && !p.trim_end().ends_with("done");
            if line.ends_with('\\') || line.ends_with('|') || open {
                pending = Some(p);
            } else {
                out.push(p);
            }
            continue;
        }
        if !is_command(line) {
            continue;
        }
        let for_open = line.starts_with("for ") && !line.contains("done");
        if line.ends_with('\\') || line.ends_with('|') || for_open {
            pending = Some(line.to_string());
        } else {
            out.push(line.to_string());
        }
    }
    out
}

/// The command made small: a loop of runs 3 rounds, each tcpx-perf run `-b 64K -e 256K -n 3 -w 1`
/// (its own -b/-e/-n/-w replaced; not `--plan`, which moves no data), and `[optional]` parts dropped.
fn small(cmd: &str) -> String {
    let mut s = cmd
        .replace("for i in 1 2 3 4 5;", "for i in 1 2 3;")
        .replace("$(seq 1 10)", "$(seq 1 3)")
        .replace(" [--out DIR] [--plan-json FILE]", "")
        // 64 x 8 x 4 rehearses the same bookkeeping in 0.3 s (README, At scale) where 512 x 8 x 4
        // takes 7 s to 30 s here.
        .replace("--plan 512x8x4", "--plan 64x8x4");
    // The comment after a command is not run.
    s = s
        .lines()
        .map(|l| l.split("   #").next().unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    if !s.contains("--plan") {
        let words: Vec<String> = s.split(' ').map(String::from).collect();
        let sized = words.iter().any(|w| w == "-b");
        let has = |flag: &str| words.iter().any(|w| w == flag);
        let (iterated, warmed) = (has("-n"), has("-w"));
        let mut out = Vec::new();
        let mut i = 0;
        while i < words.len() {
            match words[i].as_str() {
                "-b" | "-e" | "-n" | "-w" if i + 1 < words.len() => {
                    let small = match words[i].as_str() {
                        "-b" => "64K",
                        "-e" => "256K",
                        "-n" => "3",
                        _ => "1",
                    };
                    out.push(words[i].clone());
                    out.push(small.to_string());
                    i += 2;
                    continue;
                }
                w if w.ends_with("tcpx-perf") || w.ends_with("launch/local.sh") => {
                    out.push(w.to_string());
                    if w.ends_with("local.sh") && i + 1 < words.len() {
                        i += 1;
                        out.push(words[i].clone());
                    }
                    if !iterated {
                        out.extend(["-n", "3"].map(String::from));
                    }
                    if !warmed {
                        out.extend(["-w", "1"].map(String::from));
                    }
                    out.extend(["--progress", "never"].map(String::from));
                    if !sized {
                        out.extend(["-b", "64K", "-e", "256K"].map(String::from));
                    }
                }
                w => out.push(w.to_string()),
            }
            i += 1;
        }
        s = out.join(" ");
    }
    s
}

/// A scratch directory where `target/release` and `launch` are the repository's (the docs'
/// relative paths), with both binaries on PATH.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tcpx-docs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("target")).expect("scratch");
        let release = Path::new(BIN).parent().expect("target/release");
        std::os::unix::fs::symlink(release, dir.join("target/release")).expect("link target/release");
        std::os::unix::fs::symlink(repo().join("launch"), dir.join("launch")).expect("link launch");
        std::fs::create_dir_all(dir.join("analysis/baselines")).expect("baselines dir");
        Scratch { dir }
    }

    /// Runs `cmd` with bash in the scratch directory: mpirun as a small shared host needs it.
    fn run(&self, cmd: &str) -> Output {
        let release = Path::new(BIN).parent().expect("target/release");
        let path = format!("{}:{}", release.display(), std::env::var("PATH").unwrap_or_default());
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(cmd)
            .current_dir(&self.dir)
            .env("PATH", path)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("OMPI_MCA_hwloc_base_binding_policy", "none")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        output_within(&mut c, Duration::from_secs(120), cmd)
    }

    /// The result directories under `results/` made since `before`, each with its summary.json.
    fn new_runs(&self, before: &[PathBuf]) -> Vec<(PathBuf, serde_json::Value)> {
        let mut found = Vec::new();
        let mut stack = vec![self.dir.join("results")];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                let p = e.path();
                if p.join("summary.json").is_file() {
                    if !before.contains(&p) {
                        found.push(p);
                    }
                } else if p.is_dir() {
                    stack.push(p);
                }
            }
        }
        found.sort();
        found
            .into_iter()
            .map(|p| {
                let s = common::summary(&p);
                (p, s)
            })
            .collect()
    }

    fn runs(&self) -> Vec<PathBuf> {
        self.new_runs(&[]).into_iter().map(|(p, _)| p).collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the docs say a command does, checked on its output; the exit statuses are the docs'
/// (README "Exit status", analysis/README.md, docs/ci-gating.md).
fn check(doc: &str, cmd: &str, o: &Output, made: &[(PathBuf, serde_json::Value)]) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    let code = o.status.code();
    let what = format!("{doc}: {cmd}\n{}", show(o));
    if (cmd.contains("tcpx-perf") || cmd.contains("launch/local.sh")) && !cmd.contains("--plan") {
        // A run: exit 0, one complete, checked result directory per run.
        assert_eq!(code, Some(0), "{what}");
        let rounds = if cmd.starts_with("for ") { 3 } else { 1 };
        assert_eq!(made.len(), rounds, "one result directory per run: {what}");
        for (dir, s) in made {
            assert_eq!(
                (&s["complete"], &s["status"]),
                (&true.into(), &"ok".into()),
                "{}: {what}",
                dir.display()
            );
            if cmd.contains("-g 2 --pattern ring") {
                // "2 ranks x 2 endpoints"
                assert_eq!((&s["ranks"], &s["endpoints"]), (&2.into(), &4.into()), "{what}");
            }
            if cmd.contains("--ranks-per-node 2") {
                // "one host standing in for 2 nodes"
                assert_eq!((&s["ranks"], &s["nodes"]), (&4.into(), &2.into()), "{what}");
            }
        }
        return;
    }
    if cmd.contains("--plan") {
        if cmd.contains("--simulate") {
            // "names the NIC it slowed"; exit 0 when the plan fits (this machine's limits) and the
            // slowed NIC is named alone, else 1.
            assert!(stdout.contains("; named, nobody else"), "{what}");
            let fits = stdout.contains("# plan: 0 error(s)");
            assert_eq!(code, Some(i32::from(!fits)), "{what}");
        } else {
            // 0 fits, 1 crosses one of this machine's limits.
            assert!(matches!(code, Some(0 | 1)), "{what}");
        }
        assert!(stdout.contains("per process"), "the needs table: {what}");
        return;
    }
    let sub = |s: &str| cmd.contains(&format!("tcpx-analyze {s}"));
    if sub("gate") {
        // 0 pass, 1 regression, 2 inconclusive; never 3 (bad input) or 4 (refused).
        assert!(matches!(code, Some(0..=2)), "{what}");
    } else if sub("history detect") {
        // 1: a regression in a newest segment.
        assert!(matches!(code, Some(0 | 1)), "{what}");
    } else {
        assert_eq!(code, Some(0), "{what}");
    }
}

/// The files a tcpx-analyze command says it writes, in the scratch directory after it ran.
fn written_by(cmd: &str) -> Vec<&str> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| matches!(w[0], "-o" | "--markdown" | "--json") && w[1] != "-")
        .map(|w| w[1])
        .collect()
}

#[test]
fn every_documented_command_runs_as_documented_or_is_skipped_with_a_reason() {
    let mut ran = Vec::new();
    let mut skipped = Vec::new();
    let mut ran_small: Vec<String> = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("doc");
        let name = doc.strip_prefix(repo()).unwrap_or(&doc).display().to_string();
        let scratch = Scratch::new(&name.replace(['/', '.'], "-"));
        for cmd in commands(&text) {
            let keyed = format!("{name}: {cmd}");
            if let Some((_, why)) = SKIPPED.iter().find(|(needle, _)| keyed.contains(needle)) {
                skipped.push(format!("{keyed}  -- {why}"));
                continue;
            }
            let small = small(&cmd);
            // A --plan shown twice (README, docs/scale.md) is the same: run once.
            if small.contains("--plan") && ran_small.contains(&small) {
                ran.push(format!("{keyed}  (as above)"));
                continue;
            }
            ran_small.push(small.clone());
            let before = scratch.runs();
            let o = scratch.run(&small);
            check(&name, &small, &o, &scratch.new_runs(&before));
            for file in written_by(&small) {
                assert!(scratch.dir.join(file).is_file(), "{name}: {small} wrote no {file}");
            }
            ran.push(keyed);
        }
    }
    eprintln!("ran {}:\n  {}", ran.len(), ran.join("\n  "));
    eprintln!("skipped {}:\n  {}", skipped.len(), skipped.join("\n  "));
    // The README's own commands that can run here are among those run.
    for want in [
        "-g 2 --pattern ring",
        "launch/local.sh 4",
        "--simulate",
        "make-baseline",
        "history report",
    ] {
        assert!(
            ran.iter().any(|c| c.contains(want)),
            "no command with {want:?} ran: {ran:#?}"
        );
    }
}

/// docs/a3-high.md shows `--plan` of 64 x 8 x 4 over real TCPX (4 sockets per comm) with its
/// needs: the same command prints the same figures (the needs are the shape's, not the
/// machine's; the limits column is this machine's and is not compared).
#[test]
fn a3_high_plan_prints_the_needs_the_doc_shows() {
    let doc = std::fs::read_to_string(repo().join("docs/a3-high.md")).expect("doc");
    let start = doc
        .find("$ NCCL_NSOCKS_PERTHREAD=4 tcpx-perf --plan 64x8x4")
        .expect("the doc's --plan");
    let block: Vec<&str> = doc[start..].lines().take_while(|l| !l.starts_with("```")).collect();
    let o = output_within(
        Command::new(BIN)
            .args(["--plan", "64x8x4", "--pattern", "fullmesh", "--plugin", "tcpx"])
            .env("NCCL_NSOCKS_PERTHREAD", "4"),
        Duration::from_secs(60),
        "tcpx-perf --plan",
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let mut compared = 0;
    for shown in &block[1..] {
        // The resource's name and its two needs (per process, per node); the limit is this
        // machine's.
        let w = words(shown);
        let Some(first) = w.iter().position(|x| x == "-" || x.parse::<u64>().is_ok()) else {
            continue;
        };
        let want = &w[..(first + 2).min(w.len())];
        assert!(
            stdout.lines().any(|l| words(l).starts_with(want)),
            "the doc shows {want:?}; tcpx-perf printed:\n{stdout}"
        );
        compared += 1;
    }
    assert!(compared >= 4, "{block:?}");
}

/// The README's `-J` row (issue 55: it said the directory is made "as `--out`'s"; since wave 6 a
/// file's directory is never made): a `-J` in a missing directory ends the run before any data
/// moves, exit 1, naming it, and the directory stays missing.
#[test]
fn readme_j_row_says_what_a_missing_directory_gets() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `-J FILE` |"))
        .expect("the -J row");
    assert!(
        row.contains("its directory must exist (none is made for a file: exit 1 naming it"),
        "{row}"
    );
    let scratch = Scratch::new("j-row");
    let o = scratch.run(&format!(
        "mpirun -np 2 {BIN} -b 64K -e 64K -n 2 -w 1 --progress never -J missing/x.json --out run"
    ));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        stderr.contains("missing does not exist (none is made for a file)"),
        "{}",
        show(&o)
    );
    assert!(!scratch.dir.join("missing").exists(), "no directory made for -J");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("# Avg bus bandwidth"),
        "no data moved"
    );
}
