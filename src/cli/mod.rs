//! Command-line interface.
//!
//! Flags that mean the same thing as in nccl-tests keep nccl-tests' letters and long names
//! (`-b -e -f -i -n -w -c -a -T -g`), so a user can carry a command line over. Everything
//! else is a long option specific to tcpx-perf. Only flag-level checks live here
//! ([`Cli::validate`]); checks that need the job shape (endpoint counts, plugin limits) are
//! done once MPI and the plugin are up.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use serde::Serialize;

use nccl_net::abi::NCCL_NET_MAX_REQUESTS;
use tcpx_units::{format_size, parse_size, TimeReduction};

use crate::engine::backoff::PollMode;
use crate::placement::resources::PlanShape;
use crate::placement::{CpuBind, NetDevSpec};

/// `--pattern` and `--dir` parse straight into the plan's types (one definition, no
/// conversion); `Dir` is the plan's `Direction`.
pub use crate::plan::{Direction as Dir, Pattern};

/// Pattern definitions and formulas, shown at the end of `--help`.
const PATTERNS_HELP: &str = "\
PATTERNS (n = endpoints; an endpoint is one GPU worker, -g per rank; GB = 10^9 bytes;
size = the -b..-e size; time = per-iteration time reduced over ranks with -a):

  sendrecv  Endpoint e sends size bytes to e+1 and receives size bytes from e-1 (mod n).
            algbw = size / time; busbw = algbw.
  pairs     Endpoint e exchanges size bytes with e+n/2 (n must be even). With --dir uni only
            the lower half sends (the upper half only receives).
            algbw = size / time; busbw = algbw.
  ring      The traffic of a ring all-reduce without the arithmetic: 2(n-1) steps, each
            moving one size/n block to the next endpoint, pipelined in --chunk pieces (each
            step forwards the block received in the previous step).
            algbw = size / time; busbw = algbw * 2(n-1)/n.
  fullmesh  All-to-all: each endpoint sends size/n bytes to every endpoint; the block to
            itself is a local copy.
            algbw = size / time; busbw = algbw * (n-1)/n.

SCOPE:
  With --scope inter-node, same-node pairs are dropped (pairs, fullmesh), or the ring and
  sendrecv order interleaves nodes so that every hop crosses nodes. size, algbw and busbw keep
  the definitions above, so fullmesh compares with nccl-tests' alltoall on the same nodes (where
  NCCL moves same-node blocks over NVLink beside the network); results.csv's netbw counts the
  network alone: netbw = network bytes sent per sending endpoint / time (= busbw with scope all).
  --scope auto is inter-node when the job spans several nodes, else all.

SIZES:
  Sizes take binary suffixes K, M, G (1024-based), fractions allowed: 512K, 1.5M, 4G, 100.

PLUGIN:
  No --plugin: tcpx-emu as TCPX presents itself (only ncclNetPlugin_v7), built with the project,
  next to this binary; --plugin tcpxemu loads its build with every table (v7..v12). --plugin takes
  a path, or a name resolved as NCCL does (X, then libnccl-net-X.so). --abi N forces
  ncclNetPlugin_vN.

