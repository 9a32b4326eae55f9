//! What one comm costs in the plugin: sockets, helper threads, ports, pinned and GPU memory.
//!
//! Two plugins are modelled. **TCPX** (GPUDirect-TCPX 3.1.9, read from
//! `/work/shared/reference/plugin-abi.md` §3.2 and §3.4): `listen` opens a data listen socket
//! plus a ctrl listen socket; a comm has `NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS` data
//! sockets (at most 8, `MAX_SOCKETS`) plus one ctrl socket, each bound to its device's address;
//! setup runs on one detached pthread per pending connect/accept; the data path on
//! `NCCL_SOCKET_NTHREADS` persistent helper threads per comm (created on the first chunk); an
//! accepted CUDA receive comm maps a `netUnpackMeta` ring with `cuMemHostAlloc` (512 KiB), while
//! its bounce buffer is RxDM's, not the process's. **tcpx-emu** (`plugins/tcpx-emu`, its
//! `threads.rs` module docs): one listen socket per listen comm (ctrl and data sockets all dial
//! it), one acceptor thread per process serving them all, no thread for a connect (it steps on
//! its caller's);
//! helper threads as `TCPXEMU_THREADS` says ([`PluginModel::helper_threads`]; CUDA comms and
//! `TCPXEMU_ZEROCOPY=all` sends always take one per data socket); in unpack mode (CUDA memory)
//! every helper of a comm owns two pinned staging buffers of `min(chunk, 4 MiB)`, and every CUDA
//! receive comm takes a region of 16 slots from its GPU's bounce pool (`TCPXEMU_BOUNCE_POOL_MB`,
//! 2048 MiB, one per GPU).

use serde::Serialize;

/// Google's GPUDirect-TCPX by the name it reports (`GPUDirectTCPX_v7`); tcpx-emu is not.
pub fn is_real_tcpx(plugin_name: &str) -> bool {
    plugin_name.to_ascii_lowercase().contains("gpudirecttcpx")
}

/// Sockets per comm as TCPX and tcpx-emu compute them (data sockets; the ctrl socket is extra).
pub fn data_sockets(env: &dyn Fn(&str) -> Option<String>) -> Result<usize, String> {
    let get = |k: &str| -> Result<usize, String> {
        match env(k) {
            None => Ok(1),
            Some(v) => v
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("{k}={v} is not a number")),
        }
    };
    let n = get("NCCL_NSOCKS_PERTHREAD")? * get("NCCL_SOCKET_NTHREADS")?;
    if (1..=8).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS = {n}: TCPX allows 1 to 8 sockets per comm (MAX_SOCKETS)"
        ))
    }
}

/// Most connection-setup threads per endpoint when `--setup-threads` is not given: TCPX-like
/// plugins take calls on distinct comms from many threads, others get one.
pub fn default_setup_threads(plugin_name: &str) -> usize {
    if crate::contracts::is_tcpx_like(plugin_name) {
        64
    } else {
        1
    }
}

/// `TCPXEMU_THREADS`: how tcpx-emu gives its data sockets helper threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EmuThreads {
    /// One thread per data socket.
    PerSocket,
    /// `TCPXEMU_SHARED_THREADS` threads per process serve every socket.
    Shared,
    /// Per-socket while the process has at most `TCPXEMU_THREAD_SOCKETS` data sockets, else shared.
    Auto,
}

/// Defaults of tcpx-emu's thread variables.
pub const EMU_SHARED_THREADS: usize = 4;
pub const EMU_THREAD_SOCKETS: usize = 64;
/// tcpx-emu's `TCPXEMU_BOUNCE_POOL_MB` default.
pub const EMU_BOUNCE_POOL_MB: u64 = 2048;
/// The chunk TCPX uses when `NCCL_DYNAMIC_CHUNK_SIZE` is unset in tcpx-emu's lenient mode, and
/// the value tcpx-perf sets for the built-in tcpx-emu.
const DEFAULT_CHUNK: u64 = 524_288;
/// `NET_UNPACK_MAX_SLICE_SIZE`: the largest CUDA receive, and the bound of a staging buffer.
const MAX_RECV: u64 = 4 << 20;
/// Bounce-pool regions are aligned to 2 MiB (tcpx-emu `gpu.rs` `REGION_ALIGN`).
const REGION_ALIGN: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// Which plugin's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    TcpxEmu,
    Tcpx,
    /// A plugin that could not be opened or named, or names itself neither: `--plan` counts
    /// tcpx-perf's own needs and none of the plugin's (its threads, extra sockets, memory).
    Unknown,
}

