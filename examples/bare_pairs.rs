//! The bare plugin: what `tcpx-perf --pattern pairs --dir uni` measures, with nothing of
//! tcpx-perf around it (no MPI, no second process, no engine, no placement). One process, one
//! send comm and one receive comm over the plugin's device 0, each driven by its own thread.
//!
//! `cargo build --release --example bare_pairs`, then (any plugin knobs in the environment):
//!
//!     NCCL_NSOCKS_PERTHREAD=8 target/release/examples/bare_pairs --plugin target/release/libnccl_net_tcpxemu_v7.so \
//!         -b 64M -e 1G --chunk 64M --window 8 -n 8 -w 2 --poll sleep
//!
//! Per iteration both threads leave a barrier, start their clocks, post `--chunk` requests (at most
//! `--window` outstanding) and test the oldest one until the last completes; the iteration's time
//! is the slower side's (tcpx-perf's `-a 3`, the max over ranks, of the same two clocks). Per size:
//! each side's mean over the timed iterations, the slower of the two, as tcpx-perf reduces them.
//! `tools/overhead.sh` alternates this with tcpx-perf on the same plugin and knobs.
//!
//! `--poll`: how a thread waits after a `test` that found its oldest request in flight: `sleep`
//! 50 us (as `emu_vs_tcp`), `spin`, or tcpx-perf's `adaptive` backoff. Output: one line per size,
//! `RESULT size time_us algbw_gbps cpu_s_per_gb cores t_med_us` (t_med: the median iteration), GB = 1e9 bytes; CPU is this process's
//! user + system time over the timed iterations (the plugin's helper threads included).

use std::collections::VecDeque;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use nccl_net::{MemType, MrId, OpenOptions, Plugin, PluginSource, Poll, RecvComm, SendComm};
use tcpx_perf::cputime::CpuTime;
use tcpx_perf::engine::backoff::{Backoff, Outlook, PollMode};
use tcpx_perf::engine::buffer::HostBuffer;
use tcpx_perf::stats::summarize;
use tcpx_units::parse_size;

#[derive(Parser)]
#[command(about = "tcpx-perf's pairs/uni pattern over a bare plugin: one process, two threads")]
struct Args {
    /// The plugin (.so)
    #[arg(long)]
    plugin: String,
    /// Smallest size
    #[arg(short = 'b', default_value = "64M", value_parser = parse_size)]
    min: u64,
    /// Largest size
    #[arg(short = 'e', default_value = "1G", value_parser = parse_size)]
    max: u64,
    /// Size factor between sizes
    #[arg(short = 'f', default_value_t = 2)]
    factor: u64,
    /// Bytes per request
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    chunk: u64,
    /// Requests outstanding per comm
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Timed iterations per size
    #[arg(short = 'n', default_value_t = 8)]
    iters: usize,
    /// Warm-up iterations per size
    #[arg(short = 'w', default_value_t = 2)]
    warmup: usize,
    /// How to wait after a test that found the oldest request in flight
    #[arg(long, value_enum, default_value_t = BarePoll::Sleep)]
    poll: BarePoll,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BarePoll {
    /// Sleep 50 us (emu_vs_tcp's way)
    Sleep,
    /// Test again at once
    Spin,
    /// tcpx-perf's --poll adaptive
    Adaptive,
}

/// Waits between tests the way `--poll` says; `quiet` is the time since the side's last completion.
struct Waiter {
    poll: BarePoll,
    backoff: Backoff,
}

impl Waiter {
    fn new(poll: BarePoll) -> Self {
        let mode = if poll == BarePoll::Adaptive {
            PollMode::Adaptive
        } else {
            PollMode::Spin
        };
        Waiter {
            poll,
            backoff: Backoff::new(mode),
        }
    }

    fn progressed(&mut self) {
        self.backoff.progressed();
    }