ENVIRONMENT:
  NCCL_TESTS_MIN_BW         fail (exit 7) when the average busbw is below 90% of this many GB/s,
                            as nccl-tests; the footer says OK or FAILED (-J: average_bus_bandwidth)
  NCCL_DYNAMIC_CHUNK_SIZE   TCPX's receive chunk; set to GKE's value for the built-in tcpx-emu
                            when unset (a note in the header says so)
  NCCL_DMABUF_ENABLE        0 keeps GPU memory off DMA-BUF registration, as NCCL
  NCCL_HOSTID               the node identity (else hostname and boot id), as NCCL
  NCCL_GPUDIRECTTCPX_*, NCCL_TCPX_*, NCCL_NSOCKS_PERTHREAD, NCCL_SOCKET_NTHREADS,
  NCCL_MIN_ZCOPY_SIZE       TCPX's settings: compared across nodes by the preflight;
                            _TX_BINDINGS/_RX_BINDINGS also shape --cpu-bind auto
  NCCL_*, TCPXEMU_*, UCCL_*, CUDA_VISIBLE_DEVICES, OMPI_COMM_WORLD_SIZE,
  OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_JOB_ID, SLURM_STEP_ID, SLURM_JOB_NODELIST,
  SLURM_JOB_NUM_NODES, SLURM_NTASKS, SLURM_JOB_PARTITION, SLURM_CLUSTER_NAME
                            recorded in summary.json (an allow-list: nothing else is recorded);
                            --baseline nccl sets NCCL_NET_PLUGIN, NCCL_NET and the P2P/SHM/NVLS
                            switches for NCCL (settings replaced are listed in the header)
  OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID
                            this process's rank before MPI starts (who prints usage errors)
  TCPXEMU_THREADS, TCPXEMU_SHARED_THREADS, TCPXEMU_THREAD_SOCKETS, TCPXEMU_BOUNCE_POOL_MB
                            tcpx-emu's helper threads (per-socket, shared, auto) and bounce
                            pool, as the resource preflight and --plan count them
  TCPX_PERF_SYSFS_ROOT      read sysfs from this directory instead of /sys (tests, dry runs)
  TCPX_PERF_GPU_PCI         the GPUs' PCI bus ids, comma-separated in CUDA order, where CUDA
                            cannot say (placement without a GPU)
  TCPX_GPU_NVRTC, CUDA_HOME, CUDA_PATH
                            where libnvrtc is found for the GPU kernels
  TCPX_PERF_TRACE           set: rank 0 prints `trace 0 SECONDS EVENT` on stdout, in order
                            with its header and rows, at its milestones (seconds since its
                            process started; its memory after the plans, the first connect and
                            each size); `all`: every other rank's too, on stderr

EXIT STATUS:
  0 every size measured, every byte checked right (with -c 0: measured but unchecked, the footer
  says N/A (not checked) and summary.json's status is unchecked); 1 error (impossible plan, plugin
  error, bytes moved != bytes planned, an error finding of preflight without --force); 2 wrong
  data (#wrong > 0); 3 timeout (-T); 5 a node is bad (the footer's node verdicts, summary.json's
  node_verdicts; the results are complete); 7 average busbw below NCCL_TESTS_MIN_BW (nccl-tests' status
  for a failed check); 64 usage error (a flag or value tcpx-perf does not accept; one line from
  rank 0); 130/143 SIGINT/SIGTERM on a rank (summary.json: status interrupted; mpirun, itself
  signalled, exits 1). --plan: 0 the shape fits this machine's limits, 1 it crosses one, 64 a
  bad shape.";

/// tcpx-perf: point-to-point benchmarks for NCCL net plugins, launched with mpirun.
#[derive(Parser, Debug, Clone, Serialize)]
// -V is nccl-tests' (-D's CTA count), refused as such (nccl_tests.rs); the version is --version.
#[command(name = "tcpx-perf", version, about, after_long_help = PATTERNS_HELP, disable_version_flag = true)]
pub struct Cli {
    /// Smallest message size (binary K/M/G suffixes, e.g. 1M)
    #[arg(short = 'b', long = "minbytes", default_value = "1M", value_parser = parse_size)]
    pub minbytes: u64,

    /// Largest message size (binary K/M/G suffixes, e.g. 64M)
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub maxbytes: u64,

    /// Multiplicative step between sizes; 1 switches to the additive step -i
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub stepfactor: u64,

