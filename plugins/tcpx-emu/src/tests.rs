//! Tests with real sockets and threads: through the Rust-level core API and through the exported
//! v7 / v11 (and v9, v12 property) tables. Every wait has a deadline; nothing reads global env
//! except the FFI tests' `init`, which sees the test runner's (normally empty) environment.

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
            s = connect(&mut h, cfg).expect("connect");
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
    let rptrs: Vec<*mut u8> = rbufs.iter_mut().map(|v| v.as_mut_ptr()).collect();
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

#[test]
fn sizes_edge_cases_one_socket() {
    let c = cfg(1, 64 << 10);
    let (s, r, _lc) = pair(&c);
    let sizes = [
        0,
        1,
        3,
        4095,
        4097,
        (64 << 10) - 1,
        64 << 10,
        (64 << 10) + 1,
        4 << 20,
        0,
    ];
    let msgs: Vec<_> = sizes.iter().map(|&n| (n, n)).collect();
    transfer(&s, &r, &msgs, 1);
    transfer(&s, &r, &msgs, 16);
}

#[test]
fn default_chunk_four_mib_two_sockets() {
    let c = cfg(2, crate::config::DEFAULT_CHUNK_SIZE);
    let (s, r, _lc) = pair(&c);
    transfer(&s, &r, &[(4 << 20, 4 << 20), (1_500_001, 4 << 20), (7, 7)], 16);
}

fn back_to_back(nsocks: usize) {
    back_to_back_with(&cfg(nsocks, 16 << 10));
}

fn back_to_back_with(c: &Config) {
    let (s, r, _lc) = pair(c);
    let msgs: Vec<_> = (0..200usize)
        .map(|i| {
            let n = (i * 7919 * 13) % (300 << 10) + (i % 3);
            (n, n + (i % 2) * 100)
        })
        .collect();
    transfer(&s, &r, &msgs, 16);
}

#[test]
fn back_to_back_1_socket() {
    back_to_back(1);
}

#[test]
fn back_to_back_2_sockets() {
    back_to_back(2);
}

#[test]
fn back_to_back_4_sockets() {
    back_to_back(4);
}

/// Every send spliced and acknowledged (`TCPXEMU_ZEROCOPY=all`; the default, `staged`, splices
/// only unpack mode's staging, which these host-memory tests do not use).
fn zerocopy(nsocks: usize, chunk_size: usize) -> Config {
    Config {
        zerocopy: crate::config::ZeroCopy::All,
        ..cfg(nsocks, chunk_size)
    }
}

#[test]
fn zerocopy_back_to_back_1_and_3_sockets() {
    back_to_back_with(&zerocopy(1, 16 << 10));
    back_to_back_with(&zerocopy(3, 16 << 10));
}

#[test]
fn zerocopy_large_chunks_and_odd_sizes() {
    // Chunks larger than the default 64 KiB pipe and than 1 MiB: several hand-overs per chunk.
    let (s, r, _lc) = pair(&zerocopy(2, 3 << 20));
    transfer(
        &s,
        &r,
        &[(16 << 20, 16 << 20), (5_000_001, 8 << 20), (0, 16), (1, 1)],
        16,
    );
}

