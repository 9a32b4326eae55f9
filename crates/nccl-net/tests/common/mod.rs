//! Shared helpers of the integration tests: finding the tcpx-emu plugin, connecting a pair of comms
//! inside one process, and moving verified data through them.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nccl_net::{MemType, OpenOptions, Plugin, PluginSource, Poll, RecvComm, SendComm};

/// Generous bound for connect/accept/transfers on a loaded 2-core machine.
pub const STEP: Duration = Duration::from_secs(20);

/// What tcpx-emu's strict mode (TCPX's contracts) requires of the environment, set once before
/// the plugin's first `init` reads it: `NCCL_DYNAMIC_CHUNK_SIZE` (unset, init refuses, as TCPX
/// would hang). Child processes inherit it. A value the caller set is kept.
pub fn strict_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("NCCL_DYNAMIC_CHUNK_SIZE").is_none() {
            std::env::set_var("NCCL_DYNAMIC_CHUNK_SIZE", "524288");
        }
    });
}

/// The tcpx-emu plugin built by the workspace: `$TCPXEMU_PLUGIN`, else the newest of
/// `target/{release,debug}/libnccl_net_tcpxemu.so`. Missing is a failure, never a skip.
/// Prepares the environment for strict mode ([`strict_env`]) first.
pub fn plugin_path() -> PathBuf {
    strict_env();
    if let Some(p) = std::env::var_os("TCPXEMU_PLUGIN") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "TCPXEMU_PLUGIN={} does not exist; run `cargo build -p tcpx-emu`",
            p.display()
        );
        return p;
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        roots.push(t.into());
    }
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    // The test binary lives in <target>/<profile>/deps.
    if let Some(t) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent()?.parent().map(Path::to_path_buf))
    {
        roots.push(t);
    }
    let newest = roots
        .iter()
        .flat_map(|r| ["release", "debug"].map(|p| r.join(p).join("libnccl_net_tcpxemu.so")))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max();
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "the tcpx-emu plugin (libnccl_net_tcpxemu.so) was not found under target/{{release,debug}}: \
             run `cargo build -p tcpx-emu` first, or point TCPXEMU_PLUGIN at it"
        ),
    }
}

pub fn open(abi: Option<u32>) -> Arc<Plugin> {
    let opts = OpenOptions {
        force_abi: abi,
        ..Default::default()
    };
    match Plugin::open(&PluginSource::Path(plugin_path()), &opts) {
        Ok(p) => p,
        Err(e) => panic!("opening tcpx-emu (ABI {abi:?}): {e}"),
    }
}

/// Listen + connect + accept on device 0, both sides driven concurrently.
pub fn connect_pair(p: &Arc<Plugin>) -> (SendComm, RecvComm) {
    let deadline = Instant::now() + STEP;
    let (mut lc, handle) = p.listen(0, "test receiver").unwrap_or_else(|e| panic!("{e}"));
    let p2 = p.clone();
    let sender = thread::spawn(move || p2.connect(0, handle, "test sender").wait(deadline));
    let rc = lc.accept(deadline).unwrap_or_else(|e| panic!("{e}"));
    let sc = sender
        .join()
        .expect("connect thread panicked")
        .unwrap_or_else(|e| panic!("{e}"));
    (sc, rc)
}

/// A pseudo-random byte source; message `i` is a window of it at an offset depending on `i`, so
/// swapped, shifted or stale messages are detected.
fn pattern() -> &'static [u8] {
    static P: OnceLock<Vec<u8>> = OnceLock::new();
    P.get_or_init(|| {
        let mut rng = tcpx_units::Rng::new(0x9E37_79B9_7F4A_7C15);
        (0..(9 << 20)).map(|_| (rng.next_u64() >> 24) as u8).collect()
    })
}

pub fn message(i: usize, len: usize) -> &'static [u8] {
    let off = (i * 7919) % (1 << 20);
    &pattern()[off..off + len]
}

