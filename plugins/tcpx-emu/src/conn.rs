//! Connection establishment: `listen`, asynchronous `connect`, asynchronous `accept`.
//!
//! A connection is one ctrl socket plus `nsocks` data sockets, each starting with a hello
//! ([`crate::wire`]). The acceptor groups sockets by the random connection id, so sockets of concurrent connections
//! may interleave. A listen comm serves one accept (TCPX contract #11); with `TCPXEMU_STRICT=0`
//! any number.
//!
//! Setup cost model (`TCPXEMU_CONNECT_MS`, `TCPXEMU_FLOW_STEERING_MS`; off by default): TCPX's
//! connect and accept threads sleep 100 ms before each of their nsocks+1 sockets and the accept
//! thread then waits for flow steering (connect.cc:623, :762, :806-811), while the calls return
//! NULL. tcpx-emu's connect waits the same way before each dial, and `accept` returns no
//! comm before (nsocks+1) x `CONNECT_MS` + `FLOW_STEERING_MS` have passed since its first call.
//!
//! Both sides work in the background so that NCCL's `connect`/`accept` never block:
//! * `connect` dials every socket in turn with a non-blocking `connect` and sends its hello,
//!   keeping its state pointer inside the caller's handle (as TCPX does); each call takes the
//!   dial as far as it can without waiting. TCPX runs a thread per connect; tcpx-emu runs none.
//! * the process's acceptor thread ([`crate::accept`]) accepts on every listen comm, reads
//!   hellos side by side (a silent socket delays no other), and queues complete connections;
//!   `accept` pops one or returns NULL. Closing the listen comm flags it and wakes the thread,
//!   which drops it.

use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nccl_net_abi::{NetHandle, NCCL_NET};

use crate::accept::{self, ListenShared};
use crate::comm::{Comm, CommOpts, Connected, UnpackOpts};
use crate::config::{Config, Mode, ZeroCopy};
use crate::contracts;
use crate::error::{NetError, NetResult};
use crate::handle::{connect_state, set_connect_state, ListenInfo};
use crate::wire::{tune_bufs, tune_common, Hello, FLAG_ACKS, KIND_CTRL, KIND_DATA, USER_TIMEOUT_MS};
use crate::worker::Dir;

/// Seconds without a complete connection before `accept` first says what it waits for.
const FIRST_STALL_REPORT_S: u64 = 10;
/// Dial attempts on ECONNREFUSED (TCPX's `CONNECTION_RETRY` default).
const CONNECT_RETRIES: u32 = 3;

/// The unpack options of a new comm: `Some` in unpack mode, with the fixed seed or a fresh one.
pub fn unpack_opts(cfg: &Config) -> Option<UnpackOpts> {
    (cfg.mode == Mode::Unpack).then(|| UnpackOpts {
        max_run: cfg.unpack_max_run,
        seed: cfg.unpack_seed.unwrap_or_else(random_u64),
        pool_bytes: cfg.bounce_pool_mb << 20,
    })
}

/// How comms made under `cfg` behave.
pub fn comm_opts(cfg: &Config) -> CommOpts {
    CommOpts {
        report_sizes: cfg.report_sizes,
        fault: cfg.fault,
        unpack: unpack_opts(cfg),
        strict: cfg.strict,
        mtu: cfg.mtu.unwrap_or(crate::device::DEFAULT_MTU),
        threads: crate::threads::ThreadOpts::from_config(cfg),
    }
}

/// The setup cost model's time for one side of a connection of `nsocks` data sockets.
pub fn setup_delay(cfg: &Config, nsocks: usize, accept: bool) -> Duration {
    let per_socket = cfg.connect_ms.saturating_mul(nsocks as u64 + 1);
    let fs = if accept { cfg.flow_steering_ms } else { 0 };
    Duration::from_millis(per_socket.saturating_add(fs))
}

/// A random 64-bit value (std's per-process random hash keys plus a counter; no extra crate).
pub fn random_u64() -> u64 {
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn new_socket(addr: &SocketAddr) -> std::io::Result<OwnedFd> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket creation; the fd is owned right away.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds `fd` to the sending device's address (port chosen at connect, so that the 4-tuple, not
/// the address alone, bounds the ports). TCPX does the same (`connectAddress` binds each socket
/// to its device's address): the source address names the NIC the connection was opened for,
/// while the route (the destination's subnet) still picks the NIC the packets leave on.
fn bind_source(fd: &OwnedFd, local: SocketAddr) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid int option on our own descriptor.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    let (ss, len) = sockaddr(&local);
    // SAFETY: `ss` holds a valid address of `len` bytes.
    if unsafe { libc::bind(fd.as_raw_fd(), (&raw const ss).cast(), len) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("binding the source address {local}: {e}"),
        ));
    }
    Ok(())
}

