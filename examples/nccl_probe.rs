//! One process, one GPU: NCCL through tcpx-perf's baseline code, for hosts with a single GPU
//! (NCCL refuses two ranks of one communicator on one GPU, so `--baseline nccl` itself needs
//! two). It exercises what a one-rank communicator can: loading NCCL, the environment that
//! points NCCL at the plugin and the proof in NCCL's log, `ncclGetUniqueId`,
//! `ncclCommInitRank` in a group, grouped `ncclSend`/`ncclRecv` to itself, `ncclAllReduce`,
//! both timings (CUDA events around a batch; a barrier per iteration), the data check,
//! `ncclCommDestroy`. NCCL moves a one-rank communicator's bytes inside the GPU: the figures
//! measure NCCL's local copy, not the plugin.
//!
//!     cargo build --release --example nccl_probe
//!     target/release/examples/nccl_probe --plugin target/release/libnccl_net_tcpxemu_v7.so \
//!         --nccl-lib /path/to/libnccl.so.2 -b 1M -e 64M -n 10 -w 2

use clap::Parser;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcpx_perf::baseline::{self, NcclBaseline};
use tcpx_perf::cli::Cli;
use tcpx_perf::collectives::Collectives;
use tcpx_perf::plan::{Direction, Fill, Flow, Holder, Iterations, Pattern, Plan, Scope, Totals};
use tcpx_perf::topology::Topology;

/// The launcher of a one-process job: every collective is the identity.
struct Solo;

impl Collectives for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) {}
    fn or_bytes(&self, _: &mut [u8]) {}
    fn sum_u64(&self, _: &mut [u64]) {}
    fn sum_f64(&self, _: &mut [f64]) {}
    fn gather_f64(&self, local: &[f64]) -> Vec<f64> {
        local.to_vec()
    }
    fn gather_f64_to_root(&self, local: &[f64]) -> Option<Vec<Vec<f64>>> {
        Some(vec![local.to_vec()])
    }
    fn exchange(&self, _: &[(usize, Vec<u8>)], _: &[(usize, usize)]) -> Vec<Vec<u8>> {
        Vec::new()
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// A one-endpoint plan: the endpoint sends `size` bytes to itself (send half, receive half).
fn self_plan(pattern: Pattern, size: u64) -> Plan {
    Plan {
        pattern,
        scope: Scope::All,
        dir: Direction::Bi,
        size,
        buffer_len: vec![2 * size],
        fills: vec![vec![Fill {
            off: 0,
            len: size,
            origin_off: 0,
        }]],
        flows: vec![Flow {
            src: 0,
            dst: 0,
            src_off: 0,
            dst_off: size,
            len: size,
            origin: 0,
            origin_off: 0,
            forwards: false,
            round: 0,
        }],
        requested: size,
        holder: Holder::Job,
        // The flow is a copy to itself: nothing crosses a network.
        totals: Totals {
            rounds: 1,
            ..Totals::default()
        },
    }
}

fn main() {
    if let Err(e) = probe() {
        eprintln!("nccl_probe: error: {e}");
        std::process::exit(1);
    }
}

fn probe() -> Result<(), String> {
    let args = std::iter::once("tcpx-perf".to_string())
        .chain(["--baseline".into(), "nccl".into()])
        .chain(std::env::args().skip(1));
    let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    // As tcpx-perf does for the built-in tcpx-emu: TCPX moves no data without a chunk size, and
    // tcpx-emu refuses to start without one (GKE's value). Before any thread reads the
    // environment.
    if std::env::var_os(tcpx_perf::contracts::DYNAMIC_CHUNK_ENV).is_none() {
        std::env::set_var(
            tcpx_perf::contracts::DYNAMIC_CHUNK_ENV,
            tcpx_perf::contracts::DYNAMIC_CHUNK_DEFAULT,
        );
    }
    let path = cli
        .plugin
        .clone()
        .ok_or("give --plugin PATH (the net plugin NCCL must load)")?;
    let plugin = nccl_net::Plugin::open(
        &nccl_net::PluginSource::Path(path.into()),
        &nccl_net::OpenOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let props = plugin.properties(0).map_err(|e| e.to_string())?;
    let topo = Topology::with_ranks_per_node(1, 1, 1, vec!["localhost".into()]);
    let settings = baseline::BaselineSettings {
        nccl_lib: cli.nccl_lib.clone(),
    };
    let iterations = Iterations {
        warmup: cli.warmup_iters,
        iters: cli.iters,
        check: cli.check_enabled(),
        average: cli.average,
        iteration_reduction: cli.average,
        timing: cli.timing,
    };
    let prep = baseline::prepare(Some(&settings), &plugin, &props, &topo, 0)?.ok_or("no baseline prepared")?;
    println!(
        "# plugin {} ({}, ABI v{}) opened by tcpx-perf's loader first, as in a run",
        plugin.path().display(),
        plugin.name(),
        plugin.abi()
    );
    let patterns = [Pattern::Sendrecv, Pattern::Ring, Pattern::Fullmesh];
    let plans: Vec<Arc<Plan>> = patterns
        .iter()
        .flat_map(|&p| cli.sizes().into_iter().map(move |s| Arc::new(self_plan(p, s))))
        .collect();
    let mut nccl = NcclBaseline::init(prep, &Solo, &plans, Duration::from_secs(cli.timeout))?;
    match nccl.verify_plugin() {
        Ok(()) => println!("# plugin check: PASS (NCCL's log names the plugin as loaded and used)"),
        Err(e) => println!("# plugin check: FAIL: {e}"),
    }
    print!("{}", nccl.header_lines());
    println!(
        "# {:>9} {:>12} {:>10} {:>8} {:>12} {:>8} {:>7}",
        "pattern", "size", "time(us)", "algbw", "batch(us)", "algbw", "#wrong"
    );
    for plan in &plans {
        let f = nccl.measure(&iterations, &Solo, plan, 0.0, Instant::now())?;
        println!(
            "  {:>9} {:>12} {:>10.1} {:>8.2} {:>12.1} {:>8.2} {:>7}",
            plan.pattern.to_string(),
            plan.size,
            f.time_us,
            f.algbw_gbps,
            f.batch_time_us,
            f.batch_algbw_gbps,
            f.wrong.map_or("N/A".into(), |w| w.to_string())
        );
    }
    let info = nccl.finish()?;
    println!(
        "# ncclCommDestroy done; {} blocks recorded; NCCL log: {}",
        info.blocks.len(),
        info.log_file
    );
    println!("# NCCL settings: {:?}", info.env);
    Ok(())
}