/// Sends `sizes[i]` bytes of `message(i)` for every i, at most `window` outstanding per side, and
/// checks every received byte. Requests are tested oldest first (TCPX requires FIFO testing).
pub fn transfer(sc: &mut SendComm, rc: &mut RecvComm, sizes: &[usize], window: usize) {
    let slot = sizes.iter().copied().max().unwrap_or(0).max(1);
    let (s0, r0) = (sc.counters(), rc.counters());
    let deadline = Instant::now() + STEP;
    thread::scope(|s| {
        s.spawn(|| {
            let mut arena = vec![0u8; slot * window];
            // SAFETY: the arena outlives the comm's use of it: it is dropped after this closure's
            // last request completed, and deregistered explicitly before that.
            let mr = unsafe { sc.register(arena.as_mut_ptr(), arena.len(), MemType::Host) }.expect("register send");
            let mut q = VecDeque::new();
            let mut next = 0;
            while next < sizes.len() || !q.is_empty() {
                assert!(Instant::now() < deadline, "send side stuck: {:?}", sc.counters());
                if next < sizes.len() && q.len() < window {
                    let at = (next % window) * slot;
                    arena[at..at + sizes[next]].copy_from_slice(message(next, sizes[next]));
                    // SAFETY: the slot is not reused until this request completes (FIFO, window).
                    match unsafe { sc.isend(mr, arena.as_ptr().add(at), sizes[next], 0) } {
                        Ok(Some(r)) => {
                            q.push_back(r);
                            next += 1;
                        }
                        Ok(None) => {}
                        Err(e) => panic!("isend #{next}: {e}"),
                    }
                }
                if let Some(r) = q.pop_front() {
                    match sc.test(r) {
                        Ok(Poll::Pending(r)) => q.push_front(r),
                        Ok(Poll::Done { recv, .. }) => assert!(recv.is_none()),
                        Err(e) => panic!("send test: {e}"),
                    }
                }
            }
            sc.deregister(mr).expect("deregister send");
        });
        s.spawn(|| {
            let mut arena = vec![0u8; slot * window];
            // SAFETY: as on the send side.
            let mr = unsafe { rc.register(arena.as_mut_ptr(), arena.len(), MemType::Host) }.expect("register recv");
            let mut q = VecDeque::new();
            let (mut next, mut done) = (0, 0);
            while done < sizes.len() {
                assert!(Instant::now() < deadline, "recv side stuck: {:?}", rc.counters());
                if next < sizes.len() && q.len() < window {
                    let at = (next % window) * slot;
                    arena[at..at + slot].fill(0xEE);
                    // SAFETY: the slot is only read after this request completes.
                    match unsafe { rc.irecv(mr, arena.as_mut_ptr().add(at), slot, 0) } {
                        Ok(Some(r)) => {
                            q.push_back(r);
                            next += 1;
                        }
                        Ok(None) => {}
                        Err(e) => panic!("irecv #{next}: {e}"),
                    }
                }
                if let Some(r) = q.pop_front() {
                    match rc.test(r) {
                        Ok(Poll::Pending(r)) => q.push_front(r),
                        Ok(Poll::Done { size, recv }) => {
                            let i = done;
                            if let Some(sz) = size {
                                assert_eq!(sz, sizes[i], "reported size of message #{i}");
                            }
                            let at = (i % window) * slot;
                            let got = &arena[at..at + sizes[i]];
                            if got != message(i, sizes[i]) {
                                let first = got.iter().zip(message(i, sizes[i])).position(|(a, b)| a != b);
                                panic!("message #{i} ({} bytes) corrupt, first bad byte at {first:?}", sizes[i]);
                            }
                            rc.consume(recv.expect("receives yield a RecvDone")).expect("consume");
                            done += 1;
                        }
                        Err(e) => panic!("recv test: {e}"),
                    }
                }
            }
            rc.deregister(mr).expect("deregister recv");
        });
    });
    let (s, r) = (sc.counters(), rc.counters());
    let n = sizes.len() as u64;
    assert_eq!((s.posted - s0.posted, s.completed - s0.completed), (n, n));
    assert_eq!(
        (
            r.posted - r0.posted,
            r.completed - r0.completed,
            r.consumed - r0.consumed
        ),
        (n, n, n)
    );
    assert!(s.oldest_outstanding_age.is_none() && r.oldest_outstanding_age.is_none());
}
