//! Integration tests against the real tcpx-emu plugin over real loopback sockets.
//!
//! Needs `libnccl_net_tcpxemu.so` (`cargo build -p tcpx-emu`, or `TCPXEMU_PLUGIN=path`); a missing
//! plugin fails the tests. Every wait is bounded by a deadline.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{connect_pair, open, plugin_path, transfer, STEP};
use nccl_net::{abi, MemType, NetError, OpenOptions, Plugin, PluginSource, Poll};

/// Sizes around the interesting edges: empty, tiny, odd, page and chunk (512 KiB) boundaries, more
/// than a chunk, and 4 MiB (TCPX's largest receive).
const EDGE_SIZES: &[usize] = &[
    0,
    1,
    3,
    4095,
    4096,
    4097,
    65_537,
    524_287,
    524_288,
    524_289,
    1_048_593,
    3 * 524_288 + 7,
    4 << 20,
    0,
    1,
];

/// 300 back-to-back messages of pseudo-random sizes up to 256 KiB (some empty), 16 in flight.
fn many_sizes() -> Vec<usize> {
    let mut x: u32 = 12345;
    (0..300)
        .map(|i| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            if i % 37 == 0 {
                0
            } else {
                (x >> 8) as usize % (256 << 10)
            }
        })
        .collect()
}

fn exercise_abi(v: u32) {
    let p = open(Some(v));
    assert_eq!(p.abi(), v);
    assert!(!p.name().is_empty());
    assert!(p.path().exists(), "{}", p.path().display());
    let n = p.device_count().expect("devices");
    assert!(n >= 1, "tcpx-emu should expose lo as a device");
    let props = p.properties(0).expect("properties");
    assert!(props.ptr_support & abi::NCCL_PTR_HOST != 0, "{props:?}");
    assert_eq!(props.max_p2p_bytes.is_some(), v >= 9, "{props:?}");
    assert!(p.properties(n).is_err(), "a device past the end must be refused");

    let (mut sc, mut rc) = connect_pair(&p);
    assert_eq!(sc.peer(), "test sender");
    assert_eq!(rc.peer(), "test receiver");
    transfer(&mut sc, &mut rc, EDGE_SIZES, 4);
    transfer(&mut sc, &mut rc, &many_sizes(), 16);
}

#[test]
fn abi_v7_moves_data() {
    exercise_abi(7);
}
#[test]
fn abi_v8_moves_data() {
    exercise_abi(8);
}
#[test]
fn abi_v9_moves_data() {
    exercise_abi(9);
}
#[test]
fn abi_v10_moves_data() {
    exercise_abi(10);
}
#[test]
fn abi_v11_moves_data() {
    exercise_abi(11);
}
#[test]
fn abi_v12_moves_data() {
    exercise_abi(12);
}

#[test]
fn default_probe_takes_the_newest_version() {
    let p = open(None);
    assert_eq!(p.abi(), 12, "tcpx-emu exports v7..v12; NCCL would pick v12");
}

