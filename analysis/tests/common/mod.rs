//! Synthetic tcpx-perf result directories that follow `results/README.md` (schema version 1).
#![allow(dead_code)]

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The real nccl-tests outputs (copied from shared/fixtures/nccl-tests into the crate, so CI
/// does not depend on shared/).
pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nccl-tests"))
}

pub fn baselines() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/baselines"))
}

/// A fresh temporary directory under the target dir.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Tiny deterministic noise in [-1, 1), from the workspace's one generator.
pub struct Noise(tcpx_analyze::stats::Rng);
impl Noise {
    pub fn new(seed: u64) -> Noise {
        Noise(tcpx_analyze::stats::Rng::new(seed))
    }
    pub fn next(&mut self) -> f64 {
        2.0 * self.0.uniform() - 1.0
    }
}

pub struct Spec<'a> {
    pub pattern: &'a str,
    pub sizes: Vec<u64>,
    pub iters: usize,
    /// Multiplies every bandwidth (0.8 = a 20% slower run).
    pub scale: f64,
    /// Relative noise amplitude of the per-iteration times.
    pub noise: f64,
    pub seed: u64,
    pub wrong: Option<u64>,
    pub complete: bool,
    pub ranks: u32,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            pattern: "sendrecv",
            sizes: (20..=26).step_by(1).map(|k| 1u64 << k).collect(),
            iters: 20,
            scale: 1.0,
            noise: 0.02,
            seed: 1,
            wrong: Some(0),
            complete: true,
            ranks: 4,
        }
    }
}

