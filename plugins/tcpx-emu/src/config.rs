//! Run-time configuration, read from the environment once, at the first `init`.
//!
//! Everything else in the crate takes a [`Config`] value, so tests build one directly instead of
//! mutating the process environment (which would race between parallel tests).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TCPXEMU_IFNAMES` | `lo` | comma list of interfaces; each one with an IP address is a device |
//! | `NCCL_NSOCKS_PERTHREAD` x `NCCL_SOCKET_NTHREADS` | 1 x 1 | data sockets per comm, clamped to 1..=8 (TCPX's `MAX_SOCKETS`) |
//! | `TCPXEMU_STRICT` | 1 | 1: every TCPX contract is enforced ([`crate::contracts`]); 0: the lenient behaviour of old |
//! | `NCCL_DYNAMIC_CHUNK_SIZE` | none (strict: init refuses unset or 0); 524288 with `TCPXEMU_STRICT=0` | bytes per chunk striped over the data sockets |
//! | `TCPXEMU_CONNECT_MS` | 0 | setup cost model: connect and accept take at least (nsocks+1) x this many ms (TCPX: 100) |
//! | `TCPXEMU_SETUP_BLOCKING` | 0 | setup cost model: 1 = `connect` and `accept` block until the comm exists (plugins with synchronous setup), instead of returning NULL meanwhile (TCPX 3.1.9, whose setup runs on detached threads) |
//! | `TCPXEMU_FLOW_STEERING_MS` | 0 | setup cost model: accept takes this much longer (TCPX's `PROGRAM_FLOW_STEERING_WAIT_MICROS`, GKE 1000 ms) |
//! | `TCPXEMU_MTU` | the interface's | MTU that sizes a devmem fragment, hence the largest CUDA receive (contract #2) |
//! | `TCPXEMU_HOST_DEVICE_TYPE` | `host` | host mode's `netDeviceType`: `host`, or `unpack` to present itself as TCPX does |
//! | `TCPXEMU_DMABUF` | 0 | 1: unpack mode offers `NCCL_PTR_DMABUF` and `regMrDmaBuf` (v8+ tables; TCPX has neither) |
//! | `TCPXEMU_SOCKBUF` | 4194304 | `SO_SNDBUF`/`SO_RCVBUF` of data sockets; 0 = kernel autotuning |
//! | `TCPXEMU_REPORT_SIZES` | 0 | 1: `test` writes `*sizes` (TCPX never does) |
//! | `TCPXEMU_ZEROCOPY` | `staged` | which sends hand their pages to the socket (`vmsplice` + `splice`) instead of copying them, completing once the receiver acknowledged each chunk (see [`crate::worker`]): `staged` (unpack mode's pinned staging of CUDA sends), `all` (host-memory sends too), `off` |
//! | `TCPXEMU_MODE` | `auto` | `unpack`: device-unpack emulation (needs CUDA); `host`: host memory only; `auto`: `unpack` when a CUDA driver and a GPU are present, else `host` |
//! | `TCPXEMU_UNPACK_MAX_RUN` | 16 | unpack mode: largest run of consecutive 4 KiB pages kept together in the bounce buffer (1..=1024; 1 = every page scattered) |
//! | `TCPXEMU_UNPACK_SEED` | random | unpack mode: fixed seed of the scramble (reproducible layouts) |
//! | `TCPXEMU_BOUNCE_POOL_MB` | 2048 | unpack mode: the GPU's bounce buffer, shared by its receive comms (64 MiB each at the default chunk size); 64..=4095 |
//! | `TCPXEMU_THREADS` | `auto` | helper-thread model ([`crate::worker`], [`crate::threads`]): `per-socket` (one blocking thread per data socket, TCPX's model), `shared` (`TCPXEMU_SHARED_THREADS` epoll threads per process serve the host-memory comms; CUDA, zero-copy, `stall`/`slow` comms stay per-socket), `auto` (each comm picks at its first `isend`/`irecv`: per-socket if it needs it or the process has at most `TCPXEMU_THREAD_SOCKETS` data sockets open, else shared) |
//! | `TCPXEMU_SHARED_THREADS` | 4 | event-loop threads per process for the shared model (1..=64) |
//! | `TCPXEMU_THREAD_SOCKETS` | 64 | `auto`: the most data sockets a process may have open for a comm to still take per-socket threads (0..=1000000) |
//! | `TCPXEMU_FAULT` | unset | `stall`, `close`, `corrupt`, `slow`, `short`, `short-lie`, `stale` or `drop` (see [`crate::fault`]) |
//! | `TCPXEMU_FAULT_AFTER` | 0 | requests per comm that complete normally before the fault (`accept`: listen comms of the process) |
//! | `TCPXEMU_FAULT_RANK` | unset | only the process whose `OMPI_COMM_WORLD_RANK`/`PMI_RANK` is this |

