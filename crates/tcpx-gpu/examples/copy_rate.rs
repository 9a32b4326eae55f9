//! Staging-copy rate between device memory and pinned host memory, as tcpx-emu's helper threads
//! copy: `THREADS` threads, each with its own stream, two pinned staging buffers and events,
//! copying `PIECE`-byte pieces (async copy + event record per piece).
//!
//! Modes (`MODE`):
//! * `each`: synchronize on every piece's event before the next piece is issued (one piece in
//!   flight per thread: the per-copy latency shows);
//! * `batch`: issue `BATCH` pieces, record one event, synchronize once (same copy sizes, a
//!   quarter of the event calls or fewer: the API-call share shows).
//!
//! Prints one line per (threads, piece): aggregate GB/s (GB = 1e9) and microseconds per piece
//! per thread. A diagnosis tool for the GPU host, not part of the test suite.
//!
//! Usage: `THREADS="1 12 24" PIECES="131072 524288 2097152" MODE=each DIR=d2h copy_rate [GPU]`

use std::time::Instant;
use tcpx_gpu::{Device, Event, Gpu, PinnedFlags};

fn env_list(key: &str, default: &str) -> Vec<usize> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_owned())
        .split_whitespace()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{key}: '{v}' is not a number")))
        .collect()
}

fn main() {
    let ordinal: usize = std::env::args().nth(1).map_or(0, |a| a.parse().expect("GPU ordinal"));
    if Gpu::probe().ok().flatten().is_none_or(|g| g.count() == 0) {
        println!("SKIP: no GPU");
        return;
    }
    let threads = env_list("THREADS", "1 12 24");
    let pieces = env_list("PIECES", "131072 524288 2097152");
    let bytes = env_list("BYTES", "268435456")[0];
    let batch = env_list("BATCH", "4")[0].max(1);
    let mode = std::env::var("MODE").unwrap_or_else(|_| "each".into());
    let d2h = std::env::var("DIR").map_or(true, |d| d != "h2d");
    let dev = Device::open_lazy(ordinal).expect("open GPU");
    let src = dev.alloc(bytes).expect("device buffer");
    for &t in &threads {
        for &piece in &pieces {
            let start = Instant::now();
            let per_thread: Vec<f64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..t)
                    .map(|i| {
                        let (dev, src) = (&dev, &src);
                        let mode = mode.as_str();
                        s.spawn(move || {
                            dev.make_current().expect("context");
                            let stream = dev.new_stream().expect("stream");
                            let mut host = dev.alloc_pinned(piece * batch, PinnedFlags::PLAIN).expect("pinned");
                            let ev = Event::new(dev, false).expect("event");
                            let n = bytes / piece;
                            let t0 = Instant::now();
                            let mut k = 0;
                            while k < n {
                                let group = if mode == "batch" { batch.min(n - k) } else { 1 };
                                for g in 0..group {
                                    let off = ((k + g + i) % n) * piece;
                                    let h = host.as_mut_ptr().wrapping_add(g * piece);
                                    // SAFETY: `h` holds `piece` bytes of our pinned buffer; the
                                    // device range lies inside `src`.
                                    unsafe {
                                        if d2h {
                                            stream.memcpy_dtoh_async(h, src.as_raw() + off as u64, piece)
                                        } else {
                                            stream.memcpy_htod_async(src.as_raw() + off as u64, h, piece)
                                        }
                                    }
                                    .expect("copy");
                                }
                                ev.record(&stream).expect("record");
                                ev.synchronize().expect("synchronize");
                                k += group;
                            }
                            t0.elapsed().as_secs_f64() * 1e6 / n as f64
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().expect("thread")).collect()
            });
            let secs = start.elapsed().as_secs_f64();
            let us = per_thread.iter().sum::<f64>() / per_thread.len() as f64;
            println!(
                "{} {mode:5} threads {t:3} piece {piece:8}: {:7.2} GB/s aggregate, {:8.1} us per piece per thread",
                if d2h { "d2h" } else { "h2d" },
                (t * (bytes / piece) * piece) as f64 / secs / 1e9,
                us
            );
        }
    }
}