/// A send of `len` bytes with no receive posted: whether `test` reports it done within 200 ms.
fn send_completes_before_receive(c: &Config, len: usize) -> bool {
    let (s, r, _lc) = pair(c);
    let mut src = vec![0u8; len];
    fill(&mut src, 7);
    let expect = src.clone();
    // SAFETY: `src` outlives the request.
    let sreq = unsafe { s.isend(src.as_ptr(), len) }.expect("isend");
    let early = Instant::now() + Duration::from_millis(200);
    let mut done = false;
    while !done && Instant::now() < early {
        done = s.test(sreq).expect("test send").is_some();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut dst = vec![0u8; len];
    // SAFETY: `dst` outlives the request.
    let rreq = unsafe { r.irecv(dst.as_mut_ptr(), len) }.expect("irecv");
    if !done {
        wait(&s, sreq).expect("send completes once the receive is posted");
    }
    // The request is complete: the sender may reuse its buffer, and the receiver must still
    // get the bytes as they were.
    src.fill(0x5a);
    assert_eq!(wait(&r, rreq).expect("recv"), len);
    assert!(
        dst == expect,
        "the receiver saw the sender's buffer after it was reused"
    );
    r.irecv_consumed(rreq).expect("irecvConsumed");
    done
}

#[test]
fn zerocopy_send_completes_only_once_the_receiver_has_read_it() {
    // 64 KiB fits the socket buffers: a copying send (the default policy on host memory) is
    // done at once, a zero-copy send only after the receiver read (and acknowledged) every chunk.
    assert!(send_completes_before_receive(&cfg(2, 16 << 10), 64 << 10));
    assert!(!send_completes_before_receive(&zerocopy(2, 16 << 10), 64 << 10));
}

#[test]
fn receive_larger_than_send() {
    let (s, r, _lc) = pair(&cfg(3, 4096));
    transfer(&s, &r, &[(1000, 5000), (10_000, 1 << 20), (0, 64)], 4);
}

#[test]
fn send_larger_than_receive_is_an_error() {
    let (s, r, _lc) = pair(&cfg(1, 4096));
    let src = vec![1u8; 2000];
    let mut dst = vec![0u8; 1000];
    // SAFETY: buffers outlive the requests (the comms are dropped first below).
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
    let _sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    let err = wait(&r, rq).expect_err("truncation must fail");
    assert_eq!(err.code, NCCL_INVALID_USAGE);
    assert!(err.msg.contains("2000") && err.msg.contains("1000"), "{}", err.msg);
    drop((s, r));
}

#[test]
fn seventeenth_request_is_refused() {
    let (s, r, _lc) = pair(&cfg(1, 4096));
    let buf = [0u8; 64];
    let mut rbuf = vec![0u8; 64 * 17];
    let mut sreqs = Vec::new();
    for _ in 0..16 {
        // SAFETY: buffers outlive the comms.
        sreqs.push(unsafe { s.isend(buf.as_ptr(), buf.len()) }.expect("isend"));
    }
    let err = unsafe { s.isend(buf.as_ptr(), buf.len()) }.expect_err("17th send");
    assert_eq!(err.code, NCCL_INTERNAL_ERROR);
    assert!(err.msg.contains("unable to allocate requests"));
    let mut rreqs = Vec::new();
    for i in 0..16 {
        rreqs.push(unsafe { r.irecv(rbuf.as_mut_ptr().add(i * 64), 64) }.expect("irecv"));
    }
    let err = unsafe { r.irecv(rbuf.as_mut_ptr(), 64) }.expect_err("17th recv");
    assert_eq!(err.code, NCCL_INTERNAL_ERROR);
    // Completing a receive does not free its slot: only irecvConsumed does.
    assert_eq!(wait(&r, rreqs[0]), Ok(64));
    assert_eq!(wait(&s, sreqs[0]), Ok(64));
    let err = unsafe { r.irecv(rbuf.as_mut_ptr(), 64) }.expect_err("still full");
    assert_eq!(err.code, NCCL_INTERNAL_ERROR);
    r.irecv_consumed(rreqs[0]).expect("consume");
    unsafe { r.irecv(rbuf.as_mut_ptr().add(16 * 64), 64) }.expect("slot freed");
    // A completed send frees its slot at once.
    unsafe { s.isend(buf.as_ptr(), buf.len()) }.expect("send slot freed");
    drop((s, r));
}

#[test]
fn fifo_violations_are_refused() {
    let (s, r, _lc) = pair(&cfg(1, 4096));
    let buf = [5u8; 100];
    let mut rbuf = vec![0u8; 200];
    // SAFETY: buffers outlive the comms.
    let a = unsafe { s.isend(buf.as_ptr(), 100) }.expect("isend");
    let b = unsafe { s.isend(buf.as_ptr(), 100) }.expect("isend");
    let err = s.test(b).expect_err("out of order");
    assert_eq!(err.code, NCCL_INTERNAL_ERROR);
    assert!(err.msg.contains("test called with invalid request"));
    let ra = unsafe { r.irecv(rbuf.as_mut_ptr(), 100) }.expect("irecv");
    let rb = unsafe { r.irecv(rbuf.as_mut_ptr().add(100), 100) }.expect("irecv");
    assert_eq!(wait(&s, a), Ok(100));
    // A finished request is dead.
    assert_eq!(s.test(a).expect_err("dead").code, NCCL_INTERNAL_ERROR);
    assert_eq!(wait(&s, b), Ok(100));
    assert_eq!(
        r.irecv_consumed(ra).expect_err("not completed").code,
        NCCL_INTERNAL_ERROR
    );
    assert_eq!(wait(&r, ra), Ok(100));
    assert_eq!(wait(&r, rb), Ok(100));
    assert_eq!(
        r.irecv_consumed(rb).expect_err("out of order").code,
        NCCL_INTERNAL_ERROR
    );
    r.irecv_consumed(ra).expect("consume a");
    r.irecv_consumed(rb).expect("consume b");
    assert_eq!(r.irecv_consumed(rb).expect_err("twice").code, NCCL_INTERNAL_ERROR);
    // A request of another comm is refused, not misread.
    let c = unsafe { s.isend(buf.as_ptr(), 0) }.expect("isend");
    assert_eq!(r.test(c).expect_err("foreign").code, NCCL_INTERNAL_ERROR);
    assert_eq!(wait(&s, c), Ok(0));
}

#[test]
fn receiver_sees_error_when_sender_goes_away() {
    let (s, r, lc) = pair(&cfg(2, 4096));
    let mut rbuf = vec![0u8; 100];
    // SAFETY: buffer outlives the comm.
    let rq = unsafe { r.irecv(rbuf.as_mut_ptr(), 100) }.expect("irecv");
    let sender_addr = r.peer();
    drop(s);
    let err = wait(&r, rq).expect_err("peer gone");
    assert!(matches!(err.code, NCCL_REMOTE_ERROR | NCCL_SYSTEM_ERROR));
    assert!(err.msg.contains(&sender_addr.to_string()), "{}", err.msg);
    drop((r, lc));
}

#[test]
fn sender_sees_error_when_receiver_goes_away() {
    let (s, r, lc) = pair(&cfg(1, 512 << 10));
    let big = vec![3u8; 64 << 20];
    let mut small = vec![0u8; 4096];
    // SAFETY: buffers outlive the comms.
    let rq = unsafe { r.irecv(small.as_mut_ptr(), small.len()) }.expect("irecv");
    let sq = unsafe { s.isend(big.as_ptr(), 4096) }.expect("isend");
    assert_eq!(wait(&r, rq), Ok(4096));
    assert_eq!(wait(&s, sq), Ok(4096));
    // 64 MiB never fits in the socket buffers: the send is in flight when the receiver closes.
    let sq = unsafe { s.isend(big.as_ptr(), big.len()) }.expect("isend");
    std::thread::sleep(Duration::from_millis(20));
    drop(r);
    let err = wait(&s, sq).expect_err("peer gone");
    assert!(matches!(err.code, NCCL_REMOTE_ERROR | NCCL_SYSTEM_ERROR));
    assert!(err.msg.contains(&lc.addr().to_string()), "{}", err.msg);
    drop(s);
}

#[test]
fn clean_close_and_close_with_requests_outstanding() {
    let (s, r, _lc) = pair(&cfg(4, 64 << 10));
    transfer(&s, &r, &[(100_000, 100_000)], 1);
    let big = vec![1u8; 8 << 20];
    let start = Instant::now();
    for _ in 0..16 {
        // SAFETY: the buffer outlives the comm (dropped below).
        unsafe { s.isend(big.as_ptr(), big.len()) }.expect("isend");
    }
    drop(s);
    drop(r);
    assert!(start.elapsed() < Duration::from_secs(5), "close hung");
}

#[test]
fn several_accepts_on_one_listen_comm() {
    let c = cfg(2, 8192);
    let (lc, h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let (mut h1, mut h2) = (h, h);
    let (mut s1, mut s2) = (None, None);
    let mut rs = Vec::new();
    let end = deadline();
    while s1.is_none() || s2.is_none() || rs.len() < 2 {
        assert!(Instant::now() < end, "timed out");
        if s1.is_none() {
            s1 = connect(&mut h1, &c).expect("connect 1");
        }
        if s2.is_none() {
            s2 = connect(&mut h2, &c).expect("connect 2");
        }
        if let Some(r) = lc.accept().expect("accept") {
            rs.push(r);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (s1, s2) = (s1.expect("s1"), s2.expect("s2"));
    assert_eq!(s1.peer(), lc.addr());
    let mut probes = [[0u8; 1]; 2];
    let mut rreqs = Vec::new();
    for (r, b) in rs.iter().zip(probes.iter_mut()) {
        // SAFETY: `probes` outlives the requests (waited on below).
        rreqs.push(unsafe { r.irecv(b.as_mut_ptr(), 1) }.expect("irecv"));
    }
    let one = [1u8];
    let two = [2u8];
    // SAFETY: static-lifetime-ish buffers outlive the waits below.
    let q1 = unsafe { s1.isend(one.as_ptr(), 1) }.expect("isend");
    let q2 = unsafe { s2.isend(two.as_ptr(), 1) }.expect("isend");
    assert_eq!(wait(&s1, q1), Ok(1));
    assert_eq!(wait(&s2, q2), Ok(1));
    for (r, q) in rs.iter().zip(&rreqs) {
        assert_eq!(wait(r, *q), Ok(1));
    }
    probes.sort();
    assert_eq!(probes, [[1], [2]], "each receive comm got exactly one sender's byte");
    drop((s1, s2, rs, lc));
}

#[test]
fn foreign_handle_is_rejected() {
    let mut h = [0x42u8; NET_HANDLE_MAXSIZE];
    let err = connect(&mut h, &Config::default()).expect_err("foreign");
    assert_eq!(err.code, NCCL_INVALID_ARGUMENT);
}

#[test]
fn fault_corrupt_flips_one_byte() {
    let mut c = cfg(2, 4096);
    c.fault = Some(Fault {
        kind: FaultKind::Corrupt,
        after: 1,
    });
    let (s, r, _lc) = pair(&c);
    let mut src = vec![0u8; 10_000];
    fill(&mut src, 9);
    let mut d0 = vec![0u8; 10_000];
    let mut d1 = vec![0u8; 10_000];
    // SAFETY: buffers outlive the requests.
    let r0 = unsafe { r.irecv(d0.as_mut_ptr(), d0.len()) }.expect("irecv");
    let r1 = unsafe { r.irecv(d1.as_mut_ptr(), d1.len()) }.expect("irecv");
    let s0 = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    let s1 = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    assert_eq!(wait(&r, r0), Ok(10_000));
    assert_eq!(wait(&r, r1), Ok(10_000));
    assert_eq!(wait(&s, s0), Ok(10_000));
    assert_eq!(wait(&s, s1), Ok(10_000));
    assert_eq!(d0, src, "request before AFTER is intact");
    let diffs: Vec<usize> = (0..src.len()).filter(|&i| d1[i] != src[i]).collect();
    let off = corrupt_offset(src.len());
    assert_eq!(diffs, vec![off]);
    assert_eq!(d1[off], src[off] ^ CORRUPT_XOR);
}

#[test]
fn fault_stall_never_completes_and_closes() {
    let mut c = cfg(1, 4096);
    c.fault = Some(Fault {
        kind: FaultKind::Stall,
        after: 0,
    });
    let (s, r, _lc) = pair(&c);
    let src = [1u8; 100];
    let mut dst = vec![0u8; 100];
    // SAFETY: buffers outlive the comms.
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), 100) }.expect("irecv");
    let sq = unsafe { s.isend(src.as_ptr(), 100) }.expect("isend");
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        assert_eq!(s.test(sq), Ok(None));
        assert_eq!(r.test(rq), Ok(None));
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    drop((s, r));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn fault_slow_delays_but_delivers() {
    let mut c = cfg(2, 4096);
    c.fault = Some(Fault {
        kind: FaultKind::Slow,
        after: 0,
    });
    let (s, r, _lc) = pair(&c);
    let start = Instant::now();
    transfer(&s, &r, &[(40_000, 40_000)], 1);
    // 10 chunks over 2 sockets: each socket's receiving thread sleeps 1 ms after each of its
    // first 4 chunks before it can receive its 5th (the 5th is credited before its own sleep), and
    // a sleep lasts at least what it asks for, so the transfer cannot finish in under 4 ms.
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(4), "slow fault took only {elapsed:?}");
}

#[test]
fn fault_close_is_seen_by_the_peer() {
    let mut c = cfg(2, 4096);
    c.fault = Some(Fault {
        kind: FaultKind::Close,
        after: 1,
    });
    let (s, r, _lc) = pair(&c);
    transfer(&s, &r, &[(5000, 5000)], 1);
    // Both sides run this config, so the fault fires at the 2nd post on whichever side posts
    // first: here the sender, which aborts its sockets and fails the post.
    let src = vec![1u8; 5000];
    // SAFETY: buffer outlives the comm.
    let err = unsafe { s.isend(src.as_ptr(), src.len()) }.expect_err("aborted");
    assert!(matches!(err.code, NCCL_SYSTEM_ERROR | NCCL_REMOTE_ERROR));
    drop(s);
    let mut dst = vec![0u8; 5000];
    // The receiver's own fault fires at this post too; either way it errors, never hangs.
    match unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) } {
        Err(e) => assert_ne!(e.code, NCCL_SUCCESS),
        Ok(rq) => assert!(wait(&r, rq).is_err()),
    }
}

