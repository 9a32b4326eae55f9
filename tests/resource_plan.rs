//! The resource preflight and `tcpx-perf --plan`, run as a user runs them: the binary under a
//! lowered `ulimit -n`, bad shapes, the JSON it writes, a real `mpirun` job refused by its own
//! preflight, and the model's counts against what the ranks of a real run hold in `/proc`.
//!
//! Needs `mpirun` (Open MPI) and the release build of the workspace (`launch/build.sh`).

mod common;

use common::{mpirun_command, output_within, show};
use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

/// Variables that change the model; the tests set what they mean.
const MODEL_VARS: [&str; 8] = [
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_NTHREADS",
    "TCPXEMU_THREADS",
    "TCPXEMU_SHARED_THREADS",
    "TCPXEMU_THREAD_SOCKETS",
    "TCPXEMU_BOUNCE_POOL_MB",
    "NCCL_DYNAMIC_CHUNK_SIZE",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV",
];

/// `tcpx-perf ARGS` under `sh -c 'ulimit -n NOFILE; exec ...'` (no mpirun).
fn plan(nofile: Option<u64>, args: &str, env: &[(&str, &str)]) -> Output {
    let line = match nofile {
        Some(n) => format!("ulimit -n {n}; exec {BIN} {args}"),
        None => format!("exec {BIN} {args}"),
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(line);
    for v in MODEL_VARS {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, Duration::from_secs(60), "tcpx-perf --plan")
}

fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tcpx-perf-plan-{}-{name}", std::process::id()))
}

