//! The shared model's event loops (`TCPXEMU_THREADS=shared`, or `auto` in a process with many
//! data sockets; see [`crate::threads`]): a fixed set of threads per process, each serving the
//! data sockets of many comms with non-blocking `send`/`recv` and one epoll set.
//!
//! Each socket keeps what its helper thread would keep: its own [`Chunks`] cursor and job cursor
//! over the comm's ring (`Shared::fetch_job` without blocking), so striping, the `pending`
//! counters, `credit` and `report` are the same code as the per-socket path. A socket is armed
//! in the epoll set only after its loop found work the kernel could not take or give at once
//! (one-shot: re-armed after every event; an inline move may finish that work first, and the
//! event then finds nothing to do), so idle sockets cost nothing, and a dead peer of an idle
//! socket wakes nobody. A socket moves at most [`TURN_BYTES`] per turn before the loop serves
//! the others.
//!
//! Commands reach a loop through its inbox and an eventfd: a new socket, a kick (a comm published
//! jobs: its idle sockets fetch them), and a removal, which the loop confirms once it dropped
//! the comm's sockets; [`detach`] (the comm's drop) waits for that confirmation, with a deadline,
//! so a closed comm's buffers are never touched again.
//!
//! Inline moves: a publication first tries to move the new chunks on the publishing thread
//! (the caller's `test`, where TCPX moves data too), with the same non-blocking calls, up to
//! [`TURN_BYTES`] per socket; only a socket left with work (the kernel would block, the turn
//! ran out, or its loop held its cursor at that moment) kicks its loop, unless the loop already
//! armed that socket (its event will come). A small message then
//! costs its `send` or `recv` and nothing else: no eventfd write, no loop wake-up, no
//! `epoll_wait`, no `epoll_ctl` (at 16 x 8 x 4 a 1 MiB fullmesh moves 8 KiB messages, and the
//! kick and the loop's turn cost more CPU than the bytes). Each socket's [`Cursor`] sits behind
//! its own mutex for that: the loop takes it for a turn, a publication only tries it (and
//! kicks the loop when it finds it held).
//!
//! Only host-memory chunks come here: CUDA and zero-copy comms, and the `stall`/`slow` faults,
//! stay on per-socket threads.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::io::{moved, peer_closed, write_zero};
use super::{credit, report, Chunk, Chunks, Dir, Shared, Step};
use crate::error::{NetError, NetResult};

/// Bytes one socket moves in a turn before the loop serves the other ready sockets.
pub const TURN_BYTES: usize = 1 << 20;
/// How long a closing comm waits for its loops to let go of its sockets.
pub const DETACH_LIMIT: Duration = Duration::from_secs(10);
/// The epoll key of a loop's eventfd (sockets use their slot number).
const WAKE: u64 = u64::MAX;
/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;

/// A removal's confirmation: loops still holding the comm's sockets.
struct Done {
    left: Mutex<usize>,
    cv: Condvar,
}

/// What a data socket's mover keeps between turns, whoever moves (its loop or an inline
/// publication): the cursor over the comm's chunks and the chunk in progress.
pub(super) struct Cursor {
    chunks: Chunks,
    /// The socket's cursor into the comm's job ring.
    next: u64,
    /// The chunk in progress and the bytes of it moved so far.
    cur: Option<(Chunk, usize)>,
    /// Failed: the comm's error is set, the socket moves nothing more.
    dead: bool,
    /// The loop left work and armed the socket (set under this lock before it arms, cleared
    /// when it takes the next turn): its event will come, so a publication need not kick.
    armed: bool,
}

/// How a turn of moving bytes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Nothing left to move (idle until the next publication).
    Idle,
    /// Work left: the kernel would block, or the turn's bytes ran out.
    Left,
    /// The socket failed (reported; the cursor is dead).
    Failed,
}

/// Who takes a socket's turn: its loop, or the thread that published (inline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mover {
    Loop,
    Publisher,
}

enum Cmd {
    Add { sh: Arc<Shared>, idx: usize, comm: u64 },
    Kick(u64),
    Remove(u64, Arc<Done>),
}

