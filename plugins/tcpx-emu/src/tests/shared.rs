//! The shared helper-thread model (`TCPXEMU_THREADS=shared`, and `auto` past
//! `TCPXEMU_THREAD_SOCKETS`): data, thread count, failures and closing on the event loops.

use super::*;
use crate::config::Threads;
use crate::threads::Model;

fn shared(nsocks: usize, chunk_size: usize) -> Config {
    Config {
        threads: Threads::Shared,
        ..cfg(nsocks, chunk_size)
    }
}

/// `n` connected pairs; their listen comms are closed.
fn pairs(c: &Config, n: usize) -> Vec<(Box<Comm>, Box<Comm>)> {
    (0..n)
        .map(|_| {
            let (s, r, lc) = pair(c);
            drop(lc);
            (s, r)
        })
        .collect()
}

/// Messages of `pair`: sizes that are not multiples of the chunk, some several chunks long.
fn messages(pair: usize, chunk: usize) -> Vec<(usize, usize)> {
    (0..6)
        .map(|i| {
            let n = (pair * 7919 + i * 104_729) % (5 * chunk) + 1 + i % 3;
            (n, n + (i % 2) * 33)
        })
        .collect()
}

#[test]
fn forty_pairs_on_the_shared_loops_move_every_byte() {
    let chunk = 16 << 10;
    let c = shared(3, chunk);
    let all = pairs(&c, 40);
    // Four callers drive ten pairs each at once; every comm is on the loops for the whole test.
    std::thread::scope(|sc| {
        for (k, group) in all.chunks(10).enumerate() {
            sc.spawn(move || {
                for (i, (s, r)) in group.iter().enumerate() {
                    transfer(s, r, &messages(10 * k + i, chunk), 16);
                }
            });
        }
    });
    for (s, r) in &all {
        assert_eq!(s.thread_model(), Some(Model::Shared));
        assert_eq!(r.thread_model(), Some(Model::Shared));
    }
    // A second round on the same comms (their sockets' cursors went on from the first).
    for (i, (s, r)) in all.iter().enumerate().step_by(7) {
        transfer(s, r, &messages(i + 100, chunk), 3);
    }
}

#[test]
fn per_socket_and_auto_below_the_threshold_keep_helper_threads() {
    for threads in [Threads::PerSocket, Threads::Auto] {
        let c = Config {
            threads,
            ..cfg(2, 16 << 10)
        };
        let (s, r, _lc) = pair(&c);
        assert_eq!(s.thread_model(), None, "the model is chosen at the first transfer");
        transfer(&s, &r, &messages(1, 16 << 10), 4);
        // Other tests of this binary may hold many sockets at this moment: only `per-socket`
        // is certain here; `auto` past the threshold is the child process's test.
        if threads == Threads::PerSocket {
            assert_eq!(s.thread_model(), Some(Model::PerSocket));
            assert_eq!(r.thread_model(), Some(Model::PerSocket));
        }
    }
}

#[test]
fn zero_copy_and_blocking_faults_keep_per_socket_threads_under_shared() {
    let zc = Config {
        zerocopy: crate::config::ZeroCopy::All,
        ..shared(2, 16 << 10)
    };
    let slow = Config {
        fault: Some(Fault {
            kind: FaultKind::Slow,
            after: 1000,
        }),
        ..shared(2, 16 << 10)
    };
    for c in [zc, slow] {
        let (s, r, _lc) = pair(&c);
        transfer(&s, &r, &messages(2, 16 << 10), 4);
        assert_eq!(s.thread_model(), Some(Model::PerSocket), "{c:?}");
        assert_eq!(r.thread_model(), Some(Model::PerSocket), "{c:?}");
    }
}

