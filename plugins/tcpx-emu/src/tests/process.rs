use super::*;

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
        if let Some(s) = connect(&mut h, &c, None).expect("connect") {
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
        .args([
            "--exact",
            "tests::process::child_sender_helper",
            "--ignored",
            "--nocapture",
        ])
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