/// One plugin's per-comm figures under the current environment.
#[derive(Debug, Clone, Serialize)]
pub struct PluginModel {
    pub kind: Kind,
    /// Data sockets per comm.
    pub data_sockets: usize,
    /// `NCCL_SOCKET_NTHREADS`: TCPX's helper threads per comm.
    pub socket_threads: usize,
    pub emu_threads: EmuThreads,
    pub emu_shared_threads: usize,
    pub emu_thread_sockets: usize,
    /// `TCPXEMU_ZEROCOPY=all`: host sends wait for acknowledgements, which needs per-socket threads.
    pub emu_zerocopy_all: bool,
    /// `NCCL_DYNAMIC_CHUNK_SIZE`.
    pub chunk: u64,
    /// tcpx-emu's bounce pool per GPU.
    pub bounce_pool: u64,
    /// `NCCL_GPUDIRECTTCPX_CTRL_DEV`: TCPX's ctrl sockets on this interface instead of the data NIC.
    pub ctrl_dev: Option<String>,
}

impl PluginModel {
    /// The model of the plugin named `plugin_name` (its reported name, or for `--plan` the
    /// `--plugin` value) as `env` configures it. Values the plugins would refuse or clamp are
    /// read as the plugins read them: an error for the socket count (TCPX refuses it), the
    /// default for the others (tcpx-emu warns and uses its default).
    pub fn from_env(plugin_name: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<PluginModel, String> {
        let number = |k: &str, default: u64| {
            env(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        let emu_threads = match env("TCPXEMU_THREADS").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            Some("per-socket") => EmuThreads::PerSocket,
            Some("shared") => EmuThreads::Shared,
            _ => EmuThreads::Auto,
        };
        let pool_mb = number("TCPXEMU_BOUNCE_POOL_MB", EMU_BOUNCE_POOL_MB);
        Ok(PluginModel {
            kind: if is_real_tcpx(plugin_name) {
                Kind::Tcpx
            } else {
                Kind::TcpxEmu
            },
            data_sockets: data_sockets(env)?,
            socket_threads: number("NCCL_SOCKET_NTHREADS", 1) as usize,
            emu_threads,
            // Outside 1..=64 tcpx-emu warns and uses its default, as here.
            emu_shared_threads: env("TCPXEMU_SHARED_THREADS")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| (1..=64).contains(n))
                .unwrap_or(EMU_SHARED_THREADS),
            // 0 is valid here: every comm shared under auto.
            emu_thread_sockets: env("TCPXEMU_THREAD_SOCKETS")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|&n| n <= 1_000_000)
                .unwrap_or(EMU_THREAD_SOCKETS),
            emu_zerocopy_all: matches!(
                env("TCPXEMU_ZEROCOPY")
                    .map(|v| v.trim().to_ascii_lowercase())
                    .as_deref(),
                Some("all" | "1")
            ),
            chunk: number("NCCL_DYNAMIC_CHUNK_SIZE", DEFAULT_CHUNK),
            bounce_pool: if (64..=4095).contains(&pool_mb) {
                pool_mb
            } else {
                EMU_BOUNCE_POOL_MB
            } << 20,
            ctrl_dev: env("NCCL_GPUDIRECTTCPX_CTRL_DEV").filter(|v| !v.trim().is_empty()),
        })
    }