#[test]
fn a_peer_that_goes_away_mid_transfer_fails_test_on_the_shared_path() {
    // Receiver side: 64 MiB cannot sit in the socket buffers, so the sender is mid-request.
    let (s, r, lc) = pair(&shared(2, 512 << 10));
    let big = vec![5u8; 64 << 20];
    let mut dst = vec![0u8; 64 << 20];
    // SAFETY: the buffers outlive the comms.
    let sq = unsafe { s.isend(big.as_ptr(), big.len()) }.expect("isend");
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
    // Release the send and let some bytes arrive.
    for _ in 0..50 {
        assert_eq!(s.test(sq).expect("test send"), None);
        assert_eq!(r.test(rq).expect("test recv"), None);
    }
    assert_eq!(r.thread_model(), Some(Model::Shared));
    drop(s);
    let start = Instant::now();
    let err = wait(&r, rq).expect_err("the sender went away");
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(err.code, NCCL_REMOTE_ERROR | NCCL_SYSTEM_ERROR), "{}", err.msg);
    assert!(err.msg.contains(&r.peer().to_string()), "{}", err.msg);
    drop((r, lc));

    // Sender side: the receiver closes with the send in flight.
    let (s, r, lc) = pair(&shared(1, 512 << 10));
    // SAFETY: as above.
    let sq = unsafe { s.isend(big.as_ptr(), big.len()) }.expect("isend");
    let rq = unsafe { r.irecv(dst.as_mut_ptr(), dst.len()) }.expect("irecv");
    for _ in 0..50 {
        let _ = s.test(sq).expect("test send");
        let _ = r.test(rq).expect("test recv");
    }
    drop(r);
    let err = wait(&s, sq).expect_err("the receiver went away");
    assert!(matches!(err.code, NCCL_REMOTE_ERROR | NCCL_SYSTEM_ERROR), "{}", err.msg);
    assert!(err.msg.contains(&lc.addr().to_string()), "{}", err.msg);
}

#[test]
fn closing_with_requests_in_flight_on_the_shared_path_is_prompt() {
    let (s, r, _lc) = pair(&shared(4, 64 << 10));
    let src = vec![1u8; 4 << 20];
    let mut dst = vec![vec![0u8; 4 << 20]; 4];
    // 16 sends of 4 MiB, only 4 receives: most bytes can go nowhere.
    // SAFETY: the buffers outlive the comms.
    let sq: Vec<Request> = (0..16)
        .map(|_| unsafe { s.isend(src.as_ptr(), src.len()) }.expect("isend"))
        .collect();
    let rq: Vec<Request> = dst
        .iter_mut()
        .map(|d| unsafe { r.irecv(d.as_mut_ptr(), d.len()) }.expect("irecv"))
        .collect();
    // Each oldest request is tested until done (a test moves bytes inline: the first 4 MiB may
    // complete), at most 20 times; 12 sends stay in flight whatever happens.
    let (mut sent, mut received) = (false, false);
    for _ in 0..20 {
        sent = sent || s.test(sq[0]).expect("test send").is_some();
        received = received || r.test(rq[0]).expect("test recv").is_some();
    }
    assert_eq!(s.thread_model(), Some(Model::Shared));
    for comm in [s, r] {
        let start = Instant::now();
        drop(comm);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "close took {:?}",
            start.elapsed()
        );
    }
    // The loops let go of the closed comms: a new pair on the same loops still moves data.
    let (s, r, _lc) = pair(&shared(4, 64 << 10));
    transfer(&s, &r, &messages(3, 64 << 10), 16);
}