fn bind_listener(addr: SocketAddr, sockbuf: usize) -> std::io::Result<TcpListener> {
    let fd = new_socket(&addr)?;
    // Accepted data sockets inherit the listener's buffer sizes (set before any SYN arrives).
    tune_bufs(fd.as_raw_fd(), sockbuf);
    let (ss, len) = sockaddr(&addr);
    // SAFETY: valid address and our own descriptor.
    let r = unsafe { libc::bind(fd.as_raw_fd(), (&raw const ss).cast(), len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::listen(fd.as_raw_fd(), 1024) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}

// ------------------------------------------------------------------------------------------------
// connect
// ------------------------------------------------------------------------------------------------

/// The connector's state, owned through the pointer stored in the caller's handle: the
/// connection's sockets dialled so far, one at a time (ctrl first), each a non-blocking
/// `connect` that later calls poll. No thread: tcpx-perf polls every connect of a setup from a
/// thread or two, where a thread per connect (TCPX's model) cost 512 ranks on one kernel
/// thousands of short-lived threads against `kernel.pid_max`.
struct Connecting {
    info: ListenInfo,
    local: Option<SocketAddr>,
    sockbuf: usize,
    zerocopy: ZeroCopy,
    /// The setup cost model's wait before each socket (zero by default).
    per_socket: Duration,
    conn_id: u64,
    /// The ctrl socket, then the data sockets, as each is up and has sent its hello.
    done: Vec<TcpStream>,
    /// The socket being dialled, and when its dial began.
    dialling: Option<(TcpStream, Instant)>,
    /// Dials of the current socket so far (a refused one is tried again).
    attempts: u32,
    /// No dial starts before this (the cost model's sleep, or a refused dial's pause).
    not_before: Instant,
}

/// How a non-blocking dial stands.
enum Dial {
    Pending,
    Up,
    Refused,
}

impl Connecting {
    fn new(info: ListenInfo, local: Option<SocketAddr>, cfg: &Config) -> Connecting {
        // Staged zero-copy needs staging, i.e. unpack mode; otherwise no chunk would be spliced
        // and the acknowledgements would be pure overhead.
        let zerocopy = match cfg.zerocopy {
            ZeroCopy::Staged if cfg.mode != Mode::Unpack => ZeroCopy::Off,
            z => z,
        };
        let per_socket = Duration::from_millis(cfg.connect_ms);
        Connecting {
            info,
            local,
            sockbuf: cfg.sockbuf,
            zerocopy,
            per_socket,
            conn_id: random_u64(),
            done: Vec::with_capacity(info.nsocks + 1),
            dialling: None,
            attempts: 0,
            not_before: Instant::now() + per_socket,
        }
    }

    /// One step: the connection once every socket is up, else `None` (call again).
    fn poll(&mut self) -> std::io::Result<Option<Connected>> {
        loop {
            if self.done.len() == self.info.nsocks + 1 {
                let mut socks = std::mem::take(&mut self.done).into_iter();
                let ctrl = socks.next().expect("the ctrl socket is first");
                return Ok(Some(Connected {
                    ctrl,
                    data: socks.collect(),
                    peer: self.info.addr,
                    chunk_size: self.info.chunk_size,
                    zerocopy: self.zerocopy,
                }));
            }
            let Some((mut sock, began)) = self.dialling.take() else {
                if Instant::now() < self.not_before {
                    return Ok(None);
                }
                self.attempts += 1;
                let sockbuf = if self.done.is_empty() { 0 } else { self.sockbuf };
                match start_dial(self.info.addr, self.local, sockbuf)? {
                    Some(sock) => self.dialling = Some((sock, Instant::now())),
                    None => self.refused()?,
                }
                continue;
            };
            match dial_outcome(&sock, began)? {
                Dial::Pending => {
                    self.dialling = Some((sock, began));
                    return Ok(None);
                }
                Dial::Refused => self.refused()?,
                Dial::Up => {
                    let index = self.done.len();
                    let (kind, i) = if index == 0 {
                        (KIND_CTRL, 0)
                    } else {
                        (KIND_DATA, index - 1)
                    };
                    sock.set_nonblocking(false)?;
                    sock.write_all(&self.hello(kind, i as u8).encode())?;
                    self.done.push(sock);
                    self.attempts = 0;
                    self.not_before = Instant::now() + self.per_socket;
                }
            }
        }
    }

    /// The current socket's dial was refused: another after a pause, [`CONNECT_RETRIES`] in all.
    fn refused(&mut self) -> std::io::Result<()> {
        if self.attempts >= CONNECT_RETRIES {
            return Err(std::io::Error::from_raw_os_error(libc::ECONNREFUSED));
        }
        self.not_before = Instant::now() + Duration::from_millis(100);
        Ok(())
    }

    fn hello(&self, kind: u8, index: u8) -> Hello {
        Hello {
            kind,
            index,
            nsocks: self.info.nsocks as u8,
            flags: if self.zerocopy == ZeroCopy::Off { 0 } else { FLAG_ACKS },
            chunk_size: self.info.chunk_size as u32,
            token: self.info.token,
            conn_id: self.conn_id,
        }
    }
}

/// Starts a non-blocking dial of `addr` from `local`'s address where its family matches, with
/// buffer sizes set before the SYN; `None` when the dial was refused at once (loopback: the
/// error is then `connect`'s own, no longer the socket's to read).
fn start_dial(addr: SocketAddr, local: Option<SocketAddr>, sockbuf: usize) -> std::io::Result<Option<TcpStream>> {
    let fd = new_socket(&addr)?;
    if let Some(local) = local.filter(|l| l.is_ipv4() == addr.is_ipv4()) {
        bind_source(&fd, local)?;
    }
    tune_bufs(fd.as_raw_fd(), sockbuf);
    tune_common(fd.as_raw_fd());
    let sock = TcpStream::from(fd);
    sock.set_nonblocking(true)?;
    let (ss, len) = sockaddr(&addr);
    // SAFETY: `ss` holds a valid address of `len` bytes.
    if unsafe { libc::connect(sock.as_raw_fd(), (&raw const ss).cast(), len) } != 0 {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINPROGRESS | libc::EINTR) => {}
            Some(libc::ECONNREFUSED) => return Ok(None),
            _ => return Err(e),
        }
    }
    Ok(Some(sock))
}

