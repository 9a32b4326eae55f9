//! tcpx-emu through the safe plugin layer vs raw TCP, over `lo`.
//!
//! `cargo build --release -p tcpx-emu && cargo bench -p nccl-net --bench emu_vs_tcp`
//!
//! For k = 1, 2, 4, 8 data sockets: one send comm and one recv comm (threads of one process), 64 MiB
//! messages, 8 in flight, for ~0.6 s; then k raw `std::net` TCP streams carrying the same bytes
//! (each message split over the k streams) for ~0.6 s; 3 such alternating rounds, medians reported. The plugin reads `NCCL_NSOCKS_PERTHREAD` once
//! per process, so each k runs in a child process (this binary re-executed) with the variables set
//! before the plugin is opened. GB = 1e9 bytes.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use nccl_net::{MemType, OpenOptions, Plugin, PluginSource, Poll, RecvComm, SendComm};

const MSG: usize = 64 << 20;
const WINDOW: usize = 8;
/// Length of one measurement; each side is measured `ROUNDS` times, alternating plugin and raw TCP
/// so background load hits both alike, and the median is reported.
const TARGET: Duration = Duration::from_millis(600);
const ROUNDS: usize = 3;
const CHILD_ENV: &str = "EMU_VS_TCP_CHILD";

fn plugin_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("TCPXEMU_PLUGIN") {
        return Ok(p.into());
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    for profile in ["release", "debug"] {
        let p = target.join(profile).join("libnccl_net_tcpxemu.so");
        if p.exists() {
            if profile == "debug" {
                eprintln!("WARNING: using the DEBUG build of tcpx-emu; run `cargo build --release -p tcpx-emu`");
            }
            return Ok(std::fs::canonicalize(&p).unwrap_or(p));
        }
    }
    Err("libnccl_net_tcpxemu.so not found: run `cargo build --release -p tcpx-emu`".into())
}

/// Sends and receives `n` messages through the plugin; returns the seconds from the common start
/// to the last receive completion.
fn plugin_run(sc: &mut SendComm, rc: &mut RecvComm, sbuf: &mut [u8], rbuf: &mut [u8], n: usize) -> f64 {
    // SAFETY (both registrations): the buffers outlive the registrations, removed at the end.
    let smr = unsafe { sc.register(sbuf.as_mut_ptr(), MSG, MemType::Host) }.expect("register");
    let rmr = unsafe { rc.register(rbuf.as_mut_ptr(), MSG, MemType::Host) }.expect("register");
    let start_gate = Barrier::new(2);
    let deadline = Instant::now() + Duration::from_secs(120);
    let secs = thread::scope(|s| {
        s.spawn(|| {
            start_gate.wait();
            let mut q = VecDeque::new();
            let mut posted = 0;
            while posted < n || !q.is_empty() {
                assert!(Instant::now() < deadline, "send stuck: {:?}", sc.counters());
                if posted < n && q.len() < WINDOW {
                    // SAFETY: every in-flight send reads the same unchanging buffer.
                    if let Some(r) = unsafe { sc.isend(smr, sbuf.as_ptr(), MSG, 0) }.expect("isend") {
                        q.push_back(r);
                        posted += 1;
                        continue;
                    }
                }
                if let Some(r) = q.pop_front() {
                    match sc.test(r).expect("test") {
                        Poll::Pending(r) => {
                            q.push_front(r);
                            idle();
                        }
                        Poll::Done { .. } => {}
                    }
                }
            }
        });
        start_gate.wait();
        let t0 = Instant::now();
        let mut q = VecDeque::new();
        let (mut posted, mut done) = (0, 0);
        while done < n {
            assert!(Instant::now() < deadline, "recv stuck: {:?}", rc.counters());
            if posted < n && q.len() < WINDOW {
                // SAFETY: the bytes are never read; overlapping in-flight receives only make the
                // plugin overwrite the same scratch buffer.
                if let Some(r) = unsafe { rc.irecv(rmr, rbuf.as_mut_ptr(), MSG, 0) }.expect("irecv") {
                    q.push_back(r);
                    posted += 1;
                    continue;
                }
            }
            if let Some(r) = q.pop_front() {
                match rc.test(r).expect("test") {
                    Poll::Pending(r) => {
                        q.push_front(r);
                        idle();
                    }
                    Poll::Done { recv, .. } => {
                        rc.consume(recv.expect("RecvDone")).expect("consume");
                        done += 1;
                    }
                }
            }
        }
        t0.elapsed().as_secs_f64()
    });
    sc.deregister(smr).expect("deregister");
    rc.deregister(rmr).expect("deregister");
    secs
}

/// `k` connected loopback TCP streams with their buffers, set up once and reused by every round
/// (as the plugin's comms and registered buffers are), buffers pre-touched so no round pays for
/// page faults.
struct Raw {
    /// (sending end, receiving end, send buffer, receive buffer) per stream.
    streams: Vec<(TcpStream, TcpStream, Vec<u8>, Vec<u8>)>,
}

impl Raw {
    fn new(k: usize) -> Raw {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let streams = (0..k)
            .map(|i| {
                let tx = TcpStream::connect(addr).expect("connect");
                let rx = l.accept().expect("accept").0;
                tx.set_nodelay(true).ok();
                // Message bytes split evenly; the last stream takes the remainder.
                let len = MSG / k + if i == k - 1 { MSG % k } else { 0 };
                (tx, rx, vec![0xA5u8; len], vec![0x11u8; len])
            })
            .collect();
        Raw { streams }
    }

