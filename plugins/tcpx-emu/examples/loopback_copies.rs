//! How many CPU copies loopback TCP costs: `send` (copy into the socket, copy out at the receiver)
//! against `vmsplice` + `splice` (the socket references the sender's pages; the receiver's copy is
//! the only one), N independent streams over 127.0.0.1, same run.
//!
//! `cargo run --release -p tcpx-emu --example loopback_copies -- [streams...]`
//!
//! Each stream: a sender thread cycling over 4 page-aligned chunk buffers (`SEND_RING` more) and a receiver thread
//! reading every chunk into one reused buffer (as the plugin's staging does). With `splice` the
//! receiver acknowledges each chunk (8 bytes back on the same socket) and the sender reuses a
//! buffer only after its chunk was acknowledged: until then the socket still references its
//! pages. GB = 1e9 bytes, payload only.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUFS: usize = 4;

/// Receive ring length in chunks (`RING`, default 1: one reused, cache-hot buffer).
fn ring() -> usize {
    env_usize("RING", 1).max(1)
}

/// Send ring length in chunks (`SEND_RING`, default [`BUFS`]: cache-hot); a benchmark that sends
/// from a large buffer (tcpx-perf) reads cold memory, as `SEND_RING=128` (64 MiB per stream) does.
fn send_ring() -> usize {
    env_usize("SEND_RING", BUFS).max(BUFS)
}

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

struct Pages(*mut u8, usize);
unsafe impl Send for Pages {}
impl Pages {
    fn new(len: usize) -> Self {
        // SAFETY: anonymous private mapping; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        // SAFETY: fresh mapping of `len` bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0x5a, len) };
        Pages(p.cast(), len)
    }
}
impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0.cast(), self.1) };
    }
}

fn setbuf(fd: i32, v: usize) {
    if v == 0 {
        return;
    }
    let v = v as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: valid fd and option.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, opt, (&raw const v).cast(), 4) };
    }
}

fn sender(mut s: TcpStream, chunk: usize, splice: bool, stop: Arc<AtomicBool>) {
    let ring = send_ring();
    let bufs = Pages::new(chunk * ring);
    let fd = s.as_raw_fd();
    let mut pipe = [0i32; 2];
    if splice {
        // SAFETY: plain syscalls on our own fds.
        unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            libc::fcntl(pipe[1], libc::F_SETPIPE_SZ, chunk as libc::c_int);
        }
    }
    let mut acked = 0u64;
    let mut sent = 0u64;
    let mut ack = [0u8; 8];
    while !stop.load(Ordering::Relaxed) {
        let b = (sent as usize) % ring;
        // SAFETY: inside our mapping.
        let p = unsafe { bufs.0.add(b * chunk) };
        if splice {
            while sent - acked >= BUFS as u64 {
                s.read_exact(&mut ack).unwrap();
                acked += 1;
            }
            let mut off = 0;
            while off < chunk {
                let iov = libc::iovec {
                    // SAFETY: inside the chunk.
                    iov_base: unsafe { p.add(off) }.cast(),
                    iov_len: chunk - off,
                };
                // SAFETY: the pages stay mapped and unmodified until acknowledged.
                let n = unsafe { libc::vmsplice(pipe[1], &raw const iov, 1, 0) };
                assert!(n > 0, "vmsplice: {}", std::io::Error::last_os_error());
                let mut left = n as usize;
                while left > 0 {
                    // SAFETY: our fds.
                    let m = unsafe { libc::splice(pipe[0], std::ptr::null_mut(), fd, std::ptr::null_mut(), left, 0) };
                    assert!(m > 0, "splice: {}", std::io::Error::last_os_error());
                    left -= m as usize;
                }
                off += n as usize;
            }
        } else {
            // SAFETY: p..p+chunk is ours.
            s.write_all(unsafe { std::slice::from_raw_parts(p, chunk) }).unwrap();
        }
        sent += 1;
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    if splice {
        // SAFETY: our fds.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }
    // Drain acks so the receiver never blocks writing them.
    let mut sink = [0u8; 4096];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
}

fn receiver(mut s: TcpStream, chunk: usize, splice: bool, bytes: Arc<AtomicU64>) {
    let ring = ring();
    let buf = Pages::new(chunk * ring);
    let waitall = std::env::var("WAITALL").is_ok_and(|v| v == "1");
    let mut k = 0;
    loop {
        // SAFETY: chunk `k % ring` of our mapping.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.0.add(k % ring * chunk), chunk) };
        k += 1;
        if waitall {
            let mut got = 0;
            while got < chunk {
                // SAFETY: inside our buffer.
                let n = unsafe {
                    libc::recv(
                        s.as_raw_fd(),
                        dst[got..].as_mut_ptr().cast(),
                        chunk - got,
                        libc::MSG_WAITALL,
                    )
                };
                if n <= 0 {
                    return;
                }
                got += n as usize;
            }
        } else if s.read_exact(dst).is_err() {
            break;
        }
        bytes.fetch_add(chunk as u64, Ordering::Relaxed);
        if splice {
            let _ = s.write_all(&0u64.to_le_bytes());
        }
    }
}

/// This process's user + system CPU seconds (every thread).
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// GB/s of payload and CPU seconds (user + system, all threads) per GB over the measured second.
fn run(streams: usize, chunk: usize, sockbuf: usize, splice: bool, secs: f64) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..streams {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        for s in [&c, &a] {
            s.set_nodelay(true).unwrap();
            setbuf(s.as_raw_fd(), sockbuf);
        }
        let st = stop.clone();
        threads.push(std::thread::spawn(move || sender(c, chunk, splice, st)));
        let by = bytes.clone();
        threads.push(std::thread::spawn(move || receiver(a, chunk, splice, by)));
    }
    // Busy-polling threads (as progress loops are), yielding like tcpx-perf's.
    for _ in 0..env_usize("SPIN", 0) {
        let st = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !st.load(Ordering::Relaxed) {
                n += 1;
                if n.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (b0, c0) = (bytes.load(Ordering::Relaxed), cpu_s());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (b1, c1) = (bytes.load(Ordering::Relaxed), cpu_s());
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let gb = (b1 - b0) as f64 / 1e9;
    (gb / dt, (c1 - c0) / gb.max(1e-9))
}

fn main() {
    let chunk = env_usize("CHUNK", 512 << 10);
    let sockbuf = env_usize("SOCKBUF", 512 << 10);
    let streams: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let streams = if streams.is_empty() { vec![1, 4, 16] } else { streams };
    println!("# loopback, chunk {chunk} B, SO_SNDBUF/RCVBUF {sockbuf} B, 1 s per point, GB/s of payload (1e9)");
    println!(
        "# send ring {} and receive ring {} chunk(s) per stream; CPU-s/GB: user + system seconds of every thread per GB",
        send_ring(),
        ring()
    );
    println!("# streams   send   splice  ratio  send_cpu_s/GB  splice_cpu_s/GB");
    for n in streams {
        let (a, ac) = run(n, chunk, sockbuf, false, 1.0);
        let (b, bc) = run(n, chunk, sockbuf, true, 1.0);
        println!("{n:>9} {a:>6.2} {b:>8.2} {:>6.2}x {ac:>14.4} {bc:>16.4}", b / a);
    }
}