    /// Additive step between sizes, used when -f is 1
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = parse_size)]
    pub stepbytes: u64,

    /// Timed iterations per size
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,

    /// Untimed warmup iterations, run before every size (nccl-tests: once before the sweep; see --warmup-once)
    #[arg(
        short = 'w',
        long = "warmup_iters",
        visible_alias = "warmup-iters",
        default_value_t = 5
    )]
    pub warmup_iters: usize,

    /// Data check of every timed iteration: 1 on, 0 off (#wrong then shows N/A)
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u32,

    /// How the per-rank time is reduced before computing bandwidth: 0 rank0, 1 avg, 2 min, 3 max
    #[arg(short = 'a', long = "average", default_value = "1", value_parser = parse_reduction)]
    #[serde(serialize_with = "serialize_reduction")]
    pub average: TimeReduction,

    /// Deadline in seconds for every phase (connect, barriers, each iteration); 0 turns it off
    ///
    /// A barrier not met, or an iteration without a completion, for this long ends the run
    /// (exit 3); rank 0 then waits up to min(-T, 10 s) for the other ranks' accounts, names the
    /// ranks that did not arrive or answer, and writes summary.json as "timeout". On by default
    /// (nccl-tests: off) so that a stuck plugin or peer fails the run with a message instead of
    /// hanging the job; 0 gives nccl-tests' default: no deadline at all.
    #[arg(short = 'T', long = "timeout", default_value_t = 300)]
    pub timeout: u64,

    /// Endpoints (GPU workers) per rank
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub ngpus: usize,

    /// Traffic pattern (definitions and formulas at the end of --help)
    #[arg(long, value_enum, default_value_t = Pattern::Sendrecv)]
    pub pattern: Pattern,

    /// Which endpoint pairs carry traffic: all, inter-node only, or auto
    ///
    /// auto is inter-node when the job spans several nodes, else all. With inter-node,
    /// same-node pairs are dropped (pairs, fullmesh) or the ring/sendrecv order interleaves
    /// nodes so every hop crosses nodes, and busbw counts network bytes only.
    #[arg(long, value_enum, default_value_t = Scope::Auto)]
    pub scope: Scope,

    /// Direction for --pattern pairs: uni (lower half sends) or bi (both send)
    #[arg(long, value_enum, default_value_t = Dir::Bi)]
    pub dir: Dir,

    /// Buffer memory: host, cuda, or auto (cuda when the plugin and a GPU allow it)
    #[arg(long, value_enum, default_value_t = Mem::Auto)]
    pub mem: Mem,

    /// Ranks per node, overriding hostname-based node detection
    ///
    /// Lets one host stand in for several nodes (e.g. 4 ranks on one host with
    /// --ranks-per-node 2 is treated as 2 nodes).
    #[arg(long = "ranks-per-node")]
    pub ranks_per_node: Option<usize>,

    /// Bound on the peers an endpoint talks to at once (fullmesh; the peers are served in shifted rounds)
    ///
    /// auto: 8 where an endpoint has more peers (many flows into one receiver at once make TCP
    /// incast: retransmission timeouts); all: every peer at once, as nccl-tests' alltoall; N: at
    /// most N.
    #[arg(long = "max-peers", default_value = "auto", value_parser = values::parse_max_peers)]
    pub max_peers: MaxPeers,

    /// Which comms are open while data moves
    ///
    /// all: every comm of the job is connected before the first byte and held to the end (NCCL's
    /// alltoall footprint); rounds: only the comms of the --max-peers round in flight, connected
    /// before the round's warm-up and closed after it (a size's time is the sum of its rounds').
    #[arg(long, value_enum, default_value_t = ConnectMode::All)]
    pub connect: ConnectMode,

    /// With --connect rounds: the peers an endpoint has comms with at once
    ///
    /// One connect opens as many consecutive --max-peers rounds as this holds (at least one), so
    /// that its fixed cost (closing the last comms, the handle exchange, each iteration's barrier)
    /// is paid once for their bytes; the rounds inside it run in turn as with --connect all.
    #[arg(long = "connect-peers", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub connect_peers: u64,

    /// Size of one send/recv request (binary K/M/G suffixes)
    #[arg(long, default_value = "512K", value_parser = parse_size)]
    pub chunk: u64,

    /// Largest single memory registration; the buffer is registered in segments of this size
    ///
    /// Default: what the plugin's ABI can express (1G for v7/v8, whose regMr takes an int size;
    /// unlimited from v9). Every request lies inside one segment.
    #[arg(long = "max-reg", value_parser = parse_size)]
    pub max_reg: Option<u64>,

    /// Communicators (connections) per peer
    ///
    /// Default 2: NCCL 2.28 drives tcpx-emu with 2 comms per peer and direction (2 ring channels
    /// for all-reduce, 2 p2p channels per peer for send/recv and alltoall), measured in
    /// docs/runs/h100x2-20261125T1742Z-issue22.
    #[arg(long, default_value_t = crate::plan::DEFAULT_CHANNELS)]
    pub channels: usize,

    /// Requests outstanding per communicator (1..=32; also bounded by the plugin)
    #[arg(long, default_value_t = 8)]
    pub window: usize,

    /// Net plugin: a path to a .so or a name (libnccl-net-NAME.so); default: the bundled tcpx-emu (v7 only, as TCPX)
    #[arg(long)]
    pub plugin: Option<String>,

    /// Force one plugin ABI version (7..=12) instead of the newest the plugin exports
    #[arg(long, value_parser = clap::value_parser!(u32).range(7..=12))]
    pub abi: Option<u32>,

    /// Plugin device per GPU: one index or name for every GPU, or one per GPU index on the node
    ///
    /// E.g. `--net-dev 1`, `--net-dev eth2`, `--net-dev 0,0,1,1,2,2,3,3`. Default: the device
    /// closest to the GPU by PCIe topology (PIX < PXB < PHB < SYS, as NCCL), GPUs that tie spread
    /// evenly over the devices at their distance; where PCI paths are unknown (tcpx-emu on lo),
    /// GPU i of n on the node uses device i * devices / n, with a note in the header.
    #[arg(long = "net-dev", value_parser = parse_net_dev)]
    pub net_dev: Option<NetDevSpec>,

    /// With --channels > 1: spread each endpoint's channels over the devices as close to its GPU
    /// as its own (round robin, starting from its own)
    #[arg(long = "spread-channels")]
    pub spread_channels: bool,

    /// CPUs each endpoint's thread (and the threads it starts) runs on: auto, none, or a cpulist
    ///
    /// auto: the GPU's local CPUs from sysfs (the NIC's where the GPU has none), less the CPUs of
    /// TCPX's helper threads in NCCL_GPUDIRECTTCPX_TX_BINDINGS / _RX_BINDINGS; unpinned where
    /// sysfs says nothing. A cpulist applies to every endpoint; `LIST;LIST;...` gives one per GPU
    /// index on the node (e.g. `0-7;52-59`). The binding is in the header and summary.json.
    #[arg(long = "cpu-bind", default_value = "auto", value_parser = parse_cpu_bind)]
    pub cpu_bind: CpuBind,

    /// How each endpoint's progress loop waits when a pass over its comms found nothing to do
    ///
    /// adaptive: test back to back for 20 us after progress, then sleep, each pause twice the
    /// last and at most 10 ms; while requests wait to be posted, at most a quarter of the work the
    /// plugin still holds; once all are posted, at most 1/64 of the iteration so far (the clock
    /// stops at most 1.6% late). spin: test continuously, yielding every 64 empty passes (one
    /// core per endpoint, taken from the plugin's helper threads).
    #[arg(long, value_enum, default_value_t = PollMode::Adaptive)]
    pub poll: PollMode,

    /// Most connection-setup threads per endpoint (default: 64 for TCPX and tcpx-emu, 1 for other plugins)
    ///
    /// Setup starts with one thread polling every connect and accept; another is added whenever
    /// all of them have been blocked inside a plugin call for 50 ms, so plugins whose calls block
    /// still set up all comms at once. More than one needs a plugin that takes calls on distinct
    /// comms from several threads (TCPX and tcpx-emu do).
    #[arg(long = "setup-threads")]
    pub setup_threads: Option<usize>,

    /// Most connects under way at once per endpoint: auto, or a count
    ///
    /// A connect's first call starts the plugin's work (TCPX and tcpx-emu: a thread until its
    /// sockets are up); the others wait their turn. auto: each endpoint of the job on this kernel
    /// gets an even share of half of kernel.pid_max, at least 16 (every connect at once where
    /// that fits, as at 128 ranks on one host).
    #[arg(long = "connects-in-flight", default_value = "auto", value_parser = values::parse_connects_in_flight)]
    pub connects_in_flight: ConnectsInFlight,

    /// Stop before moving data: MPI, plugin, placement, CPU bindings and preflight checks on
    /// every node, then a per-node table and one line per finding; exit 0 if no error
    #[arg(long = "dry-run")]
    pub dry_run: bool,

    /// Run even though preflight found errors (ranks with different TCPX settings, a NIC whose
    /// link is down, ...); recorded in the header and summary.json. Without it such a run exits
    /// 1 before any data moves
    #[arg(long)]
    pub force: bool,

    /// Plan a job of NODESxGPUSxNICS (e.g. 64x8x4) on this machine, without MPI or the plugin's init
    ///
    /// One rank per GPU (-g 1; -g and --ranks-per-node change that), the usual flags for the
    /// pattern, scope, channels, -e, --mem and --plugin (the default tcpx-emu; tcpx plans TCPX;
    /// another is opened and asked its name: GPUDirectTCPX plans TCPX, tcpx-emu tcpx-emu, any
    /// other name or a plugin that cannot be opened is planned as unknown, a note says). Prints what each process and node needs (comms, files,
    /// threads, ports, memory) and which of this machine's limits it would cross: exit 0 when
    /// it fits, 1 when it crosses one.
    #[arg(long, value_name = "NODESxGPUSxNICS", value_parser = parse_plan_shape)]
    pub plan: Option<PlanShape>,

    /// With --plan: also write the plan (needs, limits, verdicts) as JSON to FILE
    #[arg(long = "plan-json", value_name = "FILE")]
    pub plan_json: Option<PathBuf>,

    /// With --plan: rehearse the job's bookkeeping here, without MPI or sockets
    ///
    /// Builds rank 0's plans and schedules for the shape, makes every rank's halves of the link
    /// matrix from synthetic times (one NIC slowed to a quarter), and runs rank 0's work of every
    /// size over them: the matrix, pairs.csv, the files after each size, links.svg, a synthetic
    /// probe and the node verdicts. Prints each phase's seconds and the process's peak memory
    /// (in --plan-json under `simulation`); the files go to --out, else a temporary directory.
    /// Exit 0 when the verdicts name the slowed NIC, 1 when they do not
    #[arg(long)]
    pub simulate: bool,

    /// Result directory; default: results/<UTC timestamp>-<pattern>
    #[arg(long, conflicts_with = "no_out")]
    pub out: Option<PathBuf>,

    /// Write no result files (stdout only)
    #[arg(long = "no-out")]
    pub no_out: bool,

    /// Progress bar: auto (only when stderr is a terminal), always, never
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,

    /// Plugin log level passed to the plugin's logger
    #[arg(long = "plugin-log", value_enum, default_value_t = PluginLog::Warn)]
    pub plugin_log: PluginLog,

    /// More of the plugin's log: -v at least info, -vv trace (raises --plugin-log, never lowers it)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Also write the run as nccl-tests 2.19 writes -J FILE (JSON version 3), for nccl-tests' tools
    ///
    /// Rank 0 creates FILE, never overwriting: if it exists, FILE.0, FILE.1, ... as nccl-tests.
    /// tcpx-perf's one measurement per size fills out_of_place and out_of_place_per_iter
    /// (times_us: each iteration's slowest rank, as nccl-tests -I); in_place is null.
    #[arg(short = 'J', long = "output_file", visible_alias = "output-file")]
    pub output_file: Option<PathBuf>,

    /// Write the healthy nodes of a multi-node run as an Open MPI hostfile to PATH
    ///
    /// `HOST slots=N` per healthy node, N its ranks in this job (docs/drain.md). Written whole
    /// at the end of the run; a list an earlier run wrote at PATH is removed before the run
    /// measures, so a run that judges no node leaves none. Anything else at PATH (another file,
    /// a device, a link, another output of the run) is refused, left as it is; PATH's directory
    /// must exist (docs/files.md).
    #[arg(long = "healthy-hostfile", value_name = "PATH")]
    pub healthy_hostfile: Option<PathBuf>,

    /// Write the bad nodes of a multi-node run to PATH, one a line: the node, a space, the reason
    ///
    /// For `scontrol update nodename=... state=drain reason=...`, `kubectl cordon`/`taint`
    /// (docs/drain.md). Empty when no node is bad; written and removed as --healthy-hostfile.
    #[arg(long = "drain-list", value_name = "PATH")]
    pub drain_list: Option<PathBuf>,

    /// A NIC side whose flows ran below this share of the median side is suspect (node verdicts)
    ///
    /// Measured on the rig: no side of 41 healthy runs stayed below 0.56 (docs/drain.md#thresholds).
    #[arg(long = "suspect-share", value_name = "SHARE", default_value_t = crate::verdict::DEFAULT_SUSPECT_SHARE)]
    pub suspect_share: f64,

    /// A NIC side below this share of the median side, its partners fast with everyone else,
    /// makes its node bad (exit 5)
    #[arg(long = "bad-share", value_name = "SHARE", default_value_t = crate::verdict::DEFAULT_BAD_SHARE)]
    pub bad_share: f64,

    /// Rounds of node pairs after the sweep that judge the nodes (each node with a new partner
    /// per round, the largest size one way then the other; 0: none, the sweep's flows judge)
    ///
    /// In a fullmesh the flows wait on each other and one slow NIC slows its partners too; in
    /// a round of pairs every NIC carries the same load alone (docs/drain.md#why-a-probe).
    #[arg(long = "probe-rounds", value_name = "N", default_value_t = crate::verdict::probe::DEFAULT_ROUNDS, value_parser = clap::value_parser!(u8).range(0..=64))]
    pub probe_rounds: u8,

    /// Node pairs of a probe round that run at once, the others after them (0: all at once)
    ///
    /// For nodes that share one host's cores (launch/cluster.sh's rig), where every pair at once
    /// can make the probe CPU-bound instead of network-bound.
    #[arg(long = "probe-pairs", value_name = "N", default_value_t = 0)]
    pub probe_pairs: usize,

    /// Warm up as nccl-tests does: -w untimed iterations of every size once, before the first timed
    /// iteration, and none between sizes
    #[arg(long = "warmup-once")]
    pub warmup_once: bool,

    /// Which rank's time each timed iteration gets in t_min t_max t_p99 cv% t_med and samples.csv:
    /// reduced (with -a, the default) or max (the slowest rank, as nccl-tests -I 1)
    #[arg(long = "iter-time", value_enum, default_value_t = IterTime::Reduced)]
    pub iter_time: IterTime,

    /// How the timed iterations run: per-iteration (each after a barrier of every rank, timed
    /// alone) or back-to-back (nccl-tests' timing: one barrier, the iterations back to back,
    /// time = total / iterations; -c checks the last iteration's bytes)
    #[arg(long = "timing", value_enum, default_value_t = crate::plan::Timing::PerIteration)]
    pub timing: crate::plan::Timing,

    /// Print the man page (roff) generated from these flags, then exit
    #[arg(long = "print-man", hide = true)]
    #[serde(skip)]
    pub print_man: bool,

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), then exit
    #[arg(long = "completions", value_name = "SHELL", hide = true)]
    #[serde(skip)]
    pub completions: Option<clap_complete::Shell>,

    /// Measure NCCL itself beside tcpx-perf, size by size, in the same job
    ///
    /// nccl: after tcpx-perf measures a size, the same ranks run NCCL's equivalent operation
    /// (sendrecv/pairs: grouped ncclSend/ncclRecv over the same pairs; ring: ncclAllReduce;
    /// fullmesh: alltoall as grouped send/recv) on the same GPUs through the same plugin file
    /// (NCCL_NET_PLUGIN; P2P, SHM, NVLS off). Both timings (tcpx-perf's barrier per iteration,
    /// nccl-tests' CUDA events around a batch) and the ratio go into the table, results.csv and
    /// summary.json. Needs one GPU per endpoint and libnccl.so.2 (see --nccl-lib).
    #[arg(long, value_enum)]
    pub baseline: Option<BaselineKind>,

    /// libnccl.so.2 for --baseline nccl (default: the dynamic loader's search for libnccl.so.2)
    #[arg(long = "nccl-lib")]
    pub nccl_lib: Option<PathBuf>,

    /// Print version
    #[arg(long = "version", action = clap::ArgAction::Version)]
    #[serde(skip)]
    pub version: Option<bool>,
}

