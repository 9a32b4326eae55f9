//! The process's acceptor thread: for every open listen comm it accepts sockets and reads their
//! hellos side by side, each with its own deadline, so a connection that never says hello (a port scanner, a stranger, a
//! peer stuck mid-handshake) delays nobody else; complete connections (ctrl + data sockets of one
//! connection id) are queued for `accept`. Every connection turned away is logged at WARN and
//! remembered, so a setup that does not finish can say what it waited for and whom it refused
//! ([`ListenShared::waiting_for`]).
//!
//! One thread serves every listen comm of the process (one `poll` over all listeners and the
//! sockets still owing their hello), started by the first `listen`: a thread per listen comm
//! cost a process with hundreds of peers hundreds of threads during setup (tcpx-perf opens one
//! listen comm per incoming comm before the first accept), on top of `kernel.pid_max`'s
//! system-wide budget. A listen comm joins through [`register`] and leaves by setting `closing`
//! and waking the thread ([`wake`]), which then drops its state (its sockets close with it).

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nccl_net_abi::NCCL_NET;

use crate::comm::Connected;
use crate::config::ZeroCopy;
use crate::error::{NetError, NetResult};
use crate::handle::ListenInfo;
use crate::wire::{tune_common, Hello, FLAG_ACKS, HELLO_LEN, KIND_CTRL, KIND_DATA};

/// Sockets waiting for their hello at once; beyond this the oldest is dropped.
const MAX_GREETING: usize = 256;
/// Rejected connections remembered for the diagnosis (all are counted and logged).
const MAX_REJECTED: usize = 8;
/// The longest the acceptor sleeps in `poll` (closing the listener wakes it sooner).
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Connections turned away by one listener.
#[derive(Default)]
struct Rejected {
    total: usize,
    recent: Vec<String>,
}

/// What a listen comm and the acceptor thread share.
pub struct ListenShared {
    pub listener: TcpListener,
    pub info: ListenInfo,
    /// See [`crate::config::Config::hello_timeout`].
    hello_timeout: Duration,
    pub closing: AtomicBool,
    pub ready: Mutex<VecDeque<Connected>>,
    pub error: Mutex<Option<NetError>>,
    rejected: Mutex<Rejected>,
    /// The connections under way and what each still lacks (one line; empty: none).
    partial: Mutex<String>,
}

impl ListenShared {
    pub fn new(listener: TcpListener, info: ListenInfo, hello_timeout: Duration) -> ListenShared {
        ListenShared {
            listener,
            info,
            hello_timeout,
            closing: AtomicBool::new(false),
            ready: Mutex::new(VecDeque::new()),
            error: Mutex::new(None),
            rejected: Mutex::new(Rejected::default()),
            partial: Mutex::new(String::new()),
        }
    }

    fn reject(&self, from: SocketAddr, why: &str) {
        crate::warn!(
            NCCL_NET,
            "rejected a connection from {from} on {}: {why}",
            self.info.addr
        );
        let mut r = self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.total += 1;
        if r.recent.len() < MAX_REJECTED {
            r.recent.push(format!("{from} ({why})"));
        }
    }

    fn set_error(&self, e: NetError) {
        *self.error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
    }

    /// One line for a setup that does not finish: what this listener still waits for, the
    /// connections under way, and the connections it rejected.
    pub fn waiting_for(&self) -> String {
        let partial = self
            .partial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let rejected = match &*self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            r if r.total == 0 => "no connection rejected".to_string(),
            r => format!(
                "{} connection(s) rejected: {}{}",
                r.total,
                r.recent.join(", "),
                if r.total > r.recent.len() { ", ..." } else { "" }
            ),
        };
        format!(
            "a ctrl socket and {} data socket(s) with listener token {:016x} on {} ({}); {rejected}",
            self.info.nsocks,
            self.info.token,
            self.info.addr,
            if partial.is_empty() {
                "none has arrived".to_string()
            } else {
                partial
            }
        )
    }
}

/// A connection's sockets gathered so far.
#[derive(Default)]
struct Partial {
    ctrl: Option<TcpStream>,
    data: Vec<Option<TcpStream>>,
    /// The ctrl hello's flags.
    flags: u8,
}

/// A fresh socket whose hello is being read.
struct Greeting {
    sock: TcpStream,
    from: SocketAddr,
    buf: [u8; HELLO_LEN],
    got: usize,
    deadline: Instant,
}

enum Heard {
    Nothing,
    Hello(Hello),
    Rejected(String),
}