#[test]
fn a_cuda_registration_after_the_first_shared_transfer_names_the_fix() {
    let (s, r, _lc) = pair(&shared(1, 16 << 10));
    transfer(&s, &r, &[(100, 100)], 1);
    for comm in [&s, &r] {
        let e = comm.register_cuda().expect_err("shared comms move host memory only");
        assert!(
            e.msg.contains("TCPXEMU_THREADS=per-socket") && e.msg.contains("before the comm's first transfer"),
            "{}",
            e.msg
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Thread count with 100+ comms in `auto`: in a child process (this binary runs tests in parallel,
// each with its own threads and sockets).
// ------------------------------------------------------------------------------------------------

const CHILD_VAR: &str = "TCPXEMU_TEST_THREAD_BOUND";
/// Pairs in the child: 120 comms of one data socket each, past the default threshold of 64.
const CHILD_PAIRS: usize = 60;
/// What the child may run: the harness's main and test threads, the acceptor, the 4 loops, slack
/// for the runtime; per-socket threads would be 120, an acceptor per listen comm 60.
const THREAD_BOUND: usize = 16;

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

#[test]
#[ignore = "helper process for auto_mode_and_the_shared_acceptor_bound_the_threads_of_a_process"]
fn child_many_comms_helper() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let chunk = 8 << 10;
    // Setup: as many listen comms open at once as tcpx-perf opens (one per receive comm), all
    // served by the one acceptor thread.
    let listens: Vec<_> = (0..CHILD_PAIRS)
        .map(|_| ListenComm::bind(LOCALHOST, 0, &cfg(1, chunk)).expect("listen"))
        .collect();
    let listening = threads_now();
    drop(listens);
    let all = pairs(&cfg(1, chunk), CHILD_PAIRS);
    let mut most = threads_now();
    // Every pair moves data; the thread count is sampled as the comms go.
    for (i, (s, r)) in all.iter().enumerate() {
        transfer(s, r, &messages(i, chunk), 4);
        most = most.max(threads_now());
    }
    let models: Vec<_> = all
        .iter()
        .flat_map(|(s, r)| [s.thread_model(), r.thread_model()])
        .collect();
    println!(
        "CHILD-THREADS {most} SHARED {} SOCKETS {} LISTENING {listening}",
        models.iter().filter(|m| **m == Some(Model::Shared)).count(),
        crate::threads::data_sockets_open()
    );
}

#[test]
fn auto_mode_and_the_shared_acceptor_bound_the_threads_of_a_process() {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "tests::shared::child_many_comms_helper",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_VAR, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the child did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out).expect("read");
    assert!(status.success(), "child failed: {out}");
    let line = out.lines().find(|l| l.starts_with("CHILD-THREADS")).expect(&out);
    let nums: Vec<usize> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    let (threads, shared, sockets, listening) = (nums[0], nums[1], nums[2], nums[3]);
    assert!(
        listening <= THREAD_BOUND,
        "{listening} threads with {CHILD_PAIRS} listen comms open: {line}"
    );
    assert_eq!(sockets, 2 * CHILD_PAIRS, "{line}");
    // All pairs exist before the first transfer (as in tcpx-perf), so every comm saw 120 data
    // sockets open, past the threshold of 64.
    assert_eq!(shared, 2 * CHILD_PAIRS, "every comm went shared: {line}");
    assert!(
        threads <= THREAD_BOUND,
        "{threads} threads with {} comms: {line}",
        2 * CHILD_PAIRS
    );
}

/// Inline moves: on the shared model a `test` that publishes a small message moves its bytes
/// itself when the socket takes or holds them, so the event loops are kicked only for what is
/// left. 400 messages of 8 KiB (a 1 MiB fullmesh's message at 16 x 8 x 4), 4 in flight, two data
/// sockets: every byte arrives right, and most of them were moved inline on each side (the
/// sender's all but a socket buffer's worth; the receiver's once the data was there at the
/// match). Before inline moves the loops moved every byte (the counter stayed 0).
#[test]
fn small_messages_on_the_shared_model_move_inline() {
    let (s, r, _lc) = pair(&shared(2, 64 << 10));
    let msgs = vec![(8 << 10, 8 << 10); 400];
    transfer(&s, &r, &msgs, 4);
    assert_eq!(s.thread_model(), Some(Model::Shared));
    let total = 400 * (8 << 10) as u64;
    let ((sent, sent_inline), (got, got_inline)) = (s.moved_bytes(), r.moved_bytes());
    assert_eq!((sent, got), (total, total));
    assert!(sent_inline * 10 >= total * 9, "sent inline {sent_inline} of {total}");
    assert!(got_inline * 2 >= total, "received inline {got_inline} of {total}");
}