use crate::fault::{Fault, FaultKind};

/// TCPX's `MAX_SOCKETS`: the most data sockets one comm may have.
pub const MAX_SOCKETS: usize = 8;
/// The chunk size GKE configures for TCPX (`NCCL_DYNAMIC_CHUNK_SIZE=524288`).
pub const DEFAULT_CHUNK_SIZE: usize = 524_288;
/// Largest chunk size accepted (it travels as a `u32` in the handle).
pub const MAX_CHUNK_SIZE: usize = 1 << 30;
/// Default socket buffer size for data sockets.
pub const DEFAULT_SOCKBUF: usize = 4 << 20;

/// Where received bytes land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Resolved at `init`: `Unpack` when CUDA and a GPU are present, else `Host`. A comm built
    /// directly (Rust API) with `Auto` behaves as `Host`.
    Auto,
    /// Host memory only, straight into the caller's buffer (`ptrSupport = HOST`).
    Host,
    /// Device unpack as TCPX: CUDA receives land in a device bounce buffer in scrambled 4 KiB
    /// pages, described in the host-mapped `netUnpackMeta` ring (`ptrSupport = HOST|CUDA`,
    /// `netDeviceType = UNPACK`).
    Unpack,
}

/// Which sends hand their pages to the socket instead of copying them (`TCPXEMU_ZEROCOPY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    Off,
    /// Sends out of unpack mode's pinned staging (CUDA sends): the buffers are reused at once
    /// and were just written by the DMA engine, so the saved copy pays (fullmesh --mem cuda
    /// 1.15-1.23x on the H200 host, `docs/runs/h200-20261121T0823Z-zerocopy-ab`); host-memory sends measured no gain and are copied.
    Staged,
    All,
}

/// Who moves a comm's chunks (`TCPXEMU_THREADS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Per comm at its first transfer: `PerSocket` while the process has few data sockets open
    /// or the comm needs it, else `Shared`.
    Auto,
    /// One helper thread per data socket (blocking I/O), as TCPX.
    PerSocket,
    /// The process's event-loop threads (host-memory comms only).
    Shared,
}

/// Default of `TCPXEMU_SHARED_THREADS`.
pub const DEFAULT_SHARED_THREADS: usize = 4;
/// Default of `TCPXEMU_THREAD_SOCKETS`.
pub const DEFAULT_THREAD_SOCKETS: usize = 64;

/// Default of `TCPXEMU_BOUNCE_POOL_MB`: room for 32 receive comms per GPU.
pub const DEFAULT_BOUNCE_POOL_MB: usize = 2048;

/// How long an accepted socket has to deliver its hello: as long as the peer's kernel keeps
/// retransmitting it (`TCP_USER_TIMEOUT`). A real peer sends it right after connecting, but a lost
/// segment comes again only after 1, 3, 7, 15 s of backoff: at 5 s, a 128-rank connect storm
/// through the rig's shaped NICs had a real data socket rejected, and its comm waited for it until
/// -T. Hellos are read side by side, so a silent socket costs only its own slot meanwhile.
pub const DEFAULT_HELLO_TIMEOUT: std::time::Duration =
    std::time::Duration::from_millis(crate::wire::USER_TIMEOUT_MS as u64);

/// Default of `TCPXEMU_UNPACK_MAX_RUN`.
pub const DEFAULT_UNPACK_MAX_RUN: usize = crate::scramble::DEFAULT_MAX_RUN;