impl Cli {
    /// The message sizes of the sweep, in order: from `-b` up to `-e` inclusive, multiplying
    /// by `-f` when it is greater than 1, else adding `-i` (as nccl-tests' size loop).
    ///
    /// Stops early instead of overflowing or looping forever on degenerate input (a zero
    /// step); [`Cli::validate`] rejects those inputs with a message first.
    pub fn sizes(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut size = self.minbytes;
        while size <= self.maxbytes {
            out.push(size);
            let next = if self.stepfactor > 1 {
                size.checked_mul(self.stepfactor)
            } else {
                size.checked_add(self.stepbytes)
            };
            match next {
                Some(n) if n > size => size = n,
                _ => break,
            }
        }
        out
    }

    /// Whether the data check is on (`-c` other than 0).
    pub fn check_enabled(&self) -> bool {
        self.check != 0
    }

    /// Whether to draw a progress bar, given whether the output is a terminal.
    pub fn progress_enabled(&self, is_terminal: bool) -> bool {
        match self.progress {
            Progress::Auto => is_terminal,
            Progress::Always => true,
            Progress::Never => false,
        }
    }

    /// Every option as a JSON object, for `summary.json`'s `config`.
    pub fn config_json(&self) -> serde_json::Value {
        // Serializing plain data (numbers, strings, enums, paths) cannot fail except for a
        // non-UTF-8 path; fall back to a lossy rendering rather than losing the config.
        serde_json::to_value(self).unwrap_or_else(|_| serde_json::Value::String(format!("{self:?}")))
    }