#[test]
fn fault_close_on_sender_only_reaches_a_clean_receiver() {
    let c = cfg(1, 4096);
    let (lc, mut h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let mut sc = c.clone();
    sc.fault = Some(Fault {
        kind: FaultKind::Close,
        after: 0,
    });
    let end = deadline();
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < end);
        if s.is_none() {
            s = connect(&mut h, &sc).expect("connect");
        }
        if r.is_none() {
            r = lc.accept().expect("accept");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (s, r) = (s.expect("s"), r.expect("r"));
    let mut dst = vec![0u8; 100];
    // SAFETY: buffer outlives the comm.
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), 100) }.expect("irecv");
    let src = [0u8; 100];
    assert!(unsafe { s.isend(src.as_ptr(), 100) }.is_err());
    let err = wait(&r, rq).expect_err("receiver must see the abort");
    assert!(err.msg.contains(&r.peer().to_string()), "{}", err.msg);
}

#[test]
fn report_sizes_writes_the_senders_size() {
    let mut c = cfg(1, 4096);
    c.report_sizes = true;
    let (s, r, _lc) = pair(&c);
    let src = [9u8; 300];
    let mut dst = [0u8; 1000];
    // SAFETY: buffers outlive the requests.
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
    let sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    assert_eq!(wait(&s, sq), Ok(300));
    let end = deadline();
    let mut size: c_int = -1;
    loop {
        let mut done = 0;
        // SAFETY: the exported `test` entry with a live request and valid out-pointers.
        assert_eq!(unsafe { crate::test(rq, &mut done, &mut size) }, NCCL_SUCCESS);
        if done == 1 {
            break;
        }
        assert!(Instant::now() < end, "timed out");
        std::thread::yield_now();
    }
    assert_eq!(size, 300);
}

