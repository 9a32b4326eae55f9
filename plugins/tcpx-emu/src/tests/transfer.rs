use super::*;

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
    // Both sides test (data moves only inside `test`) until the send is done.
    let end = deadline();
    let mut received = None;
    let early_done = done;
    while !done {
        assert!(
            Instant::now() < end,
            "send did not complete once the receive was posted"
        );
        done = s.test(sreq).expect("test send").is_some();
        if received.is_none() {
            received = r.test(rreq).expect("test recv");
        }
    }
    // The request is complete: the sender may reuse its buffer, and the receiver must still
    // get the bytes as they were.
    src.fill(0x5a);
    let got = match received {
        Some(n) => n,
        None => wait(&r, rreq).expect("recv"),
    };
    assert_eq!(got, len);
    assert!(
        dst == expect,
        "the receiver saw the sender's buffer after it was reused"
    );
    r.irecv_consumed(rreq).expect("irecvConsumed");
    early_done
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
    let sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
    let (_, err) = wait_both(&s, sq, &r, rq);
    let err = err.expect_err("truncation must fail");
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
    assert_eq!(wait(&s, sreqs[0]), Ok(64));
    assert_eq!(wait(&r, rreqs[0]), Ok(64));
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
    assert_eq!(wait_both(&s, sq, &r, rq), (Ok(4096), Ok(4096)));
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
fn several_accepts_on_one_listen_comm_when_lenient() {
    // TCPX contract #11 refuses this in strict mode (`strict::second_accept_is_refused`).
    let c = Config {
        strict: false,
        ..cfg(2, 8192)
    };
    let (lc, h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let (mut h1, mut h2) = (h, h);
    let (mut s1, mut s2) = (None, None);
    let mut rs = Vec::new();
    let end = deadline();
    while s1.is_none() || s2.is_none() || rs.len() < 2 {
        assert!(Instant::now() < end, "timed out");
        if s1.is_none() {
            s1 = connect(&mut h1, &c, None).expect("connect 1");
        }
        if s2.is_none() {
            s2 = connect(&mut h2, &c, None).expect("connect 2");
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
    probes.sort_unstable();
    assert_eq!(probes, [[1], [2]], "each receive comm got exactly one sender's byte");
    drop((s1, s2, rs, lc));
}

/// Each socket of a send comm binds its device's address (as TCPX): an address this host does not
/// have fails the connect, naming it (without the bind the kernel would pick a source and succeed).
#[test]
fn a_send_comm_binds_its_devices_address() {
    let c = cfg(2, 4096);
    let (_lc, mut h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let foreign = std::net::SocketAddr::from(([198, 18, 255, 254], 0));
    let end = deadline();
    let err = loop {
        assert!(Instant::now() < end, "connect neither failed nor succeeded");
        match connect(&mut h, &c, Some(foreign)) {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(_)) => panic!("connected from an address this host does not have"),
            Err(e) => break e,
        }
    };
    assert!(
        err.to_string().contains("binding the source address 198.18.255.254:0"),
        "{err}"
    );
}

#[test]
fn foreign_handle_is_rejected() {
    let mut h = [0x42u8; NET_HANDLE_MAXSIZE];
    let err = connect(&mut h, &Config::default(), None).expect_err("foreign");
    assert_eq!(err.code, NCCL_INVALID_ARGUMENT);
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
        assert_eq!(
            unsafe { (crate::ncclNetPlugin_v7.test.expect("test"))(rq, &raw mut done, &raw mut size) },
            NCCL_SUCCESS
        );
        if done == 1 {
            break;
        }
        assert!(Instant::now() < end, "timed out");
        std::thread::yield_now();
    }
    assert_eq!(size, 300);
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

/// A receive whose control message has not come is tested without a system call (the ctrl
/// watcher's flag stays down), still completes once the message comes (the flag goes up), and
/// one `recv` takes every control message waiting. On per-socket threads whatever the tests
/// beside it hold open (`auto` would go shared past 64 sockets in this process, where inline
/// moves complete each receive at its match and fewer control messages wait to be batched).
#[test]
fn unmatched_receives_are_tested_without_reading_the_ctrl_socket() {
    let per_socket = Config {
        threads: crate::config::Threads::PerSocket,
        ..cfg(1, 65536)
    };
    let (s, r, _lc) = pair(&per_socket);
    let mut rbuf = vec![0u8; 4096];
    let mut sbuf = vec![0u8; 4096];
    fill(&mut sbuf, 43);
    let rq = unsafe { r.irecv(rbuf.as_mut_ptr(), rbuf.len()) }.expect("irecv");
    for _ in 0..1000 {
        assert_eq!(r.test(rq).expect("test"), None);
    }
    assert!(
        crate::ctrl_watch::running(),
        "the first receive comm starts the watcher"
    );
    // The first test reads (the flag starts up), then one in every READ_ANYWAY skips.
    let most = 2 + 1000 / u64::from(crate::comm::READ_ANYWAY);
    assert!(r.ctrl_reads() <= most, "{} reads for 1000 tests", r.ctrl_reads());
    let sq = unsafe { s.isend(sbuf.as_ptr(), sbuf.len()) }.expect("isend");
    let (sent, got) = wait_both(&s, sq, &r, rq);
    assert_eq!((sent.expect("send"), got.expect("receive")), (4096, 4096));
    assert_eq!(rbuf, sbuf);
    r.irecv_consumed(rq).expect("consumed");
    // 16 sends released by one test: their control messages leave in one `send` (one segment on
    // loopback) before any receive is posted, and one `recv` takes them all. (A stream of
    // messages released one by one leaves batching to the scheduler: 256 messages took from
    // under 256 reads to 1159, on main and after it alike.) Besides that read: an empty one at
    // most before they arrive, and one more only if the segment came in two.
    // SAFETY (both): the buffers outlive the requests, which complete below.
    let sq: Vec<Request> = (0..16)
        .map(|_| unsafe { s.isend(sbuf.as_ptr(), 1024) }.expect("isend"))
        .collect();
    // The first test releases all 16 (the helper thread may finish the first send at once).
    let first_sent = s.test(sq[0]).expect("test releases all 16");
    let mut rbufs = vec![vec![0u8; 1024]; 16];
    let before = r.ctrl_reads();
    let rqs: Vec<Request> = rbufs
        .iter_mut()
        .map(|b| unsafe { r.irecv(b.as_mut_ptr(), b.len()) }.expect("irecv"))
        .collect();
    for &rq in &rqs {
        assert_eq!(wait(&r, rq).expect("receive"), 1024);
        r.irecv_consumed(rq).expect("consumed");
    }
    let unsent = if first_sent.is_some() { &sq[1..] } else { &sq[..] };
    for &q in unsent {
        assert_eq!(wait(&s, q).expect("send"), 1024);
    }
    assert!(rbufs.iter().all(|b| b[..] == sbuf[..1024]));
    let reads = r.ctrl_reads() - before;
    assert!(reads <= 3, "{reads} reads for 16 control messages sent together");
}
