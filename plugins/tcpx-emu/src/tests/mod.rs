//! Tests with real sockets and threads: through the Rust-level core API and through the exported
//! v7 / v11 (and v9, v12 property) tables. Every wait has a deadline. The FFI tests' `init` reads
//! the process environment: [`ffi_env`] sets `NCCL_DYNAMIC_CHUNK_SIZE` first (strict mode refuses
//! an init without it); other environments run in child processes ([`process`]).
//!
//! * [`transfer`]: data movement, limits, errors, closing.
//! * [`bounce`]: unpack mode's bounce space, reserved at the first CUDA registration (GPU only).
//! * [`faults`]: `TCPXEMU_FAULT` modes, each shown to happen.
//! * [`ffi`]: the exported tables.
//! * [`strict`]: one test per TCPX contract refusal, and the lenient escape.
//! * [`process`]: child processes (a killed peer; other environments).
//! * [`setup`]: strangers connecting to a listener.
//! * [`shared`]: the shared helper-thread model (event loops).

mod bounce;
mod faults;
mod ffi;
mod process;
mod setup;
mod shared;
mod strict;
mod transfer;

use std::ffi::{c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use nccl_net_abi::*;

use crate::comm::{Comm, Request};
use crate::config::Config;
use crate::conn::{connect, ListenComm};
use crate::fault::{corrupt_offset, Fault, FaultKind, CORRUPT_XOR};

const DEADLINE: Duration = Duration::from_secs(10);
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn deadline() -> Instant {
    Instant::now() + DEADLINE
}

fn cfg(nsocks: usize, chunk_size: usize) -> Config {
    Config {
        nsocks,
        chunk_size,
        ..Config::default()
    }
}

/// A connected (send, recv) pair plus its listen comm, over 127.0.0.1.
fn pair(cfg: &Config) -> (Box<Comm>, Box<Comm>, Box<ListenComm>) {
    let (lc, mut h) = ListenComm::bind(LOCALHOST, 0, cfg).expect("listen");
    let end = deadline();
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < end, "connect/accept timed out");
        if s.is_none() {
            s = connect(&mut h, cfg, Some(std::net::SocketAddr::new(LOCALHOST, 0))).expect("connect");
        }
        if r.is_none() {
            r = lc.accept().expect("accept");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (s, r) = (s.expect("send comm"), r.expect("recv comm"));
    assert_eq!(s.nsocks(), cfg.nsocks);
    assert_eq!(r.nsocks(), cfg.nsocks);
    (s, r, lc)
}

/// A position- and message-dependent byte pattern (not periodic in the chunk size).
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// Sets what strict mode requires of the process environment before the FFI tests' first `init`
/// (the plugin reads the environment once, at its first `init`).
fn ffi_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("NCCL_DYNAMIC_CHUNK_SIZE").is_none() {
            std::env::set_var("NCCL_DYNAMIC_CHUNK_SIZE", "524288");
        }
    });
}

/// Tests a send and a receive alternately until both are done (data moves only inside `test`,
/// so both sides must test). Returns both results; an error ends the wait.
fn wait_both(
    s: &Comm,
    sq: Request,
    r: &Comm,
    rq: Request,
) -> (Result<usize, crate::NetError>, Result<usize, crate::NetError>) {
    let end = deadline();
    let (mut sd, mut rd) = (None, None);
    while sd.is_none() || rd.is_none() {
        assert!(Instant::now() < end, "send/receive pair did not complete in time");
        if sd.is_none() {
            sd = s.test(sq).transpose();
        }
        if rd.is_none() {
            rd = r.test(rq).transpose();
        }
        if matches!(sd, Some(Err(_))) || matches!(rd, Some(Err(_))) {
            break;
        }
        std::thread::yield_now();
    }
    let pending = || Err(crate::NetError::internal("not waited for: the other side failed"));
    (sd.unwrap_or_else(pending), rd.unwrap_or_else(pending))
}

/// Spins on `test` until done or the deadline.
fn wait(comm: &Comm, req: Request) -> Result<usize, crate::NetError> {
    let end = deadline();
    loop {
        if let Some(n) = comm.test(req)? {
            return Ok(n);
        }
        assert!(Instant::now() < end, "request did not complete in time");
        std::thread::yield_now();
    }
}

/// Moves `msgs` (send size, receive capacity) with up to `window` requests outstanding per side,
/// verifying every byte and the reported size.
fn transfer(s: &Comm, r: &Comm, msgs: &[(usize, usize)], window: usize) {
    let n = msgs.len();
    let sbufs: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .map(|(i, &(len, _))| {
            let mut v = vec![0u8; len];
            fill(&mut v, i as u64 + 1);
            v
        })
        .collect();
    let mut rbufs: Vec<Vec<u8>> = msgs.iter().map(|&(_, cap)| vec![0xee; cap]).collect();
    let rptrs: Vec<*mut u8> = rbufs.iter_mut().map(std::vec::Vec::as_mut_ptr).collect();
    let (mut sreq, mut rreq) = (Vec::new(), Vec::new());
    let (mut st, mut rt) = (0, 0);
    let end = deadline();
    while st < n || rt < n {
        assert!(
            Instant::now() < end,
            "transfer timed out at send {st}, recv {rt} of {n}"
        );
        while sreq.len() < n && sreq.len() - st < window {
            let i = sreq.len();
            // SAFETY: the buffers outlive the requests.
            sreq.push(unsafe { s.isend(sbufs[i].as_ptr(), sbufs[i].len()) }.expect("isend"));
        }
        while rreq.len() < n && rreq.len() - rt < window {
            let i = rreq.len();
            // SAFETY: as above.
            rreq.push(unsafe { r.irecv(rptrs[i], msgs[i].1) }.expect("irecv"));
        }
        if st < n {
            if let Some(size) = s.test(sreq[st]).expect("test send") {
                assert_eq!(size, msgs[st].0);
                st += 1;
            }
        }
        if rt < rreq.len() {
            if let Some(size) = r.test(rreq[rt]).expect("test recv") {
                assert_eq!(size, msgs[rt].0, "reported size of message {rt}");
                let got = &rbufs[rt][..size];
                if let Some(pos) = got.iter().zip(&sbufs[rt]).position(|(a, b)| a != b) {
                    let w = &got[pos..(pos + 16).min(size)];
                    let mut hits = Vec::new();
                    for (k, sb) in sbufs.iter().enumerate() {
                        if let Some(q) = sb.windows(w.len()).position(|x| x == w) {
                            hits.push((k, q));
                        }
                    }
                    panic!("message {rt} ({size} B) differs at byte {pos}: {w:?} found in {hits:?}");
                }
                assert!(rbufs[rt][size..].iter().all(|&b| b == 0xee), "wrote past the size");
                r.irecv_consumed(rreq[rt]).expect("irecvConsumed");
                rt += 1;
            }
        }
    }
}