/// TCPX allows 16 outstanding requests per comm: the 17th isend/irecv fails with
/// ncclInternalError; the comm stays usable.
#[test]
fn seventeenth_outstanding_request_is_refused() {
    let p = open(Some(7));
    let (mut sc, mut rc) = connect_pair(&p);
    let mut sbuf = vec![7u8; 16 * 1024];
    let mut rbuf = vec![0u8; 16 * 1024];
    // SAFETY: both buffers outlive the comms: they are dropped explicitly after them, at the end.
    let smr = unsafe { sc.register(sbuf.as_mut_ptr(), sbuf.len(), MemType::Host) }.unwrap();
    let rmr = unsafe { rc.register(rbuf.as_mut_ptr(), rbuf.len(), MemType::Host) }.unwrap();

    let deadline = Instant::now() + STEP;
    let mut rreqs = Vec::new();
    while rreqs.len() < 16 {
        assert!(Instant::now() < deadline);
        // SAFETY: 1 KiB slices of the registered buffer, not touched until completion.
        if let Some(r) = unsafe { rc.irecv(rmr, rbuf.as_mut_ptr().add(rreqs.len() * 1024), 1024, 0) }.unwrap() {
            rreqs.push(r);
        }
    }
    let mut sreqs = Vec::new();
    while sreqs.len() < 16 {
        assert!(Instant::now() < deadline);
        // SAFETY: as above.
        if let Some(r) = unsafe { sc.isend(smr, sbuf.as_ptr().add(sreqs.len() * 1024), 1024, 0) }.unwrap() {
            sreqs.push(r);
        }
    }
    // SAFETY: as above.
    match unsafe { sc.isend(smr, sbuf.as_ptr(), 1024, 0) } {
        Err(e @ NetError::Call { .. }) => {
            assert_eq!(e.code(), Some(abi::NCCL_INTERNAL_ERROR), "{e}");
            let s = e.to_string();
            assert!(
                s.starts_with("isend failed: ncclInternalError (3) [peer test sender]"),
                "{s}"
            );
        }
        other => panic!("17th isend should fail with ncclInternalError, got {other:?}"),
    }
    // SAFETY: as above.
    match unsafe { rc.irecv(rmr, rbuf.as_mut_ptr(), 1024, 0) } {
        Err(e) => assert_eq!(e.code(), Some(abi::NCCL_INTERNAL_ERROR), "{e}"),
        other => panic!("17th irecv should fail with ncclInternalError, got {other:?}"),
    }

    // The 16 in flight still complete, FIFO, on both sides.
    std::thread::scope(|s| {
        s.spawn(|| {
            for mut r in sreqs {
                loop {
                    assert!(Instant::now() < deadline, "send stuck");
                    match sc.test(r).unwrap() {
                        Poll::Pending(again) => r = again,
                        Poll::Done { .. } => break,
                    }
                }
            }
        });
        s.spawn(|| {
            for mut r in rreqs {
                loop {
                    assert!(Instant::now() < deadline, "recv stuck");
                    match rc.test(r).unwrap() {
                        Poll::Pending(again) => r = again,
                        Poll::Done { recv, .. } => {
                            rc.consume(recv.unwrap()).unwrap();
                            break;
                        }
                    }
                }
            }
        });
    });
    assert!(rbuf.iter().all(|&b| b == 7));
    drop((sc, rc));
    drop((sbuf, rbuf));
}