// ------------------------------------------------------------------------------------------------
// Through the exported tables.
// ------------------------------------------------------------------------------------------------

macro_rules! call {
    ($tbl:expr, $f:ident ( $($arg:expr),* )) => {{
        let f = $tbl.$f.expect(stringify!($f));
        // SAFETY: calling our own exported entry with valid arguments.
        unsafe { f($($arg),*) }
    }};
}

/// Runs connect/accept through an ABI's entries until both return a comm.
fn ffi_connect(
    mut conn: impl FnMut(*mut c_void, *mut *mut c_void) -> NcclResult,
    mut acc: impl FnMut(*mut *mut c_void) -> NcclResult,
    handle: &mut NetHandle,
) -> (*mut c_void, *mut c_void) {
    let (mut sc, mut rc): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
    let end = deadline();
    while sc.is_null() || rc.is_null() {
        assert!(Instant::now() < end, "ffi connect timed out");
        if sc.is_null() {
            assert_eq!(conn(handle.as_mut_ptr().cast(), &mut sc), NCCL_SUCCESS);
        }
        if rc.is_null() {
            assert_eq!(acc(&mut rc), NCCL_SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    (sc, rc)
}

fn ffi_wait(t: &NetV7, req: *mut c_void, sizes: &mut c_int) -> NcclResult {
    let end = deadline();
    loop {
        let mut done = 0;
        let rc = call!(t, test(req, &mut done, sizes));
        if rc != NCCL_SUCCESS || done == 1 {
            return rc;
        }
        assert!(Instant::now() < end, "ffi test timed out");
        std::thread::yield_now();
    }
}

#[test]
fn v7_table_end_to_end() {
    let t = &crate::ncclNetPlugin_v7;
    // SAFETY: static NUL-terminated name.
    assert_eq!(unsafe { CStr::from_ptr(t.name) }, c"tcpx-emu");
    assert!(t.reg_mr_dma_buf.is_none());
    assert_eq!(call!(t, init(None)), NCCL_SUCCESS);
    assert_eq!(call!(t, init(None)), NCCL_SUCCESS, "init is idempotent");
    let mut n = 0;
    assert_eq!(call!(t, devices(&mut n)), NCCL_SUCCESS);
    assert!(n >= 1);
    // SAFETY: all-zero is a valid (NULL-pointer) properties value.
    let mut p: PropertiesV7 = unsafe { std::mem::zeroed() };
    assert_eq!(call!(t, get_properties(0, &mut p)), NCCL_SUCCESS);
    assert!(!p.name.is_null());
    assert_eq!(p.max_recvs, 1);
    assert_eq!(p.ptr_support, NCCL_PTR_HOST);
    assert_eq!(p.net_device_type, NCCL_NET_DEVICE_HOST);
    assert_eq!(p.max_comms, 65_536);
    assert_eq!(p.guid, 0);
    assert_ne!(call!(t, get_properties(n, &mut p)), NCCL_SUCCESS);

    let mut handle = [0u8; NET_HANDLE_MAXSIZE];
    let mut lc = std::ptr::null_mut();
    assert_eq!(call!(t, listen(0, handle.as_mut_ptr().cast(), &mut lc)), NCCL_SUCCESS);
    let mut dev_handle = DeviceHandleV7::zeroed();
    let mut dh_ptr: *mut DeviceHandleV7 = &mut dev_handle;
    let (sc, rc) = ffi_connect(
        |h, sc| call!(t, connect(0, h, sc, std::ptr::null_mut())),
        |rc| call!(t, accept(lc, rc, &mut dh_ptr)),
        &mut handle,
    );
    assert_eq!(dev_handle.net_device_type, NCCL_NET_DEVICE_HOST);

    let mut src = vec![0u8; 1_000_003];
    fill(&mut src, 77);
    let mut dst = vec![0u8; 2_000_000];
    let (mut smh, mut rmh, mut bad) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let sp: *mut c_void = src.as_mut_ptr().cast();
    assert_eq!(
        call!(t, reg_mr(sc, sp, src.len() as c_int, NCCL_PTR_HOST, &mut smh)),
        NCCL_SUCCESS
    );
    let dp: *mut c_void = dst.as_mut_ptr().cast();
    assert_eq!(
        call!(t, reg_mr(rc, dp, dst.len() as c_int, NCCL_PTR_HOST, &mut rmh)),
        NCCL_SUCCESS
    );
    assert_eq!(
        call!(t, reg_mr(rc, dp, 4096, NCCL_PTR_CUDA, &mut bad)),
        NCCL_INVALID_ARGUMENT
    );
    assert_eq!(
        call!(t, reg_mr(rc, dp, -1, NCCL_PTR_HOST, &mut bad)),
        NCCL_INVALID_ARGUMENT
    );

    let mut req = std::ptr::null_mut();
    assert_eq!(call!(t, isend(sc, sp, -5, 0, smh, &mut req)), NCCL_INVALID_ARGUMENT);
    let mut data = [dp];
    let mut sizes = [dst.len() as c_int, 0];
    let mut tags = [0 as c_int; 2];
    let mut mhs = [rmh, rmh];
    assert_eq!(
        call!(
            t,
            irecv(
                rc,
                2,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut req
            )
        ),
        NCCL_INTERNAL_ERROR,
        "n must be 1"
    );
    let mut rreq = std::ptr::null_mut();
    assert_eq!(
        call!(
            t,
            irecv(
                rc,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut rreq
            )
        ),
        NCCL_SUCCESS
    );
    let mut sreq = std::ptr::null_mut();
    assert_eq!(
        call!(t, isend(sc, sp, src.len() as c_int, 0, smh, &mut sreq)),
        NCCL_SUCCESS
    );
    assert!(!sreq.is_null() && !rreq.is_null());
    let mut size_out: c_int = -7;
    assert_eq!(ffi_wait(t, sreq, &mut size_out), NCCL_SUCCESS);
    assert_eq!(ffi_wait(t, rreq, &mut size_out), NCCL_SUCCESS);
    assert_eq!(size_out, -7, "sizes are not written by default (as TCPX)");
    assert_eq!(&dst[..src.len()], &src[..]);
    let mut done = 0;
    assert_eq!(
        call!(t, test(rreq, &mut done, std::ptr::null_mut())),
        NCCL_INTERNAL_ERROR,
        "dead request"
    );
    assert_eq!(call!(t, irecv_consumed(rc, 1, rreq)), NCCL_SUCCESS);
    let mut freq = std::ptr::dangling_mut::<c_void>();
    assert_eq!(
        call!(
            t,
            iflush(
                rc,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut freq
            )
        ),
        NCCL_SUCCESS
    );
    assert!(freq.is_null());
    let mut dptr = std::ptr::dangling_mut::<c_void>();
    assert_eq!(call!(t, get_device_mr(rc, rmh, &mut dptr)), NCCL_SUCCESS);
    assert!(dptr.is_null());

    assert_eq!(call!(t, dereg_mr(sc, smh)), NCCL_SUCCESS);
    assert_eq!(call!(t, dereg_mr(rc, rmh)), NCCL_SUCCESS);
    assert_eq!(call!(t, close_send(sc)), NCCL_SUCCESS);
    assert_eq!(call!(t, close_recv(rc)), NCCL_SUCCESS);
    assert_eq!(call!(t, close_listen(lc)), NCCL_SUCCESS);
}

#[test]
fn v11_table_end_to_end() {
    let t = &crate::ncclNetPlugin_v11;
    let mut ctx = std::ptr::null_mut();
    let mut config = CommConfigV11 {
        traffic_class: NCCL_NET_TRAFFIC_CLASS_UNDEF,
    };
    assert_eq!(call!(t, init(&mut ctx, 1234, &mut config, None, None)), NCCL_SUCCESS);
    assert!(!ctx.is_null());
    // SAFETY: all-zero is a valid properties value.
    let mut p: PropertiesV11 = unsafe { std::mem::zeroed() };
    assert_eq!(call!(t, get_properties(0, &mut p)), NCCL_SUCCESS);
    assert_eq!((p.max_recvs, p.max_multi_request_size, p.v_props.ndevs), (1, 1, 1));
    assert_eq!(p.max_p2p_bytes, crate::MAX_P2P_BYTES);
    let mut vd = -1;
    let mut vp = VDevicePropsV11 { ndevs: 1, devs: [0; 4] };
    assert_eq!(call!(t, make_v_device(&mut vd, &mut vp)), NCCL_SUCCESS);
    assert_eq!(vd, 0);
    vp.ndevs = 2;
    assert_eq!(call!(t, make_v_device(&mut vd, &mut vp)), NCCL_INVALID_USAGE);

    let mut handle = [0u8; NET_HANDLE_MAXSIZE];
    let mut lc = std::ptr::null_mut();
    assert_eq!(
        call!(t, listen(ctx, 0, handle.as_mut_ptr().cast(), &mut lc)),
        NCCL_SUCCESS
    );
    let (sc, rc) = ffi_connect(
        |h, sc| call!(t, connect(ctx, 0, h, sc, std::ptr::null_mut())),
        |rc| call!(t, accept(lc, rc, std::ptr::null_mut())),
        &mut handle,
    );
    // SAFETY: same layout for `test` in every version; reuse the v7 wait helper's logic inline.
    let test_fn = t.test.expect("test");
    let wait11 = |req: *mut c_void| {
        let end = deadline();
        loop {
            let mut done = 0;
            // SAFETY: valid request and out-pointers.
            let rc = unsafe { test_fn(req, &mut done, std::ptr::null_mut()) };
            if rc != NCCL_SUCCESS || done == 1 {
                return rc;
            }
            assert!(Instant::now() < end, "timed out");
            std::thread::yield_now();
        }
    };
    for (i, &len) in [0usize, 1, 777_777, 3 << 20].iter().enumerate() {
        let mut src = vec![0u8; len];
        fill(&mut src, i as u64 + 100);
        let mut dst = vec![0u8; len + 10];
        let mut data: [*mut c_void; 1] = [dst.as_mut_ptr().cast()];
        let mut sizes = [dst.len()];
        let mut tags = [0 as c_int];
        let mut mhs = [std::ptr::null_mut()];
        let mut ph = [std::ptr::null_mut()];
        let (mut rreq, mut sreq) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(
            call!(
                t,
                irecv(
                    rc,
                    1,
                    data.as_mut_ptr(),
                    sizes.as_mut_ptr(),
                    tags.as_mut_ptr(),
                    mhs.as_mut_ptr(),
                    ph.as_mut_ptr(),
                    &mut rreq
                )
            ),
            NCCL_SUCCESS
        );
        let sp: *mut c_void = src.as_mut_ptr().cast();
        assert_eq!(
            call!(
                t,
                isend(sc, sp, len, 0, std::ptr::null_mut(), std::ptr::null_mut(), &mut sreq)
            ),
            NCCL_SUCCESS
        );
        assert_eq!(wait11(sreq), NCCL_SUCCESS);
        assert_eq!(wait11(rreq), NCCL_SUCCESS);
        assert_eq!(&dst[..len], &src[..]);
        assert_eq!(call!(t, irecv_consumed(rc, 1, rreq)), NCCL_SUCCESS);
    }
    assert_eq!(call!(t, set_net_attr(ctx, std::ptr::null_mut())), NCCL_SUCCESS);
    assert_eq!(call!(t, close_send(sc)), NCCL_SUCCESS);
    assert_eq!(call!(t, close_recv(rc)), NCCL_SUCCESS);
    assert_eq!(call!(t, close_listen(lc)), NCCL_SUCCESS);
    assert_eq!(call!(t, finalize(ctx)), NCCL_SUCCESS);
}

#[test]
fn v9_v10_v12_properties() {
    let t9 = &crate::ncclNetPlugin_v9;
    assert_eq!(call!(t9, init(None)), NCCL_SUCCESS);
    // SAFETY: all-zero is a valid properties value.
    let mut p9: PropertiesV9 = unsafe { std::mem::zeroed() };
    assert_eq!(call!(t9, get_properties(0, &mut p9)), NCCL_SUCCESS);
    assert_eq!((p9.reg_is_global, p9.force_flush, p9.v_props.ndevs), (0, 0, 1));
    let t10 = &crate::ncclNetPlugin_v10;
    assert_eq!(call!(t10, init(None, None)), NCCL_SUCCESS);
    let t12 = &crate::ncclNetPlugin_v12;
    let mut ctx = std::ptr::null_mut();
    assert_eq!(
        call!(t12, init(&mut ctx, 0, std::ptr::null_mut(), None, None)),
        NCCL_SUCCESS
    );
    // SAFETY: as above.
    let mut p12: PropertiesV12 = unsafe { std::mem::zeroed() };
    assert_eq!(call!(t12, get_properties(0, &mut p12)), NCCL_SUCCESS);
    assert_eq!((p12.rail_id, p12.plane_id), (-1, -1));
    assert_eq!(p12.max_recvs, 1);
    // SAFETY: NUL-terminated, leaked for the process lifetime.
    let name = unsafe { CStr::from_ptr(p12.name) };
    assert!(!name.to_bytes().is_empty());
    assert_eq!(call!(t12, finalize(ctx)), NCCL_SUCCESS);
}

// ------------------------------------------------------------------------------------------------
// Throughput sanity check (not run by default):
//   cargo test -p tcpx-emu --release -- --ignored --nocapture perf
// ------------------------------------------------------------------------------------------------

/// GB/s of `iters` messages of `size` bytes over raw TCP with `streams` connections (each message
/// split evenly over the streams), one sender and one receiver thread per stream.
fn raw_tcp_gbps(streams: usize, size: usize, iters: usize) -> f64 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let per = size / streams;
    let start = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..streams {
            sc.spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).expect("connect");
                let buf = vec![1u8; per];
                for _ in 0..iters {
                    s.write_all(&buf).expect("write");
                }
            });
        }
        for _ in 0..streams {
            let (mut s, _) = listener.accept().expect("accept");
            sc.spawn(move || {
                let mut buf = vec![0u8; per];
                for _ in 0..iters {
                    s.read_exact(&mut buf).expect("read");
                }
            });
        }
    });
    (size * iters) as f64 / start.elapsed().as_secs_f64() / 1e9
}

