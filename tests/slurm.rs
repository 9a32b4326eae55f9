//! Slurm, for real: a one-node Slurm on this host (`launch/slurm/local-slurm.sh`: munged,
//! slurmctld, slurmd), tcpx-perf started by `srun --mpi=pmix` with no mpirun anywhere, and
//! `launch/slurm/a3-high.sbatch` submitted as a user would, on tcpx-emu in host memory.
//!
//! Each test brings up its own Slurm (own state directory and ports) and takes it down when it
//! ends, failed or not; one Slurm at a time (4 ranks on a 2-core host). Where Slurm cannot run
//! (not root, packages missing: `local-slurm.sh` exits 77) a test skips, saying so, unless `CI`
//! is set: then it fails with the reason, since CI installs Slurm (launch/setup.sh --tests).

mod common;
mod rig;

use common::{csv_rows, output_within, show, summary};
use rig::Rig;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const LOCAL_SLURM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/launch/slurm/local-slurm.sh");
const SBATCH_SCRIPT: &str = "launch/slurm/a3-high.sbatch";
/// Small and quick: two sizes, two timed iterations.
const QUICK: &str = "--mem host -b 1M -e 2M -n 2 -w 1";

static ONE_SLURM_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One local Slurm, taken down when dropped (a failing test leaves no daemon behind).
struct Slurm {
    dir: PathBuf,
    port: u16,
    /// `launch/cluster.sh`'s rig whose nodes are this Slurm's nodes (id, state directory).
    rig: Option<(u32, PathBuf)>,
    /// Where this test's result folders and job output go.
    scratch: PathBuf,
    _alone: MutexGuard<'static, ()>,
}

impl Slurm {
    /// Starts a Slurm for test `name`, or None (with a line on stderr) where this machine cannot
    /// run one and `CI` is unset.
    fn up(name: &str) -> Option<Slurm> {
        Self::up_on(name, None)
    }

    /// As [`Slurm::up`], with the nodes of `rig` (up already) as Slurm's nodes.
    fn up_on(name: &str, rig: Option<&Rig>) -> Option<Slurm> {
        Self::up_through(name, rig, &[])
    }

    /// As [`Slurm::up_on`], `local-slurm.sh up` started through `wrapper` (a program and its
    /// arguments, e.g. `flock LOCK`).
    fn up_through(name: &str, rig: Option<&Rig>, wrapper: &[&str]) -> Option<Slurm> {
        let alone = ONE_SLURM_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let tag = format!("{}-{name}", std::process::id());
        let scratch = std::env::temp_dir().join(format!("tcpx-perf-slurm-{tag}"));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("scratch directory");
        let slurm = Slurm {
            dir: std::env::temp_dir().join(format!("tcpx-local-slurm-{tag}")),
            port: free_port_pair(),
            rig: rig.map(|r| (r.id, r.state_dir.clone())),
            scratch,
            _alone: alone,
        };
        let mut up = slurm.local_slurm_command("up");
        if let Some((program, args)) = wrapper.split_first() {
            let mut wrapped = Command::new(program);
            wrapped.args(args).arg(up.get_program()).args(up.get_args());
            for (k, v) in up.get_envs() {
                if let Some(v) = v {
                    wrapped.env(k, v);
                }
            }
            up = wrapped;
        }
        let o = output_within(&mut up, Duration::from_secs(60), "local-slurm.sh up");
        if o.status.code() == Some(77) {
            let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
            assert!(
                std::env::var_os("CI").is_none(),
                "Slurm must run in CI and cannot here: {why} (launch/setup.sh --tests installs slurmctld, slurmd, slurm-client, munge)"
            );
            eprintln!("skipped: no Slurm on this machine: {why}");
            return None;
        }
        assert!(o.status.success(), "local-slurm.sh up: {}", show(&o));
        Some(slurm)
    }

    fn local_slurm(&self, verb: &str) -> Output {
        let mut cmd = self.local_slurm_command(verb);
        output_within(&mut cmd, Duration::from_secs(60), &format!("local-slurm.sh {verb}"))
    }