/// Where a dial begun at `began` stands; an error past [`USER_TIMEOUT_MS`] without an answer.
fn dial_outcome(sock: &TcpStream, began: Instant) -> std::io::Result<Dial> {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd; zero timeout.
    let ready = unsafe { libc::poll(&raw mut pfd, 1, 0) } > 0;
    if !ready {
        if began.elapsed() > Duration::from_millis(USER_TIMEOUT_MS as u64) {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                format!(
                    "no answer to the connection request within {} s",
                    USER_TIMEOUT_MS / 1000
                ),
            ));
        }
        return Ok(Dial::Pending);
    }
    match sock.take_error()? {
        None => Ok(Dial::Up),
        Some(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Dial::Refused),
        Some(e) => Err(e),
    }
}

/// Non-blocking connect. The first call starts the work and stores its state in `handle`; every
/// call returns `Ok(None)` until the connection is up, then the send comm. The handle buffer must
/// stay the same between calls (NCCL's contract). `local`: the sending device's address, which
/// every socket of the comm binds (port 0), or None to leave the source to the kernel.
pub fn connect(handle: &mut NetHandle, cfg: &Config, local: Option<SocketAddr>) -> NetResult<Option<Box<Comm>>> {
    let ptr = if let Some(ptr) = connect_state(handle) {
        ptr
    } else {
        let info = ListenInfo::decode(handle)?;
        let ptr = Box::into_raw(Box::new(Connecting::new(info, local, cfg))) as usize;
        set_connect_state(handle, ptr);
        ptr
    };
    // SAFETY: the pointer was stored by the branch above (checked by its XOR key) and is freed
    // only below, where it is also cleared from the handle.
    let state = unsafe { &mut *(ptr as *mut Connecting) };
    let polled = state.poll();
    if let Ok(None) = polled {
        return Ok(None);
    }
    set_connect_state(handle, 0);
    // SAFETY: reclaiming the Box leaked above; the handle no longer refers to it.
    let state = unsafe { Box::from_raw(ptr as *mut Connecting) };
    let peer = state.info.addr;
    let conn = polled
        .map_err(|e| NetError::from_io(&e, format_args!("connecting to {peer}")))?
        .ok_or_else(|| NetError::internal("connect finished without a connection"))?;
    Comm::new(Dir::Send, conn, comm_opts(cfg)).map(Some)
}

// ------------------------------------------------------------------------------------------------
// listen / accept
// ------------------------------------------------------------------------------------------------