    /// The plugin's name in reports.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::TcpxEmu => "tcpx-emu",
            Kind::Tcpx => "GPUDirect-TCPX",
            Kind::Unknown => "unknown",
        }
    }

    /// Helper threads the data path of a process with `comms` comms keeps: TCPX
    /// `NCCL_SOCKET_NTHREADS` per comm (plugin-abi.md §3.4); tcpx-emu one per data socket, a
    /// fixed pool per process, or (auto) per socket up to `TCPXEMU_THREAD_SOCKETS` sockets, and
    /// always per socket for `cuda` comms (tcpx-emu `threads::choose`).
    pub fn helper_threads(&self, comms: usize, cuda: bool) -> usize {
        self.helpers_started(comms, comms, cuda)
    }

    /// Helper threads started in a process of `comms` comms of which `active` carry data (both
    /// plugins start a comm's helpers at its first transfer; tcpx-emu decides per-socket or
    /// shared from every data socket open then, `threads::choose`).
    pub fn helpers_started(&self, comms: usize, active: usize, cuda: bool) -> usize {
        match self.kind {
            Kind::Tcpx => active * self.socket_threads,
            Kind::TcpxEmu if active == 0 => 0,
            Kind::TcpxEmu if self.emu_per_socket(comms, cuda) => active * self.data_sockets,
            Kind::TcpxEmu => self.emu_shared_threads,
            Kind::Unknown => 0,
        }
    }

    /// Descriptors besides the sockets that outlive setup: tcpx-emu's ctrl watcher's epoll set,
    /// from the first accept to the end (its acceptor's are in [`super::FDS_BASE`], measured
    /// before the watcher existed).
    pub fn resident_fds(&self, listens: usize) -> u64 {
        u64::from(self.kind == Kind::TcpxEmu && listens > 0)
    }

    /// Threads that outlive setup: tcpx-emu's acceptor, from the first listen to the end, and
    /// its ctrl watcher, from the first receive comm (a listen's accept) to the end (seen in
    /// `/proc` through the sweep); TCPX's detached threads end with their call.
    pub fn resident_threads(&self, listens: usize) -> usize {
        if self.kind == Kind::TcpxEmu && listens > 0 {
            2
        } else {
            0
        }
    }

    /// Whether tcpx-emu gives each data socket its own thread in a process with `comms` comms.
    fn emu_per_socket(&self, comms: usize, cuda: bool) -> bool {
        cuda || self.emu_zerocopy_all
            || match self.emu_threads {
                EmuThreads::PerSocket => true,
                EmuThreads::Shared => false,
                EmuThreads::Auto => comms * self.data_sockets <= self.emu_thread_sockets,
            }
    }

    /// How `helper_threads` was decided, for the report.
    pub fn thread_mode(&self, comms: usize, cuda: bool) -> String {
        let auto = if self.emu_threads == EmuThreads::Auto {
            format!(" (auto, {} sockets at most)", self.emu_thread_sockets)
        } else {
            String::new()
        };
        match self.kind {
            Kind::Tcpx => format!("{} per comm (NCCL_SOCKET_NTHREADS)", self.socket_threads),
            Kind::TcpxEmu if cuda => "per-socket (CUDA comms)".into(),
            Kind::TcpxEmu if self.emu_per_socket(comms, cuda) => format!("per-socket{auto}"),
            Kind::TcpxEmu => format!("shared: {}{auto}", self.emu_shared_threads),
            Kind::Unknown => "not counted: unknown plugin".into(),
        }
    }

    /// Threads the plugin runs while `connects` connects and `accepts` accepts are under way at
    /// once: TCPX one detached thread each (plugin-abi.md §3.4); tcpx-emu a single acceptor for
    /// the process (its connects step on the caller's thread: `conn.rs`).
    pub fn setup_threads(&self, connects: usize, accepts: usize) -> usize {
        match self.kind {
            Kind::Tcpx => connects + accepts,
            Kind::TcpxEmu => usize::from(accepts > 0),
            Kind::Unknown => 0,
        }
    }

    /// Sockets a listen comm holds while it waits for its accept (TCPX: data + ctrl listener;
    /// tcpx-emu: one). Each takes an ephemeral port of its own.
    pub fn listen_sockets(&self) -> usize {
        match self.kind {
            Kind::Tcpx => 2,
            Kind::TcpxEmu | Kind::Unknown => 1,
        }
    }

    /// Pinned host bytes one comm allocates: tcpx-emu unpack mode's staging (two buffers of
    /// `min(chunk, 4 MiB)` per data socket's helper) on CUDA comms, and the host-mapped
    /// `netUnpackMeta` ring of a CUDA receive comm (both plugins).
    pub fn pinned_per_comm(&self, cuda: bool, receive: bool) -> u64 {
        if !cuda {
            return 0;
        }
        let staging = match self.kind {
            Kind::TcpxEmu => self.data_sockets as u64 * 2 * self.chunk.min(MAX_RECV),
            Kind::Tcpx | Kind::Unknown => 0,
        };
        let meta = if receive {
            std::mem::size_of::<nccl_net::abi::NetUnpackMeta>() as u64
        } else {
            0
        };
        staging + meta
    }

    /// Bounce-pool bytes one CUDA receive comm takes (tcpx-emu; TCPX's pool is RxDM's):
    /// 16 slots of `ceil_page(min(chunk, 4 MiB))` x `ceil(4 MiB / min(chunk, 4 MiB))` windows,
    /// aligned to 2 MiB (64 MiB at the default chunk).
    pub fn bounce_region(&self) -> u64 {
        if self.kind != Kind::TcpxEmu {
            return 0;
        }
        let span = self.chunk.clamp(1, MAX_RECV);
        let windows = MAX_RECV.div_ceil(span).min(2048);
        (16 * span.next_multiple_of(PAGE) * windows).next_multiple_of(REGION_ALIGN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, vars: &[(&str, &str)]) -> PluginModel {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PluginModel::from_env(name, &|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap()
    }

    #[test]
    fn emu_helper_threads_follow_tcpxemu_threads() {
        let auto = model("tcpx-emu", &[("NCCL_NSOCKS_PERTHREAD", "4")]);
        assert_eq!(auto.helper_threads(16, false), 64, "64 sockets: still one thread each");
        assert_eq!(
            auto.helper_threads(17, false),
            EMU_SHARED_THREADS,
            "past 64 sockets: shared"
        );
        assert_eq!(auto.helper_threads(0, false), 0);
        assert_eq!(auto.helper_threads(17, true), 68, "CUDA comms keep a thread per socket");
        assert_eq!(
            (auto.setup_threads(5, 7), auto.setup_threads(5, 0)),
            (1, 0),
            "one acceptor; a connect starts no thread"
        );
        let per = model(
            "tcpx-emu",
            &[("TCPXEMU_THREADS", "per-socket"), ("NCCL_NSOCKS_PERTHREAD", "2")],
        );
        assert_eq!(per.helper_threads(1000, false), 2000);
        let shared = model(
            "tcpx-emu",
            &[("TCPXEMU_THREADS", "shared"), ("TCPXEMU_SHARED_THREADS", "6")],
        );
        assert_eq!(shared.helper_threads(3, false), 6);
        let small = model("tcpx-emu", &[("TCPXEMU_THREAD_SOCKETS", "8")]);
        assert_eq!((small.helper_threads(8, false), small.helper_threads(9, false)), (8, 4));
    }

    #[test]
    fn tcpx_keeps_socket_threads_per_comm_and_two_listeners() {
        let t = model(
            "GPUDirectTCPX_v7",
            &[("NCCL_NSOCKS_PERTHREAD", "2"), ("NCCL_SOCKET_NTHREADS", "2")],
        );
        assert_eq!(
            (t.kind, t.data_sockets, t.helper_threads(10, true)),
            (Kind::Tcpx, 4, 20)
        );
        assert_eq!(t.listen_sockets(), 2);
        assert_eq!(t.setup_threads(5, 7), 12, "a detached thread per connect and accept");
        assert_eq!(t.bounce_region(), 0, "RxDM owns TCPX's bounce buffer");
    }

    #[test]
    fn emu_bounce_region_is_64_mib_at_the_default_chunk() {
        let m = model("tcpx-emu", &[]);
        assert_eq!(m.bounce_region(), 64 << 20);
        assert_eq!(m.bounce_pool, 2048 << 20);
        assert_eq!(m.pinned_per_comm(true, false), 2 * 524_288);
        assert_eq!(m.pinned_per_comm(false, true), 0);
        assert!(PluginModel::from_env("x", &|k| (k == "NCCL_NSOCKS_PERTHREAD").then(|| "9".into())).is_err());
    }
}