/// The plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub ifnames: Vec<String>,
    /// Data sockets per comm (receiver's value wins: it travels in the handle).
    pub nsocks: usize,
    /// Chunk size (receiver's value wins: it travels in the handle).
    pub chunk_size: usize,
    /// `SO_SNDBUF`/`SO_RCVBUF` for data sockets; 0 leaves the kernel's autotuning on.
    pub sockbuf: usize,
    pub report_sizes: bool,
    /// Zero-copy sends (the sender's value: whether chunks are acknowledged travels in the
    /// hello).
    pub zerocopy: ZeroCopy,
    pub mode: Mode,
    /// Unpack mode: largest run of consecutive pages kept together in the bounce buffer.
    pub unpack_max_run: usize,
    /// Unpack mode: fixed scramble seed (None: random per comm).
    pub unpack_seed: Option<u64>,
    /// Unpack mode: MiB of the per-GPU bounce pool (`src_off` is 32-bit: below 4 GiB).
    pub bounce_pool_mb: usize,
    pub fault: Option<Fault>,
    /// Helper-thread model (`TCPXEMU_THREADS`).
    pub threads: Threads,
    /// Event-loop threads per process of the shared model (`TCPXEMU_SHARED_THREADS`).
    pub shared_threads: usize,
    /// `auto`: data sockets open beyond which a comm goes shared (`TCPXEMU_THREAD_SOCKETS`).
    pub thread_sockets: usize,
    /// Enforce every TCPX contract (`TCPXEMU_STRICT`, default on).
    pub strict: bool,
    /// `NCCL_DYNAMIC_CHUNK_SIZE` as found (checked at init in strict mode: unset or 0 is refused).
    pub chunk_size_raw: Option<String>,
    /// Setup cost model: per-socket milliseconds in connect and accept (0 = off).
    pub connect_ms: u64,
    /// Setup cost model: extra milliseconds in accept (the flow-steering wait).
    pub flow_steering_ms: u64,
    /// Setup cost model: `connect`/`accept` return only with a comm (or an error), as plugins
    /// with synchronous setup do, instead of NULL while the work runs in the background.
    pub setup_blocking: bool,
    /// MTU override for the fragment size (None: the interface's MTU, else 4 KiB fragments).
    pub mtu: Option<u32>,
    /// Host mode reports `netDeviceType` UNPACK (v7) as TCPX does.
    pub host_as_unpack: bool,
    /// How long an accepted socket may stay silent before its hello (then it is a stranger,
    /// rejected and named). [`DEFAULT_HELLO_TIMEOUT`]; tests shorten it.
    pub hello_timeout: std::time::Duration,
    /// Unpack mode also offers `NCCL_PTR_DMABUF` and `regMrDmaBuf` (v8+ tables), as GPUDirect
    /// plugins such as aws-ofi-nccl do; TCPX does not (its `regMrDmaBuf` is NULL).
    pub dmabuf: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ifnames: vec!["lo".to_owned()],
            nsocks: 1,
            chunk_size: DEFAULT_CHUNK_SIZE,
            sockbuf: DEFAULT_SOCKBUF,
            report_sizes: false,
            zerocopy: ZeroCopy::Staged,
            mode: Mode::Auto,
            unpack_max_run: DEFAULT_UNPACK_MAX_RUN,
            unpack_seed: None,
            bounce_pool_mb: DEFAULT_BOUNCE_POOL_MB,
            fault: None,
            threads: Threads::Auto,
            shared_threads: DEFAULT_SHARED_THREADS,
            thread_sockets: DEFAULT_THREAD_SOCKETS,
            strict: true,
            chunk_size_raw: None,
            connect_ms: 0,
            flow_steering_ms: 0,
            setup_blocking: false,
            mtu: None,
            host_as_unpack: false,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            dmabuf: false,
        }
    }
}

/// A boolean knob: 1/true/yes or 0/false/no (empty: `default`).
fn flag(get: &impl Fn(&str) -> Option<String>, key: &str, default: bool, warns: &mut Vec<String>) -> bool {
    match get(key) {
        None => default,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" => true,
            "0" | "false" | "no" => false,
            "" => default,
            _ => {
                warns.push(format!("{key}={v} is invalid (0|1), using {}", u8::from(default)));
                default
            }
        },
    }
}