    /// Compares the command lines of every rank (each without the program name, in rank order):
    /// `None` when they mean the same options, else one line naming the first option that differs,
    /// each distinct value and the ranks that gave it. Compared by meaning, not by text (`-n 5` and
    /// `--iters 5` agree).
    pub fn disagreement(argvs: &[Vec<String>]) -> Option<String> {
        let parsed: Vec<serde_json::Value> = argvs
            .iter()
            .map(|a| {
                let full = std::iter::once("tcpx-perf".to_string()).chain(a.iter().cloned());
                Cli::try_parse_from(full)
                    .map_or_else(|e| serde_json::Value::String(e.kind().to_string()), |c| c.config_json())
            })
            .collect();
        let first = parsed.first()?;
        let keys: Vec<String> = match first {
            serde_json::Value::Object(m) => m.keys().cloned().collect(),
            _ => vec![String::new()],
        };
        for key in keys {
            let value_of = |v: &serde_json::Value| if key.is_empty() { v.clone() } else { v[&key].clone() };
            let reference = value_of(first);
            if parsed.iter().all(|v| value_of(v) == reference) {
                continue;
            }
            let mut groups: Vec<(serde_json::Value, Vec<usize>)> = Vec::new();
            for (rank, v) in parsed.iter().enumerate() {
                let value = value_of(v);
                match groups.iter_mut().find(|(g, _)| *g == value) {
                    Some((_, ranks)) => ranks.push(rank),
                    None => groups.push((value, vec![rank])),
                }
            }
            let flag = Cli::command()
                .get_arguments()
                .find(|a| a.get_id().as_str() == key)
                .and_then(|a| a.get_long().map(|l| format!("--{l}")))
                .unwrap_or_else(|| format!("--{}", key.replace('_', "-")));
            let values: Vec<String> = groups
                .iter()
                .map(|(value, ranks)| {
                    let shown = match value {
                        serde_json::Value::Null => "(unset)".to_string(),
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
                    format!(
                        "{shown} on rank{} {}",
                        if ranks.len() > 1 { "s" } else { "" },
                        ranks.join(",")
                    )
                })
                .collect();
            return Some(format!(
                "ranks disagree on {flag}: {}; launch every rank with the same flags",
                values.join("; ")
            ));
        }
        None
    }

    /// Checks that need only the flags. Each error is one line that names the fix.
    /// Checks that depend on the job shape (endpoint counts, even n for pairs, plugin
    /// limits) are done by the caller once MPI and the plugin are up.
    pub fn validate(&self) -> Result<(), String> {
        crate::verdict::Thresholds::new(self.suspect_share, self.bad_share)?;
        if self.minbytes > self.maxbytes {
            return Err(format!(
                "-b {} is larger than -e {}: make the minimum size (-b) at most the maximum (-e)",
                format_size(self.minbytes),
                format_size(self.maxbytes)
            ));
        }
        if self.stepfactor < 1 {
            return Err("-f 0 is not a step factor: use -f 2 (doubling) or -f 1 with -i STEP".into());
        }
        if self.stepfactor > 1 && self.minbytes == 0 {
            return Err("-b 0 never grows with a step factor: use -b 1 or larger, or -f 1 with -i STEP".into());
        }
        if self.stepfactor == 1 && self.stepbytes == 0 && self.minbytes != self.maxbytes {
            return Err("-i 0 never advances the sweep: give -i a size above 0, or use -f 2".into());
        }
        if self.iters < 1 {
            return Err("-n 0 measures nothing: use -n 1 or more timed iterations".into());
        }
        if self.ngpus < 1 {
            return Err("-g 0 has no endpoints: use -g 1 or more endpoints per rank".into());
        }
        if self.chunk == 0 {
            return Err("--chunk 0 is not a request size: use e.g. --chunk 512K".into());
        }
        if self.max_reg.is_some_and(|m| m < 4096) {
            return Err("--max-reg below 4K cannot hold a page: use --max-reg 4K or more, or drop it".into());
        }
        // NCCL's own bound; the plugin's (TCPX's 16) is checked once the plugin is open.
        if !(1..=NCCL_NET_MAX_REQUESTS).contains(&self.window) {
            return Err(format!(
                "--window {} is out of range: use 1 to {NCCL_NET_MAX_REQUESTS} requests outstanding per communicator",
                self.window
            ));
        }
        if !(1..=64).contains(&self.channels) {
            return Err(format!(
                "--channels {} is out of range: use 1 to 64 communicators per peer",
                self.channels
            ));
        }
        if self.ranks_per_node == Some(0) {
            return Err("--ranks-per-node 0 is impossible: use 1 or more, or drop the flag".into());
        }
        if self.setup_threads == Some(0) {
            return Err("--setup-threads 0 cannot set anything up: use 1 or more, or drop the flag".into());
        }
        if self.dir == Dir::Uni && self.pattern != Pattern::Pairs {
            return Err(format!(
                "--dir uni applies only to --pattern pairs: drop --dir or use --pattern pairs (got {})",
                self.pattern
            ));
        }
        if self.simulate && self.plan.is_none() {
            return Err("--simulate only applies with --plan: add --plan NODESxGPUSxNICS or drop --simulate".into());
        }
        if self.plan_json.is_some() && self.plan.is_none() {
            return Err("--plan-json only applies with --plan: add --plan NODESxGPUSxNICS or drop --plan-json".into());
        }
        if self.nccl_lib.is_some() && self.baseline.is_none() {
            return Err("--nccl-lib only applies with --baseline nccl: add --baseline nccl or drop --nccl-lib".into());
        }
        Ok(())
    }
}

pub mod docs;
pub mod nccl_tests;
mod values;

/// Parses `-a` (clap wants a function; the grammar is `TimeReduction`'s).
fn parse_reduction(s: &str) -> Result<TimeReduction, String> {
    s.parse()
}

/// `-a` in the flag record, by name as before (`avg`).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's serialize_with passes a reference
fn serialize_reduction<S: serde::Serializer>(how: &TimeReduction, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(how.as_str())
}
pub use values::*;
use values::{parse_cpu_bind, parse_net_dev, parse_plan_shape};

#[cfg(test)]
mod tests;