/// Consume must follow posting order; tests and consumes on the wrong comm are refused without
/// calling the plugin; sizes an int ABI cannot hold are refused.
#[test]
fn misuse_is_refused() {
    let p = open(Some(7));
    let (mut sc, mut rc) = connect_pair(&p);
    let (mut sc2, mut rc2) = connect_pair(&p);
    let mut sbuf = vec![1u8; 8192];
    let mut rbuf = vec![0u8; 8192];
    // SAFETY: the buffers outlive the comms (dropped explicitly after them).
    let smr = unsafe { sc.register(sbuf.as_mut_ptr(), sbuf.len(), MemType::Host) }.unwrap();
    let rmr = unsafe { rc.register(rbuf.as_mut_ptr(), rbuf.len(), MemType::Host) }.unwrap();

    // A memory registration of another comm, and a buffer outside the registration.
    // SAFETY: refused before the plugin is called.
    let e = unsafe { sc2.isend(smr, sbuf.as_ptr(), 16, 0) }.unwrap_err();
    assert!(matches!(e, NetError::Usage(_)), "{e}");
    // SAFETY: as above.
    let e = unsafe { sc.isend(smr, sbuf.as_ptr().add(8000), 1000, 0) }.unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    // v7 regMr takes an int size: > i32::MAX is refused, never truncated.
    // SAFETY: refused before the plugin is called, so the memory is never touched.
    let e = unsafe { sc2.register(sbuf.as_mut_ptr(), 1 << 31, MemType::Host) }.unwrap_err();
    assert!(matches!(&e, NetError::Usage(m) if m.contains("v7")), "{e}");

    let deadline = Instant::now() + STEP;
    // Two sends and two receives, completed in order.
    let mut dones = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..2 {
                // SAFETY: registered, untouched until done.
                let mut r = loop {
                    assert!(Instant::now() < deadline);
                    if let Some(r) = unsafe { sc.isend(smr, sbuf.as_ptr().add(i * 4096), 4096, 0) }.unwrap() {
                        break r;
                    }
                };
                loop {
                    assert!(Instant::now() < deadline);
                    match sc.test(r).unwrap() {
                        Poll::Pending(again) => r = again,
                        Poll::Done { .. } => break,
                    }
                }
            }
        });
        let mut reqs = Vec::new();
        for i in 0..2 {
            loop {
                assert!(Instant::now() < deadline);
                // SAFETY: registered, untouched until done.
                if let Some(r) = unsafe { rc.irecv(rmr, rbuf.as_mut_ptr().add(i * 4096), 4096, 0) }.unwrap() {
                    reqs.push(r);
                    break;
                }
            }
        }
        for mut r in reqs {
            loop {
                assert!(Instant::now() < deadline);
                match rc.test(r).unwrap() {
                    Poll::Pending(again) => r = again,
                    Poll::Done { recv, .. } => {
                        dones.push(recv.unwrap());
                        break;
                    }
                }
            }
        }
    });
    let second = dones.pop().unwrap();
    let first = dones.pop().unwrap();
    let e = rc.consume(second).unwrap_err();
    assert!(e.to_string().contains("posting order"), "{e}");
    let e = rc2.consume(first).unwrap_err();
    assert!(matches!(e, NetError::Usage(_)), "{e}");

    // A request tested on another comm is refused (and spent: sc2 is not used afterwards).
    let mut sbuf2 = vec![0u8; 64];
    // SAFETY: the buffer outlives sc2 (dropped after it).
    let mr2 = unsafe { sc2.register(sbuf2.as_mut_ptr(), 64, MemType::Host) }.unwrap();
    let r = loop {
        assert!(Instant::now() < deadline);
        // SAFETY: registered, untouched.
        if let Some(r) = unsafe { sc2.isend(mr2, sbuf2.as_ptr(), 64, 0) }.unwrap() {
            break r;
        }
    };
    let e = sc.test(r).unwrap_err();
    assert!(e.to_string().contains("another comm"), "{e}");
    drop((sc, rc, sc2, rc2));
    drop((sbuf, rbuf, sbuf2));
}

#[test]
fn bad_path_names_the_file_and_the_fix() {
    let e = Plugin::open(
        &PluginSource::Path("/nonexistent/libnope.so".into()),
        &OpenOptions::default(),
    )
    .unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, NetError::Open { .. }), "{s}");
    assert!(
        s.contains("/nonexistent/libnope.so") && s.contains("NCCL_NET_PLUGIN"),
        "{s}"
    );
}