/// A non-negative integer knob (absent: `default`).
fn number(get: &impl Fn(&str) -> Option<String>, key: &str, default: u64, warns: &mut Vec<String>) -> u64 {
    match get(key) {
        None => default,
        Some(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
            warns.push(format!("{key}={v} is invalid, using {default}"));
            default
        }),
    }
}

/// An integer knob within `range` (absent: `default`; outside it or not a number: `default`, with
/// a warning naming the range).
fn ranged(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
    range: std::ops::RangeInclusive<usize>,
    default: usize,
    warns: &mut Vec<String>,
) -> usize {
    match get(key) {
        None => default,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if range.contains(&n) => n,
            _ => {
                warns.push(format!(
                    "{key}={v} is invalid ({}..={}), using {default}",
                    range.start(),
                    range.end()
                ));
                default
            }
        },
    }
}

impl Config {
    /// Reads the process environment. Returns the config and the WARN lines to log.
    pub fn from_env() -> (Self, Vec<String>) {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Builds a config from any key -> value lookup (the environment, or a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> (Self, Vec<String>) {
        let mut warns = Vec::new();
        let mut cfg = Config::default();

        if let Some(list) = get("TCPXEMU_IFNAMES") {
            let names: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if !names.is_empty() {
                cfg.ifnames = names;
            }
        }

        let mut count = |key: &str| -> usize {
            match get(key) {
                None => 1,
                Some(v) => match v.trim().parse::<i64>() {
                    Ok(n) if n >= 1 => n as usize,
                    _ => {
                        warns.push(format!("{key}={v} is invalid, using 1"));
                        1
                    }
                },
            }
        };
        let per_thread = count("NCCL_NSOCKS_PERTHREAD");
        let threads = count("NCCL_SOCKET_NTHREADS");
        let product = per_thread.saturating_mul(threads);
        cfg.nsocks = product.clamp(1, MAX_SOCKETS);
        if cfg.nsocks != product {
            warns.push(format!(
                "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS = {product} exceeds MAX_SOCKETS, using {}",
                cfg.nsocks
            ));
        }

        cfg.strict = flag(&get, "TCPXEMU_STRICT", true, &mut warns);
        cfg.chunk_size_raw = get("NCCL_DYNAMIC_CHUNK_SIZE");
        if let Some(v) = &cfg.chunk_size_raw {
            match v.trim().parse::<u64>() {
                Ok(n) if n > 0 && n as usize <= MAX_CHUNK_SIZE => cfg.chunk_size = n as usize,
                Ok(n) if n as usize > MAX_CHUNK_SIZE => {
                    warns.push(format!(
                        "NCCL_DYNAMIC_CHUNK_SIZE={v} is too large, using {MAX_CHUNK_SIZE}"
                    ));
                    cfg.chunk_size = MAX_CHUNK_SIZE;
                }
                // 0 is refused at init in strict mode (contract #13).
                Ok(0) if cfg.strict => {}
                _ => warns.push(format!(
                    "NCCL_DYNAMIC_CHUNK_SIZE={v} is invalid, using {DEFAULT_CHUNK_SIZE}"
                )),
            }
        }
        cfg.connect_ms = number(&get, "TCPXEMU_CONNECT_MS", 0, &mut warns);
        cfg.flow_steering_ms = number(&get, "TCPXEMU_FLOW_STEERING_MS", 0, &mut warns);
        cfg.setup_blocking = flag(&get, "TCPXEMU_SETUP_BLOCKING", false, &mut warns);
        cfg.dmabuf = flag(&get, "TCPXEMU_DMABUF", false, &mut warns);
        if let Some(v) = get("TCPXEMU_MTU").filter(|v| !v.trim().is_empty()) {
            match v.trim().parse::<u32>() {
                Ok(n) if (576..=65536).contains(&n) => cfg.mtu = Some(n),
                _ => warns.push(format!(
                    "TCPXEMU_MTU={v} is invalid (576..=65536), using the interface's"
                )),
            }
        }
        if let Some(v) = get("TCPXEMU_HOST_DEVICE_TYPE") {
            match v.trim().to_ascii_lowercase().as_str() {
                "host" | "" => cfg.host_as_unpack = false,
                "unpack" => cfg.host_as_unpack = true,
                _ => warns.push(format!(
                    "TCPXEMU_HOST_DEVICE_TYPE={v} is invalid (host|unpack), using host"
                )),
            }
        }

        if let Some(v) = get("TCPXEMU_SOCKBUF") {
            match v.trim().parse::<usize>() {
                Ok(n) => cfg.sockbuf = n.min(i32::MAX as usize),
                Err(_) => warns.push(format!("TCPXEMU_SOCKBUF={v} is invalid, using {DEFAULT_SOCKBUF}")),
            }
        }

        if let Some(v) = get("TCPXEMU_REPORT_SIZES") {
            match v.trim() {
                "1" | "true" | "yes" => cfg.report_sizes = true,
                "0" | "false" | "no" | "" => cfg.report_sizes = false,
                _ => warns.push(format!("TCPXEMU_REPORT_SIZES={v} is invalid, using 0")),
            }
        }

        if let Some(v) = get("TCPXEMU_ZEROCOPY") {
            match v.trim().to_ascii_lowercase().as_str() {
                "staged" | "" => cfg.zerocopy = ZeroCopy::Staged,
                "all" | "1" => cfg.zerocopy = ZeroCopy::All,
                "off" | "0" => cfg.zerocopy = ZeroCopy::Off,
                _ => warns.push(format!(
                    "TCPXEMU_ZEROCOPY={v} is invalid (staged|all|off), using staged"
                )),
            }
        }

        if let Some(v) = get("TCPXEMU_MODE") {
            match v.trim().to_ascii_lowercase().as_str() {
                "auto" | "" => cfg.mode = Mode::Auto,
                "host" => cfg.mode = Mode::Host,
                "unpack" => cfg.mode = Mode::Unpack,
                _ => warns.push(format!("TCPXEMU_MODE={v} is invalid (auto|host|unpack), using auto")),
            }
        }

        if let Some(v) = get("TCPXEMU_THREADS") {
            match v.trim().to_ascii_lowercase().as_str() {
                "auto" | "" => cfg.threads = Threads::Auto,
                "per-socket" | "per_socket" => cfg.threads = Threads::PerSocket,
                "shared" => cfg.threads = Threads::Shared,
                _ => warns.push(format!(
                    "TCPXEMU_THREADS={v} is invalid (auto|per-socket|shared), using auto"
                )),
            }
        }
        cfg.shared_threads = ranged(
            &get,
            "TCPXEMU_SHARED_THREADS",
            1..=64,
            DEFAULT_SHARED_THREADS,
            &mut warns,
        );
        cfg.thread_sockets = ranged(
            &get,
            "TCPXEMU_THREAD_SOCKETS",
            0..=1_000_000,
            DEFAULT_THREAD_SOCKETS,
            &mut warns,
        );

        cfg.unpack_max_run = ranged(
            &get,
            "TCPXEMU_UNPACK_MAX_RUN",
            1..=1024,
            DEFAULT_UNPACK_MAX_RUN,
            &mut warns,
        );

        cfg.bounce_pool_mb = ranged(
            &get,
            "TCPXEMU_BOUNCE_POOL_MB",
            64..=4095,
            DEFAULT_BOUNCE_POOL_MB,
            &mut warns,
        );

        if let Some(v) = get("TCPXEMU_UNPACK_SEED").filter(|v| !v.trim().is_empty()) {
            match v.trim().parse::<u64>() {
                Ok(n) => cfg.unpack_seed = Some(n),
                Err(_) => warns.push(format!("TCPXEMU_UNPACK_SEED={v} is invalid, using a random seed")),
            }
        }

        if let Some(v) = get("TCPXEMU_FAULT").filter(|v| !v.trim().is_empty()) {
            match FaultKind::parse(&v) {
                None => warns.push(format!(
                    "TCPXEMU_FAULT={v} is invalid (stall|close|corrupt|slow|short|short-lie|stale|drop), no fault armed"
                )),
                Some(kind) => {
                    let after = match get("TCPXEMU_FAULT_AFTER") {
                        None => 0,
                        Some(a) => a.trim().parse::<u64>().unwrap_or_else(|_| {
                            warns.push(format!("TCPXEMU_FAULT_AFTER={a} is invalid, using 0"));
                            0
                        }),
                    };
                    let my_rank = get("OMPI_COMM_WORLD_RANK").or_else(|| get("PMI_RANK"));
                    let applies = match get("TCPXEMU_FAULT_RANK") {
                        None => true,
                        Some(r) => my_rank.is_some_and(|m| m.trim() == r.trim()),
                    };
                    if applies {
                        cfg.fault = Some(Fault { kind, after });
                    }
                }
            }
        }
        (cfg, warns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let (cfg, warns) = parse(&[]);
        assert_eq!(cfg, Config::default());
        assert!(warns.is_empty());
    }

    #[test]
    fn sockets_are_clamped_with_a_warning() {
        let (cfg, warns) = parse(&[("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_SOCKET_NTHREADS", "4")]);
        assert_eq!(cfg.nsocks, 8);
        assert_eq!(warns.len(), 1);
        let (cfg, warns) = parse(&[("NCCL_NSOCKS_PERTHREAD", "-2")]);
        assert_eq!(cfg.nsocks, 1);
        assert_eq!(warns.len(), 1);
        let (cfg, _) = parse(&[("NCCL_NSOCKS_PERTHREAD", "2"), ("NCCL_SOCKET_NTHREADS", "2")]);
        assert_eq!(cfg.nsocks, 4);
    }

    #[test]
    fn chunk_size_zero_is_default_when_lenient() {
        let (cfg, warns) = parse(&[("NCCL_DYNAMIC_CHUNK_SIZE", "0"), ("TCPXEMU_STRICT", "0")]);
        assert_eq!((cfg.chunk_size, cfg.strict), (DEFAULT_CHUNK_SIZE, false));
        assert_eq!(warns.len(), 1);
        // Strict: kept as found, for init to refuse (contract #13).
        let (cfg, warns) = parse(&[("NCCL_DYNAMIC_CHUNK_SIZE", "0")]);
        assert_eq!(
            (cfg.strict, cfg.chunk_size_raw.as_deref(), warns.len()),
            (true, Some("0"), 0)
        );
        let (cfg, _) = parse(&[("NCCL_DYNAMIC_CHUNK_SIZE", "65536")]);
        assert_eq!(cfg.chunk_size, 65536);
    }

    #[test]
    fn fault_respects_rank() {
        let (cfg, _) = parse(&[("TCPXEMU_FAULT", "corrupt"), ("TCPXEMU_FAULT_AFTER", "3")]);
        assert_eq!(
            cfg.fault,
            Some(Fault {
                kind: FaultKind::Corrupt,
                after: 3
            })
        );
        let (cfg, _) = parse(&[
            ("TCPXEMU_FAULT", "close"),
            ("TCPXEMU_FAULT_RANK", "1"),
            ("OMPI_COMM_WORLD_RANK", "0"),
        ]);
        assert_eq!(cfg.fault, None);
        let (cfg, _) = parse(&[
            ("TCPXEMU_FAULT", "stall"),
            ("TCPXEMU_FAULT_RANK", "1"),
            ("PMI_RANK", "1"),
        ]);
        assert_eq!(cfg.fault.map(|f| f.kind), Some(FaultKind::Stall));
    }

    #[test]
    fn mode_and_unpack_knobs() {
        assert_eq!(parse(&[]).0.mode, Mode::Auto);
        assert_eq!(parse(&[("TCPXEMU_MODE", "HOST")]).0.mode, Mode::Host);
        assert_eq!(parse(&[("TCPXEMU_MODE", "unpack")]).0.mode, Mode::Unpack);
        let (cfg, warns) = parse(&[("TCPXEMU_MODE", "gpu")]);
        assert_eq!((cfg.mode, warns.len()), (Mode::Auto, 1));
        let (cfg, warns) = parse(&[("TCPXEMU_UNPACK_MAX_RUN", "4"), ("TCPXEMU_UNPACK_SEED", "42")]);
        assert_eq!((cfg.unpack_max_run, cfg.unpack_seed, warns.len()), (4, Some(42), 0));
        let (cfg, warns) = parse(&[("TCPXEMU_UNPACK_MAX_RUN", "0")]);
        assert_eq!((cfg.unpack_max_run, warns.len()), (DEFAULT_UNPACK_MAX_RUN, 1));
        assert_eq!(parse(&[("TCPXEMU_BOUNCE_POOL_MB", "512")]).0.bounce_pool_mb, 512);
        let (cfg, warns) = parse(&[("TCPXEMU_BOUNCE_POOL_MB", "4096")]);
        assert_eq!((cfg.bounce_pool_mb, warns.len()), (DEFAULT_BOUNCE_POOL_MB, 1));
    }

    #[test]
    fn thread_knobs() {
        let (cfg, warns) = parse(&[]);
        assert_eq!(
            (cfg.threads, cfg.shared_threads, cfg.thread_sockets, warns.len()),
            (Threads::Auto, 4, 64, 0)
        );
        let (cfg, warns) = parse(&[
            ("TCPXEMU_THREADS", "Per-Socket"),
            ("TCPXEMU_SHARED_THREADS", "64"),
            ("TCPXEMU_THREAD_SOCKETS", "0"),
        ]);
        assert_eq!(
            (cfg.threads, cfg.shared_threads, cfg.thread_sockets, warns.len()),
            (Threads::PerSocket, 64, 0, 0)
        );
        assert_eq!(parse(&[("TCPXEMU_THREADS", "shared")]).0.threads, Threads::Shared);
        let (cfg, warns) = parse(&[
            ("TCPXEMU_THREADS", "pool"),
            ("TCPXEMU_SHARED_THREADS", "0"),
            ("TCPXEMU_THREAD_SOCKETS", "-1"),
        ]);
        assert_eq!(
            (cfg.threads, cfg.shared_threads, cfg.thread_sockets),
            (Threads::Auto, 4, 64)
        );
        assert_eq!(warns.len(), 3, "{warns:?}");
        assert!(warns[0].contains("(auto|per-socket|shared)"), "{warns:?}");
        assert!(warns[1].contains("(1..=64)"), "{warns:?}");
    }

    #[test]
    fn zerocopy_policy() {
        assert_eq!(parse(&[]).0.zerocopy, ZeroCopy::Staged);
        assert_eq!(parse(&[("TCPXEMU_ZEROCOPY", "ALL")]).0.zerocopy, ZeroCopy::All);
        assert_eq!(parse(&[("TCPXEMU_ZEROCOPY", "0")]).0.zerocopy, ZeroCopy::Off);
        let (cfg, warns) = parse(&[("TCPXEMU_ZEROCOPY", "maybe")]);
        assert_eq!((cfg.zerocopy, warns.len()), (ZeroCopy::Staged, 1));
        assert!(
            warns[0].starts_with("TCPXEMU_ZEROCOPY=maybe is invalid (staged|all|off)"),
            "{warns:?}"
        );
    }

    #[test]
    fn strict_and_setup_knobs() {
        let (cfg, _) = parse(&[]);
        assert!(cfg.strict && cfg.chunk_size_raw.is_none());
        let (cfg, warns) = parse(&[
            ("TCPXEMU_CONNECT_MS", "100"),
            ("TCPXEMU_FLOW_STEERING_MS", "50"),
            ("TCPXEMU_MTU", "1460"),
            ("TCPXEMU_HOST_DEVICE_TYPE", "UNPACK"),
            ("TCPXEMU_STRICT", "no"),
        ]);
        assert!(warns.is_empty(), "{warns:?}");
        assert_eq!(
            (
                cfg.connect_ms,
                cfg.flow_steering_ms,
                cfg.mtu,
                cfg.host_as_unpack,
                cfg.strict
            ),
            (100, 50, Some(1460), true, false)
        );
        let (cfg, warns) = parse(&[("TCPXEMU_STRICT", "maybe"), ("TCPXEMU_MTU", "9")]);
        assert_eq!((cfg.strict, cfg.mtu, warns.len()), (true, None, 2));
    }

    #[test]
    fn ifnames_list() {
        let (cfg, _) = parse(&[("TCPXEMU_IFNAMES", "eth0, lo,")]);
        assert_eq!(cfg.ifnames, vec!["eth0", "lo"]);
    }
}
