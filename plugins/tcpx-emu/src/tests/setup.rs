//! Connection setup against strangers: silent or bogus TCP connections to a listener must not
//! delay a real peer, and the listener names them when setup does not finish.

use super::*;
use std::io::Write;
use std::net::TcpStream;

/// The silent-socket deadline in these tests (the default is the 30 s of `TCP_USER_TIMEOUT`).
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens `silent` connections that never send a byte, then connects a real peer: the time from
/// its first `connect` call to both comms existing.
fn setup_time_with_strangers(c: &Config, silent: usize) -> Duration {
    let (lc, mut h) = ListenComm::bind(LOCALHOST, 0, c).expect("listen");
    let strangers: Vec<TcpStream> = (0..silent)
        .map(|_| TcpStream::connect(lc.addr()).expect("stranger connects"))
        .collect();
    // Let the acceptor take the strangers before the peer's sockets.
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let end = start + Duration::from_secs(30);
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        assert!(
            Instant::now() < end,
            "the real peer was not accepted within 30 s behind {silent} silent connections"
        );
        if s.is_none() {
            s = connect(&mut h, c, None).expect("connect");
        }
        if r.is_none() {
            r = lc.accept().expect("accept");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = start.elapsed();
    drop((s, r, strangers, lc));
    took
}

#[test]
fn silent_connections_do_not_delay_a_real_peer() {
    let c = Config {
        hello_timeout: HELLO_TIMEOUT,
        ..cfg(2, 8192)
    };
    let alone = setup_time_with_strangers(&c, 0);
    // Four silent connections held the old single-threaded acceptor 4 x 10 s.
    let behind = setup_time_with_strangers(&c, 4);
    assert!(
        behind < c.hello_timeout / 2 && behind < alone * 20 + Duration::from_millis(500),
        "setup took {behind:?} behind 4 silent connections, {alone:?} alone"
    );
}

#[test]
fn strangers_are_named_and_closing_is_prompt() {
    let c = Config {
        hello_timeout: HELLO_TIMEOUT,
        ..cfg(1, 8192)
    };
    let (lc, _h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let silent = TcpStream::connect(lc.addr()).expect("connect");
    let mut bogus = TcpStream::connect(lc.addr()).expect("connect");
    bogus.write_all(&[0x55; 32]).expect("write");
    let early = TcpStream::connect(lc.addr()).expect("connect");
    let early_addr = early.local_addr().expect("addr");
    drop(early);
    let (bogus_addr, silent_addr) = (bogus.local_addr().expect("addr"), silent.local_addr().expect("addr"));
    let end = Instant::now() + c.hello_timeout + Duration::from_secs(5);
    let want = [
        format!("{bogus_addr} (not a tcpx-emu hello"),
        format!("{early_addr} (closed after 0 of the 32 hello bytes)"),
        format!("{silent_addr} (no hello within {} s", c.hello_timeout.as_secs_f64()),
    ];
    loop {
        assert!(lc.accept().expect("accept").is_none(), "no stranger becomes a comm");
        let w = lc.waiting_for();
        if want.iter().all(|x| w.contains(x.as_str())) {
            assert!(
                w.contains("3 connection(s) rejected") && w.contains("a ctrl socket and 1 data socket(s)"),
                "{w}"
            );
            break;
        }
        assert!(Instant::now() < end, "not all strangers named: {w}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A silent socket still waiting does not hold the listen comm's close.
    let _still_silent = TcpStream::connect(lc.addr()).expect("connect");
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    drop(lc);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "close took {:?}",
        start.elapsed()
    );
}

/// A real peer's data socket whose hello comes 6 s late (its first segment lost in a connect
/// storm, resent after TCP's backoff) still joins its comm under the default deadline: at 5 s it
/// was rejected as a stranger and the comm waited for it until -T (128 ranks on the GPU host).
#[test]
fn a_hello_resent_after_backoff_still_joins_its_comm() {
    use crate::handle::ListenInfo;
    use crate::wire::{Hello, KIND_CTRL, KIND_DATA};
    let c = cfg(1, 8192);
    assert!(
        c.hello_timeout >= Duration::from_secs(30),
        "the default follows TCP_USER_TIMEOUT"
    );
    let (lc, h) = ListenComm::bind(LOCALHOST, 0, &c).expect("listen");
    let info = ListenInfo::decode(&h).expect("handle");
    let hello = |kind, index| {
        Hello {
            kind,
            index,
            nsocks: 1,
            flags: 0,
            chunk_size: info.chunk_size as u32,
            token: info.token,
            conn_id: 7,
        }
        .encode()
    };
    let mut ctrl = TcpStream::connect(info.addr).expect("ctrl");
    ctrl.write_all(&hello(KIND_CTRL, 0)).expect("ctrl hello");
    let mut data = TcpStream::connect(info.addr).expect("data");
    let late = Duration::from_secs(6);
    let start = Instant::now();
    let mut sent = false;
    let comm = loop {
        if !sent && start.elapsed() >= late {
            data.write_all(&hello(KIND_DATA, 0)).expect("data hello");
            sent = true;
        }
        if let Some(comm) = lc.accept().expect("accept") {
            break comm;
        }
        assert!(
            start.elapsed() < late + Duration::from_secs(10),
            "the late data socket never joined: {}",
            lc.waiting_for()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(sent, "the comm existed before its data socket said hello");
    drop((comm, ctrl, data, lc));
}
