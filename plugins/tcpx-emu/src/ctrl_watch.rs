//! Which receive comms' ctrl sockets have something to read, without a system call per `test`.
//!
//! A receive comm learns a request's size from the sender's control message, so until that
//! message arrives every `test` of the receive used to try a non-blocking `recv` on the ctrl
//! socket. A caller that polls (NCCL's proxy thread, tcpx-perf's progress loop) tests its
//! unmatched receives many times per message: on the 4 x 2 x 2 rig, 22 empty `recv`s per
//! control message (docs/runs/vm-20261128-issue43), about a tenth of the endpoint threads' CPU.
//!
//! One thread per process (`tcpxemu-ctrl`, started by the first receive comm) keeps every
//! receive comm's ctrl socket in an edge-triggered epoll set and raises the comm's flag when
//! the kernel signals new bytes, a hang-up or an error. `test` reads the socket only while the
//! flag is up; it lowers the flag *before* reading, and reads until `recv` has nothing more
//! (or raises the flag again when it stops early), so a message that arrives between its last
//! read and the lowering is never missed: its arrival raises the flag anew. Without the
//! thread (it could not start) every comm's flag stays up and `test` reads as before.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Events taken per `epoll_wait`.
const EVENTS: usize = 128;

/// The process's watcher: its epoll set and the flags of the sockets in it, by key.
struct Watcher {
    epfd: OwnedFd,
    flags: Mutex<HashMap<u64, Arc<AtomicBool>>>,
}

static WATCHER: OnceLock<Option<Arc<Watcher>>> = OnceLock::new();
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// Whether the process's watcher thread runs (started by the first receive comm).
pub fn running() -> bool {
    matches!(WATCHER.get(), Some(Some(_)))
}

fn watcher() -> Option<&'static Arc<Watcher>> {
    WATCHER
        .get_or_init(|| {
            // SAFETY: plain descriptor creation; owned right away.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                crate::warn!(
                    nccl_net_abi::NCCL_NET,
                    "ctrl watcher: epoll_create1: {}; receives poll their ctrl sockets",
                    std::io::Error::last_os_error()
                );
                return None;
            }
            // SAFETY: `fd` is a new descriptor nobody else owns.
            let w = Arc::new(Watcher {
                epfd: unsafe { OwnedFd::from_raw_fd(fd) },
                flags: Mutex::new(HashMap::new()),
            });
            let me = Arc::clone(&w);
            match std::thread::Builder::new()
                .name("tcpxemu-ctrl".into())
                .spawn(move || serve(&me))
            {
                Ok(_) => Some(w),
                Err(e) => {
                    crate::warn!(
                        nccl_net_abi::NCCL_NET,
                        "ctrl watcher: cannot start its thread: {e}; receives poll their ctrl sockets"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// The watcher thread: raises the flag of every socket the kernel reports.
fn serve(w: &Watcher) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        // SAFETY: `events` is a valid array of EVENTS entries owned by this frame.
        let n = unsafe { libc::epoll_wait(w.epfd.as_raw_fd(), events.as_mut_ptr(), EVENTS as i32, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Cannot happen with a valid epoll descriptor; should it, every flag goes up for
            // good and `test` falls back to reading.
            crate::warn!(
                nccl_net_abi::NCCL_NET,
                "ctrl watcher: epoll_wait: {}; receives poll their ctrl sockets from now on",
                std::io::Error::last_os_error()
            );
            for f in w
                .flags
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
            {
                f.store(true, Ordering::Release);
            }
            BROKEN.store(true, Ordering::Release);
            return;
        }
        let flags = w.flags.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ev in &events[..n as usize] {
            let key = ev.u64;
            if let Some(f) = flags.get(&key) {
                f.store(true, Ordering::Release);
            }
        }
    }
}

/// Set when the watcher thread gave up: every watch reads as ready.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// One receive comm's ctrl socket in the watcher's set; leaves it when dropped (before the
/// socket closes: declare it before the socket).
pub struct Watch {
    key: u64,
    fd: RawFd,
    /// Up: the socket may have something to read. Always up without a watcher.
    flag: Arc<AtomicBool>,
    watched: bool,
}

impl Watch {
    /// Watches `fd` (a ctrl socket). The flag starts up: the first `test` reads.
    pub fn new(fd: RawFd) -> Watch {
        let flag = Arc::new(AtomicBool::new(true));
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        let mut watch = Watch {
            key,
            fd,
            flag,
            watched: false,
        };
        let Some(w) = watcher() else { return watch };
        w.flags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, Arc::clone(&watch.flag));
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: key,
        };
        // SAFETY: both descriptors are valid; `ev` is a valid event.
        if unsafe { libc::epoll_ctl(w.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) } == 0 {
            watch.watched = true;
        } else {
            crate::warn!(
                nccl_net_abi::NCCL_NET,
                "ctrl watcher: epoll_ctl(ADD): {}; this comm polls its ctrl socket",
                std::io::Error::last_os_error()
            );
            w.flags
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key);
        }
        watch
    }

    /// Lowers the flag and says whether it was up: the caller may read now, and must read until
    /// the socket has nothing more or call [`Watch::raise`] when it stops before.
    pub fn take(&self) -> bool {
        !self.watched || BROKEN.load(Ordering::Acquire) || self.flag.swap(false, Ordering::AcqRel)
    }

    /// The caller stopped reading with bytes possibly left: the next `take` reads again.
    pub fn raise(&self) {
        self.flag.store(true, Ordering::Release);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.watched {
            return;
        }
        if let Some(w) = watcher() {
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: as in `new`; the socket is still open (the comm closes it after this).
            unsafe { libc::epoll_ctl(w.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, self.fd, &raw mut ev) };
            w.flags
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&self.key);
        }
    }
}