fn factor(pattern: &str, n: u32) -> f64 {
    let n = f64::from(n);
    match pattern {
        "ring" => 2.0 * (n - 1.0) / n,
        "fullmesh" => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Writes a complete tcpx-perf result directory and returns its path.
pub fn write_run(dir: &Path, s: &Spec) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut noise = Noise::new(s.seed);
    let f = factor(s.pattern, s.ranks);
    let mut res = String::from("schema_version,pattern,scope,dir,mem,size_bytes,count,type,iters,time_us,algbw_gbps,busbw_gbps,wrong,time_min_us,time_median_us,time_p99_us,time_cv_pct,bytes_planned,bytes_moved,ranks,endpoints,nodes,plugin,abi\n");
    let mut samp = String::from("schema_version,pattern,size_bytes,iter,time_us,algbw_gbps,busbw_gbps\n");
    let mut sums = Vec::new();
    let mut pairs = String::from(
        "schema_version,pattern,size_bytes,src_rank,src_gpu,src_host,dst_rank,dst_gpu,dst_host,bytes,time_us,gbps\n",
    );
    for &size in &s.sizes {
        // A 5 GB/s link, slower for small sizes (latency 50 us).
        let base_bw = 5.0 * s.scale;
        let t0 = size as f64 / (base_bw * 1e3) + 50.0 / s.scale;
        let times: Vec<f64> = (0..s.iters).map(|_| t0 * (1.0 + s.noise * noise.next())).collect();
        for (i, t) in times.iter().enumerate() {
            let a = size as f64 / t / 1e3;
            writeln!(samp, "1,{},{size},{i},{t:.4},{a:.6},{:.6}", s.pattern, a * f).unwrap();
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let a = size as f64 / mean / 1e3;
        let planned = size * u64::from(s.ranks);
        sums.push(format!(
            r#"{{"size_bytes":{size},"iters":{},"time_us":{mean:.4},"algbw_gbps":{a:.6},"busbw_gbps":{:.6},"wrong":{},"bytes_planned":{planned},"bytes_moved":{planned}}}"#,
            s.iters,
            a * f,
            s.wrong.map_or("null".to_string(), |w| w.to_string())
        ));
        writeln!(
            res,
            "1,{},all,bi,cuda,{size},{},float,{},{mean:.4},{a:.6},{:.6},{},{:.4},{:.4},{:.4},1.0,{planned},{planned},{},{},1,tcpx-emu,8",
            s.pattern,
            size / 4,
            s.iters,
            a * f,
            s.wrong.map(|w| w.to_string()).unwrap_or_default(),
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            s.ranks,
            s.ranks
        )
        .unwrap();
        for src in 0..s.ranks {
            for dst in 0..s.ranks {
                if src == dst {
                    continue;
                }
                let slow = if src == 1 && dst == 2 { 0.5 } else { 1.0 };
                let g = 5.0 * slow * (1.0 + 0.01 * noise.next());
                writeln!(
                    pairs,
                    "1,{},{size},{src},{src},host{},{dst},{dst},host{},{size},{:.3},{g:.4}",
                    s.pattern,
                    src / 2,
                    dst / 2,
                    size as f64 / g / 1e3
                )
                .unwrap();
            }
        }
    }
    std::fs::write(dir.join("results.csv"), res).unwrap();
    std::fs::write(dir.join("samples.csv"), samp).unwrap();
    std::fs::write(dir.join("pairs.csv"), pairs).unwrap();
    let wrong_total = s.wrong.unwrap_or(0) * s.sizes.len() as u64;
    let n = s.sizes.len();
    let summary = format!(
        r#"{{"schema_version":1,"complete":{},"sizes_planned":{n},"sizes_done":{n},"results":[{}],"tool":{{"name":"tcpx-perf","version":"0.1.0","git_commit":"abc123"}},"command":["tcpx-perf","--pattern","{}"],"start_time":"2026-11-21T05:00:00Z","end_time":"2026-11-21T05:01:00Z","config":{{}},"plugin":{{"name":"tcpx-emu","abi":8}},"mpi":"Open MPI 4.1.6","hosts":[],"env":{{}},"avg_busbw_gbps":1.0,"wrong_total":{wrong_total},"status":"{}"}}"#,
        s.complete,
        sums.join(","),
        s.pattern,
        if wrong_total > 0 { "wrong-data" } else { "ok" }
    );
    std::fs::write(dir.join("summary.json"), summary).unwrap();
    dir.to_path_buf()
}

/// Runs the `tcpx-analyze` binary: its exit status and stdout + stderr together.
pub fn run_analyze(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpx-analyze"))
        .args(args)
        .output()
        .expect("run tcpx-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Adds what `--baseline nccl` writes to a result directory: NCCL `speedup` times as fast as
/// the run's own figures (schema 3 columns, `nccl_samples.csv` in both timings).
pub fn add_nccl(dir: &Path, speedup: f64) {
    let res = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let mut lines = res.lines();
    let header = lines.next().unwrap();
    let cols: Vec<&str> = header.split(',').collect();
    let at = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    // Schema 3 throughout (one schema version per directory): schema 2's bytes_verified_by,
    // then the nccl_* columns.
    let mut out = format!(
        "{header},bytes_verified_by,wire_rx_bytes,wire_payload_ratio,wire_by_iface,netbw_gbps,send_peers_in_flight,recv_peers_in_flight,nccl_time_us,nccl_algbw_gbps,nccl_busbw_gbps,nccl_ratio,nccl_batch_time_us,nccl_batch_algbw_gbps,nccl_batch_busbw_gbps,nccl_wrong\n"
    );
    for l in lines {
        let v: Vec<&str> = l.split(',').collect();
        let f = |c: &str| v[at(c)].parse::<f64>().unwrap();
        let (t, a, b) = (
            f("time_us") / speedup,
            f("algbw_gbps") * speedup,
            f("busbw_gbps") * speedup,
        );
        let row = l.replacen("1,", "3,", 1);
        out += &format!(
            "{row},plugin,,,,{},1,1,{t},{a},{b},{},{},{},{},0\n",
            v[at("busbw_gbps")],
            1.0 / speedup,
            t * 0.9,
            a / 0.9,
            b / 0.9
        );
    }
    std::fs::write(dir.join("results.csv"), out).unwrap();
    for f in ["samples.csv", "pairs.csv"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        std::fs::write(dir.join(f), text.replace("\n1,", "\n3,")).unwrap();
    }
    let sum = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        sum.replace(r#""schema_version":1"#, r#""schema_version":3"#),
    )
    .unwrap();
    let samp = std::fs::read_to_string(dir.join("samples.csv")).unwrap();
    let mut ns = String::from("schema_version,pattern,size_bytes,timing,iter,time_us,algbw_gbps,busbw_gbps\n");
    for timing in ["barrier", "batch"] {
        for l in samp.lines().skip(1) {
            let v: Vec<&str> = l.split(',').collect();
            let t: f64 = v[4].parse::<f64>().unwrap() / speedup;
            let a: f64 = v[5].parse::<f64>().unwrap() * speedup;
            let b: f64 = v[6].parse::<f64>().unwrap() * speedup;
            ns += &format!("3,{},{},{timing},{},{t},{a},{b}\n", v[1], v[2], v[3]);
        }
    }
    std::fs::write(dir.join("nccl_samples.csv"), ns).unwrap();
}

/// The workspace's tcpx-perf, built next to tcpx-analyze.
pub fn tcpx_perf() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_tcpx-analyze")).with_file_name("tcpx-perf");
    assert!(
        p.exists(),
        "{} missing: build the workspace first (bash launch/build.sh --all, or cargo build --release --workspace)",
        p.display()
    );
    p
}

/// One real small run, `mpirun -np 2 tcpx-perf --pattern sendrecv -b 4M -e 8M -n 5 -w 1 --out
/// OUT EXTRA...` over tcpx-emu on loopback, with `env` set: how it ended.
pub fn tcpx_perf_run(out: &Path, env: &[(&str, &str)], extra: &[&str]) -> std::process::Output {
    std::process::Command::new("timeout")
        .args([
            "120",
            "mpirun",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--mca",
            "btl_vader_single_copy_mechanism",
            "none",
            "-np",
            "2",
        ])
        .arg(tcpx_perf())
        .args([
            "--pattern",
            "sendrecv",
            "-b",
            "4M",
            "-e",
            "8M",
            "-n",
            "5",
            "-w",
            "1",
            "--progress",
            "never",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied())
        .output()
        .expect("mpirun")
}

/// [`tcpx_perf_run`] that must succeed: its stdout (the log).
pub fn real_run(out: &Path, env: &[(&str, &str)]) -> String {
    let o = tcpx_perf_run(out, env, &[]);
    assert!(
        o.status.success(),
        "tcpx-perf run {} failed: {}\n{}",
        out.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Edits a result directory's summary.json through `f`.
pub fn edit_summary_json(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("summary.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// summary.json's `hosts` as tcpx-perf writes it for ranks on `hosts` (one rank a host, in order).
pub fn hosts_json(hosts: &[&str]) -> serde_json::Value {
    serde_json::Value::Array(
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| serde_json::json!({"rank": i, "hostname": h, "node": i, "gpus": [0]}))
            .collect(),
    )
}

/// One node's verdict as tcpx-perf writes it in summary.json's `node_verdicts`.
pub fn node_verdict(host: &str, verdict: &str) -> serde_json::Value {
    serde_json::json!({
        "host": host,
        "verdict": verdict,
        "evidence": format!("lowest NIC side at 0.91 of the median in the probe ({verdict})"),
        "decided_by": "probe",
        "lowest_share": 0.91,
        "slow_sides": [],
    })
}

/// `tcpx-analyze ARGS` with `stdin`, killed after `limit` (a hang, or an input read without
/// end): its exit status (None when killed), stdout + stderr, and how long it took.
pub fn run_analyze_within(
    args: &[&str],
    stdin: std::process::Stdio,
    limit: std::time::Duration,
) -> (Option<i32>, String, std::time::Duration) {
    let start = std::time::Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tcpx-analyze"))
        .args(args)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tcpx-analyze");
    let mut killed = false;
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let code = if killed { None } else { out.status.code() };
    (code, text, start.elapsed())
}
