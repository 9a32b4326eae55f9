use super::*;

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
    assert_eq!(wait_both(&s, s0, &r, r0), (Ok(10_000), Ok(10_000)));
    assert_eq!(wait_both(&s, s1, &r, r1), (Ok(10_000), Ok(10_000)));
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
            s = connect(&mut h, &sc, None).expect("connect");
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

fn fault(kind: FaultKind, after: u64) -> Config {
    Config {
        fault: Some(Fault { kind, after }),
        ..cfg(2, 4096)
    }
}

#[test]
fn fault_short_sends_half_and_reports_success() {
    let (s, r, _lc) = pair(&fault(FaultKind::Short, 1));
    let mut src = vec![0u8; 10_001];
    fill(&mut src, 21);
    for i in 0..3 {
        let mut dst = vec![0xeeu8; src.len()];
        // SAFETY: buffers outlive the requests (waited on below).
        let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
        let sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
        let (sent, got) = wait_both(&s, sq, &r, rq);
        assert_eq!(sent, Ok(src.len()), "the sender reports success for the whole message");
        r.irecv_consumed(rq).expect("consume");
        if i == 0 {
            assert_eq!(got, Ok(src.len()));
            assert_eq!(dst, src, "request before AFTER is whole");
        } else {
            let half = crate::fault::short_len(src.len());
            assert_eq!(got, Ok(half), "the receiver learns the short size");
            assert_eq!(dst[..half], src[..half]);
            assert!(
                dst[half..].iter().all(|&b| b == 0xee),
                "request {i}: the second half never moved"
            );
        }
    }
}

#[test]
fn fault_short_lie_reports_the_full_size_of_a_half_receive() {
    let (s, r, _lc) = pair(&fault(FaultKind::ShortLie, 1));
    let mut src = vec![0u8; 70_001];
    fill(&mut src, 33);
    for i in 0..3 {
        let mut dst = vec![0xeeu8; src.len()];
        // SAFETY: buffers outlive the requests (waited on below).
        let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
        let sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
        let (sent, got) = wait_both(&s, sq, &r, rq);
        r.irecv_consumed(rq).expect("consume");
        assert_eq!(sent, Ok(src.len()), "the sender reports success for the whole message");
        assert_eq!(got, Ok(src.len()), "request {i}: the receiver reports the full size");
        let half = crate::fault::short_len(src.len());
        let untouched = dst[half..].iter().map(|&b| usize::from(b == 0xee)).sum::<usize>();
        if i == 0 {
            assert_eq!(dst, src, "request before AFTER is whole");
        } else {
            assert_eq!(dst[..half], src[..half]);
            // The second half never moved (a byte of src may equal the filler by chance).
            assert!(
                untouched > (src.len() - half) * 9 / 10,
                "request {i}: {untouched} bytes untouched"
            );
        }
    }
}

#[test]
fn fault_stale_leaves_the_previous_iterations_bytes() {
    let (s, r, _lc) = pair(&fault(FaultKind::Stale, 1));
    let mut dst = vec![0u8; 70_000];
    let mut first = Vec::new();
    for i in 0..3u64 {
        let mut src = vec![0u8; dst.len()];
        fill(&mut src, 100 + i);
        // SAFETY: buffers outlive the requests (waited on below).
        let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
        let sq = unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend");
        assert_eq!(
            wait_both(&s, sq, &r, rq),
            (Ok(dst.len()), Ok(dst.len())),
            "both complete"
        );
        r.irecv_consumed(rq).expect("consume");
        if i == 0 {
            assert_eq!(dst, src);
            first = src;
        } else {
            assert_ne!(dst, src, "iteration {i}'s bytes must not reach the buffer");
            assert_eq!(dst, first, "the buffer keeps the previous iteration's bytes");
        }
    }
}

#[test]
fn fault_drop_never_completes_the_receive_while_the_sender_goes_on() {
    let (s, r, _lc) = pair(&fault(FaultKind::Drop, 1));
    let src = vec![7u8; 20_000];
    let mut dst = vec![0u8; 3 * src.len()];
    let mut rqs = Vec::new();
    for k in 0..3 {
        // SAFETY: buffers outlive the comms (dropped at the end).
        rqs.push(unsafe { r.irecv(dst.as_mut_ptr().add(k * src.len()), src.len()) }.expect("irecv"));
    }
    let sqs: Vec<Request> = (0..3)
        .map(|_| unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend"))
        .collect();
    assert_eq!(wait_both(&s, sqs[0], &r, rqs[0]), (Ok(src.len()), Ok(src.len())));
    r.irecv_consumed(rqs[0]).expect("consume");
    // The peer's sends all complete, the dropped receive never does.
    // At least 300 ms of the dropped receive not completing; the sends get up to the deadline.
    let (min_end, end) = (Instant::now() + Duration::from_millis(300), deadline());
    let mut sent = 1;
    while Instant::now() < min_end || (sent < 3 && Instant::now() < end) {
        assert_eq!(r.test(rqs[1]), Ok(None), "the dropped receive must not complete");
        if sent < 3 && s.test(sqs[sent]).expect("test send").is_some() {
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sent, 3, "the sender keeps going");
    let start = Instant::now();
    drop((s, r));
    assert!(start.elapsed() < Duration::from_secs(5));
}