/// One event-loop thread's shared half.
pub struct EventLoop {
    epfd: OwnedFd,
    wake: OwnedFd,
    inbox: Mutex<Vec<Cmd>>,
}

/// A comm's place in the event loops (in [`Shared::looped`]).
pub struct Looped {
    id: u64,
    /// The loops serving at least one of its sockets.
    loops: Vec<Arc<EventLoop>>,
    /// Per data socket, its mover's state.
    cursors: Vec<Mutex<Cursor>>,
}

impl Looped {
    /// The comm published jobs: each socket moves what it can at once on this thread; the
    /// loops are kicked only when a socket is left with work.
    pub(super) fn published(&self, sh: &Shared) {
        let mut left = false;
        for (idx, cursor) in self.cursors.iter().enumerate() {
            let mut c = match cursor.try_lock() {
                Ok(c) => c,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                // Its loop is moving it: the kick makes it look again after its turn.
                Err(std::sync::TryLockError::WouldBlock) => {
                    left = true;
                    continue;
                }
            };
            if turn(sh, idx, &mut c, Mover::Publisher) == Turn::Left && !c.armed {
                left = true;
            }
        }
        if left {
            for l in &self.loops {
                l.send(Cmd::Kick(self.id));
            }
        }
    }
}

/// The process's loops, started by the first shared comm.
static LOOPS: Mutex<Vec<Arc<EventLoop>>> = Mutex::new(Vec::new());
/// Round-robin assignment of sockets to loops.
static NEXT_LOOP: AtomicUsize = AtomicUsize::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn sys(ret: libc::c_int, what: &str) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        let e = std::io::Error::last_os_error();
        Err(std::io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(ret)
    }
}