#[test]
fn name_rules_try_libnccl_net_name_so_in_search_dirs() {
    let dir = std::env::temp_dir().join(format!("nccl-net-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libnccl-net-emutest.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(plugin_path(), &link).unwrap();
    let opts = OpenOptions {
        search_dirs: vec![dir.clone()],
        force_abi: Some(9),
        ..Default::default()
    };
    let p = Plugin::open(&PluginSource::Name("emutest".into()), &opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.abi(), 9);
    assert_eq!(p.path(), std::fs::canonicalize(plugin_path()).unwrap());
    let e = Plugin::open(&PluginSource::Name("no-such-plugin-xyz".into()), &opts).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("no-such-plugin-xyz") && s.contains("libnccl-net-no-such-plugin-xyz.so"),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_library_without_the_symbol_is_not_a_plugin() {
    let e = Plugin::open(&PluginSource::Name("libc.so.6".into()), &OpenOptions::default()).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, NetError::MissingSymbol { .. }), "{s}");
    assert!(
        s.contains("libc.so.6") && s.contains("is not an NCCL net plugin"),
        "{s}"
    );

    let opts = OpenOptions {
        force_abi: Some(7),
        ..Default::default()
    };
    let s = Plugin::open(&PluginSource::Name("libc.so.6".into()), &opts)
        .unwrap_err()
        .to_string();
    assert!(s.contains("ncclNetPlugin_v7") && s.contains("none of"), "{s}");
}

#[test]
fn a_text_file_is_reported_as_unloadable() {
    let f = std::env::temp_dir().join(format!("nccl-net-not-a-lib-{}.so", std::process::id()));
    std::fs::write(&f, "this is not an ELF file\n").unwrap();
    let e = Plugin::open(&PluginSource::Path(f.clone()), &OpenOptions::default()).unwrap_err();
    let s = e.to_string();
    let _ = std::fs::remove_file(&f);
    assert!(matches!(e, NetError::Open { .. }), "{s}");
    assert!(
        s.contains(&f.display().to_string()) && s.contains("check --plugin"),
        "{s}"
    );
}

const CHILD_ENV: &str = "NCCL_NET_TEST_KILLED_PEER_HANDLE";

/// The child half of `killed_peer_is_reported`: runs only when re-executed with `CHILD_ENV` set.
/// Connects, sends one 1 MiB message, says so, then waits to be killed.
#[test]
fn killed_peer_child_role() {
    let Ok(hex) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut handle = [0u8; abi::NET_HANDLE_MAXSIZE];
    for (i, b) in handle.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let p = open(Some(7));
    let mut sc = p.connect(0, handle, "parent").wait(Instant::now() + STEP).unwrap();
    let mut buf = vec![5u8; 1 << 20];
    // SAFETY: the buffer is leaked below along with the process.
    let mr = unsafe { sc.register(buf.as_mut_ptr(), buf.len(), MemType::Host) }.unwrap();
    let deadline = Instant::now() + STEP;
    // SAFETY: registered, untouched.
    let mut r = loop {
        assert!(Instant::now() < deadline);
        if let Some(r) = unsafe { sc.isend(mr, buf.as_ptr(), buf.len(), 0) }.unwrap() {
            break r;
        }
    };
    loop {
        assert!(Instant::now() < deadline);
        match sc.test(r).unwrap() {
            Poll::Pending(again) => r = again,
            Poll::Done { .. } => break,
        }
    }
    println!("CHILD-SENT");
    std::thread::sleep(Duration::from_secs(60));
    std::mem::forget((sc, buf));
}

/// A peer killed mid-transfer must turn into an error from `test` before a deadline, not a hang.
#[test]
fn killed_peer_is_reported() {
    let p = open(Some(7));
    let (mut lc, handle) = p.listen(0, "child process").unwrap();
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_peer_child_role",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, hex)
        .env("TCPXEMU_PLUGIN", plugin_path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut child = Reap(child);

    let mut rc = lc.accept(Instant::now() + STEP).unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![0u8; 2 << 20];
    // SAFETY: the buffer outlives the comm (dropped after it, below).
    let mr = unsafe { rc.register(buf.as_mut_ptr(), buf.len(), MemType::Host) }.unwrap();
    let deadline = Instant::now() + STEP;
    let post = |rc: &mut nccl_net::RecvComm, at: usize, buf: *mut u8| loop {
        assert!(Instant::now() < deadline);
        // SAFETY: inside the registration, untouched until done.
        if let Some(r) = unsafe { rc.irecv(mr, buf.add(at), 1 << 20, 0) }.unwrap() {
            return r;
        }
    };
    let mut r = post(&mut rc, 0, buf.as_mut_ptr());
    loop {
        assert!(Instant::now() < deadline, "first message never arrived");
        match rc.test(r).unwrap() {
            Poll::Pending(again) => r = again,
            Poll::Done { recv, .. } => {
                rc.consume(recv.unwrap()).unwrap();
                break;
            }
        }
    }
    // Wait for the child to say it is idle, then kill it with a receive outstanding.
    // (The harness prints its own lines first; EOF ends the loop if the child dies.)
    let mut said = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains("CHILD-SENT") || Instant::now() > deadline {
            break;
        }
    }
    assert!(said.contains("CHILD-SENT"), "child said {said:?}");
    let mut r = post(&mut rc, 1 << 20, buf.as_mut_ptr());
    child.0.kill().unwrap();
    let _ = child.0.wait();

    let killed = Instant::now();
    let bound = Duration::from_secs(10);
    let err = loop {
        assert!(
            killed.elapsed() < bound,
            "the plugin did not report the killed peer within {bound:?}"
        );
        match rc.test(r) {
            Ok(Poll::Pending(again)) => r = again,
            Ok(Poll::Done { .. }) => {
                panic!("a receive completed although the peer was killed before sending")
            }
            Err(e) => break e,
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let s = err.to_string();
    assert!(s.contains("test failed") && s.contains("[peer child process]"), "{s}");
    eprintln!("killed peer reported after {:?}: {s}", killed.elapsed());
    drop(rc);
    drop(buf);
}

const RECEIVER_CHILD_ENV: &str = "NCCL_NET_TEST_KILLED_RECEIVER";

/// The child half of `killed_receiver_is_reported`: runs only when re-executed with
/// `RECEIVER_CHILD_ENV` set. Listens, prints the handle, receives one 1 MiB message, says so, then
/// waits to be killed.
#[test]
fn killed_receiver_child_role() {
    if std::env::var_os(RECEIVER_CHILD_ENV).is_none() {
        return;
    }
    let p = open(Some(7));
    let (mut lc, handle) = p.listen(0, "parent").unwrap();
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    println!("HANDLE {hex}");
    let mut rc = lc.accept(Instant::now() + STEP).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: the buffer is leaked below along with the process.
    let mr = unsafe { rc.register(buf.as_mut_ptr(), buf.len(), MemType::Host) }.unwrap();
    let deadline = Instant::now() + STEP;
    let mut r = loop {
        assert!(Instant::now() < deadline);
        // SAFETY: registered, untouched until done.
        if let Some(r) = unsafe { rc.irecv(mr, buf.as_mut_ptr(), buf.len(), 0) }.unwrap() {
            break r;
        }
    };
    loop {
        assert!(Instant::now() < deadline);
        match rc.test(r).unwrap() {
            Poll::Pending(again) => r = again,
            Poll::Done { recv, .. } => {
                rc.consume(recv.unwrap()).unwrap();
                break;
            }
        }
    }
    println!("CHILD-RECEIVED");
    std::thread::sleep(Duration::from_secs(60));
    std::mem::forget((rc, lc, buf));
}

/// A receiver killed mid-stream must turn into an error from isend or test on the sending side
/// before a deadline.
#[test]
fn killed_receiver_is_reported() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_receiver_child_role",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(RECEIVER_CHILD_ENV, "1")
        .env("TCPXEMU_PLUGIN", plugin_path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut child = Reap(child);
    // Every read below ends at a line or at EOF (the child exits or is reaped on panic).
    let mut lines = BufReader::new(stdout).lines();
    let mut wait_for = |tag: &str| -> String {
        for line in lines.by_ref() {
            let line = line.unwrap();
            // The harness may have printed "test <name> ... " on the same line.
            if let Some(at) = line.find(tag) {
                return line[at + tag.len()..].trim().to_owned();
            }
        }
        panic!("child exited before printing {tag}");
    };
    let hex = wait_for("HANDLE ");
    let mut handle = [0u8; abi::NET_HANDLE_MAXSIZE];
    for (i, b) in handle.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let p = open(Some(7));
    let mut sc = p
        .connect(0, handle, "child receiver")
        .wait(Instant::now() + STEP)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![9u8; 4 << 20];
    // SAFETY: the buffer outlives the comm (dropped after it, below).
    let mr = unsafe { sc.register(buf.as_mut_ptr(), buf.len(), MemType::Host) }.unwrap();
    let deadline = Instant::now() + STEP;
    let send_one = |sc: &mut nccl_net::SendComm, len: usize| -> Result<(), NetError> {
        let mut r = loop {
            assert!(Instant::now() < deadline, "isend never started");
            // SAFETY: registered, unchanged until done.
            if let Some(r) = unsafe { sc.isend(mr, buf.as_ptr(), len, 0) }? {
                break r;
            }
        };
        loop {
            assert!(Instant::now() < deadline, "send never completed nor failed");
            match sc.test(r)? {
                Poll::Pending(again) => r = again,
                Poll::Done { .. } => return Ok(()),
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    send_one(&mut sc, 1 << 20).unwrap();
    wait_for("CHILD-RECEIVED");
    child.0.kill().unwrap();
    let _ = child.0.wait();

    // Keep sending (nothing receives any more) until the plugin notices.
    let killed = Instant::now();
    let bound = Duration::from_secs(10);
    let err = loop {
        assert!(
            killed.elapsed() < bound,
            "the plugin did not report the killed receiver within {bound:?}"
        );
        if let Err(e) = send_one(&mut sc, 4 << 20) {
            break e;
        }
    };
    let s = err.to_string();
    assert!(s.contains("[peer child receiver]"), "{s}");
    eprintln!("killed receiver reported after {:?}: {s}", killed.elapsed());
    drop(sc);
    drop(buf);
}

const STRICT_INIT_CHILD_ENV: &str = "NCCL_NET_TEST_STRICT_INIT_CHILD";

/// The child half of `strict_init_needs_dynamic_chunk_size`: opens the plugin in the environment
/// the parent chose (never through `open`, which would set `NCCL_DYNAMIC_CHUNK_SIZE`) and prints
/// the outcome.
#[test]
fn strict_init_child_role() {
    let Some(path) = std::env::var_os(STRICT_INIT_CHILD_ENV) else {
        return;
    };
    let opts = OpenOptions {
        force_abi: Some(7),
        ..Default::default()
    };
    match Plugin::open(&PluginSource::Path(path.into()), &opts) {
        Ok(_) => println!("CHILD-INIT: ok"),
        Err(e) => println!("CHILD-INIT: error: {e}"),
    }
}

/// TCPX contract #13 through the real library: with `NCCL_DYNAMIC_CHUNK_SIZE` unset or 0, TCPX
/// would move no data and hang, so strict tcpx-emu refuses `init` with the fix in the error;
/// `TCPXEMU_STRICT=0` keeps the old 512 KiB default.
#[test]
fn strict_init_needs_dynamic_chunk_size() {
    let path = plugin_path();
    let run = |chunk: Option<&str>, strict: Option<&str>| -> String {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "strict_init_child_role",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(STRICT_INIT_CHILD_ENV, &path)
        .env_remove("NCCL_DYNAMIC_CHUNK_SIZE")
        .env_remove("TCPXEMU_STRICT")
        .stderr(Stdio::null());
        if let Some(v) = chunk {
            cmd.env("NCCL_DYNAMIC_CHUNK_SIZE", v);
        }
        if let Some(v) = strict {
            cmd.env("TCPXEMU_STRICT", v);
        }
        let out = cmd.output().expect("run the child");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // The harness prints "test <name> ... " on the same line before the child's output.
        text.lines()
            .find_map(|l| l.find("CHILD-INIT: ").map(|i| l[i..].to_owned()))
            .unwrap_or_else(|| panic!("child printed no outcome: {text}"))
    };
    for chunk in [None, Some("0")] {
        let got = run(chunk, None);
        assert!(
            got.contains("error")
                && got.contains("TCPX contract #13")
                && got.contains("NCCL_DYNAMIC_CHUNK_SIZE=524288"),
            "NCCL_DYNAMIC_CHUNK_SIZE={chunk:?}: {got}"
        );
    }
    assert_eq!(run(Some("524288"), None), "CHILD-INIT: ok");
    assert_eq!(
        run(None, Some("0")),
        "CHILD-INIT: ok",
        "TCPXEMU_STRICT=0 keeps the old default"
    );
}