fn emu_gbps(streams: usize, size: usize, iters: usize) -> f64 {
    let (s, r, _lc) = pair(&cfg(streams, crate::config::DEFAULT_CHUNK_SIZE));
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let start = Instant::now();
    let end = start + Duration::from_secs(60);
    for _ in 0..iters {
        // SAFETY: buffers outlive the requests (waited on below).
        let rq = unsafe { r.irecv(dst.as_mut_ptr(), size) }.expect("irecv");
        let sq = unsafe { s.isend(src.as_ptr(), size) }.expect("isend");
        let (mut sd, mut rd) = (false, false);
        while !(sd && rd) {
            assert!(Instant::now() < end);
            sd = sd || s.test(sq).expect("test").is_some();
            rd = rd || r.test(rq).expect("test").is_some();
            // Leave the cores to the helper threads (this host may have only two).
            std::thread::sleep(Duration::from_micros(50));
        }
        r.irecv_consumed(rq).expect("consumed");
    }
    (size * iters) as f64 / start.elapsed().as_secs_f64() / 1e9
}

#[test]
#[ignore = "throughput measurement; run in release with --ignored --nocapture"]
fn perf_64mib_vs_raw_tcp() {
    for streams in [1, 2, 4] {
        let size = 64 << 20;
        let raw = raw_tcp_gbps(streams, size, 16);
        let emu = emu_gbps(streams, size, 16);
        println!(
            "streams {streams}: raw TCP {raw:.2} GB/s, tcpx-emu {emu:.2} GB/s, ratio {:.2}",
            emu / raw
        );
    }
}