    /// `n` messages of `MSG` bytes split over the streams; seconds until all arrived.
    fn run(&mut self, n: usize) -> f64 {
        let gate = Barrier::new(2 * self.streams.len() + 1);
        thread::scope(|s| {
            for (tx, rx, sbuf, rbuf) in &mut self.streams {
                let gate = &gate;
                s.spawn(move || {
                    gate.wait();
                    for _ in 0..n {
                        tx.write_all(sbuf).expect("write");
                    }
                });
                s.spawn(move || {
                    gate.wait();
                    for _ in 0..n {
                        rx.read_exact(rbuf).expect("read");
                    }
                });
            }
            gate.wait();
            let t0 = Instant::now();
            // The scope joins every thread before returning.
            t0
        })
        .elapsed()
        .as_secs_f64()
    }
}

/// What a caller does after a `test` that found its oldest request still in flight.
/// `EMU_VS_TCP_POLL=spin` retries at once; the default (`sleep`) sleeps 50 us, which costs nothing
/// at 64 MiB per message (~10+ ms each) and leaves the CPU to the plugin's socket threads, the way a
/// blocking raw-TCP reader leaves it. With few cores, two spinning callers starve those threads.
fn idle() {
    static SPIN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SPIN.get_or_init(|| std::env::var("EMU_VS_TCP_POLL").is_ok_and(|v| v == "spin")) {
        std::hint::spin_loop();
    } else {
        thread::sleep(Duration::from_micros(50));
    }
}

fn gbps(n: usize, secs: f64) -> f64 {
    (n * MSG) as f64 / 1e9 / secs
}

/// Messages that fill about `TARGET` at the rate a short calibration run showed.
fn count_for(calib_n: usize, calib_secs: f64) -> usize {
    ((TARGET.as_secs_f64() / (calib_secs / calib_n as f64)).round() as usize).clamp(4, 2000)
}

/// Child: one socket count, plugin then raw TCP. Prints `RESULT <k> <plugin GB/s> <raw GB/s>`.
fn child(k: usize) {
    let path = plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let p = Plugin::open(&PluginSource::Path(path), &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut lc, handle) = p.listen(0, "bench receiver").expect("listen");
    let p2 = p.clone();
    let t = thread::spawn(move || p2.connect(0, handle, "bench sender").wait(deadline));
    let mut rc = lc.accept(deadline).unwrap_or_else(|e| panic!("{e}"));
    let mut sc = t.join().expect("connect thread").unwrap_or_else(|e| panic!("{e}"));
    let mut sbuf = vec![0x5Au8; MSG];
    let mut rbuf = vec![0u8; MSG];

    let calib = 2;
    let np = count_for(calib, plugin_run(&mut sc, &mut rc, &mut sbuf, &mut rbuf, calib));
    let mut raw_tcp = Raw::new(k);
    let nr = count_for(calib, raw_tcp.run(calib));
    let (mut plugin, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        plugin.push(gbps(np, plugin_run(&mut sc, &mut rc, &mut sbuf, &mut rbuf, np)));
        raw.push(gbps(nr, raw_tcp.run(nr)));
    }
    drop((sc, rc, lc));
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!("{:.3} {:.3} {:.3}", v[v.len() / 2], v[0], v[v.len() - 1])
    };
    println!("RESULT {k} {} {}", stats(&mut plugin), stats(&mut raw));
}
fn main() {
    if let Ok(k) = std::env::var(CHILD_ENV) {
        child(k.parse().expect("socket count"));
        return;
    }
    let path = match plugin_path() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!(
        "tcpx-emu ({}) vs raw TCP over lo: {} MiB messages, {WINDOW} in flight, {ROUNDS} x ~{:.1} s per side",
        path.display(),
        MSG >> 20,
        TARGET.as_secs_f64()
    );
    println!("median of {ROUNDS} alternating rounds [min-max]; GB = 1e9 bytes");
    println!(
        "{:>7} {:>24} {:>24} {:>7}",
        "sockets", "plugin GB/s", "raw TCP GB/s", "ratio"
    );
    for k in [1usize, 2, 4, 8] {
        let out = Command::new(std::env::current_exe().expect("exe"))
            .env(CHILD_ENV, k.to_string())
            .env("NCCL_NSOCKS_PERTHREAD", k.to_string())
            .env("NCCL_SOCKET_NTHREADS", "1")
            .env("TCPXEMU_PLUGIN", &path)
            .output()
            .expect("spawn child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(line) = stdout.lines().find(|l| l.starts_with("RESULT ")) else {
            eprintln!(
                "k={k}: child failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        };
        let f: Vec<f64> = line.split_whitespace().skip(2).filter_map(|x| x.parse().ok()).collect();
        if let [p, pmin, pmax, r, rmin, rmax] = f[..] {
            let pc = format!("{p:.2} [{pmin:.2}-{pmax:.2}]");
            let rc = format!("{r:.2} [{rmin:.2}-{rmax:.2}]");
            println!("{k:>7} {pc:>24} {rc:>24} {:>6.2}x", p / r);
        }
    }
}