    fn idle(&mut self, quiet: Duration) {
        match self.poll {
            BarePoll::Sleep => thread::sleep(Duration::from_micros(50)),
            BarePoll::Spin => std::hint::spin_loop(),
            // Without the engine's view of the lanes: the conservative bound (the quiet time).
            BarePoll::Adaptive => Backoff::wait(self.backoff.empty_pass(Instant::now(), || Outlook {
                quiet,
                refill_depth: Some(1),
                ..Outlook::default()
            })),
        }
    }
}

/// The requests of one iteration: (offset, length) pieces of `size` in `chunk` bytes.
fn pieces(size: u64, chunk: u64) -> Vec<(usize, usize)> {
    (0..size.div_ceil(chunk))
        .map(|i| {
            let off = i * chunk;
            (off as usize, chunk.min(size - off) as usize)
        })
        .collect()
}

const DEADLINE: Duration = Duration::from_secs(120);

/// One iteration of the sender; returns the time from `start` to its last completion.
fn send_iteration(
    sc: &mut SendComm,
    mr: MrId,
    buf: &[u8],
    reqs: &[(usize, usize)],
    window: usize,
    w: &mut Waiter,
) -> Duration {
    let start = Instant::now();
    let (mut last, mut next) = (start, 0);
    let mut q = VecDeque::with_capacity(window);
    while next < reqs.len() || !q.is_empty() {
        assert!(start.elapsed() < DEADLINE, "send stuck: {:?}", sc.counters());
        let mut progressed = false;
        while next < reqs.len() && q.len() < window {
            let (off, len) = reqs[next];
            // SAFETY: the range lies inside the registered buffer, which outlives the request.
            match unsafe { sc.isend(mr, buf.as_ptr().add(off), len, 0) }.expect("isend") {
                Some(r) => q.push_back(r),
                None => break,
            }
            next += 1;
            progressed = true;
        }
        while let Some(r) = q.pop_front() {
            match sc.test(r).expect("test") {
                Poll::Pending(r) => {
                    q.push_front(r);
                    break;
                }
                Poll::Done { .. } => {
                    last = Instant::now();
                    progressed = true;
                }
            }
        }
        if progressed {
            w.progressed();
        } else {
            w.idle(last.elapsed());
        }
    }
    last - start
}

/// One iteration of the receiver, likewise (each receive consumed as soon as it completes).
fn recv_iteration(
    rc: &mut RecvComm,
    mr: MrId,
    buf: &mut [u8],
    reqs: &[(usize, usize)],
    window: usize,
    w: &mut Waiter,
) -> Duration {
    let start = Instant::now();
    let (mut last, mut next) = (start, 0);
    let mut q = VecDeque::with_capacity(window);
    while next < reqs.len() || !q.is_empty() {
        assert!(start.elapsed() < DEADLINE, "recv stuck: {:?}", rc.counters());
        let mut progressed = false;
        while next < reqs.len() && q.len() < window {
            let (off, len) = reqs[next];
            // SAFETY: as for sends; nothing else touches the receive buffer meanwhile.
            match unsafe { rc.irecv(mr, buf.as_mut_ptr().add(off), len, 0) }.expect("irecv") {
                Some(r) => q.push_back(r),
                None => break,
            }
            next += 1;
            progressed = true;
        }
        while let Some(r) = q.pop_front() {
            match rc.test(r).expect("test") {
                Poll::Pending(r) => {
                    q.push_front(r);
                    break;
                }
                Poll::Done { recv, .. } => {
                    if let Some(done) = recv {
                        rc.consume(done).expect("consume");
                    }
                    last = Instant::now();
                    progressed = true;
                }
            }
        }
        if progressed {
            w.progressed();
        } else {
            w.idle(last.elapsed());
        }
    }
    last - start
}

fn main() {
    let args = Args::parse();
    if args.min == 0 || args.min > args.max || args.chunk == 0 || args.window == 0 || args.iters == 0 || args.factor < 2
    {
        eprintln!("bare_pairs: need 0 < -b <= -e, -f >= 2, --chunk > 0, --window > 0, -n > 0");
        std::process::exit(64);
    }
    // As tcpx-perf does for the built-in tcpx-emu (strict mode moves no data without it); before
    // the plugin starts any thread.
    if std::env::var_os(tcpx_perf::contracts::DYNAMIC_CHUNK_ENV).is_none() {
        std::env::set_var(
            tcpx_perf::contracts::DYNAMIC_CHUNK_ENV,
            tcpx_perf::contracts::DYNAMIC_CHUNK_DEFAULT,
        );
    }
    let plugin =
        Plugin::open(&PluginSource::Path(args.plugin.clone().into()), &OpenOptions::default()).unwrap_or_else(|e| {
            eprintln!("bare_pairs: {e}");
            std::process::exit(1);
        });
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut lc, handle) = plugin.listen(0, "bare receiver").expect("listen");
    let p2 = plugin.clone();
    let connecting = thread::spawn(move || p2.connect(0, handle, "bare sender").wait(deadline));
    let mut rc = lc.accept(deadline).expect("accept");
    let mut sc = connecting.join().expect("connect thread").expect("connect");
    // tcpx-perf's own buffers (page-aligned, transparent huge pages, written once up front).
    let alloc = |len: u64| {
        HostBuffer::new(len as usize).unwrap_or_else(|e| {
            eprintln!("bare_pairs: {e}");
            std::process::exit(1);
        })
    };
    let (mut sbuf, mut rbuf) = (alloc(args.max), alloc(args.max));
    let len = sbuf.len();
    // SAFETY: both buffers outlive their registrations (deregistered below).
    let smr = unsafe { sc.register(sbuf.as_mut_ptr(), len, MemType::Host) }.expect("register");
    // SAFETY: as above.
    let rmr = unsafe { rc.register(rbuf.as_mut_ptr(), len, MemType::Host) }.expect("register");
    println!(
        "# bare_pairs: {} ({}), chunk {} window {} iters {} warmup {} poll {}",
        args.plugin,
        plugin.name(),
        args.chunk,
        args.window,
        args.iters,
        args.warmup,
        match args.poll {
            BarePoll::Sleep => "sleep",
            BarePoll::Spin => "spin",
            BarePoll::Adaptive => "adaptive",
        }
    );
    println!("#      size   time_us  algbw_gbps  cpu_s_per_gb  cores  t_med_us");
    let mut size = args.min;
    while size <= args.max {
        let reqs = pieces(size, args.chunk);
        let total = args.warmup + args.iters;
        // One sending thread for the whole size, as tcpx-perf's endpoint threads: each iteration
        // starts when both leave `start` and ends at `end`.
        let (start, end) = (Barrier::new(2), Barrier::new(2));
        let send_bytes = sbuf.as_slice();
        let (sends, recvs, cpu, wall) = thread::scope(|scope| {
            let sender = scope.spawn(|| {
                let mut w = Waiter::new(args.poll);
                (0..total)
                    .map(|_| {
                        start.wait();
                        let t = send_iteration(&mut sc, smr, send_bytes, &reqs, args.window, &mut w);
                        end.wait();
                        t
                    })
                    .collect::<Vec<_>>()
            });
            let mut w = Waiter::new(args.poll);
            let (mut cpu, mut wall) = (CpuTime::default(), Duration::ZERO);
            let mut recvs = Vec::with_capacity(total);
            for i in 0..total {
                let (cpu0, t0) = (CpuTime::now(), Instant::now());
                start.wait();
                recvs.push(recv_iteration(
                    &mut rc,
                    rmr,
                    rbuf.as_mut_slice(),
                    &reqs,
                    args.window,
                    &mut w,
                ));
                end.wait();
                if i >= args.warmup {
                    cpu.add(CpuTime::now().since(cpu0));
                    wall += t0.elapsed();
                }
            }
            (sender.join().expect("sender"), recvs, cpu, wall)
        });
        let timed = |v: &[Duration]| v[args.warmup..].iter().map(Duration::as_secs_f64).collect::<Vec<f64>>();
        let (s, r) = (timed(&sends), timed(&recvs));
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        // tcpx-perf -a 3: each side's mean, then the slower side; per iteration the slower side.
        let time = mean(&s).max(mean(&r));
        let per_iter: Vec<f64> = s.iter().zip(&r).map(|(a, b)| a.max(*b) * 1e6).collect();
        let gb = size as f64 * args.iters as f64 / 1e9;
        println!(
            "RESULT {size} {:.1} {:.3} {:.4} {:.2} {:.1}",
            time * 1e6,
            size as f64 / time / 1e9,
            cpu.total_s() / gb,
            cpu.total_s() / wall.as_secs_f64(),
            summarize(&per_iter).median
        );
        size = size.saturating_mul(args.factor);
    }
    sc.deregister(smr).expect("deregister");
    rc.deregister(rmr).expect("deregister");
}