impl Greeting {
    /// Reads what has arrived (the socket is non-blocking).
    fn read(&mut self) -> Heard {
        loop {
            match self.sock.read(&mut self.buf[self.got..]) {
                Ok(0) => return Heard::Rejected(format!("closed after {} of the {HELLO_LEN} hello bytes", self.got)),
                Ok(n) => {
                    self.got += n;
                    if self.got == HELLO_LEN {
                        return match Hello::decode(&self.buf) {
                            Some(h) => Heard::Hello(h),
                            None => Heard::Rejected("not a tcpx-emu hello (magic or version)".into()),
                        };
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Heard::Nothing,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Heard::Rejected(format!("{e} before its hello")),
            }
        }
    }
}

/// The acceptor thread's shared half: listen comms waiting to be picked up, and the eventfd that
/// wakes its `poll`.
struct Acceptor {
    wake: OwnedFd,
    joining: Mutex<Vec<Arc<ListenShared>>>,
}

static ACCEPTOR: Mutex<Option<Arc<Acceptor>>> = Mutex::new(None);

/// The acceptor, started on first use.
fn acceptor() -> NetResult<Arc<Acceptor>> {
    let mut slot = ACCEPTOR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(a) = slot.as_ref() {
        return Ok(Arc::clone(a));
    }
    // SAFETY: plain descriptor creation, owned at once.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(NetError::system(format!(
            "acceptor: eventfd: {}",
            std::io::Error::last_os_error()
        )));
    }
    let a = Arc::new(Acceptor {
        // SAFETY: fresh descriptor nobody else owns.
        wake: unsafe { OwnedFd::from_raw_fd(fd) },
        joining: Mutex::new(Vec::new()),
    });
    let me = Arc::clone(&a);
    std::thread::Builder::new()
        .name("tcpxemu-accept".to_owned())
        .spawn(move || serve(&me))
        .map_err(|e| NetError::system(format!("spawning the acceptor thread: {e}")))?;
    *slot = Some(Arc::clone(&a));
    Ok(a)
}