    fn local_slurm_command(&self, verb: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(LOCAL_SLURM)
            .arg(verb)
            .env("LOCAL_SLURM_DIR", &self.dir)
            .env("LOCAL_SLURM_PORT", self.port.to_string());
        if let Some((id, state_dir)) = &self.rig {
            cmd.env("LOCAL_SLURM_RIG", id.to_string())
                .env("CLUSTER_STATE_DIR", state_dir);
        }
        cmd
    }

    /// A Slurm client command (srun, sbatch, scancel, scontrol) talking to this Slurm, from the
    /// repository root.
    fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(ROOT)
            .env("SLURM_CONF", self.dir.join("etc/slurm.conf"))
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        cmd
    }

    /// `sbatch [--wait] launch/slurm/a3-high.sbatch args` on one node with 4 tasks, tcpx-emu as
    /// the plugin, results under the scratch directory; (job id, sbatch's output).
    fn sbatch(&self, wait: bool, args: &str, env: &[(&str, &str)], limit: Duration) -> (u64, Output) {
        self.sbatch_shaped("-N 1 --ntasks-per-node=4", wait, args, env, limit)
    }

    /// [`Slurm::sbatch`] with the job's shape (`sbatch` flags) given.
    fn sbatch_shaped(
        &self,
        shape: &str,
        wait: bool,
        args: &str,
        env: &[(&str, &str)],
        limit: Duration,
    ) -> (u64, Output) {
        let plugin = Path::new(BIN).with_file_name("libnccl-net-tcpxemu-v7.so");
        let mut cmd = self.client("sbatch");
        cmd.args(shape.split_whitespace())
            .arg(format!("--output={}/job-%j.out", self.scratch.display()))
            .args(wait.then_some("--wait"))
            .arg(SBATCH_SCRIPT)
            .args(args.split_whitespace())
            .env("PLUGIN", &plugin)
            .env("TCPX_LIB", &self.scratch)
            .env("TCPX_PERF", BIN)
            .env("TCPX_PERF_RESULTS", &self.scratch)
            .env("MPI_IFNAME", "lo");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = output_within(&mut cmd, limit, "sbatch");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let job = stdout
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("sbatch named no job: {}", show(&o)));
        (job, o)
    }

    /// The job's output file (what the batch script and srun printed).
    fn job_output(&self, job: u64) -> String {
        std::fs::read_to_string(self.scratch.join(format!("job-{job}.out"))).unwrap_or_default()
    }

    /// The job's default result folder.
    fn results_of(&self, job: u64) -> PathBuf {
        self.scratch.join(format!("slurm-{job}"))
    }

    /// Waits up to `limit` for `job` to end, every process of it gone (scontrol says COMPLETING
    /// until then); its final state and exit status (what `sbatch --wait` returns). Polls every
    /// 200 ms: `sbatch --wait` polls at up to 10 s, which would be most of these tests' time.
    fn wait_job(&self, job: u64, limit: Duration) -> (String, i32) {
        let start = Instant::now();
        loop {
            let mut cmd = self.client("scontrol");
            cmd.args(["show", "job", "-o", &job.to_string()]);
            let o = output_within(&mut cmd, Duration::from_secs(30), "scontrol show job");
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let field = |name: &str| {
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .unwrap_or_default()
                    .to_string()
            };
            let state = field("JobState=");
            if [
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "TIMEOUT",
                "NODE_FAIL",
                "OUT_OF_MEMORY",
            ]
            .contains(&state.as_str())
            {
                let exit = field("ExitCode=");
                let status = exit.split(':').next().and_then(|c| c.parse().ok());
                return (state, status.unwrap_or_else(|| panic!("no exit code: {text}")));
            }
            assert!(
                start.elapsed() < limit,
                "job {job} not over after {limit:?}: {text}\njob output:\n{}",
                self.job_output(job)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let o = self.local_slurm("down");
        if !o.status.success() {
            eprintln!("local-slurm.sh down failed: {}", show(&o));
        }
        if o.status.success() && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// A TCP port p with p + 1 free too (slurmctld's and slurmd's), on loopback.
fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let a = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let p = a.local_addr().expect("local address").port();
        if p < 65534 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two consecutive free ports on 127.0.0.1 in 50 tries");
}

/// `srun --mpi=pmix -n 4 tcpx-perf --pattern P` for every pattern, no mpirun: every run is a
/// complete result folder whose header and record say 4 ranks on 1 node, and the record names
/// the Slurm job it came from.
#[test]
fn srun_starts_every_pattern_without_mpirun() {
    let Some(slurm) = Slurm::up("srun") else { return };
    for pattern in ["sendrecv", "pairs", "ring", "fullmesh"] {
        let dir = slurm.scratch.join(pattern);
        let mut cmd = slurm.client("srun");
        cmd.args(["--mpi=pmix", "-n", "4", BIN, "--pattern", pattern])
            .args(QUICK.split_whitespace())
            .arg("--out")
            .arg(&dir);
        let o = output_within(&mut cmd, Duration::from_secs(60), &format!("srun {pattern}"));
        assert!(o.status.success(), "{pattern}: {}", show(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("# ranks: 4 endpoints: 4 nodes: 1 "),
            "{pattern}: header\n{}",
            show(&o)
        );
        let s = summary(&dir);
        assert_eq!(s["complete"], true, "{pattern}: {s}");
        assert_eq!(s["status"], "ok", "{pattern}: {s}");
        assert_eq!(
            (s["ranks"].as_u64(), s["nodes"].as_u64()),
            (Some(4), Some(1)),
            "{pattern}: {s}"
        );
        assert_eq!(csv_rows(&dir, "results.csv").len(), 2, "{pattern}: both sizes");
        let job = s["env"]["SLURM_JOB_ID"].as_str().unwrap_or_default();
        assert!(
            job.parse::<u64>().is_ok(),
            "{pattern}: the record names the job: {}",
            s["env"]
        );
    }
    // Without --mpi=pmix (Slurm's default MpiDefault=none) the tasks cannot form one MPI job:
    // one line naming the flag, before MPI_Init's page blaming Slurm's build.
    let mut cmd = slurm.client("srun");
    cmd.args(["--mpi=none", "-n", "2", BIN])
        .args(QUICK.split_whitespace())
        .arg("--no-out");
    let o = output_within(&mut cmd, Duration::from_secs(60), "srun --mpi=none");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("run srun --mpi=pmix"), "{}", show(&o));
    assert!(
        !stderr.contains("MPI_Init"),
        "tcpx-perf said it before MPI started: {}",
        show(&o)
    );
}

/// The batch script as a user submits it: the dry run, then the measurement into
/// results/slurm-<job id>, and the job's status is tcpx-perf's (0).
#[test]
fn sbatch_job_writes_a_complete_folder_and_exits_0() {
    let Some(slurm) = Slurm::up("sbatch-ok") else { return };
    let (job, o) = slurm.sbatch(
        true,
        &format!("-- --pattern fullmesh {QUICK}"),
        &[],
        Duration::from_secs(90),
    );
    let out = slurm.job_output(job);
    assert!(o.status.success(), "{}\njob output:\n{out}", show(&o));
    let dry = out
        .find("# dry run: 0 error(s)")
        .unwrap_or_else(|| panic!("no dry run:\n{out}"));
    let run = out
        .find("# Collective test starting: fullmesh")
        .unwrap_or_else(|| panic!("no run:\n{out}"));
    assert!(dry < run, "the dry run comes first:\n{out}");
    let dir = slurm.results_of(job);
    let s = summary(&dir);
    assert_eq!(s["complete"], true, "{s}\n{out}");
    assert_eq!(s["status"], "ok");
    assert_eq!(s["ranks"], 4);
    assert_eq!(s["env"]["SLURM_JOB_ID"], job.to_string());
    // TCPX's environment from launch/tcpx-env.sh reached the ranks; PLUGIN chose the plugin.
    assert_eq!(s["env"]["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"], "eth1,eth2,eth3,eth4");
    assert_eq!(s["config"]["window"], 16, "tcpx-env.sh's --window 16");
    assert!(
        out.contains(&format!(
            "a3-high.sbatch: tcpx-perf exited 0; results in {}",
            dir.display()
        )),
        "{out}"
    );
}

/// A flag tcpx-perf refuses: the dry run fails, the job stops with its status (64) and no
/// measurement runs; a measurement that fails after a clean dry run (wrong bytes) ends the job
/// with tcpx-perf's status (2).
#[test]
fn sbatch_job_exits_with_tcpx_perfs_failure() {
    let Some(slurm) = Slurm::up("sbatch-fail") else { return };
    let (job, o) = slurm.sbatch(false, "--pattern nosuch --mem host", &[], Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let (state, status) = slurm.wait_job(job, Duration::from_secs(60));
    let out = slurm.job_output(job);
    assert_eq!((state.as_str(), status), ("FAILED", 64), "job output:\n{out}");
    assert!(out.contains("invalid value 'nosuch' for '--pattern"), "{out}");
    assert!(out.contains("the dry run failed (exit 64)"), "{out}");
    assert!(!slurm.results_of(job).exists(), "no measurement after a failed dry run");

    // --out among the arguments replaces results/slurm-<job id>.
    let mine = slurm.scratch.join("corrupt");
    let args = format!("{QUICK} --out {}", mine.display());
    let (job, o) = slurm.sbatch(false, &args, &[("TCPXEMU_FAULT", "corrupt")], Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let (state, status) = slurm.wait_job(job, Duration::from_secs(60));
    let out = slurm.job_output(job);
    assert_eq!((state.as_str(), status), ("FAILED", 2), "job output:\n{out}");
    assert!(out.contains("# dry run: 0 error(s)"), "the dry run passed:\n{out}");
    assert_eq!(summary(&mine)["status"], "wrong-data", "{out}");
    assert!(!slurm.results_of(job).exists(), "--out replaced the default folder");

    // TCPX's library directory missing on the node: one line naming TCPX_LIB, before any srun.
    let missing = slurm.scratch.join("no-such-dir");
    let env = [("TCPX_LIB", missing.to_str().expect("utf-8 path"))];
    let (job, o) = slurm.sbatch(false, QUICK, &env, Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let (state, status) = slurm.wait_job(job, Duration::from_secs(60));
    let out = slurm.job_output(job);
    assert_eq!((state.as_str(), status), ("FAILED", 1), "job output:\n{out}");
    assert!(
        out.contains(&format!("TCPX_LIB={} is not a directory", missing.display())),
        "{out}"
    );
    assert!(!out.contains("# tcpx-perf"), "no tcpx-perf step ran:\n{out}");
}

/// A job with a bad node (tcpx-perf's exit 5, here from a stand-in that writes the drain list
/// it is given): the job's status is 5, the lists go beside results/slurm-<job id>, and the
/// script prints the `scontrol update ... state=drain` line for each bad node.
#[test]
fn sbatch_job_with_a_bad_node_prints_the_drain_lines() {
    let Some(slurm) = Slurm::up("sbatch-drain") else { return };
    let stand_in = slurm.scratch.join("tcpx-perf-bad-node");
    std::fs::write(
        &stand_in,
        "#!/usr/bin/env bash\n\
         for a in \"$@\"; do [ \"$a\" = --dry-run ] && exit 0; done\n\
         prev=; for a in \"$@\"; do [ \"$prev\" = --drain-list ] && list=$a; prev=$a; done\n\
         [ \"${SLURM_PROCID:-0}\" = 0 ] && echo 'node5 tcpx-perf: eth2 sending at 0.15 of the median' >\"$list\"\n\
         exit 5\n",
    )
    .expect("write the stand-in");
    let made = Command::new("chmod").arg("+x").arg(&stand_in).status().expect("chmod");
    assert!(made.success());
    let env = [("TCPX_PERF", stand_in.to_str().expect("utf-8 path"))];
    let (job, o) = slurm.sbatch(false, QUICK, &env, Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let (state, status) = slurm.wait_job(job, Duration::from_secs(60));
    let out = slurm.job_output(job);
    assert_eq!((state.as_str(), status), ("FAILED", 5), "job output:\n{out}");
    let drain = slurm.scratch.join(format!("slurm-{job}.drain.txt"));
    assert!(
        out.contains(&format!(
            "a3-high.sbatch: bad nodes in {}; to drain them:",
            drain.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("  scontrol update nodename=node5 state=drain reason=tcpx-perf:\\ eth2\\ sending\\ at\\ 0.15"),
        "{out}"
    );
}

/// `scancel` mid-run: Slurm's SIGTERM reaches every rank, rank 0 records `interrupted` (by
/// slurmstepd) with every size finished so far, within KillWait.
#[test]
fn scancel_keeps_every_finished_size() {
    let Some(slurm) = Slurm::up("scancel") else { return };
    let slow = "--pattern sendrecv --mem host -b 64K -e 4M -n 150 -w 1 --progress never";
    let (job, o) = slurm.sbatch(false, slow, &[("TCPXEMU_FAULT", "slow")], Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let dir = slurm.results_of(job);
    let rows = || csv_rows_or_none(&dir).unwrap_or(0);
    let start = Instant::now();
    while rows() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "two sizes not on disk after 60 s:\n{}",
            slurm.job_output(job)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut cancel = slurm.client("scancel");
    cancel.arg(job.to_string());
    let o = output_within(&mut cancel, Duration::from_secs(30), "scancel");
    assert!(o.status.success(), "{}", show(&o));
    let (state, _) = slurm.wait_job(job, Duration::from_secs(30));
    assert_eq!(state, "CANCELLED");
    let out = slurm.job_output(job);
    let s = summary(&dir);
    assert_eq!(s["status"], "interrupted", "{s}\n{out}");
    assert_eq!(s["complete"], false);
    assert_eq!(s["signal"], "SIGTERM");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("interrupted by SIGTERM from slurmstepd"), "{error}");
    let done = s["sizes_done"].as_u64().expect("sizes_done") as usize;
    assert!((2..7).contains(&done), "sizes_done {done}\n{out}");
    assert_eq!(csv_rows(&dir, "results.csv").len(), done, "every finished size kept");
}

/// results.csv's rows, None while the file is not there yet.
fn csv_rows_or_none(dir: &Path) -> Option<usize> {
    dir.join("results.csv")
        .exists()
        .then(|| csv_rows(dir, "results.csv").len())
}

/// Slurm over two nodes of a cluster in a box: one slurmd per rig node (its own network namespace
/// and host name), so `sbatch -N 2` lands on both and the ranks' data crosses the rig's data NICs.
/// The header and the record say 2 nodes (node0, node1), found from the ranks, no hostfile.
#[test]
fn sbatch_lands_on_two_rig_nodes() {
    // Rig 12: the id kept for the Slurm tests.
    let Some(rig) = Rig::up(12, "--nodes 2 --nics 2") else {
        return;
    };
    let Some(slurm) = Slurm::up_on("rig", Some(&rig)) else {
        return;
    };
    let env = [("TCPXEMU_IFNAMES", "eth1,eth2"), ("MPI_IFNAME", "eth0")];
    let args = format!("--pattern fullmesh {QUICK}");
    let (job, o) = slurm.sbatch_shaped("-N 2 --ntasks-per-node=2", false, &args, &env, Duration::from_secs(30));
    assert!(o.status.success(), "{}", show(&o));
    let (state, status) = slurm.wait_job(job, Duration::from_secs(90));
    let out = slurm.job_output(job);
    assert_eq!((state.as_str(), status), ("COMPLETED", 0), "job output:\n{out}");
    assert!(out.contains("# ranks: 4 endpoints: 4 nodes: 2 "), "{out}");
    let s = summary(&slurm.results_of(job));
    assert_eq!(s["complete"], true, "{s}");
    assert_eq!(s["nodes"], 2);
    let hosts: Vec<&str> = s["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["hostname"].as_str())
        .collect();
    assert_eq!(hosts, ["node0", "node0", "node1", "node1"], "{s}");
    assert_eq!(s["env"]["SLURM_JOB_NUM_NODES"], "2");
}

/// `up` twice is one Slurm; `status` says so; `down` stops every daemon and removes its
/// directory, twice is fine, and it refuses a directory it did not make.
#[test]
fn local_slurm_up_is_idempotent_and_down_leaves_nothing() {
    let Some(slurm) = Slurm::up("lifecycle") else { return };
    // Every daemon's pid file: munged, slurmctld, slurmd-<node>.
    let pids = || -> Vec<String> {
        let mut pids: Vec<String> = std::fs::read_dir(slurm.dir.join("run"))
            .map(|d| d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()).collect())
            .unwrap_or_default();
        pids.sort();
        pids
    };
    let before = pids();
    assert_eq!(before.len(), 3, "munged, slurmctld and one slurmd: {before:?}");
    let o = slurm.local_slurm("up");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(pids(), before, "a second up starts nothing");
    let o = slurm.local_slurm("status");
    assert!(o.status.success(), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("idle"), "{}", show(&o));

    let o = slurm.local_slurm("down");
    assert!(o.status.success(), "{}", show(&o));
    assert!(!slurm.dir.exists(), "down removes its directory");
    for pid in before.iter().map(|p| p.trim()) {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still runs after down"
        );
    }
    assert_eq!(slurm.local_slurm("status").status.code(), Some(1), "status after down");
    assert!(slurm.local_slurm("down").status.success(), "down twice");

    std::fs::create_dir_all(slurm.dir.join("keep")).expect("a directory not made by local-slurm.sh");
    let o = slurm.local_slurm("down");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(slurm.dir.join("keep").exists(), "down removes only what it made");
    let o = slurm.local_slurm("up");
    assert_eq!(o.status.code(), Some(1), "up refuses it too: {}", show(&o));
    std::fs::remove_dir_all(&slurm.dir).expect("remove the test's directory");
}

/// `flock LOCK local-slurm.sh up` holds LOCK only while `up` runs: the daemons it starts
/// (munged, slurmctld, slurmd) keep none of the caller's descriptors. Before they were started
/// detached, each kept the lock's descriptor and LOCK stayed held until `down`.
#[test]
fn local_slurm_daemons_keep_none_of_the_callers_descriptors() {
    let lock = std::env::temp_dir().join(format!("tcpx-local-slurm-lock-{}", std::process::id()));
    std::fs::write(&lock, "").expect("lock file");
    let lock_arg = lock.display().to_string();
    let Some(slurm) = Slurm::up_through("fds", None, &["flock", &lock_arg]) else {
        return;
    };
    let o = Command::new("flock")
        .args(["-n", &lock_arg, "true"])
        .output()
        .expect("flock");
    let mut holders = Vec::new();
    for pid_file in std::fs::read_dir(slurm.dir.join("run")).expect("pid files").flatten() {
        let pid = std::fs::read_to_string(pid_file.path()).unwrap_or_default();
        let fds = std::fs::read_dir(format!("/proc/{}/fd", pid.trim())).expect("the daemon runs");
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target == lock) {
                holders.push(format!(
                    "{} (fd {:?})",
                    pid_file.file_name().to_string_lossy(),
                    fd.file_name()
                ));
            }
        }
    }
    let _ = std::fs::remove_file(&lock);
    assert!(holders.is_empty(), "daemons hold the caller's lock file: {holders:?}");
    assert!(o.status.success(), "LOCK is still held after up returned: {}", show(&o));
}

/// The Slurm scripts parse and pass shellcheck (installed by launch/setup.sh --tests; skipped where
/// absent and CI is unset); the job script run outside a job says how to submit it.
#[test]
fn slurm_scripts_pass_shellcheck() {
    let scripts = ["launch/slurm/local-slurm.sh", SBATCH_SCRIPT];
    for script in scripts {
        let o = Command::new("bash")
            .arg("-n")
            .arg(script)
            .current_dir(ROOT)
            .output()
            .expect("bash -n");
        assert!(o.status.success(), "{script}: {}", show(&o));
    }
    let mut outside = Command::new("bash");
    outside.arg(SBATCH_SCRIPT).current_dir(ROOT).env_remove("SLURM_JOB_ID");
    let o = output_within(&mut outside, Duration::from_secs(30), "a3-high.sbatch outside a job");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("not inside a Slurm job: submit it with sbatch"),
        "{}",
        show(&o)
    );
    if let Err(e) = Command::new("shellcheck").arg("--version").output() {
        assert!(std::env::var_os("CI").is_none(), "shellcheck must run in CI: {e}");
        eprintln!("skipped: no shellcheck ({e}); launch/setup.sh --tests installs it");
        return;
    }
    let mut cmd = Command::new("shellcheck");
    cmd.arg("-x").args(scripts).current_dir(ROOT);
    let o = output_within(&mut cmd, Duration::from_secs(60), "shellcheck");
    assert!(o.status.success(), "{}", show(&o));
}
