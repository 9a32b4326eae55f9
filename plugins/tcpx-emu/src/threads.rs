//! Which helper-thread model a comm takes (`TCPXEMU_THREADS`), and how many helper threads a
//! process runs as a result.
//!
//! Why there is a choice: one blocking helper thread per data socket (`per-socket`, TCPX's
//! model, [`crate::worker`]) is the cheapest way to move bytes, but its thread count grows with
//! the comms. A fullmesh of 128 processes on one host opens 480 comms per process, ~500 threads
//! each, ~64000 in all: past `kernel.pid_max` (65536 by default, system-wide), so thread creation
//! fails ("Resource temporarily unavailable") whatever the stack size. `shared` serves the data
//! sockets of all host-memory comms of a process from `TCPXEMU_SHARED_THREADS` epoll threads
//! ([`crate::worker::evloop`]).
//!
//! `auto` (the default) decides per comm at its first `isend`/`irecv`: per-socket if the comm
//! needs it (a CUDA registration or post, zero-copy sends or their acknowledgements, or the
//! `stall`/`slow` faults, which block a thread by design), or if the process has at most
//! `TCPXEMU_THREAD_SOCKETS` data sockets open at that moment; shared otherwise. tcpx-perf
//! connects every comm before the first transfer (with `--connect rounds`, every comm of the
//! round, closed before the next round's connect), so all comms of a run choose alike, and small
//! runs (2 or 4 ranks) keep the per-socket path exactly. `shared` sends every comm that does not
//! need per-socket threads to the event loops; `per-socket` never uses them.
//!
//! Threads of a process ([`helper_threads`] predicts the helpers): per-socket comms run one
//! helper per data socket (`nsocks` per comm, from the first transfer until the comm closes);
//! shared comms add none beyond the `TCPXEMU_SHARED_THREADS` event loops, which start with the
//! first shared comm and live as long as the process. Setup adds one acceptor thread per process
//! (from the first `listen` on, serving every listen comm: [`crate::accept`]) and the first
//! receive comm the ctrl watcher ([`crate::ctrl_watch`]); a `connect` runs on its caller's
//! thread, a step per call ([`crate::conn`]).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::config::{Config, Threads};

/// The thread settings a comm needs (from [`Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadOpts {
    pub threads: Threads,
    pub shared_threads: usize,
    pub thread_sockets: usize,
}

impl ThreadOpts {
    pub fn from_config(cfg: &Config) -> Self {
        Self {
            threads: cfg.threads,
            shared_threads: cfg.shared_threads,
            thread_sockets: cfg.thread_sockets,
        }
    }
}

impl Default for ThreadOpts {
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

/// The model a comm took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    PerSocket,
    Shared,
}

/// Comms open in this process (send and receive).
static COMMS: AtomicUsize = AtomicUsize::new(0);
/// Data sockets of the open comms.
static DATA_SOCKETS: AtomicUsize = AtomicUsize::new(0);

/// Comms open in this process.
pub fn open_comms() -> usize {
    COMMS.load(Ordering::Relaxed)
}

/// Data sockets of the comms open in this process.
pub fn data_sockets_open() -> usize {
    DATA_SOCKETS.load(Ordering::Relaxed)
}

/// A comm's entry in the process counts, from its creation until it drops.
#[derive(Debug)]
pub struct Census {
    sockets: usize,
}

impl Census {
    pub fn new(sockets: usize) -> Self {
        COMMS.fetch_add(1, Ordering::Relaxed);
        DATA_SOCKETS.fetch_add(sockets, Ordering::Relaxed);
        Self { sockets }
    }
}

impl Drop for Census {
    fn drop(&mut self) {
        COMMS.fetch_sub(1, Ordering::Relaxed);
        DATA_SOCKETS.fetch_sub(self.sockets, Ordering::Relaxed);
    }
}

/// The model of a comm at its first transfer: `needs_per_socket` (CUDA, zero-copy, a blocking
/// fault) always wins; `sockets_open` is the process's data sockets at that moment.
pub fn choose(opts: &ThreadOpts, needs_per_socket: bool, sockets_open: usize) -> Model {
    let per_socket = needs_per_socket
        || match opts.threads {
            Threads::PerSocket => true,
            Threads::Shared => false,
            Threads::Auto => sockets_open <= opts.thread_sockets,
        };
    if per_socket {
        Model::PerSocket
    } else {
        Model::Shared
    }
}

/// Helper threads of a process whose comms (all host memory, no zero-copy, no blocking fault)
/// have `data_sockets_open` data sockets in all when they first transfer: per-socket, one per
/// data socket; shared, `TCPXEMU_SHARED_THREADS`; auto, per-socket up to
/// `TCPXEMU_THREAD_SOCKETS` sockets, else shared. Setup threads come on top: one acceptor per
/// process and one per `connect` under way (module docs).
pub fn helper_threads(data_sockets_open: usize, cfg: &Config) -> usize {
    let opts = ThreadOpts::from_config(cfg);
    match choose(&opts, false, data_sockets_open) {
        Model::PerSocket => data_sockets_open,
        Model::Shared => cfg.shared_threads,
    }
}

/// Logs a model at INFO the first time a comm of this process takes it.
pub(crate) fn log_choice(model: Model, opts: &ThreadOpts, sockets_open: usize) {
    static LOGGED: AtomicU8 = AtomicU8::new(0);
    let bit = match model {
        Model::PerSocket => 1,
        Model::Shared => 2,
    };
    if LOGGED.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
        return;
    }
    let what = match model {
        Model::PerSocket => "one helper thread per data socket".to_owned(),
        Model::Shared => format!("{} shared event-loop thread(s) for the process", opts.shared_threads),
    };
    crate::info!(
        nccl_net_abi::NCCL_INIT | nccl_net_abi::NCCL_NET,
        "helper threads: {what} (TCPXEMU_THREADS={}, {sockets_open} data sockets open, TCPXEMU_THREAD_SOCKETS={})",
        match opts.threads {
            Threads::Auto => "auto",
            Threads::PerSocket => "per-socket",
            Threads::Shared => "shared",
        },
        opts.thread_sockets
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_and_the_thread_formula() {
        let cfg = Config::default();
        let o = ThreadOpts::from_config(&cfg);
        assert_eq!(choose(&o, false, 64), Model::PerSocket);
        assert_eq!(choose(&o, false, 65), Model::Shared);
        assert_eq!(choose(&o, true, 10_000), Model::PerSocket);
        assert_eq!(helper_threads(64, &cfg), 64);
        assert_eq!(helper_threads(480, &cfg), 4);
        let shared = Config {
            threads: Threads::Shared,
            shared_threads: 8,
            ..Config::default()
        };
        assert_eq!(helper_threads(2, &shared), 8);
        assert_eq!(choose(&ThreadOpts::from_config(&shared), true, 2), Model::PerSocket);
        let per_socket = Config {
            threads: Threads::PerSocket,
            ..Config::default()
        };
        assert_eq!(helper_threads(480, &per_socket), 480);
    }
}