// ------------------------------------------------------------------------------------------------
// A peer process that is killed (SIGKILL) mid-transfer. The child is this test binary running the
// ignored helper below; it gets the handle through its own environment only.
// ------------------------------------------------------------------------------------------------

const CHILD_HANDLE_VAR: &str = "TCPXEMU_TEST_CHILD_HANDLE";

#[test]
#[ignore = "helper process for killed_peer_process_yields_error"]
fn child_sender_helper() {
    let Ok(hex) = std::env::var(CHILD_HANDLE_VAR) else {
        return;
    };
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    // `slow` keeps the send in flight long enough for the parent to kill us mid-request.
    let mut c = cfg(2, 4096);
    c.fault = Some(Fault {
        kind: FaultKind::Slow,
        after: 0,
    });
    let end = deadline();
    let s = loop {
        if let Some(s) = connect(&mut h, &c).expect("connect") {
            break s;
        }
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(1));
    };
    let src = vec![7u8; 4 << 20];
    // SAFETY: the buffer outlives the request (the process is killed while waiting).
    let q = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    println!("CHILD-POSTED");
    let _ = wait(&s, q);
}

#[test]
fn killed_peer_process_yields_error() {
    use std::io::BufRead;
    let c = cfg(2, 4096);
    let (lc, h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = std::process::Command::new(exe)
        .args(["--exact", "tests::child_sender_helper", "--ignored", "--nocapture"])
        .env(CHILD_HANDLE_VAR, hex)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let end = deadline();
    let r = loop {
        if let Some(r) = lc.accept().expect("accept") {
            break r;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("child never connected");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut dst = vec![0u8; 4 << 20];
    // SAFETY: the buffer outlives the comm.
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
    // Wait for the child to post (reading its stdout; it never blocks past the child's exit).
    let stdout = child.stdout.take().expect("stdout");
    let posted = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("CHILD-POSTED"));
    assert!(posted, "child did not post its send");
    std::thread::sleep(Duration::from_millis(50));
    child.kill().expect("kill");
    let _ = child.wait();
    let start = Instant::now();
    let err = wait(&r, rq).expect_err("a killed peer must fail the receive");
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(err.code, NCCL_REMOTE_ERROR | NCCL_SYSTEM_ERROR));
    assert!(err.msg.contains(&r.peer().ip().to_string()), "{}", err.msg);
    assert!(err.msg.contains(&r.peer().to_string()), "{}", err.msg);
}

// ---------------------------------------------------------------------------------------------
// Device-unpack mode, what a host without a GPU can check (the GPU path runs in
// `examples/unpack_check.rs` and `launch/nccl-judge.sh`).
// ---------------------------------------------------------------------------------------------

#[test]
fn unpack_mode_resolution_without_gpu() {
    if crate::gpu::cuda_present() == Ok(true) {
        eprintln!("a GPU is present: skipping the no-GPU mode resolution test");
        return;
    }
    let mut c = Config {
        mode: crate::config::Mode::Auto,
        ..Config::default()
    };
    crate::resolve_mode(&mut c).expect("auto resolves");
    assert_eq!(c.mode, crate::config::Mode::Host);
    let mut c = Config {
        mode: crate::config::Mode::Unpack,
        ..Config::default()
    };
    let e = crate::resolve_mode(&mut c).expect_err("unpack without CUDA");
    assert_eq!(e.code, NCCL_INVALID_USAGE);
    assert!(e.msg.contains("TCPXEMU_MODE=host"), "{}", e.msg);
}

#[test]
fn cuda_buffers_on_host_comms_are_refused_with_the_fix() {
    let (s, r, _lc) = pair(&cfg(1, 65536));
    let mut buf = vec![0u8; 64];
    let e = unsafe { r.irecv_mem(buf.as_mut_ptr(), (4 << 20) + 1, true) }.expect_err("above 4 MiB");
    assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
    assert!(e.msg.contains("4194304") && e.msg.contains("2048"), "{}", e.msg);
    let e = unsafe { r.irecv_mem(buf.as_mut_ptr(), 64, true) }.expect_err("host comm");
    assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
    assert!(e.msg.contains("TCPXEMU_MODE=unpack"), "{}", e.msg);
    let e = unsafe { s.isend_mem(buf.as_ptr(), 64, true) }.expect_err("host comm");
    assert!(e.msg.contains("TCPXEMU_MODE=unpack"), "{}", e.msg);
    // Nothing was admitted: the comms still work.
    let rq = unsafe { r.irecv(buf.as_mut_ptr(), 64) }.expect("irecv");
    let src = [9u8; 64];
    let sq = unsafe { s.isend(src.as_ptr(), 64) }.expect("isend");
    assert_eq!(r.unpack_cnt(0), None);
    let end = deadline();
    let (mut sd, mut rd) = (false, false);
    while !(sd && rd) {
        assert!(Instant::now() < end);
        sd = sd || s.test(sq).expect("test").is_some();
        rd = rd || r.test(rq).expect("test").is_some();
    }
    assert_eq!(buf, src);
}