impl Acceptor {
    fn poke(&self) {
        let one: u64 = 1;
        // SAFETY: 8 readable bytes into our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

/// Hands a new listen comm to the acceptor thread.
pub fn register(ls: Arc<ListenShared>) -> NetResult<()> {
    ls.listener
        .set_nonblocking(true)
        .map_err(|e| NetError::system(format!("listener {}: {e}", ls.info.addr)))?;
    let a = acceptor()?;
    a.joining
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(ls);
    a.poke();
    Ok(())
}

/// Wakes the acceptor thread (a listen comm set `closing`: it is dropped at once).
pub fn wake() {
    if let Some(a) = ACCEPTOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
    {
        a.poke();
    }
}

/// One listen comm as the acceptor thread serves it.
struct Listening {
    ls: Arc<ListenShared>,
    partial: HashMap<u64, Partial>,
    greeting: Vec<Greeting>,
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// The acceptor thread: one `poll` over every listener and every socket owing its hello.
fn serve(a: &Acceptor) {
    let mut all: Vec<Listening> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        all.extend(
            std::mem::take(&mut *a.joining.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
                .into_iter()
                .map(|ls| Listening {
                    ls,
                    partial: HashMap::new(),
                    greeting: Vec::new(),
                }),
        );
        all.retain(|l| !l.ls.closing.load(Ordering::Acquire));
        let now = Instant::now();
        let wait = all
            .iter()
            .flat_map(|l| l.greeting.iter())
            .map(|g| g.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(IDLE_POLL)
            .min(IDLE_POLL);
        fds.clear();
        fds.push(pollfd(a.wake.as_raw_fd()));
        for l in &all {
            fds.push(pollfd(l.ls.listener.as_raw_fd()));
            fds.extend(l.greeting.iter().map(|g| pollfd(g.sock.as_raw_fd())));
        }
        // SAFETY: `fds` is a valid array of pollfd of the given length, owned by this frame.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait.as_millis() as i32 + 1) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                for l in all.drain(..) {
                    l.ls.set_error(NetError::system(format!("poll on {}: {e}", l.ls.info.addr)));
                }
                std::thread::sleep(IDLE_POLL);
            }
            continue;
        }
        if fds[0].revents != 0 {
            let mut buf = 0u64;
            // SAFETY: 8 writable bytes from our non-blocking eventfd.
            unsafe { libc::read(a.wake.as_raw_fd(), (&raw mut buf).cast(), 8) };
        }
        let mut at = 1;
        all.retain_mut(|l| {
            let n = 1 + l.greeting.len();
            let keep = l.step(&fds[at..at + n]);
            at += n;
            keep
        });
    }
}

impl Listening {
    /// After a `poll`: `fds` are the listener's entry, then its greeting sockets' in order.
    /// False when the listener failed for good (or closed): the thread drops it.
    fn step(&mut self, fds: &[libc::pollfd]) -> bool {
        let ls = &*self.ls;
        if ls.closing.load(Ordering::Acquire) {
            return false;
        }
        // Hellos first, then new sockets.
        let now = Instant::now();
        let mut waiting = Vec::with_capacity(self.greeting.len());
        for (mut g, fd) in self.greeting.drain(..).zip(&fds[1..]) {
            let heard = if fd.revents != 0 { g.read() } else { Heard::Nothing };
            match heard {
                Heard::Nothing if now >= g.deadline => ls.reject(
                    g.from,
                    &format!(
                        "no hello within {} s ({} of {HELLO_LEN} bytes)",
                        ls.hello_timeout.as_secs_f64(),
                        g.got
                    ),
                ),
                Heard::Nothing => waiting.push(g),
                Heard::Rejected(why) => ls.reject(g.from, &why),
                Heard::Hello(h) => admit(ls, &mut self.partial, g.sock, g.from, &h),
            }
        }
        self.greeting = waiting;
        if fds[0].revents != 0 && !accept_new(ls, &mut self.greeting) {
            return false;
        }
        *ls.partial.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = describe(&self.partial, ls.info.nsocks);
        true
    }
}

/// Accepts every socket the listener has ready; false when the listener failed for good.
fn accept_new(ls: &ListenShared, greeting: &mut Vec<Greeting>) -> bool {
    loop {
        match ls.listener.accept() {
            Ok((sock, from)) => {
                tune_common(sock.as_raw_fd());
                if let Err(e) = sock.set_nonblocking(true) {
                    ls.reject(from, &format!("{e}"));
                    continue;
                }
                if greeting.len() >= MAX_GREETING {
                    let old = greeting.remove(0);
                    ls.reject(old.from, "dropped: too many connections waiting for their hello");
                }
                greeting.push(Greeting {
                    sock,
                    from,
                    buf: [0; HELLO_LEN],
                    got: 0,
                    deadline: Instant::now() + ls.hello_timeout,
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR | libc::ECONNABORTED) => {}
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    std::thread::sleep(Duration::from_millis(10));
                    return true;
                }
                _ => {
                    if !ls.closing.load(Ordering::Acquire) {
                        ls.set_error(NetError::system(format!("accept on {}: {e}", ls.info.addr)));
                    }
                    return false;
                }
            },
        }
    }
}

/// Files a socket whose hello arrived under its connection; queues the connection once complete.
fn admit(ls: &ListenShared, partial: &mut HashMap<u64, Partial>, sock: TcpStream, from: SocketAddr, h: &Hello) {
    let info = &ls.info;
    if h.token != info.token {
        return ls.reject(from, "foreign hello (another listener's token)");
    }
    if usize::from(h.nsocks) != info.nsocks || h.chunk_size as usize != info.chunk_size {
        return ls.reject(from, "hello with other sockets per connection or chunk size");
    }
    if !(h.kind == KIND_CTRL || (h.kind == KIND_DATA && usize::from(h.index) < info.nsocks)) {
        return ls.reject(from, "hello of an unknown socket kind or index");
    }
    if let Err(e) = sock.set_nonblocking(false) {
        return ls.reject(from, &format!("{e}"));
    }
    let p = partial.entry(h.conn_id).or_default();
    if p.data.is_empty() {
        p.data.resize_with(info.nsocks, || None);
    }
    if h.kind == KIND_CTRL {
        p.ctrl = Some(sock);
        p.flags = h.flags;
    } else {
        p.data[usize::from(h.index)] = Some(sock);
    }
    if !(p.ctrl.is_some() && p.data.iter().all(Option::is_some)) {
        return;
    }
    let Some(p) = partial.remove(&h.conn_id) else {
        return;
    };
    // The receiver only needs to know whether to acknowledge.
    let zerocopy = if p.flags & FLAG_ACKS != 0 {
        ZeroCopy::All
    } else {
        ZeroCopy::Off
    };
    let (Some(ctrl), data) = (p.ctrl, p.data.into_iter().flatten().collect::<Vec<_>>()) else {
        return;
    };
    let peer = ctrl.peer_addr().unwrap_or(from);
    ls.ready
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push_back(Connected {
            ctrl,
            data,
            peer,
            chunk_size: info.chunk_size,
            zerocopy,
        });
}

/// The connections under way, for [`ListenShared::waiting_for`].
fn describe(partial: &HashMap<u64, Partial>, nsocks: usize) -> String {
    partial
        .iter()
        .map(|(id, p)| {
            format!(
                "connection {id:016x} has {}{} of {nsocks} data sockets",
                if p.ctrl.is_some() {
                    "its ctrl socket and "
                } else {
                    "no ctrl socket and "
                },
                p.data.iter().filter(|d| d.is_some()).count()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