/// A listening endpoint; hands out receive comms.
pub struct ListenComm {
    shared: Arc<ListenShared>,
    cfg: Config,
    /// When `accept` was first called (the setup cost model counts from there).
    first_accept: OnceLock<Instant>,
    /// An accept returned a comm (strict mode refuses another: contract #11).
    accepted: AtomicBool,
    /// Seconds of waiting after which `accept` next says what it waits for (doubling).
    next_stall_report: AtomicU64,
    /// This process's listen comms before this one (the `accept` fault's `AFTER` counts them).
    seq: u64,
}

/// Listen comms this process has opened.
static LISTENS: AtomicU64 = AtomicU64::new(0);

impl ListenComm {
    /// Binds an ephemeral port on `ip` and returns the comm and the handle to ship to the peer.
    pub fn bind(ip: IpAddr, scope_id: u32, cfg: &Config) -> NetResult<(Box<ListenComm>, NetHandle)> {
        let addr = match ip {
            IpAddr::V6(v6) => SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, scope_id)),
            v4 @ IpAddr::V4(_) => SocketAddr::new(v4, 0),
        };
        let listener =
            bind_listener(addr, cfg.sockbuf).map_err(|e| NetError::system(format!("listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| NetError::system(format!("getsockname: {e}")))?;
        let info = ListenInfo {
            addr: local,
            nsocks: cfg.nsocks,
            chunk_size: cfg.chunk_size,
            token: random_u64(),
        };
        let mut handle = [0u8; nccl_net_abi::NET_HANDLE_MAXSIZE];
        info.encode(&mut handle);
        let shared = Arc::new(ListenShared::new(listener, info, cfg.hello_timeout));
        accept::register(Arc::clone(&shared))?;
        let comm = Box::new(ListenComm {
            shared,
            cfg: cfg.clone(),
            first_accept: OnceLock::new(),
            accepted: AtomicBool::new(false),
            next_stall_report: AtomicU64::new(FIRST_STALL_REPORT_S),
            seq: LISTENS.fetch_add(1, Ordering::Relaxed),
        });
        Ok((comm, handle))
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.info.addr
    }

    /// Non-blocking accept: `Ok(None)` until a complete connection has arrived (and the setup
    /// cost model's time has passed). Strict mode refuses a call after one returned a comm.
    pub fn accept(&self) -> NetResult<Option<Box<Comm>>> {
        if let Some(e) = crate::fault::accept_refused(self.cfg.fault, self.seq) {
            return Err(e);
        }
        if self.cfg.strict && self.accepted.load(Ordering::Acquire) {
            return Err(contracts::second_accept());
        }
        let first = *self.first_accept.get_or_init(Instant::now);
        if first.elapsed() < setup_delay(&self.cfg, self.shared.info.nsocks, true) {
            return Ok(None);
        }
        let next = self
            .shared
            .ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        match next {
            Some(conn) => {
                let comm = Comm::new(Dir::Recv, conn, comm_opts(&self.cfg))?;
                self.accepted.store(true, Ordering::Release);
                Ok(Some(comm))
            }
            None => {
                if let Some(e) = self
                    .shared
                    .error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
                {
                    Err(NetError {
                        msg: format!("{}; waiting for {}", e.msg, self.shared.waiting_for()),
                        ..e
                    })
                } else {
                    self.report_stall(first.elapsed());
                    Ok(None)
                }
            }
        }
    }

    /// One line: what this listen comm still waits for and the connections it rejected (for a
    /// setup that does not finish).
    pub fn waiting_for(&self) -> String {
        self.shared.waiting_for()
    }

    /// After 10 s without a complete connection, then 20, 40, ...: a WARN saying what is missing
    /// and whom the listener turned away (the caller's setup deadline may come first; each
    /// rejection was logged as it happened).
    fn report_stall(&self, waited: Duration) {
        let due = self.next_stall_report.load(Ordering::Relaxed);
        if waited.as_secs() >= due
            && self
                .next_stall_report
                .compare_exchange(due, due.saturating_mul(2), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            crate::warn!(
                NCCL_NET,
                "accept: no complete connection after {} s: waiting for {}",
                waited.as_secs(),
                self.shared.waiting_for()
            );
        }
    }
}

impl std::fmt::Debug for ListenComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenComm")
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

impl Drop for ListenComm {
    /// Refuses new connections at once (the listening socket is shut down) and has the acceptor
    /// thread drop this listen comm and the sockets it gathered for it.
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        // SAFETY: shutdown on our own descriptor.
        unsafe { libc::shutdown(self.shared.listener.as_raw_fd(), libc::SHUT_RDWR) };
        accept::wake();
    }
}