#[test]
fn sixty_four_nodes_of_fullmesh_cross_1024_open_files() {
    let o = plan(Some(1024), "--plan 64x8x4 --pattern fullmesh", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // 504 inter-node peers x 2 channels x 2 directions = 2016 comms of 2 sockets, 1008
    // listeners, 256 spare.
    assert!(
        out.contains("# error: open files limit 1024 is below the 5296 a rank needs") && out.contains("ulimit -n"),
        "{}",
        show(&o)
    );
    assert!(out.contains("open files                     5296"), "{out}");
    assert!(out.contains("1024 (RLIMIT_NOFILE) error"), "{out}");
    assert!(out.lines().last().unwrap_or("").contains("would cross"), "{out}");
    for line in out.lines().filter(|l| l.starts_with("# error")) {
        assert!(line.len() <= 220, "one short line per finding: {line}");
    }
}

#[test]
fn two_nodes_of_the_same_fit() {
    let o = plan(Some(1024), "--plan 2x8x4 --pattern fullmesh", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("# plan: 0 error(s)"), "{out}");
    assert!(
        out.contains("comms (send+recv)                32          256"),
        "{out}"
    );
}

#[test]
fn bad_shapes_are_one_usage_line() {
    for (shape, names) in [
        ("--plan 0x8x4", "NODES"),
        ("--plan 8x8", "NODESxGPUSxNICS"),
        ("--plan 2x8x4x1", "NODESxGPUSxNICS"),
        ("--plan 2xeightx4", "GPUS"),
        ("--plan 2x8x0", "NICS"),
        ("--plan 2x8x4 -g 3", "-g"),
        ("--plan 2x8x4 --ranks-per-node 9", "--ranks-per-node"),
        ("--plan-json x.json", "--plan"),
    ] {
        let o = plan(None, shape, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{shape}: {}", show(&o));
        assert_eq!(err.lines().count(), 1, "{shape}: one line: {err}");
        assert!(
            err.starts_with("tcpx-perf: usage error: ") && err.contains(names),
            "{shape}: {err}"
        );
        assert!(o.stdout.is_empty(), "{shape}: nothing planned");
    }
}

#[test]
fn plan_json_holds_the_figures_and_verdicts() {
    let file = scratch("plan.json");
    let o = plan(
        Some(1024),
        &format!(
            "--plan 64x8x4 --pattern fullmesh --plugin tcpx --plan-json {}",
            file.display()
        ),
        &[("NCCL_NSOCKS_PERTHREAD", "4")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("written")).expect("JSON");
    let _ = std::fs::remove_file(&file);
    assert_eq!(j["shape"], serde_json::json!({"nodes": 64, "gpus": 8, "nics": 4}));
    assert_eq!(
        j["plugin"]["kind"], "tcpx",
        "--plugin tcpx plans TCPX without loading it"
    );
    let p = &j["per_process"];
    assert_eq!(p["comms"], 2016);
    // TCPX: 4 data + 1 ctrl socket per comm, data + ctrl listener per listen comm.
    assert_eq!(p["files"], 2016 * 5 + 1008 * 2 + 256);
    assert_eq!(p["helper_threads"], 2016, "NCCL_SOCKET_NTHREADS=1 per comm");
    assert_eq!(j["per_node"]["ports"].as_array().map(Vec::len), Some(4));
    let files = j["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["resource"] == "open files"))
        .expect("an open files verdict");
    assert_eq!(
        (&files["level"], &files["need"], &files["limit"]),
        (&"error".into(), &p["files"], &1024.into())
    );
    assert_eq!(j["fits"], false);
}

#[test]
fn a_run_past_its_open_files_limit_is_refused_before_connecting() {
    let mut cmd = mpirun_command();
    cmd.args(["-np", "2", "sh", "-c"])
        .arg(format!("ulimit -n 200; exec {BIN} --no-out -n 1"))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for v in MODEL_VARS {
        cmd.env_remove(v);
    }
    let o = output_within(&mut cmd, Duration::from_secs(120), "mpirun");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    // sendrecv, 2 ranks: 2 comms each way of 2 sockets, 2 listeners, 256 spare.
    assert!(
        text.contains("open files limit 200 is below the 266 a rank needs"),
        "{}",
        show(&o)
    );
    assert!(text.contains("no data moved"), "{}", show(&o));
}

/// Whether `pid`'s parent, or theirs, up to a few generations, is `root` (other engineers' and
/// other tests' ranks run beside this one's).
fn descends_from(pid: u32, root: u32) -> bool {
    let parent = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // `pid (comm) state ppid ...`: the comm may hold spaces, so split after its ')'.
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let mut at = pid;
    for _ in 0..4 {
        match parent(at) {
            Some(p) if p == root => return true,
            Some(p) if p > 1 => at = p,
            _ => return false,
        }
    }
    false
}

/// The most threads and open files each `tcpx-perf` process under `child` held while it ran.
fn peaks_while(mut child: std::process::Child, limit: Duration) -> (Output, HashMap<u32, (usize, usize)>) {
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, Iterator::count);
    let mut peaks: HashMap<u32, (usize, usize)> = HashMap::new();
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() && start.elapsed() < limit {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let ours = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "tcpx-perf");
            if ours && descends_from(pid, child.id()) {
                let (t, f) = (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")));
                let peak = peaks.entry(pid).or_default();
                *peak = (peak.0.max(t), peak.1.max(f));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    (child.wait_with_output().expect("output"), peaks)
}

#[test]
fn the_model_bounds_what_a_real_run_holds() {
    // 1 MiB per peer: two 512K requests, so both channels carry data and every comm starts its
    // helpers (they start at a comm's first transfer).
    let flags = "--pattern fullmesh --scope all --mem host -b 4M -e 4M";
    let env = [("NCCL_NSOCKS_PERTHREAD", "4")];
    let file = scratch("model.json");
    let o = plan(
        None,
        &format!("--plan 1x4x1 {flags} --plan-json {}", file.display()),
        &env,
    );
    assert!(o.status.code().is_some(), "{}", show(&o));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("written")).expect("JSON");
    let _ = std::fs::remove_file(&file);
    let model = |k: &str| j["per_process"][k].as_u64().expect("a figure") as usize;
    // 3 peers x 2 channels each way = 12 comms of 4 data + 1 ctrl socket; 48 sockets <= 64, so
    // tcpx-emu's auto mode gives each its own helper thread.
    assert_eq!(
        (model("comms"), model("sockets"), model("helper_threads")),
        (12, 60, 48)
    );

    let out = scratch("run");
    let mut cmd = mpirun_command();
    cmd.args(["-np", "4", BIN, "-n", "200", "-w", "0", "--out"])
        .arg(&out)
        .args(flags.split_whitespace())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for v in MODEL_VARS {
        cmd.env_remove(v);
    }
    cmd.envs(env);
    let child = common::spawn_piped(&mut cmd, "mpirun");
    let (o, peaks) = peaks_while(child, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(peaks.len(), 4, "four ranks seen: {peaks:?}");
    // Each rank's own count at the end of setup, in summary.json.
    let setup = common::summary(&out)["placement"]["setup"].clone();
    let _ = std::fs::remove_dir_all(&out);
    let own = |k: &str| -> Vec<usize> {
        setup[k]
            .as_array()
            .unwrap_or_else(|| panic!("{k} in {setup}"))
            .iter()
            .map(|v| v.as_u64().expect("a count") as usize)
            .collect()
    };
    let (own_threads, own_fds) = (own("threads_after_setup"), own("fds_after_setup"));
    assert_eq!((own_threads.len(), own_fds.len()), (4, 4), "{setup}");
    for (rank, (threads, fds)) in own_threads.into_iter().zip(own_fds).enumerate() {
        // Before the first transfer: every socket open, helpers not started yet.
        assert!(
            (model("sockets")..=model("files")).contains(&fds) && threads <= model("threads"),
            "rank {rank} after setup: {threads} threads, {fds} fds"
        );
    }
    for (pid, (threads, fds)) in peaks {
        // Every connected comm's sockets were open at once, within the model's file count.
        assert!(
            (model("sockets")..=model("files")).contains(&fds),
            "rank {pid}: {fds} fds, model {}..={}",
            model("sockets"),
            model("files")
        );
        // The endpoint and every helper thread existed at once, within the model's peak.
        assert!(
            (1 + model("helper_threads")..=model("threads")).contains(&threads),
            "rank {pid}: {threads} threads, model {}..={}",
            1 + model("helper_threads"),
            model("threads")
        );
    }
}

/// `--plan` runs without mpirun, so it must not start MPI: with a PML that does not exist, MPI's
/// initialisation fails (the control run shows it), and `--plan` still plans.
#[test]
fn plan_never_starts_mpi() {
    let with_broken_mpi = |args: &str| {
        let mut cmd = Command::new(BIN);
        cmd.args(args.split_whitespace())
            .env("OMPI_MCA_pml", "no-such-pml")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        output_within(&mut cmd, Duration::from_secs(60), "tcpx-perf")
    };
    let control = with_broken_mpi("-g 2 -b 4K -e 4K -n 1 --no-out");
    assert_ne!(
        control.status.code(),
        Some(0),
        "MPI starts despite the PML: {}",
        show(&control)
    );
    let o = with_broken_mpi("--plan 2x8x4");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("# plan: 0 error(s)"),
        "{}",
        show(&o)
    );
}