impl EventLoop {
    /// A loop's descriptors, without its thread.
    fn new() -> std::io::Result<Self> {
        // SAFETY: plain descriptor creation; each is owned right away.
        let epfd = unsafe { OwnedFd::from_raw_fd(sys(libc::epoll_create1(libc::EPOLL_CLOEXEC), "epoll_create1")?) };
        // SAFETY: as above.
        let wake = unsafe {
            OwnedFd::from_raw_fd(sys(
                libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK),
                "eventfd",
            )?)
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKE,
        };
        // SAFETY: both descriptors are ours; `ev` is a valid event.
        sys(
            unsafe { libc::epoll_ctl(epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, wake.as_raw_fd(), &raw mut ev) },
            "epoll_ctl(eventfd)",
        )?;
        Ok(Self {
            epfd,
            wake,
            inbox: Mutex::new(Vec::new()),
        })
    }

    fn start(i: usize) -> std::io::Result<Arc<Self>> {
        let l = Arc::new(Self::new()?);
        let me = Arc::clone(&l);
        std::thread::Builder::new()
            .name(format!("tcpxemu-loop{i}"))
            .spawn(move || run(&me))?;
        Ok(l)
    }

    /// Queues a command; the first one queued since the loop last looked wakes it.
    fn send(&self, cmd: Cmd) {
        let first = {
            let mut q = self.inbox.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            q.push(cmd);
            q.len() == 1
        };
        if first {
            let one: u64 = 1;
            // SAFETY: 8 readable bytes into our eventfd (it cannot overflow: the loop drains it).
            unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// The process's loops, `n` of them started if none is yet.
fn loops(n: usize) -> NetResult<Vec<Arc<EventLoop>>> {
    let mut all = LOOPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while all.len() < n.max(1) {
        let l = EventLoop::start(all.len()).map_err(|e| {
            NetError::system(format!(
                "starting shared event-loop thread {} (TCPXEMU_THREADS=shared): {e}",
                all.len()
            ))
        })?;
        all.push(l);
    }
    Ok(all.clone())
}

/// Hands the data sockets of `sh` to the event loops (round robin over `nthreads` loops, started
/// on first use). Must come before the comm's first publication.
pub fn attach(sh: &Arc<Shared>, nthreads: usize) -> NetResult<()> {
    let all = loops(nthreads)?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let assign: Vec<usize> = (0..sh.socks.len())
        .map(|_| NEXT_LOOP.fetch_add(1, Ordering::Relaxed) % all.len())
        .collect();
    let mut mine: Vec<usize> = assign.clone();
    mine.sort_unstable();
    mine.dedup();
    let looped = Looped {
        id,
        loops: mine.iter().map(|&k| Arc::clone(&all[k])).collect(),
        cursors: (0..sh.socks.len())
            .map(|idx| {
                Mutex::new(Cursor {
                    chunks: Chunks::new(idx, sh.socks.len(), sh.chunk_size),
                    next: 0,
                    cur: None,
                    dead: false,
                    armed: false,
                })
            })
            .collect(),
    };
    if sh.looped.set(looped).is_err() {
        return Err(NetError::internal("comm attached to the event loops twice"));
    }
    for (idx, k) in assign.into_iter().enumerate() {
        all[k].send(Cmd::Add {
            sh: Arc::clone(sh),
            idx,
            comm: id,
        });
    }
    Ok(())
}

/// Takes the comm's sockets out of its loops and waits (at most [`DETACH_LIMIT`]) until every
/// loop confirmed it will not touch them or the comm's buffers again. A no-op for a comm that
/// never went shared.
pub fn detach(sh: &Shared) -> NetResult<()> {
    detach_within(sh, DETACH_LIMIT)
}

fn detach_within(sh: &Shared, limit: Duration) -> NetResult<()> {
    let Some(l) = sh.looped.get() else {
        return Ok(());
    };
    let done = Arc::new(Done {
        left: Mutex::new(l.loops.len()),
        cv: Condvar::new(),
    });
    for lp in &l.loops {
        lp.send(Cmd::Remove(l.id, Arc::clone(&done)));
    }
    let end = Instant::now() + limit;
    let mut left = done.left.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while *left > 0 {
        let now = Instant::now();
        if now >= end {
            return Err(NetError::internal(format!(
                "closing comm with peer {}: {} event loop(s) did not let go of its sockets within {:?}",
                sh.peer, *left, limit
            )));
        }
        left = done
            .cv
            .wait_timeout(left, end - now)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    Ok(())
}

/// A data socket as its loop serves it.
struct Sock {
    sh: Arc<Shared>,
    comm: u64,
    /// Its key in the epoll set and its index in [`Socks::slots`].
    slot: usize,
    idx: usize,
    fd: i32,
    /// In the epoll set (with `armed`: waiting for an event).
    registered: bool,
    armed: bool,
}

/// The loop thread's own state.
#[derive(Default)]
struct Socks {
    slots: Vec<Option<Sock>>,
    free: Vec<usize>,
    by_comm: HashMap<u64, Vec<usize>>,
}

fn run(l: &EventLoop) {
    let mut st = Socks::default();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        // Idle until a socket or a command needs the thread, like a per-socket helper waiting
        // for its next job; every wait a caller makes on this loop has its own deadline.
        // SAFETY: `events` has room for EVENTS entries.
        let n = unsafe { libc::epoll_wait(l.epfd.as_raw_fd(), events.as_mut_ptr(), EVENTS as libc::c_int, -1) };
        if n < 0 {
            // EINTR; anything else would be a bug in this file (bad descriptors).
            continue;
        }
        for ev in &events[..n as usize] {
            let key = ev.u64;
            if key == WAKE {
                let mut buf = 0u64;
                // SAFETY: 8 writable bytes from our non-blocking eventfd.
                unsafe { libc::read(l.wake.as_raw_fd(), (&raw mut buf).cast(), 8) };
                let cmds = std::mem::take(&mut *l.inbox.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
                for cmd in cmds {
                    st.command(l, cmd);
                }
            } else if let Some(s) = st.slots.get_mut(key as usize).and_then(Option::as_mut) {
                s.armed = false;
                pump(l, s);
            }
        }
    }
}

impl Socks {
    fn command(&mut self, l: &EventLoop, cmd: Cmd) {
        match cmd {
            Cmd::Add { sh, idx, comm } => {
                let fd = sh.socks[idx].as_raw_fd();
                let slot = self.free.pop().unwrap_or_else(|| {
                    self.slots.push(None);
                    self.slots.len() - 1
                });
                self.by_comm.entry(comm).or_default().push(slot);
                let s = self.slots[slot].insert(Sock {
                    sh,
                    comm,
                    slot,
                    idx,
                    fd,
                    registered: false,
                    armed: false,
                });
                // Jobs may have been published before the socket arrived.
                pump(l, s);
            }
            Cmd::Kick(comm) => {
                for &slot in self.by_comm.get(&comm).map_or(&[][..], Vec::as_slice) {
                    if let Some(s) = self.slots[slot].as_mut() {
                        if !s.armed {
                            pump(l, s);
                        }
                    }
                }
            }
            Cmd::Remove(comm, done) => {
                for slot in self.by_comm.remove(&comm).unwrap_or_default() {
                    if let Some(s) = self.slots[slot].take() {
                        debug_assert_eq!(s.comm, comm);
                        if s.registered {
                            // SAFETY: the descriptor is still open (the comm holds it until
                            // this removal is confirmed).
                            unsafe {
                                libc::epoll_ctl(l.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, s.fd, std::ptr::null_mut())
                            };
                        }
                        self.free.push(slot);
                    }
                }
                let mut left = done.left.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *left -= 1;
                done.cv.notify_all();
            }
        }
    }
}

impl Cursor {
    /// The socket's next chunk, if one is published (never blocks).
    fn fetch(&mut self, sh: &Shared) -> Option<Chunk> {
        let next = &mut self.next;
        let mut fetch = |block: bool| sh.fetch_job(next, block);
        match self.chunks.next(&mut fetch, false, &|_| false) {
            Step::Chunk(c) => Some(c),
            // Nothing to move, or the comm is closing (stalls never come here).
            Step::Empty | Step::Closed | Step::Stall => None,
        }
    }
}

/// Moves data socket `idx`'s chunks with non-blocking calls until the kernel would block, the
/// socket has nothing to move, [`TURN_BYTES`] moved (with work left), or it failed (reported).
fn turn(sh: &Shared, idx: usize, cursor: &mut Cursor, mover: Mover) -> Turn {
    if cursor.dead {
        return Turn::Failed;
    }
    let fd = sh.socks[idx].as_raw_fd();
    let mut moved_now = 0usize;
    loop {
        let (c, done) = match cursor.cur {
            Some(cur) => cur,
            None => match cursor.fetch(sh) {
                Some(c) => (c, 0),
                None => return Turn::Idle,
            },
        };
        let left = c.len - done;
        let at = c.job.ptr + c.off + done;
        // SAFETY: the job's buffer stays valid until its request completes or the comm closes
        // (the caller's contract; a closing comm waits for this loop to let go, `detach`, and
        // publications come from the comm's own caller), and `off + len <= job.len`.
        let ret = unsafe {
            match sh.dir {
                Dir::Send => libc::send(
                    fd,
                    at as *const libc::c_void,
                    left,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                ),
                Dir::Recv => libc::recv(fd, at as *mut libc::c_void, left, libc::MSG_DONTWAIT),
            }
        };
        let zero = match sh.dir {
            Dir::Send => write_zero,
            Dir::Recv => peer_closed,
        };
        match moved(ret, zero) {
            Ok(Some(n)) => {
                moved_now += n;
                if done + n == c.len {
                    // Counted before the credit, which lets `test` complete the request.
                    sh.timing.bytes.fetch_add(c.len as u64, Ordering::Relaxed);
                    if mover == Mover::Publisher {
                        sh.timing.inline_bytes.fetch_add(c.len as u64, Ordering::Relaxed);
                    }
                    credit(sh, &c);
                    cursor.cur = None;
                } else {
                    cursor.cur = Some((c, done + n));
                }
                if moved_now >= TURN_BYTES {
                    if cursor.cur.is_none() {
                        cursor.cur = cursor.fetch(sh).map(|c| (c, 0));
                    }
                    return if cursor.cur.is_some() { Turn::Left } else { Turn::Idle };
                }
            }
            Ok(None) => cursor.cur = Some((c, done)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                cursor.cur = Some((c, done));
                return Turn::Left;
            }
            Err(e) => {
                cursor.cur = None;
                cursor.dead = true;
                report(sh, idx, (e, c));
                return Turn::Failed;
            }
        }
    }
}

/// The loop's turn for a socket: moves what it can ([`turn`]), then arms the socket where work
/// is left (level-triggered readiness: a socket whose turn ran out comes back at the next
/// `epoll_wait`, after the other ready sockets'), or takes a failed one out of the set.
fn pump(l: &EventLoop, s: &mut Sock) {
    let Some(looped) = s.sh.looped.get() else {
        return;
    };
    let t = {
        // Blocking: an event consumed here must be served by this turn (a publication that
        // finds the socket armed leaves its work to that event). A publication holds the lock
        // for at most one turn.
        let mut c = looped.cursors[s.idx]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.armed = false;
        let t = turn(&s.sh, s.idx, &mut c, Mover::Loop);
        c.armed = t == Turn::Left;
        t
    };
    match t {
        Turn::Idle => {}
        Turn::Left => arm(l, s),
        Turn::Failed => unregister(l, s),
    }
}

/// Puts the socket in the epoll set for its direction, one-shot.
fn arm(l: &EventLoop, s: &mut Sock) {
    let dir = match s.sh.dir {
        Dir::Send => libc::EPOLLOUT,
        Dir::Recv => libc::EPOLLIN,
    };
    let mut ev = libc::epoll_event {
        events: (dir | libc::EPOLLONESHOT) as u32,
        u64: s.slot as u64,
    };
    let op = if s.registered {
        libc::EPOLL_CTL_MOD
    } else {
        libc::EPOLL_CTL_ADD
    };
    // SAFETY: our epoll set and the comm's open descriptor; `ev` is valid.
    if unsafe { libc::epoll_ctl(l.epfd.as_raw_fd(), op, s.fd, &raw mut ev) } != 0 {
        let e = std::io::Error::last_os_error();
        let failed = s.sh.looped.get().and_then(|looped| {
            let mut c = looped.cursors[s.idx]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            c.dead = true;
            c.cur.take()
        });
        if let Some((c, _)) = failed {
            report(
                &s.sh,
                s.idx,
                (std::io::Error::new(e.kind(), format!("epoll_ctl: {e}")), c),
            );
        }
        unregister(l, s);
        return;
    }
    s.registered = true;
    s.armed = true;
}

/// The socket failed (its error reported): it leaves the set for good.
fn unregister(l: &EventLoop, s: &mut Sock) {
    if s.registered {
        // SAFETY: as in the removal.
        unsafe { libc::epoll_ctl(l.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, s.fd, std::ptr::null_mut()) };
        s.registered = false;
    }
    s.armed = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ZeroCopy;

    /// A loop that never answers (no thread: a hung or dead loop) cannot hold a closing comm past
    /// the deadline: `detach` gives up with an error naming the peer.
    #[test]
    fn detach_gives_up_at_its_deadline() {
        let peer: std::net::SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let sh = Shared::new(Dir::Recv, peer, Vec::new(), 4096, ZeroCopy::Off, None, None);
        let silent = Arc::new(EventLoop::new().expect("epoll"));
        let looped = Looped {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            loops: vec![silent],
            cursors: Vec::new(),
        };
        assert!(sh.looped.set(looped).is_ok());
        let start = Instant::now();
        let e = detach_within(&sh, Duration::from_millis(100)).expect_err("nobody confirms");
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(
            e.msg.contains("127.0.0.1:9") && e.msg.contains("did not let go"),
            "{}",
            e.msg
        );
        // A comm that never went shared has nothing to wait for.
        let plain = Shared::new(Dir::Send, peer, Vec::new(), 4096, ZeroCopy::Off, None, None);
        assert!(detach_within(&plain, Duration::ZERO).is_ok());
    }
}
